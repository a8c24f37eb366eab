//! Exact sums of non-negative doubles, for comparisons that must not depend on rounding: the
//! float refinement's loads and the planners' heaviest ranks under float costs.
use std::cmp::Ordering;

use crate::float::decompose;

/// An exact sum of non-negative doubles: fixed point with 2^-1074 as its unit, in 64-bit limbs
/// (2^1024 times 2^32 items needs 2130 bits).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExactSum([u64; 34]);

impl ExactSum {
    pub fn new() -> Self {
        ExactSum([0; 34])
    }

    pub fn add(&mut self, value: f64) {
        let (mantissa, exponent) = decompose(value);
        let position = (exponent + 1074) as usize;
        let (limb, shift) = (position / 64, position % 64);
        let wide = (mantissa as u128) << shift;
        let mut carry;
        (self.0[limb], carry) = self.0[limb].overflowing_add(wide as u64);
        let high = (wide >> 64) as u64 + carry as u64;
        let mut at = limb + 1;
        (self.0[at], carry) = self.0[at].overflowing_add(high);
        while carry {
            at += 1;
            (self.0[at], carry) = self.0[at].overflowing_add(1);
        }
    }
}

impl Ord for ExactSum {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.iter().rev().cmp(other.0.iter().rev())
    }
}

impl PartialOrd for ExactSum {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Default for ExactSum {
    fn default() -> Self {
        ExactSum::new()
    }
}
