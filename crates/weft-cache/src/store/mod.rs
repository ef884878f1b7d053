//! The item store: 64 shards by key hash, each a `Shard` behind its own short lock, items'
//! keys and data in store-owned size-class pages ([`slab`]), the memory they take held under
//! `-m` by per-class LRU eviction (or refusal with `-M`), memcached's expiry and `flush_all`
//! rules checked lazily on access and by [`Store::sweep`], and CAS values from one global
//! counter.
//!
//! # What `-m` bounds
//!
//! `-m` bounds [`Store::used_bytes`]: the pages given to size classes (1 MiB each, as
//! memcached's slabs) plus what the items take outside their chunks (their slots in the
//! shards' slot vectors, their hash-table buckets, a chained item's chain list:
//! [`entry::index_bytes`]). A class gets a new page only while that sum stays within `-m`;
//! once pages are spent, a store evicts its class's least recently used item (its own
//! shard's first, unless that shard holds fewer than its share of the class's items, then
//! other shards') to free a chunk, and a store whose index bytes take
//! the sum over `-m` evicts the least recently used items of any class until it fits. ("Least
//! recently used" as memcached's segmented LRU approximates it: a fetch marks an item
//! instead of moving it, and eviction gives a marked tail item one trip back to the head;
//! see the `shard` module.) Under `-M` nothing evicts: a store that finds no chunk and no
//! page within `-m` is refused. No process-wide allocator setting, no sampling: the items'
//! memory is the pages, which the allocator never sees, so it holds the same under any
//! allocator and any `-t`.
//!
//! Not counted: the slot vectors' and hash tables' spare capacity (they grow by doubling and
//! never shrink: at most one slot and one bucket per item of the highest item count the
//! shard held), connection buffers and pending output (bounded per connection by
//! [`crate::output::FLUSH_BYTES`] plus one value: replies copy values out under the shard
//! lock, so a chunk is free as soon as its item is unlinked), and fiber stacks.
//!
//! A page stays with its class until the sweeper's [`Store::rebalance`] moves one from the
//! class with the most pages to a class that found none (memcached's slab rebalancer): with
//! evictions it evicts the items of one page of that class; under `-M` it only takes a page
//! whose chunks are all free.
//!
//! `stats` `bytes` is memcached's: the sum of the items' memcached sizes (`ITEM_ntotal`,
//! [`classes::item_bytes`]); `stats slabs` reports the real classes, pages and chunks, and
//! `total_malloced` the pages' bytes.
//!
//! Lock order: a thread holds at most one shard lock while it waits for one (the look-ahead's
//! [`Store::prefetch_gets`] holds several, all taken by *trying*). Eviction that
//! must take memory from other shards either runs after the caller's shard lock is released
//! ([`Store::evict_elsewhere`], locking the other shards one at a time) or, to free a chunk
//! for an item being linked, only *tries* other shards' locks ([`fatal::try_lock`]), never
//! waiting for them, so no two threads wait on each other. The slab class locks and the page
//! table lock are leaves (taken alone or under one shard lock, never while waiting for
//! another lock). The counters (`used_bytes`, CAS, flush settings, stats) are atomics and are
//! never a reason to wait.

pub mod classes;
pub mod clock;
pub mod entry;
mod evict;
mod shard;
pub mod slab;

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

pub use clock::Clock;
pub use entry::{Entry, ACTIVE, FETCHED, KEY_BINARY, NIL, STALE, TOKEN_SENT};
use shard::{Candidate, Shard};

use crate::fatal;
use crate::stats::{bump, Stats};

/// Number of shards (a power of two).
pub const SHARDS: usize = 64;

/// Store settings fixed at start (except the memory limit, which `cache_memlimit` changes).
#[derive(Clone, Debug)]
pub struct StoreConfig {
    /// `-m` in bytes.
    pub memory_limit_bytes: usize,
    /// `-M` turns this off: refuse stores instead of evicting.
    pub evictions: bool,
    /// `-I`.
    pub item_size_max: usize,
    /// `-C` clears this: items get CAS value 0.
    pub use_cas: bool,
    /// `-o hashpower`: the hash tables start with room for this many items (0 = grow).
    pub initial_items: usize,
    /// memcached's slab classes (`-f`, `-n`, `-o slab_chunk_max`): the chunk sizes of the pages.
    pub classes: classes::SizeClasses,
    /// `-L`: the item pages in transparent huge pages ([`slab::Slabs::new`]).
    pub large_pages: bool,
}

/// Why an item could not be linked.
#[derive(Debug, PartialEq, Eq)]
pub struct OutOfMemory;

/// A shard with padding so neighbouring locks do not share a cache line.
#[repr(align(128))]
struct PaddedShard(Mutex<Shard>);

/// The cache.
pub struct Store {
    /// Declared before `slabs`: the items (and their chunks) go before the pages.
    shards: Box<[PaddedShard]>,
    /// The pages the items' keys and data live in.
    slabs: slab::Slabs,
    hasher: hashbrown::DefaultHashBuilder,
    pub clock: Clock,
    pub stats: Stats,
    config: StoreConfig,
    limit_bytes: AtomicUsize,
    /// Pages given to classes (bytes) plus the linked items' [`entry::index_bytes`].
    used_bytes: AtomicUsize,
    last_cas: AtomicU64,
    /// memcached `settings.oldest_live` (0 = no flush pending).
    oldest_live: AtomicU32,
    /// memcached `settings.oldest_cas`.
    oldest_cas: AtomicU64,
    /// Round-robin start for evicting from other shards.
    evict_cursor: AtomicUsize,
    /// Round-robin start for the sweeper.
    sweep_cursor: AtomicUsize,
    /// No item linked (or given a new expiry) since the last full reclaim expires before
    /// this time (`u32::MAX`: none has an expiry). Lets a store under `-M` that would be
    /// refused know whether a full reclaim can free anything.
    earliest_expiry: AtomicU32,
    /// The `oldest_live` the last full reclaim ran for (a flush makes items dead at once).
    reclaimed_flush: AtomicU32,
    /// A full reclaim is running (others refuse rather than scan the same shards again).
    reclaiming: std::sync::atomic::AtomicBool,
    /// Classes that needed a page and found none (for [`Store::rebalance`]), under its lock.
    starved: Mutex<Vec<u8>>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("config", &self.config)
            .field("used_bytes", &self.used_bytes)
            .finish_non_exhaustive()
    }
}

/// A locked shard, with the store for global accounting and the request's clock reading.
pub struct Locked<'s> {
    /// Always `Some` until drop (taken there so the lock is released before evicting elsewhere).
    shard: Option<MutexGuard<'s, Shard>>,
    store: &'s Store,
    /// Index of the locked shard.
    index: usize,
    pub now: u32,
    /// Bytes this operation still needs freed elsewhere (its shard ran out of items).
    shortfall: usize,
}

impl Store {
    pub fn new(config: StoreConfig) -> Store {
        Store {
            shards: (0..SHARDS)
                .map(|_| {
                    PaddedShard(Mutex::new(Shard::with_capacity(
                        config.initial_items / SHARDS,
                        config.use_cas,
                    )))
                })
                .collect(),
            slabs: slab::Slabs::new(
                config.classes.clone(),
                config.memory_limit_bytes,
                config.large_pages,
            ),
            hasher: hashbrown::DefaultHashBuilder::default(),
            clock: Clock::new(),
            stats: Stats::default(),
            limit_bytes: AtomicUsize::new(config.memory_limit_bytes),
            config,
            used_bytes: AtomicUsize::new(0),
            last_cas: AtomicU64::new(0),
            oldest_live: AtomicU32::new(0),
            oldest_cas: AtomicU64::new(0),
            evict_cursor: AtomicUsize::new(0),
            sweep_cursor: AtomicUsize::new(0),
            earliest_expiry: AtomicU32::new(u32::MAX),
            reclaimed_flush: AtomicU32::new(0),
            reclaiming: std::sync::atomic::AtomicBool::new(false),
            starved: Mutex::new(Vec::new()),
        }
    }

    /// The pages and their classes.
    pub fn slabs(&self) -> &slab::Slabs {
        &self.slabs
    }

    pub fn config(&self) -> &StoreConfig {
        &self.config
    }

    pub fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    fn shard_of(hash: u64) -> usize {
        // Bits the hash table does not use for buckets or control bytes.
        ((hash >> 32) as usize) & (SHARDS - 1)
    }

    fn lock_shard(&self, i: usize) -> MutexGuard<'_, Shard> {
        fatal::lock(&self.shards[i].0, "store shard")
    }

    fn try_lock_shard(&self, i: usize) -> Option<MutexGuard<'_, Shard>> {
        fatal::try_lock(&self.shards[i].0, "store shard")
    }

    /// Looks `keys` up without answering, asking for the lines gets of them will read (each
    /// item's header, key and value: `Shard::first_candidate`, then
    /// `Shard::prefetch_candidate`); for [`crate::lookahead`]. Changes
    /// nothing.
    ///
    /// Every shard the keys fall in is locked first, then every key is looked up, then the
    /// locks are released: a lock's atomic exchange waits for the loads before it, so taking
    /// each key's shard in turn made the keys' table misses (control group, then element)
    /// strictly one after another; looked up back to back they overlap. Only *tries* the
    /// locks (the module's lock order: never wait while holding one): a key whose shard is
    /// busy is skipped, which costs that get its head start and nothing else. At most
    /// [`crate::lookahead::MAX_KEYS`] keys are looked up.
    pub fn prefetch_gets(&self, keys: &[&[u8]]) {
        const MAX: usize = crate::lookahead::MAX_KEYS;
        const _: () = assert!(SHARDS <= 64, "`locked` has a bit a shard");
        let n = keys.len().min(MAX);
        let mut hashes = [0u64; MAX];
        // The shards locked (bit `i`: shard `i`), and where in `held` each one's guard is.
        let mut locked = 0u64;
        let mut guard_at = [0u8; SHARDS];
        let mut held: [Option<MutexGuard<'_, Shard>>; MAX] = [const { None }; MAX];
        let mut n_held = 0;
        for (k, key) in keys[..n].iter().enumerate() {
            let hash = self.hash(key);
            hashes[k] = hash;
            let shard = Self::shard_of(hash);
            if locked & (1 << shard) == 0 {
                if let Some(guard) = self.try_lock_shard(shard) {
                    held[n_held] = Some(guard);
                    guard_at[shard] = n_held as u8;
                    n_held += 1;
                    locked |= 1 << shard;
                }
            }
        }
        // Two passes: every key's element (its control group loaded, the element asked for),
        // then, the elements on their way, each element's item.
        let mut found: [Option<Candidate<'_>>; MAX] = [const { None }; MAX];
        for k in 0..n {
            let shard = Self::shard_of(hashes[k]);
            if locked & (1 << shard) != 0 {
                if let Some(guard) = &held[usize::from(guard_at[shard])] {
                    found[k] = guard.first_candidate(hashes[k]);
                }
            }
        }
        for candidate in found[..n].iter().flatten() {
            Shard::prefetch_candidate(candidate);
        }
    }

    /// Locks the shard of `hash`.
    pub fn lock(&self, hash: u64, now: u32) -> Locked<'_> {
        let index = Self::shard_of(hash);
        Locked {
            shard: Some(self.lock_shard(index)),
            store: self,
            index,
            now,
            shortfall: 0,
        }
    }

    /// memcached's `get_cas_id`.
    pub fn next_cas(&self) -> u64 {
        self.last_cas.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// The CAS value a new or changed item gets: the next one, or 0 under `-C`.
    pub fn item_cas(&self) -> u64 {
        if self.config.use_cas {
            self.next_cas()
        } else {
            0
        }
    }

    pub fn used_bytes(&self) -> usize {
        self.used_bytes.load(Ordering::Relaxed)
    }

    pub fn limit_bytes(&self) -> usize {
        self.limit_bytes.load(Ordering::Relaxed)
    }

    /// `cache_memlimit`.
    pub fn set_limit_bytes(&self, bytes: usize) {
        self.limit_bytes.store(bytes, Ordering::Relaxed);
    }

    /// memcached's `bytes`: the sum of the items' memcached sizes ([`classes::item_bytes`]),
    /// one shard lock at a time.
    pub fn item_bytes(&self) -> u64 {
        (0..SHARDS)
            .map(|i| {
                let shard = self.lock_shard(i);
                shard.classes.iter().map(|c| c.bytes).sum::<u64>()
            })
            .sum()
    }

    /// Calls `f` on the items of `class`, each shard's most recently used first, shard after
    /// shard (one lock at a time), until it returns false.
    pub fn for_each_recent_first(&self, class: u8, mut f: impl FnMut(&Entry) -> bool) {
        for i in 0..SHARDS {
            let shard = self.lock_shard(i);
            if !shard.for_each_recent_first(class, &mut f) {
                return;
            }
        }
    }

    /// The hash tables' slots (buckets) and bytes, all shards together.
    pub fn table_size(&self) -> (usize, usize) {
        (0..SHARDS)
            .map(|i| self.lock_shard(i).table_size())
            .fold((0, 0), |(a, b), (c, d)| (a + c, b + d))
    }

    /// Items currently stored (including expired ones not yet reclaimed, like memcached).
    pub fn item_count(&self) -> usize {
        (0..SHARDS).map(|i| self.lock_shard(i).len()).sum()
    }

    /// memcached's `process_flush_all_command` after parsing.
    pub fn flush_all(&self, delay: i32, now: u32) {
        let new_oldest = if delay > 0 {
            self.clock.realtime(i64::from(delay), now)
        } else {
            now
        };
        if !self.config.use_cas {
            // memcached under -C: no CAS cut-off, items up to and including that second.
            self.oldest_live.store(new_oldest, Ordering::Relaxed);
            return;
        }
        let oldest_live = new_oldest.wrapping_sub(1);
        self.oldest_live.store(oldest_live, Ordering::Relaxed);
        if oldest_live <= now {
            self.oldest_cas.store(self.next_cas(), Ordering::Relaxed);
        }
    }

    /// `oldest_live` for `stats settings`.
    pub fn oldest_live(&self) -> u32 {
        self.oldest_live.load(Ordering::Relaxed)
    }

    /// memcached's `item_is_flushed`.
    fn is_flushed(&self, e: &Entry, now: u32) -> bool {
        let oldest_live = self.oldest_live.load(Ordering::Relaxed);
        if oldest_live == 0 || oldest_live > now {
            return false;
        }
        let oldest_cas = self.oldest_cas.load(Ordering::Relaxed);
        e.time <= oldest_live || (oldest_cas != 0 && e.cas != 0 && e.cas < oldest_cas)
    }

    fn is_dead(&self, e: &Entry, now: u32) -> bool {
        self.is_flushed(e, now) || (e.exptime != 0 && e.exptime <= now)
    }

    /// The per-class tallies of all shards (one shard lock at a time), and for each class
    /// the age of its least recently used item.
    pub fn class_counts(
        &self,
        now: u32,
    ) -> (
        [classes::ClassCounts; classes::CLASSES],
        [u32; classes::CLASSES],
    ) {
        let mut total = [classes::ClassCounts::default(); classes::CLASSES];
        let mut age = [0u32; classes::CLASSES];
        for i in 0..SHARDS {
            let shard = self.lock_shard(i);
            for (t, c) in total.iter_mut().zip(shard.classes.iter()) {
                t.add(c);
            }
            for (class, time) in shard.tail_times() {
                age[class] = age[class].max(now.saturating_sub(time));
            }
        }
        (total, age)
    }

    /// Notes that an item now expires at `exptime` (0 = never), for [`Store::make_room`].
    #[inline]
    fn note_expiry(&self, exptime: u32) {
        // A plain load first: expiries mostly grow, so the shared line is rarely written.
        if exptime != 0 && exptime < self.earliest_expiry.load(Ordering::Relaxed) {
            self.earliest_expiry.fetch_min(exptime, Ordering::Relaxed);
        }
    }

    /// Whether some item may be expired or flushed at `now` (false means a full reclaim
    /// would find nothing).
    fn may_hold_dead(&self, now: u32) -> bool {
        let oldest_live = self.oldest_live.load(Ordering::Relaxed);
        let flush_pending = oldest_live != 0
            && oldest_live <= now
            && self.reclaimed_flush.load(Ordering::Relaxed) != oldest_live;
        flush_pending || self.earliest_expiry.load(Ordering::Relaxed) <= now
    }

    /// With evictions off (`-M`), a store that would be refused first reclaims every expired
    /// and flushed item (memcached's LRU crawler and tail pulls do the same before it
    /// answers out of memory). Call with no shard locked, before the store's lock is taken.
    /// Does nothing with evictions on (eviction makes room there) or when the item fits.
    pub fn make_room(&self, key_len: usize, flags: u32, data_len: usize, now: u32) {
        if self.config.evictions {
            return;
        }
        if self.fits_now(key_len, flags, data_len) || !self.may_hold_dead(now) {
            return;
        }
        self.reclaim_all(now);
    }

    /// Unlinks every expired or flushed item, shard after shard (one lock at a time), and
    /// recomputes the earliest expiry of what is left. Returns how many it freed; 0 without
    /// scanning when another reclaim is running.
    pub fn reclaim_all(&self, now: u32) -> usize {
        if self.reclaiming.swap(true, Ordering::Acquire) {
            return 0;
        }
        let oldest_live = self.oldest_live.load(Ordering::Relaxed);
        // Items linked meanwhile lower it again through note_expiry.
        self.earliest_expiry.store(u32::MAX, Ordering::Relaxed);
        let mut earliest = u32::MAX;
        let mut freed = 0;
        for i in 0..SHARDS {
            let mut shard = self.lock_shard(i);
            let mut dead = Vec::new();
            shard.for_each(|idx, e| {
                if self.is_dead(e, now) {
                    dead.push(idx);
                } else if e.exptime != 0 {
                    earliest = earliest.min(e.exptime);
                }
            });
            for idx in dead {
                self.reclaim(&mut shard, idx, false);
                freed += 1;
            }
        }
        self.earliest_expiry.fetch_min(earliest, Ordering::Relaxed);
        if oldest_live != 0 && oldest_live <= now {
            self.reclaimed_flush.store(oldest_live, Ordering::Relaxed);
        }
        self.reclaiming.store(false, Ordering::Release);
        freed
    }

    /// Unlinks a dead item, counted as memcached counts it: `crawler_reclaimed` when the
    /// background sweeper (memcached's LRU crawler) found it, else `reclaimed`.
    fn reclaim(&self, shard: &mut Shard, idx: u32, by_sweeper: bool) {
        let e = self.take(shard, idx);
        let c = &mut shard.classes[usize::from(e.class)];
        if by_sweeper {
            bump(&self.stats.crawler_reclaimed);
            c.crawler_reclaimed += 1;
        } else {
            bump(&self.stats.reclaimed);
            c.reclaimed += 1;
        }
        if e.bits & FETCHED == 0 {
            bump(&self.stats.expired_unfetched);
            c.expired_unfetched += 1;
        }
    }

    /// Reclaims expired and flushed items: looks at up to `budget` slots in each of a few
    /// shards per call (the sweeper fiber calls it periodically). Returns how many it freed.
    pub fn sweep(&self, budget: usize, now: u32) -> usize {
        let mut freed = 0;
        let start = self.sweep_cursor.fetch_add(8, Ordering::Relaxed);
        for k in 0..8 {
            let mut shard = self.lock_shard((start + k) % SHARDS);
            let (checked, dead) = shard.sweep_candidates(budget, |e| self.is_dead(e, now));
            crate::stats::add(&self.stats.crawler_items_checked, checked as u64);
            for idx in dead {
                self.reclaim(&mut shard, idx, true);
                freed += 1;
            }
        }
        freed
    }
}

impl<'s> Locked<'s> {
    fn sh(&self) -> &Shard {
        self.shard.as_ref().expect("shard guard is held until drop")
    }

    fn sh_mut(&mut self) -> &mut Shard {
        self.shard.as_mut().expect("shard guard is held until drop")
    }

    pub fn store(&self) -> &'s Store {
        self.store
    }

    /// The live item for `key`: an expired or flushed one is unlinked here (lazy expiry).
    pub fn get(&mut self, hash: u64, key: &[u8]) -> Option<u32> {
        let idx = self.sh().find(hash, key)?;
        let e = self.sh().entry(idx);
        if self.store.is_dead(e, self.now) {
            let flushed = self.store.is_flushed(e, self.now);
            self.unlink(idx);
            bump(if flushed {
                &self.store.stats.get_flushed
            } else {
                &self.store.stats.get_expired
            });
            return None;
        }
        Some(idx)
    }

    pub fn entry(&self, idx: u32) -> &Entry {
        self.sh().entry(idx)
    }

    /// The item's header to change, inside the store only: a header must stay where
    /// [`Entry::place`] put it (its key and data follow it), which a `&mut Entry` outside
    /// could swap away. Callers outside change fields through [`Locked::set_bits`] and
    /// [`Locked::set_cas`].
    fn entry_mut(&mut self, idx: u32) -> &mut Entry {
        self.sh_mut().entry_mut(idx)
    }

    /// Sets the bits `set` and then clears the bits `clear` of an item's [`Entry::bits`].
    pub fn set_bits(&mut self, idx: u32, set: u8, clear: u8) {
        let e = self.entry_mut(idx);
        e.bits = (e.bits | set) & !clear;
    }

    /// Gives an item a new CAS value.
    pub fn set_cas(&mut self, idx: u32, cas: u64) {
        self.entry_mut(idx).cas = cas;
    }

    /// memcached's `do_item_bump` on a fetch: marks it fetched and [`ACTIVE`] (so the next
    /// eviction that meets it at its LRU tail moves it to the head instead) and refreshes
    /// its access time at most once per `ITEM_UPDATE_INTERVAL`. It does not relink it, as
    /// memcached's segmented LRU does not on a fetch: this writes the item's own slot only.
    /// (memcached marks an item active on its second fetch, having a separate list for
    /// new items; with one list per class, the first fetch counts.)
    pub fn bump(&mut self, idx: u32) {
        self.sh_mut().entry_mut(idx).bits |= FETCHED;
        self.update(idx);
    }

    /// Gives an item a new expiry (touch, `gat`, meta `T`/`N`).
    pub fn set_exptime(&mut self, idx: u32, exptime: u32) {
        self.sh_mut().entry_mut(idx).exptime = exptime;
        self.store.note_expiry(exptime);
    }

    /// memcached's `do_item_update`: the access time, and [`ACTIVE`] for its LRU position
    /// (what [`Locked::bump`] does besides the fetched bit).
    pub fn update(&mut self, idx: u32) {
        let now = self.now;
        let e = self.sh_mut().entry_mut(idx);
        e.bits |= ACTIVE;
        if e.time < now.saturating_sub(clock::ITEM_UPDATE_INTERVAL_SECS) {
            e.time = now;
        }
    }

    /// Removes an item; its chunks go back to their classes.
    pub fn unlink(&mut self, idx: u32) {
        let store = self.store;
        store.take(self.sh_mut(), idx);
    }

    /// True when linking an item of these sizes would fail with out-of-memory right now.
    pub fn would_run_out(&self, key_len: usize, flags: u32, data_len: usize) -> bool {
        let store = self.store;
        if store.config.evictions {
            let plan = store.chunk_plan(key_len, flags, data_len);
            store.plan_pages(&plan) * slab::PAGE_BYTES + entry::index_bytes(plan.len())
                > store.limit_bytes()
        } else {
            !store.fits_now(key_len, flags, data_len)
        }
    }

    /// Links a new item (replacing `old` if given) with a fresh CAS value and the current
    /// time; its data is the concatenation of `data` (with its `\r\n`).
    #[allow(clippy::too_many_arguments)] // the fields of the item, as memcached's item_alloc
    pub fn link(
        &mut self,
        hash: u64,
        key: &[u8],
        data: &[&[u8]],
        flags: u32,
        exptime: u32,
        bits: u8,
        old: Option<u32>,
    ) -> Result<u32, OutOfMemory> {
        let store = self.store;
        let data_len: usize = data.iter().map(|d| d.len()).sum();
        let size = classes::item_bytes(key.len(), flags, data_len, store.config.use_cas);
        let plan = store.chunk_plan(key.len(), flags, data_len);
        // The index bytes this link adds (a replaced item's go).
        let index = entry::index_bytes(plan.len())
            .saturating_sub(old.map_or(0, |o| entry::index_bytes(self.entry(o).chunks())));
        if !store.config.evictions && store.used_bytes() + index > store.limit_bytes() {
            return Err(OutOfMemory);
        }
        let chunks = self.alloc_chunks(&plan, old, index)?;
        store.note_expiry(exptime);
        if let Some(old) = old {
            self.unlink(old);
        }
        let class = store.config.classes.class_of(size);
        let at = Entry::place(chunks, key, data, class, flags, exptime, self.now, bits);
        let (idx, index) = self.sh_mut().insert(at, hash);
        self.sh_mut().entry_mut(idx).cas = store.item_cas();
        store.used_bytes.fetch_add(index, Ordering::Relaxed);
        bump(&store.stats.total_items);
        self.fit_index_bytes(idx);
        Ok(idx)
    }

    /// Swaps an item's data in place for data of the same length (incr/decr written over
    /// the old digits, padded), with a new CAS value: its chunk and class stay.
    pub fn replace_data(&mut self, idx: u32, data: &[u8]) {
        let cas = self.store.item_cas();
        let e = self.sh_mut().entry_mut(idx);
        e.overwrite_data(data);
        e.cas = cas;
        self.update(idx);
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        // Release this shard before touching any other: one shard lock at a time.
        drop(self.shard.take());
        if self.shortfall > 0 {
            self.store.evict_from_others(Some(self.index));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{mpsc, Arc};
    use std::time::Duration;

    use super::*;
    use crate::store::classes::SizeClasses;

    fn store() -> Store {
        Store::new(StoreConfig {
            memory_limit_bytes: 8 << 20,
            evictions: true,
            item_size_max: 1 << 20,
            use_cas: true,
            initial_items: 0,
            classes: SizeClasses::default(),
            large_pages: false,
        })
    }

    fn set(s: &Store, key: &[u8], value: &[u8]) {
        let hash = s.hash(key);
        let mut lk = s.lock(hash, 0);
        let old = lk.get(hash, key);
        lk.link(hash, key, &[value, b"\r\n"], 0, 0, 0, old).unwrap();
    }

    fn get(s: &Store, key: &[u8]) -> Option<Vec<u8>> {
        let hash = s.hash(key);
        let mut lk = s.lock(hash, 0);
        let idx = lk.get(hash, key)?;
        Some(lk.entry(idx).data_vec())
    }

    /// The look-ahead holds several shards at once, so it must never wait for one (the
    /// module's lock order): with a key's shard held elsewhere it skips that key. Taking the
    /// locks one key at a time with `lock` waited here forever.
    #[test]
    fn the_look_ahead_skips_a_busy_shard_instead_of_waiting() {
        let s = Arc::new(store());
        let keys: Vec<Vec<u8>> = (0..40).map(|i| format!("key{i}").into_bytes()).collect();
        for k in &keys {
            set(&s, k, b"v");
        }
        let busy = s.hash(&keys[0]);
        let _held = s.lock(busy, 0);
        let (done, finished) = mpsc::channel();
        let looker = s.clone();
        let asked = keys.clone();
        std::thread::spawn(move || {
            let refs: Vec<&[u8]> = asked.iter().map(|k| &k[..]).collect();
            looker.prefetch_gets(&refs);
            done.send(()).unwrap();
        });
        assert!(
            finished.recv_timeout(Duration::from_secs(20)).is_ok(),
            "the look-ahead waited for a shard held elsewhere"
        );
    }

    /// Keys sharing a shard, repeated keys, misses and more keys than it looks at: the
    /// look-ahead answers nothing and changes nothing, and leaves no shard locked.
    #[test]
    fn the_look_ahead_changes_nothing_and_releases_every_shard() {
        let s = store();
        let keys: Vec<Vec<u8>> = (0..3 * crate::lookahead::MAX_KEYS)
            .map(|i| format!("k{}", i % 20).into_bytes())
            .collect();
        for k in keys.iter().step_by(2) {
            set(&s, k, k);
        }
        let before: Vec<_> = keys.iter().map(|k| get(&s, k)).collect();
        let refs: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
        s.prefetch_gets(&refs);
        let after: Vec<_> = keys.iter().map(|k| get(&s, k)).collect();
        assert_eq!(before, after);
        for i in 0..SHARDS {
            assert!(s.try_lock_shard(i).is_some(), "shard {i} left locked");
        }
    }
}
