//! Idle processors: who searches for work, who sleeps, and waking them without losing a wake-up.
//!
//! Protocol (a Dekker pair, both sides fenced with `SeqCst`):
//! - a processor about to sleep registers itself (`sleeping += 1`, its index on the list), issues
//!   a `SeqCst` fence, then looks at every queue once more and only sleeps if all are empty;
//! - whoever makes work visible issues a `SeqCst` fence after the push, then reads `searching`
//!   and `sleeping`; when nobody searches and somebody sleeps, it wakes one sleeper.
//!
//! Either the sleeper's re-check sees the work, or the pusher sees the sleeper: a wake-up is never
//! lost. When nobody sleeps, the pusher's cost is the fence and two loads, no syscall.
//! At most half the processors (rounded up) search at once, so a burst of wake-ups does not turn
//! every idle processor into a spinner hammering the others' queues.
//!
//! The sleep itself happens in the processor's I/O driver (`io_uring_enter` or `epoll_wait`),
//! and waking a sleeper writes its [`Waker`] (an eventfd the driver always watches). The eventfd
//! counter persists until the driver reads it, so it behaves like `Thread::unpark`'s token: a
//! wake-up written after the sleeper registered but before it blocked makes the block return at
//! once. The Dekker argument above is therefore unchanged by sleeping in the kernel's I/O wait.

use std::sync::Arc;

use crate::io::driver::Waker;
use crate::loom::{fence, AtomicUsize, Mutex, Ordering};
use crate::poison::Recover;

/// How the protocol wakes processor `index` (its eventfd in the runtime; a flag in the loom
/// models, `idle::loom`).
pub(crate) trait WakeProcessor {
    fn wake_processor(&self, index: usize);
}

impl WakeProcessor for [Arc<Waker>] {
    #[inline]
    fn wake_processor(&self, index: usize) {
        self[index].wake();
    }
}

impl WakeProcessor for Vec<Arc<Waker>> {
    #[inline]
    fn wake_processor(&self, index: usize) {
        self[index].wake();
    }
}

pub(crate) struct Idle {
    processors: usize,
    /// Processors spinning through `steal` looking for work.
    searching: AtomicUsize,
    /// Processors registered as asleep (or about to be).
    sleeping: AtomicUsize,
    /// Indices of the sleepers, most recent last.
    sleepers: Mutex<Vec<usize>>,
}

impl Idle {
    pub(crate) fn new(processors: usize) -> Idle {
        Idle {
            processors,
            searching: AtomicUsize::new(0),
            sleeping: AtomicUsize::new(0),
            sleepers: Mutex::new(Vec::with_capacity(processors)),
        }
    }

    /// Becomes a searcher unless half the processors already are.
    /// Processors of the cluster.
    pub(crate) fn processors(&self) -> usize {
        self.processors
    }

    pub(crate) fn try_start_search(&self) -> bool {
        let limit = self.processors.div_ceil(2);
        let mut now = self.searching.load(Ordering::Relaxed);
        loop {
            if now >= limit {
                return false;
            }
            match self.searching.compare_exchange_weak(
                now,
                now + 1,
                Ordering::SeqCst,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(actual) => now = actual,
            }
        }
    }

    /// Stops searching; returns whether this was the last searcher.
    pub(crate) fn end_search(&self) -> bool {
        self.searching.fetch_sub(1, Ordering::SeqCst) == 1
    }

    /// Registers processor `index` as about to sleep. Re-check the queues after this.
    pub(crate) fn register_sleep(&self, index: usize) {
        let mut list = self.sleepers.lock().recover();
        list.push(index);
        self.sleeping.fetch_add(1, Ordering::SeqCst);
        drop(list);
        fence(Ordering::SeqCst);
    }

    /// Removes processor `index` from the sleepers if a waker has not already done so.
    pub(crate) fn unregister_sleep(&self, index: usize) {
        let mut list = self.sleepers.lock().recover();
        if let Some(pos) = list.iter().position(|&i| i == index) {
            list.swap_remove(pos);
            self.sleeping.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Called after work was made visible: wakes a sleeper when nobody is searching.
    #[inline]
    pub(crate) fn notify_work(&self, wakers: &(impl WakeProcessor + ?Sized)) {
        fence(Ordering::SeqCst);
        if self.searching.load(Ordering::Relaxed) == 0 && self.sleeping.load(Ordering::Relaxed) > 0
        {
            self.wake_one(wakers);
        }
    }

    /// Like [`Idle::notify_work`], but only wakes a sleeper when `visible()` (read after the
    /// fence) says some processor other than the pusher could take work. A push the policy
    /// keeps private to its processor (a LIFO slot) is run by that processor; waking another for
    /// it only sends it searching in vain. No wake-up is lost: work this push made visible to
    /// others is seen by `visible()`, which runs after the push and the fence.
    #[inline]
    pub(crate) fn notify_work_if(
        &self,
        wakers: &(impl WakeProcessor + ?Sized),
        visible: impl FnOnce() -> bool,
    ) {
        fence(Ordering::SeqCst);
        if self.searching.load(Ordering::Relaxed) == 0
            && self.sleeping.load(Ordering::Relaxed) > 0
            && visible()
        {
            self.wake_one(wakers);
        }
    }

    /// Wakes one sleeper, if any.
    pub(crate) fn wake_one(&self, wakers: &(impl WakeProcessor + ?Sized)) -> bool {
        let index = {
            let mut list = self.sleepers.lock().recover();
            let Some(index) = list.pop() else {
                return false;
            };
            self.sleeping.fetch_sub(1, Ordering::SeqCst);
            index
        };
        wakers.wake_processor(index);
        true
    }

    /// Wakes every processor (shutdown).
    pub(crate) fn wake_all(&self, wakers: &(impl WakeProcessor + ?Sized)) {
        {
            let mut list = self.sleepers.lock().recover();
            self.sleeping.fetch_sub(list.len(), Ordering::SeqCst);
            list.clear();
        }
        for index in 0..self.processors {
            wakers.wake_processor(index);
        }
    }

    #[cfg(test)]
    #[allow(dead_code)] // for ad-hoc debugging of the protocol in unit tests
    pub(crate) fn sleeping(&self) -> usize {
        self.sleeping.load(Ordering::SeqCst)
    }
}

#[cfg(all(test, loom))]
mod loom {
    //! The idle-sleep handshake under loom: a processor that decides to sleep is always woken
    //! by a push it did not see. `work` stands for a queue's contents: the real re-check reads
    //! queue lengths with plain loads, which is why it is `Relaxed` here and the `SeqCst`
    //! fences carry the argument.
    use ::loom::sync::Arc;
    use ::loom::thread;

    use super::*;
    use crate::loom::AtomicBool;

    /// Records wake-ups instead of writing eventfds.
    struct Flags(Vec<AtomicBool>);

    impl WakeProcessor for Flags {
        fn wake_processor(&self, index: usize) {
            self.0[index].store(true, Ordering::Relaxed);
        }
    }

    fn flags(n: usize) -> Flags {
        Flags((0..n).map(|_| AtomicBool::new(false)).collect())
    }

    /// Processor `index` going to sleep: register, re-check `work`, sleep if empty. Returns
    /// whether it slept.
    fn try_sleep(idle: &Idle, index: usize, work: &AtomicBool) -> bool {
        idle.register_sleep(index);
        if work.load(Ordering::Relaxed) {
            idle.unregister_sleep(index);
            return false;
        }
        true
    }

    #[test]
    fn a_shared_push_never_misses_a_sleeper() {
        ::loom::model(|| {
            let idle = Arc::new(Idle::new(2));
            let wakers = Arc::new(flags(2));
            let work = Arc::new(AtomicBool::new(false));
            let (i2, w2, k2) = (idle.clone(), wakers.clone(), work.clone());
            let pusher = thread::spawn(move || {
                k2.store(true, Ordering::Relaxed);
                i2.notify_work(&*w2);
            });
            let slept = try_sleep(&idle, 0, &work);
            pusher.join().unwrap();
            if slept {
                assert!(wakers.0[0].load(Ordering::Relaxed), "lost wake-up");
            }
        });
    }

    #[test]
    fn a_push_only_the_pusher_could_see_wakes_nobody() {
        ::loom::model(|| {
            let idle = Idle::new(2);
            let wakers = flags(2);
            idle.register_sleep(1);
            idle.notify_work_if(&wakers, || false);
            assert!(!wakers.0[1].load(Ordering::Relaxed));
        });
    }

    #[test]
    fn one_push_and_two_sleepers_leave_no_work_unseen() {
        let mut builder = ::loom::model::Builder::new();
        builder.preemption_bound = builder.preemption_bound.or(Some(3));
        builder.check(|| {
            let idle = Arc::new(Idle::new(2));
            let wakers = Arc::new(flags(2));
            let work = Arc::new(AtomicBool::new(false));
            let sleepers: Vec<_> = (0..2)
                .map(|index| {
                    let (i2, k2) = (idle.clone(), work.clone());
                    thread::spawn(move || try_sleep(&i2, index, &k2))
                })
                .collect();
            work.store(true, Ordering::Relaxed);
            idle.notify_work(&*wakers);
            let slept: Vec<bool> = sleepers.into_iter().map(|h| h.join().unwrap()).collect();
            if slept.iter().all(|&s| s) {
                // Both slept without seeing the work: one of them must have been woken.
                assert!(
                    wakers.0.iter().any(|w| w.load(Ordering::Relaxed)),
                    "lost wake-up"
                );
            }
        });
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn sleepers_are_counted_and_woken_once() {
        let idle = Idle::new(2);
        let threads: Vec<Arc<Waker>> = (0..2)
            .map(|_| Arc::new(Waker::new(crate::io::IoBackend::Epoll).unwrap()))
            .collect();
        idle.register_sleep(0);
        idle.register_sleep(1);
        assert_eq!(idle.sleeping(), 2);
        assert!(idle.wake_one(&threads));
        assert_eq!(idle.sleeping(), 1);
        // Whoever was woken unregisters as a no-op; the other one is still asleep.
        idle.unregister_sleep(1);
        idle.unregister_sleep(0);
        assert_eq!(idle.sleeping(), 0);
        assert!(!idle.wake_one(&threads));
    }

    #[test]
    fn at_most_half_search() {
        let idle = Idle::new(3);
        assert!(idle.try_start_search());
        assert!(idle.try_start_search());
        assert!(!idle.try_start_search());
        assert!(!idle.end_search());
        assert!(idle.end_search());
    }
}
