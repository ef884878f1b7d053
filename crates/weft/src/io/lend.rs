//! Receive buffers a processor lends to its fibers: a few hundred buffers shared by all of
//! the processor's connections, so that a receive lands in memory the CPU touched a moment
//! ago instead of in one of thousands of per-connection buffers gone cold (memcached's
//! per-thread read buffers do the same for its connections).
//!
//! - **io_uring**: the buffers are the ring's *provided buffers* (a registered buffer ring,
//!   `IORING_REGISTER_PBUF_RING`, Linux 5.19+). A receive is submitted with
//!   `IOSQE_BUFFER_SELECT` and no buffer; the kernel takes one from the ring only when data
//!   is there, so a connection waiting for a request holds none. The buffer id comes back in
//!   the completion's flags. Only [`RING_TARGET`] buffers are kept in the ring (the kernel
//!   takes them in order); the rest wait as spares, the most recently given back next in line.
//! - **epoll**: a free list of the same buffers; a fiber takes one just before its `recv(2)`
//!   and gives it back before it waits for readiness.
//! - Either driver makes its pool on the processor's first lent receive, so a server that
//!   never asks for one (weft http) maps none.
//! - When the pool is empty (more buffers lent out than it has; on io_uring, fewer than
//!   [`RING_LOW`] left in the ring), or could not be made (no memory to map, or a kernel
//!   without buffer rings; said once per process), a receive goes into a fresh heap buffer
//!   instead: slower, never wrong, and one round trip as before.
//!
//! Invariants:
//! - Every buffer index is in exactly one place: in the kernel's ring or among the ring's
//!   spares (or in the epoll free list), lent out in one [`Lent`], or in the pool's list of
//!   buffers given back on another thread. Only the owning processor's thread writes the
//!   ring's entries and tail and touches the spares and the free list; that thread is
//!   recognised by its driver's pool being this pool (a driver lives on one thread for its
//!   whole life).
//! - A [`Lent`] gives its buffer back when dropped, on whatever thread: on the owner's thread
//!   straight into the ring, its spares or the free list, elsewhere into `returned`, which
//!   the owner takes back before its next loan (a fiber may move between processors while
//!   it holds one).
//! - The pool's memory lives as long as the pool (every `Lent` holds an `Arc` to it), and the
//!   io_uring driver unregisters the buffer ring before it closes the ring; if that fails the
//!   pool is leaked rather than freed under the kernel.

use std::cell::UnsafeCell;
use std::io;
use std::mem::MaybeUninit;
use std::ptr::NonNull;
use std::sync::Arc;

use crate::loom::{AtomicBool, AtomicU32, Mutex, Ordering, StaticAtomicBool};
use crate::poison::Recover;

/// Bytes in each lent buffer.
pub const LENT_BUFFER_BYTES: usize = 4096;
/// Buffers per processor (a power of two, for the kernel's ring): enough for every fiber one
/// drain of completions wakes at once, few enough that the lines a receive writes stay in
/// the CPU's cache (a small request writes one or two lines of its buffer).
pub(crate) const LENT_BUFFERS: u16 = 256;
/// The buffer group id of the ring's provided buffers: 0, the one id the kernel finds
/// without walking a tree. The kernel (6.8 on) finds a receive's buffer group with `xa_load`
/// in an XArray keyed by the id; an XArray whose only entry is at index 0 keeps it in its
/// head, and any other id puts one to three nodes between (0x7765, the id before, cost three
/// dependent loads a receive in `xas_load`: 0.55–0.76 % of the cache's CPU at 1,000
/// connections and a quarter of memcached's peak, `docs/notes/scale.md`). The ring is the
/// runtime's own, so no other group shares it.
pub(crate) const BUFFER_GROUP: u16 = 0;

/// One entry of the kernel's buffer ring (`struct io_uring_buf`); the ring's tail is the
/// `resv` field of entry 0 (`struct io_uring_buf_ring`).
#[repr(C)]
struct RingEntry {
    addr: u64,
    len: u32,
    bid: u16,
    resv: u16,
}

/// Where the free buffers are kept.
enum Free {
    /// The kernel's buffer ring: `ring` (one page, shared with the kernel) and the tail this
    /// side has published (owner thread only).
    Ring {
        ring: NonNull<RingEntry>,
        tail: UnsafeCell<u16>,
        /// Free buffers beyond the [`RING_TARGET`] kept in the ring, most recently given
        /// back on top (owner thread only).
        spare: UnsafeCell<Vec<u16>>,
    },
    /// A stack of free indices (owner thread only).
    List(UnsafeCell<Vec<u16>>),
}

/// One processor's buffers.
pub(crate) struct LendPool {
    /// `LENT_BUFFERS * BUFFER_STRIDE_BYTES` bytes (an anonymous mapping).
    memory: NonNull<u8>,
    free: Free,
    /// Indices given back on other threads, for the owner to take back.
    returned: Returned,
    /// Buffers in the kernel's ring (ring pools): raised by [`LendPool::put`], lowered by
    /// [`LendPool::taken_by_kernel`] for each completion that carried one; both on the owner's
    /// thread only (an atomic only so that the pool is `Sync`).
    in_ring: AtomicU32,
}

/// Below this many buffers in the ring, a receive goes to the heap straight away rather than
/// ask for a provided buffer that a burst may take first (a receive that finds the ring empty
/// fails with `ENOBUFS` and must be issued again: two round trips a request, exactly when the
/// processor is overloaded).
pub(crate) const RING_LOW: u32 = 16;

/// Buffers kept in the kernel's ring; the rest wait as spares, the most recently given back
/// first in line. The kernel takes a ring's buffers in order, so a buffer is used again only
/// after every other one in the ring: with all 256 there, the lines a receive writes have
/// gone cold by then; with this many, they are the lines the last few dozen requests touched.
pub(crate) const RING_TARGET: u32 = 48;

// SAFETY: the owner-only parts (`free`'s cells and the ring memory) are touched only on the
// owning driver's thread (checked by `Lent::drop` and promised by the callers of the `unsafe`
// methods); the rest is a mutex and atomics.
unsafe impl Send for LendPool {}
// SAFETY: as above.
unsafe impl Sync for LendPool {}

/// The alignment and size of an x86-64 transparent huge page.
const HUGE_PAGE_BYTES: usize = 2 * 1024 * 1024;

/// What the pool's buffers take in address space: one huge page (they fit in one).
const POOL_MAP_BYTES: usize = POOL_BYTES.next_multiple_of(HUGE_PAGE_BYTES);

/// Maps the buffers' memory: [`POOL_MAP_BYTES`] on a huge-page boundary, advised
/// `MADV_HUGEPAGE`, so that where the kernel has transparent huge pages (`always`, or
/// `madvise` as Debian ships it) all the buffers sit under one TLB entry. The kernel takes
/// the ring's buffers in order, so a receive writes into a buffer last touched some
/// [`RING_TARGET`] receives before: milliseconds at a quarter of a server's peak, by when a
/// 4 KiB page's TLB entry is gone and its walk (two-dimensional in a VM) is part of every
/// receive's copy (`docs/notes/scale.md`, thirty-third session). Where the advice is refused
/// the buffers work the same in small pages.
fn map_pool() -> io::Result<NonNull<u8>> {
    let slack = HUGE_PAGE_BYTES;
    let whole = map(POOL_MAP_BYTES + slack)?;
    let start = whole.as_ptr() as usize;
    let skip = start.next_multiple_of(HUGE_PAGE_BYTES) - start;
    let base = whole.as_ptr().wrapping_add(skip);
    let tail = slack - skip;
    if skip > 0 {
        // SAFETY: the first `skip` bytes of the mapping just made, which nobody uses.
        unsafe { libc::munmap(whole.as_ptr().cast(), skip) };
    }
    if tail > 0 {
        // SAFETY: the last `tail` bytes of that mapping (`POOL_MAP_BYTES + slack` long, and
        // `base` is `skip` < `slack` bytes into it), which nobody uses.
        unsafe { libc::munmap(base.wrapping_add(POOL_MAP_BYTES).cast(), tail) };
    }
    // SAFETY: advice on the pool's own pages, untouched yet: it changes how the kernel backs
    // them, not what they hold.
    unsafe { libc::madvise(base.cast(), POOL_MAP_BYTES, libc::MADV_HUGEPAGE) };
    Ok(NonNull::new(base).expect("an address inside a mapping"))
}

fn map(bytes: usize) -> io::Result<NonNull<u8>> {
    // SAFETY: an anonymous private mapping; no existing memory is touched.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(NonNull::new(p.cast()).expect("mmap does not return null"))
}

/// What a user is told when a processor cannot make its lent buffers (`e` says why): its
/// receives then go into heap buffers, which works but costs a cold buffer a receive.
pub(crate) fn unavailable_message(e: &io::Error) -> String {
    let hint = match e.raw_os_error() {
        Some(libc::ENOMEM) => {
            ". The address space or memory limit is reached: check `ulimit -v` and the cgroup \
             memory limit"
        }
        Some(libc::EINVAL) | Some(libc::ENOSYS) | Some(libc::EOPNOTSUPP) => {
            ". This kernel has no io_uring buffer rings (Linux 5.19 or later has them)"
        }
        _ => "",
    };
    format!(
        "weft: cannot make the lent receive buffers ({e}); receives go into heap buffers \
         instead, which is slower{hint}"
    )
}

/// A step of making a processor's lent buffers: its value, or `None` after saying once per
/// process that the buffers could not be made, and why.
pub(crate) fn made_or_said<T>(step: io::Result<T>) -> Option<T> {
    static LOGGED: StaticAtomicBool = StaticAtomicBool::new(false);
    match step {
        Ok(value) => Some(value),
        Err(e) => {
            if !LOGGED.swap(true, Ordering::Relaxed) {
                eprintln!("{}", unavailable_message(&e));
            }
            None
        }
    }
}

/// Distance between buffers: a line more than a buffer, so that their first lines (all a
/// small request writes) fall into different sets of the CPU's caches rather than all into
/// the one set a page-aligned stride maps them to.
const BUFFER_STRIDE_BYTES: usize = LENT_BUFFER_BYTES + 64;
const POOL_BYTES: usize = LENT_BUFFERS as usize * BUFFER_STRIDE_BYTES;
const RING_BYTES: usize = LENT_BUFFERS as usize * std::mem::size_of::<RingEntry>();

impl LendPool {
    /// A pool kept as a free list (the epoll driver's).
    pub(crate) fn list() -> io::Result<LendPool> {
        let memory = map_pool()?;
        Ok(LendPool {
            memory,
            free: Free::List(UnsafeCell::new((0..LENT_BUFFERS).rev().collect())),
            returned: Returned::new(),
            in_ring: AtomicU32::new(0),
        })
    }

    /// A pool kept in a kernel buffer ring, every buffer in it. The caller registers
    /// [`LendPool::ring_addr`] with the ring as [`BUFFER_GROUP`] (with [`LENT_BUFFERS`]
    /// entries) and must unregister it before the pool is dropped.
    pub(crate) fn ring() -> io::Result<LendPool> {
        let memory = map_pool()?;
        let ring = match map(RING_BYTES) {
            Ok(r) => r.cast::<RingEntry>(),
            Err(e) => {
                // SAFETY: `memory` is the mapping just made, used by nobody.
                unsafe { libc::munmap(memory.as_ptr().cast(), POOL_MAP_BYTES) };
                return Err(e);
            }
        };
        let pool = LendPool {
            memory,
            free: Free::Ring {
                ring,
                tail: UnsafeCell::new(0),
                spare: UnsafeCell::new(Vec::with_capacity(LENT_BUFFERS as usize)),
            },
            returned: Returned::new(),
            in_ring: AtomicU32::new(0),
        };
        for bid in 0..LENT_BUFFERS {
            // SAFETY: the pool is not registered with any ring yet and not shared.
            unsafe { pool.put(bid) };
        }
        Ok(pool)
    }

    /// The address of the buffer ring to register (ring pools only).
    pub(crate) fn ring_addr(&self) -> Option<u64> {
        match &self.free {
            Free::Ring { ring, .. } => Some(ring.as_ptr() as u64),
            Free::List(_) => None,
        }
    }

    pub(crate) fn buffer(&self, bid: u16) -> NonNull<u8> {
        assert!(bid < LENT_BUFFERS, "weft: no lent buffer {bid}");
        // SAFETY: `bid` is in range, so the offset stays inside the mapping.
        unsafe { self.memory.add(bid as usize * BUFFER_STRIDE_BYTES) }
    }

    /// Puts buffer `bid` back where the owner lends from: into the kernel's ring while it
    /// holds fewer than [`RING_TARGET`], else on top of the spares.
    ///
    /// # Safety
    /// Called on the owner's thread only, for a buffer that is not free already.
    pub(crate) unsafe fn put(&self, bid: u16) {
        match &self.free {
            Free::Ring { spare, .. } => {
                if self.in_ring.load(Ordering::Relaxed) < RING_TARGET {
                    // SAFETY: owner thread (the caller's promise); `bid` is not free.
                    unsafe { self.publish(bid) };
                } else {
                    // SAFETY: owner thread only (the caller's promise).
                    unsafe { (*spare.get()).push(bid) };
                }
            }
            // SAFETY: owner thread only (the caller's promise).
            Free::List(list) => unsafe { (*list.get()).push(bid) },
        }
    }

    /// Appends buffer `bid` to the kernel's ring (ring pools).
    ///
    /// # Safety
    /// Called on the owner's thread only, for a buffer that is in neither the ring nor the
    /// spares.
    unsafe fn publish(&self, bid: u16) {
        let Free::Ring { ring, tail, .. } = &self.free else {
            unreachable!("weft: only ring pools publish buffers");
        };
        // SAFETY: owner thread only (the caller's promise), so nobody else touches the cell.
        let t = unsafe { &mut *tail.get() };
        let mask = LENT_BUFFERS - 1;
        // SAFETY: `t & mask` is in the ring's range. The kernel reads only entries between
        // its head and the tail published below, and this one is not among them: every
        // buffer is in the ring at most once, so at most LENT_BUFFERS - 1 others are. Entry
        // 0's `resv` is the tail and is not written here.
        unsafe {
            let e = ring.as_ptr().add((*t & mask) as usize);
            std::ptr::addr_of_mut!((*e).addr).write(self.buffer(bid).as_ptr() as u64);
            std::ptr::addr_of_mut!((*e).len).write(LENT_BUFFER_BYTES as u32);
            std::ptr::addr_of_mut!((*e).bid).write(bid);
        }
        *t = t.wrapping_add(1);
        // SAFETY: the tail field is a naturally aligned u16 in the ring page; the kernel
        // reads it with an acquire load, so the release store publishes the entry written
        // above.
        let tail_word = unsafe {
            &*(std::ptr::addr_of!((*ring.as_ptr()).resv) as *const std::sync::atomic::AtomicU16)
        };
        tail_word.store(*t, std::sync::atomic::Ordering::Release);
        let n = self.in_ring.load(Ordering::Relaxed);
        self.in_ring.store(n + 1, Ordering::Relaxed);
    }

    /// Takes back the buffers given back on other threads.
    ///
    /// # Safety
    /// Called on the owner's thread only.
    pub(crate) unsafe fn take_back_returned(&self) {
        self.returned.take(|bid| {
            // SAFETY: owner thread (the caller's promise); a returned buffer is not free.
            unsafe { self.put(bid) }
        });
    }

    /// Notes that a completion carried one of the ring's buffers.
    ///
    /// # Safety
    /// Called on the owner's thread only, once for each such completion.
    pub(crate) unsafe fn taken_by_kernel(&self) {
        let n = self.in_ring.load(Ordering::Relaxed);
        self.in_ring.store(n.saturating_sub(1), Ordering::Relaxed);
        if let Free::Ring { spare, .. } = &self.free {
            // SAFETY: owner thread only (the caller's promise).
            if let Some(bid) = unsafe { (*spare.get()).pop() } {
                // SAFETY: owner thread; a spare is in neither the ring nor a `Lent`.
                unsafe { self.publish(bid) };
            }
        }
    }

    /// Whether the ring holds at least [`RING_LOW`] buffers (an estimate: buffers the kernel
    /// took for completions not reaped yet still count).
    pub(crate) fn ring_has_room(&self) -> bool {
        self.in_ring.load(Ordering::Relaxed) >= RING_LOW
    }

    /// A free buffer from the list (list pools; the ring's are taken by the kernel).
    ///
    /// # Safety
    /// Called on the owner's thread only.
    pub(crate) unsafe fn take(&self) -> Option<u16> {
        match &self.free {
            // SAFETY: owner thread only (the caller's promise).
            Free::List(list) => unsafe { (*list.get()).pop() },
            Free::Ring { .. } => None,
        }
    }

    fn give_back(self: &Arc<Self>, bid: u16, on_owner: bool) {
        if on_owner {
            // SAFETY: `on_owner` says this is the owner's thread; the buffer was lent.
            unsafe { self.put(bid) };
        } else {
            self.returned.push(bid);
        }
    }
}

/// Buffer indices given back on threads other than the owner's.
///
/// Protocol: a thread giving one back pushes it and sets `any` under the lock; the owner
/// reads `any` without the lock as a hint and, when set, clears it and takes the whole list
/// under the lock. A stale `false` only delays a return to the owner's next look (and a look
/// that happens after the push, such as one after joining the pusher, sees it); no index is
/// taken twice or lost (`lend::loom`).
struct Returned {
    list: Mutex<Vec<u16>>,
    any: AtomicBool,
}

impl Returned {
    fn new() -> Returned {
        Returned {
            list: Mutex::new(Vec::new()),
            any: AtomicBool::new(false),
        }
    }

    fn push(&self, bid: u16) {
        let mut list = self.list.lock().recover();
        list.push(bid);
        self.any.store(true, Ordering::Relaxed);
    }

    /// The owner's look: hands every index given back since the last look to `put`.
    fn take(&self, mut put: impl FnMut(u16)) {
        if !self.any.load(Ordering::Relaxed) {
            return;
        }
        let mut list = self.list.lock().recover();
        self.any.store(false, Ordering::Relaxed);
        for bid in list.drain(..) {
            put(bid);
        }
    }
}

impl Drop for LendPool {
    fn drop(&mut self) {
        // SAFETY: the mappings were made by `map_pool` and `map` with these sizes; nobody
        // uses them any more (no `Lent` is left, and the ring was unregistered, or the pool
        // leaked instead).
        unsafe {
            libc::munmap(self.memory.as_ptr().cast(), POOL_MAP_BYTES);
            if let Free::Ring { ring, .. } = &self.free {
                libc::munmap(ring.as_ptr().cast(), RING_BYTES);
            }
        }
    }
}

/// Bytes received into a buffer lent by the processor (or, when it had none, a heap buffer).
/// Reads as a `&[u8]` of exactly the bytes received; dropping it gives the buffer back. Hold
/// it briefly: while it lives, the processor has one buffer fewer.
pub struct Lent {
    bytes: NonNull<u8>,
    len: usize,
    from: From,
}

enum From {
    Pool {
        pool: Arc<LendPool>,
        bid: u16,
    },
    /// A heap buffer whose first `len` bytes are initialised.
    Heap(#[allow(dead_code)] Box<[MaybeUninit<u8>]>),
}

// SAFETY: a `Lent` owns its buffer exclusively (the index is in no free list and not in the
// kernel's ring until it is dropped), and giving it back works from any thread (see
// `LendPool::give_back`).
unsafe impl Send for Lent {}
// SAFETY: shared access only reads the received bytes.
unsafe impl Sync for Lent {}

impl Lent {
    /// Buffer `bid` of `pool`, holding `len` received bytes.
    pub(crate) fn pooled(pool: Arc<LendPool>, bid: u16, len: usize) -> Lent {
        // (`buffer` checks the id.)
        assert!(
            len <= LENT_BUFFER_BYTES,
            "weft: a lent buffer holds at most 4 KiB"
        );
        Lent {
            bytes: pool.buffer(bid),
            len,
            from: From::Pool { pool, bid },
        }
    }

    /// The first `len` bytes of a heap buffer.
    ///
    /// # Safety
    /// The first `len` bytes of `buf` are initialised.
    pub(crate) unsafe fn heap(buf: Box<[MaybeUninit<u8>]>, len: usize) -> Lent {
        assert!(len <= buf.len());
        let mut buf = buf;
        let bytes = NonNull::new(buf.as_mut_ptr().cast::<u8>()).expect("a box is not null");
        Lent {
            bytes,
            len,
            from: From::Heap(buf),
        }
    }

    /// An empty `Lent` (end of stream).
    pub(crate) fn empty() -> Lent {
        // SAFETY: no byte is claimed initialised.
        unsafe { Lent::heap(Box::default(), 0) }
    }

    /// A heap buffer for a receive that could not borrow one: not zeroed, since only what
    /// the kernel writes is ever read.
    pub(crate) fn heap_buffer() -> Box<[MaybeUninit<u8>]> {
        Box::new_uninit_slice(LENT_BUFFER_BYTES)
    }

    /// Whether the receive filled the whole buffer (more may be waiting in the socket).
    pub fn filled(&self) -> bool {
        self.len == LENT_BUFFER_BYTES
    }

    /// Whether the bytes are in one of the processor's buffers (`false`: a heap buffer, used
    /// when every one was lent out, on plain threads, or on kernels without buffer rings).
    pub fn is_pooled(&self) -> bool {
        matches!(self.from, From::Pool { .. })
    }
}

impl std::convert::From<Vec<u8>> for Lent {
    /// Wraps bytes already received (for code and tests that feed a reader written for
    /// lent buffers from elsewhere).
    fn from(v: Vec<u8>) -> Lent {
        let len = v.len();
        let buf: Box<[u8]> = v.into_boxed_slice();
        // SAFETY: a `[u8]` is a `[MaybeUninit<u8>]` whose every byte is initialised.
        let buf = unsafe { Box::from_raw(Box::into_raw(buf) as *mut [MaybeUninit<u8>]) };
        // SAFETY: all `len` bytes came from the `Vec`.
        unsafe { Lent::heap(buf, len) }
    }
}

impl std::ops::Deref for Lent {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        // SAFETY: `bytes` points at a buffer this `Lent` owns exclusively, of at least `len`
        // initialised bytes (the kernel wrote them, or they came from a `Vec`), alive as long
        // as `self` (the pool's `Arc`, or the box, is held).
        unsafe { std::slice::from_raw_parts(self.bytes.as_ptr(), self.len) }
    }
}

impl std::fmt::Debug for Lent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lent")
            .field("len", &self.len)
            .field("pooled", &self.is_pooled())
            .finish()
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        if let From::Pool { pool, bid } = &self.from {
            let on_owner = crate::io::op::current_driver()
                .and_then(|d| d.lend())
                .is_some_and(|l| Arc::ptr_eq(l, pool));
            pool.give_back(*bid, on_owner);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn the_buffer_group_is_the_one_the_kernel_finds_without_a_walk() {
        // The kernel keeps an XArray's only entry in its head when it is at index 0; any
        // other group id costs each receive a walk through the array's nodes.
        assert_eq!(BUFFER_GROUP, 0);
    }

    #[test]
    fn a_pool_that_cannot_be_made_says_why_and_what_happens_instead() {
        let no_memory = unavailable_message(&io::Error::from_raw_os_error(libc::ENOMEM));
        assert!(no_memory.contains("heap buffers"), "{no_memory}");
        assert!(no_memory.contains("ulimit -v"), "{no_memory}");
        let old_kernel = unavailable_message(&io::Error::from_raw_os_error(libc::EINVAL));
        assert!(old_kernel.contains("Linux 5.19"), "{old_kernel}");
        let other = unavailable_message(&io::Error::from_raw_os_error(libc::EIO));
        assert!(other.ends_with("which is slower"), "{other}");
    }

    /// The `VmFlags` of the mapping of `/proc/self/smaps` that starts at `addr`.
    fn vm_flags_of_mapping_at(addr: usize) -> String {
        let smaps = std::fs::read_to_string("/proc/self/smaps").expect("/proc/self/smaps");
        let mut here = false;
        for line in smaps.lines() {
            if let Some((range, _)) = line.split_once(' ') {
                if let Some((start, _)) = range.split_once('-') {
                    if let Ok(start) = usize::from_str_radix(start, 16) {
                        here = start == addr;
                        continue;
                    }
                }
            }
            if here {
                if let Some(flags) = line.strip_prefix("VmFlags:") {
                    return flags.to_owned();
                }
            }
        }
        panic!("no mapping starts at {addr:#x}")
    }

    /// Every buffer lies in one huge page's span, advised for transparent huge pages, so a
    /// receive into a buffer last used milliseconds before does not walk the page tables.
    #[test]
    fn the_buffers_share_one_huge_page() {
        const { assert!(POOL_BYTES <= HUGE_PAGE_BYTES) };
        for pool in [LendPool::list().unwrap(), LendPool::ring().unwrap()] {
            let base = pool.memory.as_ptr() as usize;
            assert_eq!(base % HUGE_PAGE_BYTES, 0, "the pool starts at {base:#x}");
            if std::path::Path::new("/sys/kernel/mm/transparent_hugepage").exists() {
                let flags = vm_flags_of_mapping_at(base);
                assert!(
                    flags.split_whitespace().any(|f| f == "hg"),
                    "MADV_HUGEPAGE shows as `hg`: {flags}"
                );
            }
        }
    }

    /// The buffer ids the ring's entries `from..to` name.
    fn published(pool: &LendPool, from: u16, to: u16) -> Vec<u16> {
        let Free::Ring { ring, .. } = &pool.free else {
            panic!("a ring pool");
        };
        (from..to)
            .map(|t| {
                // SAFETY: `t & mask` is in the ring's range; the test is the only thread and
                // no kernel has the ring.
                unsafe { (*ring.as_ptr().add((t & (LENT_BUFFERS - 1)) as usize)).bid }
            })
            .collect()
    }

    #[test]
    fn the_ring_holds_a_few_dozen_and_the_last_given_back_goes_in_next() {
        let pool = LendPool::ring().unwrap();
        assert_eq!(pool.in_ring.load(Ordering::Relaxed), RING_TARGET);
        let target = RING_TARGET as u16;
        assert_eq!(published(&pool, 0, target), (0..target).collect::<Vec<_>>());
        // SAFETY: the test's thread is the pool's only thread; this stands for the kernel
        // taking buffer 0, the ring's first.
        unsafe { pool.taken_by_kernel() };
        assert_eq!(
            pool.in_ring.load(Ordering::Relaxed),
            RING_TARGET,
            "topped up"
        );
        assert_eq!(published(&pool, target, target + 1), [LENT_BUFFERS - 1]);
        // SAFETY: the pool's thread; buffer 0 was taken above and is given back once.
        unsafe { pool.put(0) };
        assert_eq!(pool.in_ring.load(Ordering::Relaxed), RING_TARGET, "0 waits");
        // SAFETY: the pool's thread; the kernel taking buffer 1.
        unsafe { pool.taken_by_kernel() };
        assert_eq!(
            published(&pool, target + 1, target + 2),
            [0],
            "the buffer given back last goes in first"
        );
    }
}

/// The returned-buffers list under loom: indices pushed by two threads while the owner
/// looks are each taken exactly once, by that look or by one after the pushers are joined.
#[cfg(all(test, loom))]
mod loom {
    use ::loom::sync::Arc;
    use ::loom::thread;

    use super::*;

    #[test]
    fn loom_buffers_given_back_elsewhere_are_taken_back_once() {
        crate::loom::model_bounded(2, || {
            let returned = Arc::new(Returned::new());
            let pushers: Vec<_> = [3u16, 7]
                .into_iter()
                .map(|bid| {
                    let r = returned.clone();
                    thread::spawn(move || r.push(bid))
                })
                .collect();
            let mut taken = Vec::new();
            returned.take(|bid| taken.push(bid));
            for p in pushers {
                p.join().unwrap();
            }
            returned.take(|bid| taken.push(bid));
            taken.sort_unstable();
            assert_eq!(taken, vec![3, 7]);
        });
    }
}
