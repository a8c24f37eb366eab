//! Time the planner's pieces on a synthetic workload (a development aid, not a benchmark):
//! `cargo run --release -p seqbalance-core --example plan_timing -- [n] [ranks] [cap]`.
use seqbalance_core::interrupt::Interrupt;
use seqbalance_core::planner::{lower_bound, plan_best, Items, Order, PlanOptions, Problem};
use std::time::Instant;

fn main() {
    let arg = |i: usize, default: u64| std::env::args().nth(i).map_or(default, |a| a.parse().unwrap());
    let (n, ranks, cap) = (arg(1, 1 << 17) as usize, arg(2, 1) as usize, arg(3, 32768));
    let mut state = 12345u64;
    let mut uniform = || {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (state >> 11) as f64 / (1u64 << 53) as f64
    };
    let tokens: Vec<u64> = (0..n)
        .map(|_| {
            let (u, v) = (uniform().max(1e-12), uniform());
            let z = (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos();
            ((7.0 + z).exp() as u64 + 1).min(32768)
        })
        .collect();
    let costs: Vec<u64> = tokens.iter().map(|&s| 24576 * s + s * s).collect();
    let best = |f: &dyn Fn() -> usize| {
        let (mut best, mut out) = (f64::MAX, 0);
        for _ in 0..7 {
            let t = Instant::now();
            out = f();
            best = best.min(t.elapsed().as_secs_f64() * 1e3);
        }
        (out, best)
    };
    let never = &Interrupt::NEVER;
    println!(
        "sort {:?} ms",
        best(&|| {
            let mut s = tokens.clone();
            s.sort_unstable();
            s[0] as usize
        })
    );
    println!("bound {:?} ms", best(&|| lower_bound(&tokens, cap).unwrap()));
    let problem = Problem { tokens: &tokens, costs: &costs, cap, multiple: 1, shape: None };
    println!("own plan {:?} ms", best(&|| problem.own_plan(never).unwrap().0));
    let starts: Vec<u64> = (0..n as u64).collect();
    let sizes = vec![1u64; n];
    let rank_of_item: Vec<usize> = (0..n).map(|i| i % ranks).collect();
    let candidates = [rank_of_item];
    let items =
        Items { tokens: &tokens, costs: &costs, starts: &starts, sizes: &sizes, longest: None, keys: None };
    let options =
        PlanOptions { n_ranks: ranks, cap, multiple: 1, minimum: 0, order: Order::Bubble, shape: None };
    let plan = || plan_best(&items, &candidates, &options, never);
    println!("plan over {ranks} ranks {:?} ms", best(&|| plan().unwrap().1));
}
