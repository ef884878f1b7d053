//! One cached item: its fields, and its key and data in store-owned chunks ([`super::slab`]).

use super::slab::Chunk;

/// The item was read at least once (memcached `ITEM_FETCHED`).
pub const FETCHED: u8 = 1;
/// Marked stale by `md ... I` or a stale `ms` (memcached `ITEM_STALE`).
pub const STALE: u8 = 2;
/// A recache token (`W`) was handed out (memcached `ITEM_TOKEN_SENT`).
pub const TOKEN_SENT: u8 = 4;
/// The key was given base64-encoded and is binary (memcached `ITEM_KEY_BINARY`).
pub const KEY_BINARY: u8 = 8;
/// Read since it was linked or last moved in its LRU list (memcached `ITEM_ACTIVE`): an
/// eviction that finds it at the tail moves it to the head and clears this bit instead of
/// evicting it (`Shard::victim`). A fetch only sets a bit in the item's own slot; relinking
/// on every fetch wrote three other slots' links too.
pub const ACTIVE: u8 = 16;

/// Slot index that means "none" in the LRU links and the free list.
pub const NIL: u32 = u32::MAX;

/// A stored item. Its key and then its data (with the trailing `\r\n`, as memcached stores
/// it) fill its chunks in order: one chunk, or for an item larger than the largest chunk a
/// chain of them. A reply copies the data out under the shard lock, so a chunk is never
/// referenced once its item is unlinked and goes straight back to its class.
#[derive(Debug)]
pub struct Entry {
    /// The first chunk (it holds the whole key).
    pub(super) first: Chunk,
    /// The rest of a chained item (boxed: a thin pointer keeps every item's slot 8 bytes
    /// smaller than a boxed slice would, for the rare chained item's one more allocation).
    #[allow(clippy::box_collection)]
    pub(super) rest: Option<Box<Vec<Chunk>>>,
    pub(super) key_len: u8,
    /// Data length, with the `\r\n`.
    pub(super) data_len: u32,
    pub hash: u64,
    pub cas: u64,
    pub flags: u32,
    /// Expiry on the clock's scale; 0 = never.
    pub exptime: u32,
    /// Last access (or store) time on the clock's scale.
    pub time: u32,
    /// Bits: [`FETCHED`], [`STALE`], [`TOKEN_SENT`], [`KEY_BINARY`], [`ACTIVE`].
    pub bits: u8,
    /// memcached's slab class for its size ([`super::classes`]): its first chunk's class and
    /// its LRU list.
    pub class: u8,
    /// LRU neighbours in its class's list (towards the head = more recent, towards the tail).
    pub prev: u32,
    pub next: u32,
}

impl Entry {
    /// An item with `key` and then `data` (the concatenation of the parts, with its `\r\n`)
    /// written into `chunks` in order (enough of them: the caller sized the chain), in class
    /// `class`; the other fields zero and unlinked.
    pub(super) fn filled(chunks: Vec<Chunk>, key: &[u8], data: &[&[u8]], class: u8) -> Entry {
        let data_len: usize = data.iter().map(|d| d.len()).sum();
        let mut it = chunks.into_iter();
        let mut first = it.next().expect("an item has a chunk");
        let mut rest: Vec<Chunk> = it.collect();
        {
            let mut dst = std::iter::once(&mut first).chain(rest.iter_mut());
            let mut cur = dst.next().expect("first").bytes_mut();
            let mut at = 0;
            for src in std::iter::once(key).chain(data.iter().copied()) {
                let mut src = src;
                while !src.is_empty() {
                    if at == cur.len() {
                        cur = dst.next().expect("the chain holds the item").bytes_mut();
                        at = 0;
                    }
                    let n = src.len().min(cur.len() - at);
                    cur[at..at + n].copy_from_slice(&src[..n]);
                    at += n;
                    src = &src[n..];
                }
            }
        }
        Entry {
            first,
            rest: (!rest.is_empty()).then(|| Box::new(rest)),
            key_len: u8::try_from(key.len()).expect("keys are at most 250 bytes"),
            data_len: u32::try_from(data_len).expect("items are at most 1 GiB"),
            hash: 0,
            cas: 0,
            flags: 0,
            exptime: 0,
            time: 0,
            bits: 0,
            class,
            prev: NIL,
            next: NIL,
        }
    }

    /// How many chunks it takes.
    pub fn chunks(&self) -> usize {
        1 + self.rest.as_ref().map_or(0, |r| r.len())
    }

    pub fn key(&self) -> &[u8] {
        &self.first.bytes()[..usize::from(self.key_len)]
    }

    /// Data length, with the trailing `\r\n`.
    pub fn data_len(&self) -> usize {
        self.data_len as usize
    }

    /// Value length without the trailing `\r\n`.
    pub fn value_len(&self) -> usize {
        self.data_len() - 2
    }

    /// The data (with the `\r\n`) in pieces, in order.
    pub fn data_pieces(&self) -> impl Iterator<Item = &[u8]> {
        let mut left = self.data_len();
        let mut skip = usize::from(self.key_len);
        std::iter::once(&self.first)
            .chain(self.rest.iter().flat_map(|r| r.iter()))
            .map(move |c| {
                let b = &c.bytes()[skip..];
                skip = 0;
                let n = b.len().min(left);
                left -= n;
                &b[..n]
            })
            .filter(|b| !b.is_empty())
    }

    /// The data (with the `\r\n`) when it is in one chunk.
    pub fn data(&self) -> Option<&[u8]> {
        self.rest.is_none().then(|| {
            let k = usize::from(self.key_len);
            &self.first.bytes()[k..k + self.data_len()]
        })
    }

    /// The data as one buffer (copied when chained).
    pub fn data_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.data_len());
        for p in self.data_pieces() {
            v.extend_from_slice(p);
        }
        v
    }

    /// Overwrites the data with `data` of the same length (incr/decr in place).
    pub(super) fn overwrite_data(&mut self, data: &[u8]) {
        assert!(self.rest.is_none() && data.len() == self.data_len());
        let k = usize::from(self.key_len);
        self.first.bytes_mut()[k..k + data.len()].copy_from_slice(data);
    }

    /// Every chunk, for freeing.
    pub(super) fn into_chunks(self) -> impl Iterator<Item = Chunk> {
        std::iter::once(self.first).chain(self.rest.into_iter().flat_map(|r| r.into_iter()))
    }
}

/// Bytes glibc's allocator takes for a request of `n` bytes: the 8-byte size header, rounded
/// up to 16, at least 32 (other allocators' size classes are within a few per cent of it).
pub fn malloc_chunk_bytes(n: usize) -> usize {
    ((n + 8 + 15) & !15).max(32)
}

/// The hash-table cost of one item: its bucket (a 12-byte element, the slot index and the
/// key's address, and a control byte) at the table's lowest load after it doubles (7/16),
/// rounded up.
pub const TABLE_BYTES_PER_ITEM: usize = 32;

/// What one item takes outside its chunks, charged against `-m` beside the pages: its slot
/// (an [`Entry`] in the shard's slot vector), its hash-table bucket, and for a chained item
/// the chain's list.
pub fn index_bytes(chunks: usize) -> usize {
    std::mem::size_of::<Entry>()
        + TABLE_BYTES_PER_ITEM
        + if chunks > 1 {
            malloc_chunk_bytes(std::mem::size_of::<Vec<Chunk>>())
                + malloc_chunk_bytes((chunks - 1) * std::mem::size_of::<Chunk>())
        } else {
            0
        }
}
