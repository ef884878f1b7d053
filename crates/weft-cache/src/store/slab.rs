//! Store-owned memory for items, memcached's slab allocator: one reservation of address
//! space cut into 1 MiB pages; a page is given to one size class and cut into that class's
//! chunks; an item's key and data live in chunks of its class (an item larger than the
//! largest chunk is chained through largest chunks plus one chunk for the rest, as memcached
//! chains it). A page, once given to a class, stays with it until the rebalancer moves it
//! ([`Slabs::start_drain`], [`Slabs::finish_drain`]); freed chunks go back to their class's
//! free list.
//!
//! Why: every chunk lives in pages the store counts against `-m`, so the memory the items
//! take is the pages, whatever the allocator does and however many processors allocate
//! (glibc's per-thread arenas hold each one's free holes apart: 1.34–1.46 × `-m` at `-t 4`
//! with the items in malloc'd buffers, `docs/notes/memcached-dropin.md`).
//!
//! Invariants:
//! - A chunk is owned by exactly one [`Chunk`] value or is free (on its class's free list,
//!   or past the class's carve point in its newest page); never both. Only the owner reads
//!   or writes its bytes (`&Chunk` reads, `&mut Chunk` writes); the free list's links are
//!   written only into free chunks, under the class's lock.
//! - Pages are never unmapped while the `Slabs` lives, so a chunk's memory outlives every
//!   `Chunk` (the store drops its items before its `Slabs`: [`super::Store`]'s field order).
//! - Locks here are leaves: a class's lock and the page table's lock are taken alone or
//!   under one shard lock, never while waiting for anything else, and never both at once.
//!
//! Large pages (`-L`, as memcached's on Linux): the reservation starts on a 2 MiB boundary
//! and is advised `MADV_HUGEPAGE`, so the kernel backs its touched 2 MiB spans with
//! transparent huge pages: one TLB entry for 2 MiB of items instead of one for 4 KiB (no
//! change in speed resolved on the development VM, `docs/notes/scale.md`). A page released
//! with `MADV_DONTNEED` splits its huge page; the kernel may merge it again later.

use std::ptr::NonNull;
use std::sync::Mutex;

use super::classes::SizeClasses;

/// memcached's `settings.slab_page_size`.
pub const PAGE_BYTES: usize = 1024 * 1024;

/// Address space reserved for pages: the larger of twice `-m` and this (only touched pages
/// take memory; `cache_memlimit` can raise `-m` up to what was reserved).
const MIN_RESERVE_BYTES: usize = 4 << 30;

/// The alignment of a reservation for large pages: x86-64's transparent huge page.
pub const HUGE_PAGE_BYTES: usize = 2 * 1024 * 1024;

/// One chunk of a page, owned like a `Box` without `Drop`: give it back with
/// [`Slabs::free`].
#[derive(Debug)]
pub struct Chunk {
    ptr: NonNull<u8>,
    /// The chunk's size in bytes.
    cap: u32,
    /// The class (1-based) whose page it is in.
    class: u8,
}

// SAFETY: a `Chunk` is the only handle to its bytes (see the module's invariants), like a
// `Box<[u8]>`, so moving it to another thread or sharing `&Chunk` (read-only) is sound.
unsafe impl Send for Chunk {}
// SAFETY: as above; `&Chunk` only reads.
unsafe impl Sync for Chunk {}

impl Chunk {
    pub fn cap(&self) -> usize {
        self.cap as usize
    }

    pub fn class(&self) -> u8 {
        self.class
    }

    /// Where its bytes start: for an index that reads them later under the same owner's
    /// rules (pages stay mapped while the `Slabs` lives).
    pub fn start(&self) -> NonNull<u8> {
        self.ptr
    }

    /// The chunk's bytes.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `ptr..ptr+cap` lies inside one page of the reservation, which stays
        // mapped while any `Chunk` lives; the mapping is anonymous, so every byte is
        // initialised (zero or written); this `Chunk` is its only owner and writes need
        // `&mut self`, so nothing writes it while this borrow lives.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.cap()) }
    }

    /// The chunk's bytes, to write.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`, and `&mut self` makes this the only access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.cap()) }
    }
}

/// A class's chunks: the free list and the carve point of its newest page.
#[derive(Debug, Default)]
struct ClassPool {
    /// First free chunk; each free chunk's first 8 bytes hold the next one's address.
    free_head: Option<NonNull<u8>>,
    free_count: usize,
    /// Next never-used chunk of the newest page and how many are left after it (memcached's
    /// `free_chunks_end`): a page is carved as it is used, so its memory is touched only then.
    carve: Option<NonNull<u8>>,
    carve_left: usize,
    /// Pages given to this class.
    pages: usize,
    /// Chunks handed out and not given back.
    used: usize,
    /// A page being emptied for another class ([`Slabs::start_drain`]): its chunks are off
    /// the free list, and chunks of it given back are counted here instead of reused.
    draining: Option<(usize, usize)>,
}

// SAFETY: the pointers are into the reservation and are only followed under the pool's lock.
unsafe impl Send for ClassPool {}

/// Per-class figures for `stats slabs`.
#[derive(Clone, Copy, Debug, Default)]
pub struct ClassUsage {
    pub pages: usize,
    pub used_chunks: usize,
    pub free_chunks: usize,
    /// Chunks not yet carved from the newest page.
    pub free_chunks_end: usize,
}

/// The page table.
#[derive(Debug)]
struct Pages {
    /// Pages carved from the reservation so far (the next new page is this one).
    carved: usize,
    /// Pages given back by the rebalancer, to reuse first.
    free: Vec<usize>,
    /// Pages given to classes.
    assigned: usize,
}

/// The store's memory: the reservation, the page table and one pool per class.
pub struct Slabs {
    /// The first page (the mapping's start, or its first 2 MiB boundary with large pages).
    base: NonNull<u8>,
    reserved_pages: usize,
    /// The whole mapping, for `munmap`: `base` and the pages, plus the slack before and
    /// after them that aligning for large pages leaves.
    mapping: (NonNull<u8>, usize),
    /// Whether the pages were advised `MADV_HUGEPAGE` (and the kernel took the advice).
    large_pages: bool,
    classes: SizeClasses,
    /// Index `id - 1` for class `id`.
    pools: Box<[Mutex<ClassPool>]>,
    pages: Mutex<Pages>,
}

// SAFETY: `base` is the reservation, shared read-only; everything mutable is behind the
// mutexes.
unsafe impl Send for Slabs {}
// SAFETY: as above.
unsafe impl Sync for Slabs {}

impl std::fmt::Debug for Slabs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slabs")
            .field("reserved_pages", &self.reserved_pages)
            .finish_non_exhaustive()
    }
}

impl Slabs {
    /// Reserves address space for `limit_bytes` (at least `MIN_RESERVE_BYTES`); nothing
    /// is touched yet. With `large_pages` the pages start on a [`HUGE_PAGE_BYTES`] boundary
    /// and are advised `MADV_HUGEPAGE` ([`Slabs::large_pages`] says whether the kernel took
    /// the advice: not where transparent huge pages are compiled out).
    pub fn new(classes: SizeClasses, limit_bytes: usize, large_pages: bool) -> Slabs {
        let want = limit_bytes.saturating_mul(2).max(MIN_RESERVE_BYTES);
        let reserved_pages = want.div_ceil(PAGE_BYTES);
        let len = reserved_pages * PAGE_BYTES;
        let slack = if large_pages { HUGE_PAGE_BYTES } else { 0 };
        // SAFETY: an anonymous private mapping at an address the kernel picks; no existing
        // memory is affected. MAP_NORESERVE: only touched pages count.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len + slack,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        assert!(
            p != libc::MAP_FAILED,
            "cannot reserve {} MiB of address space for the item pages: {} \
             (vm.overcommit_memory=2 refuses it; use a smaller -m)",
            (len + slack) >> 20,
            std::io::Error::last_os_error()
        );
        let mapping = NonNull::new(p.cast::<u8>()).expect("mmap returned a non-null address");
        let skip = (p as usize).next_multiple_of(HUGE_PAGE_BYTES) - p as usize;
        let base = if large_pages {
            // SAFETY: `skip` < `slack`, so the pages start inside the mapping and end at
            // most `slack - skip` bytes before its end.
            unsafe { mapping.add(skip) }
        } else {
            mapping
        };
        // SAFETY: `base..base + len` lies inside the mapping just made; advice changes how
        // the kernel backs it, not its contents (untouched, so zero).
        let large_pages = large_pages
            && unsafe { libc::madvise(base.as_ptr().cast(), len, libc::MADV_HUGEPAGE) } == 0;
        // Exposed once, so an item's header may find its key and data from its own
        // address ([`super::entry::Entry`]) with the pages' provenance.
        let _ = mapping.as_ptr().expose_provenance();
        let pools = (0..classes.len())
            .map(|_| Mutex::new(ClassPool::default()))
            .collect();
        Slabs {
            base,
            reserved_pages,
            mapping: (mapping, len + slack),
            large_pages,
            classes,
            pools,
            pages: Mutex::new(Pages {
                carved: 0,
                free: Vec::new(),
                assigned: 0,
            }),
        }
    }

    /// Whether the pages are advised into transparent huge pages (`-L`).
    pub fn large_pages(&self) -> bool {
        self.large_pages
    }

    pub fn classes(&self) -> &SizeClasses {
        &self.classes
    }

    fn pool(&self, class: u8) -> std::sync::MutexGuard<'_, ClassPool> {
        crate::fatal::lock(&self.pools[usize::from(class) - 1], "slab class")
    }

    /// A free chunk of `class`, if it has one (no new page).
    pub fn pop(&self, class: u8) -> Option<Chunk> {
        let mut p = self.pool(class);
        let cap = self.classes.chunk_size(usize::from(class));
        let ptr = if let Some(head) = p.free_head {
            // SAFETY: `head` is a free chunk of this class (module invariant), 8-byte
            // aligned (pages are page-aligned, chunk sizes multiples of 8) and at least 8
            // bytes long; its first 8 bytes were written by `free` under this lock.
            let next = unsafe { head.as_ptr().cast::<*mut u8>().read() };
            p.free_head = NonNull::new(next);
            p.free_count -= 1;
            head
        } else if p.carve_left > 0 {
            let at = p.carve.expect("carve_left > 0 has a carve point");
            p.carve_left -= 1;
            // SAFETY: `at + cap` is still inside the newest page (`carve_left` counts the
            // whole chunks left after `at`), so the sum stays in the reservation.
            p.carve = NonNull::new(unsafe { at.as_ptr().add(cap) });
            at
        } else {
            return None;
        };
        p.used += 1;
        Some(Chunk {
            ptr,
            cap: cap as u32,
            class,
        })
    }

    /// Gives `class` one more page (a freed one first), if the reservation has one and
    /// `admit` (called under the page table's lock, so page by page) agrees. Its chunks are
    /// carved as they are used.
    pub fn add_page(&self, class: u8, admit: impl FnOnce() -> bool) -> bool {
        let page = {
            let mut pages = crate::fatal::lock(&self.pages, "slab pages");
            if pages.free.is_empty() && pages.carved == self.reserved_pages || !admit() {
                return false;
            }
            let page = match pages.free.pop() {
                Some(page) => page,
                None => {
                    pages.carved += 1;
                    pages.carved - 1
                }
            };
            pages.assigned += 1;
            page
        };
        let cap = self.classes.chunk_size(usize::from(class));
        let mut p = self.pool(class);
        // The rest of the previous page's carve goes on the free list first.
        while p.carve_left > 0 {
            let c = Self::carve_one(&mut p, cap);
            Self::push_free(&mut p, c);
        }
        // SAFETY: `page < reserved_pages`, so the page lies inside the reservation.
        p.carve = NonNull::new(unsafe { self.base.as_ptr().add(page * PAGE_BYTES) });
        p.carve_left = (PAGE_BYTES / cap).max(1);
        p.pages += 1;
        true
    }

    fn carve_one(p: &mut ClassPool, cap: usize) -> NonNull<u8> {
        let at = p.carve.expect("carve_left > 0 has a carve point");
        p.carve_left -= 1;
        // SAFETY: as in `pop`.
        p.carve = NonNull::new(unsafe { at.as_ptr().add(cap) });
        at
    }

    fn push_free(p: &mut ClassPool, chunk: NonNull<u8>) {
        let next = p.free_head.map_or(std::ptr::null_mut(), NonNull::as_ptr);
        // SAFETY: `chunk` is free (its owner gave it up or it was never handed out), 8-byte
        // aligned and at least 8 bytes; nothing else touches a free chunk outside this lock.
        unsafe { chunk.as_ptr().cast::<*mut u8>().write(next) };
        p.free_head = Some(chunk);
        p.free_count += 1;
    }

    /// Gives a chunk back to its class.
    pub fn free(&self, chunk: Chunk) {
        let page = self.page_of(&chunk);
        let mut p = self.pool(chunk.class);
        p.used -= 1;
        match &mut p.draining {
            Some((draining, freed)) if *draining == page => *freed += 1,
            _ => Self::push_free(&mut p, chunk.ptr),
        }
    }

    /// Starts emptying `page` of `class` for another class: takes its free chunks (and its
    /// carve) off the class so no store gets one, and counts those given back from now on.
    /// One page per class at a time: false when one is already draining.
    pub fn start_drain(&self, class: u8, page: usize) -> bool {
        let mut p = self.pool(class);
        if p.draining.is_some() {
            return false;
        }
        let freed = self.take_free_of_page(&mut p, page);
        p.draining = Some((page, freed));
        true
    }

    /// Ends a drain started by [`Slabs::start_drain`] if every chunk of the page was given
    /// back: the page leaves the class, its memory goes back to the kernel, and true is
    /// returned. Otherwise the drain stays pending (a chunk is still owned: an item not yet
    /// evicted) and a later call finishes it.
    pub fn finish_drain(&self, class: u8) -> bool {
        let cap = self.classes.chunk_size(usize::from(class));
        let per_page = (PAGE_BYTES / cap).max(1);
        let mut p = self.pool(class);
        let Some((page, freed)) = p.draining else {
            return false;
        };
        if freed < per_page {
            return false;
        }
        p.draining = None;
        p.pages -= 1;
        drop(p);
        self.release(page);
        true
    }

    /// The class with a drain pending, if any, for [`Slabs::finish_drain`].
    pub fn draining_classes(&self) -> Vec<u8> {
        (1..=self.classes.len() as u8)
            .filter(|&c| self.pool(c).draining.is_some())
            .collect()
    }

    /// Takes `page`'s free chunks off `p`'s free list and carve; returns how many.
    fn take_free_of_page(&self, p: &mut ClassPool, page: usize) -> usize {
        let base = self.base.as_ptr() as usize;
        let page_of = |ptr: NonNull<u8>| (ptr.as_ptr() as usize - base) / PAGE_BYTES;
        let mut taken = 0;
        let mut kept: Option<NonNull<u8>> = None;
        let mut kept_count = 0;
        let mut at = p.free_head.take();
        while let Some(c) = at {
            // SAFETY: `c` is on the free list (as in `pop`).
            at = NonNull::new(unsafe { c.as_ptr().cast::<*mut u8>().read() });
            if page_of(c) == page {
                taken += 1;
                continue;
            }
            let next = kept.map_or(std::ptr::null_mut(), NonNull::as_ptr);
            // SAFETY: `c` is free, aligned and long enough (as in `push_free`).
            unsafe { c.as_ptr().cast::<*mut u8>().write(next) };
            kept = Some(c);
            kept_count += 1;
        }
        p.free_head = kept;
        p.free_count = kept_count;
        if p.carve
            .is_some_and(|c| p.carve_left > 0 && page_of(c) == page)
        {
            taken += p.carve_left;
            p.carve_left = 0;
            p.carve = None;
        }
        taken
    }

    /// Returns a page no chunk of which is owned to the free page list, and its memory to
    /// the kernel until it is used again.
    fn release(&self, page: usize) {
        // SAFETY: the page is inside the reservation and no chunk of it is owned or on a
        // free list, so nothing reads it meanwhile; MADV_DONTNEED on a private anonymous
        // mapping makes it read as zeros afterwards.
        unsafe {
            libc::madvise(
                self.base.as_ptr().add(page * PAGE_BYTES).cast(),
                PAGE_BYTES,
                libc::MADV_DONTNEED,
            );
        }
        let mut pages = crate::fatal::lock(&self.pages, "slab pages");
        pages.assigned -= 1;
        pages.free.push(page);
    }

    /// Pages given to classes, in bytes.
    pub fn page_bytes(&self) -> usize {
        crate::fatal::lock(&self.pages, "slab pages").assigned * PAGE_BYTES
    }

    /// Whether a new page is left in the reservation.
    pub fn has_page_left(&self) -> bool {
        let pages = crate::fatal::lock(&self.pages, "slab pages");
        !pages.free.is_empty() || pages.carved < self.reserved_pages
    }

    /// Whether `class` has a chunk without a new page.
    pub fn has_free(&self, class: u8) -> bool {
        let p = self.pool(class);
        p.free_head.is_some() || p.carve_left > 0
    }

    /// The figures of class `class` (1-based).
    pub fn usage(&self, class: u8) -> ClassUsage {
        let p = self.pool(class);
        ClassUsage {
            pages: p.pages,
            used_chunks: p.used,
            free_chunks: p.free_count + p.carve_left,
            free_chunks_end: p.carve_left,
        }
    }

    /// The page `chunk` lies in.
    pub fn page_of(&self, chunk: &Chunk) -> usize {
        self.page_at(chunk.ptr.as_ptr().addr())
    }

    /// The page the address `addr` (inside the pages) lies in.
    pub fn page_at(&self, addr: usize) -> usize {
        (addr - self.base.as_ptr().addr()) / PAGE_BYTES
    }

    /// The chunk of `class` that starts at `start`, as a [`Chunk`] again (an item keeps
    /// its first chunk as the address of its header: `Entry::take`).
    ///
    /// # Safety
    /// `start` is the start of a chunk of `class` that a [`Chunk`] owned and whose owner
    /// gave it up to the caller (it is no one else's and not free).
    pub unsafe fn chunk_at(&self, start: NonNull<u8>, class: u8) -> Chunk {
        Chunk {
            ptr: start,
            cap: self.classes.chunk_size(usize::from(class)) as u32,
            class,
        }
    }

    /// Takes a page from `class` for the rebalancer when every chunk of some page of it is
    /// free: removes that page's chunks from the free list and the carve, and returns the
    /// page to the free page list. Returns false when no page of the class is wholly free.
    pub fn release_free_page(&self, class: u8) -> bool {
        let cap = self.classes.chunk_size(usize::from(class));
        let per_page = (PAGE_BYTES / cap).max(1);
        let mut p = self.pool(class);
        // Count the free chunks per page (the carve's too).
        let mut free_per_page = std::collections::HashMap::<usize, usize>::new();
        let base = self.base.as_ptr() as usize;
        let page_of = |ptr: NonNull<u8>| (ptr.as_ptr() as usize - base) / PAGE_BYTES;
        let mut at = p.free_head;
        while let Some(c) = at {
            *free_per_page.entry(page_of(c)).or_default() += 1;
            // SAFETY: `c` is on the free list (as in `pop`).
            at = NonNull::new(unsafe { c.as_ptr().cast::<*mut u8>().read() });
        }
        if let Some(c) = p.carve.filter(|_| p.carve_left > 0) {
            *free_per_page.entry(page_of(c)).or_default() += p.carve_left;
        }
        let Some(page) = free_per_page
            .iter()
            .find(|&(_, &n)| n == per_page)
            .map(|(&page, _)| page)
        else {
            return false;
        };
        self.take_free_of_page(&mut p, page);
        p.pages -= 1;
        drop(p);
        self.release(page);
        true
    }
}

impl Drop for Slabs {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once; no `Chunk` outlives the
        // `Slabs` (module invariant).
        unsafe {
            libc::munmap(self.mapping.0.as_ptr().cast(), self.mapping.1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_are_carved_reused_and_pages_released() {
        let s = Slabs::new(SizeClasses::default(), 4 * PAGE_BYTES, false);
        let class = 39; // 524,288-byte chunks: two per page.
        assert!(s.pop(class).is_none(), "no page yet");
        assert!(s.add_page(class, || true));
        let mut a = s.pop(class).unwrap();
        let b = s.pop(class).unwrap();
        assert!(s.pop(class).is_none(), "a page holds two");
        a.bytes_mut()[..3].copy_from_slice(b"abc");
        assert_eq!(&a.bytes()[..3], b"abc");
        assert_eq!(s.usage(class).used_chunks, 2);
        assert!(!s.release_free_page(class), "its chunks are in use");
        s.free(a);
        s.free(b);
        assert_eq!(s.usage(class).free_chunks, 2);
        assert!(s.release_free_page(class));
        assert_eq!(s.page_bytes(), 0);
        assert!(s.pop(class).is_none());
        assert!(!s.add_page(1, || false), "refused by the budget");
        assert!(s.add_page(1, || true), "the freed page is reused");
        let c = s.pop(1).unwrap();
        assert_eq!(c.bytes()[..3], [0, 0, 0], "released pages read as zeros");
        s.free(c);
    }

    /// The `VmFlags` line of the mapping of `/proc/self/smaps` that holds `addr`.
    fn vm_flags_at(addr: usize) -> String {
        let smaps = std::fs::read_to_string("/proc/self/smaps").expect("/proc/self/smaps");
        let mut inside = false;
        for line in smaps.lines() {
            let range = line.split_whitespace().next().unwrap_or("");
            if let Some((lo, hi)) = range.split_once('-') {
                if let (Ok(lo), Ok(hi)) =
                    (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
                {
                    inside = (lo..hi).contains(&addr);
                    continue;
                }
            }
            if inside {
                if let Some(flags) = line.strip_prefix("VmFlags:") {
                    return flags.to_owned();
                }
            }
        }
        panic!("no mapping holds {addr:#x}")
    }

    #[test]
    fn large_pages_start_on_a_huge_page_and_are_advised_into_huge_pages() {
        let s = Slabs::new(SizeClasses::default(), 4 * PAGE_BYTES, true);
        let base = s.base.as_ptr() as usize;
        assert_eq!(
            base % HUGE_PAGE_BYTES,
            0,
            "the pages start on a 2 MiB boundary"
        );
        if !std::path::Path::new("/sys/kernel/mm/transparent_hugepage").exists() {
            assert!(!s.large_pages(), "no transparent huge pages in this kernel");
            return;
        }
        assert!(s.large_pages(), "the kernel took the advice");
        assert!(
            vm_flags_at(base).split_whitespace().any(|f| f == "hg"),
            "MADV_HUGEPAGE shows as `hg`: {}",
            vm_flags_at(base)
        );
        // Chunks still work, and the last page of the reservation is inside the mapping.
        let class = 39;
        assert!(s.add_page(class, || true));
        let mut a = s.pop(class).unwrap();
        a.bytes_mut()[..2].copy_from_slice(b"ok");
        assert_eq!(&a.bytes()[..2], b"ok");
        s.free(a);
        let last = base + s.reserved_pages * PAGE_BYTES - 1;
        let (start, len) = (s.mapping.0.as_ptr() as usize, s.mapping.1);
        assert!((start..start + len).contains(&last));
        let plain = Slabs::new(SizeClasses::default(), 4 * PAGE_BYTES, false);
        assert!(!plain.large_pages());
        assert!(
            !vm_flags_at(plain.base.as_ptr() as usize)
                .split_whitespace()
                .any(|f| f == "hg"),
            "without -L the pages are ordinary"
        );
    }
}
