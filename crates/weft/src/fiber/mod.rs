//! Fibers: user-level threads with their own stacks.
//!
//! [`crate::spawn`] documents the fiber contract. This file is the public face of the module
//! (re-exports only); the fiber layer itself (ARCHITECTURE.md, "Layers": it may use `ctx` and
//! the leaves, nothing above) is in its submodules: the fiber record (`core`), the park/unpark
//! state machine (`park`), stacks (`stack`), stack-overflow reports (`overflow`), fiber-local
//! storage (`local`) and the calls a fiber makes about itself (`current`). Spawning, joining
//! and migrating need the scheduler and live with it (`runtime::spawn`). Inside the crate,
//! name an item through the submodule that defines it, never through these re-exports.

pub(crate) mod core;
pub(crate) mod current;
pub(crate) mod local;
pub(crate) mod overflow;
pub(crate) mod park;
pub(crate) mod stack;

pub use self::core::Task;
pub use self::current::{id, is_cancelled, name, sleep, sleep_until, yield_now};
pub use self::local::FiberLocal;
pub use self::stack::{DEFAULT_STACK_SIZE, MIN_STACK_SIZE};
pub use crate::runtime::spawn::{migrate, spawn, spawn_migratable, Builder, JoinError, JoinHandle};
