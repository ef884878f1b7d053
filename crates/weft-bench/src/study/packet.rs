//! Packet processing: spawners copy one of [`PACKETS`] pre-made 2–3 KiB packets and spawn a
//! handler task per copy; the handler scans its packet for newlines (plus `--work-ns` of extra
//! work) and records its spawn → completion latency.
//!
//! The spawners respect a bound of `--max-in-flight` (default [`MAX_IN_FLIGHT`]) outstanding handlers, like a NIC ring
//! that fills: when it is reached a spawner yields and tries again, and each try counts as a
//! retry (`retries` in the results). Throughput is packets per second over the whole run.
//!
//! Why schedulers differ here: with one spawner the queue is a long FIFO stream of short
//! tasks. A policy that runs the newest task first keeps the copy hot in cache but makes old
//! handlers wait (tail latency); one that serves a shared queue only now and then (the
//! work-stealing inject check every 61 ticks) delays whatever lands there.

use std::io;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Instant;

use super::latency::Latencies;
use super::{busy_work, Outcome, Params, Runtime, Study};

/// How many distinct packets the spawners copy from.
pub const PACKETS: usize = 10;

/// Outstanding handlers allowed before spawners back off, by default (`--max-in-flight`).
///
/// By Little's law the queueing delay is about this bound over the throughput, so it sets the
/// latency scale. 1024 is deep enough that the queue outgrows the caches in `packet-cache`
/// (16 MiB of buffers) and shallow enough that finished fibers' stacks are reused (weft pools
/// 4096) instead of each spawn mapping a fresh one; the study used 128-slot local queues.
pub const MAX_IN_FLIGHT: usize = 1024;

/// What a handler does with its packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handler {
    /// Count newlines front to back (the prefetcher's favourite).
    Scan,
    /// Walk a 16 KiB buffer by a large prime stride (see `packet_cache`).
    Strided,
}

/// The pre-made packets: printable bytes with a newline every 20–100 bytes, 2–3 KiB long.
pub fn make_packets() -> Vec<Vec<u8>> {
    let mut x: u64 = 0x5eed_1234_abcd_ef01;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    (0..PACKETS)
        .map(|_| {
            let len = 2048 + (next() % 1024) as usize;
            let mut p = Vec::with_capacity(len);
            let mut until_newline = 20 + next() % 80;
            while p.len() < len {
                if until_newline == 0 {
                    p.push(b'\n');
                    until_newline = 20 + next() % 80;
                } else {
                    p.push(b' ' + (next() % 94) as u8);
                    until_newline -= 1;
                }
            }
            p
        })
        .collect()
}

/// The handler's work on its copy: newlines counted (scan or strided walk) plus busy work.
pub(crate) fn handle(buf: &[u8], handler: Handler, work_ns: u64) -> u64 {
    let lines = match handler {
        Handler::Scan => buf.iter().filter(|&&b| b == b'\n').count() as u64,
        Handler::Strided => super::packet_cache::strided_newlines(buf),
    };
    busy_work(work_ns, lines);
    lines
}

/// The copy a spawner makes for packet `i`.
pub(crate) fn copy_for(packets: &[Vec<u8>], i: u64, handler: Handler) -> Vec<u8> {
    let p = &packets[(i % PACKETS as u64) as usize];
    match handler {
        Handler::Scan => p.clone(),
        Handler::Strided => super::packet_cache::widen(p),
    }
}

/// What every handler and spawner shares.
struct Shared {
    packets: Vec<Vec<u8>>,
    handler: Handler,
    work_ns: u64,
    total: u64,
    max_in_flight: usize,
    in_flight: AtomicUsize,
    retries: AtomicU64,
    done: AtomicU64,
    /// Sum of newline counts, so the work cannot be optimised away (and is checked).
    lines: AtomicU64,
    latencies: Latencies,
    finished: Finished,
}

impl Shared {
    fn new(params: &Params, handler: Handler, total: u64) -> (Arc<Shared>, mpsc::Receiver<()>) {
        let (tx, rx) = mpsc::channel();
        let shared = Arc::new(Shared {
            packets: make_packets(),
            handler,
            work_ns: params.work_ns,
            total,
            max_in_flight: params.max_in_flight,
            in_flight: AtomicUsize::new(0),
            retries: AtomicU64::new(0),
            done: AtomicU64::new(0),
            lines: AtomicU64::new(0),
            latencies: Latencies::new(total as usize),
            finished: Finished::new(tx),
        });
        (shared, rx)
    }

    /// Whether the bound lets another handler start; counts a retry when not.
    fn room(&self) -> bool {
        if self.in_flight.load(Ordering::Relaxed) < self.max_in_flight {
            self.in_flight.fetch_add(1, Ordering::Relaxed);
            true
        } else {
            self.retries.fetch_add(1, Ordering::Relaxed);
            false
        }
    }

    /// The handler body for packet `i`, spawned at `since`.
    fn complete(&self, i: u64, buf: &[u8], since: Instant) {
        let lines = handle(buf, self.handler, self.work_ns);
        self.lines.fetch_add(lines, Ordering::Relaxed);
        self.latencies.record(i as usize, since);
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
        if self.done.fetch_add(1, Ordering::AcqRel) + 1 == self.total {
            self.finished.signal();
        }
    }

    /// The packet indices spawner `s` of `n` handles.
    fn share(&self, s: usize, n: usize) -> impl Iterator<Item = u64> {
        (s as u64..self.total).step_by(n)
    }
}

/// Runs the packet benchmark with `handler` (`packet` or `packet-cache`).
pub fn run(params: &Params, handler: Handler) -> io::Result<Outcome> {
    let study = match handler {
        Handler::Scan => Study::Packet,
        Handler::Strided => Study::PacketCache,
    };
    let total = params.tasks_for(study);
    let (shared, finished) = Shared::new(params, handler, total);
    let spawners = params.spawners;
    let started = Instant::now();
    match params.runtime {
        Runtime::Weft => {
            let cluster = params.cluster("study-packet")?;
            for s in 0..spawners {
                let shared = shared.clone();
                drop(cluster.spawn(move || {
                    for i in shared.share(s, spawners) {
                        while !shared.room() {
                            weft::yield_now();
                        }
                        let buf = copy_for(&shared.packets, i, shared.handler);
                        let since = Instant::now();
                        let shared = shared.clone();
                        drop(weft::spawn(move || shared.complete(i, &buf, since)));
                    }
                }));
            }
            wait(&finished, total)?;
            cluster.shutdown();
        }
        Runtime::Tokio => {
            let rt = params.tokio()?;
            for s in 0..spawners {
                let shared = shared.clone();
                drop(rt.spawn(async move {
                    for i in shared.share(s, spawners) {
                        while !shared.room() {
                            tokio::task::yield_now().await;
                        }
                        let buf = copy_for(&shared.packets, i, shared.handler);
                        let since = Instant::now();
                        let shared = shared.clone();
                        drop(tokio::spawn(async move { shared.complete(i, &buf, since) }));
                    }
                }));
            }
            wait(&finished, total)?;
            rt.shutdown_background();
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    debug_assert_eq!(shared.latencies.recorded() as u64, total);
    Ok(Outcome::new(
        study,
        params,
        total,
        seconds,
        shared.latencies.percentiles(),
    )
    .with("retries", shared.retries.load(Ordering::Relaxed))
    .with("spawners", spawners as u64)
    .with("work_ns", params.work_ns)
    .with("newlines", shared.lines.load(Ordering::Relaxed)))
}

/// The one-shot signal the last task of a run sends to [`wait`].
pub(crate) struct Finished(std::sync::Mutex<Option<mpsc::Sender<()>>>);

impl Finished {
    pub(crate) fn new(tx: mpsc::Sender<()>) -> Finished {
        Finished(std::sync::Mutex::new(Some(tx)))
    }

    /// Sends the signal; calls after the first do nothing.
    pub(crate) fn signal(&self) {
        let tx = self.0.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(tx) = tx {
            let _ = tx.send(());
        }
    }
}

/// Blocks the calling thread until the last handler reports.
pub(crate) fn wait(finished: &mpsc::Receiver<()>, total: u64) -> io::Result<()> {
    if total == 0 {
        return Ok(());
    }
    finished
        .recv()
        .map_err(|_| io::Error::other("the benchmark ended before every packet was handled"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packets_are_2_to_3_kib_with_newlines() {
        let packets = make_packets();
        assert_eq!(packets.len(), PACKETS);
        for p in &packets {
            assert!((2048..3072).contains(&p.len()), "{}", p.len());
            let lines = handle(p, Handler::Scan, 0);
            assert!((20..=160).contains(&lines), "{lines}");
        }
    }

    #[test]
    fn weft_and_tokio_handle_every_packet() {
        for runtime in [Runtime::Weft, Runtime::Tokio] {
            let mut params = Params::new(runtime, 2);
            params.tasks = Some(2000);
            params.spawners = 2;
            let o = run(&params, Handler::Scan).unwrap();
            assert_eq!(o.tasks, 2000);
            assert!(o.latency_ns.p50 > 0 && o.latency_ns.p99 >= o.latency_ns.p50);
            let per_round: u64 = make_packets()
                .iter()
                .map(|p| handle(p, Handler::Scan, 0))
                .sum();
            assert_eq!(o.extra_f64("newlines"), Some((per_round * 200) as f64));
        }
    }
}
