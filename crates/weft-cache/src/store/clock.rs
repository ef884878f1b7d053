//! memcached's clock: `current_time` counts seconds from a start 62 seconds before the server
//! started (`process_started = time(0) - ITEM_UPDATE_INTERVAL - 2`), so that relative times
//! are never zero; expiry times are kept on this scale.
//!
//! Read from `CLOCK_MONOTONIC_COARSE`: whole seconds need no more than the kernel tick's
//! resolution, and every read of a batch of requests paid the precise clock (25 ns or more
//! here, against 6.5) where memcached reads a variable its timer updates once a second.

use std::time::{SystemTime, UNIX_EPOCH};

/// memcached's `REALTIME_MAXDELTA`: exptimes up to 30 days are relative, beyond are unix times.
pub const REALTIME_MAXDELTA_SECS: i64 = 60 * 60 * 24 * 30;
/// memcached's `ITEM_UPDATE_INTERVAL`: an item's access time is refreshed at most this often.
pub const ITEM_UPDATE_INTERVAL_SECS: u32 = 60;
const START_OFFSET_SECS: u32 = ITEM_UPDATE_INTERVAL_SECS + 2;

/// Seconds since the (shifted) start, and the unix time of that start.
#[derive(Debug)]
pub struct Clock {
    /// `CLOCK_MONOTONIC_COARSE` at the start, in ns.
    started_ns: u64,
    /// memcached's `process_started`.
    process_started_unix: i64,
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock {
    pub fn new() -> Clock {
        let unix = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        Clock {
            started_ns: weft::coarse_clock::monotonic_ns(),
            process_started_unix: unix - i64::from(START_OFFSET_SECS),
        }
    }

    /// memcached's `current_time`.
    pub fn now(&self) -> u32 {
        let elapsed_ns = weft::coarse_clock::monotonic_ns().saturating_sub(self.started_ns);
        START_OFFSET_SECS + (elapsed_ns / 1_000_000_000) as u32
    }

    /// The unix time of `now()` (stats `time`).
    pub fn unix_now(&self) -> i64 {
        self.process_started_unix + i64::from(self.now())
    }

    /// The unix time of an instant on this clock's scale (`stats cachedump` expiries).
    pub fn unix_of(&self, t: u32) -> i64 {
        self.process_started_unix + i64::from(t)
    }

    /// Seconds since the server started (stats `uptime`).
    pub fn uptime(&self) -> u32 {
        self.now() - START_OFFSET_SECS
    }

    /// memcached's `realtime(EXPTIME_TO_POSITIVE_TIME(exptime))`: a client exptime to the
    /// internal scale; 0 = never, negative = already expired.
    pub fn exptime(&self, exptime: i32, now: u32) -> u32 {
        let exptime = if exptime < 0 {
            REALTIME_MAXDELTA_SECS + 1
        } else {
            i64::from(exptime)
        };
        self.realtime(exptime, now)
    }

    /// memcached's `realtime`.
    pub fn realtime(&self, exptime: i64, now: u32) -> u32 {
        if exptime == 0 {
            return 0;
        }
        if exptime > REALTIME_MAXDELTA_SECS {
            if exptime <= self.process_started_unix {
                return 1;
            }
            return (exptime - self.process_started_unix) as u32;
        }
        (exptime + i64::from(now)) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_follow_the_monotonic_clock() {
        let c = Clock::new();
        assert_eq!(c.uptime(), 0);
        let start = std::time::Instant::now();
        let before = c.now();
        std::thread::sleep(std::time::Duration::from_millis(1100));
        let after = c.now();
        // The coarse clock trails the precise one by at most a tick, far under a second.
        assert!(
            (1..=2).contains(&(after - before)),
            "{before} -> {after} over {:?}",
            start.elapsed()
        );
    }

    #[test]
    fn expiry_rules() {
        let c = Clock::new();
        let now = c.now();
        assert_eq!(c.exptime(0, now), 0);
        assert_eq!(c.exptime(10, now), now + 10);
        assert_eq!(c.exptime(-1, now), 1, "negative is already expired");
        let abs = c.unix_now() + 100;
        assert_eq!(c.exptime(abs as i32, now), now + 100);
        assert_eq!(
            c.exptime(REALTIME_MAXDELTA_SECS as i32, now),
            now + 2_592_000
        );
    }
}
