//! What every benchmark body shares: runtimes, the start/stop flags, timing, a cheap PRNG.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Setup;

/// How long setup (spawning, getting fibers into place) may take before a benchmark gives up.
pub(super) const SETUP_TIMEOUT: Duration = Duration::from_secs(120);

/// The weft cluster a benchmark runs on: the requested processors and policy.
pub(super) fn weft_cluster(setup: &Setup) -> io::Result<weft::Cluster> {
    let mut builder = weft::Cluster::builder()
        .name("bench")
        .processors(setup.processors)
        .scheduler(setup.params.scheduler.clone());
    if let Some(bytes) = setup.params.stack_size {
        builder = builder.stack_size(bytes);
    }
    builder.build()
}

/// Spawns a benchmark fiber on `cluster`: migratable when the run asks for it
/// (`Params::migratable`), else bound to the processor that first runs it (weft's default).
pub(super) fn spawn_fiber<F, T>(setup: &Setup, cluster: &weft::Cluster, f: F) -> weft::JoinHandle<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    spawn_fiber_on(setup, cluster, None, f)
}

/// [`spawn_fiber`], placed on `processor` of `cluster` when given (`Builder::processor`).
pub(super) fn spawn_fiber_on<F, T>(
    setup: &Setup,
    cluster: &weft::Cluster,
    processor: Option<usize>,
    f: F,
) -> weft::JoinHandle<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let mut builder = weft::Builder::new().cluster(cluster);
    if let Some(index) = processor {
        builder = builder.processor(index);
    }
    if setup.params.migratable {
        // SAFETY: the benchmark bodies hold nothing thread-bound across their blocking calls:
        // no `thread_local!` (their PRNG is a value they own), no `!Send` value, only atomics,
        // semaphores and `Arc`s of the runtime's own types.
        builder = unsafe { builder.migratable() };
    }
    builder
        .spawn(f)
        .unwrap_or_else(|e| panic!("weft: cannot spawn a fiber: {e}"))
}

/// The tokio runtime a benchmark runs on: multi-thread, one worker per processor, timers on.
pub(super) fn tokio_runtime(setup: &Setup) -> io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(setup.processors)
        .thread_name("bench-tokio")
        .enable_time()
        .build()
}

/// Waits for a weft fiber's count; a panic in a fiber fails the benchmark.
pub(super) fn join_weft<T>(handle: weft::JoinHandle<T>) -> io::Result<T> {
    handle
        .join()
        .map_err(|e| io::Error::other(format!("a benchmark fiber failed: {e}")))
}

/// Sums the counts of weft fibers.
pub(super) fn sum_weft(handles: Vec<weft::JoinHandle<u64>>) -> io::Result<u64> {
    let mut total = 0;
    for h in handles {
        total += join_weft(h)?;
    }
    Ok(total)
}

/// Sums the counts of tokio tasks.
pub(super) fn sum_tokio(
    rt: &tokio::runtime::Runtime,
    handles: Vec<tokio::task::JoinHandle<u64>>,
) -> io::Result<u64> {
    rt.block_on(async move {
        let mut total = 0;
        for h in handles {
            total += h
                .await
                .map_err(|e| io::Error::other(format!("a benchmark task failed: {e}")))?;
        }
        Ok(total)
    })
}

/// The start gate and stop flag every worker watches.
///
/// Workers that must not start before the clock does wait at a gate: a semaphore of the
/// runtime being measured, opened by [`Flags::run_for`]. (A gate that polls a flag with
/// `yield_now` would make the start depend on how fairly the runtime schedules yields, and a
/// fiber left behind would change what the benchmark measures.) `stop` sits alone on its cache
/// line: every worker reads it once per operation.
pub(super) struct Flags {
    /// How many workers wait at the gate.
    waiting: usize,
    gate_weft: weft::sync::Semaphore,
    gate_tokio: tokio::sync::Semaphore,
    stop: Padded<AtomicBool>,
}

impl Flags {
    /// Flags for `waiting` workers that will wait at the gate (0 when none does).
    pub(super) fn new(waiting: usize) -> Arc<Flags> {
        Arc::new(Flags {
            waiting,
            gate_weft: weft::sync::Semaphore::new(0),
            gate_tokio: tokio::sync::Semaphore::new(0),
            stop: Padded(AtomicBool::new(false)),
        })
    }

    /// Parks the calling weft fiber until the measured interval starts.
    pub(super) fn wait_start_weft(&self) {
        // Only cancellation fails an acquire, and benchmark fibers are never cancelled.
        let _ = self.gate_weft.acquire();
    }

    /// Suspends the calling tokio task until the measured interval starts.
    pub(super) async fn wait_start_tokio(&self) {
        if let Ok(permit) = self.gate_tokio.acquire().await {
            permit.forget();
        }
    }

    /// Whether workers should stop counting and return.
    #[inline]
    pub(super) fn stopped(&self) -> bool {
        self.stop.0.load(Ordering::Relaxed)
    }

    /// Starts the clock and opens the gate, runs `on_start` (for benchmarks that inject their
    /// first tokens), lets the workers run for `duration`, sets `stop`, and returns the exact
    /// length of the interval in seconds.
    pub(super) fn run_for(&self, duration: Duration, on_start: impl FnOnce()) -> f64 {
        let start = Instant::now();
        if self.waiting > 0 {
            self.gate_weft.add_permits(self.waiting);
            self.gate_tokio.add_permits(self.waiting);
        }
        on_start();
        std::thread::sleep(duration);
        self.stop.0.store(true, Ordering::Relaxed);
        start.elapsed().as_secs_f64()
    }
}

/// Polls `counter` until it reaches `target` (setup steps that happen before the clock).
pub(super) fn wait_for_count(counter: &AtomicUsize, target: usize) -> io::Result<()> {
    let start = Instant::now();
    while counter.load(Ordering::Acquire) < target {
        if start.elapsed() > SETUP_TIMEOUT {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "only {} of {target} fibers got ready within {SETUP_TIMEOUT:?}",
                    counter.load(Ordering::Acquire)
                ),
            ));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}

/// A value alone on its cache line (128 bytes: adjacent-line prefetch pairs lines on x86).
#[repr(align(128))]
pub(super) struct Padded<T>(pub(super) T);

/// xorshift64*: a few cycles per number, good enough to pick semaphores and leaders.
pub(super) struct Rng(u64);

impl Rng {
    pub(super) fn new(seed: u64) -> Rng {
        // splitmix64 of the seed, so consecutive seeds give unrelated streams; never zero.
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        Rng((z ^ (z >> 31)) | 1)
    }

    pub(super) fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..n` (`n > 0`), by multiply-shift (no division).
    pub(super) fn below(&mut self, n: usize) -> usize {
        (((self.next_u64() >> 32) * n as u64) >> 32) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rng_stays_in_range_and_varies() {
        let mut r = Rng::new(7);
        let mut seen = [false; 10];
        for _ in 0..1000 {
            let v = r.below(10);
            seen[v] = true;
        }
        assert!(seen.iter().all(|&s| s));
        assert_eq!(Rng::new(1).below(1), 0);
    }
}
