//! The generator's own CPU use: process CPU time and the number of cores it may run on.

use std::io;
use std::time::Duration;

/// This process's resource usage so far (all threads).
fn usage() -> libc::rusage {
    // SAFETY: getrusage writes into the zeroed struct we own; RUSAGE_SELF is always valid.
    unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    }
}

/// User + system CPU time of this process so far (all threads).
pub fn process_cpu_time() -> Duration {
    let usage = usage();
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// How many times this process's threads have gone to sleep so far (voluntary context
/// switches): each is a wake-up to pay for later.
pub fn process_sleeps() -> u64 {
    usage().ru_nvcsw as u64
}

/// How many CPUs this process may run on (its affinity mask).
pub fn allowed_cpus() -> io::Result<usize> {
    Ok(allowed_cpu_ids()?.len())
}

/// The CPUs this process may run on (its affinity mask), lowest first.
pub fn allowed_cpu_ids() -> io::Result<Vec<usize>> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; sched_getaffinity fills it.
    let set = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Err(io::Error::last_os_error());
        }
        set
    };
    let bits = 8 * std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: `CPU_ISSET` reads one bit of the set we own; every index is below its size.
    Ok((0..bits)
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect())
}

/// Share of the cores available to `threads` busy threads that `cpu` used over `wall`.
pub fn utilisation(cpu: Duration, wall: Duration, threads: usize) -> f64 {
    let cores = allowed_cpus().unwrap_or(threads).min(threads).max(1);
    cpu.as_secs_f64() / (wall.as_secs_f64() * cores as f64).max(1e-9)
}

/// A run whose generator used more than this share of its cores may have measured the
/// generator, not the server.
pub const SATURATED: f64 = 0.90;

/// `generator: …` line of a report, with the saturation warning when it applies.
pub fn human_generator_line(threads: usize, cpu_us_per_request: f64, utilisation: f64) -> String {
    let mut s = format!(
        "generator: {threads} thread(s), {cpu_us_per_request:.2} us CPU per request, {:.0}% busy",
        utilisation * 100.0
    );
    if utilisation > SATURATED {
        s.push_str("\nwarning: the generator's own cores were saturated; add --threads or cores, the server may be faster than measured");
    }
    s
}

/// Runs `f` as a fiber on a new cluster of `threads` processors named `name`, whose idle
/// processors poll for up to `idle_poll` before they sleep (`weft::ClusterBuilder::idle_poll`;
/// zero: sleep at once), and shuts the cluster down after it returns.
pub fn run_on_own_cluster<T: Send + 'static>(
    name: &str,
    threads: usize,
    idle_poll: Duration,
    f: impl FnOnce() -> anyhow::Result<T> + Send + 'static,
) -> anyhow::Result<T> {
    use anyhow::Context;
    let cluster = weft::Cluster::builder()
        .name(name)
        .processors(threads)
        .idle_poll(idle_poll)
        .build()
        .context("starting the generator's weft cluster")?;
    let result = cluster
        .spawn(f)
        .join()
        .map_err(|e| anyhow::anyhow!("generator fiber failed: {e}"))?;
    cluster.shutdown();
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sleeps_are_counted() {
        let before = process_sleeps();
        for _ in 0..3 {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(process_sleeps() >= before + 3);
    }

    #[test]
    fn busy_loop_shows_up_in_cpu_time() {
        let before = process_cpu_time();
        let start = std::time::Instant::now();
        let mut x = 0u64;
        while start.elapsed() < Duration::from_millis(50) {
            x = x.wrapping_add(std::hint::black_box(1));
        }
        assert!(x > 0);
        assert!(process_cpu_time() - before >= Duration::from_millis(20));
        assert!(allowed_cpus().unwrap() >= 1);
    }
}
