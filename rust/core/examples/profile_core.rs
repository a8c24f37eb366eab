//! Time the core without Python: `cargo run --release -p seqbalance-core --example profile_core -- N K MODE [REPEATS]`,
//! MODE `equal` or `free` (`karmarkar_karp`), or `equal-ids` or `free-ids` (`partition_ids_owned`, what
//! the binding's `partition_ids` runs). Under `valgrind --tool=callgrind` it gives repeatable
//! instruction counts.
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(1 << 20);
    let k: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(1024);
    let mode = args.get(3).map_or("free", String::as_str);
    let equal_size = mode.starts_with("equal");
    let ids = mode.ends_with("-ids");
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
        parts = if ids {
            let interrupt = seqbalance_core::interrupt::Interrupt::NEVER;
            let numbered =
                seqbalance_core::ldm::partition_ids_owned(values.clone(), k, equal_size, &interrupt);
            numbered.map(|ids| ids.iter().max().map_or(0, |&p| p as usize + 1)).unwrap_or(0)
        } else {
            seqbalance_core::ldm::karmarkar_karp(&values, k, equal_size).map(|p| p.k()).unwrap_or(0)
        };
    }
    let total = started.elapsed() / repeats as u32;
    println!(
        "n={n} k={k} {mode}: sort {:.2} ms, {} {:.3} ms ({:.0} ns/item), {parts} parts, {} sorted",
        sort_time.as_secs_f64() * 1e3,
        if ids { "partition_ids_owned" } else { "karmarkar_karp" },
        total.as_secs_f64() * 1e3,
        total.as_secs_f64() * 1e9 / n as f64,
        sorted.len()
    );
}
