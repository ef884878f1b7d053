//! CPU hints the runtime and the servers on it share.
//!
//! Invariant: nothing here reads, writes or faults on the addresses it is given; a hint on
//! any address, even an unmapped one, changes only what the cache holds.

/// Asks the CPU to bring the cache line holding `addr` into its caches (`PREFETCHT0`), so
/// that a later load of it does not wait: for lines a step of work will need while that
/// step waits for another. Never faults and reads nothing, whatever `addr` is. Nothing on
/// architectures other than x86_64.
#[inline(always)]
pub fn prefetch_read(addr: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 is a hint: it does not fault on any address and changes no state
    // a program can observe; SSE is part of the x86_64 baseline.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(addr.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = addr;
}

#[cfg(test)]
mod tests {
    use super::prefetch_read;

    #[test]
    fn a_hint_on_any_address_does_not_fault() {
        let x = 7u64;
        prefetch_read((&x as *const u64).cast());
        prefetch_read(std::ptr::null());
        prefetch_read(usize::MAX as *const u8);
        assert_eq!(x, 7);
    }
}
