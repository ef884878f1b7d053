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

/// Fixed cost of one item beyond its key and data: the slot (`Entry`), its hash-table bucket
/// (16), glibc's headers of the key and data allocations (16 each) and the `Arc`'s two
/// counts (16).
pub const ITEM_OVERHEAD_BYTES: usize = std::mem::size_of::<Entry>() + 16 + 2 * 16 + 16;

fn round16(n: usize) -> usize {
    (n + 15) & !15
}

/// What an item with these sizes is charged against `-m`.
pub fn charge_bytes(key_len: usize, data_len: usize) -> usize {
    ITEM_OVERHEAD_BYTES + round16(key_len) + round16(data_len + 16)
}
