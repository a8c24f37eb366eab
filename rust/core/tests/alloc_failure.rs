//! Every input-sized allocation of the core is fallible (reliability.md, "Memory").
//!
//! A global allocator here fails the N-th allocation (or reallocation) of at least [`LARGE`]
//! bytes, for N = 1, 2, ... until a call completes without reaching it. Each call must then
//! return its answer or an out-of-memory error: an infallible allocation (`vec!`, `collect`,
//! `push` past capacity, `to_vec`) would abort the whole test binary instead. This is the test the
//! sort's `vec![0u32; 1 << 16]` histogram failed (an abort under `RLIMIT_AS`, issue 23).
//!
//! One `#[test]` only, so that no other test of this binary allocates while the count runs.
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use seqbalance_core::error::CoreError;
use seqbalance_core::interrupt::Interrupt;
use seqbalance_core::packing::{pack, Algorithm};
use seqbalance_core::planner::Problem;
use seqbalance_core::refine::{refine, refine_floats, Mode};
use seqbalance_core::{float, greedy, ldm, nearly, sort};

/// Allocations from this size on count: input-sized buffers at the sizes used below (10^5
/// items), not the few small fixed-size ones a call makes.
const LARGE: usize = 1 << 16;
const NEVER: usize = usize::MAX;

static LARGE_SEEN: AtomicUsize = AtomicUsize::new(0);
static FAIL_AT: AtomicUsize = AtomicUsize::new(NEVER);

struct FailingAllocator;

fn fails(size: usize) -> bool {
    size >= LARGE && LARGE_SEEN.fetch_add(1, Ordering::SeqCst) + 1 == FAIL_AT.load(Ordering::SeqCst)
}

// SAFETY: every request goes to the system allocator unchanged, or fails with a null pointer,
// which the `GlobalAlloc` contract allows.
unsafe impl GlobalAlloc for FailingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if fails(layout.size()) {
            return std::ptr::null_mut();
        }
        System.alloc(layout)
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if fails(layout.size()) {
            return std::ptr::null_mut();
        }
        System.alloc_zeroed(layout)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > layout.size() && fails(new_size) {
            return std::ptr::null_mut();
        }
        System.realloc(ptr, layout, new_size)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
}

#[global_allocator]
static GLOBAL: FailingAllocator = FailingAllocator;

/// What a call may end with under an injected failure: its answer or an out-of-memory error.
fn acceptable(outcome: &Result<(), String>) -> bool {
    match outcome {
        Ok(()) => true,
        Err(error) => error.contains("OutOfMemory"),
    }
}

/// Run `call` on what `prepare` makes (uncounted: the test's own copies of the input) with its
/// N-th large allocation failing, for every N the call reaches.
fn survives_every_failure<T>(name: &str, prepare: &dyn Fn() -> T, call: &dyn Fn(T) -> Result<(), String>) {
    for at in 1.. {
        let input = prepare();
        LARGE_SEEN.store(0, Ordering::SeqCst);
        FAIL_AT.store(at, Ordering::SeqCst);
        let outcome = call(input);
        FAIL_AT.store(NEVER, Ordering::SeqCst);
        let reached = LARGE_SEEN.load(Ordering::SeqCst) >= at;
        if !reached {
            assert!(outcome.is_ok(), "{name}: {outcome:?} without an injected failure");
            assert!(at > 1, "{name}: made no large allocation; the test checks nothing");
            return;
        }
        assert!(acceptable(&outcome), "{name}, allocation {at} failing: {outcome:?}");
    }
}

fn plain<T, E: std::fmt::Debug>(result: Result<T, E>) -> Result<(), String> {
    result.map(|_| ()).map_err(|error| format!("{error:?}"))
}

#[test]
fn the_core_survives_the_failure_of_any_large_allocation() {
    let n = 100_000usize;
    let mut state = 7u64;
    let mut next = || {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        state >> 33
    };
    let short: Vec<u64> = (0..n).map(|_| next() % 30_000).collect(); // counting sort
    let long: Vec<u64> = (0..n).map(|_| next() % (1 << 30)).collect(); // 32-bit radix sort
    let wide: Vec<u64> = (0..n).map(|_| next() << 20).collect(); // the wide radix sort
    let floats: Vec<f64> = short.iter().map(|&v| v as f64 * 0.37).collect();
    let stop = Interrupt::NEVER;

    let none = || ();
    for (label, values) in [("short", &short), ("long", &long), ("wide", &wide)] {
        let copy = || values.clone();
        survives_every_failure(&format!("sort_items({label})"), &none, &|()| {
            plain(sort::sort_items(values, &stop))
        });
        for equal in [false, true] {
            survives_every_failure(&format!("partition_ids_owned({label}, {equal})"), &copy, &|v| {
                plain(ldm::partition_ids_owned(v, 8, equal, &stop))
            });
        }
        survives_every_failure(&format!("karmarkar_karp_owned({label})"), &copy, &|v| {
            plain(ldm::karmarkar_karp_owned(v, 8, true, &stop))
        });
        survives_every_failure(&format!("balanced_partitions_owned({label})"), &copy, &|v| {
            plain(ldm::balanced_partitions_owned(v, 8, false, &stop))
        });
        survives_every_failure(&format!("greedy({label})"), &none, &|()| {
            plain(greedy::greedy_partition_interruptible(values, 8, false, &stop))
        });
    }
    survives_every_failure("float karmarkar_karp_owned", &|| floats.clone(), &|v| {
        plain(float::karmarkar_karp_owned(v, 8, false, &stop))
    });
    survives_every_failure("float balanced_partitions_owned", &|| floats.clone(), &|v| {
        plain(float::balanced_partitions_owned(v, 8, true, &stop))
    });
    survives_every_failure("float greedy", &none, &|()| {
        plain(float::greedy_partition_interruptible(&floats, 8, true, &stop))
    });
    survives_every_failure("nearly", &|| short[..n - 3].to_vec(), &|v| {
        plain(nearly::with_placeholders_owned(v, 8, |values, k| {
            ldm::karmarkar_karp_owned(values, k, true, &stop)
        }))
    });
    for algorithm in
        [Algorithm::NextFit, Algorithm::FirstFit, Algorithm::FirstFitDecreasing, Algorithm::BestFitDecreasing]
    {
        survives_every_failure(&format!("pack({algorithm:?})"), &none, &|()| {
            plain(pack(&short, 40_000, algorithm))
        });
    }
    let round_robin = || -> Vec<Vec<u32>> { (0..8u32).map(|p| (p..n as u32).step_by(8).collect()).collect() };
    for equal in [false, true] {
        survives_every_failure(&format!("refine(local, {equal})"), &round_robin, &|parts| {
            plain(refine(&long, parts, equal, Mode::Local, Some(200_000)))
        });
        survives_every_failure(&format!("refine_floats(local, {equal})"), &round_robin, &|parts| {
            plain(refine_floats(&floats, parts, equal, Mode::Local, Some(200_000)))
        });
    }
    // The micro-batch planner: its own count, and more micro-batches than that (the split).
    let tokens: Vec<u64> = short.iter().map(|&t| t + 1).collect();
    for minimum in [1, 60_000] {
        survives_every_failure(&format!("planner(minimum {minimum})"), &none, &|()| {
            let problem = Problem { tokens: &tokens, costs: &tokens, cap: 1 << 22, multiple: 1 };
            plain(problem.plan(minimum, &stop))
        });
    }
    // The check itself: a call that would abort is caught here, not in the binding.
    assert!(acceptable(&Err(format!("{:?}", CoreError::OutOfMemory { what: "x", bytes: 1 }))));
}
