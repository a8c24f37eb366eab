// `cargo test` links the rlib against libpython; where CPython is a shared-library build the test
// binary must find it at run time, so record its directory as an rpath.
fn main() {
    pyo3_build_config::add_libpython_rpath_link_args();
}
