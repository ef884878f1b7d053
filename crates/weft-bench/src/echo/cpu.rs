//! CPU pinning and process CPU time.

use std::io;

/// Pins the calling thread (and threads it starts later) to `cpu`.
pub fn pin_current_thread(cpu: usize) -> io::Result<()> {
    // SAFETY: a zeroed cpu_set_t is empty; CPU_SET writes inside it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(
                e.kind(),
                format!("pinning to CPU {cpu}: {e}"),
            ));
        }
    }
    Ok(())
}

/// The CPU seconds a process has used (all its threads), split as the kernel counts them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CpuTimes {
    /// In user space (`utime`).
    pub user_s: f64,
    /// In the kernel on its behalf (`stime`: its system calls, and the network stack work they
    /// do, softirqs run in its context included).
    pub system_s: f64,
}

impl CpuTimes {
    pub fn total_s(&self) -> f64 {
        self.user_s + self.system_s
    }

    /// The CPU used between `earlier` and `self`.
    pub fn since(&self, earlier: &CpuTimes) -> CpuTimes {
        CpuTimes {
            user_s: self.user_s - earlier.user_s,
            system_s: self.system_s - earlier.system_s,
        }
    }
}

/// User + system CPU seconds process `pid` has used (all its threads), from `/proc/<pid>/stat`.
pub fn process_cpu_seconds(pid: u32) -> io::Result<f64> {
    Ok(process_cpu_times(pid)?.total_s())
}

/// [`process_cpu_seconds`], split into user and system time.
pub fn process_cpu_times(pid: u32) -> io::Result<CpuTimes> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    cpu_times_in_stat(&stat, hz)
}

/// The user and system times of the text of a `/proc/PID/stat`, with `hz` ticks a second.
fn cpu_times_in_stat(stat: &str, hz: f64) -> io::Result<CpuTimes> {
    // The command name (field 2) may hold spaces and parentheses; fields after its last
    // closing parenthesis are plain. utime and stime are fields 14 and 15, i.e. the 12th and
    // 13th after it.
    let rest = &stat[stat
        .rfind(')')
        .ok_or_else(|| io::Error::other("bad /proc stat"))?
        + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| -> io::Result<f64> {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .map(|t| t as f64)
            .ok_or_else(|| io::Error::other("bad /proc stat"))
    };
    Ok(CpuTimes {
        user_s: ticks(11)? / hz,
        system_s: ticks(12)? / hz,
    })
}

/// CPU seconds the calling thread has used (exact: `CLOCK_THREAD_CPUTIME_ID`).
pub fn thread_cpu_seconds() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec we own; the clock id is a constant the kernel knows.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// How many times process `pid`'s threads have gone to sleep (voluntary context switches,
/// summed over `/proc/<pid>/task/*/status`; threads that have exited are not counted).
pub fn process_sleeps(pid: u32) -> io::Result<u64> {
    let mut total = 0;
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let Ok(status) = std::fs::read_to_string(task?.path().join("status")) else {
            continue; // the thread ended while we looked
        };
        total += sleeps_in_status(&status)?;
    }
    Ok(total)
}

/// The voluntary context switches a `/proc/.../status` text reports.
fn sleeps_in_status(status: &str) -> io::Result<u64> {
    crate::process::status_field(status, "voluntary_ctxt_switches")
        .ok_or_else(|| io::Error::other("no voluntary_ctxt_switches in /proc status"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_times_split_into_user_and_system() {
        let stat = "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 95 0 0 0 250 75 0 0 20 0 1 0 \
                    100 1000 100 0";
        let t = cpu_times_in_stat(stat, 100.0).unwrap();
        assert_eq!(
            t,
            CpuTimes {
                user_s: 2.5,
                system_s: 0.75
            }
        );
        assert_eq!(t.total_s(), 3.25);
        assert!(cpu_times_in_stat("4242 (cut short) S 1 2", 100.0).is_err());
        let mine = process_cpu_times(std::process::id()).unwrap();
        assert!(mine.user_s >= 0.0 && mine.system_s >= 0.0);
    }

    #[test]
    fn a_busy_loop_shows_up_in_thread_cpu_time() {
        let start = thread_cpu_seconds();
        let t = std::time::Instant::now();
        while t.elapsed() < std::time::Duration::from_millis(20) {
            std::hint::black_box(0u64);
        }
        assert!(thread_cpu_seconds() - start >= 0.010);
    }

    #[test]
    fn a_sleeping_thread_is_counted() {
        // This thread's own count: the process total also loses the counts of the test
        // harness's other threads as they end, so it need not grow.
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() };
        let me = format!("/proc/self/task/{tid}/status");
        let mine = || sleeps_in_status(&std::fs::read_to_string(&me).unwrap()).unwrap();
        let before = mine();
        for _ in 0..3 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let after = mine();
        assert!(after >= before + 3, "{before} -> {after}");
        assert!(process_sleeps(std::process::id()).unwrap() >= after);
    }
}
