//! Fallible allocation: every buffer whose size follows the input is allocated here, so that
//! running out of memory (an address-space limit, a container's cap) is a [`CoreError::OutOfMemory`]
//! naming the buffer instead of an abort of the whole process.
//!
//! Small fixed-size buffers (a few per call, independent of the input) still use the ordinary,
//! aborting allocation: they cannot fail where these succeeded.
use crate::error::CoreError;
use crate::interrupt::Interrupt;

fn out_of_memory<T>(what: &'static str, count: usize) -> CoreError {
    CoreError::OutOfMemory { what, bytes: count.saturating_mul(std::mem::size_of::<T>()) }
}

/// An empty vector with room for `capacity` items.
pub fn with_capacity<T>(capacity: usize, what: &'static str) -> Result<Vec<T>, CoreError> {
    let mut vec = Vec::new();
    vec.try_reserve_exact(capacity).map_err(|_| out_of_memory::<T>(what, capacity))?;
    Ok(vec)
}

/// `len` copies of `value`.
pub fn filled<T: Clone>(len: usize, value: T, what: &'static str) -> Result<Vec<T>, CoreError> {
    let mut vec = with_capacity(len, what)?;
    vec.resize(len, value);
    Ok(vec)
}

/// [`filled`], writing a chunk at a time with interrupt checks between: filling hundreds of
/// megabytes of fresh pages takes long enough to need them.
pub fn filled_checked<T: Clone>(
    len: usize,
    value: T,
    what: &'static str,
    interrupt: &Interrupt,
) -> Result<Vec<T>, CoreError> {
    const CHUNK: usize = 1 << 16;
    let mut vec = with_capacity(len, what)?;
    while vec.len() < len {
        interrupt.check()?;
        let end = len.min(vec.len() + CHUNK);
        vec.resize(end, value.clone());
    }
    Ok(vec)
}

/// Types whose all-zero bit pattern is the value zero.
pub trait Zero: Copy {}
impl Zero for u32 {}
impl Zero for u64 {}
impl Zero for i64 {}
impl Zero for usize {}

/// `len` zeros, from memory the allocator already knows to be zero where it can (fresh pages
/// from the system are not written at all, so they cost nothing until they are used).
pub fn zeroed<T: Zero>(len: usize, what: &'static str) -> Result<Vec<T>, CoreError> {
    let layout = std::alloc::Layout::array::<T>(len).map_err(|_| out_of_memory::<T>(what, len))?;
    if layout.size() == 0 {
        return Ok(Vec::new());
    }
    // SAFETY: the layout has a non-zero size; a null result is an allocation failure. The memory
    // is zeroed, which is a valid `T` (`Zero`), and allocated by the global allocator with the
    // layout of `len` items, so the vector may own and later free it.
    unsafe {
        let pointer = std::alloc::alloc_zeroed(layout) as *mut T;
        if pointer.is_null() {
            return Err(out_of_memory::<T>(what, len));
        }
        Ok(Vec::from_raw_parts(pointer, len, len))
    }
}

/// The items of an iterator of known length, in one allocation.
pub fn collect<T>(items: impl ExactSizeIterator<Item = T>, what: &'static str) -> Result<Vec<T>, CoreError> {
    let mut vec = with_capacity(items.len(), what)?;
    vec.extend(items);
    Ok(vec)
}

/// Room for `additional` more items (growing by doubling, as `push` would).
#[inline]
pub fn reserve<T>(vec: &mut Vec<T>, additional: usize, what: &'static str) -> Result<(), CoreError> {
    if vec.capacity() - vec.len() >= additional {
        return Ok(());
    }
    vec.try_reserve(additional).map_err(|_| out_of_memory::<T>(what, vec.len().saturating_add(additional)))
}

/// Room in `map` for `additional` more entries (a map's growth rehashes into a new table).
pub fn reserve_map<K: Eq + std::hash::Hash, V, S: std::hash::BuildHasher>(
    map: &mut std::collections::HashMap<K, V, S>,
    additional: usize,
    what: &'static str,
) -> Result<(), CoreError> {
    map.try_reserve(additional)
        .map_err(|_| out_of_memory::<(K, V)>(what, map.len().saturating_add(additional)))
}

/// Capacity for `total` items in all, whatever the vector holds now.
pub fn room_for<T>(vec: &mut Vec<T>, total: usize, what: &'static str) -> Result<(), CoreError> {
    if vec.capacity() >= total {
        return Ok(());
    }
    let additional = total - vec.len();
    reserve(vec, additional, what)
}

/// `vec.push(item)`, failing instead of aborting when the vector cannot grow.
#[inline]
pub fn push<T>(vec: &mut Vec<T>, item: T, what: &'static str) -> Result<(), CoreError> {
    reserve(vec, 1, what)?;
    vec.push(item);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_impossible_request_is_an_error_naming_the_buffer() {
        let error = with_capacity::<u64>(usize::MAX / 4, "test buffer").unwrap_err();
        assert_eq!(error, CoreError::OutOfMemory { what: "test buffer", bytes: usize::MAX });
        assert!(error.to_string().contains("test buffer"));
        let mut vec = vec![1u32];
        assert!(reserve(&mut vec, usize::MAX / 2, "grown buffer").is_err());
        assert_eq!(vec, vec![1]);
    }

    #[test]
    fn possible_requests_succeed() {
        assert_eq!(filled(3, 7u8, "x").unwrap(), vec![7, 7, 7]);
        assert_eq!(zeroed::<u64>(3, "x").unwrap(), vec![0, 0, 0]);
        assert!(zeroed::<u32>(0, "x").unwrap().is_empty());
        assert!(zeroed::<u64>(usize::MAX / 4, "x").is_err());
        assert_eq!(collect([1, 2].into_iter(), "x").unwrap(), vec![1, 2]);
        let mut vec = Vec::new();
        push(&mut vec, 5, "x").unwrap();
        assert_eq!(vec, vec![5]);
    }
}
