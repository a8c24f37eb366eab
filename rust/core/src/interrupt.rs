//! Cooperative cancellation of long computations (Ctrl-C in the Python binding).
//!
//! The core's loops call [`Interrupt::check`] every few thousand steps (well under a millisecond
//! of work); the caller's function decides whether to stop (the binding asks Python whether a
//! signal arrived, at most every ~50 ms). A stop unwinds with [`CoreError::Interrupted`]; every
//! buffer is dropped on the way out.
use crate::error::CoreError;

/// How many loop steps the core runs between two checks: each step is at most a few hundred
/// nanoseconds, so a check comes at least every millisecond or so, and costs nothing measurable.
pub const CHECK_EVERY: usize = 4096;

/// A question the core asks now and then: "should I stop?".
#[derive(Clone, Copy)]
pub struct Interrupt<'a> {
    stop: Option<&'a dyn Fn() -> bool>,
}

impl<'a> Interrupt<'a> {
    /// Never stops: for callers without anything to cancel.
    pub const NEVER: Interrupt<'static> = Interrupt { stop: None };

    /// Stop when `stop` returns true.
    pub fn new(stop: &'a dyn Fn() -> bool) -> Self {
        Interrupt { stop: Some(stop) }
    }

    /// `Err(Interrupted)` when the caller asked to stop.
    #[inline]
    pub fn check(&self) -> Result<(), CoreError> {
        match self.stop {
            Some(stop) if stop() => Err(CoreError::Interrupted),
            _ => Ok(()),
        }
    }

    /// [`check`](Self::check) on every [`CHECK_EVERY`]th step.
    #[inline]
    pub fn every(&self, step: usize) -> Result<(), CoreError> {
        if step % CHECK_EVERY == 0 {
            self.check()
        } else {
            Ok(())
        }
    }
}
