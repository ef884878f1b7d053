//! One shard: a hash table of slot indices, the slots (each the address of its item's
//! header, [`Entry`], in the item's first chunk, and the item's hash), and one intrusive LRU
//! list per size class through the headers (eviction frees a chunk of the class that needs
//! one, as memcached's per-class LRUs do).
//!
//! Invariants: every used slot is in the table exactly once and in its class's LRU list
//! exactly once; free slots are on the free list and nowhere else; `index_bytes` is the sum
//! of the used slots' [`index_bytes`]. A used slot's header is an item this shard owns
//! (placed by [`Entry::place`], taken out only by [`Shard::remove`]); a table element
//! ([`Indexed`]) names its slot and the same header's address, which never changes while
//! the item is in the table (an item is rewritten only after its key, and a page leaves its
//! class only after its items were removed). `last` names a used slot and its header, or
//! [`NIL`].
//!
//! Why the header's address in the element: a lookup then compares keys (which follow the
//! header) without loading the slot, and a hit's fields are on the key's line or the one
//! before it, so the chain of dependent cache misses per `get` is control bytes → element →
//! header and key, and the slot is not read at all: [`Shard::find`] leaves the found slot
//! and header in `last`, where [`Shard::entry`] finds them. At thousands of connections the
//! slots are cold and every line and page a request touches counts (`docs/notes/scale.md`).
//! While the compare waits for the key's line, the lookup asks for the header's and the
//! value's first lines ([`Shard::prefetch_item`]), so a hit's copy does not wait for them.
//!
//! The lists are memcached's segmented LRU reduced to one list per class: a fetch does not
//! move an item, it marks it [`ACTIVE`]; eviction takes the tail, but an active item found
//! there goes back to the head with its mark cleared (a second chance), at most
//! [`SECOND_CHANCES`] of them per eviction, as memcached's `lru_pull_tail` looks at a few
//! items per call. So an item read since it was last moved outlives one that was not.

use std::cell::Cell;
use std::ptr::NonNull;

use hashbrown::HashTable;
use weft::hint::prefetch_read as prefetch;

use super::classes::{item_bytes, ClassCounts, CLASSES};
use super::entry::{index_bytes, Entry, Taken, ACTIVE, HEADER_BYTES, NIL};
use super::slab::Slabs;

/// How many active items one eviction may send from the tail back to the head before it
/// takes the tail whatever its mark: bounds the work of one eviction (memcached's
/// `lru_pull_tail` searches 5 items).
pub const SECOND_CHANCES: usize = 5;

/// What the table holds for an item: its slot, and its header's address and key's length
/// (see the module docs), packed into 12 bytes (8 more than a bare slot index): the
/// header's address in the low 56 bits of `at` and the key's length in the top 8.
#[derive(Debug, Clone, Copy)]
struct Indexed {
    at: [u32; 2],
    idx: u32,
}

/// Lines after an item's header's first that [`Shard::prefetch_item`] asks for: with a
/// short key, a value of up to about 200 bytes.
const ITEM_PREFETCH_LINES: usize = 4;

/// Addresses the packing holds (user-space addresses on Linux stay below 2^47, or 2^56
/// with 5-level page tables).
const ADDR_BITS: u32 = 56;

impl Indexed {
    fn of(idx: u32, at: NonNull<Entry>, key_len: usize) -> Indexed {
        // The pages' provenance is exposed (`Slabs::new`), so `header` and `key` may turn
        // the address back into a pointer.
        let addr = at.as_ptr().addr() as u64;
        assert!(
            addr >> ADDR_BITS == 0,
            "weft: a slab address above 2^{ADDR_BITS}"
        );
        let packed = addr | (key_len as u64) << ADDR_BITS;
        Indexed {
            at: [packed as u32, (packed >> 32) as u32],
            idx,
        }
    }

    /// Where the item's header starts (its first chunk's start).
    fn header_addr(&self) -> usize {
        let packed = u64::from(self.at[0]) | u64::from(self.at[1]) << 32;
        (packed & ((1 << ADDR_BITS) - 1)) as usize
    }

    fn header(&self) -> NonNull<Entry> {
        let ptr = std::ptr::with_exposed_provenance_mut::<Entry>(self.header_addr());
        NonNull::new(ptr).expect("a header's address is not null")
    }

    fn key(&self) -> &[u8] {
        let addr = self.header_addr() + HEADER_BYTES;
        let len = (self.at[1] >> (ADDR_BITS - 32)) as usize;
        let ptr = std::ptr::with_exposed_provenance::<u8>(addr);
        // SAFETY: the element is in the table, so its item is, and its header is at the
        // address packed in `of`, with the `len` key bytes right after it; they live and do
        // not change until the item leaves the table (module invariants), and the shard's
        // lock keeps writers out while `&Shard` is held.
        unsafe { std::slice::from_raw_parts(ptr, len) }
    }
}

/// A key's table element found by [`Shard::first_candidate`], borrowed from the shard (so
/// from its lock's guard): the look-ahead's handle from its first pass to its second.
pub struct Candidate<'a>(&'a Indexed);

#[derive(Debug)]
enum Slot {
    /// An item: its header, and its hash (for the table to grow and for removal).
    Used {
        at: NonNull<Entry>,
        hash: u64,
    },
    Free {
        next_free: u32,
    },
}

/// A shard's items. All methods run under the shard's lock.
#[derive(Debug)]
pub struct Shard {
    table: HashTable<Indexed>,
    slots: Vec<Slot>,
    free_head: u32,
    /// Per class (index = class id): most recently used.
    heads: Box<[u32; CLASSES]>,
    /// Per class: least recently used, the next to evict.
    tails: Box<[u32; CLASSES]>,
    len: usize,
    /// What the items take outside their chunks ([`index_bytes`]).
    index_bytes: usize,
    /// Where the sweeper continues.
    sweep_cursor: usize,
    /// Per size class: items, their memcached sizes, evictions and reclaims.
    pub classes: Box<[ClassCounts; CLASSES]>,
    /// Whether items carry a CAS value (`-C` clears it): part of memcached's item size.
    use_cas: bool,
    /// The slot [`Shard::find`] found last and its header ([`NIL`]: none), so the request
    /// that looked it up reads its header without reading its slot.
    last: Cell<(u32, *mut Entry)>,
}

// SAFETY: the pointers are to headers of items this shard owns (module invariants); they
// are followed only through the shard, which its mutex hands to one thread at a time, and
// `last` (a `Cell`) is only used under that same exclusive access.
unsafe impl Send for Shard {}

impl Drop for Shard {
    fn drop(&mut self) {
        for slot in &self.slots {
            if let Slot::Used { at, .. } = slot {
                // SAFETY: a used slot's header is a placed item this shard owns and that
                // nothing else refers to now; dropping it frees its chain's list (its
                // chunks are the pages', which outlive the shard: `Store`'s field order).
                unsafe { std::ptr::drop_in_place(at.as_ptr()) };
            }
        }
    }
}

impl Default for Shard {
    fn default() -> Self {
        Shard {
            table: HashTable::new(),
            slots: Vec::new(),
            free_head: NIL,
            heads: Box::new([NIL; CLASSES]),
            tails: Box::new([NIL; CLASSES]),
            len: 0,
            index_bytes: 0,
            sweep_cursor: 0,
            classes: Box::new([ClassCounts::default(); CLASSES]),
            use_cas: true,
            last: Cell::new((NIL, std::ptr::null_mut())),
        }
    }
}

impl Shard {
    /// A shard whose table holds `items` without growing (`-o hashpower`); an allocation
    /// that fails leaves the table to grow on demand instead.
    pub fn with_capacity(items: usize, use_cas: bool) -> Shard {
        let mut s = Shard::default();
        s.use_cas = use_cas;
        if items > 0 {
            let _ = s.table.try_reserve(items, |_| 0);
        }
        s
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// The hash table's slots and their bytes (an [`Indexed`] and a control byte each).
    pub fn table_size(&self) -> (usize, usize) {
        let slots = self.table.capacity();
        (slots, slots * (std::mem::size_of::<Indexed>() + 1))
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[cfg(test)]
    pub fn index_bytes(&self) -> usize {
        self.index_bytes
    }

    /// The least recently used item of `class`.
    pub fn tail(&self, class: u8) -> Option<u32> {
        let t = self.tails[usize::from(class)];
        (t != NIL).then_some(t)
    }

    /// The item to evict from `class`: its tail, after up to [`SECOND_CHANCES`] active items
    /// found there were moved to the head with their [`ACTIVE`] bit cleared.
    pub fn victim(&mut self, class: u8) -> Option<u32> {
        for _ in 0..SECOND_CHANCES {
            let t = self.tail(class)?;
            let e = self.entry_mut(t);
            if e.bits & ACTIVE == 0 {
                return Some(t);
            }
            e.bits &= !ACTIVE;
            if self.heads[usize::from(class)] != t {
                self.detach(t);
                self.attach_head(t);
            }
        }
        self.tail(class)
    }

    /// [`Shard::victim`] of whichever class's tail was used longest ago.
    pub fn oldest_victim(&mut self) -> Option<u32> {
        let class = self
            .tails
            .iter()
            .filter(|&&t| t != NIL)
            .min_by_key(|&&t| self.entry(t).time)
            .map(|&t| self.entry(t).class)?;
        self.victim(class)
    }

    /// The slot holding `key`, whatever its liveness (left in `last` with its header).
    pub fn find(&self, hash: u64, key: &[u8]) -> Option<u32> {
        let ix = self.table.find(hash, |ix| {
            self.prefetch_item(ix);
            ix.key() == key
        })?;
        self.last.set((ix.idx, ix.header().as_ptr()));
        Some(ix.idx)
    }

    /// The look-ahead's first step for a key: the table element of the first candidate whose
    /// tag matches `hash` (usually the one item with that key, if any), asked for and not
    /// read. Only the control group is loaded, so the first pass over several keys waits for
    /// their control groups together and for no element; the candidate it returns lets the
    /// second pass go straight to the element, without probing the table again. (A second
    /// candidate with the same 7-bit tag in the group, rare, is not asked for: its get loses
    /// its head start, nothing else.)
    pub fn first_candidate(&self, hash: u64) -> Option<Candidate<'_>> {
        self.table
            .find(hash, |ix| {
                prefetch((ix as *const Indexed).cast());
                true
            })
            .map(Candidate)
    }

    /// The look-ahead's second step: asks for the lines a get of the candidate's item reads
    /// ([`Shard::item_lines`]), reading its element (asked for by the first step) and not
    /// the item, so nothing waits for them.
    pub fn prefetch_candidate(candidate: &Candidate<'_>) {
        Self::lookahead_lines(candidate, |line| prefetch(line as *const u8));
    }

    /// The addresses [`Shard::prefetch_candidate`] asks for, given to `ask` in order: the
    /// lines of the item's header, key and value's start ([`Shard::item_lines`]: the get's
    /// key compare reads the header's or the next line first; the look-ahead is what asks
    /// for them early, as [`Shard::find`]'s own compare does not).
    fn lookahead_lines(candidate: &Candidate<'_>, ask: impl FnMut(usize)) {
        Self::item_lines(candidate.0).into_iter().for_each(ask);
    }

    /// Asks for the lines a hit reads while the key compare waits for its own: the item's
    /// header and the [`ITEM_PREFETCH_LINES`] after its first (the key and the value follow
    /// the header in the chunk). At 16 connections the store's misses were most of a `get`'s
    /// user time (`docs/notes/scale.md`); a candidate whose key differs costs a few needless
    /// hints.
    fn prefetch_item(&self, ix: &Indexed) {
        for line in Self::item_lines(ix) {
            prefetch(line as *const u8);
        }
    }

    /// What a hit reads: its header's first line and the [`ITEM_PREFETCH_LINES`] after it
    /// (the rest of the header, the key, the value's start).
    fn item_lines(ix: &Indexed) -> [usize; 1 + ITEM_PREFETCH_LINES] {
        let header = ix.header_addr();
        std::array::from_fn(|line| header + 64 * line)
    }

    /// The header of used slot `idx`.
    fn header(&self, idx: u32) -> NonNull<Entry> {
        let (last, at) = self.last.get();
        if last == idx {
            // The module invariant: `last` names a used slot and its header.
            return NonNull::new(at).expect("a header's address is not null");
        }
        match &self.slots[idx as usize] {
            Slot::Used { at, .. } => *at,
            Slot::Free { .. } => unreachable!("slot {idx} is free"),
        }
    }

    pub fn entry(&self, idx: u32) -> &Entry {
        // SAFETY: `header` gives a used slot's header: an item this shard owns (module
        // invariants), valid until `remove` takes it, which needs `&mut self`; `&self`
        // (under the shard's lock) keeps writers out while the borrow lives.
        unsafe { self.header(idx).as_ref() }
    }

    pub fn entry_mut(&mut self, idx: u32) -> &mut Entry {
        // SAFETY: as in `entry`, and `&mut self` makes this the only access to the item.
        unsafe { self.header(idx).as_mut() }
    }

    fn detach(&mut self, idx: u32) {
        let (prev, next, class) = {
            let e = self.entry(idx);
            (e.prev, e.next, usize::from(e.class))
        };
        if prev != NIL {
            self.entry_mut(prev).next = next;
        } else {
            self.heads[class] = next;
        }
        if next != NIL {
            self.entry_mut(next).prev = prev;
        } else {
            self.tails[class] = prev;
        }
    }

    fn attach_head(&mut self, idx: u32) {
        let class = usize::from(self.entry(idx).class);
        let old = self.heads[class];
        {
            let e = self.entry_mut(idx);
            e.prev = NIL;
            e.next = old;
        }
        if old != NIL {
            self.entry_mut(old).prev = idx;
        } else {
            self.tails[class] = idx;
        }
        self.heads[class] = idx;
    }

    /// memcached's size for an item of this shard (for the per-class tallies).
    fn size_of(&self, e: &Entry) -> u64 {
        item_bytes(e.key().len(), e.flags, e.data_len(), self.use_cas) as u64
    }

    /// Adds the item placed at `at` ([`Entry::place`]; its key must not be present, and the
    /// shard owns it from now on) with its key's hash; returns its slot and its index bytes.
    pub fn insert(&mut self, at: NonNull<Entry>, hash: u64) -> (u32, usize) {
        // SAFETY: a placed header the caller hands over; nothing else refers to it.
        let entry = unsafe { at.as_ref() };
        let charge = index_bytes(entry.chunks());
        let size = self.size_of(entry);
        let key_len = entry.key().len();
        let c = &mut self.classes[usize::from(entry.class)];
        c.items += 1;
        c.bytes += size;
        let used = Slot::Used { at, hash };
        let idx = if self.free_head != NIL {
            let idx = self.free_head;
            let Slot::Free { next_free } = self.slots[idx as usize] else {
                unreachable!("free list points at a used slot")
            };
            self.free_head = next_free;
            self.slots[idx as usize] = used;
            idx
        } else {
            self.slots.push(used);
            (self.slots.len() - 1) as u32
        };
        let slots = &self.slots;
        self.table
            .insert_unique(hash, Indexed::of(idx, at, key_len), |ix| {
                match &slots[ix.idx as usize] {
                    Slot::Used { hash, .. } => *hash,
                    Slot::Free { .. } => 0,
                }
            });
        self.last.set((idx, at.as_ptr()));
        self.attach_head(idx);
        self.len += 1;
        self.index_bytes += charge;
        (idx, charge)
    }

    /// Removes an item; returns what is left of it (its chunks, to give back to `slabs`)
    /// and its index bytes.
    pub fn remove(&mut self, idx: u32, slabs: &Slabs) -> (Taken, usize) {
        self.detach(idx);
        let Slot::Used { at, hash } = self.slots[idx as usize] else {
            unreachable!("removed a free slot")
        };
        match self.table.find_entry(hash, |ix| ix.idx == idx) {
            Ok(o) => {
                o.remove();
            }
            Err(_) => unreachable!("used slot {idx} missing from the table"),
        }
        self.slots[idx as usize] = Slot::Free {
            next_free: self.free_head,
        };
        self.free_head = idx;
        if self.last.get().0 == idx {
            self.last.set((NIL, std::ptr::null_mut()));
        }
        // `at` was this used slot's header, placed by `Entry::place`; the item is out of the
        // table, the lists, its slot and `last`, and `&mut self` ends every reference to it.
        // SAFETY: so it is taken once, here; its first chunk starts at the header and is of
        // its class, and is given up to the caller (`chunk_at`'s contract).
        let taken = unsafe { Entry::take(at, |start, class| slabs.chunk_at(start, class)) };
        let charge = index_bytes(taken.chunks.len());
        let size = item_bytes(taken.key_len, taken.flags, taken.data_len, self.use_cas) as u64;
        self.len -= 1;
        self.index_bytes -= charge;
        let c = &mut self.classes[usize::from(taken.class)];
        c.items -= 1;
        c.bytes -= size;
        (taken, charge)
    }

    /// Calls `f` on the items of `class` from the most recently used on, until it returns
    /// false; returns false when `f` did.
    pub fn for_each_recent_first(&self, class: u8, f: &mut impl FnMut(&Entry) -> bool) -> bool {
        let mut at = self.heads[usize::from(class)];
        while at != NIL {
            let e = self.entry(at);
            if !f(e) {
                return false;
            }
            at = e.next;
        }
        true
    }

    /// Calls `f` on every item of `class` (with its slot), from the most recently used on.
    pub fn for_each_in_class(&self, class: u8, mut f: impl FnMut(u32, &Entry)) {
        let mut at = self.heads[usize::from(class)];
        while at != NIL {
            let e = self.entry(at);
            f(at, e);
            at = e.next;
        }
    }

    /// The last access time of each class's least recently used item (`None`: no item).
    pub fn tail_times(&self) -> impl Iterator<Item = (usize, u32)> + '_ {
        self.tails
            .iter()
            .enumerate()
            .filter(|&(_, &t)| t != NIL)
            .map(|(c, &t)| (c, self.entry(t).time))
    }

    /// Calls `f` on every used slot.
    pub fn for_each(&self, mut f: impl FnMut(u32, &Entry)) {
        for (i, slot) in self.slots.iter().enumerate() {
            if let Slot::Used { .. } = slot {
                f(i as u32, self.entry(i as u32));
            }
        }
    }

    /// Up to `budget` slots from the sweep cursor on, wrapping; calls `dead` on each used one
    /// and returns how many it looked at and those it says are dead.
    pub fn sweep_candidates(
        &mut self,
        budget: usize,
        dead: impl Fn(&Entry) -> bool,
    ) -> (usize, Vec<u32>) {
        let mut out = Vec::new();
        let mut checked = 0;
        let n = self.slots.len();
        if n == 0 {
            return (0, out);
        }
        for _ in 0..budget.min(n) {
            if self.sweep_cursor >= n {
                self.sweep_cursor = 0;
            }
            if let Slot::Used { .. } = &self.slots[self.sweep_cursor] {
                checked += 1;
                if dead(self.entry(self.sweep_cursor as u32)) {
                    out.push(self.sweep_cursor as u32);
                }
            }
            self.sweep_cursor += 1;
        }
        (checked, out)
    }
}

#[cfg(test)]
mod tests {
    use super::super::classes::SizeClasses;
    use super::super::slab::{Slabs, PAGE_BYTES};
    use super::*;

    /// Places an item `key` with value `v` in a chunk of class 1.
    fn entry(slabs: &Slabs, key: &[u8]) -> NonNull<Entry> {
        let chunk = slabs.pop(1).expect("a chunk of class 1");
        Entry::place(vec![chunk], key, &[b"v\r\n"], 1, 0, 0, 0, 0)
    }

    /// A page of class 1 and an empty shard (the shard is dropped first: its items' headers
    /// are in the page).
    fn one_page_and_a_shard() -> (Slabs, Shard) {
        let slabs = Slabs::new(SizeClasses::default(), PAGE_BYTES, false);
        assert!(slabs.add_page(1, || true));
        (slabs, Shard::default())
    }

    /// Removes an item and gives its chunks back.
    fn drop_item(s: &mut Shard, slabs: &Slabs, idx: u32) {
        s.remove(idx, slabs)
            .0
            .chunks
            .into_iter()
            .for_each(|c| slabs.free(c));
    }

    #[test]
    fn an_items_table_charge_covers_its_element_at_the_lowest_load() {
        // entry::index_bytes charges TABLE_BYTES_PER_ITEM for the item's table slot: an
        // element and its control byte, at the load just after the table doubles (7/16).
        let bytes = std::mem::size_of::<Indexed>() + 1;
        assert!(
            super::super::entry::TABLE_BYTES_PER_ITEM * 7 >= bytes * 16,
            "{bytes} bytes a slot need {} per item",
            (bytes * 16).div_ceil(7)
        );
    }

    #[test]
    fn a_slot_is_the_size_index_bytes_charges() {
        assert_eq!(std::mem::size_of::<Slot>(), super::super::entry::SLOT_BYTES);
    }

    /// A hit reads the header from the element's address: the slot is not read (here: a
    /// slot that disagrees is not seen), and removal resets what `find` remembered.
    #[test]
    fn a_found_item_is_read_without_its_slot() {
        let (slabs, mut s) = one_page_and_a_shard();
        let (a, _) = s.insert(entry(&slabs, b"a"), 1);
        let (b, _) = s.insert(entry(&slabs, b"b"), 2);
        assert_eq!(s.find(1, b"a"), Some(a));
        let Slot::Used { at: b_at, .. } = s.slots[b as usize] else {
            panic!("b is used")
        };
        let Slot::Used { at: a_at, hash } =
            std::mem::replace(&mut s.slots[a as usize], Slot::Used { at: b_at, hash: 2 })
        else {
            panic!("a is used")
        };
        assert_eq!(s.entry(a).key(), b"a", "the header came from the element");
        s.slots[a as usize] = Slot::Used { at: a_at, hash };
        drop_item(&mut s, &slabs, a);
        assert_eq!(s.last.get().0, NIL, "a removed item is forgotten");
        assert_eq!(s.entry(b).key(), b"b");
        drop_item(&mut s, &slabs, b);
    }

    #[test]
    fn lru_order_and_reuse() {
        let (slabs, mut s) = one_page_and_a_shard();
        let (a, _) = s.insert(entry(&slabs, b"a"), 1);
        let (b, _) = s.insert(entry(&slabs, b"b"), 2);
        let (c, _) = s.insert(entry(&slabs, b"c"), 1);
        assert_eq!(s.tail(1), Some(a));
        assert_eq!(s.tail(2), None);
        s.entry_mut(a).bits |= ACTIVE;
        assert_eq!(s.victim(1), Some(b), "an active tail gets a second chance");
        assert_eq!(s.tail(1), Some(b));
        assert_eq!(
            s.entry(a).bits & ACTIVE,
            0,
            "the second chance uses the mark up"
        );
        assert_eq!(s.find(1, b"c"), Some(c));
        assert_eq!(s.entry(b).key(), b"b");
        assert_eq!(s.entry(b).data(), Some(&b"v\r\n"[..]));
        let (e, _) = s.remove(b, &slabs);
        assert_eq!((e.key_len, e.data_len), (1, 3));
        e.chunks.into_iter().for_each(|c| slabs.free(c));
        assert_eq!(s.tail(1), Some(c));
        assert_eq!(s.find(2, b"b"), None);
        let (d, _) = s.insert(entry(&slabs, b"d"), 3);
        assert_eq!(d, b, "freed slot is reused");
        assert_eq!(s.len(), 3);
        for i in [a, c, d] {
            drop_item(&mut s, &slabs, i);
        }
        assert_eq!(s.index_bytes(), 0);
        assert!(s.is_empty());
        assert_eq!(s.tail(1), None);
        assert_eq!(slabs.usage(1).used_chunks, 0);
    }

    #[test]
    fn lookups_compare_whole_keys_through_growth_and_removal() {
        let (slabs, mut s) = one_page_and_a_shard();
        // Every hash collides, so only the key comparison (through the element's key
        // address and length) tells items apart; keys that are prefixes of each other
        // check the length. 500 items grow the table several times.
        let keys: Vec<Vec<u8>> = (0..500)
            .map(|i| ("k".repeat(1 + i % 7) + &i.to_string()).into_bytes())
            .collect();
        let idx: Vec<u32> = keys
            .iter()
            .map(|k| s.insert(entry(&slabs, k), 7).0)
            .collect();
        for (k, &i) in keys.iter().zip(&idx) {
            assert_eq!(s.find(7, k), Some(i), "{}", String::from_utf8_lossy(k));
            assert_eq!(
                s.find(7, &k[..k.len() - 1]),
                keys_find(&keys, &idx, &k[..k.len() - 1])
            );
        }
        for &i in idx.iter().step_by(2) {
            drop_item(&mut s, &slabs, i);
        }
        for (n, (k, &i)) in keys.iter().zip(&idx).enumerate() {
            let want = (n % 2 == 1).then_some(i);
            assert_eq!(s.find(7, k), want, "{}", String::from_utf8_lossy(k));
        }
    }

    /// The look-ahead asks for every line a get of a stored key waits for: the header's
    /// first line, then the key's and the value's after it, and not the slot's.
    #[test]
    fn the_look_ahead_asks_for_the_headers_line_first() {
        let (slabs, mut s) = one_page_and_a_shard();
        let (i, _) = s.insert(entry(&slabs, b"some key"), 9);
        let header_at = std::ptr::from_ref(s.entry(i)).addr();
        let key_at = s.entry(i).key().as_ptr().addr();
        assert_eq!(key_at, header_at + HEADER_BYTES);
        let slot_at = s.slots.as_ptr().wrapping_add(i as usize).addr();
        let mut asked = Vec::new();
        let candidate = s.first_candidate(9).expect("the key's element");
        Shard::lookahead_lines(&candidate, |a| asked.push(a));
        assert_eq!(asked.first(), Some(&header_at), "asked for {asked:x?}");
        assert!(
            asked.iter().any(|&a| a / 64 == key_at / 64),
            "asked for {asked:x?}"
        );
        assert!(
            asked.iter().any(|&a| a / 64 == (key_at + 64) / 64),
            "asked for {asked:x?}"
        );
        assert!(
            !asked.iter().any(|&a| a / 64 == slot_at / 64),
            "asked for {asked:x?}"
        );
        assert!(
            s.first_candidate(10 | 1 << 60).is_none(),
            "a hash with no element asks for nothing"
        );
        drop_item(&mut s, &slabs, i);
    }

    /// The slot of `key` among `keys`, if it is one of them.
    fn keys_find(keys: &[Vec<u8>], idx: &[u32], key: &[u8]) -> Option<u32> {
        keys.iter().position(|k| k == key).map(|p| idx[p])
    }
}
