//! Fiber-local storage: the replacement for `thread_local!` in code that runs on fibers.
//!
//! A `thread_local!` seen from a fiber belongs to whichever processor thread the fiber happens to
//! run on, and that changes whenever the fiber parks. A [`FiberLocal`] belongs to the fiber: each
//! fiber gets its own value, built on first use and dropped when the fiber ends. Outside any
//! fiber, each OS thread gets its own value, as with `thread_local!`.

use std::any::Any;
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Values of one fiber (or thread), indexed by key. Each value lives in its own allocation, held
/// as a raw pointer (not a `Box`, whose uniqueness a reborrow of the vector would assert), so a
/// reference handed to `with` stays valid when a nested `with` grows the vector.
#[derive(Default)]
pub(crate) struct LocalMap {
    slots: Vec<Option<*mut dyn Any>>,
}

impl LocalMap {
    pub(crate) fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }
}

impl Drop for LocalMap {
    fn drop(&mut self) {
        for value in self.slots.drain(..).flatten() {
            // SAFETY: every pointer came from Box::into_raw in `with` and is freed only here.
            drop(unsafe { Box::from_raw(value) });
        }
    }
}

/// Key numbers handed out so far; 0 means "not assigned yet".
static NEXT_KEY: AtomicUsize = AtomicUsize::new(1);

/// A fiber-local value, declared as a `static`:
///
/// ```
/// use std::cell::Cell;
/// static REQUESTS: weft::FiberLocal<Cell<u32>> = weft::FiberLocal::new(|| Cell::new(0));
/// REQUESTS.with(|n| n.set(n.get() + 1));
/// ```
pub struct FiberLocal<T: 'static> {
    init: fn() -> T,
    key: AtomicUsize,
}

impl<T: 'static> FiberLocal<T> {
    /// A key whose value, in each fiber, starts as `init()`.
    pub const fn new(init: fn() -> T) -> Self {
        FiberLocal {
            init,
            key: AtomicUsize::new(0),
        }
    }

    fn key(&self) -> usize {
        let key = self.key.load(Ordering::Acquire);
        if key != 0 {
            return key;
        }
        let fresh = NEXT_KEY.fetch_add(1, Ordering::Relaxed);
        match self
            .key
            .compare_exchange(0, fresh, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => fresh,
            Err(existing) => existing,
        }
    }

    /// Runs `f` with the current fiber's value (or the current thread's, outside fibers).
    pub fn with<R>(&'static self, f: impl FnOnce(&T) -> R) -> R {
        let index = self.key() - 1;
        let map = crate::fiber::current_locals();
        // SAFETY: `map` is the current fiber's (or thread's) own map, used by nobody else; the
        // shared reference below points into a Box that is never removed or replaced while the
        // fiber lives, so it stays valid even if `f` (or `init`) adds keys and the Vec grows.
        let value: &T = unsafe {
            let map = &mut *map;
            if map.slots.get(index).copied().flatten().is_none() {
                let fresh: *mut dyn Any = Box::into_raw(Box::new((self.init)()) as Box<dyn Any>);
                if map.slots.len() <= index {
                    map.slots.resize_with(index + 1, || None);
                }
                match map.slots[index] {
                    None => map.slots[index] = Some(fresh),
                    // `init` itself used this key and filled the slot: keep that value.
                    Some(_) => drop(Box::from_raw(fresh)),
                }
            }
            let value: *mut dyn Any = map.slots[index].expect("filled above");
            (*value)
                .downcast_ref::<T>()
                .expect("fiber-local slot holds its key's type")
        };
        f(value)
    }
}

thread_local! {
    static THREAD_LOCALS: UnsafeCell<LocalMap> = UnsafeCell::new(LocalMap::default());
}

/// The map of the current OS thread, for callers outside any fiber.
#[inline(never)]
pub(crate) fn thread_map() -> *mut LocalMap {
    THREAD_LOCALS.with(|m| m.get())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    static COUNTER: FiberLocal<Cell<u32>> = FiberLocal::new(|| Cell::new(7));
    static OTHER: FiberLocal<String> = FiberLocal::new(|| "x".to_owned());

    #[test]
    fn each_thread_has_its_own_value() {
        COUNTER.with(|c| c.set(c.get() + 1));
        assert_eq!(COUNTER.with(|c| c.get()), 8);
        let other = std::thread::spawn(|| COUNTER.with(|c| c.get()))
            .join()
            .unwrap();
        assert_eq!(other, 7);
    }

    #[test]
    fn nested_access_to_other_keys_is_fine() {
        let len = COUNTER.with(|c| {
            c.set(1);
            OTHER.with(|s| s.len()) + c.get() as usize
        });
        assert_eq!(len, 2);
    }
}
