//! Audio conferencing: `--tasks` conferences of [`PARTICIPANTS`] participants. Each
//! participant's leg has a source that sends one encoded frame every [`FRAME_MS`] ms (the
//! real 20 ms scaled down so a short run has many frames), a decode fiber, and an encode
//! fiber; each conference has one mixer fiber that, once it has frame `n` from every leg,
//! sends each leg the sum of the others. A frame's latency runs from its scheduled send time
//! to the end of its encode; a frame later than one frame period misses its deadline.
//!
//! Fibers per conference: 3 × participants + 1, all blocking on bounded weft channels and
//! timers: the benchmark measures how promptly a policy runs many small, latency-sensitive,
//! interdependent tasks (the mixer waits for the slowest leg).

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use weft::sync::channel::{self, Receiver, Sender};

use super::latency::Latencies;
use super::{packet, Outcome, Params, Study};

/// Participants per conference.
pub const PARTICIPANTS: usize = 5;

/// The frame period, in milliseconds (telephony uses 20; scaled down).
pub const FRAME_MS: u64 = 2;

/// Samples per frame (48 kHz).
pub const SAMPLES: usize = 48 * FRAME_MS as usize;

/// Taps of the decoder's and encoder's filter: the per-frame signal processing.
const TAPS: usize = 32;

/// A frame on its way: which one, when it was due to be sent, and its samples.
struct Frame {
    n: u64,
    due: Instant,
    pcm: Vec<i32>,
}

/// Filters `pcm` in place with a fixed low-pass FIR (the decode/encode work).
fn filter(pcm: &mut [i32]) {
    let mut history = [0i32; TAPS];
    for (i, s) in pcm.iter_mut().enumerate() {
        history[i % TAPS] = *s;
        let acc: i64 = history
            .iter()
            .enumerate()
            .map(|(k, &h)| i64::from(h) * (k as i64 + 1))
            .sum();
        *s = (acc / (TAPS * (TAPS + 1) / 2) as i64) as i32;
    }
}

/// Frame `n` of leg `leg`: a deterministic waveform.
fn source_frame(leg: usize, n: u64) -> Vec<i32> {
    (0..SAMPLES)
        .map(|i| (((n as usize * SAMPLES + i) * (leg + 3)) % 2000) as i32 - 1000)
        .collect()
}

struct Shared {
    frames: u64,
    latencies: Latencies,
    misses: AtomicU64,
    legs_left: AtomicU64,
    finished: packet::Finished,
}

impl Shared {
    fn leg_done(&self) {
        if self.legs_left.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.finished.signal();
        }
    }
}

/// Streams for `--audio-ms` and reports latency percentiles and deadline misses.
pub fn run(params: &Params) -> io::Result<Outcome> {
    let conferences = params.tasks_for(Study::Audio) as usize;
    let frames = (params.audio_ms / FRAME_MS).max(1);
    let legs = conferences * PARTICIPANTS;
    let (tx, finished) = mpsc::channel();
    let shared = Arc::new(Shared {
        frames,
        latencies: Latencies::new(legs * frames as usize),
        misses: AtomicU64::new(0),
        legs_left: AtomicU64::new(legs as u64),
        finished: packet::Finished::new(tx),
    });
    let cluster = params.cluster("study-audio")?;
    // Start a little in the future so every source is spawned before the first frame is due.
    let start = Instant::now() + Duration::from_millis(20);
    for conference in 0..conferences {
        let (to_mixer, mixer_in) = channel::bounded::<(usize, Frame)>(PARTICIPANTS * 4);
        let mut to_encoders = Vec::with_capacity(PARTICIPANTS);
        for p in 0..PARTICIPANTS {
            let leg = conference * PARTICIPANTS + p;
            let (to_decode, decode_in) = channel::bounded::<Frame>(4);
            let (to_encode, encode_in) = channel::bounded::<Frame>(4);
            to_encoders.push(to_encode);
            drop(cluster.spawn(move || source(leg, start, frames, to_decode)));
            let to_mixer = to_mixer.clone();
            drop(cluster.spawn(move || decode(p, decode_in, to_mixer)));
            let shared = shared.clone();
            drop(cluster.spawn(move || encode(leg, encode_in, &shared)));
        }
        drop(to_mixer);
        drop(cluster.spawn(move || mix(mixer_in, to_encoders)));
    }
    packet::wait(&finished, legs as u64)?;
    let seconds = start.elapsed().as_secs_f64();
    cluster.shutdown();
    let delivered = shared.latencies.recorded() as u64;
    let mut outcome = Outcome::new(
        Study::Audio,
        params,
        delivered,
        seconds,
        shared.latencies.percentiles(),
    )
    .with("conferences", conferences as u64)
    .with("participants", PARTICIPANTS as u64)
    .with("frame_ms", FRAME_MS)
    .with("deadline_misses", shared.misses.load(Ordering::Relaxed));
    outcome = outcome.with(
        "miss_ratio",
        shared.misses.load(Ordering::Relaxed) as f64 / delivered.max(1) as f64,
    );
    Ok(outcome)
}

/// Sends frame `n` at `start + n × FRAME_MS`, like a network delivering paced packets.
fn source(leg: usize, start: Instant, frames: u64, out: Sender<Frame>) {
    for n in 0..frames {
        let due = start + Duration::from_millis(n * FRAME_MS);
        if weft::sleep_until(due).is_err() {
            return;
        }
        let pcm = source_frame(leg, n);
        if out.send(Frame { n, due, pcm }).is_err() {
            return;
        }
    }
}

fn decode(participant: usize, input: Receiver<Frame>, out: Sender<(usize, Frame)>) {
    while let Ok(mut frame) = input.recv() {
        filter(&mut frame.pcm);
        if out.send((participant, frame)).is_err() {
            return;
        }
    }
}

/// Sums frame `n` of every participant and sends each the mix of the others.
fn mix(input: Receiver<(usize, Frame)>, outs: Vec<Sender<Frame>>) {
    let mut pending: HashMap<u64, Vec<Option<Frame>>> = HashMap::new();
    while let Ok((p, frame)) = input.recv() {
        let n = frame.n;
        let slots = pending
            .entry(n)
            .or_insert_with(|| (0..outs.len()).map(|_| None).collect());
        slots[p] = Some(frame);
        if slots.iter().any(Option::is_none) {
            continue;
        }
        let frames: Vec<Frame> = pending
            .remove(&n)
            .expect("just completed")
            .into_iter()
            .flatten()
            .collect();
        let due = frames.iter().map(|f| f.due).min().expect("participants");
        let total: Vec<i32> = (0..SAMPLES)
            .map(|i| frames.iter().map(|f| f.pcm[i]).sum())
            .collect();
        for (p, out) in outs.iter().enumerate() {
            let pcm = total
                .iter()
                .zip(&frames[p].pcm)
                .map(|(t, own)| t - own)
                .collect();
            if out.send(Frame { n, due, pcm }).is_err() {
                return;
            }
        }
    }
}

fn encode(leg: usize, input: Receiver<Frame>, shared: &Shared) {
    let period = Duration::from_millis(FRAME_MS);
    while let Ok(mut frame) = input.recv() {
        filter(&mut frame.pcm);
        std::hint::black_box(&frame.pcm);
        let late = frame.due.elapsed();
        if late > period {
            shared.misses.fetch_add(1, Ordering::Relaxed);
        }
        let slot = leg * shared.frames as usize + frame.n as usize;
        shared
            .latencies
            .record_ns(slot, late.as_nanos().min(u128::from(u64::MAX)) as u64);
    }
    shared.leg_done();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::study::Runtime;

    #[test]
    fn every_frame_of_every_leg_is_mixed_and_encoded() {
        let mut params = Params::new(Runtime::Weft, 2);
        params.tasks = Some(2);
        params.audio_ms = 40;
        let o = run(&params).unwrap();
        assert_eq!(o.tasks, 2 * PARTICIPANTS as u64 * 20);
        assert!(o.latency_ns.p50 > 0);
        assert!(o.extra_f64("deadline_misses").is_some());
    }

    #[test]
    fn the_filter_keeps_a_constant_signal() {
        let mut pcm = vec![600; 100];
        filter(&mut pcm);
        assert_eq!(pcm[TAPS..], vec![600; 100 - TAPS][..]);
    }
}
