//! memcached's slab classes: the chunk sizes of the store's pages ([`super::slab`]) under
//! memcached's `-n`, `-f` and `-o slab_chunk_max`; an item lives in the class memcached would
//! put it in, so `stats items`, `stats slabs`, `stats cachedump` and `me` name the same
//! classes as memcached and tools that walk classes (memcdump) work. Each shard counts its
//! items per class ([`ClassCounts`]), under its own lock, so these reports need no scan.

/// memcached's `MAX_NUMBER_OF_SLAB_CLASSES`: class ids are `1..CLASSES`.
pub const CLASSES: usize = 64;
/// memcached's `sizeof(item)` on 64-bit.
pub const ITEM_HEADER_BYTES: usize = 48;
/// memcached's slab page (`settings.slab_page_size`, 1 MiB).
pub const SLAB_PAGE_BYTES: usize = 1024 * 1024;

/// The size memcached gives an item (`ITEM_ntotal`): header, key and its NUL, the data with
/// its `\r\n`, the client flags when non-zero, and the CAS value.
pub fn item_bytes(key_len: usize, flags: u32, data_len_with_crlf: usize, use_cas: bool) -> usize {
    ITEM_HEADER_BYTES
        + key_len
        + 1
        + data_len_with_crlf
        + if flags == 0 { 0 } else { 4 }
        + if use_cas { 8 } else { 0 }
}

/// The chunk sizes of memcached's classes (`slabs_init`): from `header + chunk_min`, times
/// `factor` each (8-byte aligned), while under `chunk_max / factor`; the last class is
/// `chunk_max` (larger items are chained from it).
#[derive(Clone, Debug)]
pub struct SizeClasses {
    sizes: Vec<usize>,
}

impl Default for SizeClasses {
    fn default() -> Self {
        SizeClasses::new(1.25, 48, 512 * 1024)
    }
}

impl SizeClasses {
    pub fn new(factor: f64, chunk_min: usize, chunk_max: usize) -> SizeClasses {
        let mut sizes = Vec::new();
        let mut size = ITEM_HEADER_BYTES + chunk_min;
        while sizes.len() < CLASSES - 2 && (size as f64) < chunk_max as f64 / factor {
            if size % 8 != 0 {
                size += 8 - size % 8;
            }
            sizes.push(size);
            size = (size as f64 * factor) as usize;
        }
        sizes.push(chunk_max);
        SizeClasses { sizes }
    }

    /// The class id (1-based) of an item of `bytes` ([`item_bytes`]).
    pub fn class_of(&self, bytes: usize) -> u8 {
        let i = self.sizes.partition_point(|&c| c < bytes);
        (i.min(self.sizes.len() - 1) + 1) as u8
    }

    /// The chunk size of class `id` (1-based).
    pub fn chunk_size(&self, id: usize) -> usize {
        self.sizes[id - 1]
    }

    /// How many classes there are.
    pub fn len(&self) -> usize {
        self.sizes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sizes.is_empty()
    }
}

/// One shard's per-class tallies (kept under the shard's lock).
#[derive(Clone, Copy, Debug, Default)]
pub struct ClassCounts {
    pub items: u64,
    /// Sum of [`item_bytes`] (memcached's `mem_requested`).
    pub bytes: u64,
    pub evicted: u64,
    /// Evicted items that had an expiry time.
    pub evicted_nonzero: u64,
    /// Seconds since the last access of the last item evicted.
    pub evicted_time: u32,
    pub evicted_unfetched: u64,
    pub reclaimed: u64,
    pub expired_unfetched: u64,
    pub crawler_reclaimed: u64,
}

impl ClassCounts {
    /// Adds `other` into `self` (summing the shards); `evicted_time` keeps the latest seen.
    pub fn add(&mut self, other: &ClassCounts) {
        self.items += other.items;
        self.bytes += other.bytes;
        self.evicted += other.evicted;
        self.evicted_nonzero += other.evicted_nonzero;
        self.evicted_time = self.evicted_time.max(other.evicted_time);
        self.evicted_unfetched += other.evicted_unfetched;
        self.reclaimed += other.reclaimed;
        self.expired_unfetched += other.expired_unfetched;
        self.crawler_reclaimed += other.crawler_reclaimed;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_match_memcached_defaults() {
        // memcached 1.6.18 -vv prints: class 1 chunk 96, 2 120, ..., 39 524288.
        let c = SizeClasses::default();
        assert_eq!(c.len(), 39);
        assert_eq!(c.chunk_size(1), 96);
        assert_eq!(c.chunk_size(2), 120);
        assert_eq!(c.chunk_size(38), 394840);
        assert_eq!(c.chunk_size(39), 524288);
        assert_eq!(c.class_of(61), 1);
        assert_eq!(c.class_of(96), 1);
        assert_eq!(c.class_of(97), 2);
        assert_eq!(c.class_of(2060), 15);
        assert_eq!(c.class_of(1_048_000), 39);
    }
}
