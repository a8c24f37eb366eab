//! Time the core without Python: `cargo run --release -p seqbalance-core --example profile_core -- N K [equal|free] [REPEATS]`.
//! Under `valgrind --tool=callgrind` it gives repeatable instruction counts.
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(1 << 20);
    let k: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(1024);
    let equal_size = args.get(3).is_some_and(|s| s == "equal");
    let repeats: usize = args.get(4).and_then(|s| s.parse().ok()).unwrap_or(1).max(1);
    // A fixed linear congruential sequence: deterministic lengths in 1..32768 without a rand crate.
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let values: Vec<u64> = (0..n)
        .map(|_| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            1 + (state >> 33) % 32767
        })
        .collect();
    let started = Instant::now();
    let sorted = seqbalance_core::sort::sorted_order(&values).expect("sortable");
    let sort_time = started.elapsed();
    let started = Instant::now();
    let mut parts = 0;
    for _ in 0..repeats {
        parts = seqbalance_core::ldm::karmarkar_karp(&values, k, equal_size).map(|p| p.k()).unwrap_or(0);
    }
    let total = started.elapsed() / repeats as u32;
    println!(
        "n={n} k={k} equal_size={equal_size}: sort {:.2} ms, karmarkar_karp {:.3} ms ({:.0} ns/item), {parts} parts, {} sorted",
        sort_time.as_secs_f64() * 1e3,
        total.as_secs_f64() * 1e3,
        total.as_secs_f64() * 1e9 / n as f64,
        sorted.len()
    );
}
