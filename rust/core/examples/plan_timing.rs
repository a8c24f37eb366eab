//! Time the planner's pieces on a synthetic workload (a development aid, not a benchmark).
use seqbalance_core::planner::{lower_bound, Problem};
use std::time::Instant;

fn main() {
    let n = 1 << 17;
    let mut state = 12345u64;
    let tokens: Vec<u64> = (0..n)
        .map(|_| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let u = ((state >> 11) as f64 / (1u64 << 53) as f64).max(1e-12);
            let v = {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                (state >> 11) as f64 / (1u64 << 53) as f64
            };
            let z = (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos();
            ((7.0 + z).exp() as u64 + 1).min(32768)
        })
        .collect();
    let costs: Vec<u64> = tokens.iter().map(|&s| 24576 * s + s * s).collect();
    let best = |f: &dyn Fn() -> usize| {
        let mut best = f64::MAX;
        let mut out = 0;
        for _ in 0..7 {
            let t = Instant::now();
            out = f();
            best = best.min(t.elapsed().as_secs_f64() * 1e3);
        }
        (out, best)
    };
    println!(
        "sort {:?} ms",
        best(&|| {
            let mut s = tokens.clone();
            s.sort_unstable();
            s[0] as usize
        })
    );
    println!("bound {:?} ms", best(&|| lower_bound(&tokens, 32768)));
    let problem = Problem { tokens: &tokens, costs: &costs, cap: 32768, multiple: 1 };
    println!("own plan {:?} ms", best(&|| problem.own_plan().0));
}
