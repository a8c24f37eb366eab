//! What the property tests' naive models of the partition spec share.
use std::cmp::Ordering;

/// Take the first state out of the queue (step 5 of the partition spec): remove and return the
/// one that comes first by `priority` ("comes first" as `Greater`; of equals, the earliest in
/// `states`), by a linear scan, as naive as the models are on purpose.
pub fn take_first<S>(states: &mut Vec<S>, priority: impl Fn(&S, &S) -> Ordering) -> S {
    let mut best = 0;
    for j in 1..states.len() {
        if priority(&states[j], &states[best]) == Ordering::Greater {
            best = j;
        }
    }
    states.remove(best)
}
