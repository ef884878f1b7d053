//! The map behind fiber-local storage: one per fiber (in its record) and one per OS thread (in
//! the context). `fiber::local` owns the protocol on it; this is only the container.

use std::any::Any;

/// Values of one fiber (or thread), indexed by key. Each value lives in its own allocation, held
/// as a raw pointer (not a `Box`, whose uniqueness a reborrow of the vector would assert), so a
/// reference handed to `with` stays valid when a nested `with` grows the vector.
#[derive(Default)]
pub(crate) struct LocalMap {
    pub(crate) slots: Vec<Option<*mut dyn Any>>,
}

impl LocalMap {
    pub(crate) const fn new() -> LocalMap {
        LocalMap { slots: Vec::new() }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }
}

impl Drop for LocalMap {
    fn drop(&mut self) {
        for value in self.slots.drain(..).flatten() {
            // SAFETY: every pointer came from Box::into_raw in `FiberLocal::with` and is freed
            // only here.
            drop(unsafe { Box::from_raw(value) });
        }
    }
}
