//! `cargo bench -p seqbalance-core`: the core alone on 2^20 lengths, k = 1024, against the floor
//! every partitioner pays — sorting the same lengths (`slice::sort_unstable`, timed in the same
//! run). Plain harness (no criterion): best of a few runs, printed as times and ratios.
use std::hint::black_box;
use std::time::{Duration, Instant};

use seqbalance_core::greedy::greedy_partition;
use seqbalance_core::interrupt::Interrupt;
use seqbalance_core::ldm::{balanced_partitions, karmarkar_karp, partition_ids_owned};
use seqbalance_core::sort::sorted_order;

const N: usize = 1 << 20;
const K: usize = 1024;
const ROUNDS: usize = 5;

fn best<T>(mut call: impl FnMut() -> T) -> Duration {
    (0..ROUNDS)
        .map(|_| {
            let started = Instant::now();
            black_box(call());
            started.elapsed()
        })
        .min()
        .unwrap()
}

fn main() {
    // Uniform lengths in 1..32768 from a fixed linear congruential sequence (no rand crate).
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let lengths: Vec<u64> = (0..N)
        .map(|_| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            1 + (state >> 33) % 32767
        })
        .collect();
    let floor = best(|| {
        let mut copy = lengths.clone();
        copy.sort_unstable();
        copy
    });
    println!("n = 2^20 uniform 1..32767, k = {K}; floor: sort_unstable of a copy {floor:.2?}");
    let row = |name: &str, time: Duration| {
        println!("  {name:<38} {time:>10.2?}  {:>5.2}x the floor", time.as_secs_f64() / floor.as_secs_f64());
    };
    row("seeding sort (value, index)", best(|| sorted_order(&lengths)));
    for equal_size in [true, false] {
        let mode = if equal_size { "equal" } else { "free" };
        row(&format!("karmarkar_karp, {mode}"), best(|| karmarkar_karp(&lengths, K, equal_size)));
        row(&format!("balanced_partitions, {mode}"), best(|| balanced_partitions(&lengths, K, equal_size)));
        row(
            &format!("partition ids, {mode}"),
            // What the binding's `partition_ids` runs on integer lengths (the copy stands for its
            // conversion of the caller's array, which the core then owns).
            best(|| partition_ids_owned(lengths.clone(), K, equal_size, &Interrupt::NEVER)),
        );
    }
    row("greedy_partition, free", best(|| greedy_partition(&lengths, K, false)));
}
