//! Python binding of the seqbalance core (placeholder: the partitioning functions land next).
use pyo3::prelude::*;

mod refine;
mod bind_refine;

/// "release" or "debug": benchmarks refuse to time a debug build.
#[pyfunction]
fn build_profile() -> &'static str {
    if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    }
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(build_profile, m)?)?;
    bind_refine::register(m)?;
    Ok(())
}
