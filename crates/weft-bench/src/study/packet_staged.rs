//! Staged packet processing: parse → process → sink, each stage a pool of fibers, stages
//! joined by bounded weft channels of [`CHANNEL_CAPACITY`] (a full channel parks the sender:
//! backpressure reaches the source, whose blocked sends count as `retries`).
//!
//! Two layouts in the same run, reported as `variant`:
//! - `staged`: a cluster per stage, each with `--processors` processors and the chosen policy
//!   (the study's "compose policies per cluster": each stage's processors only ever run that
//!   stage's code, so its instructions and data stay in their caches);
//! - `single`: the same fibers and channels on one cluster.
//!
//! Latency is source send → sink, per packet.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Instant;

use weft::sync::channel::{self, Receiver, Sender, TrySendError};

use super::latency::Latencies;
use super::packet::{self, Handler};
use super::{busy_work, Outcome, Params, Study};

/// Slots in each channel between stages.
pub const CHANNEL_CAPACITY: usize = 1024;

/// Fibers per stage for each processor of the stage's cluster.
pub const WORKERS_PER_PROCESSOR: usize = 2;

/// A packet moving down the pipeline.
struct Item {
    index: u64,
    buf: Vec<u8>,
    since: Instant,
    lines: u64,
}

struct Sink {
    total: u64,
    done: AtomicU64,
    latencies: Latencies,
    finished: packet::Finished,
}

/// Runs both layouts and returns `[staged, single]`.
pub fn run(params: &Params) -> io::Result<Vec<Outcome>> {
    Ok(vec![run_layout(params, true)?, run_layout(params, false)?])
}

fn run_layout(params: &Params, staged: bool) -> io::Result<Outcome> {
    let total = params.tasks_for(Study::PacketStaged);
    let clusters: Vec<weft::Cluster> = if staged {
        ["parse", "process", "sink"]
            .iter()
            .map(|stage| params.cluster(&format!("study-{stage}")))
            .collect::<io::Result<_>>()?
    } else {
        vec![params.cluster("study-pipeline")?]
    };
    let stage = |i: usize| &clusters[i.min(clusters.len() - 1)];
    let workers = params.processors * WORKERS_PER_PROCESSOR;
    let (to_parse, parse_in) = channel::bounded::<Item>(CHANNEL_CAPACITY);
    let (to_process, process_in) = channel::bounded::<Item>(CHANNEL_CAPACITY);
    let (to_sink, sink_in) = channel::bounded::<Item>(CHANNEL_CAPACITY);
    let (tx, finished) = mpsc::channel();
    let sink = Arc::new(Sink {
        total,
        done: AtomicU64::new(0),
        latencies: Latencies::new(total as usize),
        finished: packet::Finished::new(tx),
    });
    let work_ns = params.work_ns;
    for _ in 0..workers {
        spawn_stage(stage(0), parse_in.clone(), to_process.clone(), |item| {
            item.lines = packet::handle(&item.buf, Handler::Scan, 0);
        });
        spawn_stage(stage(1), process_in.clone(), to_sink.clone(), move |item| {
            let sum = item
                .buf
                .iter()
                .fold(0u64, |a, &b| a.rotate_left(5) ^ u64::from(b));
            busy_work(work_ns, sum ^ item.lines);
        });
        let (sink, input) = (sink.clone(), sink_in.clone());
        drop(stage(2).spawn(move || {
            while let Ok(item) = input.recv() {
                sink.latencies.record(item.index as usize, item.since);
                if sink.done.fetch_add(1, Ordering::AcqRel) + 1 == sink.total {
                    sink.finished.signal();
                }
            }
        }));
    }
    // The stages hold their own ends now: the pipeline closes front to back when the source
    // drops its sender.
    drop((parse_in, to_process, process_in, to_sink, sink_in));
    let retries = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    {
        let retries = retries.clone();
        drop(stage(0).spawn(move || {
            let packets = packet::make_packets();
            for index in 0..total {
                let buf = packet::copy_for(&packets, index, Handler::Scan);
                let item = Item {
                    index,
                    buf,
                    since: Instant::now(),
                    lines: 0,
                };
                match to_parse.try_send(item) {
                    Ok(()) => {}
                    Err(TrySendError::Full(back)) => {
                        // Backpressure: count it, then park until the parse stage makes room.
                        retries.fetch_add(1, Ordering::Relaxed);
                        if to_parse.send(back).is_err() {
                            return;
                        }
                    }
                    Err(TrySendError::Closed(_)) => return,
                }
            }
        }));
    }
    packet::wait(&finished, total)?;
    let seconds = started.elapsed().as_secs_f64();
    for c in clusters {
        c.shutdown();
    }
    Ok(Outcome::new(
        Study::PacketStaged,
        params,
        total,
        seconds,
        sink.latencies.percentiles(),
    )
    .with("variant", if staged { "staged" } else { "single" })
    .with("retries", retries.load(Ordering::Relaxed))
    .with("work_ns", work_ns))
}

/// A stage fiber: takes items from `input`, applies `work`, passes them on, until `input`
/// closes.
fn spawn_stage(
    cluster: &weft::Cluster,
    input: Receiver<Item>,
    output: Sender<Item>,
    work: impl Fn(&mut Item) + Send + 'static,
) {
    drop(cluster.spawn(move || {
        while let Ok(mut item) = input.recv() {
            work(&mut item);
            if output.send(item).is_err() {
                return;
            }
        }
    }));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::study::Runtime;

    #[test]
    fn both_layouts_deliver_every_packet() {
        let mut params = Params::new(Runtime::Weft, 1);
        params.tasks = Some(3000);
        let outcomes = run(&params).unwrap();
        assert_eq!(outcomes.len(), 2);
        assert_eq!(outcomes[0].extra_str("variant"), Some("staged"));
        assert_eq!(outcomes[1].extra_str("variant"), Some("single"));
        for o in outcomes {
            assert_eq!(o.tasks, 3000);
            assert!(o.latency_ns.p50 > 0);
        }
    }
}
