//! Fiber-local storage: the replacement for `thread_local!` in code that runs on fibers.
//!
//! A `thread_local!` seen from a fiber belongs to whichever processor thread the fiber happens to
//! run on, and that changes whenever the fiber parks. A [`FiberLocal`] belongs to the fiber: each
//! fiber gets its own value, built on first use and dropped when the fiber ends. Outside any
//! fiber, each OS thread gets its own value, as with `thread_local!`.

use crate::loom::{Ordering, StaticAtomicUsize};
use std::any::Any;

/// Key numbers handed out so far; 0 means "not assigned yet".
static NEXT_KEY: StaticAtomicUsize = StaticAtomicUsize::new(1);

/// A fiber-local value, declared as a `static`:
///
/// ```
/// use std::cell::Cell;
/// static REQUESTS: weft::FiberLocal<Cell<u32>> = weft::FiberLocal::new(|| Cell::new(0));
/// REQUESTS.with(|n| n.set(n.get() + 1));
/// ```
pub struct FiberLocal<T: 'static> {
    init: fn() -> T,
    /// The key, allocated on first use; a `static`'s field (a `FiberLocal` lives in one), so
    /// not a loom object (see `crate::loom`).
    key: StaticAtomicUsize,
}

impl<T: 'static> FiberLocal<T> {
    /// A key whose value, in each fiber, starts as `init()`.
    pub const fn new(init: fn() -> T) -> Self {
        FiberLocal {
            init,
            key: StaticAtomicUsize::new(0),
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
    ///
    /// `init`, `f` and `T`'s destructor may use any `FiberLocal`, this one included: no
    /// reference to the fiber's map is alive while user code runs (a `&mut` to the map held
    /// across a re-entrant `init` that grows the map would be two live `&mut`).
    pub fn with<R>(&'static self, f: impl FnOnce(&T) -> R) -> R {
        let index = self.key() - 1;
        let map = crate::fiber::current::current_locals();
        // SAFETY: `map` is the current fiber's (or thread's) own map, used by nobody else; the
        // read ends before any user code runs.
        let slots: &Vec<Option<*mut dyn Any>> = unsafe { &(*map).slots };
        let present = slots.get(index).copied().flatten();
        let slot: *mut dyn Any = match present {
            Some(slot) => slot,
            None => {
                // User code, with no borrow of the map alive: it may re-enter `with`.
                let fresh: *mut dyn Any = Box::into_raw(Box::new((self.init)()) as Box<dyn Any>);
                // SAFETY: as above; this `&mut` lives only for the few lines below, which run no
                // user code.
                let (slot, spare) = unsafe {
                    let map = &mut *map;
                    if map.slots.len() <= index {
                        map.slots.resize_with(index + 1, || None);
                    }
                    match map.slots[index] {
                        None => {
                            map.slots[index] = Some(fresh);
                            (fresh, None)
                        }
                        // `init` itself used this key and filled the slot: keep that value.
                        Some(existing) => (existing, Some(fresh)),
                    }
                };
                if let Some(spare) = spare {
                    // SAFETY: `spare` came from Box::into_raw above and was never stored; its
                    // destructor (user code) runs with no borrow of the map alive.
                    drop(unsafe { Box::from_raw(spare) });
                }
                slot
            }
        };
        // SAFETY: the slot's Box is never removed or replaced while the fiber lives, so this
        // shared reference stays valid even if `f` adds keys and the Vec grows (the Vec holds
        // raw pointers, not the values).
        let value: &T = unsafe { &*slot }
            .downcast_ref::<T>()
            .expect("fiber-local slot holds its key's type");
        f(value)
    }
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

    /// Initialisers that re-enter `with` for other keys, growing the map past its length while
    /// an outer `with` is still finding its own slot, and one that uses its own key. (The old
    /// `with` held a `&mut` to the map across `init`; that aliasing is undefined behaviour
    /// that only Miri, not this test, can see: the test pins the behaviour the fix keeps.)
    #[test]
    fn re_entrant_initialisers_that_grow_the_map() {
        static DEEP: [FiberLocal<u64>; 40] = [const { FiberLocal::new(|| 1) }; 40];
        static OUTER: FiberLocal<u64> = FiberLocal::new(|| {
            // Touch forty keys made after this one: the map grows under the outer `with`.
            DEEP.iter().map(|k| k.with(|v| *v)).sum::<u64>() + OTHER.with(|s| s.len() as u64)
        });
        static FIRST: crate::loom::StaticAtomicBool = crate::loom::StaticAtomicBool::new(true);
        static SELF_USE: FiberLocal<Cell<u32>> = FiberLocal::new(|| {
            // The first initialisation uses its own key once: that inner value is kept and
            // this one dropped.
            if FIRST.swap(false, Ordering::SeqCst) {
                SELF_USE.with(|c| c.set(c.get() + 1));
            }
            Cell::new(100)
        });
        assert_eq!(SELF_USE.with(|c| c.get()), 101);
        let run = || {
            assert_eq!(OUTER.with(|v| *v), 41);
            assert_eq!(DEEP[39].with(|v| *v), 1);
        };
        run();
        let cluster = crate::Cluster::builder()
            .name("local-reentrant")
            .processors(1)
            .build()
            .unwrap();
        cluster.spawn(run).join().unwrap();
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
