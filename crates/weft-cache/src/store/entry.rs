//! One cached item and what it costs against the memory limit.

use std::sync::Arc;

/// The item was read at least once (memcached `ITEM_FETCHED`).
pub const FETCHED: u8 = 1;
/// Marked stale by `md ... I` or a stale `ms` (memcached `ITEM_STALE`).
pub const STALE: u8 = 2;
/// A recache token (`W`) was handed out (memcached `ITEM_TOKEN_SENT`).
pub const TOKEN_SENT: u8 = 4;
/// The key was given base64-encoded and is binary (memcached `ITEM_KEY_BINARY`).
pub const KEY_BINARY: u8 = 8;

/// Slot index that means "none" in the LRU links and the free list.
pub const NIL: u32 = u32::MAX;

/// A stored item. `data` includes the trailing `\r\n`, as memcached stores it, so a `get`
/// reply sends it as one piece; it is shared (`Arc`) so a reply can reference it after the
/// shard lock is released.
#[derive(Debug)]
pub struct Entry {
    pub key: Box<[u8]>,
    pub data: Arc<[u8]>,
    pub hash: u64,
    pub cas: u64,
    pub flags: u32,
    /// Expiry on the clock's scale; 0 = never.
    pub exptime: u32,
    /// Last access (or store) time on the clock's scale.
    pub time: u32,
    /// Bits: [`FETCHED`], [`STALE`], [`TOKEN_SENT`], [`KEY_BINARY`].
    pub bits: u8,
    /// memcached's slab class for its size ([`super::classes`]), set when linked.
    pub class: u8,
    /// What it is charged against `-m` ([`super::Store::charge_bytes`]), set when linked.
    pub charge: u32,
    /// LRU neighbours (towards the head = more recent, towards the tail).
    pub prev: u32,
    pub next: u32,
}

impl Entry {
    /// Value length without the trailing `\r\n`.
    pub fn value_len(&self) -> usize {
        self.data.len() - 2
    }

    /// The value without the trailing `\r\n`.
    pub fn value(&self) -> &[u8] {
        &self.data[..self.data.len() - 2]
    }
}

/// Bytes glibc's allocator takes for a request of `n` bytes: the 8-byte size header, rounded
/// up to 16, at least 32 (other allocators' size classes are within a few per cent of it).
pub fn malloc_chunk_bytes(n: usize) -> usize {
    ((n + 8 + 15) & !15).max(32)
}

/// The hash-table cost of one item: its bucket (a `u32` slot index and a control byte) at the
/// table's lowest load after it doubles (7/16), rounded up.
pub const TABLE_BYTES_PER_ITEM: usize = 16;

/// What one item occupies in memory: its slot (an [`Entry`] in the shard's slot vector), its
/// hash-table bucket, the key's allocation and the data's (the `Arc`'s two counts and the
/// bytes, with the trailing `\r\n`), each as the allocator rounds it.
pub fn footprint_bytes(key_len: usize, data_len: usize) -> usize {
    std::mem::size_of::<Entry>()
        + TABLE_BYTES_PER_ITEM
        + malloc_chunk_bytes(key_len)
        + malloc_chunk_bytes(2 * std::mem::size_of::<usize>() + data_len)
}
