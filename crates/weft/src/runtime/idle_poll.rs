//! Whether an idle processor polls its driver before it sleeps, and for how long: the
//! user-space counterpart of the kernel's `cpuidle-haltpoll` (which polls before a virtual
//! CPU halts).
//!
//! Why: a processor that sleeps in `io_uring_enter` is woken by an inter-processor interrupt
//! when a request arrives, and on a virtual machine that is slow. On the development VM (which
//! runs with `haltpoll.guest_halt_poll_ns=0`) the interrupt took 14 µs to reach the halted CPU
//! and the thread ran 2–7 µs after that, while the whole request took 18 µs of server time
//! (`docs/notes/scale.md`, "Waking a sleeping processor"). A processor that keeps looking at
//! its completion queue for a few tens of microseconds before it sleeps catches the next
//! request without any of that, at the cost of the CPU it spends looking.
//!
//! The window is all or nothing, chosen by how idle periods have been ending lately
//! ([`IdlePoll::limit_ns`]): the processor keeps a running share of its recent idle periods
//! (an average over about [`HIT_WEIGHT`] of them) that ended within the configured maximum,
//! whether it polled through them or slept, and polls for the whole maximum while at least
//! [`POLL_AT_PERCENT`] of them did. So polling pays when it runs: at least every other poll
//! finds work, and a processor serving a few requests a second stops polling after a few of
//! them. A step-by-step window like haltpoll's (double on a short sleep, halve on a long
//! one) was measured first and did not hold: under Poisson arrivals every third gap is longer
//! than 50 µs, each halved the window, and it spent most of its time near 0
//! (`docs/notes/scale.md`).
//!
//! Invariant (the sleep reserve): over every [`WINDOW_NS`] in which the processor polled, it
//! slept at least [`RESERVE_PERCENT`] of the time, or it does not poll in the next window.
//! Polling never takes the whole CPU: other threads on the core keep getting it, and a
//! processor running under a real-time policy stays well clear of the kernel's real-time
//! throttling (95 % of each second by default), which would otherwise stop it for the rest of
//! the second.

use std::time::Duration;

/// The poll window a cluster gets unless it asks for another (`ClusterBuilder::idle_poll`):
/// none. Polling is for hosts where waking a sleeping thread is slow (virtual machines); it
/// buys a lower latency at a quarter of the load with up to a third of a core, and
/// docs/notes/scale.md ("A window that polls while it pays", "Polling on top of the keeper",
/// "The table with polling beside it", and on a guest that halts at once "The runtime's idle
/// poll in four tables": 0.89 of the defaults' p99 at a quarter and half of the peak, not
/// beyond chance in 96 rounds, at 1.18× their CPU) has the measurements that keep it off by
/// default.
pub const DEFAULT_MAX: Duration = Duration::ZERO;
/// The longest poll window a cluster may ask for.
pub const MAX_MAX: Duration = Duration::from_millis(1);

/// The running share averages over about this many idle periods (a power of two).
pub(crate) const HIT_WEIGHT: u32 = 16;
/// The processor polls while at least this share of recent idle periods ended within the
/// maximum window.
pub(crate) const POLL_AT_PERCENT: u32 = 50;
/// The span over which the sleep reserve is checked.
pub(crate) const WINDOW_NS: u64 = 10_000_000;
/// The share of each window a polling processor must have slept.
pub(crate) const RESERVE_PERCENT: u64 = 10;

/// Fixed-point 1.0 for the running share.
const ONE: u32 = 1 << 16;

/// One processor's poll window. Times are nanoseconds on one monotonic clock, passed in.
#[derive(Debug)]
pub(crate) struct IdlePoll {
    /// The window (0: never poll).
    max_ns: u64,
    /// Running share of recent idle periods that ended within `max_ns`, out of [`ONE`].
    hits: u32,
    /// Start of the current reserve window.
    window_start_ns: u64,
    /// Slept since `window_start_ns`.
    slept_ns: u64,
    /// Whether polling is allowed in the current reserve window.
    allowed: bool,
}

impl IdlePoll {
    /// A window of `max_ns` (0 turns polling off), starting at `now_ns` without polling.
    pub(crate) fn new(max_ns: u64, now_ns: u64) -> IdlePoll {
        IdlePoll {
            max_ns,
            hits: 0,
            window_start_ns: now_ns,
            slept_ns: 0,
            allowed: true,
        }
    }

    /// Whether this processor polls at all.
    pub(crate) fn enabled(&self) -> bool {
        self.max_ns > 0
    }

    /// How long to poll before sleeping now (0: sleep at once).
    pub(crate) fn limit_ns(&mut self, now_ns: u64) -> u64 {
        let span = now_ns.saturating_sub(self.window_start_ns);
        if span >= WINDOW_NS {
            self.allowed = self.slept_ns * 100 >= span * RESERVE_PERCENT;
            self.window_start_ns = now_ns;
            self.slept_ns = 0;
        }
        if self.allowed && self.hits as u64 * 100 >= ONE as u64 * POLL_AT_PERCENT as u64 {
            self.max_ns
        } else {
            0
        }
    }

    /// Reports an idle period that a poll ended: it ended within the window.
    pub(crate) fn found_while_polling(&mut self) {
        self.record(true);
    }

    /// Reports an idle period that ended in a sleep: `idle_ns` from the start of polling (or
    /// of the sleep, if it did not poll) until work came, of which `slept_ns` asleep.
    pub(crate) fn after_sleep(&mut self, idle_ns: u64, slept_ns: u64) {
        self.slept_ns += slept_ns;
        self.record(idle_ns <= self.max_ns);
    }

    fn record(&mut self, hit: bool) {
        let target = if hit { ONE } else { 0 };
        // hits += (target - hits) / HIT_WEIGHT, in integers.
        self.hits = self.hits - self.hits / HIT_WEIGHT + target / HIT_WEIGHT;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: u64 = 50_000;

    /// The windows after each of `n` sleeps of `idle_ns`.
    fn after_sleeps(p: &mut IdlePoll, n: usize, idle_ns: u64) -> Vec<u64> {
        (0..n)
            .map(|_| {
                p.after_sleep(idle_ns, idle_ns);
                p.limit_ns(0)
            })
            .collect()
    }

    #[test]
    fn a_disabled_poll_never_polls() {
        let mut p = IdlePoll::new(0, 0);
        assert!(!p.enabled());
        after_sleeps(&mut p, 40, 0);
        assert_eq!(p.limit_ns(1), 0);
    }

    #[test]
    fn polling_starts_once_half_the_recent_idle_periods_were_short() {
        let mut p = IdlePoll::new(MAX, 0);
        assert_eq!(p.limit_ns(0), 0, "starts without polling");
        let seen = after_sleeps(&mut p, 12, 45_000);
        // 1 - (15/16)^n reaches one half at the 11th period.
        assert_eq!(seen[..10], [0; 10]);
        assert_eq!(seen[10..], [MAX, MAX], "then the whole window");
    }

    #[test]
    fn polls_that_find_work_keep_it_polling() {
        let mut p = IdlePoll::new(MAX, 0);
        after_sleeps(&mut p, 30, 45_000);
        for _ in 0..1_000 {
            p.found_while_polling();
        }
        assert_eq!(p.limit_ns(0), MAX);
    }

    #[test]
    fn poisson_gaps_keep_it_polling_where_a_halving_window_would_collapse() {
        // Gaps of a third over the window and two thirds under it, interleaved as Poisson
        // arrivals at a quarter of a core would give them: the share stays near two thirds.
        let mut p = IdlePoll::new(MAX, 0);
        after_sleeps(&mut p, 30, 45_000);
        for i in 0..3_000 {
            if i % 3 == 0 {
                p.after_sleep(120_000, 70_000);
            } else {
                p.found_while_polling();
            }
            assert_eq!(p.limit_ns(0), MAX, "period {i}");
        }
    }

    #[test]
    fn long_sleeps_stop_the_polling() {
        let mut p = IdlePoll::new(MAX, 0);
        after_sleeps(&mut p, 40, 45_000);
        assert_eq!(p.limit_ns(0), MAX);
        let seen = after_sleeps(&mut p, 12, 5_000_000);
        assert_eq!(seen[..9], [MAX; 9], "one long sleep does not end it");
        assert_eq!(seen[11], 0, "a run of them does");
    }

    #[test]
    fn a_window_without_the_sleep_reserve_turns_polling_off_for_the_next() {
        let mut p = IdlePoll::new(MAX, 0);
        // 40 short sleeps: 1.8 ms asleep in the first window, 18 %.
        after_sleeps(&mut p, 40, 45_000);
        assert_eq!(p.limit_ns(WINDOW_NS), MAX, "18 % asleep keeps the reserve");
        // The next window polls through everything and sleeps 4 times: 0.18 % asleep.
        for _ in 0..200 {
            p.found_while_polling();
        }
        after_sleeps(&mut p, 4, 45_000);
        assert_eq!(
            p.limit_ns(2 * WINDOW_NS - 1),
            MAX,
            "the window is not over yet"
        );
        assert_eq!(
            p.limit_ns(2 * WINDOW_NS),
            0,
            "0.18 % asleep is under the reserve"
        );
        // Sleeping enough in the window after brings polling back.
        after_sleeps(&mut p, 30, 45_000);
        assert_eq!(p.limit_ns(3 * WINDOW_NS), MAX);
    }
}
