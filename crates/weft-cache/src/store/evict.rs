//! Making room: chunks for a new item (a free one, a new page within `-m`, or an evicted
//! item's), eviction when the index bytes take the total over `-m`, and the rebalancer
//! that moves pages between classes. The lock rules are the store's ([`super`]): a
//! thread that holds its shard lock only *tries* the others.

use std::sync::atomic::Ordering;

use super::entry::{index_bytes, FETCHED, HEADER_BYTES};
use super::shard::Shard;
use super::slab::{Chunk, PAGE_BYTES};
use super::{classes, fatal, Locked, OutOfMemory, Store, SHARDS};
use crate::stats::bump;

/// How many items of a class a shard may hold below its share (the class's chunks in use
/// over [`SHARDS`]) before it evicts from a fuller shard instead of its own tail.
pub(super) const FAIR_SHARE_SLACK: usize = 2;

/// What is left of an item once it is unlinked and its chunks are free.
pub(super) struct Gone {
    pub class: u8,
    pub time: u32,
    pub exptime: u32,
    pub bits: u8,
}

impl Store {
    /// Unlinks an item from `shard`, gives its chunks back and uncharges its index bytes.
    pub(super) fn take(&self, shard: &mut Shard, idx: u32) -> Gone {
        let (e, index) = shard.remove(idx, &self.slabs);
        self.used_bytes.fetch_sub(index, Ordering::Relaxed);
        let gone = Gone {
            class: e.class,
            time: e.time,
            exptime: e.exptime,
            bits: e.bits,
        };
        for c in e.chunks {
            self.slabs.free(c);
        }
        gone
    }

    /// The classes of the chunks an item takes: one chunk of its class, or, above the
    /// largest chunk, largest chunks and one chunk for the rest (memcached's chained items;
    /// the header and key are in the first).
    pub(super) fn chunk_plan(&self, key_len: usize, flags: u32, data_len: usize) -> Vec<u8> {
        let classes = &self.config.classes;
        let size = classes::item_bytes(key_len, flags, data_len, self.config.use_cas);
        let largest = classes.len();
        let max = classes.chunk_size(largest);
        if size <= max {
            return vec![classes.class_of(size)];
        }
        let stored = HEADER_BYTES + key_len + data_len;
        let mut plan = vec![largest as u8; stored / max];
        if stored % max != 0 {
            plan.push(classes.class_of(stored % max));
        }
        plan
    }

    /// How many whole pages the chunks of `plan` fill at least (an item that needs more
    /// than `-m` holds can never be stored).
    pub(super) fn plan_pages(&self, plan: &[u8]) -> usize {
        let classes = &self.config.classes;
        let mut pages = 0;
        let mut i = 0;
        while i < plan.len() {
            let class = plan[i];
            let n = plan[i..].iter().take_while(|&&c| c == class).count();
            let per_page = (PAGE_BYTES / classes.chunk_size(usize::from(class))).max(1);
            pages += n.div_ceil(per_page);
            i += n;
        }
        pages
    }

    /// Whether an item of these sizes can be linked now without evicting anything: a chunk
    /// or a page within `-m` for each of its chunks, and room for its index bytes.
    pub(super) fn fits_now(&self, key_len: usize, flags: u32, data_len: usize) -> bool {
        let plan = self.chunk_plan(key_len, flags, data_len);
        let mut pages = 0;
        for &class in &plan {
            if !self.slabs.has_free(class) {
                pages += 1;
            }
        }
        let need = pages * PAGE_BYTES + index_bytes(plan.len());
        self.used_bytes() + need <= self.limit_bytes() && (pages == 0 || self.slabs.has_page_left())
    }

    /// Gives `class` a new page if that keeps the total within `-m` with `extra` bytes more
    /// (the index bytes of the item the page is for).
    fn try_add_page(&self, class: u8, extra: usize) -> bool {
        // Checked and counted under the page table's lock, so two stores cannot both take
        // the last page; index bytes may still grow meanwhile (they are evicted after).
        self.slabs.add_page(class, || {
            if self.used_bytes() + PAGE_BYTES + extra > self.limit_bytes() {
                return false;
            }
            self.used_bytes.fetch_add(PAGE_BYTES, Ordering::Relaxed);
            true
        })
    }

    /// Whether a shard holding `own` items of `class` is more than [`FAIR_SHARE_SLACK`]
    /// below its share of the class's chunks in use. Per-shard LRUs approximate the class's
    /// one LRU only while the shards hold even shares: otherwise a shard that held few items
    /// when memory ran out (keys landing unevenly early on) evicts items stored moments ago.
    fn below_fair_share(&self, class: u8, own: u64) -> bool {
        let used = self.slabs.usage(class).used_chunks as u64;
        (own + FAIR_SHARE_SLACK as u64) * (SHARDS as u64) < used
    }

    /// Evicts one item of `class` from a shard other than `except` that holds more than
    /// `above` items of the class and whose lock is free (never waiting: the caller holds
    /// `except`'s lock). False when none was found.
    fn evict_class_elsewhere(&self, class: u8, except: usize, above: u64) -> bool {
        let start = self.evict_cursor.fetch_add(1, Ordering::Relaxed);
        for k in 0..SHARDS {
            let i = (start + k) % SHARDS;
            if i == except {
                continue;
            }
            let Some(mut shard) = self.try_lock_shard(i) else {
                continue;
            };
            if shard.classes[usize::from(class)].items <= above {
                continue;
            }
            if let Some(tail) = shard.victim(class) {
                self.evict(&mut shard, tail, self.clock.now());
                return true;
            }
        }
        false
    }

    /// Frees memory, shard after shard, until the byte count is back under the limit or
    /// nothing is left to evict. Call with no shard locked.
    pub fn evict_elsewhere(&self) {
        self.evict_from_others(None);
    }

    /// [`Store::evict_elsewhere`] sparing shard `except` (the one an operation just linked
    /// into: it had nothing else to give, so its oldest item is the new one itself).
    pub(super) fn evict_from_others(&self, except: Option<usize>) {
        if !self.config.evictions {
            // `-M`: an item acknowledged with STORED stays until deleted, expired or flushed.
            return;
        }
        let start = self.evict_cursor.fetch_add(1, Ordering::Relaxed);
        for k in 0..SHARDS {
            if self.used_bytes() <= self.limit_bytes() {
                return;
            }
            let i = (start + k) % SHARDS;
            if Some(i) == except {
                continue;
            }
            let mut shard = self.lock_shard(i);
            while self.used_bytes() > self.limit_bytes() {
                let Some(tail) = shard.oldest_victim() else {
                    break;
                };
                self.evict(&mut shard, tail, self.clock.now());
            }
        }
    }

    pub(super) fn evict(&self, shard: &mut Shard, idx: u32, now: u32) {
        let e = self.take(shard, idx);
        bump(&self.stats.evictions);
        let c = &mut shard.classes[usize::from(e.class)];
        c.evicted += 1;
        c.evicted_time = now.saturating_sub(e.time);
        if e.exptime != 0 {
            c.evicted_nonzero += 1;
        }
        if e.bits & FETCHED == 0 {
            bump(&self.stats.evicted_unfetched);
            c.evicted_unfetched += 1;
        }
    }

    /// Notes that `class` needed a page and found none.
    fn note_starved(&self, class: u8) {
        let mut s = fatal::lock(&self.starved, "starved classes");
        if !s.contains(&class) {
            s.push(class);
        }
    }

    /// memcached's slab rebalancer, run by the rebalancer fiber and by a store that found
    /// no room (with no lock held): for each class that found no page since the last run,
    /// moves one page to the free page list from the class with the most pages. A wholly
    /// free page moves as it is; with evictions, otherwise, the items of one page of that
    /// class are evicted first (its free chunks are taken out of use meanwhile, so no store
    /// refills it); under `-M` only a wholly free page moves (nothing acknowledged is
    /// dropped). Returns how many pages moved.
    pub fn rebalance(&self) -> usize {
        let mut moved = 0;
        for class in self.slabs.draining_classes() {
            if self.slabs.finish_drain(class) {
                self.page_moved();
                moved += 1;
            }
        }
        let starved = std::mem::take(&mut *fatal::lock(&self.starved, "starved classes"));
        for class in starved {
            if self.slabs.has_free(class) {
                continue;
            }
            let Some(victim) = (1..=self.config.classes.len() as u8)
                .filter(|&v| v != class)
                .max_by_key(|&v| self.slabs.usage(v).pages)
                .filter(|&v| self.slabs.usage(v).pages > 0)
            else {
                continue;
            };
            if self.slabs.release_free_page(victim)
                || (self.config.evictions && self.drain_page_of(victim))
            {
                self.page_moved();
                moved += 1;
            }
        }
        moved
    }

    /// A page left a class: it no longer counts against `-m`.
    fn page_moved(&self) {
        self.used_bytes.fetch_sub(PAGE_BYTES, Ordering::Relaxed);
        bump(&self.stats.slabs_moved);
    }

    /// Empties one page of `class` (the page of the first least recently used item of the
    /// class found) by evicting every item with a chunk in it, shard after shard, one lock
    /// at a time. True when the page left the class.
    fn drain_page_of(&self, class: u8) -> bool {
        let Some(page) = (0..SHARDS).find_map(|i| {
            let shard = self.lock_shard(i);
            shard.tail(class).map(|t| {
                self.slabs
                    .page_at(std::ptr::from_ref(shard.entry(t)).addr())
            })
        }) else {
            return false;
        };
        if !self.slabs.start_drain(class, page) {
            return self.slabs.finish_drain(class);
        }
        // A chained item's last chunk can be of any class; its item is in the largest
        // class's lists.
        let largest = self.config.classes.len() as u8;
        for i in 0..SHARDS {
            let mut shard = self.lock_shard(i);
            let mut doomed = Vec::new();
            for list in [class, largest] {
                shard.for_each_in_class(list, |idx, e| {
                    let in_page = |c: &Chunk| self.slabs.page_of(c) == page;
                    let first = self.slabs.page_at(std::ptr::from_ref(e).addr());
                    if first == page || e.rest_chunks().iter().any(in_page) {
                        doomed.push(idx);
                    }
                });
                if class == largest {
                    break;
                }
            }
            let now = self.clock.now();
            for idx in doomed {
                self.evict(&mut shard, idx, now);
            }
        }
        self.slabs.finish_drain(class)
    }
}

impl Locked<'_> {
    /// The chunks of `plan` for an item that adds `index` bytes, or none: each from
    /// [`Locked::alloc_chunk`].
    pub(super) fn alloc_chunks(
        &mut self,
        plan: &[u8],
        keep: Option<u32>,
        index: usize,
    ) -> Result<Vec<Chunk>, OutOfMemory> {
        let mut chunks = Vec::with_capacity(plan.len());
        for &class in plan {
            match self.alloc_chunk(class, keep, index) {
                Ok(c) => chunks.push(c),
                Err(e) => {
                    for c in chunks {
                        self.store.slabs.free(c);
                    }
                    return Err(e);
                }
            }
        }
        Ok(chunks)
    }

    /// A chunk of `class`: a free one; else a new page within `-m`; else (with evictions)
    /// the chunk of the class's least recently used item in a fuller shard whose lock is
    /// free if this one is below its share of the class, or in this shard (never `keep`), or in
    /// another shard whose lock is free. Each eviction frees at least one chunk of the class
    /// (an item's first chunk is of its class), so this ends.
    fn alloc_chunk(
        &mut self,
        class: u8,
        keep: Option<u32>,
        index: usize,
    ) -> Result<Chunk, OutOfMemory> {
        let store = self.store;
        loop {
            if let Some(c) = store.slabs.pop(class) {
                return Ok(c);
            }
            if store.try_add_page(class, index) {
                continue;
            }
            if !store.config.evictions {
                store.note_starved(class);
                return Err(OutOfMemory);
            }
            let own = self.sh().classes[usize::from(class)].items;
            if store.below_fair_share(class, own)
                && store.evict_class_elsewhere(class, self.index, own + 1)
            {
                continue;
            }
            match self.sh_mut().victim(class) {
                Some(t) if Some(t) != keep => {
                    let now = self.now;
                    store.evict(self.sh_mut(), t, now);
                    continue;
                }
                _ => {}
            }
            if store.evict_class_elsewhere(class, self.index, 0) {
                continue;
            }
            if !store.slabs.has_free(class) {
                store.note_starved(class);
            }
            return Err(OutOfMemory);
        }
    }

    /// After linking `new`: while the total is over `-m` (its index bytes), evicts this
    /// shard's least recently used items (never `new`); what this shard cannot give is
    /// taken from the others after its lock is released (`shortfall`).
    pub(super) fn fit_index_bytes(&mut self, new: u32) {
        let store = self.store;
        if !store.config.evictions {
            return;
        }
        while store.used_bytes() > store.limit_bytes() {
            match self.sh_mut().oldest_victim() {
                Some(t) if t != new => {
                    let now = self.now;
                    store.evict(self.sh_mut(), t, now);
                }
                _ => {
                    self.shortfall = store.used_bytes().saturating_sub(store.limit_bytes());
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::classes::SizeClasses;
    use super::super::entry::ACTIVE;
    use super::super::shard::SECOND_CHANCES;
    use super::super::StoreConfig;
    use super::*;

    fn store(limit_mb: usize, evictions: bool) -> Store {
        Store::new(StoreConfig {
            memory_limit_bytes: limit_mb << 20,
            evictions,
            item_size_max: 1 << 20,
            use_cas: true,
            initial_items: 0,
            classes: SizeClasses::default(),
            large_pages: false,
        })
    }

    fn set(s: &Store, key: &[u8], value: &[u8]) -> Result<u32, OutOfMemory> {
        let hash = s.hash(key);
        let mut lk = s.lock(hash, 0);
        let old = lk.get(hash, key);
        lk.link(hash, key, &[value, b"\r\n"], 0, 0, 0, old)
    }

    fn get(s: &Store, key: &[u8]) -> Option<Vec<u8>> {
        let hash = s.hash(key);
        let mut lk = s.lock(hash, 0);
        let idx = lk.get(hash, key)?;
        let v = lk.entry(idx).data_vec();
        Some(v[..v.len() - 2].to_vec())
    }

    /// `n` keys that fall into one shard.
    fn keys_of_one_shard(s: &Store, n: usize) -> Vec<String> {
        keys_of_shard(s, Store::shard_of(s.hash(b"k0")), "k", n)
    }

    /// `n` keys of shard `shard`, each `prefix` and a number.
    fn keys_of_shard(s: &Store, shard: usize, prefix: &str, n: usize) -> Vec<String> {
        (0..)
            .map(|i| format!("{prefix}{i}"))
            .filter(|k| Store::shard_of(s.hash(k.as_bytes())) == shard)
            .take(n)
            .collect()
    }

    /// What a `get` does to the item: [`Locked::bump`].
    fn fetch(s: &Store, key: &str) -> u32 {
        let hash = s.hash(key.as_bytes());
        let mut lk = s.lock(hash, 0);
        let idx = lk.get(hash, key.as_bytes()).expect("stored");
        lk.bump(idx);
        idx
    }

    #[test]
    fn a_fetch_marks_the_item_and_leaves_it_in_place() {
        let s = store(64, true);
        let keys = keys_of_one_shard(&s, 3);
        for k in &keys {
            set(&s, k.as_bytes(), b"v").unwrap();
        }
        let oldest = fetch(&s, &keys[0]);
        let mut lk = s.lock(s.hash(keys[0].as_bytes()), 0);
        let class = lk.entry(oldest).class;
        assert_ne!(lk.entry(oldest).bits & ACTIVE, 0);
        assert_eq!(lk.sh().tail(class), Some(oldest), "not relinked on a fetch");
        // Its mark buys it one trip to the head when an eviction meets it at the tail.
        let second = lk.get(s.hash(keys[1].as_bytes()), keys[1].as_bytes());
        assert_eq!(lk.sh_mut().victim(class), second);
        assert_eq!(lk.entry(oldest).bits & ACTIVE, 0);
        assert_eq!(lk.sh().tail(class), second);
    }

    #[test]
    fn an_eviction_gives_at_most_a_few_second_chances() {
        let s = store(64, true);
        let keys = keys_of_one_shard(&s, SECOND_CHANCES + 2);
        for k in &keys {
            set(&s, k.as_bytes(), b"v").unwrap();
        }
        let marked: Vec<u32> = keys.iter().map(|k| fetch(&s, k)).collect();
        let mut lk = s.lock(s.hash(keys[0].as_bytes()), 0);
        let class = lk.entry(marked[0]).class;
        // The first SECOND_CHANCES active tails move; the next tail is taken, mark or not.
        assert_eq!(lk.sh_mut().victim(class), Some(marked[SECOND_CHANCES]));
        assert_ne!(lk.entry(marked[SECOND_CHANCES]).bits & ACTIVE, 0);
    }

    #[test]
    fn a_shard_below_its_share_of_a_class_evicts_from_a_fuller_one() {
        // 1 KB values into 2 MB: one page of the class, some 880 chunks. Filled from one
        // shard only, that shard holds them all; sets into another shard then take from it
        // until the newcomer holds about its share (a 64th), instead of each evicting the
        // newcomer's own previous item as soon as it has one.
        let s = store(2, true);
        let crowded = keys_of_shard(&s, 0, "a", 2000);
        for k in &crowded {
            set(&s, k.as_bytes(), &[b'a'; 1000]).unwrap();
        }
        let class = {
            let hash = s.hash(crowded[1999].as_bytes());
            let mut lk = s.lock(hash, 0);
            let idx = lk
                .get(hash, crowded[1999].as_bytes())
                .expect("the last set is kept");
            lk.entry(idx).class
        };
        let capacity = s.slabs.usage(class).used_chunks;
        let share = capacity / SHARDS;
        let newcomers = keys_of_shard(&s, 1, "b", 40);
        for k in &newcomers {
            set(&s, k.as_bytes(), &[b'b'; 1000]).unwrap();
        }
        let kept = newcomers
            .iter()
            .filter(|k| get(&s, k.as_bytes()).is_some())
            .count();
        assert!(
            kept + FAIR_SHARE_SLACK >= share,
            "shard 1 kept {kept} of its 40 latest, its share is {share} of {capacity}"
        );
        assert!(kept < 40, "it does not take more than its share");
    }

    #[test]
    fn an_item_above_the_largest_chunk_is_chained_and_read_back_whole() {
        let s = store(8, true);
        let value: Vec<u8> = (0..900_000u32).map(|i| (i % 251) as u8).collect();
        set(&s, b"big", &value).unwrap();
        assert_eq!(get(&s, b"big").as_deref(), Some(&value[..]));
        let largest = s.config.classes.len() as u8;
        assert_eq!(s.slabs.usage(largest).used_chunks, 1);
        let hash = s.hash(b"big");
        let mut lk = s.lock(hash, 0);
        let idx = lk.get(hash, b"big").unwrap();
        assert_eq!(lk.entry(idx).chunks(), 2);
        lk.unlink(idx);
        drop(lk);
        let used: usize = (1..=largest).map(|c| s.slabs.usage(c).used_chunks).sum();
        assert_eq!(used, 0, "every chunk went back");
    }

    #[test]
    fn pages_and_index_bytes_stay_within_the_limit_and_a_starved_class_gets_a_page() {
        let s = store(4, true);
        // 100,000-byte values fill every page there is...
        for i in 0..200u32 {
            set(&s, format!("a{i}").as_bytes(), &[b'a'; 100_000]).unwrap();
            assert!(s.used_bytes() <= 4 << 20, "{} after a{i}", s.used_bytes());
        }
        // ...so a small value's class finds none until the rebalancer moves one.
        assert_eq!(set(&s, b"small", b"v"), Err(OutOfMemory));
        assert_eq!(s.rebalance(), 1);
        set(&s, b"small", b"v").unwrap();
        assert_eq!(get(&s, b"small").as_deref(), Some(&b"v"[..]));
        assert!(s.used_bytes() <= 4 << 20);
    }

    #[test]
    fn without_evictions_the_rebalancer_moves_only_a_wholly_free_page() {
        let s = store(4, false);
        let mut stored = 0;
        while set(&s, format!("a{stored}").as_bytes(), &[b'a'; 100_000]).is_ok() {
            stored += 1;
        }
        assert_eq!(set(&s, b"small", b"v"), Err(OutOfMemory));
        assert_eq!(s.rebalance(), 0, "every page holds acknowledged items");
        for i in 0..stored {
            assert!(get(&s, format!("a{i}").as_bytes()).is_some(), "a{i} lost");
        }
        // Deleting every item frees their pages (whole) for the small class: at once when
        // the freed index bytes left room for a new page, else through the rebalancer.
        for i in 0..stored {
            let key = format!("a{i}");
            let hash = s.hash(key.as_bytes());
            let mut lk = s.lock(hash, 0);
            let idx = lk.get(hash, key.as_bytes()).unwrap();
            lk.unlink(idx);
        }
        if set(&s, b"small", b"v").is_err() {
            assert_eq!(s.rebalance(), 1);
        }
        set(&s, b"small", b"v").unwrap();
    }
}
