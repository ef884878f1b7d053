//! Fiber stacks: `mmap`ed, lazily committed, a guard page below, pooled for reuse.
//!
//! Invariants:
//! - every stack has a `PROT_NONE` guard page at its low end, so an overflow faults (and
//!   [`super::overflow`] reports it) instead of corrupting the neighbouring mapping;
//! - the memory is `MAP_NORESERVE`: a fiber only costs the pages it has touched;
//! - a stack in the pool belongs to no fiber; a fiber's stack goes back to the pool only once
//!   its coroutine has returned (a suspended stack may still be pointed at by in-flight I/O);
//! - stacks are *coloured*: each starts a different multiple of [`COLOR_STEP`] bytes below the
//!   top of its mapping (at most a page), so the hot top frames of many fibers do not all
//!   fall into the same cache sets;
//! - every mapping spans an odd number of pages ([`mapping_len`]), so the top pages of stacks
//!   mapped back to back fall into every set of a TLB indexed by the page number, not half.

use std::io;
use std::num::NonZeroUsize;
use std::sync::Mutex;

use crate::poison::Recover;
use corosensei::stack::{Stack, StackPointer};

/// The stack size a fiber gets when neither its builder nor its cluster says otherwise.
pub const DEFAULT_STACK_SIZE: usize = 256 * 1024;

/// The smallest usable stack size accepted (guard page not included).
pub const MIN_STACK_SIZE: usize = 16 * 1024;

/// How many free stacks the global pool keeps; beyond that, freed stacks are unmapped.
const GLOBAL_POOL_CAPACITY: usize = 4096;

/// How many free stacks each processor keeps for itself before it uses the global pool.
pub(crate) const PROCESSOR_CACHE_CAPACITY: usize = 64;

/// How far apart the tops of successive stacks are placed inside their top page (a cache
/// line). Every mapping is page-aligned, so without this every fiber's top frames would sit at
/// the same page offset: the same L1 sets (whose index lies inside the page offset) and, for
/// pages of one colour, the same L2 sets. With many fibers per processor those sets overflow
/// while the rest of the cache idles (`weft bench sched cycle --place-rings --fibers 20`, 2
/// rings per processor: 29 M/s before, 50 after). glibc colours thread stacks the same way.
const COLOR_STEP: usize = 64;

/// How many colours: tops spread over the upper half of the top page, so the frames of a
/// parked fiber (1–2 KiB) still fit in that page and colouring costs no resident memory.
const COLORS: usize = 32;

/// How many stacks have been mapped: the next one's colour is [`color_of`] this count.
static NEXT_COLOR: crate::loom::StaticAtomicUsize = crate::loom::StaticAtomicUsize::new(0);

/// The colour (`0..COLORS`) of the `n`-th stack mapped: Fibonacci hashing, not `n % COLORS`,
/// so that the stacks one processor ends up with (every other one, or blocks of eight, as
/// spawns are dealt out) still spread over all colours. With `n % COLORS`, fibers dealt out in
/// blocks of eight left each processor half the colours (`yield` at 2 processors: 47 against
/// 93 M/s blocked).
fn color_of(n: usize) -> usize {
    const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;
    ((n as u64).wrapping_mul(GOLDEN) >> (64 - COLORS.trailing_zeros())) as usize
}

/// The bytes to map for a stack of `usable` bytes (a multiple of `page`): the guard page, the
/// usable pages and the colour's page, plus one page of address space when those are an even
/// number of pages (the extra page only lengthens the usable stack; `MAP_NORESERVE` and
/// untouched, it costs no memory).
///
/// Why odd: the kernel maps stacks made one after another back to back, so their top pages,
/// where every parked fiber's frames are, lie `len` pages apart. This host's second-level
/// data TLB (AMD Zen 3: 2,048 entries, 8-way, 256 sets) takes its set from the page number's
/// low bits, so with an even stride the tops reach half the sets and 1,000 connections' tops
/// overflow the 1,024 entries left to them: a pointer chase over 1,000 pages 18 apart (a
/// 64 KiB stack's mapping) took 12–18 ns a step against about 7 ns 19 pages apart
/// (`benches/tlb_stride`; `docs/notes/scale.md`, "Stack tops in half the TLB").
fn mapping_len(usable: usize, page: usize) -> usize {
    let pages = usable / page + 2;
    (pages | 1) * page
}

/// The page size, asked of the kernel once (it is on the spawn path).
pub(crate) fn page_size() -> usize {
    static PAGE_SIZE: crate::loom::StaticAtomicUsize = crate::loom::StaticAtomicUsize::new(0);
    let cached = PAGE_SIZE.load(crate::loom::Ordering::Relaxed);
    if cached != 0 {
        return cached;
    }
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    let size = usize::try_from(size)
        .ok()
        .filter(|s| s.is_power_of_two())
        .unwrap_or(4096);
    PAGE_SIZE.store(size, crate::loom::Ordering::Relaxed);
    size
}

/// One fiber stack: `len` bytes mapped at `start`, the lowest page of which is the guard.
#[derive(Debug)]
pub(crate) struct FiberStack {
    start: usize,
    len: usize,
    /// The usable bytes asked for (a multiple of the page size): the pools' size class.
    usable: usize,
    /// Bytes left unused at the top of the mapping (a multiple of [`COLOR_STEP`], below half
    /// a page): where this stack's colour puts its top.
    color: usize,
}

// SAFETY: a FiberStack is plain owned memory; nothing in it is tied to the creating thread.
unsafe impl Send for FiberStack {}

impl FiberStack {
    /// Maps a stack with at least `size` usable bytes plus a guard page, one more page of
    /// address space (never touched unless used) for its colour, and, when that makes an even
    /// number of pages, one more still: see [`mapping_len`].
    pub(crate) fn new(size: usize) -> io::Result<Self> {
        let page = page_size();
        let usable = size.max(MIN_STACK_SIZE).next_multiple_of(page);
        let len = mapping_len(usable, page);
        // SAFETY: an anonymous private mapping at an address the kernel chooses touches no
        // existing memory.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(map_error(io::Error::last_os_error(), usable));
        }
        let color = color_of(NEXT_COLOR.fetch_add(1, crate::loom::Ordering::Relaxed)) * COLOR_STEP;
        let stack = FiberStack {
            start: ptr as usize,
            len,
            usable,
            color,
        };
        // SAFETY: the first page lies inside the mapping made above, which nothing else uses.
        if unsafe { libc::mprotect(ptr, page, libc::PROT_NONE) } != 0 {
            return Err(map_error(io::Error::last_os_error(), usable));
        }
        Ok(stack)
    }

    /// The usable bytes asked for when it was mapped (its size class in the pools): the fiber
    /// gets at least that much below its coloured top (guard page and colour room not
    /// included).
    pub(crate) fn usable_size(&self) -> usize {
        self.usable
    }

    /// The guard page's address range, `[low, high)`.
    pub(crate) fn guard_range(&self) -> (usize, usize) {
        (self.start, self.start + page_size())
    }
}

impl Drop for FiberStack {
    fn drop(&mut self) {
        // SAFETY: the range is exactly the mapping made in `new`, and no fiber runs on it (the
        // coroutine that used it has returned or was leaked together with its stack).
        unsafe { libc::munmap(self.start as *mut libc::c_void, self.len) };
    }
}

// SAFETY: `base` and `limit` lie inside a mapping this value owns (`base` is `color` bytes below
// its end, `color` < half a page); the guard page at `limit` catches overflows, and at least
// the asked-for usable size (>= MIN_STACK_SIZE) lies between the guard and `base`; `limit` is
// page-aligned and `base` a multiple of COLOR_STEP (64) below a page boundary, both multiples
// of STACK_ALIGNMENT (16).
unsafe impl Stack for FiberStack {
    fn base(&self) -> StackPointer {
        StackPointer::new(self.start + self.len - self.color)
            .expect("stack mapping is not at address 0")
    }

    fn limit(&self) -> StackPointer {
        StackPointer::new(self.start).expect("stack mapping is not at address 0")
    }
}

/// Turns a failed `mmap`/`mprotect` into an error that names the likely cause and the fix.
fn map_error(err: io::Error, size: usize) -> io::Error {
    if err.raw_os_error() != Some(libc::ENOMEM) {
        return io::Error::new(
            err.kind(),
            format!("cannot map a {size}-byte fiber stack: {err}"),
        );
    }
    let limit: Option<usize> = std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()
        .and_then(|s| s.trim().parse().ok());
    let mappings = std::fs::read_to_string("/proc/self/maps")
        .map(|s| s.lines().count())
        .ok();
    let message = match (limit, mappings) {
        (Some(limit), Some(mappings)) if mappings + 2 >= limit => format!(
            "cannot map a {size}-byte fiber stack: the kernel's limit on memory mappings is \
             reached ({mappings} of vm.max_map_count = {limit}; each fiber stack takes two). \
             Raise it (`sysctl -w vm.max_map_count=1048576`) or keep fewer fibers alive"
        ),
        _ => format!(
            "cannot map a {size}-byte fiber stack: {err}. The address space or memory limit \
             is reached (check `ulimit -v`, the cgroup memory limit and vm.overcommit_memory), \
             or use smaller stacks (weft::Builder::stack_size)"
        ),
    };
    io::Error::new(io::ErrorKind::OutOfMemory, message)
}

/// Free stacks shared by every cluster, by usable size.
static GLOBAL_POOL: Mutex<Vec<FiberStack>> = Mutex::new(Vec::new());

/// A stack of `size` usable bytes: from `cache` (a processor's own), the global pool, or a new
/// mapping.
pub(crate) fn take(size: usize, cache: Option<&mut Vec<FiberStack>>) -> io::Result<FiberStack> {
    let usable = size.max(MIN_STACK_SIZE).next_multiple_of(page_size());
    if let Some(cache) = cache {
        if let Some(pos) = cache.iter().rposition(|s| s.usable_size() == usable) {
            return Ok(cache.swap_remove(pos));
        }
    }
    {
        let mut pool = GLOBAL_POOL.lock().recover();
        if let Some(pos) = pool.iter().rposition(|s| s.usable_size() == usable) {
            return Ok(pool.swap_remove(pos));
        }
    }
    FiberStack::new(usable)
}

/// Returns a stack whose coroutine has finished: to `cache` if it has room, else the global
/// pool, else unmaps it.
pub(crate) fn give_back(stack: FiberStack, cache: Option<&mut Vec<FiberStack>>) {
    let stack = match cache {
        Some(cache) if cache.len() < PROCESSOR_CACHE_CAPACITY => {
            cache.push(stack);
            return;
        }
        _ => stack,
    };
    let mut pool = GLOBAL_POOL.lock().recover();
    if pool.len() < GLOBAL_POOL_CAPACITY {
        pool.push(stack);
    }
}

/// The number of usable bytes asked for, checked.
pub(crate) fn checked_size(size: usize) -> io::Result<NonZeroUsize> {
    if size < MIN_STACK_SIZE {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("fiber stack size {size} is below the minimum of {MIN_STACK_SIZE} bytes"),
        ));
    }
    Ok(NonZeroUsize::new(size).expect("checked above"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stack_has_guard_page_and_usable_size() {
        let s = FiberStack::new(64 * 1024).unwrap();
        assert_eq!(s.usable_size(), 64 * 1024);
        let (lo, hi) = s.guard_range();
        assert_eq!(hi - lo, page_size());
        assert_eq!(s.limit().get(), lo);
        let top = s.start + s.len;
        assert!(s.base().get() <= top && top - s.base().get() < page_size() / 2);
        assert_eq!(s.base().get() % COLOR_STEP, 0);
        assert!(
            s.base().get() - hi >= 64 * 1024,
            "at least the asked-for size is usable"
        );
    }

    #[test]
    fn every_other_stack_and_every_block_of_eight_still_see_most_colours() {
        for pick in [
            (|n: usize| n % 2 == 0) as fn(usize) -> bool,
            |n| n % 2 == 1,
            |n| (n / 8) % 2 == 0,
        ] {
            let mut seen = [false; COLORS];
            for n in (0..4 * COLORS).filter(|&n| pick(n)) {
                seen[color_of(n)] = true;
            }
            let count = seen.iter().filter(|&&s| s).count();
            assert!(count >= COLORS * 3 / 4, "{count} of {COLORS} colours");
        }
    }

    #[test]
    fn successive_stacks_start_at_different_cache_lines_of_their_page() {
        let stacks: Vec<_> = (0..COLORS)
            .map(|_| FiberStack::new(MIN_STACK_SIZE).unwrap())
            .collect();
        let mut offsets: Vec<_> = stacks
            .iter()
            .map(|s| s.base().get() % page_size())
            .collect();
        offsets.sort_unstable();
        offsets.dedup();
        // Other tests map stacks concurrently and take colours from the same counter, so
        // allow a few repeats; without colouring every offset is 0.
        assert!(offsets.len() > COLORS / 2, "top offsets {offsets:?}");
    }

    #[test]
    fn every_mapping_spans_an_odd_number_of_pages() {
        // Stacks mapped one after another sit back to back, so the tops of their pages are
        // `len` pages apart; an even stride leaves half the sets of a TLB indexed by the page
        // number's low bits to every hot top page (1,000 connections' tops then overflow this
        // host's 2,048-entry second-level TLB, which would hold them).
        for usable in [MIN_STACK_SIZE, 48 * 1024, 64 * 1024, 68 * 1024, 256 * 1024] {
            let s = FiberStack::new(usable).unwrap();
            let pages = s.len / page_size();
            assert_eq!(pages % 2, 1, "{usable}-byte stack spans {pages} pages");
            assert_eq!(
                s.usable_size(),
                usable,
                "the pools' size class is unchanged"
            );
            assert!(s.base().get() - s.guard_range().1 >= usable);
        }
    }

    #[test]
    fn stacks_mapped_in_a_row_spread_their_tops_over_the_sets_of_a_tlb() {
        // 8-way 2,048-entry: 256 sets, indexed by the low 8 bits of the page number.
        const SETS: usize = 256;
        let stacks: Vec<_> = (0..2 * SETS)
            .map(|_| FiberStack::new(64 * 1024).unwrap())
            .collect();
        let mut sets: Vec<_> = stacks
            .iter()
            .map(|s| (s.base().get() - 1) / page_size() % SETS)
            .collect();
        sets.sort_unstable();
        sets.dedup();
        // Other tests map concurrently and the kernel may leave holes, so not every set;
        // back-to-back 18-page mappings reach only the 128 even ones.
        assert!(sets.len() > SETS * 3 / 4, "{} of {SETS} sets", sets.len());
    }

    #[test]
    fn pool_reuses_stacks_of_the_same_size() {
        let mut cache = Vec::new();
        let s = take(32 * 1024, Some(&mut cache)).unwrap();
        let addr = s.start;
        give_back(s, Some(&mut cache));
        let again = take(32 * 1024, Some(&mut cache)).unwrap();
        assert_eq!(again.start, addr);
        let other = take(48 * 1024, Some(&mut cache)).unwrap();
        assert_ne!(other.start, addr);
    }

    #[test]
    fn too_small_a_size_is_refused() {
        assert!(checked_size(100).is_err());
        assert!(checked_size(MIN_STACK_SIZE).is_ok());
    }
}
