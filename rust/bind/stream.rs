//! Python binding of the streaming packer (`seqbalance_core::stream`): the private class
//! `_StreamCore`, which `seqbalance.planning.stream.StreamPacker` wraps.
//!
//! The wrapper checks the arguments, maps keys to integer ids and holds a lock around every call,
//! so two threads never borrow one core at once; this class still refuses bad values with
//! `ValueError` rather than trusting its caller.
use numpy::PyReadonlyArray1;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyList;

use seqbalance_core::alloc;
use seqbalance_core::stream::{Footprint, SavedPack, StreamConfig, StreamError, StreamPacker, StreamState};

use crate::convert::{index_lists, Index};
use crate::errors::{core_error, guard, interruptible};

impl Index for u64 {
    fn as_u64(self) -> u64 {
        self
    }
}

/// Below this many items a batch takes microseconds, about what releasing the GIL costs.
const DETACH_THRESHOLD: usize = 2048;

fn stream_error(py: Python<'_>, error: StreamError, raised: Option<PyErr>) -> PyErr {
    match (error, raised) {
        (StreamError::Core(_), Some(raised)) => raised,
        (StreamError::Core(error), None) => core_error(py, error),
        (error, _) => PyValueError::new_err(error.to_string()),
    }
}

/// Packs as a list of lists of ints (every index is below the packer's next index).
fn packs_list<'py>(
    py: Python<'py>,
    packer: &StreamPacker,
    packs: &[Vec<u64>],
) -> PyResult<Bound<'py, PyList>> {
    let below = usize::try_from(packer.next_index()).unwrap_or(usize::MAX);
    index_lists(py, below, packs.iter())
}

/// An int64 array as unsigned values; a negative value is a `ValueError` naming its position.
fn unsigned(py: Python<'_>, array: &PyReadonlyArray1<'_, i64>, name: &str, least: i64) -> PyResult<Vec<u64>> {
    // `as_array` also covers strided views, where `as_slice` would fail.
    let view = array.as_array();
    let mut values = alloc::with_capacity(view.len(), "the lengths").map_err(|e| core_error(py, e))?;
    for (position, &value) in view.iter().enumerate() {
        match u64::try_from(value) {
            Ok(value) => values.push(value),
            Err(_) => {
                return Err(PyValueError::new_err(format!(
                    "{name}[{position}] must be >= {least}, got {value}"
                )))
            }
        }
    }
    Ok(values)
}

type SavedPackTuple = (u64, u64, u64, Vec<u64>);

/// The core of `StreamPacker`: best fit over a bounded number of open packs.
#[pyclass(module = "seqbalance._native", name = "_StreamCore")]
pub struct StreamCore {
    packer: StreamPacker,
}

#[pymethods]
impl StreamCore {
    #[new]
    #[pyo3(signature = (pack_max_length, max_open, max_sequences, padded))]
    fn new(
        pack_max_length: u64,
        max_open: usize,
        max_sequences: Option<u64>,
        padded: bool,
    ) -> PyResult<Self> {
        let footprint = if padded { Footprint::Padded } else { Footprint::Sum };
        let config = StreamConfig { capacity: pack_max_length, max_open, max_sequences, footprint };
        let packer = StreamPacker::new(config).map_err(|e| PyValueError::new_err(e.to_string()))?;
        Ok(StreamCore { packer })
    }

    /// Add one length under the key id `key`; the packs this closed.
    fn add<'py>(&mut self, py: Python<'py>, length: u64, key: u64) -> PyResult<Bound<'py, PyList>> {
        guard("_StreamCore.add", || {
            let closed = self.packer.add(length, key).map_err(|e| stream_error(py, e, None))?;
            packs_list(py, &self.packer, &closed)
        })
    }

    /// Add a batch of lengths (int64), with one key id each when `keys` is given; all or nothing.
    #[pyo3(signature = (lengths, keys=None))]
    fn add_many<'py>(
        &mut self,
        py: Python<'py>,
        lengths: PyReadonlyArray1<'py, i64>,
        keys: Option<PyReadonlyArray1<'py, i64>>,
    ) -> PyResult<Bound<'py, PyList>> {
        guard("_StreamCore.add_many", || {
            let values = unsigned(py, &lengths, "lengths", 1)?;
            let keys = keys.map(|keys| unsigned(py, &keys, "keys", 0)).transpose()?;
            let packer = &mut self.packer;
            let detach = values.len() >= DETACH_THRESHOLD;
            let (closed, raised) =
                interruptible(py, detach, |interrupt| packer.add_many(&values, keys.as_deref(), interrupt));
            let closed = closed.map_err(|e| stream_error(py, e, raised))?;
            packs_list(py, &self.packer, &closed)
        })
    }

    /// Close every open pack; their indexes, in opening order.
    fn flush<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        guard("_StreamCore.flush", || {
            let packs = self.packer.flush();
            packs_list(py, &self.packer, &packs)
        })
    }

    /// The open packs' indexes, in opening order (nothing closes).
    fn open_packs<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        guard("_StreamCore.open_packs", || {
            let below = usize::try_from(self.packer.next_index()).unwrap_or(usize::MAX);
            index_lists(py, below, self.packer.open_items())
        })
    }

    /// How many packs are open.
    #[getter]
    fn open_count(&self) -> usize {
        self.packer.open_packs()
    }

    /// The key ids of the open packs, in opening order.
    fn open_keys(&self, py: Python<'_>) -> PyResult<Vec<u64>> {
        guard("_StreamCore.open_keys", || {
            alloc::collect(self.packer.open_keys().iter().copied(), "the open packs' keys")
                .map_err(|e| core_error(py, e))
        })
    }

    /// How many items were accepted so far (the next one's index).
    #[getter]
    fn next_index(&self) -> u64 {
        self.packer.next_index()
    }

    /// `(pack_max_length, max_open, max_sequences, padded, next_index, packs)`, each pack
    /// `(key, sum, longest, indexes)`: what `from_state` takes.
    #[allow(clippy::type_complexity)]
    fn state(&self, py: Python<'_>) -> PyResult<(u64, usize, Option<u64>, bool, u64, Vec<SavedPackTuple>)> {
        guard("_StreamCore.state", || {
            let state = self.packer.state().map_err(|e| core_error(py, e))?;
            let config = state.config;
            let packs = alloc::collect(
                state.packs.into_iter().map(|p| (p.key, p.sum, p.longest, p.items)),
                "a StreamPacker state",
            )
            .map_err(|e| core_error(py, e))?;
            Ok((
                config.capacity,
                config.max_open,
                config.max_sequences,
                config.footprint == Footprint::Padded,
                state.next_index,
                packs,
            ))
        })
    }

    /// A core that goes on from a `state()`; `ValueError` when no packer could have reached it.
    ///
    /// `packs` is read here, not by pyo3's conversion, so that its size is checked against
    /// `max_open` before anything is allocated, and every buffer is allocated fallibly: a state
    /// may come from an untrusted pickle.
    #[staticmethod]
    fn from_state(
        py: Python<'_>,
        pack_max_length: u64,
        max_open: usize,
        max_sequences: Option<u64>,
        padded: bool,
        next_index: u64,
        packs: &Bound<'_, PyAny>,
    ) -> PyResult<Self> {
        guard("_StreamCore.from_state", || {
            let footprint = if padded { Footprint::Padded } else { Footprint::Sum };
            let config = StreamConfig { capacity: pack_max_length, max_open, max_sequences, footprint };
            let packs = saved_packs(py, packs, max_open)?;
            let packer = StreamPacker::from_state(StreamState { config, next_index, packs })
                .map_err(|e| stream_error(py, e, None))?;
            Ok(StreamCore { packer })
        })
    }
}

/// The open packs of a saved state: a sequence of at most `max_open` tuples `(key, sum, longest,
/// indexes)`, each pack's indexes no more than the state could hold.
fn saved_packs(py: Python<'_>, packs: &Bound<'_, PyAny>, max_open: usize) -> PyResult<Vec<SavedPack>> {
    let what = "a StreamPacker state";
    let count = packs.len()?;
    if count > max_open {
        return Err(PyValueError::new_err(
            StreamError::BadState("more open packs than max_open").to_string(),
        ));
    }
    let mut saved = alloc::with_capacity(count, what).map_err(|e| core_error(py, e))?;
    for pack in packs.try_iter()? {
        let pack = pack?;
        let (key, sum, longest, items): (u64, u64, u64, Bound<'_, PyAny>) = pack.extract()?;
        // A pack's items are distinct and each at least 1 long: no more of them than its sum.
        let n_items = items.len()?;
        if n_items as u64 > sum {
            return Err(PyValueError::new_err(
                StreamError::BadState("a pack's sum and longest length disagree with its count").to_string(),
            ));
        }
        let mut indexes = alloc::with_capacity(n_items, what).map_err(|e| core_error(py, e))?;
        for index in items.try_iter()? {
            alloc::push(&mut indexes, index?.extract::<u64>()?, what).map_err(|e| core_error(py, e))?;
        }
        alloc::push(&mut saved, SavedPack { key, sum, longest, items: indexes }, what)
            .map_err(|e| core_error(py, e))?;
    }
    Ok(saved)
}

/// Add the streaming packer's class to the `_native` module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<StreamCore>()
}
