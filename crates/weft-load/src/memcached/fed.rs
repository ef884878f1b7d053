//! Open loop at depth 1: one dispatcher per processor draws the arrivals of its connections
//! (one Poisson process, each arrival to one of them at random) and **writes each request
//! itself** when its connection is idle; each connection's fiber only reads replies.
//!
//! Why: at 15,360 connections and 50,000 req/s a connection sees a request every 300 ms, so
//! everything a request touches of it is cold. Handing each arrival to the connection's fiber
//! (a channel per connection, as before) cost a second wake-up of that fiber a request, the
//! channel's lock and buffer (two cold pages), and a read timer armed a request (the reply
//! timeout is past the timer's reuse window at that rate): a third of the generator's user
//! time (`docs/notes/scale.md`, "`weft load` at 50,000 req/s: where its core goes"). Now a
//! request costs its connection's entry in one contiguous table, the write, and one wake-up
//! of the fiber, for the reply; and the request goes out when the dispatcher draws it, not
//! when its fiber next runs.
//!
//! Invariants:
//! - A connection has at most one request on the wire (`State::outstanding`). An arrival
//!   that finds one waits in the connection's backlog (at most [`BACKLOG_CAP`]; more are
//!   `unsent`, as the C generator's per-connection queue), and the reader writes it when the
//!   reply comes; its latency still runs from its intended time (no coordinated omission).
//! - Whoever sets `outstanding` (the dispatcher for an idle connection, the reader for a
//!   backlog entry) writes the request, after releasing the lock: nobody parks holding it.
//! - Whoever moves a connection from `ALIVE` to dead (the reader on a failed read, a writer on
//!   a failed write, the sweep on a reply older than the timeout) counts its outstanding
//!   request and backlog, under the lock, once; arrivals after that are counted by the
//!   dispatcher by the cause. A sweep or a failed write also shuts the socket down, so a
//!   reader parked for a reply that will not come wakes and leaves.
//! - Replies have no read timeout (an idle connection would time out between requests, and
//!   arming one a request is what cost the timer): the dispatcher sweeps its connections for
//!   a request older than the timeout, a share of them at each pass so that every connection
//!   is looked at once in half the timeout.
//! - When the window ends (not at its last arrival) the dispatcher closes every connection,
//!   yielding every 32 so that the readers of the last replies are not held up: an idle one
//!   has its read side shut down (its reader wakes with end of stream and leaves), a busy
//!   one's reader leaves after the reply; backlog entries still waiting then are `unsent`.
//!   The dispatcher keeps sweeping until every reader of its group has left.

use std::collections::VecDeque;
use std::net::Shutdown;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use weft::net::TcpStream;

use super::connection::{
    count_lost, next_request, record, Pending, Replies, ALIVE, BROKEN, TIMED_OUT,
};
use super::Plan;
use crate::dist::KeySampler;
use crate::latency::Recorder;
use crate::schedule::Poisson;

/// Most arrivals waiting on one connection behind the request on the wire; more are counted
/// as `unsent`, as the C generator's per-connection queue does.
pub const BACKLOG_CAP: usize = 64;

/// Every connection is looked at by the sweep once in this share of the timeout, so a request
/// is given up between one and one and a half timeouts after it was written.
const SWEEP_SHARE: u32 = 2;

/// The shortest sweep period, so a tiny timeout does not make the dispatcher a busy loop.
const MIN_SWEEP_PERIOD: Duration = Duration::from_millis(1);

/// Connections the dispatcher closes between yields at the end of the window.
const CLOSE_BATCH: usize = 32;

/// A dispatcher that would sleep longer wakes for the sweep after this long (looking at the
/// connections owed by then in one pass); between arrivals closer together it sweeps a few
/// at each.
const SWEEP_TICK: Duration = Duration::from_millis(5);

/// One connection of a dispatcher's group.
pub struct Conn {
    stream: TcpStream,
    state: Mutex<State>,
}

/// What the dispatcher and the reader share about one connection.
struct State {
    /// The request on the wire, and when it was written.
    outstanding: Option<(Pending, Instant)>,
    /// Arrivals that found a request on the wire, oldest first.
    backlog: VecDeque<Instant>,
    /// `ALIVE`, or why the connection died.
    dead: u8,
    /// The dispatcher's window is over: nothing more is queued.
    closed: bool,
    /// Since when the connection has had nothing on the wire (for the send lag).
    idle_since: Instant,
}

/// A dispatcher's connections and how many of their readers are still running.
pub struct Group {
    conns: Vec<Conn>,
    running: AtomicUsize,
}

impl Group {
    /// A group of `streams`, every one idle.
    pub fn new(streams: Vec<TcpStream>) -> Group {
        let now = Instant::now();
        let conns: Vec<Conn> = streams
            .into_iter()
            .map(|stream| Conn {
                stream,
                state: Mutex::new(State {
                    outstanding: None,
                    backlog: VecDeque::new(),
                    dead: ALIVE,
                    closed: false,
                    idle_since: now,
                }),
            })
            .collect();
        let running = AtomicUsize::new(conns.len());
        Group { conns, running }
    }

    /// How many connections the group has.
    pub fn len(&self) -> usize {
        self.conns.len()
    }

    /// Whether the group has no connection.
    pub fn is_empty(&self) -> bool {
        self.conns.is_empty()
    }

    /// Gives the run up before it started (a fiber could not be spawned): every reader wakes
    /// with end of stream and, with no plan set, leaves.
    pub fn abandon(&self) {
        for conn in &self.conns {
            let _ = conn.stream.shutdown(Shutdown::Read);
        }
    }
}

impl Conn {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic under the lock leaves plain data; the run's figures are still counts.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What a caller holding the lock decided to do about one arrival.
enum Offer {
    /// Write the request now.
    Write,
    /// Queued behind the request on the wire, or counted; nothing to write.
    Done,
}

/// Counts an arrival for a connection that cannot take it, by the connection's cause.
fn count_refused(recorder: &Recorder, dead: u8, counted: bool) {
    if !counted {
        return;
    }
    recorder.with(|t| match dead {
        TIMED_OUT => t.timeouts += 1,
        BROKEN => t.errors += 1,
        _ => t.unsent += 1,
    });
}

/// Marks the connection dead for `cause` (if it was alive) and counts what it had on the wire
/// and queued, under the lock. Returns whether this call killed it.
fn kill(plan: &Plan, recorder: &Recorder, st: &mut State, cause: u8) -> bool {
    if st.dead != ALIVE {
        return false;
    }
    st.dead = cause;
    let mut lost = 0u64;
    if let Some((pending, _)) = st.outstanding.take() {
        lost += u64::from(plan.counts(pending.intended));
    }
    lost += st.backlog.drain(..).filter(|&at| plan.counts(at)).count() as u64;
    count_lost(recorder, cause, lost);
    true
}

/// Writes `out` on `conn`; on failure kills the connection as `BROKEN` and shuts it down so
/// its reader leaves.
fn write_request(plan: &Plan, recorder: &Recorder, conn: &Conn, out: &[u8]) {
    use std::io::Write;
    if let Err(e) = (&conn.stream).write_all(out) {
        let killed = kill(plan, recorder, &mut conn.lock(), BROKEN);
        if killed {
            if plan.verbose {
                eprintln!("weft load: connection closed: {e}");
            }
            let _ = conn.stream.shutdown(Shutdown::Both);
        }
    }
}

/// The reader of connection `index` of `group`: reads each reply, records it against the
/// request on the wire, and writes the next backlog entry, until the connection is closed or
/// dies. The plan is set once every connection's fiber exists; no reply comes before it.
pub fn read_replies(
    group: Arc<Group>,
    index: usize,
    plan: Arc<OnceLock<Arc<Plan>>>,
    recorder: Arc<Recorder>,
) {
    let conn = &group.conns[index];
    let mut replies = Replies::new();
    let mut out = Vec::with_capacity(256);
    let mut draw: Option<(SmallRng, KeySampler)> = None;
    loop {
        let reply = replies.next(&conn.stream);
        let now = Instant::now();
        let Some(plan) = plan.get() else { break };
        let mut st = conn.lock();
        if st.dead != ALIVE {
            // Killed by a sweep or a writer: they counted what it had.
            break;
        }
        let reply = match reply {
            Ok(reply) => reply,
            // The window is over and nothing was on the wire: the dispatcher shut the read
            // side down.
            Err(_) if st.closed && st.outstanding.is_none() => break,
            Err(why) => {
                kill(plan, &recorder, &mut st, BROKEN);
                if plan.verbose {
                    eprintln!("weft load: connection closed: {why}");
                }
                break;
            }
        };
        let Some((pending, _)) = st.outstanding.take() else {
            kill(plan, &recorder, &mut st, BROKEN);
            if plan.verbose {
                eprintln!("weft load: connection closed: a reply to no request");
            }
            break;
        };
        record(plan, &recorder, reply, &pending, now);
        // The next arrival that waited, unless the window is over (then none was sent).
        let next = match st.backlog.pop_front() {
            Some(at) if now < plan.end => Some(at),
            Some(at) => {
                let unsent = std::iter::once(at)
                    .chain(st.backlog.drain(..))
                    .filter(|&t| plan.counts(t))
                    .count() as u64;
                if unsent > 0 {
                    recorder.with(|t| t.unsent += unsent);
                }
                None
            }
            None => None,
        };
        let Some(intended) = next else {
            st.idle_since = now;
            if st.closed {
                break;
            }
            continue;
        };
        let (rng, keys) = draw.get_or_insert_with(|| {
            let seed = plan.seed ^ 0xbac_c106 ^ (index as u64).wrapping_mul(0x9E37_79B9);
            (
                SmallRng::seed_from_u64(seed),
                KeySampler::new(plan.key_dist, plan.keys),
            )
        });
        out.clear();
        let get = next_request(&mut out, plan, keys, rng);
        st.outstanding = Some((Pending { intended, get }, Instant::now()));
        drop(st);
        write_request(plan, &recorder, conn, &out);
    }
    group.running.fetch_sub(1, Ordering::AcqRel);
}

/// The dispatcher of `group`: the open-loop schedule of `rate`, every arrival to one of the
/// group's connections at random — the same load as independent Poisson processes of
/// rate/N on each (superposition), at one timer for all. Stops drawing at the end of the
/// window, closes the group, and sweeps for timeouts until every reader has left.
pub fn dispatch(
    plan: &Plan,
    recorder: &Recorder,
    lag: &Recorder,
    rate: f64,
    group: &Group,
    seed: u64,
    spin: Duration,
) {
    if group.is_empty() {
        return;
    }
    let mut rng = SmallRng::seed_from_u64(seed);
    let keys = KeySampler::new(plan.key_dist, plan.keys);
    let mut schedule = Poisson::new(rate, plan.start, &mut rng);
    let mut sweep = Sweep::new(plan.timeout, group.len(), plan.start);
    let mut out = Vec::with_capacity(256);
    let mut next = schedule.next(&mut rng);
    // Connections are drawn two arrivals ahead: the entry of the one after next is fetched
    // while the dispatcher waits, and the next one's write-behind slot (found through its
    // entry, fetched an arrival ago): at thousands of connections both are cold, and the
    // slot's address is in the entry.
    let mut target = rng.random_range(0..group.len());
    let mut after = rng.random_range(0..group.len());
    prefetch_entry(&group.conns[target]);
    group.conns[target].stream.prefetch_for_write();
    prefetch_entry(&group.conns[after]);
    while next < plan.end {
        let now = Instant::now();
        if now >= plan.end {
            // Behind schedule at the end of the window: the rest were never sent.
            break;
        }
        sweep.run(plan, recorder, group, now);
        if next > now {
            // A sleep costs a wake-up of the generator's thread (tens of us of CPU on a VM,
            // and late): poll by yielding when the next arrival is close, as the C generator
            // does; yielding also lets the processor reap completions. A sleep ends by the
            // next sweep.
            if next - now <= spin {
                weft::yield_now();
            } else if weft::sleep_until((next - spin / 2).min(sweep.due())).is_err() {
                break;
            }
            continue;
        }
        let conn = &group.conns[target];
        target = after;
        after = rng.random_range(0..group.len());
        prefetch_entry(&group.conns[after]);
        group.conns[target].stream.prefetch_for_write();
        let counted = plan.counts(next);
        let offer = {
            let mut st = conn.lock();
            if st.dead != ALIVE {
                count_refused(recorder, st.dead, counted);
                Offer::Done
            } else if st.outstanding.is_some() {
                if st.backlog.len() < BACKLOG_CAP {
                    st.backlog.push_back(next);
                } else if counted {
                    recorder.with(|t| t.unsent += 1);
                }
                Offer::Done
            } else {
                out.clear();
                let get = next_request(&mut out, plan, &keys, &mut rng);
                let written = Instant::now();
                // The generator's own lateness: how late a request that found its
                // connection idle goes out (one that waited on the server does not count).
                if next >= st.idle_since && counted {
                    lag.with(|t| t.record(written.saturating_duration_since(next)));
                }
                st.outstanding = Some((
                    Pending {
                        intended: next,
                        get,
                    },
                    written,
                ));
                Offer::Write
            }
        };
        if let Offer::Write = offer {
            write_request(plan, recorder, conn, &out);
        }
        next = schedule.next(&mut rng);
    }
    // Arrivals this dispatcher did not reach inside the window (it fell behind) were never
    // sent.
    let mut unsent = 0u64;
    while next < plan.end {
        unsent += u64::from(plan.counts(next));
        next = schedule.next(&mut rng);
    }
    if unsent > 0 {
        recorder.with(|t| t.unsent += unsent);
    }
    // Close once the window is over, not at its last arrival: closing is a system call a
    // connection, and the replies to the window's last requests are read between them.
    let _ = weft::sleep_until(plan.end);
    close(plan, recorder, group);
    while group.running.load(Ordering::Acquire) > 0 {
        let now = Instant::now();
        sweep.run(plan, recorder, group, now);
        if weft::sleep_until(sweep.due().max(now + MIN_SWEEP_PERIOD)).is_err() {
            break;
        }
    }
}

/// Starts fetching `conn`'s entry: its lock and state, and the stream's handle beside them.
#[inline]
fn prefetch_entry(conn: &Conn) {
    weft::hint::prefetch_read((&conn.state as *const Mutex<State>).cast());
    weft::hint::prefetch_read((&conn.stream as *const TcpStream).cast());
}

/// Ends the window for every connection of `group`: an idle one's read side is shut down so
/// its reader leaves; a busy one's reader leaves after the reply.
fn close(plan: &Plan, recorder: &Recorder, group: &Group) {
    for (i, conn) in group.conns.iter().enumerate() {
        if i % CLOSE_BATCH == CLOSE_BATCH - 1 {
            // 15,360 shutdowns take tens of milliseconds: the readers of replies still on
            // their way take their turns between batches, so their latencies are not the
            // closing's.
            weft::yield_now();
        }
        let idle = {
            let mut st = conn.lock();
            st.closed = true;
            if st.outstanding.is_none() {
                // Backlog entries wait only behind a request on the wire; none are left here,
                // but count any as never sent rather than drop them.
                let unsent = st.backlog.drain(..).filter(|&t| plan.counts(t)).count() as u64;
                if unsent > 0 {
                    recorder.with(|t| t.unsent += unsent);
                }
            }
            st.outstanding.is_none() && st.dead == ALIVE
        };
        if idle {
            let _ = conn.stream.shutdown(Shutdown::Read);
        }
    }
}

/// The timeout sweep: looks at a share of the connections at each pass, so that each is
/// looked at once every `timeout / SWEEP_SHARE`.
struct Sweep {
    timeout: Duration,
    period: Duration,
    cursor: usize,
    /// Connections owed a look (fractional: passes may come faster than one a connection).
    owed: f64,
    last: Instant,
    per_second: f64,
}

impl Sweep {
    fn new(timeout: Duration, conns: usize, start: Instant) -> Sweep {
        let period = (timeout / SWEEP_SHARE).max(MIN_SWEEP_PERIOD);
        Sweep {
            timeout,
            period,
            cursor: 0,
            owed: 0.0,
            last: start,
            per_second: conns as f64 / period.as_secs_f64(),
        }
    }

    /// When a sleeping dispatcher wakes for the next pass.
    fn due(&self) -> Instant {
        self.last + SWEEP_TICK.min(self.period)
    }

    /// Looks at the connections owed a look by `now`: one whose request on the wire is older
    /// than the timeout is killed as `TIMED_OUT` and shut down, so its reader leaves.
    fn run(&mut self, plan: &Plan, recorder: &Recorder, group: &Group, now: Instant) {
        let Some(elapsed) = now.checked_duration_since(self.last) else {
            return;
        };
        self.last = now;
        self.owed = (self.owed + elapsed.as_secs_f64() * self.per_second).min(group.len() as f64);
        while self.owed >= 1.0 {
            self.owed -= 1.0;
            let conn = &group.conns[self.cursor];
            self.cursor = (self.cursor + 1) % group.len();
            let killed = {
                let mut st = conn.lock();
                match st.outstanding {
                    Some((_, written)) if now.saturating_duration_since(written) > self.timeout => {
                        kill(plan, recorder, &mut st, TIMED_OUT)
                    }
                    _ => false,
                }
            };
            if killed {
                if plan.verbose {
                    eprintln!(
                        "weft load: connection closed: no reply in {:?}",
                        self.timeout
                    );
                }
                let _ = conn.stream.shutdown(Shutdown::Both);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dist::{KeyDist, ValueSize};
    use crate::latency::Tally;

    fn plan(start: Instant, end: Instant, timeout: Duration) -> Plan {
        Plan {
            start,
            count_from: start,
            end,
            qps: 20_000.0,
            connections: 1,
            depth: 1,
            protocol: Default::default(),
            coalesce: true,
            update_ratio: 0.0,
            keys: 10,
            key_dist: KeyDist::Uniform,
            value_size: ValueSize::Fixed(8),
            timeout,
            seed: 7,
            verbose: false,
            filler: vec![b'x'; 8],
        }
    }

    /// A group of one connection (to a listener the test holds) in state `dead`, with no
    /// reader running; the server's end comes back too, to keep the connection open.
    fn group_of_one(dead: u8) -> (Group, std::net::TcpStream) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        let group = Group::new(vec![client]);
        group.conns[0].lock().dead = dead;
        group.running.store(0, Ordering::Release);
        (group, server)
    }

    fn dispatch_to(group: &Group, plan: &Plan) -> Tally {
        let (recorder, lag) = (Recorder::new(), Recorder::new());
        dispatch(plan, &recorder, &lag, plan.qps, group, 1, Duration::ZERO);
        recorder.total()
    }

    #[test]
    fn arrivals_a_late_dispatcher_draws_after_its_window_are_unsent_not_errors() {
        // A dispatcher that starts behind schedule at the end of its window (a loaded
        // machine): none of the arrivals inside it was sent, none failed.
        let now = Instant::now();
        let plan = plan(
            now - Duration::from_millis(60),
            now - Duration::from_millis(10),
            Duration::from_secs(1),
        );
        let (group, _server) = group_of_one(ALIVE);
        let t = dispatch_to(&group, &plan);
        let counts = (t.unsent, t.errors, t.timeouts, t.replies);
        assert_eq!((counts.1, counts.2, counts.3), (0, 0, 0), "{counts:?}");
        assert!(counts.0 > 500, "about 1,000 arrivals in 50 ms: {counts:?}");
    }

    #[test]
    fn arrivals_for_a_dead_connection_count_by_why_it_died() {
        for (dead, want) in [(BROKEN, "errors"), (TIMED_OUT, "timeouts")] {
            let now = Instant::now();
            let plan = plan(now, now + Duration::from_millis(50), Duration::from_secs(1));
            let (group, _server) = group_of_one(dead);
            let t = dispatch_to(&group, &plan);
            let counts = (t.unsent, t.errors, t.timeouts);
            // The other cause never; `unsent` only for the last few, drawn after the window
            // ended when the dispatcher's last sleep ran late.
            let (hit, other) = match want {
                "errors" => (counts.1, counts.2),
                _ => (counts.2, counts.1),
            };
            assert!(
                hit > 300 && other == 0 && counts.0 < hit / 10,
                "{want}: unsent, errors, timeouts {counts:?}"
            );
        }
    }

    #[test]
    fn the_connections_are_closed_when_the_window_ends_not_at_its_last_arrival() {
        // At 20 req/s the last arrival of a 300 ms window comes well before its end; closing
        // then (15,360 shutdowns, tens of milliseconds) held up the replies to the last
        // requests of a real window, whose latencies then read as the closing's.
        let now = Instant::now();
        let mut plan = plan(
            now,
            now + Duration::from_millis(300),
            Duration::from_secs(1),
        );
        plan.qps = 20.0;
        let (group, _server) = group_of_one(ALIVE);
        dispatch_to(&group, &plan);
        assert!(
            Instant::now() >= plan.end,
            "returned before the window's end"
        );
        assert!(group.conns[0].lock().closed);
    }

    #[test]
    fn a_request_older_than_the_timeout_is_given_up_once_and_its_socket_shut() {
        let now = Instant::now();
        let timeout = Duration::from_millis(100);
        let plan = plan(now, now + Duration::from_secs(1), timeout);
        let (group, mut server) = group_of_one(ALIVE);
        {
            let mut st = group.conns[0].lock();
            st.outstanding = Some((
                Pending {
                    intended: now,
                    get: true,
                },
                now,
            ));
            st.backlog.push_back(now);
        }
        let recorder = Recorder::new();
        let mut sweep = Sweep::new(timeout, 1, now);
        // Younger than the timeout: kept.
        sweep.run(&plan, &recorder, &group, now + timeout / 2);
        assert_eq!(group.conns[0].lock().dead, ALIVE);
        sweep.run(&plan, &recorder, &group, now + timeout * 2);
        sweep.run(&plan, &recorder, &group, now + timeout * 3);
        let t = recorder.total();
        assert_eq!(
            (t.timeouts, t.errors),
            (2, 0),
            "the request and its backlog entry, once"
        );
        assert_eq!(group.conns[0].lock().dead, TIMED_OUT);
        // The server sees the client's end shut down.
        use std::io::Read;
        server
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        assert_eq!(server.read(&mut [0u8; 8]).unwrap(), 0);
    }
}
