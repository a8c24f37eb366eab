//! Every input-sized allocation of the core is fallible (reliability.md, "Memory").
//!
//! A global allocator here fails the N-th allocation (or reallocation) of at least [`LARGE`]
//! bytes made by the test's own thread, for N = 1, 2, ... until a call completes without
//! reaching it. Each call must then return its answer or an out-of-memory error: an infallible
//! allocation (`vec!`, `collect`, `push` past capacity, `to_vec`) would abort the whole test
//! binary instead. This is the test the sort's `vec![0u32; 1 << 16]` histogram failed (an abort
//! under `RLIMIT_AS`, issue 23).
//!
//! The count is per thread (the core starts none), so the calls are split over several
//! `#[test]`s that libtest runs side by side, each reported as it passes; each call is rerun
//! once per large allocation it makes, so the longest test takes about a minute, and it says on
//! stderr which call it has finished, past the test harness's capture.
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::io::Write;
use std::time::Instant;

use seqbalance_core::error::CoreError;
use seqbalance_core::interrupt::Interrupt;
use seqbalance_core::packing::{pack, packing_constrained, Algorithm, Constraints, Footprint};
use seqbalance_core::planner::{
    plan_step, EqualCounts, Items, Order, PlanOptions, Problem, Shape, ShapeRule, StepError, StepOptions,
    Sync,
};
use seqbalance_core::refine::{refine, refine_floats, refine_if_moved, Mode};
use seqbalance_core::request::{self, Counts, Output, Request, Weights};
use seqbalance_core::stream::{self, SavedPack, StreamConfig, StreamPacker, StreamState};
use seqbalance_core::{float, greedy, sort};

/// The largest differencing method into 8 partitions, unrefined, under ``counts``.
fn request(counts: Counts, output: Output) -> Request {
    Request { k: 8, counts, algorithm: request::Algorithm::Ldm, refine: request::Refine::No, output }
}

/// The number of values every input holds.
const ITEMS: usize = 100_000;

/// Allocations from this size on count: input-sized buffers at the sizes used below ([`ITEMS`]
/// values), not the few small fixed-size ones a call makes.
const LARGE: usize = 1 << 16;

/// The shaped planner's share of the items, and of [`LARGE`] (its threshold): a quarter. Every
/// input-sized buffer stays above the threshold, and its calls reach the same large
/// allocations as on all the items (73 and 99 of them, against 74 and 100, one growth step of
/// a vector less), in a sixth of the time (they took 157 of the test's 243 s).
const SHAPED_SHARE: usize = 4;
const NEVER: usize = usize::MAX;

thread_local! {
    // Per thread, so tests running side by side (and libtest's own threads) do not count each
    // other's allocations; constant-initialised cells without a destructor, which the allocator
    // may read at any time without allocating.
    static LARGE_SEEN: Cell<usize> = const { Cell::new(0) };
    // What counts as large on this thread: [`LARGE`], less for a test on a share of the items.
    static THRESHOLD: Cell<usize> = const { Cell::new(LARGE) };
    static FAIL_AT: Cell<usize> = const { Cell::new(NEVER) };
}

struct FailingAllocator;

fn fails(size: usize) -> bool {
    size >= THRESHOLD.try_with(Cell::get).unwrap_or(LARGE)
        && LARGE_SEEN
            .try_with(|seen| {
                seen.set(seen.get() + 1);
                seen.get() == FAIL_AT.with(Cell::get)
            })
            .unwrap_or(false)
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
    let start = Instant::now();
    for at in 1.. {
        let input = prepare();
        LARGE_SEEN.with(|seen| seen.set(0));
        FAIL_AT.with(|fail_at| fail_at.set(at));
        let outcome = call(input);
        FAIL_AT.with(|fail_at| fail_at.set(NEVER));
        let reached = LARGE_SEEN.with(Cell::get) >= at;
        if !reached {
            assert!(outcome.is_ok(), "{name}: {outcome:?} without an injected failure");
            assert!(at > 1, "{name}: made no large allocation; the test checks nothing");
            progress(&format!("{name}: {} large allocations, each failed once", at - 1), start);
            return;
        }
        assert!(acceptable(&outcome), "{name}, allocation {at} failing: {outcome:?}");
    }
}

/// One line on stderr, written past libtest's capture (which only takes `print!`/`eprint!`), so
/// a minute-long run shows that it moves; a closed stderr is not an error.
fn progress(line: &str, start: Instant) {
    let text = format!("alloc_failure: {line} ({:.1} s)\n", start.elapsed().as_secs_f64());
    let _ = std::io::stderr().write_all(text.as_bytes());
}

fn plain<T, E: std::fmt::Debug>(result: Result<T, E>) -> Result<(), String> {
    result.map(|_| ()).map_err(|error| format!("{error:?}"))
}

/// The inputs every test draws from: [`ITEMS`] values from one seeded generator, so that the
/// input-sized buffers are far above [`LARGE`] (and the counting sort, the 32-bit and the wide
/// radix sorts each get their input).
struct Inputs {
    n: usize,
    short: Vec<u64>,
    long: Vec<u64>,
    wide: Vec<u64>,
    floats: Vec<f64>,
    /// The planners' tokens (and costs): `short`, each at least 1.
    tokens: Vec<u64>,
}

fn inputs() -> Inputs {
    let n = ITEMS;
    let mut state = 7u64;
    let mut next = || {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        state >> 33
    };
    let short: Vec<u64> = (0..n).map(|_| next() % 30_000).collect(); // counting sort
    let long: Vec<u64> = (0..n).map(|_| next() % (1 << 30)).collect(); // 32-bit radix sort
    let wide: Vec<u64> = (0..n).map(|_| next() << 20).collect(); // the wide radix sort
    let floats: Vec<f64> = short.iter().map(|&v| v as f64 * 0.37).collect();
    let tokens: Vec<u64> = short.iter().map(|&t| t + 1).collect();
    Inputs { n, short, long, wide, floats, tokens }
}

fn none() {}

/// The sorts, every count rule and answer form of a request, the greedy: on each input.
#[test]
fn sorts_requests_and_the_greedy_survive() {
    let Inputs { short, long, wide, .. } = inputs();
    let stop = Interrupt::NEVER;
    for (label, values) in [("short", &short), ("long", &long), ("wide", &wide)] {
        let copy = || values.clone();
        survives_every_failure(&format!("sort_items({label})"), &none, &|()| {
            plain(sort::sort_items(values, &stop))
        });
        // Every count rule and answer form the binding asks for, each through the owned paths.
        for counts in [Counts::Free, Counts::Equal] {
            for output in [Output::MergeOrder, Output::Sorted, Output::Ids] {
                survives_every_failure(&format!("request({label}, {counts:?}, {output:?})"), &copy, &|v| {
                    plain(request(counts, output).run(Weights::Exact(v), &stop))
                });
            }
        }
        survives_every_failure(&format!("greedy({label})"), &none, &|()| {
            plain(greedy::greedy_partition_interruptible(values, 8, false, &stop))
        });
    }
}

#[test]
fn float_requests_the_float_greedy_and_nearly_survive() {
    let Inputs { n, short, floats, .. } = inputs();
    let stop = Interrupt::NEVER;
    for counts in [Counts::Free, Counts::Equal] {
        for output in [Output::MergeOrder, Output::Ids] {
            survives_every_failure(
                &format!("float request({counts:?}, {output:?})"),
                &|| floats.clone(),
                &|v| plain(request(counts, output).run(Weights::Double(v), &stop)),
            );
        }
    }
    survives_every_failure("float greedy", &none, &|()| {
        plain(float::greedy_partition_interruptible(&floats, 8, true, &stop))
    });
    survives_every_failure("nearly", &|| short[..n - 3].to_vec(), &|v| {
        plain(request(Counts::Nearly, Output::Ids).run(Weights::Exact(v), &stop))
    });
}

/// Bin packing, plain and under the shape constraints.
#[test]
fn the_packers_survive() {
    let Inputs { short, long, .. } = inputs();
    let stop = Interrupt::NEVER;
    for algorithm in
        [Algorithm::NextFit, Algorithm::FirstFit, Algorithm::FirstFitDecreasing, Algorithm::BestFitDecreasing]
    {
        survives_every_failure(&format!("pack({algorithm:?})"), &none, &|()| {
            plain(pack(&short, 40_000, algorithm))
        });
    }
    // Best fit with its ordered set of packs (a capacity far above the item count, and just
    // above the longest item, so that many packs stay open).
    survives_every_failure("pack(bfd, ordered set)", &none, &|()| {
        plain(pack(&long, 1 << 30, Algorithm::BestFitDecreasing))
    });
    // The shape constraints: a count per pack, the padded footprint, keys that never share a pack.
    let keys: Vec<u32> = short.iter().map(|&v| (v % 7) as u32).collect();
    let shapes = [
        ("max_sequences", Constraints { max_sequences: Some(3), footprint: Footprint::Sum, keys: None }),
        ("padded", Constraints { max_sequences: None, footprint: Footprint::Padded, keys: None }),
        ("keys", Constraints { max_sequences: Some(5), footprint: Footprint::Padded, keys: Some(&keys) }),
    ];
    for algorithm in
        [Algorithm::NextFit, Algorithm::FirstFit, Algorithm::FirstFitDecreasing, Algorithm::BestFitDecreasing]
    {
        for (label, constraints) in &shapes {
            survives_every_failure(&format!("packing_constrained({algorithm:?}, {label})"), &none, &|()| {
                plain(
                    packing_constrained(&short, 40_000, algorithm, constraints, &stop)
                        .and_then(|packing| Ok(packing.grouped(&stop)?.to_lists()?)),
                )
            });
        }
    }
}

#[test]
fn the_stream_packer_and_refinement_survive() {
    let Inputs { n, long, floats, .. } = inputs();
    let stop = Interrupt::NEVER;
    // The streaming packer with 10,000 open packs (one item each, keys apart): a packer from a
    // saved state, a batch (worked on a copy of the packer), and the state it saves then.
    let config = StreamConfig {
        capacity: 100,
        max_open: 1 << 14,
        max_sequences: None,
        footprint: stream::Footprint::Sum,
    };
    let saved = || StreamState {
        config,
        next_index: 10_000,
        packs: (0..10_000u64)
            .map(|i| SavedPack { key: i, sum: i % 50 + 1, longest: i % 50 + 1, items: vec![i] })
            .collect(),
    };
    survives_every_failure("stream", &saved, &|state| {
        let mut packer = StreamPacker::from_state(state).map_err(|error| format!("{error:?}"))?;
        plain(packer.add_many(&[60; 100], None, &stop))?;
        let state = packer.state().map_err(|error| format!("{error:?}"))?;
        plain(StreamPacker::from_state(state))
    });
    let round_robin = || -> Vec<Vec<u32>> { (0..8u32).map(|p| (p..n as u32).step_by(8).collect()).collect() };
    for equal in [false, true] {
        survives_every_failure(&format!("refine(local, {equal})"), &round_robin, &|parts| {
            plain(refine(&long, parts, equal, Mode::Local, Some(200_000)))
        });
        survives_every_failure(&format!("refine_floats(local, {equal})"), &round_robin, &|parts| {
            plain(refine_floats(&floats, parts, equal, Mode::Local, Some(200_000)))
        });
        // What `plan_dp_micro_batches(refine=True)` asks: the default effort, and None when
        // nothing moved.
        survives_every_failure(&format!("refine_if_moved({equal})"), &round_robin, &|parts| {
            plain(refine_if_moved(&long, parts, equal, &stop))
        });
    }
}

#[test]
fn the_micro_batch_planner_survives() {
    let Inputs { tokens, .. } = inputs();
    let stop = Interrupt::NEVER;
    // The micro-batch planner: its own count, and more micro-batches than that (the split).
    for minimum in [1, 60_000] {
        survives_every_failure(&format!("planner(minimum {minimum})"), &none, &|()| {
            let problem = Problem { tokens: &tokens, costs: &tokens, cap: 1 << 22, multiple: 1, shape: None };
            plain(problem.plan(minimum, &stop))
        });
    }
}

/// Under shape limits the plain plan breaks them, so the shaped search runs (first fit
/// decreasing under the limits, the lower bound, the splits), with float costs too: on a
/// [`SHAPED_SHARE`] of the tokens, for at least `minimum` micro-batches.
fn shaped_planner_survives(minimum: usize) {
    let Inputs { tokens, .. } = inputs();
    let tokens = &tokens[..ITEMS / SHAPED_SHARE];
    THRESHOLD.with(|threshold| threshold.set(LARGE / SHAPED_SHARE));
    let stop = Interrupt::NEVER;
    let ones = vec![1u64; tokens.len()];
    let keys: Vec<u32> = (0..tokens.len() as u32).map(|i| i % 3).collect();
    let rule = ShapeRule { max_sequences: 4, padded: true };
    let shape = Shape { rule, samples: &ones, longest: tokens, keys: Some(&keys) };
    let float_costs: Vec<f64> = tokens.iter().map(|&t| t as f64 * 1.5).collect();
    survives_every_failure(&format!("shaped planner(minimum {minimum})"), &none, &|()| {
        let problem = Problem { tokens, costs: &float_costs, cap: 1 << 22, multiple: 1, shape: Some(shape) };
        plain(problem.plan(minimum, &stop))
    });
}

#[test]
fn the_shaped_planner_survives_at_its_own_count() {
    shaped_planner_survives(1);
}

#[test]
fn the_shaped_planner_survives_a_split_into_more_micro_batches() {
    // 3/5 of the items, as 60,000 of 100,000 before: more than the plan's own count.
    shaped_planner_survives(ITEMS / SHAPED_SHARE * 3 / 5);
}

#[test]
fn the_step_planner_survives() {
    let Inputs { tokens, .. } = inputs();
    let stop = Interrupt::NEVER;
    // The step planner (`plan_dp_micro_batches(sync=..., pipeline_stages=...)`): today's plan,
    // then lockstep dealing and 1F1B searches over three counts, on 2 ranks of 10,000 items.
    let few = &tokens[..20_000];
    let starts: Vec<u64> = (0..few.len() as u64).collect();
    let sizes = vec![1u64; few.len()];
    let items = Items { tokens: few, costs: few, starts: &starts, sizes: &sizes, longest: None, keys: None };
    let halves: Vec<usize> = (0..few.len()).map(|i| i % 2).collect();
    let options =
        PlanOptions { n_ranks: 2, cap: 1 << 18, multiple: 1, minimum: 0, order: Order::Bubble, shape: None };
    for (sync, stages) in [(Sync::MicroBatch, 1), (Sync::Step, 4)] {
        let step = StepOptions {
            sync,
            stages,
            forward_share: 1.0 / 3.0,
            micro_batch_time: 0.0,
            max_count: Some(1 << 20),
            equal_counts: EqualCounts::Free,
            n_samples: few.len(),
        };
        // Today's count first (uncounted), so the search runs over exactly three counts.
        let today = plan_step(&items, std::slice::from_ref(&halves), &options, &step, &stop, &|_, _| {})
            .map_err(|error| format!("{error:?}"))
            .expect("a plan")
            .today_count;
        let step = StepOptions { max_count: Some(today + 2), ..step };
        survives_every_failure(&format!("plan_step({sync:?}, {stages} stages)"), &none, &|()| {
            plain(
                plan_step(&items, std::slice::from_ref(&halves), &options, &step, &stop, &|_, _| {}).map_err(
                    |error| match error {
                        StepError::Core(error) => format!("{error:?}"),
                        other => format!("refused: {other:?}"),
                    },
                ),
            )
        });
    }
}

#[test]
fn out_of_memory_is_what_acceptable_accepts() {
    // The check itself: a call that would abort is caught here, not in the binding.
    assert!(acceptable(&Err(format!("{:?}", CoreError::OutOfMemory { what: "x", bytes: 1 }))));
}
