//! `weft::sync` across plain OS threads, fibers on a 2-processor cluster, and both mixed:
//! timeouts, cancellation, backpressure and a randomized conservation stress test.
//!
//! Timing assertions are lower bounds only. A fiber is given ~20 ms to reach a blocking call
//! before it is cancelled; that only decides *where* it sees the cancellation (cancellation is
//! sticky), never whether a test passes.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use weft::sync::channel::{self, RecvError, RecvTimeoutError, SendError, SendTimeoutError};
use weft::sync::{oneshot, Barrier, Condvar, Mutex, Semaphore, WaitGroup};
use weft::{Cancelled, Cluster, WaitError};

fn cluster(name: &str) -> Cluster {
    Cluster::builder().name(name).processors(2).build().unwrap()
}

/// Lets freshly spawned fibers reach their blocking call.
fn settle() {
    thread::sleep(Duration::from_millis(20));
}

/// Polls `cond` until it holds; panics after 10 s instead of hanging the suite.
fn eventually(what: &str, cond: impl Fn() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "timed out: {what}"
        );
        thread::sleep(Duration::from_millis(1));
    }
}

const SHORT: Duration = Duration::from_millis(30);

// ---------------------------------------------------------------------------------------------
// Plain OS threads only (no fiber anywhere): every primitive blocks the thread.

#[test]
fn every_primitive_between_plain_threads() {
    // Mutex + Condvar: a counter passed back and forth.
    let state = Arc::new((Mutex::new(0u32), Condvar::new()));
    let other = {
        let state = state.clone();
        thread::spawn(move || {
            let (m, cv) = &*state;
            for round in 0..100 {
                let mut g = cv
                    .wait_while(m.lock().unwrap(), |v| *v != 2 * round + 1)
                    .unwrap();
                *g += 1;
                cv.notify_one();
            }
        })
    };
    {
        let (m, cv) = &*state;
        for round in 0..100 {
            *m.lock().unwrap() += 1;
            cv.notify_one();
            drop(
                cv.wait_while(m.lock().unwrap(), |v| *v != 2 * round + 2)
                    .unwrap(),
            );
        }
    }
    other.join().unwrap();
    // Oneshot, WaitGroup, Barrier.
    let wg = Arc::new(WaitGroup::new());
    let barrier = Arc::new(Barrier::new(3));
    let (tx, rx) = oneshot::channel();
    let results = Arc::new(Mutex::new(Vec::new()));
    wg.add(2);
    let threads: Vec<_> = (0..2)
        .map(|i| {
            let (wg, barrier, results) = (wg.clone(), barrier.clone(), results.clone());
            thread::spawn(move || {
                results.lock().unwrap().push(i);
                wg.done();
                barrier.wait().unwrap().is_leader()
            })
        })
        .collect();
    wg.wait().unwrap();
    assert_eq!(results.lock().unwrap().len(), 2);
    let leader = barrier.wait().unwrap().is_leader();
    let leaders = threads
        .into_iter()
        .map(|t| t.join().unwrap())
        .fold(usize::from(leader), |n, l| n + usize::from(l));
    assert_eq!(leaders, 1);
    thread::spawn(move || tx.send("done").unwrap());
    assert_eq!(rx.recv(), Ok("done"));
}

// ---------------------------------------------------------------------------------------------
// Mutex

#[test]
fn mutex_fibers_yield_inside_the_critical_section() {
    let c = cluster("mutex-yield");
    let counter = Arc::new(Mutex::new(0u64));
    let handles: Vec<_> = (0..100)
        .map(|_| {
            let counter = counter.clone();
            c.spawn(move || {
                for _ in 0..1000 {
                    let mut g = counter.lock().unwrap();
                    let seen = *g;
                    // Other fibers of this processor run now and find the lock taken: they
                    // must park, not spin or block the processor.
                    weft::yield_now();
                    *g = seen + 1;
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(*counter.lock().unwrap(), 100_000);
    assert!(!counter.is_locked());
}

#[test]
fn mutex_threads_and_fibers_share_a_counter() {
    let c = cluster("mutex-mixed");
    let counter = Arc::new(Mutex::new(0u64));
    let fibers: Vec<_> = (0..8)
        .map(|_| {
            let counter = counter.clone();
            c.spawn(move || {
                for i in 0..500 {
                    let mut g = counter.lock().unwrap();
                    if i % 10 == 0 {
                        weft::yield_now();
                    }
                    *g += 1;
                }
            })
        })
        .collect();
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let counter = counter.clone();
            thread::spawn(move || {
                for _ in 0..500 {
                    *counter.lock().unwrap() += 1;
                }
            })
        })
        .collect();
    for f in fibers {
        f.join().unwrap();
    }
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(*counter.lock().unwrap(), 5000);
}

#[test]
fn mutex_thread_waits_for_a_fiber_and_back() {
    let c = cluster("mutex-handoff");
    let m = Arc::new(Mutex::new(Vec::new()));
    let guard = m.lock().unwrap();
    let fiber = {
        let m = m.clone();
        c.spawn(move || m.lock().unwrap().push("fiber"))
    };
    settle();
    assert!(
        !fiber.is_finished(),
        "the fiber must wait for the thread's lock"
    );
    drop(guard);
    fiber.join().unwrap();
    // Now a fiber holds it across a sleep while this thread waits.
    let holder = {
        let m = m.clone();
        c.spawn(move || {
            let mut g = m.lock().unwrap();
            weft::sleep(Duration::from_millis(20)).unwrap();
            g.push("holder");
        })
    };
    eventually("the fiber takes the lock", || m.is_locked());
    m.lock().unwrap().push("thread");
    holder.join().unwrap();
    assert_eq!(*m.lock().unwrap(), ["fiber", "holder", "thread"]);
}

#[test]
fn mutex_lock_timeout_in_a_fiber() {
    let c = cluster("mutex-timeout");
    let m = Arc::new(Mutex::new(()));
    let guard = m.lock().unwrap();
    let fiber = {
        let m = m.clone();
        c.spawn(move || {
            let start = Instant::now();
            let r = m.lock_timeout(SHORT).map(drop);
            (r, start.elapsed())
        })
    };
    let (r, elapsed) = fiber.join().unwrap();
    assert_eq!(r, Err(WaitError::TimedOut));
    assert!(elapsed >= SHORT);
    drop(guard);
    assert!(m.try_lock().is_some(), "the timed-out waiter left no trace");
}

#[test]
fn mutex_cancelled_waiter_returns_cancelled_and_the_lock_still_works() {
    let c = cluster("mutex-cancel");
    let m = Arc::new(Mutex::new(0));
    let guard = m.lock().unwrap();
    let victim = {
        let m = m.clone();
        c.spawn(move || m.lock().map(|mut g| *g += 1))
    };
    let other = {
        let m = m.clone();
        c.spawn(move || m.lock().map(|mut g| *g += 10))
    };
    settle();
    victim.cancel();
    assert_eq!(victim.join().unwrap(), Err(Cancelled));
    drop(guard);
    assert_eq!(other.join().unwrap(), Ok(()));
    assert_eq!(*m.try_lock().unwrap(), 10);
}

// ---------------------------------------------------------------------------------------------
// Condvar

#[test]
fn condvar_fibers_producer_consumer() {
    let c = cluster("condvar-fibers");
    let state = Arc::new((Mutex::new(VecDeque::<u32>::new()), Condvar::new()));
    let consumers: Vec<_> = (0..4)
        .map(|_| {
            let state = state.clone();
            c.spawn(move || {
                let (m, cv) = &*state;
                let mut got = 0u32;
                loop {
                    let mut q = cv.wait_while(m.lock().unwrap(), |q| q.is_empty()).unwrap();
                    match q.pop_front().unwrap() {
                        u32::MAX => return got,
                        v => got += v,
                    }
                }
            })
        })
        .collect();
    let producer = {
        let state = state.clone();
        c.spawn(move || {
            let (m, cv) = &*state;
            for v in 1..=1000 {
                m.lock().unwrap().push_back(v);
                cv.notify_one();
                if v % 64 == 0 {
                    weft::yield_now();
                }
            }
            // One stop marker per consumer, behind every value.
            m.lock().unwrap().extend([u32::MAX; 4]);
            cv.notify_all();
        })
    };
    producer.join().unwrap();
    let total: u32 = consumers.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(total, 1000 * 1001 / 2);
    assert!(state.0.lock().unwrap().is_empty());
}

#[test]
fn condvar_thread_notifies_fiber_and_fiber_notifies_thread() {
    let c = cluster("condvar-mixed");
    let state = Arc::new((Mutex::new(0u32), Condvar::new()));
    let fiber = {
        let state = state.clone();
        c.spawn(move || {
            let (m, cv) = &*state;
            for round in 0..50 {
                let mut g = cv
                    .wait_while(m.lock().unwrap(), |v| *v != 2 * round + 1)
                    .unwrap();
                *g += 1;
                cv.notify_all();
            }
        })
    };
    let (m, cv) = &*state;
    for round in 0..50 {
        let mut g = m.lock().unwrap();
        *g += 1;
        cv.notify_all();
        let g = cv.wait_while(g, |v| *v != 2 * round + 2).unwrap();
        drop(g);
    }
    fiber.join().unwrap();
    assert_eq!(*m.lock().unwrap(), 100);
}

#[test]
fn condvar_wait_timeout_in_a_fiber() {
    let c = cluster("condvar-timeout");
    let fiber = c.spawn(|| {
        let m = Mutex::new(());
        let cv = Condvar::new();
        let start = Instant::now();
        let (g, timed_out) = cv.wait_timeout(m.lock().unwrap(), SHORT).unwrap();
        drop(g);
        (timed_out, start.elapsed(), m.is_locked())
    });
    let (timed_out, elapsed, locked) = fiber.join().unwrap();
    assert!(timed_out);
    assert!(elapsed >= SHORT);
    assert!(!locked);
}

#[test]
fn condvar_cancel_releases_the_mutex_and_passes_a_notification_on() {
    let c = cluster("condvar-cancel");
    let state = Arc::new((Mutex::new(false), Condvar::new()));
    let waiter = |state: Arc<(Mutex<bool>, Condvar)>| {
        move || {
            let (m, cv) = &*state;
            cv.wait_while(m.lock().unwrap(), |ready| !*ready).map(drop)
        }
    };
    // Plain cancellation: the mutex is left unlocked.
    let lone = c.spawn(waiter(state.clone()));
    settle();
    lone.cancel();
    assert_eq!(lone.join().unwrap(), Err(Cancelled));
    assert!(state.0.try_lock().is_some());

    // `victim` is first in line; it gets the one notification, then is cancelled while this
    // thread still holds the mutex, so it cannot re-lock: it must pass the notification on.
    let victim = c.spawn(waiter(state.clone()));
    settle();
    let other = c.spawn(waiter(state.clone()));
    settle();
    let mut g = state.0.lock().unwrap();
    *g = true;
    state.1.notify_one();
    victim.cancel();
    assert_eq!(victim.join().unwrap(), Err(Cancelled));
    drop(g);
    assert_eq!(other.join().unwrap(), Ok(()));
}

// ---------------------------------------------------------------------------------------------
// Semaphore

#[test]
fn semaphore_threads_bound_concurrency() {
    let s = Arc::new(Semaphore::new(2));
    let inside = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..6)
        .map(|_| {
            let (s, inside) = (s.clone(), inside.clone());
            thread::spawn(move || {
                for _ in 0..50 {
                    s.acquire().unwrap();
                    assert!(inside.fetch_add(1, Ordering::SeqCst) < 2);
                    thread::yield_now();
                    inside.fetch_sub(1, Ordering::SeqCst);
                    s.release();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(s.available_permits(), 2);
}

/// The semaphore's wait list is guarded by a lock bit in its state word (a hand-written spin
/// lock): fibers on two processors and plain threads hammer a few semaphores with acquires,
/// timed acquires and multi-permit releases, and the test checks that no more holders are ever
/// inside than permits exist and that every permit comes back.
#[test]
fn semaphore_stress_fibers_and_threads_conserve_permits() {
    const PERMITS: usize = 3;
    const SEMS: usize = 2;
    const ROUNDS: usize = 4000;
    let seed = stress_seed(0x5e3a_f0e5);
    let c = cluster("sem-stress");
    let sems: Arc<Vec<Semaphore>> = Arc::new((0..SEMS).map(|_| Semaphore::new(PERMITS)).collect());
    let inside: Arc<Vec<AtomicUsize>> = Arc::new((0..SEMS).map(|_| AtomicUsize::new(0)).collect());
    let most_inside = Arc::new(AtomicUsize::new(0));
    let over = most_inside.clone();
    let body = move |sems: Arc<Vec<Semaphore>>, inside: Arc<Vec<AtomicUsize>>, id: u64| {
        let mut rng = Rng(seed ^ (id + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let mut timeouts = 0usize;
        for _ in 0..ROUNDS {
            let s = rng.below(SEMS as u64);
            // Take one or two permits (two only with both timed, so no hold-and-wait cycle
            // can deadlock), hold them briefly, give them back in one release.
            let want = 1 + rng.below(2);
            let mut got = 0;
            for _ in 0..want {
                let ok = if want == 1 && rng.below(2) == 0 {
                    sems[s].acquire().is_ok()
                } else {
                    sems[s]
                        .acquire_timeout(Duration::from_micros(50 + rng.below(200) as u64))
                        .is_ok()
                };
                if ok {
                    got += 1;
                } else {
                    timeouts += 1;
                }
            }
            if got > 0 {
                let now = inside[s].fetch_add(got, Ordering::SeqCst) + got;
                // Recorded, not asserted here: a panicking holder would never give its permits
                // back and the blocked acquires would hang the test instead of failing it.
                over.fetch_max(now, Ordering::SeqCst);
                if rng.below(4) == 0 {
                    weft::yield_now();
                }
                inside[s].fetch_sub(got, Ordering::SeqCst);
                sems[s].add_permits(got);
            }
        }
        timeouts
    };
    let fibers: Vec<_> = (0..24)
        .map(|i| {
            let (sems, inside, body) = (sems.clone(), inside.clone(), body.clone());
            c.spawn(move || body(sems, inside, i))
        })
        .collect();
    let threads: Vec<_> = (0..3)
        .map(|i| {
            let (sems, inside, body) = (sems.clone(), inside.clone(), body.clone());
            thread::spawn(move || body(sems, inside, 100 + i))
        })
        .collect();
    let mut timeouts = 0;
    for f in fibers {
        timeouts += f.join().unwrap();
    }
    for t in threads {
        timeouts += t.join().unwrap();
    }
    eprintln!("{timeouts} timed-out acquires");
    let most = most_inside.load(Ordering::SeqCst);
    assert!(
        most <= PERMITS,
        "{most} holders of {PERMITS} permits at once"
    );
    for s in sems.iter() {
        assert_eq!(s.available_permits(), PERMITS);
        assert!(format!("{s:?}").contains("waiters: false"), "{s:?}");
    }
}

#[test]
fn semaphore_fibers_cycle() {
    // The scheduler benchmark's `cycle`: each fiber waits on its own semaphore, then releases
    // the next one's.
    let c = cluster("sem-cycle");
    const FIBERS: usize = 50;
    const LAPS: usize = 100;
    let sems: Arc<Vec<Semaphore>> = Arc::new((0..FIBERS).map(|_| Semaphore::new(0)).collect());
    let handles: Vec<_> = (0..FIBERS)
        .map(|i| {
            let sems = sems.clone();
            c.spawn(move || {
                for _ in 0..LAPS {
                    sems[i].acquire().unwrap();
                    sems[(i + 1) % FIBERS].release();
                }
            })
        })
        .collect();
    sems[0].release();
    for h in handles {
        h.join().unwrap();
    }
    let left: usize = sems.iter().map(Semaphore::available_permits).sum();
    assert_eq!(left, 1, "the one token is still going round");
}

#[test]
fn semaphore_fiber_thread_ping_pong() {
    let c = cluster("sem-mixed");
    let ping = Arc::new(Semaphore::new(0));
    let pong = Arc::new(Semaphore::new(0));
    let fiber = {
        let (ping, pong) = (ping.clone(), pong.clone());
        c.spawn(move || {
            for _ in 0..500 {
                ping.acquire().unwrap();
                pong.release();
            }
        })
    };
    for _ in 0..500 {
        ping.release();
        pong.acquire().unwrap();
    }
    fiber.join().unwrap();
    assert_eq!(ping.available_permits() + pong.available_permits(), 0);
}

#[test]
fn semaphore_acquire_timeout_in_a_fiber() {
    let c = cluster("sem-timeout");
    let s = Arc::new(Semaphore::new(0));
    let fiber = {
        let s = s.clone();
        c.spawn(move || {
            let start = Instant::now();
            (s.acquire_timeout(SHORT), start.elapsed())
        })
    };
    let (r, elapsed) = fiber.join().unwrap();
    assert_eq!(r, Err(WaitError::TimedOut));
    assert!(elapsed >= SHORT);
    s.release();
    assert_eq!(s.available_permits(), 1);
    assert!(s.try_acquire());
}

#[test]
fn semaphore_cancelled_waiter_does_not_swallow_a_permit() {
    let c = cluster("sem-cancel");
    let s = Arc::new(Semaphore::new(0));
    let victim = {
        let s = s.clone();
        c.spawn(move || s.acquire())
    };
    settle();
    let other = {
        let s = s.clone();
        c.spawn(move || s.acquire())
    };
    settle();
    victim.cancel();
    assert_eq!(victim.join().unwrap(), Err(Cancelled));
    s.release();
    assert_eq!(other.join().unwrap(), Ok(()));
    assert_eq!(s.available_permits(), 0);

    // Race a release against a cancellation, many times: whoever gets the permit gives it back
    // (or keeps it, for the survivor), and no permit is ever lost or duplicated.
    for _ in 0..50 {
        let victim = {
            let s = s.clone();
            c.spawn(move || match s.acquire() {
                Ok(()) => {
                    s.release();
                    true
                }
                Err(Cancelled) => false,
            })
        };
        let survivor = {
            let s = s.clone();
            c.spawn(move || s.acquire_timeout(Duration::from_secs(10)))
        };
        s.release();
        victim.cancel();
        victim.join().unwrap();
        assert_eq!(survivor.join().unwrap(), Ok(()));
        assert_eq!(s.available_permits(), 0);
    }
}

// ---------------------------------------------------------------------------------------------
// Channels

#[test]
fn channel_threads_mpmc() {
    let (tx, rx) = channel::bounded(4);
    let producers: Vec<_> = (0..3u64)
        .map(|p| {
            let tx = tx.clone();
            thread::spawn(move || (0..300).for_each(|i| tx.send(p * 1000 + i).unwrap()))
        })
        .collect();
    drop(tx);
    let consumers: Vec<_> = (0..2)
        .map(|_| {
            let rx = rx.clone();
            thread::spawn(move || std::iter::from_fn(|| rx.recv().ok()).collect::<Vec<_>>())
        })
        .collect();
    drop(rx);
    for p in producers {
        p.join().unwrap();
    }
    let mut all: Vec<u64> = consumers
        .into_iter()
        .flat_map(|c| c.join().unwrap())
        .collect();
    all.sort_unstable();
    let want: Vec<u64> = (0..3)
        .flat_map(|p| (0..300).map(move |i| p * 1000 + i))
        .collect();
    assert_eq!(all, want);
}

#[test]
fn channel_fibers_pipeline() {
    let c = cluster("chan-fibers");
    let (tx1, rx1) = channel::bounded(8);
    let (tx2, rx2) = channel::bounded(2);
    let source = c.spawn(move || (0..2000u64).for_each(|i| tx1.send(i).unwrap()));
    let stages: Vec<_> = (0..4)
        .map(|_| {
            let (rx1, tx2) = (rx1.clone(), tx2.clone());
            c.spawn(move || {
                while let Ok(v) = rx1.recv() {
                    tx2.send(v * 2).unwrap();
                }
            })
        })
        .collect();
    drop((rx1, tx2));
    let sink = c.spawn(move || {
        let mut sum = 0u64;
        while let Ok(v) = rx2.recv() {
            sum += v;
        }
        sum
    });
    source.join().unwrap();
    stages.into_iter().for_each(|s| s.join().unwrap());
    assert_eq!(sink.join().unwrap(), 2 * 1999 * 2000 / 2);
}

#[test]
fn channel_fiber_to_thread_and_back() {
    let c = cluster("chan-mixed");
    let (to_thread, from_fiber) = channel::bounded(1);
    let (to_fiber, from_thread) = channel::bounded(1);
    let fiber = c.spawn(move || {
        for i in 0..300u32 {
            to_thread.send(i).unwrap();
            assert_eq!(from_thread.recv(), Ok(i + 1));
        }
    });
    for _ in 0..300 {
        let v = from_fiber.recv().unwrap();
        to_fiber.send(v + 1).unwrap();
    }
    fiber.join().unwrap();
    assert_eq!(from_fiber.recv(), Err(RecvError::Closed));
}

#[test]
fn channel_backpressure_parks_the_sender_until_a_receive() {
    let c = cluster("chan-backpressure");
    let (tx, rx) = channel::bounded(1);
    let sent_second = Arc::new(AtomicBool::new(false));
    let sender = {
        let sent_second = sent_second.clone();
        c.spawn(move || {
            tx.send(1).unwrap();
            tx.send(2).unwrap(); // parks: the channel is full
            sent_second.store(true, Ordering::SeqCst);
            // The sender parked, so its processor stayed free for other fibers.
            weft::spawn(|| 7).join().unwrap()
        })
    };
    settle();
    assert!(
        !sent_second.load(Ordering::SeqCst),
        "send must wait for room"
    );
    assert_eq!(rx.len(), 1);
    assert_eq!(rx.recv(), Ok(1));
    eventually("the sender is released by the receive", || {
        sent_second.load(Ordering::SeqCst)
    });
    assert_eq!(sender.join().unwrap(), 7);
    assert_eq!(rx.recv(), Ok(2));
    assert_eq!(rx.recv(), Err(RecvError::Closed));
}

#[test]
fn channel_timeouts_in_fibers() {
    let c = cluster("chan-timeout");
    let (tx, rx) = channel::bounded::<u8>(1);
    let fiber = c.spawn(move || {
        let start = Instant::now();
        let r = rx.recv_timeout(SHORT);
        let recv_elapsed = start.elapsed();
        tx.send(1).unwrap();
        let start = Instant::now();
        let s = tx.send_timeout(2, SHORT);
        (r, recv_elapsed, s, start.elapsed(), rx.try_recv())
    });
    let (r, recv_elapsed, s, send_elapsed, left) = fiber.join().unwrap();
    assert_eq!(r, Err(RecvTimeoutError::TimedOut));
    assert!(recv_elapsed >= SHORT);
    assert_eq!(s, Err(SendTimeoutError::TimedOut(2)));
    assert!(send_elapsed >= SHORT);
    assert_eq!(left, Ok(1));
}

#[test]
fn channel_cancelled_receiver_does_not_swallow_a_message() {
    let c = cluster("chan-cancel-recv");
    let (tx, rx) = channel::bounded::<u32>(4);
    let victim = {
        let rx = rx.clone();
        c.spawn(move || rx.recv())
    };
    settle();
    let other = {
        let rx = rx.clone();
        c.spawn(move || rx.recv())
    };
    settle();
    victim.cancel();
    assert_eq!(victim.join().unwrap(), Err(RecvError::Cancelled));
    tx.send(42).unwrap();
    assert_eq!(other.join().unwrap(), Ok(42));

    // Race a send against a cancellation: the message ends up with exactly one receiver.
    for i in 0..50 {
        let victim = {
            let rx = rx.clone();
            c.spawn(move || rx.recv())
        };
        let survivor = {
            let rx = rx.clone();
            c.spawn(move || rx.recv_timeout(Duration::from_secs(10)))
        };
        tx.send(i).unwrap();
        victim.cancel();
        let a = victim.join().unwrap();
        if a.is_ok() {
            // The victim won the race: give the survivor something else.
            tx.send(u32::MAX).unwrap();
        }
        match (a, survivor.join().unwrap()) {
            (Ok(v), Ok(u32::MAX)) | (Err(RecvError::Cancelled), Ok(v)) => assert_eq!(v, i),
            other => panic!("message lost or duplicated: {other:?}"),
        }
        assert!(rx.is_empty());
    }
}

#[test]
fn channel_cancelled_sender_gets_its_value_back() {
    let c = cluster("chan-cancel-send");
    let (tx, rx) = channel::bounded(1);
    tx.send(String::from("first")).unwrap();
    let victim = {
        let tx = tx.clone();
        c.spawn(move || tx.send(String::from("second")))
    };
    settle();
    victim.cancel();
    match victim.join().unwrap() {
        Err(SendError::Cancelled(v)) => assert_eq!(v, "second"),
        other => panic!("expected the value back, got {other:?}"),
    }
    assert_eq!(rx.recv().as_deref(), Ok("first"));
    assert!(rx.is_empty());
    // A cancelled fiber can still send when there is room (the fast path completes).
    let late = {
        let tx = tx.clone();
        c.spawn(move || {
            while !weft::is_cancelled() {
                weft::yield_now();
            }
            tx.send(String::from("cleanup"))
        })
    };
    late.cancel();
    assert_eq!(late.join().unwrap(), Ok(()));
    assert_eq!(rx.recv().as_deref(), Ok("cleanup"));
}

// ---------------------------------------------------------------------------------------------
// Oneshot

#[test]
fn oneshot_across_fibers_and_threads() {
    let c = cluster("oneshot");
    // fiber -> thread
    let (tx, rx) = oneshot::channel();
    let f = c.spawn(move || tx.send(1).unwrap());
    assert_eq!(rx.recv(), Ok(1));
    f.join().unwrap();
    // thread -> fiber
    let (tx, rx) = oneshot::channel();
    let f = c.spawn(move || rx.recv());
    settle();
    tx.send(2).unwrap();
    assert_eq!(f.join().unwrap(), Ok(2));
    // fiber -> fiber, and a dropped promise
    let (tx, rx) = oneshot::channel::<u8>();
    let (tx2, rx2) = oneshot::channel::<u8>();
    let waiter = c.spawn(move || (rx.recv(), rx2.recv()));
    let sender = c.spawn(move || {
        weft::sleep(Duration::from_millis(5)).unwrap();
        tx.send(3).unwrap();
        drop(tx2);
    });
    sender.join().unwrap();
    assert_eq!(waiter.join().unwrap(), (Ok(3), Err(RecvError::Closed)));
}

#[test]
fn oneshot_timeout_and_cancel_in_fibers() {
    let c = cluster("oneshot-cancel");
    let (tx, rx) = oneshot::channel::<u8>();
    let rx = Arc::new(rx);
    let timed = {
        let rx = rx.clone();
        c.spawn(move || {
            let start = Instant::now();
            (rx.recv_timeout(SHORT), start.elapsed())
        })
    };
    let (r, elapsed) = timed.join().unwrap();
    assert_eq!(r, Err(RecvTimeoutError::TimedOut));
    assert!(elapsed >= SHORT);
    let victim = {
        let rx = rx.clone();
        c.spawn(move || rx.recv())
    };
    settle();
    victim.cancel();
    assert_eq!(victim.join().unwrap(), Err(RecvError::Cancelled));
    tx.send(9).unwrap();
    assert_eq!(
        rx.recv(),
        Ok(9),
        "the cancelled waiter did not take the value"
    );
}

// ---------------------------------------------------------------------------------------------
// WaitGroup and Barrier

#[test]
fn wait_group_fibers_threads_timeout_and_cancel() {
    let c = cluster("wait-group");
    let wg = Arc::new(WaitGroup::new());
    let done = Arc::new(AtomicUsize::new(0));
    // A thread waits for fibers.
    for _ in 0..20 {
        wg.add(1);
        let (wg, done) = (wg.clone(), done.clone());
        c.spawn(move || {
            weft::sleep(Duration::from_millis(2)).unwrap();
            done.fetch_add(1, Ordering::SeqCst);
            wg.done();
        });
    }
    wg.wait().unwrap();
    assert_eq!(done.load(Ordering::SeqCst), 20);
    // A fiber waits for threads (after timing out once).
    wg.add(2);
    let waiter = {
        let wg = wg.clone();
        c.spawn(move || {
            let start = Instant::now();
            let first = wg.wait_timeout(SHORT);
            let elapsed = start.elapsed();
            (first, elapsed, wg.wait())
        })
    };
    let (first, elapsed, _) = {
        thread::sleep(SHORT + Duration::from_millis(20));
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let wg = wg.clone();
                thread::spawn(move || wg.done())
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        waiter.join().unwrap()
    };
    assert_eq!(first, Err(WaitError::TimedOut));
    assert!(elapsed >= SHORT);
    // A cancelled waiter.
    wg.add(1);
    let victim = {
        let wg = wg.clone();
        c.spawn(move || wg.wait())
    };
    settle();
    victim.cancel();
    assert_eq!(victim.join().unwrap(), Err(Cancelled));
    wg.done();
    wg.wait().unwrap();
}

#[test]
fn barrier_fibers_and_threads_over_rounds() {
    let c = cluster("barrier");
    const ROUNDS: usize = 30;
    let barrier = Arc::new(Barrier::new(5));
    let phase = Arc::new(AtomicUsize::new(0));
    let body = |barrier: Arc<Barrier>, phase: Arc<AtomicUsize>| {
        move || {
            let mut leaders = 0;
            for round in 0..ROUNDS {
                // Nobody may run ahead into the next round.
                assert!(phase.load(Ordering::SeqCst) / 5 >= round);
                phase.fetch_add(1, Ordering::SeqCst);
                if barrier.wait().unwrap().is_leader() {
                    leaders += 1;
                }
            }
            leaders
        }
    };
    let fibers: Vec<_> = (0..3)
        .map(|_| c.spawn(body(barrier.clone(), phase.clone())))
        .collect();
    let threads: Vec<_> = (0..2)
        .map(|_| thread::spawn(body(barrier.clone(), phase.clone())))
        .collect();
    let leaders: usize = fibers.into_iter().map(|f| f.join().unwrap()).sum::<usize>()
        + threads
            .into_iter()
            .map(|t| t.join().unwrap())
            .sum::<usize>();
    assert_eq!(leaders, ROUNDS);
}

#[test]
fn barrier_cancelled_or_timed_out_arrival_is_taken_back() {
    let c = cluster("barrier-cancel");
    let barrier = Arc::new(Barrier::new(2));
    let victim = {
        let b = barrier.clone();
        c.spawn(move || b.wait().map(|r| r.is_leader()))
    };
    settle();
    victim.cancel();
    assert_eq!(victim.join().unwrap(), Err(Cancelled));
    let timed = {
        let b = barrier.clone();
        c.spawn(move || {
            let start = Instant::now();
            (
                b.wait_timeout(SHORT).map(|r| r.is_leader()),
                start.elapsed(),
            )
        })
    };
    let (r, elapsed) = timed.join().unwrap();
    assert_eq!(r, Err(WaitError::TimedOut));
    assert!(elapsed >= SHORT);
    // Had either arrival stayed, the first of these two would lead alone.
    let first = {
        let b = barrier.clone();
        c.spawn(move || {
            b.wait_timeout(Duration::from_secs(10))
                .map(|r| r.is_leader())
        })
    };
    settle();
    assert!(!first.is_finished());
    let second = barrier.wait_timeout(Duration::from_secs(10)).unwrap();
    let first = first.join().unwrap().unwrap();
    assert!(first ^ second.is_leader(), "exactly one leader");
}

// ---------------------------------------------------------------------------------------------
// Randomized stress: conservation of permits and messages under timeouts and cancellation.

/// xorshift64*: small, seedable, good enough to pick operations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> usize {
        (self.next() % n) as usize
    }
}

/// The seed of a randomized stress test: `WEFT_STRESS_SEED` when set (to replay a failure),
/// else `default`; printed either way.
fn stress_seed(default: u64) -> u64 {
    let seed = std::env::var("WEFT_STRESS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default);
    eprintln!("stress seed {seed} (set WEFT_STRESS_SEED to replay)");
    seed
}

#[test]
fn stress_random_ops_conserve_permits_and_messages() {
    const FIBERS: usize = 64;
    const OPS: usize = 300;
    const SEMS: usize = 3;
    const CHANS: usize = 3;
    const PERMITS: [usize; SEMS] = [1, 2, 4];
    let seed = stress_seed(0x5eed_cafe);

    let c = cluster("stress");
    let sems: Arc<Vec<Semaphore>> = Arc::new(PERMITS.iter().map(|&p| Semaphore::new(p)).collect());
    let chans: Vec<_> = (0..CHANS).map(|i| channel::bounded::<u64>(i + 1)).collect();
    let txs: Arc<Vec<_>> = Arc::new(chans.iter().map(|(t, _)| t.clone()).collect());
    let rxs: Arc<Vec<_>> = Arc::new(chans.iter().map(|(_, r)| r.clone()).collect());
    drop(chans);

    let handles: Vec<_> = (0..FIBERS)
        .map(|f| {
            let (sems, txs, rxs) = (sems.clone(), txs.clone(), rxs.clone());
            c.spawn(move || {
                let mut rng = Rng(seed ^ (f as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
                let mut held = [0usize; SEMS];
                let mut sent = Vec::new();
                let mut received = Vec::new();
                let mut next_id = (f as u64) << 32;
                let mut was_cancelled = false;
                let short = Duration::from_micros(200 + rng.below(800) as u64);
                for _ in 0..OPS {
                    let s = rng.below(SEMS as u64);
                    let ch = rng.below(CHANS as u64);
                    let mut cancelled = false;
                    match rng.below(9) {
                        // A blocking acquire only with empty hands, so waits never form a cycle.
                        0 if held.iter().all(|&h| h == 0) => match sems[s].acquire() {
                            Ok(()) => held[s] += 1,
                            Err(Cancelled) => cancelled = true,
                        },
                        0 | 1 => match sems[s].acquire_timeout(short) {
                            Ok(()) => held[s] += 1,
                            Err(WaitError::TimedOut) => {}
                            Err(WaitError::Cancelled) => cancelled = true,
                        },
                        2 => {
                            if sems[s].try_acquire() {
                                held[s] += 1;
                            }
                        }
                        3 => {
                            if held[s] > 0 {
                                held[s] -= 1;
                                sems[s].release();
                            }
                        }
                        4 | 5 => {
                            next_id += 1;
                            match txs[ch].send_timeout(next_id, short) {
                                Ok(()) => sent.push(next_id),
                                Err(SendTimeoutError::TimedOut(v)) => assert_eq!(v, next_id),
                                Err(SendTimeoutError::Cancelled(v)) => {
                                    assert_eq!(v, next_id);
                                    cancelled = true;
                                }
                                Err(SendTimeoutError::Closed(_)) => unreachable!(),
                            }
                        }
                        6 => match rxs[ch].recv_timeout(short) {
                            Ok(v) => received.push(v),
                            Err(RecvTimeoutError::TimedOut) => {}
                            Err(RecvTimeoutError::Cancelled) => cancelled = true,
                            Err(RecvTimeoutError::Closed) => unreachable!(),
                        },
                        7 => {
                            if let Ok(v) = rxs[ch].try_recv() {
                                received.push(v);
                            }
                        }
                        _ => weft::yield_now(),
                    }
                    if cancelled {
                        was_cancelled = true;
                        break; // wind down
                    }
                    // Do not sit on permits forever: that could starve `acquire`s to death.
                    if held.iter().sum::<usize>() > 2 {
                        for (i, h) in held.iter_mut().enumerate() {
                            for _ in 0..*h {
                                sems[i].release();
                            }
                            *h = 0;
                        }
                    }
                }
                for (i, h) in held.iter().enumerate() {
                    sems[i].add_permits(*h);
                }
                (sent, received, was_cancelled)
            })
        })
        .collect();

    // Cancel every fourth fiber part-way through.
    thread::sleep(Duration::from_millis(5));
    for h in handles.iter().step_by(4) {
        h.cancel();
    }
    let mut sent = Vec::new();
    let mut received = Vec::new();
    let mut cancelled = 0;
    for h in handles {
        let (s, r, c) = h.join().unwrap();
        sent.extend(s);
        received.extend(r);
        cancelled += usize::from(c);
    }
    eprintln!(
        "stress: {} sent, {} received by fibers, {cancelled} fibers saw cancellation",
        sent.len(),
        received.len()
    );
    for rx in rxs.iter() {
        while let Ok(v) = rx.try_recv() {
            received.push(v);
        }
    }
    sent.sort_unstable();
    received.sort_unstable();
    assert_eq!(sent.len(), received.len(), "messages lost or duplicated");
    assert_eq!(sent, received, "every message is received exactly once");
    for (s, &p) in sems.iter().zip(PERMITS.iter()) {
        assert_eq!(s.available_permits(), p, "permits balance");
    }
}
