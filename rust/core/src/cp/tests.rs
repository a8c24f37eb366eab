use super::*;
use proptest::prelude::*;

/// A problem's owned arrays: costs `a·L + b·L²`, comm `κ·L·(c − 1)/c`.
#[derive(Debug)]
pub(super) struct Owned {
    lengths: Vec<u64>,
    costs: Vec<f64>,
    comm: Vec<f64>,
    pub(super) degrees: Vec<u32>,
    world_size: u32,
    cap: u64,
}

impl Owned {
    /// What the proptests of the greedy, the search and Megatron's scheduler plan: degrees the
    /// powers of two dividing `world_size` (or the `sizes` up to it, any of them), `n`
    /// [`mostly_short`] lengths, costs `L + quadratic·L²` or, with `scrambled = Some(m)`, ones
    /// that do not follow the length (`(i · 7919) % m`, times 3 when `m` is above 13), and comm
    /// `κ·L·(c − 1)/c`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn drawn(
        world_size: u32,
        cap: u64,
        n: usize,
        seed: u64,
        quadratic: f64,
        kappa: f64,
        scrambled: Option<usize>,
        sizes: Option<std::collections::BTreeSet<u32>>,
    ) -> Owned {
        let degrees: Vec<u32> = match sizes {
            Some(sizes) => {
                let kept: Vec<u32> = sizes.into_iter().filter(|&c| c <= world_size).collect();
                if kept.is_empty() {
                    vec![world_size]
                } else {
                    kept
                }
            }
            None => (0..8).map(|p| 1u32 << p).take_while(|&c| world_size % c == 0).collect(),
        };
        let top = *degrees.last().expect("at least one degree") as u64 * cap;
        let lengths = mostly_short(seed, n, cap, top);
        let costs = lengths
            .iter()
            .enumerate()
            .map(|(i, &l)| match scrambled {
                Some(m) => ((i * 7919) % m) as f64 * if m > 13 { 3.0 } else { 1.0 },
                None => l as f64 + quadratic * (l as f64).powi(2),
            })
            .collect();
        let comm = lengths
            .iter()
            .flat_map(|&l| degrees.iter().map(move |&c| kappa * l as f64 * (c - 1) as f64 / c as f64))
            .collect();
        Owned { lengths, costs, comm, degrees, world_size, cap }
    }

    fn new(lengths: Vec<u64>, world_size: u32, cap: u64, quadratic: f64, kappa: f64) -> Owned {
        let degrees: Vec<u32> = (0..32).map(|p| 1u32 << p).take_while(|&c| world_size % c == 0).collect();
        let costs = lengths.iter().map(|&l| l as f64 + quadratic * (l as f64).powi(2)).collect();
        let comm = lengths
            .iter()
            .flat_map(|&l| degrees.iter().map(move |&c| kappa * l as f64 * (c - 1) as f64 / c as f64))
            .collect();
        Owned { lengths, costs, comm, degrees, world_size, cap }
    }

    pub(super) fn problem(&self) -> Problem<'_> {
        Problem {
            lengths: &self.lengths,
            costs: &self.costs,
            comm: &self.comm,
            degrees: &self.degrees,
            world_size: self.world_size,
            cap: self.cap,
        }
    }
}

/// Every constraint of the spec on `steps`.
fn check_steps(problem: &Problem, steps: &Steps) {
    let mut seen = vec![0u32; problem.lengths.len()];
    for step in steps {
        assert!(!step.is_empty());
        let ranks: u32 = step.iter().map(|g| problem.degrees[g.degree]).sum();
        assert!(ranks <= problem.world_size, "{ranks} ranks in a step of {}", problem.world_size);
        for group in step {
            assert!(!group.members.is_empty());
            let tokens: u64 = group.members.iter().map(|&i| problem.share(i as usize, group.degree)).sum();
            assert!(tokens <= problem.cap);
            for &i in &group.members {
                seen[i as usize] += 1;
            }
        }
    }
    assert!(seen.iter().all(|&count| count == 1));
}

fn arb_problem() -> impl Strategy<Value = Owned> {
    (
        (prop::sample::select(vec![1u32, 2, 4, 6, 8, 12, 16]), 1u64..200, 0usize..60),
        (0.0f64..0.05, 0.0f64..2.0, any::<bool>()),
        prop::option::of(prop::collection::btree_set(1u32..=16, 1..5)),
    )
        .prop_flat_map(|((world_size, cap, n), (quadratic, kappa, scrambled), sizes)| {
            let largest = world_size as u64 * cap;
            (
                prop::collection::vec(0u64..=largest, n),
                Just((world_size, cap, quadratic, kappa, scrambled, sizes)),
            )
        })
        .prop_map(|(lengths, (world_size, cap, quadratic, kappa, scrambled, sizes))| {
            let mut owned = Owned::new(lengths, world_size, cap, quadratic, kappa);
            if let Some(sizes) = sizes {
                // Any sizes up to the world (not powers of two, not dividing it).
                let kept: Vec<u32> = sizes.into_iter().filter(|&c| c <= world_size).collect();
                owned.degrees = if kept.is_empty() { vec![world_size] } else { kept };
            }
            // Clamp lengths to what the largest allowed degree holds.
            let top = *owned.degrees.last().unwrap() as u64;
            owned.lengths.iter_mut().for_each(|l| *l = (*l).min(top * cap));
            owned.comm = owned
                .lengths
                .iter()
                .flat_map(|&l| {
                    owned.degrees.iter().map(move |&c| kappa * l as f64 * (c - 1) as f64 / c as f64)
                })
                .collect();
            owned.costs = owned
                .lengths
                .iter()
                .enumerate()
                .map(|(i, &l)| {
                    // A cost that falls with the length, or one that follows it.
                    if scrambled {
                        ((i * 7919) % 61) as f64
                    } else {
                        l as f64 + quadratic * (l as f64).powi(2)
                    }
                })
                .collect();
            owned
        })
}

proptest! {
    #[test]
    fn every_plan_keeps_every_constraint_and_beats_the_floor(owned in arb_problem()) {
        let problem = owned.problem();
        let best = plan(&problem, Method::Best, &Interrupt::NEVER).unwrap();
        check_steps(&problem, &best.steps);
        prop_assert_eq!(best.time, plan_time(&problem, &best.steps));
        let bound = lower_bound(&problem).unwrap();
        prop_assert!(best.time >= bound * (1.0 - 1e-9), "{} below the bound {}", best.time, bound);
        for reading in READINGS {
            let greedy_plan = plan(&problem, Method::Greedy(reading), &Interrupt::NEVER).unwrap();
            check_steps(&problem, &greedy_plan.steps);
            prop_assert!(best.time <= greedy_plan.time);
        }
        for workload in WORKLOADS {
            let scheduled = plan(&problem, Method::Megatron(workload), &Interrupt::NEVER).unwrap();
            check_steps(&problem, &scheduled.steps);
            prop_assert!(best.time <= scheduled.time, "{} above {} ({})", best.time, scheduled.time, workload.name());
        }
        let again = plan(&problem, Method::Best, &Interrupt::NEVER).unwrap();
        prop_assert_eq!(again.steps, best.steps);
    }

    #[test]
    fn one_size_per_step_keeps_one_size_and_beats_one_fixed_degree(owned in arb_problem()) {
        let problem = owned.problem();
        let single = plan(&problem, Method::OneSizePerStep, &Interrupt::NEVER).unwrap();
        check_steps(&problem, &single.steps);
        prop_assert_eq!(single.time, plan_time(&problem, &single.steps));
        for step in &single.steps {
            prop_assert!(step.iter().all(|g| g.degree == step[0].degree));
        }
        if let Some(fixed) = fixed_degree(&problem, &Interrupt::NEVER).unwrap() {
            let j = fixed[0][0].degree;
            prop_assert!(fixed.iter().flatten().all(|g| g.degree == j));
            check_steps(&problem, &fixed);
            prop_assert!(single.time <= plan_time(&problem, &fixed));
        }
        let again = plan(&problem, Method::OneSizePerStep, &Interrupt::NEVER).unwrap();
        prop_assert_eq!(again.steps, single.steps);
    }

    #[test]
    fn the_free_plan_is_never_slower_than_its_own_one_size_per_step_plan(owned in arb_problem()) {
        let problem = owned.problem();
        let free = plan(&problem, Method::Best, &Interrupt::NEVER).unwrap();
        let single = plan(&problem, Method::OneSizePerStep, &Interrupt::NEVER).unwrap();
        prop_assert!(free.time <= single.time, "free {} above one size per step {}", free.time, single.time);
    }
}

/// How often the planner's loops ask about Ctrl-C (every 4096 steps of work, and once per step
/// or round of some loops) on `n` lognormal-like lengths with random per-sequence costs.
fn work_on_random_costs(n: usize) -> usize {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let lengths: Vec<u64> = (0..n).map(|_| 1 + (next() % 4 + 1) * (next() % 16_384) / 2).collect();
    let mut owned = Owned::new(lengths, 8, 16_384, 0.0, 0.0);
    owned.costs = (0..n).map(|_| (next() % 1_000_000) as f64 / 1e6).collect();
    let calls = std::cell::Cell::new(0usize);
    let count = || {
        calls.set(calls.get() + 1);
        false
    };
    plan(&owned.problem(), Method::Best, &Interrupt::new(&count)).unwrap();
    calls.get()
}

#[test]
fn planning_is_near_linear_for_a_cost_that_does_not_follow_the_length() {
    // Random costs once made the search visit every waiting sequence in every step: quadratic
    // (8 ranks, cap 16,384: 20k sequences 1.0 s, 40k 3.8 s, 100k 24 s). Sixteen times the
    // sequences must take about sixteen times the loops' work (the quadratic planner: 26x here,
    // its linear part, one check per step of every plan tried, diluting the 256x of its visits).
    let small = work_on_random_costs(2_000);
    let large = work_on_random_costs(32_000);
    assert!(large < 22 * small, "16x the sequences took {:.1}x the work", large as f64 / small as f64);
}

#[test]
fn a_sequence_that_fits_no_degree_is_named() {
    let owned = Owned::new(vec![3, 50, 4], 4, 10, 0.0, 0.0);
    let error = plan(&owned.problem(), Method::Best, &Interrupt::NEVER).unwrap_err();
    assert_eq!(error, CpError::Unfit { index: 1, length: 50 });
    assert!(error.to_string().contains("lengths[1] = 50"));
}

#[test]
fn bad_arrays_are_refused() {
    let mut owned = Owned::new(vec![3, 5], 4, 10, 0.0, 0.0);
    owned.degrees = vec![1, 3];
    assert!(matches!(plan(&owned.problem(), Method::Best, &Interrupt::NEVER), Err(CpError::Invalid(_))));
    let mut owned = Owned::new(vec![3, 5], 4, 10, 0.0, 0.0);
    owned.costs[1] = f64::NAN;
    assert!(matches!(plan(&owned.problem(), Method::Best, &Interrupt::NEVER), Err(CpError::Invalid(_))));
}

#[test]
fn the_greedy_opens_joins_and_closes_as_the_spec_reads() {
    // cap 10, 4 ranks: 30 needs 4 ranks (share 8), 12 needs 2, 9, 8 and 3 fit one rank.
    let owned = Owned::new(vec![12, 30, 9, 8, 3], 4, 10, 0.0, 0.0);
    let problem = owned.problem();
    let names = |steps: &Steps| -> Vec<Vec<(u32, Vec<u32>)>> {
        steps
            .iter()
            .map(|s| s.iter().map(|g| (problem.degrees[g.degree], g.members.clone())).collect())
            .collect()
    };
    let closes = greedy(&problem, READINGS[0], &Interrupt::NEVER).unwrap();
    // 30 opens a group of 4; 12 cannot join (no group of 2) and closes step 1.
    assert_eq!(
        names(&closes),
        vec![vec![(4, vec![1])], vec![(2, vec![0]), (1, vec![2]), (1, vec![3])], vec![(1, vec![4])]]
    );
    let waits = greedy(&problem, READINGS[2], &Interrupt::NEVER).unwrap();
    assert_eq!(
        names(&waits),
        vec![vec![(4, vec![1])], vec![(2, vec![0]), (1, vec![2]), (1, vec![3])], vec![(1, vec![4])]]
    );
    // 3 could join neither 9 (12 > 10) nor 8 (11 > 10): a third step.
    let widens = greedy(&problem, READINGS[3], &Interrupt::NEVER).unwrap();
    assert_eq!(names(&widens)[2], vec![(4, vec![4])]);
}

#[test]
fn an_interrupt_stops_the_plan() {
    let owned = Owned::new((0..20_000).map(|i| i % 37 + 1).collect(), 8, 64, 0.0, 0.1);
    let stop = || true;
    for method in [
        Method::Best,
        Method::OneSizePerStep,
        Method::Megatron(Workload::Shipped),
        Method::Megatron(Workload::Judged),
    ] {
        let error = plan(&owned.problem(), method, &Interrupt::new(&stop)).unwrap_err();
        assert_eq!(error, CpError::Core(CoreError::Interrupted), "{method:?}");
    }
}

#[test]
fn layout_gives_aligned_rank_blocks() {
    let owned = Owned::new(vec![1, 2, 15, 3, 40, 7], 8, 10, 0.0, 0.5);
    let problem = owned.problem();
    let best = plan(&problem, Method::Best, &Interrupt::NEVER).unwrap();
    let laid = layout(&problem, &best.steps).unwrap();
    let mut start = 0;
    for &[_, c, rank, end] in &laid.groups {
        assert_eq!(rank % c, 0);
        assert!(rank + c <= 8);
        assert!(end as usize > start);
        start = end as usize;
    }
    assert_eq!(start, 6);
}

#[test]
fn a_cap_near_u64_max_never_lets_a_rank_overflow() {
    // Three sequences of 2**63 - 1 tokens: two fill a cap of 2**64 - 1 but a third would wrap
    // the running total of u64 tokens past zero.
    let owned = Owned::new(vec![(1u64 << 63) - 1; 3], 1, u64::MAX, 0.0, 0.0);
    let problem = owned.problem();
    let mut plans = vec![plan(&problem, Method::Best, &Interrupt::NEVER).unwrap()];
    for reading in READINGS {
        plans.push(plan(&problem, Method::Greedy(reading), &Interrupt::NEVER).unwrap());
    }
    for planned in plans {
        for group in planned.steps.iter().flatten() {
            let tokens: u128 = group.members.iter().map(|&i| problem.lengths[i as usize] as u128).sum();
            assert!(tokens <= u64::MAX as u128, "{} tokens on one rank ({})", tokens, planned.method);
        }
    }
}

#[test]
fn the_greedy_asks_about_ctrl_c_while_it_widens() {
    // Three sequences never reach a check of the placement loop; widening is checked on its own.
    let owned = Owned::new(vec![1, 2, 3], 8, 10, 0.0, 0.1);
    let stop = || true;
    let interrupt = Interrupt::new(&stop);
    assert!(greedy(&owned.problem(), READINGS[0], &interrupt).is_ok());
    let error = greedy(&owned.problem(), READINGS[1], &interrupt).unwrap_err();
    assert_eq!(error, CpError::Core(CoreError::Interrupted));
}

/// `n` lengths from a xorshift stream seeded by `seed`: mostly up to `cap` (many groups of one
/// degree, full ones among them), one in five up to `top` (what the widest degree holds).
pub(super) fn mostly_short(seed: u64, n: usize, cap: u64, top: u64) -> Vec<u64> {
    let mut state = seed | 1;
    (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            if state % 5 == 0 {
                state % (top + 1)
            } else {
                state % (cap + 1)
            }
        })
        .collect()
}
