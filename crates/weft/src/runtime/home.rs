//! Home queues: where the started fibers of one processor wait, out of every other processor's
//! reach (the soundness default of the fiber contract, `fiber::core::Placement`).
//!
//! A started fiber is bound to the processor that first ran it. Its `Task` therefore never
//! enters the policy's queues (policies steal, share overflow queues, hand work over) nor the
//! cluster's yield queue: it goes to its home processor's [`HomeQueue`] (wake-ups there and
//! yields) or, from anywhere else, to that processor's [`HomeInbox`]; the push that finds the
//! processor registered asleep (a flag in the inbox's word) wakes it. The policies keep what
//! may move: fibers that have not started, and the `unsafe` migratable ones. So every policy,
//! present or future, obeys the rule without knowing it.
//!
//! Order inside a home queue: a LIFO slot (the fiber woken last runs next, at most
//! [`LIFO_RUNS_MAX`] times in a row, as in work-stealing) in front of a FIFO; yielded fibers in
//! their own FIFO, served where the cluster's yield queue is. Fibers whose timers come due at
//! the same check skip the slot (`HomeQueue::lifo_to_back`) and run in deadline order. When
//! both this queue and the policy have work, the processor runs the policy's next task when it
//! was queued before this queue's oldest (each task carries the round it was queued in,
//! `HomeQueue::oldest_stamp` and the processor's held policy task), so a burst of new fibers
//! runs ahead of the wake-ups queued after it; when it is the younger, the two queues take
//! turns (a policy whose own order is LIFO says little by its next task about how long its
//! others have waited, and keeps half the rounds); and it gives every
//! `OLDEST_CHECK_INTERVAL`-th round to the policy's oldest task. Both keep the
//! bounded-unfairness invariant (`sched::wait_rounds_bound`): a task in the home FIFO waits
//! for the policy's tasks queued before it, and otherwise moves up at least once every
//! `2 * (LIFO_RUNS_MAX + 1)` rounds.
//!
//! The inbox is a lock-free ring of 256 slots reserved by one compare-and-swap of a word that
//! also carries the owner's sleep flag, with a locked overflow behind it (protocol on
//! [`HomeInbox`]); the owner's look each round is one load.
//!
//! Invariants: a `HomeQueue` is touched only by its processor; a `HomeInbox` is pushed by
//! anyone and drained only by its processor; a task is in exactly one place; the inbox's
//! `ASLEEP` flag is set only by its processor, and cleared by it or by the one push that wakes
//! it.

use std::collections::VecDeque;
use std::mem::MaybeUninit;

use crossbeam_utils::CachePadded;

use crate::fiber::core::Task;
use crate::loom::{AtomicBool, AtomicUsize, Mutex, Ordering, UnsafeCell};
use crate::poison::Recover;

/// How many times in a row the LIFO slot may run before its task goes to the back of the FIFO.
pub(crate) const LIFO_RUNS_MAX: u32 = 3;

/// Slots in a home inbox's ring; wake-ups beyond them wait in its locked overflow.
const INBOX_SLOTS: usize = 256;

/// The inbox's state word: `tail * TAIL_ONE | OVERFLOW | ASLEEP`.
/// Set by the owner before its last look ahead of sleeping; cleared by the push that sees it
/// (that pusher wakes the owner) or by the owner once awake.
const ASLEEP: usize = 1;
/// Set after a push into the overflow; cleared by the owner before it drains the overflow.
const OVERFLOW: usize = 2;
/// One slot's worth of tail.
const TAIL_ONE: usize = 4;
/// Tails and heads count modulo this plus one (the bits of the word above the flags).
const INDEX_MASK: usize = usize::MAX / TAIL_ONE;

/// Wake-ups of a processor's fibers made elsewhere (other processors, other clusters, plain
/// threads): a bounded lock-free ring with a locked overflow, drained by its processor alone.
///
/// Protocol. One word holds the ring's tail and two flags. A push reserves slot `tail` with
/// one compare-and-swap that raises the tail and clears `ASLEEP`, then writes the slot and
/// marks it full (`Release`); it learns from the same CAS whether the owner was registered
/// asleep, and if so is the one pusher that wakes it. When the ring looks full (the owner's
/// `head`, read `Acquire` before the CAS, is a whole ring behind) the push goes to the locked
/// overflow, then sets `OVERFLOW` and clears `ASLEEP` in one read-modify-write. The owner, each
/// round, loads the word: slots from `head` to the tail are taken in order up to the first not
/// yet marked full (its pusher is between its CAS and its write: taken next round), then `head`
/// is published (`Release`, after the slots were emptied); when `OVERFLOW` is set it clears it
/// and then drains the overflow (only after the ring emptied, so one pusher's values keep their
/// order). Before sleeping the owner sets `ASLEEP` with a
/// read-modify-write and sleeps only if the old word shows no work (tail at `head`, no
/// `OVERFLOW`). Every push and that registration are read-modify-writes of the same word, so
/// one comes first in its modification order: either the owner sees the push, or the push sees
/// the owner asleep. No fence is needed (the old locked inbox needed the lock's two atomic
/// operations and a `SeqCst` fence in `Idle::notify_home`).
///
/// Modelled under loom (`home::loom`).
pub(crate) struct HomeInbox<T = Task> {
    /// `tail * TAIL_ONE | OVERFLOW | ASLEEP`; written by pushers and the owner.
    word: CachePadded<AtomicUsize>,
    /// How many slots the owner has emptied (mod `INDEX_MASK + 1`): stored only by the owner,
    /// after it emptied them; read by pushers to see room.
    head: CachePadded<AtomicUsize>,
    slots: Box<[Slot<T>]>,
    /// `slots.len() - 1`.
    mask: usize,
    overflow: Mutex<VecDeque<T>>,
}

struct Slot<T> {
    /// Whether `value` holds a pushed value the owner has not taken.
    full: AtomicBool,
    value: UnsafeCell<MaybeUninit<T>>,
}

// SAFETY: values cross threads only by being moved into and out of slots (so `T: Send`); a
// slot's value is written only by the pusher that reserved the slot with the CAS, while it is
// empty (`head` shows it was taken), and read only by the owner after seeing it `full`
// (`Acquire` after the pusher's `Release`): never two accesses at once.
unsafe impl<T: Send> Sync for HomeInbox<T> {}
// SAFETY: as above; the inbox owns the values it holds.
unsafe impl<T: Send> Send for HomeInbox<T> {}

impl<T> Default for HomeInbox<T> {
    fn default() -> Self {
        HomeInbox::with_slots(INBOX_SLOTS)
    }
}

impl<T> HomeInbox<T> {
    /// An inbox whose ring has `slots` slots (a power of two).
    pub(crate) fn with_slots(slots: usize) -> Self {
        assert!(slots.is_power_of_two());
        HomeInbox {
            word: CachePadded::new(AtomicUsize::new(0)),
            head: CachePadded::new(AtomicUsize::new(0)),
            slots: (0..slots)
                .map(|_| Slot {
                    full: AtomicBool::new(false),
                    value: UnsafeCell::new(MaybeUninit::uninit()),
                })
                .collect(),
            mask: slots - 1,
            overflow: Mutex::new(VecDeque::new()),
        }
    }

    /// Queues `value` from any thread. Returns `true` when the owner had registered asleep and
    /// this push took that flag: the caller must wake it.
    #[inline]
    pub(crate) fn push(&self, value: T) -> bool {
        let mut word = self.word.load(Ordering::Relaxed);
        loop {
            let tail = word / TAIL_ONE;
            let head = self.head.load(Ordering::Acquire);
            if tail.wrapping_sub(head) & INDEX_MASK >= self.slots.len() {
                return self.push_overflow(value);
            }
            let raised = word.wrapping_add(TAIL_ONE) & !ASLEEP;
            match self
                .word
                .compare_exchange_weak(word, raised, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => {
                    let slot = &self.slots[tail & self.mask];
                    // SAFETY: the CAS reserved slot `tail` for this push alone, and `head`
                    // (read `Acquire` before it, and only ever growing) is past the slot's
                    // previous use, so the owner has taken that value and stored `full = false`
                    // before publishing `head`: nobody else touches the slot until `full` says
                    // it holds a value.
                    slot.value.with_mut(|p| unsafe { (*p).write(value) });
                    slot.full.store(true, Ordering::Release);
                    return word & ASLEEP != 0;
                }
                Err(actual) => word = actual,
            }
        }
    }

    #[cold]
    fn push_overflow(&self, value: T) -> bool {
        self.overflow.lock().recover().push_back(value);
        let mut word = self.word.load(Ordering::Relaxed);
        loop {
            match self.word.compare_exchange_weak(
                word,
                (word | OVERFLOW) & !ASLEEP,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return word & ASLEEP != 0,
                Err(actual) => word = actual,
            }
        }
    }

    /// Whether nothing waits here (owner only). A value whose pusher has reserved its slot but
    /// not written it yet counts as waiting.
    pub(crate) fn is_empty(&self) -> bool {
        let word = self.word.load(Ordering::Acquire);
        !self.has_work(word)
    }

    /// Whether `word` (read by the owner) shows values not taken yet.
    #[inline]
    fn has_work(&self, word: usize) -> bool {
        word & OVERFLOW != 0 || word / TAIL_ONE != self.head.load(Ordering::Relaxed)
    }

    /// The owner's look each round: one load, compared with the word an inbox with nothing
    /// waiting has (`quiet`, the caller's copy of what [`HomeInbox::drain_into`] returned); on
    /// a difference, drains into `out`.
    #[inline]
    pub(crate) fn take_into(&self, quiet: &mut usize, out: &mut VecDeque<T>) {
        if self.word.load(Ordering::Relaxed) & !ASLEEP != *quiet {
            *quiet = self.drain_into(out);
        }
    }

    /// Moves every value ready to take to the back of `out`, oldest first (owner only): the
    /// ring's, then (when every slot up to the tail was ready) the overflow's, so each pusher's
    /// values keep their order.
    /// Returns the word the inbox will have while nothing more arrives (flags aside).
    #[inline(never)]
    pub(crate) fn drain_into(&self, out: &mut VecDeque<T>) -> usize {
        let word = self.word.load(Ordering::Acquire);
        let tail = word / TAIL_ONE;
        let start = self.head.load(Ordering::Relaxed);
        let mut head = start;
        while head != tail {
            let slot = &self.slots[head & self.mask];
            if !slot.full.load(Ordering::Acquire) {
                // Its pusher reserved it and is writing it: next round.
                break;
            }
            // SAFETY: `full` (read `Acquire`, stored `Release` after the write) says the slot
            // holds a value its pusher finished writing; only the owner reads slots, and no
            // pusher writes this one again until `head` moves past it below.
            out.push_back(slot.value.with(|p| unsafe { (*p).assume_init_read() }));
            slot.full.store(false, Ordering::Relaxed);
            head = head.wrapping_add(1) & INDEX_MASK;
        }
        if head != start {
            self.head.store(head, Ordering::Release);
        }
        if head == tail && word & OVERFLOW != 0 {
            // Only once the ring is empty up to the tail it read: a pusher's values that
            // overflowed came after its values in the ring. Cleared before the drain: a push
            // into the overflow after the drain's lock sets it again.
            self.word.fetch_and(!OVERFLOW, Ordering::AcqRel);
            out.extend(self.overflow.lock().recover().drain(..));
        }
        head * TAIL_ONE
    }

    /// Registers the owner as about to sleep (before its last look at every queue). Returns
    /// whether work is waiting here, in which case it must not sleep (and calls
    /// [`HomeInbox::end_sleep`]); otherwise a later push reports it must be woken.
    pub(crate) fn begin_sleep(&self) -> bool {
        let old = self.word.fetch_or(ASLEEP, Ordering::AcqRel);
        self.has_work(old)
    }

    /// The owner is awake again (or did not sleep): drops the flag if no push took it.
    pub(crate) fn end_sleep(&self) {
        // Only the owner sets it: a clear flag stays clear.
        if self.word.load(Ordering::Relaxed) & ASLEEP != 0 {
            self.word.fetch_and(!ASLEEP, Ordering::Relaxed);
        }
    }
}

impl<T> Drop for HomeInbox<T> {
    fn drop(&mut self) {
        let tail = self.word.load(Ordering::Relaxed) / TAIL_ONE;
        let mut head = self.head.load(Ordering::Relaxed);
        while head != tail {
            let slot = &self.slots[head & self.mask];
            if slot.full.load(Ordering::Relaxed) {
                // SAFETY: `&mut self`: no pusher is left, and a full slot holds a written value
                // nobody took.
                drop(slot.value.with(|p| unsafe { (*p).assume_init_read() }));
            }
            head = head.wrapping_add(1) & INDEX_MASK;
        }
    }
}

/// A processor's own queue of its started fibers.
#[derive(Default)]
pub(crate) struct HomeQueue {
    /// The fiber made runnable here last.
    lifo: Option<Task>,
    /// How many tasks in a row came from the LIFO slot; see [`LIFO_RUNS_MAX`].
    lifo_runs: u32,
    fifo: VecDeque<Task>,
    /// Fibers that called `yield_now`, oldest first.
    yielded: VecDeque<Task>,
    /// Whose turn it is when both this queue and the policy have work and the policy's next
    /// task is the younger (see the module docs).
    home_turn: bool,
    /// The inbox's word when nothing waits in it (see [`HomeInbox::take_into`]).
    inbox_quiet: usize,
}

impl HomeQueue {
    /// Queues a fiber made runnable on its home processor.
    #[inline]
    pub(crate) fn push(&mut self, task: Task) {
        if let Some(previous) = self.lifo.replace(task) {
            self.fifo.push_back(previous);
        }
    }

    /// Moves the LIFO slot's task to the back of the FIFO, after the tasks pushed before it:
    /// a batch pushed in the order it should run (timers due together) then runs in it.
    pub(crate) fn lifo_to_back(&mut self) {
        if let Some(task) = self.lifo.take() {
            self.fifo.push_back(task);
        }
    }

    pub(crate) fn push_yielded(&mut self, task: Task) {
        self.yielded.push_back(task);
    }

    pub(crate) fn pop_yielded(&mut self) -> Option<Task> {
        self.yielded.pop_front()
    }

    /// Takes what other threads queued for this processor, stamping each as queued now
    /// (`stamp`: the processor's round stamp, see [`HomeQueue::oldest_stamp`]).
    #[inline]
    pub(crate) fn take_inbox(&mut self, inbox: &HomeInbox, stamp: u64) {
        let before = self.fifo.len();
        inbox.take_into(&mut self.inbox_quiet, &mut self.fifo);
        if self.fifo.len() > before {
            for task in self.fifo.range(before..) {
                task.0.ready_round.store(stamp, Ordering::Relaxed);
            }
        }
    }

    /// Whether a runnable fiber waits here (yielded ones included); the inbox is apart.
    pub(crate) fn is_empty(&self) -> bool {
        self.lifo.is_none() && self.fifo.is_empty() && self.yielded.is_empty()
    }

    /// Whether the LIFO slot or the FIFO holds a task.
    #[inline]
    pub(crate) fn has_runnable(&self) -> bool {
        self.lifo.is_some() || !self.fifo.is_empty()
    }

    /// The next task in this queue's own order.
    #[inline]
    pub(crate) fn pop(&mut self) -> Option<Task> {
        if let Some(task) = self.lifo.take() {
            if self.lifo_runs < LIFO_RUNS_MAX {
                self.lifo_runs += 1;
                return Some(task);
            }
            self.fifo.push_back(task);
        }
        self.lifo_runs = 0;
        self.fifo.pop_front()
    }

    /// The oldest task: the FIFO's head, else the LIFO slot.
    pub(crate) fn pop_oldest(&mut self) -> Option<Task> {
        if let Some(task) = self.fifo.pop_front() {
            return Some(task);
        }
        self.lifo_runs = 0;
        self.lifo.take()
    }

    /// Flips whose turn it is; `true`: this queue's.
    #[inline]
    pub(crate) fn take_turn(&mut self) -> bool {
        self.home_turn = !self.home_turn;
        self.home_turn
    }

    /// The round stamp of the task that has waited here longest (the FIFO's head, else the
    /// LIFO slot's): every task is stamped by this processor as it is queued here (its own
    /// pushes, and [`HomeQueue::take_inbox`]), so stamps compare by the processor's rounds.
    #[inline]
    pub(crate) fn oldest_stamp(&self) -> Option<u64> {
        self.fifo
            .front()
            .or(self.lifo.as_ref())
            .map(|task| task.0.ready_round.load(Ordering::Relaxed))
    }
}

#[cfg(all(test, loom))]
mod loom {
    //! The home inbox under loom: every pushed value is taken once and each pusher's stay in
    //! order, through the ring and its overflow (rings of one or two slots reach the overflow
    //! at once); and an owner that goes to sleep without seeing a push is woken by that push.
    use std::collections::VecDeque;

    use ::loom::sync::Arc;
    use ::loom::thread;

    use super::HomeInbox;
    use crate::loom::{AtomicBool, Ordering};

    fn model_bounded(preemptions: usize, f: impl Fn() + Sync + Send + 'static) {
        let mut builder = ::loom::model::Builder::new();
        builder.preemption_bound = builder.preemption_bound.or(Some(preemptions));
        builder.check(f);
    }

    /// Each pusher's values arrived once each and in the order it pushed them.
    fn assert_all_in_order(got: &VecDeque<u32>, pushers: u32, each: u32) {
        for p in 0..pushers {
            let mine: Vec<u32> = got.iter().copied().filter(|v| v / 10 == p).collect();
            let expected: Vec<u32> = (0..each).map(|i| p * 10 + i).collect();
            assert_eq!(mine, expected, "pusher {p}'s values");
        }
        assert_eq!(got.len(), (pushers * each) as usize);
    }

    #[test]
    fn two_pushers_and_the_owner_lose_nothing() {
        model_bounded(3, || {
            let inbox = Arc::new(HomeInbox::<u32>::with_slots(2));
            let pushers: Vec<_> = (0..2u32)
                .map(|p| {
                    let inbox = inbox.clone();
                    thread::spawn(move || {
                        inbox.push(p * 10);
                        inbox.push(p * 10 + 1);
                    })
                })
                .collect();
            let (mut got, mut quiet) = (VecDeque::new(), 0);
            inbox.take_into(&mut quiet, &mut got);
            for pusher in pushers {
                pusher.join().unwrap();
            }
            assert!(!inbox.is_empty() || got.len() == 4);
            inbox.take_into(&mut quiet, &mut got);
            assert!(inbox.is_empty());
            assert_all_in_order(&got, 2, 2);
        });
    }

    #[test]
    fn a_push_never_misses_its_sleeping_owner() {
        ::loom::model(|| {
            let inbox = Arc::new(HomeInbox::<u32>::with_slots(1));
            let woken = Arc::new(AtomicBool::new(false));
            let (i2, w2) = (inbox.clone(), woken.clone());
            let pusher = thread::spawn(move || {
                // The second push overflows unless the owner took the first already.
                for v in 0..2 {
                    if i2.push(v) {
                        // At most one push takes the flag per sleep.
                        assert!(!w2.swap(true, Ordering::Relaxed), "woken twice");
                    }
                }
            });
            let mut got = VecDeque::new();
            inbox.drain_into(&mut got);
            let slept = !inbox.begin_sleep();
            if !slept {
                inbox.end_sleep();
            }
            pusher.join().unwrap();
            if slept {
                assert!(woken.load(Ordering::Relaxed), "lost wake-up");
                inbox.end_sleep();
            }
            inbox.drain_into(&mut got);
            assert_all_in_order(&got, 1, 2);
        });
    }
}
