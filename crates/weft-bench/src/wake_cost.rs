//! What one wake-up costs the thread that wakes, in CPU time, on this machine: woken by its own
//! timer, or woken by a thread on another CPU.
//!
//! Why it is measured: an open-loop load generator wakes by timer at each send time, while the
//! server it drives is woken by the generator's requests. When a timer wake costs more CPU than
//! a request does (as on a nested VM, where arming and taking a timer interrupt exit to the
//! host), the generator's CPU per request cannot fall below the server's at low rates,
//! whatever the generator does; `weft bench load` prints these figures next to that ratio.
//!
//! Invariants: CPU time is the waking thread's own (`CLOCK_THREAD_CPUTIME_ID`, exact), taken
//! over whole wake cycles (sleep + wake + return); the timer thread sets its timer slack to
//! 1 ns so the kernel does not defer the wake; every thread is pinned and joined before the
//! figures return.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::echo::cpu::{pin_current_thread, thread_cpu_seconds};

/// Wake cycles per measurement: ~0.2 s each at the default gap.
const WAKES: u32 = 2_000;
/// Time between wakes: long enough for the CPU to go idle in between.
const GAP: Duration = Duration::from_micros(100);

/// The figures, per wake-up.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct WakeCost {
    /// CPU time of one sleep + wake on a timer (`nanosleep`), µs.
    pub timer_wake_cpu_us: f64,
    /// How late the timer wake came, on average, µs.
    pub timer_wake_late_us: f64,
    /// CPU time of one sleep + wake by a thread on another CPU (a futex wake), µs.
    pub remote_wake_cpu_us: f64,
}

/// Measures both costs for a thread on `cpu`; the remote waker runs on `other`.
pub fn measure(cpu: usize, other: usize) -> io::Result<WakeCost> {
    let (timer_wake_cpu_us, timer_wake_late_us) = on_thread(move || {
        pin_current_thread(cpu)?;
        timer_wakes()
    })?;
    let remote_wake_cpu_us = remote_wakes(cpu, other)?;
    Ok(WakeCost {
        timer_wake_cpu_us,
        timer_wake_late_us,
        remote_wake_cpu_us,
    })
}

/// CPU µs per timer wake and the mean lateness in µs, on the calling thread.
fn timer_wakes() -> io::Result<(f64, f64)> {
    // SAFETY: PR_SET_TIMERSLACK takes an unsigned long and affects only this thread.
    if unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let cpu_start = thread_cpu_seconds();
    let mut late = Duration::ZERO;
    for _ in 0..WAKES {
        let due = Instant::now() + GAP;
        std::thread::sleep(GAP);
        late += Instant::now().saturating_duration_since(due);
    }
    let cpu = thread_cpu_seconds() - cpu_start;
    Ok((per_wake_us(cpu), per_wake_us(late.as_secs_f64())))
}

/// CPU µs per wake of a thread on `cpu` that a thread on `other` wakes every [`GAP`].
fn remote_wakes(cpu: usize, other: usize) -> io::Result<f64> {
    let woken = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let sleeper = {
        let (woken, done) = (woken.clone(), done.clone());
        std::thread::Builder::new()
            .name("wake-cost".into())
            .spawn(move || -> io::Result<f64> {
                pin_current_thread(cpu)?;
                let start = thread_cpu_seconds();
                while !done.load(Ordering::Acquire) {
                    std::thread::park();
                    woken.fetch_add(1, Ordering::Release);
                }
                Ok(thread_cpu_seconds() - start)
            })?
    };
    let waker = on_thread({
        let thread = sleeper.thread().clone();
        let done = done.clone();
        move || -> io::Result<()> {
            pin_current_thread(other)?;
            for _ in 0..WAKES {
                std::thread::sleep(GAP);
                thread.unpark();
            }
            done.store(true, Ordering::Release);
            thread.unpark();
            Ok(())
        }
    });
    let cpu_time = sleeper
        .join()
        .map_err(|_| io::Error::other("wake-cost sleeper panicked"))??;
    waker?;
    let wakes = woken.load(Ordering::Acquire).max(1);
    Ok(cpu_time * 1e6 / wakes as f64)
}

/// Runs `f` on a fresh thread (so pinning and timer slack do not leak to the caller).
fn on_thread<T: Send + 'static>(
    f: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> io::Result<T> {
    std::thread::Builder::new()
        .name("wake-cost".into())
        .spawn(f)?
        .join()
        .map_err(|_| io::Error::other("wake-cost thread panicked"))?
}

fn per_wake_us(seconds: f64) -> f64 {
    seconds * 1e6 / f64::from(WAKES)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_wakes_are_measured_and_plausible() {
        // Pinning needs both CPUs; on a one-CPU machine the two threads share it.
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let other = if cpus > 1 { 1 } else { 0 };
        let cost = measure(0, other).expect("measure");
        // Every wake costs something, and less than the whole gap it slept through plus its
        // lateness (a wake cannot take more CPU than the wall time it spans).
        for us in [cost.timer_wake_cpu_us, cost.remote_wake_cpu_us] {
            assert!(us > 0.0, "{cost:?}");
        }
        let span = GAP.as_secs_f64() * 1e6 + cost.timer_wake_late_us;
        assert!(cost.timer_wake_cpu_us <= span * 1.05, "{cost:?}");
        assert!(cost.timer_wake_late_us >= 0.0, "{cost:?}");
    }
}
