//! One cached item: its header ([`Entry`]) at the start of its first chunk, then its key and
//! its data, in store-owned chunks ([`super::slab`]), as memcached's item header sits
//! before its key.
//!
//! Why the header is in the chunk: a get finds the item through the table element, which
//! gives the key's address; the fields a reply needs (flags, length, expiry, CAS) and the
//! bits a fetch sets then lie on the key's own line or the one before it, so a hit waits
//! for no other line (a header in a separate slot vector was one more cold line and page
//! a request at thousands of connections: `docs/notes/scale.md`).
//!
//! Invariants: an `Entry` exists only at the start of the first chunk of an item in a
//! shard (placed by `Entry::place`, moved out only by `Entry::take`); nothing outside
//! this module can make or move one (its fields that locate the key and data are private,
//! and the store hands out `&Entry` and, inside the store only, `&mut Entry`). So the
//! [`HEADER_BYTES`] after it hold its key and then its data, up to its first chunk's end
//! and then through its chain.

use std::ptr::NonNull;

use super::classes::ITEM_HEADER_BYTES;
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
/// evicting it (`Shard::victim`). A fetch only sets a bit in the item's own header;
/// relinking on every fetch wrote three other items' links too.
pub const ACTIVE: u8 = 16;

/// Slot index that means "none" in the LRU links and the free list.
pub const NIL: u32 = u32::MAX;

/// The bytes an item's header takes at its first chunk's start: no more than memcached's
/// item header and its key's NUL ([`super::classes::item_bytes`] counts them), so every
/// item fits the chunk memcached's size puts it in.
pub const HEADER_BYTES: usize = 48;

const _: () = assert!(std::mem::size_of::<Entry>() == HEADER_BYTES);
const _: () = assert!(
    std::mem::align_of::<Entry>() <= 8,
    "chunks are 8-byte aligned"
);
const _: () = assert!(HEADER_BYTES <= ITEM_HEADER_BYTES + 1);

/// The rest of an item larger than the largest chunk.
#[derive(Debug)]
pub(super) struct Chain {
    /// The first chunk's size (the header, the key and the data's start fill it).
    first_cap: u32,
    chunks: Vec<Chunk>,
}

/// A stored item's header: it sits at its first chunk's start, and its key and then its
/// data (with the trailing `\r\n`, as memcached stores it) follow it, filling that chunk
/// and, for an item larger than the largest chunk, a chain of more. A reply copies the data
/// out under the shard lock, so a chunk is never referenced once its item is unlinked and
/// goes straight back to its class.
#[derive(Debug)]
#[repr(C)]
pub struct Entry {
    /// The rest of a chained item (boxed: a thin pointer keeps the header within
    /// [`HEADER_BYTES`], for the rare chained item's one more allocation).
    #[allow(clippy::box_collection)]
    rest: Option<Box<Chain>>,
    pub cas: u64,
    /// Data length, with the `\r\n`.
    data_len: u32,
    pub flags: u32,
    /// Expiry on the clock's scale; 0 = never.
    pub exptime: u32,
    /// Last access (or store) time on the clock's scale.
    pub time: u32,
    /// LRU neighbours in its class's list (towards the head = more recent, towards the
    /// tail), as slot indices.
    pub prev: u32,
    pub next: u32,
    key_len: u8,
    /// Bits: [`FETCHED`], [`STALE`], [`TOKEN_SENT`], [`KEY_BINARY`], [`ACTIVE`].
    pub bits: u8,
    /// memcached's slab class for its size ([`super::classes`]): its first chunk's class and
    /// its LRU list.
    pub class: u8,
}

/// An item's fields once it left its chunk ([`Entry::take`]), with its chunks to free.
#[derive(Debug)]
pub(super) struct Taken {
    pub class: u8,
    pub time: u32,
    pub exptime: u32,
    pub bits: u8,
    /// Its memcached size's parts, for the class tallies.
    pub key_len: usize,
    pub flags: u32,
    pub data_len: usize,
    pub chunks: Vec<Chunk>,
}

impl Entry {
    /// Writes an item into `chunks` (enough of them: the caller sized the chain; the first
    /// of class `class`): the header with these fields, CAS 0 and no LRU links, then `key`,
    /// then `data` (the concatenation of the parts, with its `\r\n`). The first chunk's
    /// ownership passes to the item: give it back with [`Entry::take`].
    #[allow(clippy::too_many_arguments)] // the fields of the item, as memcached's item_alloc
    pub(super) fn place(
        chunks: Vec<Chunk>,
        key: &[u8],
        data: &[&[u8]],
        class: u8,
        flags: u32,
        exptime: u32,
        time: u32,
        bits: u8,
    ) -> NonNull<Entry> {
        let data_len: usize = data.iter().map(|d| d.len()).sum();
        let mut it = chunks.into_iter();
        let mut first = it.next().expect("an item has a chunk");
        assert_eq!(
            first.class(),
            class,
            "an item's first chunk is of its class"
        );
        let mut rest: Vec<Chunk> = it.collect();
        let in_first = HEADER_BYTES + key.len() + if rest.is_empty() { data_len } else { 0 };
        assert!(
            first.cap() >= in_first,
            "the first chunk holds the header and key"
        );
        {
            let mut dst = std::iter::once(&mut first).chain(rest.iter_mut());
            let mut cur = dst.next().expect("first").bytes_mut();
            let mut at = HEADER_BYTES;
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
        let header = Entry {
            rest: (!rest.is_empty()).then(|| {
                Box::new(Chain {
                    first_cap: first.cap() as u32,
                    chunks: rest,
                })
            }),
            cas: 0,
            data_len: u32::try_from(data_len).expect("items are at most 1 GiB"),
            flags,
            exptime,
            time,
            prev: NIL,
            next: NIL,
            key_len: u8::try_from(key.len()).expect("keys are at most 250 bytes"),
            bits,
            class,
        };
        // `first` is owned here (its bytes are no one else's), 8-byte aligned (pages are,
        // and chunk sizes are multiples of 8; `Entry`'s alignment is at most 8) and at least
        // `HEADER_BYTES` long (asserted); the key and data were written after the header's
        // place, not over it.
        let at = first.start().cast::<Entry>();
        // SAFETY: as just said, the header fits at `at` and nothing else uses those bytes.
        unsafe { at.as_ptr().write(header) };
        // The chunk's ownership is now the item's (`Chunk` has no `Drop`).
        let _ = first;
        at
    }

    /// Moves the item at `at` out of its chunk: its fields and its chunks (the first one
    /// rebuilt by `first_chunk` from its start and class), to free.
    ///
    /// # Safety
    /// `at` was returned by [`Entry::place`] and not taken since, and no reference to the
    /// item lives on: after this its chunks are the caller's.
    pub(super) unsafe fn take(
        at: NonNull<Entry>,
        first_chunk: impl FnOnce(NonNull<u8>, u8) -> Chunk,
    ) -> Taken {
        // SAFETY: the caller's contract: `at` holds a placed header nothing else uses; it
        // is read once, so its `rest` moves out exactly once.
        let e = unsafe { at.as_ptr().read() };
        let mut chunks = vec![first_chunk(at.cast(), e.class)];
        if let Some(chain) = e.rest {
            chunks.extend(chain.chunks);
        }
        Taken {
            class: e.class,
            time: e.time,
            exptime: e.exptime,
            bits: e.bits,
            key_len: usize::from(e.key_len),
            flags: e.flags,
            data_len: e.data_len as usize,
            chunks,
        }
    }

    /// Where the key starts: right after the header.
    fn body(&self) -> *mut u8 {
        // The header's own address, with the provenance of the pages (exposed by
        // `Slabs::new`): a reference to the header covers only its own bytes.
        std::ptr::with_exposed_provenance_mut::<u8>((self as *const Entry).addr() + HEADER_BYTES)
    }

    /// The bytes after the header in the first chunk that hold the key and data (all of
    /// them, for an item in one chunk).
    fn first_body(&self) -> &[u8] {
        let len = match &self.rest {
            Some(chain) => chain.first_cap as usize - HEADER_BYTES,
            None => usize::from(self.key_len) + self.data_len(),
        };
        // The module invariant: this header is at an item's first chunk's start, which holds
        // the key and data after it: all of them for an unchained item, up to the chunk's
        // end (`first_cap`) for a chained one.
        // SAFETY: so `len` bytes from `body` are the item's; the shard lock the caller's
        // `&self` came through keeps writers out while the borrow lives.
        unsafe { std::slice::from_raw_parts(self.body(), len) }
    }

    /// How many chunks it takes.
    pub fn chunks(&self) -> usize {
        1 + self.rest.as_ref().map_or(0, |r| r.chunks.len())
    }

    /// The chunks after the first (none unless chained).
    pub(super) fn rest_chunks(&self) -> &[Chunk] {
        self.rest.as_ref().map_or(&[], |r| &r.chunks)
    }

    pub fn key(&self) -> &[u8] {
        &self.first_body()[..usize::from(self.key_len)]
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
        let first = &self.first_body()[usize::from(self.key_len)..];
        std::iter::once(first)
            .chain(self.rest_chunks().iter().map(Chunk::bytes))
            .map(move |b| {
                let n = b.len().min(left);
                left -= n;
                &b[..n]
            })
            .filter(|b| !b.is_empty())
    }

    /// The data (with the `\r\n`) when it is in one chunk.
    pub fn data(&self) -> Option<&[u8]> {
        self.rest
            .is_none()
            .then(|| &self.first_body()[usize::from(self.key_len)..])
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
        // SAFETY: as in `first_body` (an unchained item's data follows its key in its
        // chunk), and `&mut self` under the shard lock makes this the only access.
        let body = unsafe { std::slice::from_raw_parts_mut(self.body(), k + data.len()) };
        body[k..].copy_from_slice(data);
    }
}

/// Bytes glibc's allocator takes for a request of `n` bytes: the 8-byte size header, rounded
/// up to 16, at least 32 (other allocators' size classes are within a few per cent of it).
pub fn malloc_chunk_bytes(n: usize) -> usize {
    ((n + 8 + 15) & !15).max(32)
}

/// The hash-table cost of one item: its bucket (a 12-byte element, the slot index and the
/// header's address, and a control byte) at the table's lowest load after it doubles
/// (7/16), rounded up.
pub const TABLE_BYTES_PER_ITEM: usize = 32;

/// The bytes of an item's slot in its shard's slot vector (the header's address and the
/// item's hash).
pub const SLOT_BYTES: usize = 16;

/// What one item takes outside its chunks, charged against `-m` beside the pages: its slot,
/// its hash-table bucket, and for a chained item the chain and its list.
pub fn index_bytes(chunks: usize) -> usize {
    SLOT_BYTES
        + TABLE_BYTES_PER_ITEM
        + if chunks > 1 {
            malloc_chunk_bytes(std::mem::size_of::<Chain>())
                + malloc_chunk_bytes((chunks - 1) * std::mem::size_of::<Chunk>())
        } else {
            0
        }
}
