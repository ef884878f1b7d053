//! The kernel's coarse clocks (`CLOCK_REALTIME_COARSE`, `CLOCK_MONOTONIC_COARSE`): the time of
//! the last tick, read from the vDSO without reading the time-stamp counter. For figures that
//! a tick's lag cannot hurt: the cache's item clock (`weft-cache`'s `store::clock`), the HTTP
//! server's `Date` header and its open-file cache's checks (once a second, or once a window
//! of milliseconds). A precise reading costs
//! about 50 ns here, several a request when a server reads one per figure
//! (`docs/notes/scale.md`).
//!
//! Invariant: a coarse reading is at most one tick (1–10 ms) behind the precise clock of the
//! same kind; the monotonic one never goes back.

/// Seconds since the epoch, as of the last tick.
pub fn realtime_secs() -> u64 {
    read(libc::CLOCK_REALTIME_COARSE).tv_sec as u64
}

/// Seconds on the monotonic clock (since an unspecified start), as of the last tick.
pub fn monotonic_secs() -> u64 {
    read(libc::CLOCK_MONOTONIC_COARSE).tv_sec as u64
}

/// Nanoseconds on the monotonic clock (since an unspecified start), as of the last tick.
pub fn monotonic_ns() -> u64 {
    let ts = read(libc::CLOCK_MONOTONIC_COARSE);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn read(clock: libc::clockid_t) -> libc::timespec {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; both clock ids exist on every Linux since
    // 2.6.32, so the call cannot fail (a failure would leave 0, a time in the past).
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{SystemTime, UNIX_EPOCH};

    #[test]
    fn coarse_seconds_are_within_a_tick_of_the_precise_clocks() {
        // The coarse reading first: it is behind the precise one read after it, by under a
        // second (a second boundary may fall between the two).
        let coarse = realtime_secs();
        let precise = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs();
        assert!(
            coarse <= precise && precise <= coarse + 1,
            "{coarse} {precise}"
        );
        let a = monotonic_secs();
        std::thread::sleep(std::time::Duration::from_millis(1100));
        let b = monotonic_secs();
        assert!(b > a, "{a} then {b} after 1.1 s");
    }
}
