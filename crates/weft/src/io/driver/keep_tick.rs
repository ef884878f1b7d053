//! Whether a processor that goes to sleep between requests arms a short timer first, so that
//! the kernel keeps its periodic tick running on that CPU (the *tick keeper*).
//!
//! Why: on a tickless kernel (`NO_HZ_IDLE`) a CPU going idle stops its tick unless a timer is
//! due within one tick period. The wake-up that ends such an idle period restarts the tick,
//! which reprograms the CPU's timer device; on a virtual machine that write traps to the
//! hypervisor. On the development VM it cost 4–5 µs of every request that found the server
//! asleep, out of about 20 µs of wake-up (`docs/notes/scale.md`, "Keeping the tick").
//! memcached avoids it by accident: its LRU maintainer thread sleeps about 1 ms at a time, so a
//! timer is always near. A processor that keeps a timer of its own at most one tick ahead gets
//! the same: the tick is never stopped, and a request that wakes the CPU pays no restart. The
//! timer is never cancelled (a cancel would reprogram the device on the wake-up path, the very
//! cost it avoids); it expires, and the processor arms the next one only when it sleeps again.
//!
//! The keeper rides on the tick ([`expiry_ns`]): it expires at the kernel's next tick, which
//! Linux (6.4 on) puts on multiples of the tick period of `CLOCK_MONOTONIC` on every CPU, or
//! [`DEFAULT_PERIOD`] (the cluster's period) from now if that is sooner. A timer due with the
//! tick is not the CPU's earliest, so arming it does not reprogram the timer device, and it
//! expires in the tick's own interrupt. A keeper due a fixed 1 ms ahead (the first version)
//! was the earliest timer most of the time: each one reprogrammed the device when armed and
//! took an interrupt of its own when it fired, 0.04–0.09 of a core at 1,000 connections and a
//! quarter of the peak, where the connections' TCP timers keep the tick running anyway.
//!
//! Invariant (no cost when idle): the keeper is armed only while the processor is working.
//! After [`QUIET_LIMIT`] consecutive keeper periods in which nothing but the keeper itself
//! completed, the processor stops arming it and sleeps without it; the next real completion
//! or wake-up arms it again at the following sleep. An idle server therefore takes at most
//! [`QUIET_LIMIT`] extra wake-ups after its last request, then none.
//!
//! While the processor never sleeps (a saturated server) the keeper costs nothing: it is armed
//! only on the way to sleep, and a CPU that does not go idle keeps its tick anyway.
//!
//! The keeper also stands in for the sleep's own timeout ([`KeepTick::wait_timeout`]): a
//! processor with a fiber timer pending (a server's periodic fibers keep one pending always)
//! used to pass its time to the sleep, and the kernel armed and cancelled a timer of its own
//! on every sleep (`hrtimer_start` and `hrtimer_cancel` on about every other request at a
//! thousand connections and a quarter of the peak). While a keeper in flight expires no later
//! than that time, its expiry ends the sleep first, so the sleep needs no timeout: the
//! processor wakes at the keeper, finds the timer not yet due, and sleeps again.

use std::cell::Cell;
use std::time::Duration;

/// The keeper's period when a cluster does not choose one: 4 ms, one tick at `HZ=250`. The
/// keeper expires at the kernel's next tick or after the period, whichever is sooner
/// (`expiry_ns`): at `HZ` 250 and up always the next tick; at `HZ=100` (10 ms ticks) within
/// 4 ms, which still keeps the tick.
pub const DEFAULT_PERIOD: Duration = Duration::from_millis(4);

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
    /// The kernel's tick period in nanoseconds; 0: unknown (the keeper then expires a period
    /// after it is armed).
    tick_ns: u64,
    /// Whether a keeper timer is in flight (armed and not yet reaped).
    armed: Cell<bool>,
    /// When the keeper in flight expires (`CLOCK_MONOTONIC` nanoseconds); meaningful while
    /// `armed`.
    expiry_ns: Cell<u64>,
    /// Whether other work (a completion, a wake-up) was reaped since the keeper was armed.
    worked: Cell<bool>,
    /// Consecutive keeper periods that ended with no other work.
    quiet: Cell<u32>,
}

impl KeepTick {
    /// A keeper of `period` (zero turns it off), riding on the kernel's tick.
    pub(crate) fn new(period: Duration) -> KeepTick {
        KeepTick::with_tick(period, kernel_tick_ns())
    }

    /// A keeper of `period` on a kernel whose tick is `tick_ns` long (0: unknown).
    pub(crate) fn with_tick(period: Duration, tick_ns: u64) -> KeepTick {
        KeepTick {
            period_ns: period.min(MAX_PERIOD).as_nanos() as u64,
            tick_ns,
            armed: Cell::new(false),
            expiry_ns: Cell::new(0),
            worked: Cell::new(false),
            quiet: Cell::new(0),
        }
    }

    /// The period (zero when off).
    pub(crate) fn period(&self) -> Duration {
        Duration::from_nanos(self.period_ns)
    }

    /// When the keeper armed before this sleep should expire, as nanoseconds of
    /// `CLOCK_MONOTONIC` ([`expiry_ns`]; `now_ns` reads the clock, only when there is one to
    /// arm), if the processor should arm one: on, none in flight, and the processor has been
    /// working lately. Marks it armed.
    #[inline]
    pub(crate) fn arm(&self, now_ns: impl FnOnce() -> u64) -> Option<u64> {
        if self.period_ns == 0 || self.armed.get() || self.quiet.get() >= QUIET_LIMIT {
            return None;
        }
        self.armed.set(true);
        self.worked.set(false);
        let expiry = expiry_ns(now_ns(), self.period_ns, self.tick_ns);
        self.expiry_ns.set(expiry);
        Some(expiry)
    }

    /// The timeout a sleep should pass to the kernel, given the processor's own `timeout`
    /// (its next fiber timer, `None`: none pending): `None` (wait without one) when a keeper
    /// in flight expires no later than the timeout would, so the kernel arms no timer of its
    /// own; the timeout unchanged otherwise. `now_ns` reads `CLOCK_MONOTONIC`, only when a
    /// keeper is in flight and a timeout was given.
    ///
    /// The timeout was measured from a clock reading a moment before `now_ns` reads it again,
    /// so the keeper may be judged to come first when it expires up to that moment after the
    /// timer's deadline: a sleep then ends that much late, far under the kernel's own slack
    /// for a sleeping thread (50 µs by default).
    #[inline]
    pub(crate) fn wait_timeout(
        &self,
        timeout: Option<Duration>,
        now_ns: impl FnOnce() -> u64,
    ) -> Option<Duration> {
        let left = timeout?;
        if !self.armed.get() || left.is_zero() {
            return Some(left);
        }
        let deadline_ns =
            now_ns().saturating_add(u64::try_from(left.as_nanos()).unwrap_or(u64::MAX));
        if self.expiry_ns.get() <= deadline_ns {
            None
        } else {
            Some(left)
        }
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
    #[inline]
    pub(crate) fn is_armed(&self) -> bool {
        self.armed.get()
    }
}

/// When a keeper armed at `now_ns` (`CLOCK_MONOTONIC`) expires: at the kernel's next tick,
/// the first multiple of `tick_ns` after `now_ns`, or `period_ns` after `now_ns` if that is
/// sooner or the tick is unknown (`tick_ns` 0). Linux aligns every CPU's tick to multiples of
/// the tick period (`tick_init_jiffy_update`, 6.4 on); on a kernel that does not, the keeper
/// is still due within one tick and keeps it running, it only no longer shares its interrupt.
pub(crate) fn expiry_ns(now_ns: u64, period_ns: u64, tick_ns: u64) -> u64 {
    let later = now_ns.saturating_add(period_ns);
    if tick_ns == 0 {
        return later;
    }
    let next_tick = (now_ns / tick_ns).saturating_add(1).saturating_mul(tick_ns);
    next_tick.min(later)
}

/// The kernel's tick period in nanoseconds: the resolution of `CLOCK_MONOTONIC_COARSE`, which
/// advances once a tick. 0 when the clock is refused or reports something out of range.
fn kernel_tick_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    if unsafe { libc::clock_getres(libc::CLOCK_MONOTONIC_COARSE, &mut ts) } != 0 {
        return 0;
    }
    let ns = timespec_ns(&ts);
    // Ticks run at HZ 100 to 1000 (10 ms to 1 ms); anything else is not a tick.
    if (1_000_000..=10_000_000).contains(&ns) {
        ns
    } else {
        0
    }
}

/// `CLOCK_MONOTONIC` now, in nanoseconds (the clock the kernel's tick and the keeper's timer
/// use).
pub(crate) fn monotonic_now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC is always available.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    timespec_ns(&ts)
}

/// `ts` (a clock reading, never negative) in nanoseconds.
fn timespec_ns(ts: &libc::timespec) -> u64 {
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Nanoseconds of a clock as whole seconds and the nanoseconds past them (a timespec's two
/// fields), for the drivers that arm the keeper.
pub(crate) fn split_ns(ns: u64) -> (u64, u32) {
    (ns / 1_000_000_000, (ns % 1_000_000_000) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// A keeper of `period_ms` on a kernel whose tick is unknown: it expires a period after
    /// the time it is armed at.
    fn keeper(period_ms: u64) -> KeepTick {
        KeepTick::with_tick(Duration::from_millis(period_ms), 0)
    }

    #[test]
    fn off_never_arms() {
        let k = keeper(0);
        assert_eq!(k.arm(|| 0), None);
        k.worked();
        assert_eq!(k.arm(|| 0), None);
    }

    #[test]
    fn arms_once_until_it_fires() {
        let k = keeper(1);
        assert_eq!(k.arm(|| 5 * MS), Some(6 * MS));
        assert!(k.is_armed());
        // Later sleeps in the same period do not arm a second timer.
        assert_eq!(k.arm(|| 5 * MS), None);
        k.worked();
        k.fired();
        assert!(!k.is_armed());
        assert_eq!(k.arm(|| 7 * MS), Some(8 * MS));
    }

    #[test]
    fn the_clock_is_read_only_when_a_keeper_is_armed() {
        let k = keeper(1);
        assert!(k.arm(|| 0).is_some());
        assert_eq!(
            k.arm(|| panic!("read the clock with a keeper in flight")),
            None
        );
        let off = keeper(0);
        assert_eq!(
            off.arm(|| panic!("read the clock with the keeper off")),
            None
        );
    }

    #[test]
    fn stops_after_quiet_periods_and_restarts_on_work() {
        let k = keeper(1);
        for _ in 0..QUIET_LIMIT {
            assert!(k.arm(|| 0).is_some());
            k.fired();
        }
        // Idle: no keeper, so an idle processor sleeps without extra wake-ups.
        assert_eq!(k.arm(|| 0), None);
        assert_eq!(k.arm(|| 0), None);
        // A request comes: the next sleep keeps the tick again.
        k.worked();
        assert!(k.arm(|| 0).is_some());
    }

    #[test]
    fn a_period_with_work_is_not_quiet() {
        let k = keeper(1);
        for _ in 0..10 * QUIET_LIMIT {
            assert!(k.arm(|| 0).is_some());
            k.worked();
            k.fired();
        }
        // Quiet periods count only while consecutive: work between them starts the count again.
        for _ in 0..3 * QUIET_LIMIT {
            for _ in 0..QUIET_LIMIT - 1 {
                assert!(k.arm(|| 0).is_some());
                k.fired();
            }
            k.worked();
        }
        assert!(k.arm(|| 0).is_some());
    }

    #[test]
    fn a_keeper_due_first_stands_in_for_the_sleep_timeout() {
        let k = keeper(1);
        let far = Some(Duration::from_secs(1));
        // No keeper in flight: the sleep keeps its timeout, and the clock is not read.
        assert_eq!(k.wait_timeout(far, || panic!("read the clock")), far);
        assert_eq!(k.arm(|| 5 * MS), Some(6 * MS));
        // The keeper expires at 6 ms, before a timer due 1 s after 5.5 ms: no timeout.
        assert_eq!(k.wait_timeout(far, || 5 * MS + MS / 2), None);
        // Due exactly with the keeper: the keeper still ends the sleep in time.
        assert_eq!(
            k.wait_timeout(Some(Duration::from_millis(1)), || 5 * MS),
            None
        );
        // A timer due before the keeper keeps its timeout.
        let soon = Some(Duration::from_micros(200));
        assert_eq!(k.wait_timeout(soon, || 5 * MS), soon);
        // No timer pending, or one already due: unchanged, without reading the clock.
        assert_eq!(k.wait_timeout(None, || panic!("read the clock")), None);
        assert_eq!(
            k.wait_timeout(Some(Duration::ZERO), || panic!("read the clock")),
            Some(Duration::ZERO)
        );
        // Once the keeper fired (or failed to arm), the sleep needs its own timeout again.
        k.fired();
        assert_eq!(k.wait_timeout(far, || 7 * MS), far);
        assert!(k.arm(|| 7 * MS).is_some());
        k.not_armed();
        assert_eq!(k.wait_timeout(far, || 7 * MS), far);
        // A keeper that is off never stands in.
        let off = keeper(0);
        assert_eq!(off.arm(|| 0), None);
        assert_eq!(off.wait_timeout(far, || 0), far);
    }

    #[test]
    fn the_period_is_capped() {
        let k = keeper(1000);
        assert_eq!(k.arm(|| 0), Some(MAX_PERIOD.as_nanos() as u64));
    }

    #[test]
    fn a_failed_arm_leaves_nothing_in_flight() {
        let k = keeper(1);
        assert!(k.arm(|| 0).is_some());
        k.not_armed();
        assert!(!k.is_armed());
        assert!(k.arm(|| 0).is_some());
    }

    #[test]
    fn the_keeper_expires_with_the_next_tick() {
        // HZ=250: ticks at multiples of 4 ms. Wherever in a tick the keeper is armed, it is
        // due at the next one, never before it (it would be the CPU's earliest timer) and
        // never a tick later (it would no longer keep the tick).
        let tick = 4 * MS;
        for now in [
            0,
            1,
            3 * MS,
            4 * MS - 1,
            4 * MS,
            4 * MS + 1,
            4001 * MS + 123_456,
        ] {
            let e = expiry_ns(now, DEFAULT_PERIOD.as_nanos() as u64, tick);
            assert_eq!(e % tick, 0, "armed at {now}: due at {e}, off the tick");
            assert!(e > now && e - now <= tick, "armed at {now}: due at {e}");
        }
        // Through the cluster's default keeper, on a kernel with that tick.
        let k = KeepTick::with_tick(DEFAULT_PERIOD, tick);
        assert_eq!(k.arm(|| 4001 * MS + 123_456), Some(4004 * MS));
    }

    #[test]
    fn a_shorter_period_than_the_next_tick_wins() {
        // HZ=100 (10 ms ticks) and the default 4 ms: due 4 ms ahead unless the tick is nearer.
        let tick = 10 * MS;
        let period = DEFAULT_PERIOD.as_nanos() as u64;
        assert_eq!(expiry_ns(MS, period, tick), 5 * MS);
        assert_eq!(expiry_ns(8 * MS, period, tick), 10 * MS);
        // Unknown tick: a period from now.
        assert_eq!(expiry_ns(8 * MS, period, 0), 12 * MS);
    }

    #[test]
    fn this_kernel_reports_a_tick() {
        // Linux: CLOCK_MONOTONIC_COARSE advances once a tick, HZ 100 to 1000.
        let tick = kernel_tick_ns();
        assert!((MS..=10 * MS).contains(&tick), "tick {tick} ns");
        assert!(monotonic_now_ns() > 0);
    }
}
