//! How long an idle processor polls its driver before it sleeps: the user-space twin of the
//! kernel's `cpuidle-haltpoll` governor.
//!
//! Why: a processor that sleeps in `io_uring_enter` is woken by an inter-processor interrupt
//! when a request arrives, and on a virtual machine that is slow. On the development VM (which
//! runs with `haltpoll.guest_halt_poll_ns=0`) the interrupt took 14 µs to reach the halted CPU
//! and the thread ran 2–7 µs after that, while the whole request took 18 µs of server time
//! (`docs/notes/scale.md`, "Waking a sleeping processor"). A processor that keeps looking at
//! its completion queue for a few tens of microseconds before it sleeps catches the next
//! request without any of that, at the cost of the CPU it spends looking.
//!
//! The window adapts as haltpoll's does ([`IdlePoll::after_idle`]): it grows (doubling, from
//! [`GROW_START_NS`] up to the configured maximum) when the processor sleeps and is woken
//! within the maximum, since a longer poll would have caught that wake-up; it halves (to 0
//! below [`GROW_START_NS`]) when it sleeps longer than the maximum, since polling then only
//! burns CPU. A processor serving a few requests a second stops polling after a few of them.
//!
//! Invariant (the sleep reserve): over every [`WINDOW_NS`] in which the processor polled, it
//! slept at least [`RESERVE_PERCENT`] of the time, or it does not poll in the next window.
//! Polling never takes the whole CPU: other threads on the core keep getting it, and a
//! processor running under a real-time policy stays well clear of the kernel's real-time
//! throttling (95 % of each second by default), which would otherwise stop it for the rest of
//! the second.

/// The window's first step up from 0 (haltpoll's `guest_halt_poll_grow_start` is 50 µs).
pub(crate) const GROW_START_NS: u64 = 10_000;
/// The span over which the sleep reserve is checked.
pub(crate) const WINDOW_NS: u64 = 10_000_000;
/// The share of each window a polling processor must have slept.
pub(crate) const RESERVE_PERCENT: u64 = 10;

/// One processor's poll window. Times are nanoseconds on one monotonic clock, passed in.
#[derive(Debug)]
pub(crate) struct IdlePoll {
    /// The largest window (0: never poll).
    max_ns: u64,
    /// The current window.
    limit_ns: u64,
    /// Start of the current reserve window.
    window_start_ns: u64,
    /// Slept since `window_start_ns`.
    slept_ns: u64,
    /// Whether polling is allowed in the current reserve window.
    allowed: bool,
}

impl IdlePoll {
    /// A window of at most `max_ns` (0 turns polling off), starting at `now_ns`.
    pub(crate) fn new(max_ns: u64, now_ns: u64) -> IdlePoll {
        IdlePoll {
            max_ns,
            limit_ns: 0,
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
        if self.allowed {
            self.limit_ns
        } else {
            0
        }
    }

    /// Reports one idle period: `idle_ns` from the start of polling (or of the sleep, if it
    /// did not poll) until work came, of which `slept_ns` asleep (0 if the poll found it).
    pub(crate) fn after_idle(&mut self, idle_ns: u64, slept_ns: u64) {
        self.slept_ns += slept_ns;
        if slept_ns == 0 {
            return;
        }
        if idle_ns > self.limit_ns && idle_ns <= self.max_ns {
            self.limit_ns = (self.limit_ns * 2).clamp(GROW_START_NS.min(self.max_ns), self.max_ns);
        } else if idle_ns > self.max_ns {
            self.limit_ns /= 2;
            if self.limit_ns < GROW_START_NS {
                self.limit_ns = 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: u64 = 50_000;

    #[test]
    fn a_disabled_poll_never_grows() {
        let mut p = IdlePoll::new(0, 0);
        assert!(!p.enabled());
        p.after_idle(5_000, 5_000);
        assert_eq!(p.limit_ns(1), 0);
    }

    #[test]
    fn short_sleeps_grow_the_window_up_to_the_maximum() {
        let mut p = IdlePoll::new(MAX, 0);
        assert_eq!(p.limit_ns(0), 0, "starts without polling");
        let mut seen = vec![];
        for _ in 0..6 {
            p.after_idle(45_000, 45_000);
            seen.push(p.limit_ns(0));
        }
        assert_eq!(seen, [10_000, 20_000, 40_000, 50_000, 50_000, 50_000]);
    }

    #[test]
    fn a_poll_that_found_work_leaves_the_window_alone() {
        let mut p = IdlePoll::new(MAX, 0);
        p.after_idle(30_000, 30_000);
        p.after_idle(30_000, 30_000);
        assert_eq!(p.limit_ns(0), 20_000);
        p.after_idle(3_000, 0);
        assert_eq!(p.limit_ns(0), 20_000);
    }

    #[test]
    fn long_sleeps_shrink_the_window_to_nothing() {
        let mut p = IdlePoll::new(MAX, 0);
        for _ in 0..4 {
            p.after_idle(45_000, 45_000);
        }
        assert_eq!(p.limit_ns(0), MAX);
        let mut seen = vec![];
        for _ in 0..3 {
            p.after_idle(5_000_000, 5_000_000);
            seen.push(p.limit_ns(0));
        }
        assert_eq!(seen, [25_000, 12_500, 0]);
    }

    #[test]
    fn a_window_without_the_sleep_reserve_turns_polling_off_for_the_next() {
        let mut p = IdlePoll::new(MAX, 0);
        for _ in 0..4 {
            p.after_idle(45_000, 45_000);
        }
        // The first window began at 0 and has 180 µs of sleep in it: 1.8 % of 10 ms.
        assert_eq!(p.limit_ns(WINDOW_NS - 1), MAX, "the window is not over yet");
        assert_eq!(
            p.limit_ns(WINDOW_NS),
            0,
            "1.8 % asleep is under the reserve"
        );
        // The next window sleeps enough (30 short sleeps, 1.35 ms): polling comes back after it.
        for _ in 0..30 {
            p.after_idle(45_000, 45_000);
        }
        assert_eq!(p.limit_ns(WINDOW_NS + 1), 0);
        assert_eq!(p.limit_ns(2 * WINDOW_NS), MAX);
    }
}
