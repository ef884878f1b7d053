//! Holding `-m` against the allocator's real footprint, not only the item bytes.
//!
//! Items are charged their key, data and a fixed overhead ([`super::entry::charge_bytes`]),
//! but a write-heavy load of random value sizes fragments the allocator's heap: evicting an
//! item leaves a hole that the next (differently sized) value may not fit, so the heap grows
//! past `-m` although the charged bytes stay under it (measured: glibc's heap 79.6 MB for
//! 67.1 MB charged, 15 % free holes, after 10 s of 100–50,000-byte sets).
//!
//! The store therefore links items against a *budget* (≤ the limit) that the heap watch
//! lowers while the item heap (charged bytes plus the allocator's free holes) is over the
//! limit *and* the heap grows past its high-water mark, and raises back towards the limit when it is under.
//! A lower budget leaves more holes free, so new values find one and the heap stops growing.
//! memcached gets the same bound from its slab pages (a value's class waste is inside `-m`).
//!
//! With several processors glibc gives each thread its own arena, and a hole in one arena
//! cannot take a value allocated by another thread: measured at `-t 2`, the heap reached
//! 94 MB for `-m 64` (75.6 MB with one arena). [`use_one_arena`] (called by the server before
//! its threads start, when the heap watch is on) makes every thread share one arena.
//!
//! Invariants: `limit / 2 ≤ budget ≤ limit`; the budget only moves when the heap watch runs
//! (every [`WATCH_INTERVAL_MS`]); without glibc's `mallinfo2` (another allocator or libc)
//! the budget stays at the limit.

/// How often the server's heap-watch fiber samples the allocator.
pub const WATCH_INTERVAL_MS: u64 = 100;

/// The allocator's heap at one instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeapSample {
    /// Bytes the allocator holds from the system for its arenas (resident once touched).
    pub heap_bytes: usize,
    /// Free bytes inside those arenas (holes between live allocations, and the top).
    pub free_bytes: usize,
}

/// Samples glibc's heap (`mallinfo2`); `None` on other platforms.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn sample() -> Option<HeapSample> {
    // SAFETY: mallinfo2 takes no arguments and returns a plain struct by value.
    let info = unsafe { libc::mallinfo2() };
    if info.arena == 0 {
        // Not glibc's allocator (a replaced global allocator reports nothing).
        return None;
    }
    Some(HeapSample {
        heap_bytes: info.arena,
        free_bytes: info.fordblks,
    })
}

/// Samples glibc's heap (`mallinfo2`); `None` on other platforms.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn sample() -> Option<HeapSample> {
    None
}

/// Makes all threads of the process allocate from one glibc arena (`M_ARENA_MAX = 1`), so
/// the holes items leave are reusable by every thread. Process-wide; affects arenas created
/// afterwards, so call it before starting threads. Does nothing on other platforms.
pub fn use_one_arena() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes an allocator parameter; M_ARENA_MAX takes any count.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

/// The next budget, from the current one, the limit, the charged item bytes, this sample and
/// the largest heap size seen before it (the heap "grew" only when it passes that).
pub fn next_budget(
    budget: usize,
    limit: usize,
    used_bytes: usize,
    now: HeapSample,
    previous_heap_bytes: usize,
) -> usize {
    let item_heap = used_bytes + now.free_bytes;
    let floor = limit / 2;
    let next = if item_heap > limit {
        if now.heap_bytes > previous_heap_bytes {
            // Over and still growing: leave more room in the holes, at least as much as the
            // heap just grew (a heap never shrinks back, so react in proportion).
            budget.saturating_sub((now.heap_bytes - previous_heap_bytes).max(limit / 64))
        } else {
            budget
        }
    } else {
        // Room again (items deleted, the heap trimmed): give it back slowly.
        budget + limit / 256
    };
    next.clamp(floor, limit)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: usize = 1 << 20;

    fn heap(heap_bytes: usize, free_bytes: usize) -> HeapSample {
        HeapSample {
            heap_bytes,
            free_bytes,
        }
    }

    #[test]
    fn lowers_only_while_over_and_growing() {
        let limit = 64 * MB;
        // Over the limit and the heap grew: down by the growth (at least limit/64).
        let b = next_budget(limit, limit, 60 * MB, heap(80 * MB, 12 * MB), 78 * MB);
        assert_eq!(b, limit - 2 * MB);
        let small = next_budget(limit, limit, 60 * MB, heap(80 * MB, 12 * MB), 80 * MB - 1);
        assert_eq!(small, limit - MB);
        // Over but no longer growing: hold.
        assert_eq!(
            next_budget(b, limit, 60 * MB, heap(80 * MB, 12 * MB), 80 * MB),
            b
        );
        // Under the limit: back up, by a smaller step.
        assert_eq!(
            next_budget(b, limit, 40 * MB, heap(80 * MB, 12 * MB), 80 * MB),
            b + limit / 256
        );
    }

    #[test]
    fn stays_within_half_the_limit_and_the_limit() {
        let limit = 64 * MB;
        let mut b = limit;
        for i in 0..1000 {
            b = next_budget(b, limit, b, heap(100 * MB + i, 50 * MB), 100 * MB + i - 1);
        }
        assert_eq!(b, limit / 2);
        for _ in 0..1000 {
            b = next_budget(b, limit, 0, heap(10 * MB, 0), 10 * MB);
        }
        assert_eq!(b, limit);
    }

    #[test]
    fn sample_reports_a_heap_that_holds_an_allocation() {
        if sample().is_none() {
            eprintln!("SKIP: no mallinfo2 on this platform");
            return;
        }
        let block = std::hint::black_box(vec![1u8; 100_000]);
        let now = sample().unwrap();
        assert!(now.heap_bytes - now.free_bytes >= block.len());
    }
}
