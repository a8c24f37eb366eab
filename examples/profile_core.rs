//! Time the core without Python: `cargo run --release --example profile_core -- N K [equal]`.
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(1 << 20);
    let k: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(1024);
    let equal_size = args.get(3).is_some_and(|s| s == "equal");
    // A fixed linear congruential sequence: deterministic lengths in 1..32768 without a rand crate.
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let values: Vec<u64> = (0..n)
        .map(|_| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            1 + (state >> 33) % 32767
        })
        .collect();
    let started = Instant::now();
    let sorted = seqbalance::sort::sorted_order(&values);
    let sort_time = started.elapsed();
    let started = Instant::now();
    let partition = seqbalance::ldm::karmarkar_karp(&values, k, equal_size).expect("valid request");
    let total = started.elapsed();
    println!(
        "n={n} k={k} equal_size={equal_size}: sort {:.2} ms, karmarkar_karp {:.2} ms ({:.0} ns/item), {} parts, {}",
        sort_time.as_secs_f64() * 1e3,
        total.as_secs_f64() * 1e3,
        total.as_secs_f64() * 1e9 / n as f64,
        partition.k(),
        sorted.len()
    );
}
