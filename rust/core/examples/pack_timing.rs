//! Time the packers on a synthetic workload (a development aid, not a benchmark):
//! `cargo run --release -p seqbalance-core --example pack_timing -- [n] [cap] [repeats]`.
//! Lengths are `min(int(lognormal(7, 1)) + 16, cap)`, the issue-22 workload. Times are this
//! thread's CPU time (the machine is shared; wall time would measure the neighbours), best of
//! `repeats`. A fourth argument names the one algorithm to run (for `perf stat`).
use seqbalance_core::packing::{pack, Algorithm};

/// This thread's CPU time in seconds (Linux `clock_gettime(CLOCK_THREAD_CPUTIME_ID)`).
fn cpu_seconds() -> f64 {
    #[repr(C)]
    struct Timespec {
        seconds: i64,
        nanoseconds: i64,
    }
    extern "C" {
        fn clock_gettime(clock: i32, time: *mut Timespec) -> i32;
    }
    const CLOCK_THREAD_CPUTIME_ID: i32 = 3;
    let mut time = Timespec { seconds: 0, nanoseconds: 0 };
    // SAFETY: `time` is a valid, writable timespec for the call's duration.
    let status = unsafe { clock_gettime(CLOCK_THREAD_CPUTIME_ID, &mut time) };
    assert_eq!(status, 0, "clock_gettime failed");
    time.seconds as f64 + time.nanoseconds as f64 * 1e-9
}

fn main() {
    let arg = |i: usize, default: u64| std::env::args().nth(i).map_or(default, |a| a.parse().unwrap());
    let (n, cap, repeats) = (arg(1, 1_000_000) as usize, arg(2, 32768), arg(3, 5));
    let mut state = 12345u64;
    let mut uniform = || {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (state >> 11) as f64 / (1u64 << 53) as f64
    };
    let lengths: Vec<u64> = (0..n)
        .map(|_| {
            let (u, v) = (uniform().max(1e-12), uniform());
            let z = (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos();
            ((7.0 + z).exp() as u64 + 16).min(cap)
        })
        .collect();
    let best = |f: &dyn Fn() -> usize| {
        let (mut best, mut out) = (f64::MAX, 0);
        for _ in 0..repeats {
            let started = cpu_seconds();
            out = f();
            best = best.min((cpu_seconds() - started) * 1e3);
        }
        (out, best)
    };
    let (_, sort_ms) = best(&|| {
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_unstable_by_key(|&i| (std::cmp::Reverse(lengths[i]), i));
        order[0]
    });
    println!("n={n} cap={cap}: comparison sort of the order {sort_ms:.1} ms");
    let only = std::env::args().nth(4);
    for (name, algorithm) in [
        ("next_fit", Algorithm::NextFit),
        ("first_fit", Algorithm::FirstFit),
        ("ffd", Algorithm::FirstFitDecreasing),
        ("bfd", Algorithm::BestFitDecreasing),
    ] {
        if only.as_deref().is_some_and(|only| only != name) {
            continue;
        }
        let (packs, ms) = best(&|| pack(&lengths, cap, algorithm).expect("packable").len());
        println!("{name:>9}: {ms:7.1} ms, {packs} packs");
    }
}
