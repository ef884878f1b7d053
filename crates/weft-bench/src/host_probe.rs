//! What the host is giving this VM at the moment of a run: the CPU 0 ↔ CPU 1 cache-line round
//! trip and the cost of one system call on CPU 0, printed at the head of a comparison so that
//! each record says which host phase it ran in.
//!
//! Why: on this 2-vCPU guest both move while the machine runs, and the comparisons move with
//! them. The capped cache peak (the scale issue's item 4) read 1.24–1.41× memcached's in one
//! phase and 1.02–1.23× in another with no change of code (`docs/notes/scale.md`): memcached
//! makes about one system call for every two requests there and weft one for every twenty-four,
//! so the price of a system call is part of what the ratio measures.
//!
//! The system call is `getppid`, which does nothing but enter and leave the kernel. The figure
//! is the median of short batches, so an interrupt or a steal inside one batch does not move
//! it.

use std::time::{Duration, Instant};

use crate::sched::core_probe;

/// Calls per timed batch.
const BATCH: u32 = 2_000;
/// How long the system-call probe runs in all.
const PROBE_TIME: Duration = Duration::from_millis(40);

/// One look at the host.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Host {
    /// CPU 0 ↔ CPU 1 cache-line round trip in ns ([`core_probe::round_trip_ns`]); `None` when
    /// the two CPUs cannot be pinned.
    pub core_round_trip_ns: Option<f64>,
    /// One `getppid` on CPU 0 in ns; `None` when the probe cannot be pinned there.
    pub syscall_ns: Option<f64>,
}

impl Host {
    /// Probes both, the round trip first.
    pub fn probe() -> Host {
        Host {
            core_round_trip_ns: core_probe::round_trip_ns(0, 1),
            syscall_ns: syscall_ns(0),
        }
    }

    /// The line a comparison prints: `host: CPU 0 <-> CPU 1 cache-line round trip 140 ns; a
    /// system call on CPU 0 108 ns`.
    pub fn line(&self) -> String {
        let ns = |v: Option<f64>| v.map_or_else(|| "unknown".to_owned(), |v| format!("{v:.0} ns"));
        format!(
            "host: CPU 0 <-> CPU 1 cache-line round trip {}; a system call on CPU 0 {}",
            ns(self.core_round_trip_ns),
            ns(self.syscall_ns)
        )
    }
}

/// The median cost in ns of one `getppid` on `cpu`, from a thread pinned there; `None` when it
/// cannot be pinned (no such CPU, or a restricted affinity mask).
pub fn syscall_ns(cpu: usize) -> Option<f64> {
    std::thread::Builder::new()
        .name("syscall-probe".to_owned())
        .spawn(move || {
            if !core_probe::pin_to(cpu) {
                return None;
            }
            let mut batches = Vec::new();
            let start = Instant::now();
            while start.elapsed() < PROBE_TIME || batches.len() < 5 {
                let t = Instant::now();
                for _ in 0..BATCH {
                    // SAFETY: getppid takes no arguments and cannot fail.
                    unsafe { libc::syscall(libc::SYS_getppid) };
                }
                batches.push(t.elapsed().as_secs_f64() * 1e9 / f64::from(BATCH));
            }
            batches.sort_by(f64::total_cmp);
            Some(batches[batches.len() / 2])
        })
        .ok()?
        .join()
        .ok()
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_system_call_is_timed_on_cpu_0_and_a_missing_cpu_is_refused() {
        let ns = syscall_ns(0).expect("CPU 0 can be probed");
        assert!(ns > 1.0 && ns < 1e5, "{ns} ns");
        assert_eq!(syscall_ns(libc::CPU_SETSIZE as usize), None);
    }

    #[test]
    fn the_line_names_both_figures_or_says_they_are_unknown() {
        let host = Host {
            core_round_trip_ns: Some(140.4),
            syscall_ns: None,
        };
        assert_eq!(
            host.line(),
            "host: CPU 0 <-> CPU 1 cache-line round trip 140 ns; a system call on CPU 0 unknown"
        );
    }
}
