//! Time the core without Python:
//! `cargo run --release -p seqbalance-core --example profile_core -- N K MODE [REPEATS] [WEIGHTS]`.
//!
//! MODE `equal` or `free` (`karmarkar_karp`), or `equal-ids` or `free-ids` (`partition_ids_owned`,
//! what the binding's `partition_ids` runs). WEIGHTS picks the values (all from a fixed linear
//! congruential sequence, so runs repeat without a rand crate):
//! * `ints` (the default): lengths in 1..32768, as `u64`;
//! * `int-costs`: the `f64` costs below rounded to integers, as `u64` (the exact path on the float
//!   rows' distribution, to tell what the float sums cost from what the distribution does);
//! * `f64-ints`, `f32-ints`: the same lengths as floats (they take the exact path);
//! * `f64`, `f32`: lognormal costs around 1e12 (sigma 1), as FLOPs estimates are: the float path;
//! * `f64-huge`: ones and one value of n * 1024; `f64-equal`: every value 0.1 (adversarial merges).
//!
//! Float weights also print the sort of their bit patterns on its own (`float::sort_bits`), so the run's phases can be
//! told apart: sort, then the merges with their item-by-item sums, then the answer. Under
//! `valgrind --tool=callgrind` it gives repeatable instruction counts per function. Times are the
//! thread's CPU time where Linux reports it, the best of REPEATS calls.
use std::time::{Duration, Instant};

use seqbalance_core::float::{self, Float};
use seqbalance_core::interrupt::Interrupt;

/// The CPU time of this thread where Linux tells it (`/proc/thread-self/schedstat`), else the
/// wall clock: a shared machine's other work then does not count.
#[derive(Clone, Copy)]
enum Clock {
    Cpu(u64),
    Wall(Instant),
}

impl Clock {
    fn now() -> Clock {
        let cpu = std::fs::read_to_string("/proc/thread-self/schedstat")
            .ok()
            .and_then(|text| text.split_whitespace().next().and_then(|ns| ns.parse().ok()));
        cpu.map_or_else(|| Clock::Wall(Instant::now()), Clock::Cpu)
    }

    fn elapsed(self) -> Duration {
        match (self, Clock::now()) {
            (Clock::Cpu(start), Clock::Cpu(end)) => Duration::from_nanos(end - start),
            (Clock::Wall(start), _) => start.elapsed(),
            (Clock::Cpu(_), Clock::Wall(_)) => unreachable!("the clock was read before"),
        }
    }
}

/// The fixed sequence: 64-bit states of a linear congruential generator.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0
    }

    /// Uniform in (0, 1).
    fn unit(&mut self) -> f64 {
        ((self.next() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    /// Lognormal with median `median` and sigma 1 (Box–Muller).
    fn lognormal(&mut self, median: f64) -> f64 {
        let (u, v) = (self.unit(), self.unit());
        let normal = (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos();
        median * normal.exp()
    }
}

fn lengths(n: usize) -> Vec<u64> {
    let mut lcg = Lcg(0x9E37_79B9_7F4A_7C15);
    (0..n).map(|_| 1 + (lcg.next() >> 33) % 32767).collect()
}

fn doubles(n: usize, weights: &str) -> Vec<f64> {
    match weights {
        "f64-ints" | "f32-ints" => lengths(n).into_iter().map(|v| v as f64).collect(),
        "f64-huge" => {
            let mut values = vec![1.0; n];
            values[0] = n as f64 * 1024.0;
            values
        }
        "f64-equal" => vec![0.1; n],
        _ => {
            let mut lcg = Lcg(0x9E37_79B9_7F4A_7C15);
            (0..n).map(|_| lcg.lognormal(1e12)).collect()
        }
    }
}

/// One call of the partitioner in `mode`: the number of non-empty parts.
fn run_float<F: Float>(values: &[F], k: usize, equal_size: bool, ids: bool) -> usize {
    let interrupt = Interrupt::NEVER;
    if ids {
        let numbered = float::partition_ids_owned(values.to_vec(), k, equal_size, &interrupt);
        numbered.map(|ids| ids.iter().max().map_or(0, |&p| p as usize + 1)).unwrap_or(0)
    } else {
        float::karmarkar_karp(values, k, equal_size).map(|p| p.k()).unwrap_or(0)
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(1 << 20);
    let k: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(1024);
    let mode = args.get(3).map_or("free", String::as_str);
    let equal_size = mode.starts_with("equal");
    let ids = mode.ends_with("-ids");
    let repeats: usize = args.get(4).and_then(|s| s.parse().ok()).unwrap_or(1).max(1);
    let weights = args.get(5).map_or("ints", String::as_str);
    let interrupt = Interrupt::NEVER;
    // The best of the repeats: on a shared machine the others' work only ever adds time.
    let timed = |call: &mut dyn FnMut() -> usize| -> (Duration, usize) {
        let mut best = Duration::MAX;
        let mut parts = 0;
        for _ in 0..repeats {
            let started = Clock::now();
            parts = call();
            best = best.min(started.elapsed());
        }
        (best, parts)
    };
    let (sort_time, (total, parts)) = if weights == "ints" || weights == "int-costs" {
        let values = if weights == "ints" {
            lengths(n)
        } else {
            doubles(n, "f64").into_iter().map(|v| v.round() as u64).collect()
        };
        let (sort_time, _) =
            timed(&mut || seqbalance_core::sort::sorted_order(&values).expect("sortable").len());
        (
            sort_time,
            timed(&mut || {
                if ids {
                    let numbered =
                        seqbalance_core::ldm::partition_ids_owned(values.clone(), k, equal_size, &interrupt);
                    numbered.map(|ids| ids.iter().max().map_or(0, |&p| p as usize + 1)).unwrap_or(0)
                } else {
                    seqbalance_core::ldm::karmarkar_karp(&values, k, equal_size).map(|p| p.k()).unwrap_or(0)
                }
            }),
        )
    } else if weights.starts_with("f32") {
        let values: Vec<f32> = doubles(n, weights).into_iter().map(|v| v as f32).collect();
        let (sort_time, _) =
            timed(&mut || float::sort_bits(&values, &interrupt).expect("sortable").index.len());
        (sort_time, timed(&mut || run_float(&values, k, equal_size, ids)))
    } else {
        let values = doubles(n, weights);
        let (sort_time, _) =
            timed(&mut || float::sort_bits(&values, &interrupt).expect("sortable").index.len());
        (sort_time, timed(&mut || run_float(&values, k, equal_size, ids)))
    };
    println!(
        "n={n} k={k} {mode} {weights}: sort {:.2} ms, {} {:.3} ms ({:.0} ns/item), {parts} parts",
        sort_time.as_secs_f64() * 1e3,
        if ids { "partition_ids_owned" } else { "karmarkar_karp" },
        total.as_secs_f64() * 1e3,
        total.as_secs_f64() * 1e9 / n as f64,
    );
}
