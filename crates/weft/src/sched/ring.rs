//! A bounded lock-free ring: one owner pushes and pops, any thread steals half.
//!
//! The design is tokio's `multi_thread/queue.rs`. The buffer is a power of two of slots. Three
//! counters wrap around `u32` and index the buffer modulo its capacity:
//!
//! - `tail`: the next slot the owner writes. Only the owner stores it.
//! - `head` packs two halves in one `AtomicU64`: `real`, the first slot still in the queue, and
//!   `steal`, the first slot a stealer may still be reading. Normally `steal == real`. A stealer
//!   claims a batch by moving `real` forward alone (one CAS), copies the batch out, then commits
//!   by moving `steal` up to `real` (a second CAS). While `steal != real` no other stealer
//!   starts, and the owner does not overwrite the slots in `[steal, real)`.
//!
//! Invariants (a reviewer can check each `unsafe` against these):
//! - slots in `[real, tail)` hold initialised values owned by the queue;
//! - slots in `[steal, real)` hold values being moved out by the one active stealer;
//! - every other slot is logically uninitialised and belongs to the owner, who may write it;
//! - `tail - steal <= capacity` always, so the owner never writes a slot a stealer is reading;
//! - a value is moved out of a slot only by whoever advanced `real` past it (the owner's `pop`
//!   and overflow, or a stealer's claim), so each value leaves the queue exactly once.
//!
//! All atomics and cells come from `crate::loom`, so the `loom` tests below model-check the
//! interleavings: `RUSTFLAGS="--cfg loom" cargo test -p weft --release --lib ring::loom`.

use std::marker::PhantomData;
use std::mem::MaybeUninit;
use std::ptr;

use crate::loom::{Arc, AtomicU32, AtomicU64, Ordering, UnsafeCell};

/// The capacity the scheduler uses: enough to absorb a burst of spawns before overflowing, small
/// enough that stealing half of it is a short copy.
pub const DEFAULT_CAPACITY: usize = 256;

/// The largest capacity: counters wrap around `u32`, and `tail - steal` must stay unambiguous.
const MAX_CAPACITY: usize = 1 << 16;

/// The owner's handle: push, pop, overflow. Exactly one exists per ring; it is `Send` but its
/// methods take `&mut self`, so only one thread uses it at a time.
pub struct Local<T> {
    inner: Arc<Inner<T>>,
    /// `Local` is not `Sync`: the owner-only methods rely on being the only caller.
    _not_sync: PhantomData<std::cell::Cell<()>>,
}

/// A stealer's handle: any number, any thread.
pub struct Steal<T>(Arc<Inner<T>>);

/// Where the owner sends tasks that do not fit: the scheduler's shared inject queue.
pub trait Overflow<T> {
    /// Takes one value (the owner could not make room because a stealer is mid-steal).
    fn push(&self, value: T);
    /// Takes a batch (half the ring plus the value that did not fit), ideally in one lock.
    fn push_batch(&self, values: impl Iterator<Item = T>);
}

struct Inner<T> {
    /// `(steal, real)` packed as `steal << 32 | real`: see the module docs.
    head: AtomicU64,
    /// The next slot the owner writes; stored only by the owner.
    tail: AtomicU32,
    /// `capacity - 1`, to turn a counter into a slot index.
    mask: u32,
    /// The slots; see the module invariants for who may touch which.
    buffer: Box<[UnsafeCell<MaybeUninit<T>>]>,
}

// SAFETY: values move between threads through the queue (a stealer reads what the owner wrote),
// so `T: Send` is required and sufficient: the head/tail protocol gives each slot one accessor at
// a time, ordered by release/acquire on `head` and `tail`.
unsafe impl<T: Send> Send for Inner<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for Inner<T> {}

fn pack(steal: u32, real: u32) -> u64 {
    (u64::from(steal) << 32) | u64::from(real)
}

fn unpack(head: u64) -> (u32, u32) {
    ((head >> 32) as u32, head as u32)
}

/// Makes a ring of `capacity` slots (a power of two, at most 65536): its owner and one stealer
/// (clone it for more).
///
/// # Panics
/// When `capacity` is not a power of two in `2..=65536`.
pub fn new<T>(capacity: usize) -> (Local<T>, Steal<T>) {
    new_at(capacity, 0)
}

/// [`new`] with every counter starting at `start`, so tests can cross the `u32` wrap-around.
fn new_at<T>(capacity: usize, start: u32) -> (Local<T>, Steal<T>) {
    assert!(
        capacity.is_power_of_two() && (2..=MAX_CAPACITY).contains(&capacity),
        "ring capacity must be a power of two in 2..=65536, not {capacity}"
    );
    let buffer = (0..capacity)
        .map(|_| UnsafeCell::new(MaybeUninit::uninit()))
        .collect();
    let inner = Arc::new(Inner {
        head: AtomicU64::new(pack(start, start)),
        tail: AtomicU32::new(start),
        mask: (capacity - 1) as u32,
        buffer,
    });
    let local = Local {
        inner: inner.clone(),
        _not_sync: PhantomData,
    };
    (local, Steal(inner))
}

impl<T> Inner<T> {
    fn capacity(&self) -> u32 {
        self.mask + 1
    }

    fn slot(&self, pos: u32) -> &UnsafeCell<MaybeUninit<T>> {
        &self.buffer[(pos & self.mask) as usize]
    }

    /// How many values are in `[real, tail)`, as seen by these two loads.
    fn len(&self) -> usize {
        let (_, real) = unpack(self.head.load(Ordering::Acquire));
        let tail = self.tail.load(Ordering::Acquire);
        tail.wrapping_sub(real) as usize
    }
}

impl<T> Drop for Inner<T> {
    fn drop(&mut self) {
        // Every handle is gone, so no stealer is mid-steal: `steal == real`, and the values in
        // `[real, tail)` are the queue's to drop.
        let (_, real) = unpack(self.head.load(Ordering::Relaxed));
        let tail = self.tail.load(Ordering::Relaxed);
        let mut pos = real;
        while pos != tail {
            // SAFETY: `pos` is in `[real, tail)`, so the slot holds an initialised value (module
            // invariants), and with no handle left nobody else can touch it.
            self.slot(pos)
                .with_mut(|p| unsafe { ptr::drop_in_place((*p).as_mut_ptr()) });
            pos = pos.wrapping_add(1);
        }
    }
}

impl<T> Local<T> {
    /// The number of slots.
    pub fn capacity(&self) -> usize {
        self.inner.capacity() as usize
    }

    /// How many values are queued (values being stolen right now are not counted).
    pub fn len(&self) -> usize {
        self.inner.len()
    }

    /// Whether no value is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A new stealer for this ring.
    pub fn stealer(&self) -> Steal<T> {
        Steal(self.inner.clone())
    }

    /// The tail, read by its only writer (so `Relaxed` is exact).
    fn tail(&self) -> u32 {
        self.inner.tail.load(Ordering::Relaxed)
    }

    /// Writes `value` into the slot at `tail` and publishes it.
    ///
    /// The caller has checked `tail - steal < capacity`, so the slot is free.
    fn write_and_publish(&mut self, tail: u32, value: T) {
        // SAFETY: `tail - steal < capacity` means the slot is outside `[steal, tail)`, so no
        // stealer reads it and it holds no live value (module invariants); only the owner (us,
        // via `&mut self`) writes slots.
        self.inner
            .slot(tail)
            .with_mut(|p| unsafe { ptr::write((*p).as_mut_ptr(), value) });
        // Release: a stealer that acquires this tail sees the value written above.
        self.inner
            .tail
            .store(tail.wrapping_add(1), Ordering::Release);
    }

    /// Queues `value` at the back, or gives it back when the ring is full.
    pub fn push_back(&mut self, value: T) -> Result<(), T> {
        let (steal, _) = unpack(self.inner.head.load(Ordering::Acquire));
        let tail = self.tail();
        if tail.wrapping_sub(steal) >= self.inner.capacity() {
            return Err(value);
        }
        self.write_and_publish(tail, value);
        Ok(())
    }

    /// Queues `value` at the back; when the ring is full, moves half of it plus `value` to
    /// `overflow` in one batch (or just `value`, when a stealer is freeing room right now).
    /// Returns how many values went to `overflow` (0 when the ring had room), so the owner can
    /// serve them before the newer values left in the ring.
    #[inline]
    pub fn push_back_or_overflow(&mut self, value: T, overflow: &impl Overflow<T>) -> usize {
        // The common case, kept small enough to inline into the scheduler loop: room.
        let (steal, _) = unpack(self.inner.head.load(Ordering::Acquire));
        let tail = self.tail();
        if tail.wrapping_sub(steal) < self.inner.capacity() {
            self.write_and_publish(tail, value);
            return 0;
        }
        self.push_back_or_overflow_slow(value, overflow)
    }

    /// [`Self::push_back_or_overflow`] when the ring looked full.
    #[inline(never)]
    fn push_back_or_overflow_slow(&mut self, mut value: T, overflow: &impl Overflow<T>) -> usize {
        let tail = loop {
            let head = self.inner.head.load(Ordering::Acquire);
            let (steal, real) = unpack(head);
            let tail = self.tail();
            if tail.wrapping_sub(steal) < self.inner.capacity() {
                break tail;
            }
            if steal != real {
                // A stealer is taking half right now; it will free room, but not in time.
                overflow.push(value);
                return 1;
            }
            match self.overflow_half(value, real, tail, overflow) {
                Ok(()) => return (self.inner.capacity() / 2) as usize + 1,
                // A stealer moved `head` first; look again.
                Err(back) => value = back,
            }
        };
        self.write_and_publish(tail, value);
        0
    }

    /// Moves the oldest half of a full ring, then `value`, to `overflow`.
    fn overflow_half(
        &mut self,
        value: T,
        head: u32,
        tail: u32,
        overflow: &impl Overflow<T>,
    ) -> Result<(), T> {
        let half = self.inner.capacity() / 2;
        debug_assert_eq!(tail.wrapping_sub(head), self.inner.capacity());
        let taken = head.wrapping_add(half);
        // Claim `[head, head + half)` as the owner: both halves move, so no stealer is mid-steal
        // and none can claim these slots after the CAS. Relaxed on success is enough: the owner
        // wrote these slots itself, and stealers synchronise through `tail`, which is unchanged.
        if self
            .inner
            .head
            .compare_exchange(
                pack(head, head),
                pack(taken, taken),
                Ordering::Release,
                Ordering::Relaxed,
            )
            .is_err()
        {
            return Err(value);
        }
        let inner = &self.inner;
        let batch = (0..half).map(|i| {
            // SAFETY: the CAS above moved `[head, head + half)` out of the queue for us alone;
            // the owner (us) will not rewrite these slots until this iterator is done, since it
            // holds `&mut self` for the whole call; each position is read once.
            inner
                .slot(head.wrapping_add(i))
                .with(|p| unsafe { ptr::read((*p).as_ptr()) })
        });
        overflow.push_batch(batch.chain(std::iter::once(value)));
        Ok(())
    }

    /// Takes the value at the front (the oldest), if any.
    pub fn pop(&mut self) -> Option<T> {
        let mut head = self.inner.head.load(Ordering::Acquire);
        let real = loop {
            let (steal, real) = unpack(head);
            if real == self.tail() {
                return None;
            }
            let next_real = real.wrapping_add(1);
            // Leave a stealer's claim alone: only `real` moves while one is active.
            let next = if steal == real {
                pack(next_real, next_real)
            } else {
                pack(steal, next_real)
            };
            match self
                .inner
                .head
                .compare_exchange(head, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => break real,
                Err(actual) => head = actual,
            }
        };
        // SAFETY: our CAS moved `real` past this slot, so it was in `[real, tail)` (initialised)
        // and now belongs to us alone.
        Some(
            self.inner
                .slot(real)
                .with(|p| unsafe { ptr::read((*p).as_ptr()) }),
        )
    }
}

impl<T> Steal<T> {
    /// How many values are queued, as seen right now.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the ring looks empty right now.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Steals half of the values (rounded up, and no more than `dst` has room for) into `dst`,
    /// whose owner the caller is, and returns one of them. `None` when the ring is empty,
    /// another stealer is active, or `dst` is full.
    pub fn steal_into(&self, dst: &mut Local<T>) -> Option<T> {
        let dst_tail = dst.tail();
        let (dst_steal, _) = unpack(dst.inner.head.load(Ordering::Acquire));
        // `dst`'s stealers only move `steal` forward, so this may underestimate, never overstate.
        let room = dst.inner.capacity() - dst_tail.wrapping_sub(dst_steal);
        if room == 0 {
            return None;
        }
        let n = self.claim_and_copy(dst, dst_tail, room);
        if n == 0 {
            return None;
        }
        // Hand the last stolen value to the caller instead of publishing it in `dst`.
        let last = dst_tail.wrapping_add(n - 1);
        // SAFETY: `claim_and_copy` wrote this slot of `dst` (beyond its tail, so invisible to
        // `dst`'s stealers) and nothing has read it; we move it out once.
        let value = dst
            .inner
            .slot(last)
            .with(|p| unsafe { ptr::read((*p).as_ptr()) });
        if n > 1 {
            // Release: `dst`'s stealers that acquire the tail see the copied values.
            dst.inner.tail.store(last, Ordering::Release);
        }
        Some(value)
    }

    /// Claims half of this ring (at most `room`), copies it to `dst` starting at `dst_tail` (not
    /// yet published), commits the steal, and returns how many values moved.
    fn claim_and_copy(&self, dst: &mut Local<T>, dst_tail: u32, room: u32) -> u32 {
        let src = &self.0;
        let mut prev = src.head.load(Ordering::Acquire);
        let (first, n) = loop {
            let (steal, real) = unpack(prev);
            if steal != real {
                // Another stealer is active.
                return 0;
            }
            // Acquire: pairs with the owner's release store, so the values are visible.
            let tail = src.tail.load(Ordering::Acquire);
            let len = tail.wrapping_sub(real);
            let n = (len - len / 2).min(room);
            if n == 0 {
                return 0;
            }
            // Claim `[real, real + n)`: `real` moves, `steal` stays until we commit.
            let next = pack(steal, real.wrapping_add(n));
            match src
                .head
                .compare_exchange(prev, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    prev = next;
                    break (real, n);
                }
                Err(actual) => prev = actual,
            }
        };
        for i in 0..n {
            // SAFETY: our claim moved `[first, first + n)` out of the queue and made it ours
            // (module invariants: the owner leaves `[steal, real)` alone, no other stealer starts
            // while `steal != real`). The destination slots are beyond `dst`'s tail, with
            // `dst_tail - dst_steal + n <= capacity`, so they hold no
            // live value and no stealer of `dst` reads them (`n <= room`); we are `dst`'s owner.
            let value = src.slot(first.wrapping_add(i)).with(|p| {
                // SAFETY: a claimed source slot holds a live value (see above).
                unsafe { ptr::read((*p).as_ptr()) }
            });
            dst.inner.slot(dst_tail.wrapping_add(i)).with_mut(|p| {
                // SAFETY: a free destination slot that only we, `dst`'s owner, write (above).
                unsafe { ptr::write((*p).as_mut_ptr(), value) }
            });
        }
        // Commit: move `steal` up to `real`, handing the slots back to the owner. The owner may
        // have popped meanwhile (moving `real`), so retry with what it left.
        loop {
            let (_, real) = unpack(prev);
            match src.head.compare_exchange(
                prev,
                pack(real, real),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return n,
                Err(actual) => {
                    debug_assert_ne!(unpack(actual).0, unpack(actual).1);
                    prev = actual;
                }
            }
        }
    }
}

impl<T> Clone for Steal<T> {
    fn clone(&self) -> Self {
        Steal(self.0.clone())
    }
}

impl<T> std::fmt::Debug for Local<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ring::Local")
            .field("len", &self.len())
            .finish()
    }
}

impl<T> std::fmt::Debug for Steal<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ring::Steal")
            .field("len", &self.len())
            .finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests;

#[cfg(all(test, loom))]
mod loom;
