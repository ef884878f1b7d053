//! Fiber-aware synchronisation.
