//! Time the planner's pieces on a synthetic workload (a development aid, not a benchmark).
use seqbalance_core::planner::{lower_bound, Problem};
use std::time::Instant;

fn main() {
    let n: usize = std::env::args().nth(1).map_or(1 << 17, |a| a.parse().unwrap());
    let dp: usize = std::env::args().nth(2).map_or(1, |a| a.parse().unwrap());
    let cap: u64 = std::env::args().nth(3).map_or(32768, |a| a.parse().unwrap());
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
    if std::env::var("ONLY_RANKS").is_ok() {
        let starts: Vec<u64> = (0..n as u64).collect();
        let sizes = vec![1u64; n];
        let rank_of_item: Vec<usize> = (0..n).map(|i| i % dp).collect();
        let t = Instant::now();
        for _ in 0..5 {
            seqbalance_core::planner::plan_ranks(
                &tokens,
                &costs,
                &starts,
                &sizes,
                &rank_of_item,
                dp,
                cap,
                1,
                0,
                true,
            );
        }
        println!("plan_ranks x5 {} ms", t.elapsed().as_secs_f64() * 1e3);
        return;
    }
    if std::env::var("ONLY_OWN").is_ok() {
        let problem = Problem { tokens: &tokens, costs: &costs, cap, multiple: 1 };
        let t = Instant::now();
        let mut c = 0;
        for _ in 0..20 {
            c += problem.own_plan().0;
        }
        println!("own plan x20 {} ms (count {})", t.elapsed().as_secs_f64() * 1e3, c / 20);
        return;
    }
    println!(
        "sort {:?} ms",
        best(&|| {
            let mut s = tokens.clone();
            s.sort_unstable();
            s[0] as usize
        })
    );
    println!("bound {:?} ms", best(&|| lower_bound(&tokens, cap)));
    let problem = Problem { tokens: &tokens, costs: &costs, cap, multiple: 1 };
    println!("own plan {:?} ms", best(&|| problem.own_plan().0));
    let starts: Vec<u64> = (0..n as u64).collect();
    let sizes = vec![1u64; n];
    let ranks: Vec<Vec<u32>> = (0..dp).map(|r| (r as u32..n as u32).step_by(dp).collect()).collect();
    let sub: Vec<u64> = ranks[0].iter().map(|&i| tokens[i as usize]).collect();
    let subc: Vec<u64> = ranks[0].iter().map(|&i| costs[i as usize]).collect();
    let p0 = Problem { tokens: &sub, costs: &subc, cap, multiple: 1 };
    println!("rank0 own plan {:?} ms", best(&|| p0.own_plan().0));
    println!("rank0 bound {:?} ms", best(&|| lower_bound(&sub, cap)));
    println!(
        "plan_ranks {:?} ms",
        best(&|| {
            let rank_of_item: Vec<usize> = (0..n).map(|i| i % dp).collect();
            seqbalance_core::planner::plan_ranks(
                &tokens,
                &costs,
                &starts,
                &sizes,
                &rank_of_item,
                dp,
                cap,
                1,
                0,
                true,
            )
            .0
        })
    );
}
