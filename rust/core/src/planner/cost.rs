//! What the planner's balancing weighs: integer costs (summed exactly) or float costs (summed
//! in their own precision, item by item, as the planning spec's float rule says).

use crate::exact::ExactSum;

/// A cost the planner balances: `u64` (exact sums), `f64` or `f32` (left folds in their own
/// precision). Every value is non-negative and finite (the binding checks), and `-0.0` has been
/// replaced by `0.0`, so [`PlanCost::bits`] orders the values as numbers.
pub trait PlanCost: Copy + Default + PartialEq + Send + Sync + 'static {
    /// Whether the order of a sum changes nothing (integers): then a part's cost is summed in
    /// whatever order is cheapest, else in the greedy's placement order.
    const EXACT: bool;

    /// `self + other`, in the type's arithmetic (integers never overflow: the caller bounds the
    /// total).
    fn plus(self, other: Self) -> Self;

    /// An unsigned integer ordered as the values are (`a < b` exactly when `a.bits() < b.bits()`).
    fn bits(self) -> u64;

    /// The value whose [`PlanCost::bits`] is `bits`.
    fn from_bits(bits: u64) -> Self;

    /// An upper bound on the bits of any sum of the values, when one is cheap to know: the
    /// planner's heap keys then fit in a `u64`.
    fn key_bound(values: &[Self]) -> Option<u64>;

    /// The exact sum of the values (no rounding), for comparisons between plans.
    fn exact_sum(values: impl Iterator<Item = Self>) -> Exact;

    /// The value as a float64 (the step model's arithmetic).
    fn to_f64(self) -> f64;
}

/// An exact total: a `u128` for integer costs, a fixed-point sum for float costs. Totals of one
/// plan are all of one kind, so they compare as numbers.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Exact {
    Int(u128),
    Float(Box<ExactSum>),
}

impl PlanCost for u64 {
    const EXACT: bool = true;

    fn plus(self, other: Self) -> Self {
        self + other
    }
    fn bits(self) -> u64 {
        self
    }
    fn from_bits(bits: u64) -> Self {
        bits
    }
    fn key_bound(values: &[Self]) -> Option<u64> {
        values.iter().try_fold(0u64, |total, &c| total.checked_add(c))
    }
    fn exact_sum(values: impl Iterator<Item = Self>) -> Exact {
        Exact::Int(values.map(u128::from).sum())
    }
    fn to_f64(self) -> f64 {
        self as f64
    }
}

impl PlanCost for f64 {
    const EXACT: bool = false;

    fn plus(self, other: Self) -> Self {
        self + other
    }
    fn bits(self) -> u64 {
        self.to_bits()
    }
    fn from_bits(bits: u64) -> Self {
        f64::from_bits(bits)
    }
    fn key_bound(_: &[Self]) -> Option<u64> {
        None
    }
    fn exact_sum(values: impl Iterator<Item = Self>) -> Exact {
        let mut sum = ExactSum::new();
        values.for_each(|value| sum.add(value));
        Exact::Float(Box::new(sum))
    }
    fn to_f64(self) -> f64 {
        self
    }
}

impl PlanCost for f32 {
    const EXACT: bool = false;

    fn plus(self, other: Self) -> Self {
        self + other
    }
    fn bits(self) -> u64 {
        u64::from(self.to_bits())
    }
    fn from_bits(bits: u64) -> Self {
        f32::from_bits(bits as u32)
    }
    fn key_bound(_: &[Self]) -> Option<u64> {
        // f32 bit patterns of finite values stay below 2^31.
        Some(u64::from(f32::MAX.to_bits()))
    }
    fn exact_sum(values: impl Iterator<Item = Self>) -> Exact {
        f64::exact_sum(values.map(f64::from))
    }
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
}

/// The cost of a part: the sum of its members' costs; for float costs the left fold in the
/// greedy's placement order (cost descending, ties by position ascending), so a part's cost does
/// not depend on how its members are listed.
pub fn part_cost<C: PlanCost>(costs: &[C], members: &[u32]) -> C {
    if C::EXACT || members.len() < 2 {
        return members.iter().fold(C::default(), |total, &i| total.plus(costs[i as usize]));
    }
    let mut placed: Vec<(std::cmp::Reverse<u64>, u32)> =
        members.iter().map(|&i| (std::cmp::Reverse(costs[i as usize].bits()), i)).collect();
    placed.sort_unstable();
    placed.iter().fold(C::default(), |total, &(_, i)| total.plus(costs[i as usize]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_order_values_as_numbers() {
        let values = [0.0f64, 1e-310, 0.5, 1.0, 3.0, 1e300];
        assert!(values.windows(2).all(|w| w[0].bits() < w[1].bits()));
        let values = [0.0f32, 1e-40, 0.5, 2.0, 3e38];
        assert!(values.windows(2).all(|w| w[0].bits() < w[1].bits()));
        assert!(values.iter().all(|&v| f32::from_bits(v.bits() as u32) == v));
    }

    #[test]
    fn float_part_cost_folds_in_placement_order() {
        // 1e16 + 1 + 1 is 1e16 in doubles, 1 + 1 + 1e16 is 1e16 + 2.
        let costs = [1.0f64, 1e16, 1.0];
        let cost = part_cost(&costs, &[0, 1, 2]);
        assert_eq!(cost, (1e16 + 1.0) + 1.0);
        assert_eq!(part_cost(&costs, &[2, 0, 1]), cost);
    }

    #[test]
    fn exact_sums_compare_as_numbers() {
        let a = f64::exact_sum([1e16, 1.0, 1.0].into_iter());
        let b = f64::exact_sum([1e16, 1.0].into_iter());
        assert!(a > b);
        assert!(u64::exact_sum([u64::MAX, 1].into_iter()) > u64::exact_sum([u64::MAX].into_iter()));
    }
}
