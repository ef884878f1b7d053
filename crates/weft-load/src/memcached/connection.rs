//! One generator connection: a sender fiber following the schedule and a receiver fiber
//! matching replies to requests.
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
use std::sync::{Arc, OnceLock};
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
const ALIVE: u8 = 0;
const TIMED_OUT: u8 = 1;
const BROKEN: u8 = 2;

/// A request the receiver has yet to see answered.
struct Pending {
    intended: Instant,
    get: bool,
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
fn record(plan: &Plan, recorder: &Recorder, reply: Reply, pending: &Pending, now: Instant) {
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
fn count_lost(recorder: &Recorder, cause: u8, lost: u64) {
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
struct Replies {
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

impl Replies {
    fn new() -> Replies {
        Replies {
            buf: vec![0u8; 16 * 1024],
            start: 0,
            end: 0,
        }
    }

    /// The next reply, reading as needed; `Err("timeout")` when the read timeout passed.
    fn next(&mut self, stream: &TcpStream) -> Result<Reply, String> {
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

/// The arrivals a dispatcher hands to one connection ([`dispatch`]): intended send times.
pub type Arrivals = channel::Receiver<Instant>;

/// Most arrivals waiting on one connection (behind the request in flight); more are counted
/// as `unsent`, as the C generator's per-connection queue does.
pub const ARRIVALS_CAP: usize = 64;

/// Depth 1, open loop: one fiber per connection sends each arrival the dispatcher hands it
/// and reads its reply before sending the next, so a connection costs one fiber and no timer
/// of its own (the dispatcher sleeps for all of them). An arrival that finds the previous
/// request unanswered waits in the channel; its latency still runs from its intended time.
///
/// The plan is set once every connection's fiber exists (so spawning 15,360 fibers does not
/// eat into the schedule); the first arrival comes after it is set.
pub fn drive_fed(
    stream: TcpStream,
    plan: Arc<OnceLock<Arc<Plan>>>,
    recorder: Arc<Recorder>,
    lag: Arc<Recorder>,
    arrivals: Arrivals,
    dead: Arc<[AtomicU8]>,
    index: usize,
) {
    let Ok(first) = arrivals.recv() else { return };
    let Some(plan) = plan.get() else { return };
    let mut next = Some(first);
    let mut idle_since = plan.start;
    let mut rng = SmallRng::seed_from_u64(plan.seed ^ (index as u64).wrapping_mul(0x9E37_79B9));
    let keys = KeySampler::new(plan.key_dist, plan.keys);
    let mut replies = Replies::new();
    let mut out = Vec::with_capacity(256);
    let _ = stream.set_read_timeout(Some(plan.timeout));
    while let Some(intended) = next.take().or_else(|| arrivals.recv().ok()) {
        if Instant::now() >= plan.end {
            // The window is over: this arrival and the ones queued behind it were never sent.
            let mut unsent = u64::from(plan.counts(intended));
            while let Ok(at) = arrivals.try_recv() {
                unsent += u64::from(plan.counts(at));
            }
            if unsent > 0 {
                recorder.with(|t| t.unsent += unsent);
            }
            break;
        }
        out.clear();
        let get = next_request(&mut out, plan, &keys, &mut rng);
        let pending = Pending { intended, get };
        // The generator's own lateness: how late a request that found its connection idle
        // goes out (one queued behind an unanswered request waits for the server).
        if intended >= idle_since && plan.counts(intended) {
            lag.with(|t| t.record(Instant::now().saturating_duration_since(intended)));
        }
        let reply = match (&stream).write_all(&out) {
            Ok(()) => replies.next(&stream),
            Err(e) => Err(e.to_string()),
        };
        match reply {
            Ok(reply) => {
                idle_since = Instant::now();
                record(plan, &recorder, reply, &pending, idle_since);
            }
            Err(why) => {
                let cause = if why == "timeout" { TIMED_OUT } else { BROKEN };
                dead[index].store(cause, Ordering::Release);
                let mut lost = u64::from(plan.counts(intended));
                while let Ok(at) = arrivals.try_recv() {
                    lost += u64::from(plan.counts(at));
                }
                count_lost(&recorder, cause, lost);
                if plan.verbose {
                    eprintln!("weft load: connection closed: {why}");
                }
                // Dropping `arrivals` tells the dispatcher; it counts later ones as lost.
                break;
            }
        }
    }
}

/// The open-loop schedule of connections `first, first + step, …` (depth 1): one Poisson
/// process of `rate` whose every arrival goes to one of them at random — the same load as
/// independent Poisson processes of rate/N on each (superposition), at one timer for all.
/// Stops at the end of the window; an arrival that finds its connection's queue full, or the
/// connection gone at the end of its window, is `unsent`; one to a dead connection is a
/// timeout or error by the cause.
pub fn dispatch(
    plan: &Plan,
    recorder: &Recorder,
    rate: f64,
    feeds: Vec<(usize, channel::Sender<Instant>)>,
    dead: &[AtomicU8],
    seed: u64,
    spin: Duration,
) {
    if feeds.is_empty() {
        return;
    }
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut schedule = Poisson::new(rate, plan.start, &mut rng);
    let (mut unsent, mut timeouts, mut errors) = (0u64, 0u64, 0u64);
    let mut next = schedule.next(&mut rng);
    while next < plan.end {
        let now = Instant::now();
        if next > now {
            // A sleep costs a wake-up of the generator's thread (tens of us of CPU on a VM,
            // and late): poll by yielding when the next arrival is close, as the C generator
            // does; yielding also lets the processor reap completions.
            if next - now <= spin {
                weft::yield_now();
            } else if weft::sleep_until(next - spin / 2).is_err() {
                break;
            }
            continue;
        }
        let (index, feed) = &feeds[rng.random_range(0..feeds.len())];
        let counted = u64::from(plan.counts(next));
        match feed.try_send(next) {
            Ok(()) => {}
            Err(channel::TrySendError::Full(_)) => unsent += counted,
            // The connection has left: it died, or (still ALIVE) it saw the window end
            // before this dispatcher, behind schedule, drew this arrival; then it was never
            // sent, which is no failure of the server's.
            Err(_) => match dead[*index].load(Ordering::Acquire) {
                TIMED_OUT => timeouts += counted,
                BROKEN => errors += counted,
                _ => unsent += counted,
            },
        }
        next = schedule.next(&mut rng);
    }
    recorder.with(|t| {
        t.unsent += unsent;
        t.timeouts += timeouts;
        t.errors += errors;
    });
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
fn next_request(out: &mut Vec<u8>, plan: &Plan, keys: &KeySampler, rng: &mut SmallRng) -> bool {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dist::{KeyDist, ValueSize};

    /// A plan whose 50 ms window ended 10 ms ago: a dispatcher given it is behind schedule
    /// for every arrival, as one on a loaded machine is at the end of its window.
    fn plan_that_ended() -> Plan {
        let now = Instant::now();
        let start = now - Duration::from_millis(60);
        Plan {
            start,
            count_from: start,
            end: now - Duration::from_millis(10),
            qps: 20_000.0,
            connections: 1,
            depth: 1,
            protocol: Default::default(),
            coalesce: true,
            update_ratio: 0.0,
            keys: 10,
            key_dist: KeyDist::Uniform,
            value_size: ValueSize::Fixed(8),
            timeout: Duration::from_secs(1),
            seed: 7,
            verbose: false,
            filler: vec![b'x'; 8],
        }
    }

    /// Runs a dispatcher of `plan_that_ended` to one connection that has already left (its
    /// receiver dropped) in state `state`; returns the tally.
    fn dispatch_to_a_connection_that_left(state: u8) -> Tally {
        let plan = plan_that_ended();
        let recorder = Recorder::new();
        let (tx, rx) = channel::bounded::<Instant>(ARRIVALS_CAP);
        drop(rx);
        let dead = [AtomicU8::new(state)];
        dispatch(
            &plan,
            &recorder,
            plan.qps,
            vec![(0, tx)],
            &dead,
            1,
            Duration::ZERO,
        );
        recorder.total()
    }

    #[test]
    fn arrivals_for_a_connection_whose_window_ended_are_unsent_not_errors() {
        // The connection saw the window end and left while the dispatcher, behind schedule,
        // still drew arrivals intended inside it: none of them was sent, none failed.
        let t = dispatch_to_a_connection_that_left(ALIVE);
        let counts = (t.unsent, t.errors, t.timeouts);
        assert_eq!(
            (counts.1, counts.2),
            (0, 0),
            "unsent, errors, timeouts: {counts:?}"
        );
        assert!(counts.0 > 100, "about 1,000 arrivals in 50 ms: {counts:?}");
    }

    #[test]
    fn arrivals_for_a_dead_connection_count_by_why_it_died() {
        let b = dispatch_to_a_connection_that_left(BROKEN);
        let b = (b.unsent, b.errors, b.timeouts);
        assert!(
            b.1 > 100 && b.0 == 0 && b.2 == 0,
            "unsent, errors, timeouts: {b:?}"
        );
        let t = dispatch_to_a_connection_that_left(TIMED_OUT);
        let t = (t.unsent, t.errors, t.timeouts);
        assert!(
            t.2 > 100 && t.0 == 0 && t.1 == 0,
            "unsent, errors, timeouts: {t:?}"
        );
    }
}
