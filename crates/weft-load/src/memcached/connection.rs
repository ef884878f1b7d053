//! One generator connection in closed loop, or open loop deeper than one request: a sender
//! fiber following the schedule and a receiver fiber matching replies to requests. (Open loop
//! at depth 1 is [`super::fed`]; the helpers at the bottom serve both.)
//!
//! Invariants: at most `depth` requests are outstanding (a semaphore the receiver releases);
//! the intended send time of every request travels to the receiver through a FIFO channel
//! *before* the request is written, so replies (which memcached sends in order) are matched to
//! it; latency is `reply time − intended time`, so when the server (or depth) holds the sender
//! back, the wait counts against the server (no coordinated omission). Requests that are due
//! together and have room (closed loop: every free permit; open loop: arrivals already past)
//! go out in one write, as a pipelining client buffers them, unless the plan says a write
//! each; a request is never held back to wait for another.

use std::io::{ErrorKind, Read, Write};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use weft::net::TcpStream;
use weft::sync::channel;
use weft::sync::Semaphore;
use weft::WaitError;

use super::request::{push_read, push_write};
use super::response::{self, Reply};
use super::Plan;
use crate::dist::KeySampler;
use crate::latency::{Recorder, Tally};
use crate::schedule::Poisson;

/// Stack of generator fibers: parsing and encoding need little.
pub const FIBER_STACK_BYTES: usize = 64 * 1024;

/// Connection states: `ALIVE`, or dead because replies stopped (`TIMED_OUT`) or the
/// connection failed (`BROKEN`).
pub(super) const ALIVE: u8 = 0;
pub(super) const TIMED_OUT: u8 = 1;
pub(super) const BROKEN: u8 = 2;

/// A request the receiver has yet to see answered.
pub(super) struct Pending {
    pub(super) intended: Instant,
    pub(super) get: bool,
}

/// Runs the connection's schedule until `plan.end` by the clock, then waits for the replies to
/// what it sent (each read bounded by the timeout). Requests intended inside the window that
/// could not be sent by then are counted as `unsent`: an open-loop sender that kept sending
/// its backlog after the window would measure its own schedule, not the server.
pub fn drive(stream: TcpStream, index: usize, plan: Arc<Plan>, recorder: Arc<Recorder>) {
    let stream = Arc::new(stream);
    let permits = Arc::new(Semaphore::new(plan.depth));
    let dead = Arc::new(AtomicU8::new(ALIVE));
    let (tx, rx) = channel::bounded::<Pending>(plan.depth);
    let receiver = {
        let (stream, permits, dead) = (stream.clone(), permits.clone(), dead.clone());
        let (plan, recorder) = (plan.clone(), recorder.clone());
        weft::Builder::new()
            .name(format!("load-rx-{index}"))
            .stack_size(FIBER_STACK_BYTES)
            .spawn(move || receive(&stream, rx, &permits, &dead, &plan, &recorder))
    };
    let receiver = match receiver {
        Ok(r) => r,
        Err(_) => {
            recorder.with(|t| t.errors += 1);
            return;
        }
    };

    let mut rng = SmallRng::seed_from_u64(plan.seed ^ (index as u64).wrapping_mul(0x9E37_79B9));
    let keys = KeySampler::new(plan.key_dist, plan.keys);
    let mut schedule = plan
        .per_connection_qps()
        .map(|rate| Poisson::new(rate, plan.start, &mut rng));
    let mut out = Vec::with_capacity(256);
    // Open loop: an arrival drawn while looking for requests to write together that was not
    // due yet (or found no room); it is the next one to send.
    let mut drawn: Option<Instant> = None;
    loop {
        let intended = match schedule.as_mut() {
            Some(s) => {
                let at = drawn.take().unwrap_or_else(|| s.next(&mut rng));
                if at >= plan.end {
                    break;
                }
                let now = Instant::now();
                if now >= plan.end {
                    // The window is over and this request was never sent.
                    count_unsent(&plan, &recorder, at, s, &mut rng);
                    break;
                }
                // Behind schedule (a loaded server or generator): send at once, no timer.
                if at > now && weft::sleep_until(at).is_err() {
                    break;
                }
                at
            }
            None => {
                if Instant::now() >= plan.end {
                    break;
                }
                Instant::now()
            }
        };
        // Room to send (at most `depth` outstanding), but not past the end of the window.
        let room = match plan.end.checked_duration_since(Instant::now()) {
            Some(left) if !left.is_zero() => permits.acquire_timeout(left),
            _ => Err(WaitError::TimedOut),
        };
        if let Err(WaitError::TimedOut) = room {
            if let Some(s) = schedule.as_mut() {
                count_unsent(&plan, &recorder, intended, s, &mut rng);
            }
            break;
        }
        if room.is_err() || dead.load(Ordering::Acquire) != ALIVE {
            // The requests this connection will never send still count against the server.
            let mut lost = u64::from(plan.counts(intended));
            if let Some(s) = schedule.as_mut() {
                loop {
                    let at = s.next(&mut rng);
                    if at >= plan.end {
                        break;
                    }
                    lost += u64::from(plan.counts(at));
                }
            }
            let cause = dead.load(Ordering::Acquire);
            recorder.with(|t| {
                if cause == TIMED_OUT {
                    t.timeouts += lost;
                } else {
                    t.errors += lost;
                }
            });
            break;
        }
        // Closed loop: the request is intended when there is room to send it.
        let intended = if schedule.is_some() {
            intended
        } else {
            Instant::now()
        };
        out.clear();
        let get = next_request(&mut out, &plan, &keys, &mut rng);
        if tx.send(Pending { intended, get }).is_err() {
            break;
        }
        if plan.coalesce {
            // Every further request that is due and has room goes into the same write, as a
            // pipelining client's buffered writes do: one segment for the batch.
            loop {
                let at = match schedule.as_mut() {
                    None => intended,
                    Some(s) => {
                        let at = s.next(&mut rng);
                        if at >= plan.end || at > Instant::now() {
                            drawn = Some(at);
                            break;
                        }
                        at
                    }
                };
                if !permits.try_acquire() {
                    if schedule.is_some() {
                        drawn = Some(at);
                    }
                    break;
                }
                let get = next_request(&mut out, &plan, &keys, &mut rng);
                if tx.send(Pending { intended: at, get }).is_err() {
                    break;
                }
            }
        }
        if (&*stream).write_all(&out).is_err() {
            // The receiver sees the failure too (a reset or EOF) and counts what was queued.
            let _ = dead.compare_exchange(ALIVE, BROKEN, Ordering::AcqRel, Ordering::Acquire);
            break;
        }
    }
    drop(tx);
    let _ = receiver.join();
}

fn receive(
    stream: &TcpStream,
    rx: channel::Receiver<Pending>,
    permits: &Semaphore,
    dead: &AtomicU8,
    plan: &Plan,
    recorder: &Recorder,
) {
    let mut replies = Replies::new();
    let _ = stream.set_read_timeout(Some(plan.timeout));
    while let Ok(pending) = rx.recv() {
        let reply = replies.next(stream);
        let now = Instant::now();
        permits.release();
        let counted = plan.counts(pending.intended);
        match reply {
            Ok(reply) => record(plan, recorder, reply, &pending, now),
            Err(why) => {
                // The connection is unusable: count this request and every queued one, and
                // let the sender stop.
                let cause = if why == "timeout" { TIMED_OUT } else { BROKEN };
                dead.store(cause, Ordering::Release);
                permits.add_permits(plan.depth + 1);
                let mut lost = u64::from(counted);
                while let Ok(p) = rx.recv() {
                    permits.release();
                    lost += u64::from(plan.counts(p.intended));
                }
                count_lost(recorder, cause, lost);
                if plan.verbose {
                    eprintln!("weft load: connection closed: {why}");
                }
                return;
            }
        }
    }
}

/// Records one reply to `pending` that arrived at `now`.
#[inline]
pub(super) fn record(
    plan: &Plan,
    recorder: &Recorder,
    reply: Reply,
    pending: &Pending,
    now: Instant,
) {
    let counted = plan.counts(pending.intended);
    let in_window = plan.counts(now);
    if counted || in_window {
        recorder.with(|t| {
            if in_window {
                t.in_window += 1;
            }
            if counted {
                tally(t, reply, pending.get, now - pending.intended, plan.timeout);
            }
        });
    }
}

/// Counts `lost` requests as timeouts or errors, by why the connection died.
pub(super) fn count_lost(recorder: &Recorder, cause: u8, lost: u64) {
    if lost == 0 {
        return;
    }
    recorder.with(|t| {
        if cause == TIMED_OUT {
            t.timeouts += lost;
        } else {
            t.errors += lost;
        }
    });
}

/// A connection's receive buffer: reads and parses one reply at a time.
pub(super) struct Replies {
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

impl Replies {
    pub(super) fn new() -> Replies {
        Replies {
            buf: vec![0u8; 16 * 1024],
            start: 0,
            end: 0,
        }
    }

    /// The next reply, reading as needed; `Err("timeout")` when the read timeout passed.
    pub(super) fn next(&mut self, stream: &TcpStream) -> Result<Reply, String> {
        loop {
            match response::parse(&self.buf[self.start..self.end]) {
                Ok(Some((reply, used))) => {
                    self.start += used;
                    return Ok(reply);
                }
                Ok(None) => {}
                Err(e) => return Err(e.to_string()),
            }
            // Make room: move the partial reply to the front, grow for a large value.
            if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            let want = response::needed(&self.buf[..self.end])
                .unwrap_or(0)
                .max(self.end + 1024);
            if want > self.buf.len() {
                self.buf.resize(want.next_power_of_two(), 0);
            }
            match (&*stream).read(&mut self.buf[self.end..]) {
                Ok(0) => return Err("server closed the connection".into()),
                Ok(n) => self.end += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if matches!(e.kind(), ErrorKind::TimedOut | ErrorKind::WouldBlock) => {
                    return Err("timeout".into())
                }
                Err(e) => return Err(e.to_string()),
            }
        }
    }
}

/// Counts `first` and every later arrival of `schedule` inside the window as never sent.
fn count_unsent(
    plan: &Plan,
    recorder: &Recorder,
    first: Instant,
    schedule: &mut Poisson,
    rng: &mut SmallRng,
) {
    let mut unsent = u64::from(plan.counts(first));
    loop {
        let at = schedule.next(rng);
        if at >= plan.end {
            break;
        }
        unsent += u64::from(plan.counts(at));
    }
    recorder.with(|t| t.unsent += unsent);
}

#[inline]
fn tally(t: &mut Tally, reply: Reply, get: bool, latency: Duration, timeout: Duration) {
    match reply {
        Reply::Error => t.errors += 1,
        Reply::Miss if get => {
            t.misses += 1;
            t.record(latency);
        }
        _ => t.record(latency),
    }
    if latency > timeout {
        t.timeouts += 1;
    }
}

/// Appends the next request of `plan` to `out`: a get or, with the plan's update ratio, a set
/// of a sampled size, in the plan's protocol. Returns whether it is a get.
pub(super) fn next_request(
    out: &mut Vec<u8>,
    plan: &Plan,
    keys: &KeySampler,
    rng: &mut SmallRng,
) -> bool {
    let get = rng.random::<f64>() >= plan.update_ratio;
    let key = keys.sample(rng);
    if get {
        push_read(out, plan.protocol, key);
    } else {
        let len = plan.value_size.sample(rng);
        push_write(out, plan.protocol, key, &plan.filler[..len]);
    }
    get
}
