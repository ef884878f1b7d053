//! Whether a processor that goes to sleep between requests arms a short timer first, so that
//! the kernel keeps its periodic tick running on that CPU (the *tick keeper*).
//!
//! Why: on a tickless kernel (`NO_HZ_IDLE`) a CPU going idle stops its tick unless a timer is
//! due within one tick period. The wake-up that ends such an idle period restarts the tick,
//! which reprograms the CPU's timer device; on a virtual machine that write traps to the
//! hypervisor. On the development VM it cost 4–5 µs of every request that found the server
//! asleep, out of about 20 µs of wake-up (`docs/notes/scale.md`, "Keeping the tick").
//! memcached avoids it by accident: its LRU maintainer thread sleeps about 1 ms at a time, so a
//! timer is always near. A processor that keeps a timer of its own at most [`DEFAULT_PERIOD`]
//! ahead gets the same: the tick is never stopped, and a request that wakes the CPU pays no
//! restart. The timer is never cancelled (a cancel would reprogram the device on the wake-up
//! path, the very cost it avoids); it expires, and the processor arms the next one only when it
//! sleeps again.
//!
//! Invariant (no cost when idle): the keeper is armed only while the processor is working.
//! After [`QUIET_LIMIT`] consecutive keeper periods in which nothing but the keeper itself
//! completed, the processor stops arming it and sleeps without it; the next real completion
//! or wake-up arms it again at the following sleep. An idle server therefore takes at most
//! [`QUIET_LIMIT`] extra wake-ups after its last request, then none.
//!
//! While the processor never sleeps (a saturated server) the keeper costs nothing: it is armed
//! only on the way to sleep, and a CPU that does not go idle keeps its tick anyway.

use std::cell::Cell;
use std::time::Duration;

/// The keeper's period when a cluster does not choose one: 1 ms, under one tick at every
/// `CONFIG_HZ` Linux offers (100–1000), as memcached's LRU maintainer sleeps at its busiest.
pub const DEFAULT_PERIOD: Duration = Duration::from_millis(1);

/// The longest period a cluster may choose: a keeper further away than one tick (4 ms at the
/// common `HZ=250`) no longer keeps the tick running.
pub const MAX_PERIOD: Duration = Duration::from_millis(10);

/// Consecutive keeper periods with no other work after which the keeper is no longer armed.
pub(crate) const QUIET_LIMIT: u32 = 4;

/// One processor's tick keeper: the decisions only; the driver arms the timer.
#[derive(Debug)]
pub(crate) struct KeepTick {
    /// The period in nanoseconds; 0: never arm.
    period_ns: u64,
    /// Whether a keeper timer is in flight (armed and not yet reaped).
    armed: Cell<bool>,
    /// Whether other work (a completion, a wake-up) was reaped since the keeper was armed.
    worked: Cell<bool>,
    /// Consecutive keeper periods that ended with no other work.
    quiet: Cell<u32>,
}

impl KeepTick {
    /// A keeper of `period` (zero turns it off).
    pub(crate) fn new(period: Duration) -> KeepTick {
        KeepTick {
            period_ns: period.min(MAX_PERIOD).as_nanos() as u64,
            armed: Cell::new(false),
            worked: Cell::new(false),
            quiet: Cell::new(0),
        }
    }

    /// The period (zero when off).
    pub(crate) fn period(&self) -> Duration {
        Duration::from_nanos(self.period_ns)
    }

    /// The period to arm, if the processor should arm a keeper before this sleep: on, none in
    /// flight, and the processor has been working lately. Marks it armed.
    #[inline]
    pub(crate) fn arm(&self) -> Option<Duration> {
        if self.period_ns == 0 || self.armed.get() || self.quiet.get() >= QUIET_LIMIT {
            return None;
        }
        self.armed.set(true);
        self.worked.set(false);
        Some(Duration::from_nanos(self.period_ns))
    }

    /// Arming failed after [`KeepTick::arm`] said to arm (no room, refused): nothing in flight.
    pub(crate) fn not_armed(&self) {
        self.armed.set(false);
    }

    /// Other work was reaped: a completion or a wake-up.
    #[inline]
    pub(crate) fn worked(&self) {
        self.worked.set(true);
        self.quiet.set(0);
    }

    /// The keeper's timer expired and was reaped.
    pub(crate) fn fired(&self) {
        self.armed.set(false);
        if self.worked.get() {
            self.quiet.set(0);
        } else {
            self.quiet.set(self.quiet.get().saturating_add(1));
        }
    }

    /// Whether a keeper timer is in flight.
    #[cfg(test)]
    pub(crate) fn is_armed(&self) -> bool {
        self.armed.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_never_arms() {
        let k = KeepTick::new(Duration::ZERO);
        assert_eq!(k.arm(), None);
        k.worked();
        assert_eq!(k.arm(), None);
    }

    #[test]
    fn arms_once_until_it_fires() {
        let k = KeepTick::new(Duration::from_millis(1));
        assert_eq!(k.arm(), Some(Duration::from_millis(1)));
        assert!(k.is_armed());
        // Later sleeps in the same period do not arm a second timer.
        assert_eq!(k.arm(), None);
        k.worked();
        k.fired();
        assert!(!k.is_armed());
        assert_eq!(k.arm(), Some(Duration::from_millis(1)));
    }

    #[test]
    fn stops_after_quiet_periods_and_restarts_on_work() {
        let k = KeepTick::new(Duration::from_millis(1));
        for _ in 0..QUIET_LIMIT {
            assert!(k.arm().is_some());
            k.fired();
        }
        // Idle: no keeper, so an idle processor sleeps without extra wake-ups.
        assert_eq!(k.arm(), None);
        assert_eq!(k.arm(), None);
        // A request comes: the next sleep keeps the tick again.
        k.worked();
        assert!(k.arm().is_some());
    }

    #[test]
    fn a_period_with_work_is_not_quiet() {
        let k = KeepTick::new(Duration::from_millis(1));
        for _ in 0..10 * QUIET_LIMIT {
            assert!(k.arm().is_some());
            k.worked();
            k.fired();
        }
        // Quiet periods count only while consecutive: work between them starts the count again.
        for _ in 0..3 * QUIET_LIMIT {
            for _ in 0..QUIET_LIMIT - 1 {
                assert!(k.arm().is_some());
                k.fired();
            }
            k.worked();
        }
        assert!(k.arm().is_some());
    }

    #[test]
    fn the_period_is_capped() {
        let k = KeepTick::new(Duration::from_secs(1));
        assert_eq!(k.arm(), Some(MAX_PERIOD));
    }

    #[test]
    fn a_failed_arm_leaves_nothing_in_flight() {
        let k = KeepTick::new(Duration::from_millis(1));
        assert!(k.arm().is_some());
        k.not_armed();
        assert!(!k.is_armed());
        assert!(k.arm().is_some());
    }
}
