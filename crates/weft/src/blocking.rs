//! The blocking pool: run a closure that would block its OS thread without stalling a processor.
//!
//! [`blocking`] hands the closure to a bounded set of helper threads and parks the calling fiber
//! until it returns. Helpers are started on demand up to the limit (`WEFT_BLOCKING_THREADS`,
//! default 64) and exit after 10 s without work; beyond the limit, jobs wait in a FIFO queue.

use std::collections::VecDeque;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;

use crate::fiber::park::{current_unparker, Unparker};
use crate::poison::Recover;

type Job = Box<dyn FnOnce() + Send>;

/// How long an idle helper thread waits for work before it exits.
const KEEP_ALIVE: Duration = Duration::from_secs(10);
const DEFAULT_MAX_THREADS: usize = 64;

struct Pool {
    state: Mutex<PoolState>,
    work: Condvar,
    max_threads: usize,
}

struct PoolState {
    queue: VecDeque<Job>,
    threads: usize,
    idle: usize,
}

fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| {
        let max_threads = match std::env::var("WEFT_BLOCKING_THREADS") {
            Ok(v) => v.parse().ok().filter(|n| *n > 0).unwrap_or_else(|| {
                panic!("weft: WEFT_BLOCKING_THREADS={v:?} is not a positive number")
            }),
            Err(_) => DEFAULT_MAX_THREADS,
        };
        Pool {
            state: Mutex::new(PoolState {
                queue: VecDeque::new(),
                threads: 0,
                idle: 0,
            }),
            work: Condvar::new(),
            max_threads,
        }
    })
}

impl Pool {
    fn submit(&'static self, job: Job) {
        let mut state = self.state.lock().recover();
        state.queue.push_back(job);
        if state.idle > 0 {
            self.work.notify_one();
        } else if state.threads < self.max_threads {
            state.threads += 1;
            let spawned = std::thread::Builder::new()
                .name("weft-blocking".to_owned())
                .spawn(move || self.helper());
            if spawned.is_err() {
                // Could not start a helper: the job waits for an existing one. With none at all,
                // run it here rather than losing it.
                state.threads -= 1;
                if state.threads == 0 {
                    let job = state.queue.pop_back().expect("pushed above");
                    drop(state);
                    job();
                }
            }
        }
    }

    fn helper(&'static self) {
        let mut state = self.state.lock().recover();
        loop {
            if let Some(job) = state.queue.pop_front() {
                drop(state);
                job();
                state = self.state.lock().recover();
                continue;
            }
            state.idle += 1;
            let (next, timeout) = self.work.wait_timeout(state, KEEP_ALIVE).recover();
            state = next;
            state.idle -= 1;
            if timeout.timed_out() && state.queue.is_empty() {
                state.threads -= 1;
                return;
            }
        }
    }
}

struct Slot<T> {
    result: Option<std::thread::Result<T>>,
    waiter: Unparker,
}

/// Runs `f` on a helper thread and parks the calling fiber until it returns; returns its value
/// (a panic in `f` is resumed in the caller). Called outside a fiber, runs `f` right here.
///
/// The closure always runs to completion: cancelling the waiting fiber takes effect at its next
/// blocking point after this one, so buffers lent to `f` are never abandoned mid-call.
pub fn blocking<F, T>(f: F) -> T
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    if !crate::fiber::current::in_fiber() {
        return f();
    }
    let slot = Arc::new(Mutex::new(Slot {
        result: None,
        waiter: current_unparker(),
    }));
    let filled = slot.clone();
    pool().submit(Box::new(move || {
        let result = catch_unwind(AssertUnwindSafe(f));
        let waiter = {
            let mut s = filled.lock().recover();
            s.result = Some(result);
            s.waiter.clone()
        };
        waiter.unpark();
    }));
    loop {
        if let Some(result) = slot.lock().recover().result.take() {
            return result.unwrap_or_else(|payload| resume_unwind(payload));
        }
        // Cancellation is deliberately ignored here: see the doc comment.
        crate::fiber::park::park_current(None);
    }
}
