//! The open-file cache: per path, an open descriptor, its metadata and the response header
//! lines that depend only on the file, built once (and, for small files, the bytes).
//!
//! Invariants:
//! - with `valid` zero (the default) every request is answered on a check of the entry's
//!   descriptor that began after the request arrived (`weft::io::arrival`: the ticket of the
//!   read that brought the request in, against the ticket a check takes before its `fstat`):
//!   its own `fstat`, or one another request made after this one was in. A different size or
//!   modification time (the file was truncated, grown or rewritten) or no link left (deleted,
//!   or replaced by a rename) drops the entry and reopens through [`Root::open`], so the
//!   length a head announces is what the descriptor held at some point after the request
//!   arrived; and once a second the first request also re-`stat`s the path, and a different
//!   device, inode, size or modification time (another file there) drops the entry likewise;
//! - with `valid` above zero (the operator's choice, nginx's `open_file_cache_valid`) an
//!   entry is served without a check for `valid` after its last one, and the first request
//!   after that re-`stat`s the path as above (the path naming the same inode with the same
//!   size and time means the descriptor holds what it held). Within the window a file
//!   changed in place can be announced with its old length: a body served from memory is the
//!   old bytes, one sent from the descriptor that comes up short ends the connection
//!   (`conn.rs`'s truncation path), as nginx's does;
//! - entries are `Arc`s, so evicting or replacing one never closes a descriptor a response is
//!   still sending from;
//! - the shard locks are `std::sync::Mutex`es held only for a map lookup, insert or removal,
//!   never across I/O or a park (the fiber contract); no two are ever held at once.
//!
//! Opening runs on the blocking pool (it may read directories from disk); revalidation is an
//! `fstat` (with `valid` zero, for every request no earlier check covers) and an `fstatat`
//! (once a second, or once a `valid`) on the processor (the inode and the dentries of a path
//! just served are in memory). At low load every request makes its own `fstat`; when requests
//! queue, the ones reaped in one batch (one ticket) share the first one's.
//!
//! Concurrent misses of one path share one open: the first opens (the path is then in its
//! shard's `opening` map, with a ticket taken before the open looks) and the others whose
//! requests arrived before that ticket wait for its outcome, which they take as theirs; a
//! request that arrived after it waits for the open to end and then looks again (the open may
//! have looked before the request's client changed the file). Without the sharing, 4,000
//! connections' first requests for one file made 4,000 opens on 64 blocking-pool threads. The
//! opener clears the `opening` entry and releases the waiters whatever happens to it (a guard,
//! so a panic or a cancellation too); a waiter that finds no outcome (the opener unwound) or
//! is cancelled while waiting opens by itself.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use weft::io::arrival::{Arrival, Verified};

use crate::root::{OpenError, Root};

/// How many independent maps the cache is split into (fewer lock collisions between
/// processors).
const SHARDS: usize = 16;

/// What a path names.
pub enum Lookup {
    File(Arc<CachedFile>),
    Directory,
}

/// The identity a revalidation compares: a change in any of these means "reopen".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Identity {
    dev: u64,
    ino: u64,
    len: u64,
    mtime_secs: i64,
    mtime_nsecs: i64,
}

/// One open file and what its responses need.
pub struct CachedFile {
    /// The open file `send_file` reads from.
    pub file: weft::fs::File,
    /// Its length in bytes when opened.
    pub len: u64,
    /// Modification time, whole seconds since the epoch (`If-Modified-Since`).
    pub mtime_secs: u64,
    /// `"mtime_hex-size_hex"`, quotes included (nginx's format).
    pub etag: Box<[u8]>,
    /// The `Last-Modified` value.
    pub last_modified: [u8; crate::date::DATE_BYTES],
    /// `Content-Type`, `Last-Modified`, `ETag` and `Accept-Ranges` header lines, CRLF-ended.
    pub header_lines: Box<[u8]>,
    /// The media type (`Content-Type` value), for the parts of a multipart response.
    pub content_type: &'static str,
    /// Length of the `Content-Type` line at the front of `header_lines`.
    type_line_len: usize,
    /// The whole file, when it is at most `memory_max_bytes` long.
    pub body: Option<Box<[u8]>>,
    identity: Identity,
    /// Cache-clock millisecond of the last check against the path ([`UNCHECKED`]: none).
    checked_ms: AtomicU64,
    /// The ticket of the latest check that found the descriptor unchanged (the open's, to
    /// begin with): a request that arrived before it is served on that check.
    verified: Verified,
}

/// `checked_ms` of an entry the next hit must check.
const UNCHECKED: u64 = u64::MAX;

/// How often the path is checked when hits check the descriptor (`valid` zero).
const STRICT_PATH_CHECK_MS: u64 = 1000;

impl CachedFile {
    /// `header_lines` without `Content-Type` (for a multipart response, whose type differs).
    pub fn validator_lines(&self) -> &[u8] {
        &self.header_lines[self.type_line_len..]
    }
}

/// One shard: relative path → entry, and the paths being opened now.
type Shard = Mutex<ShardMap>;

#[derive(Default)]
struct ShardMap {
    files: HashMap<Box<[u8]>, Arc<CachedFile>>,
    opening: HashMap<Box<[u8]>, Arc<Opening>>,
}

/// An open in progress that other lookups of the same path wait for.
struct Opening {
    /// The opener's ticket, taken before its open looked: only a request that arrived before
    /// it may take this open's outcome.
    began: Arrival,
    /// 1 until the opener has stored `outcome` (or given up).
    done: weft::sync::WaitGroup,
    outcome: Mutex<Option<Outcome>>,
}

/// What an open came to, in a form every waiter can have a copy of.
#[derive(Clone)]
enum Outcome {
    File(Arc<CachedFile>),
    Directory,
    NotFound,
    Forbidden,
    /// `OpenError::Other`: the errno if there was one, else the kind and the message.
    Other(Option<i32>, std::io::ErrorKind, String),
}

impl Outcome {
    fn of(result: &Result<Lookup, OpenError>) -> Outcome {
        match result {
            Ok(Lookup::File(file)) => Outcome::File(file.clone()),
            Ok(Lookup::Directory) => Outcome::Directory,
            Err(OpenError::NotFound) => Outcome::NotFound,
            Err(OpenError::Forbidden) => Outcome::Forbidden,
            Err(OpenError::Other(e)) => Outcome::Other(e.raw_os_error(), e.kind(), e.to_string()),
        }
    }

    fn into_lookup(self) -> Result<Lookup, OpenError> {
        match self {
            Outcome::File(file) => Ok(Lookup::File(file)),
            Outcome::Directory => Ok(Lookup::Directory),
            Outcome::NotFound => Err(OpenError::NotFound),
            Outcome::Forbidden => Err(OpenError::Forbidden),
            Outcome::Other(Some(errno), _, _) => {
                Err(OpenError::Other(std::io::Error::from_raw_os_error(errno)))
            }
            Outcome::Other(None, kind, message) => {
                Err(OpenError::Other(std::io::Error::new(kind, message)))
            }
        }
    }
}

/// Held by the opener of a path: when dropped (after the open, or while unwinding) it takes
/// the path out of `opening` and releases the waiters.
struct OpenerGuard<'a> {
    shard: &'a Shard,
    relative: &'a [u8],
    opening: Arc<Opening>,
}

impl Drop for OpenerGuard<'_> {
    fn drop(&mut self) {
        {
            let mut map = lock(self.shard);
            if map
                .opening
                .get(self.relative)
                .is_some_and(|o| Arc::ptr_eq(o, &self.opening))
            {
                map.opening.remove(self.relative);
            }
        }
        self.opening.done.done();
    }
}

/// The cache; see the module docs.
pub struct FileCache {
    shards: Box<[Shard]>,
    hasher: RandomState,
    /// Most entries per shard; past it an arbitrary entry is dropped.
    max_per_shard: usize,
    /// Files up to this size are kept in memory too.
    memory_max_bytes: u64,
    /// How long an entry is served unchecked after a check, in milliseconds (0: every hit
    /// checks the descriptor; see the module docs).
    valid_ms: u64,
    /// How long after a check of the path the next one is made, in milliseconds: `valid_ms`,
    /// or once a second when hits check the descriptor.
    path_check_ms: u64,
    /// The cache clock's origin on the coarse monotonic clock, in nanoseconds (milliseconds
    /// are counted from here).
    origin_ns: u64,
    /// Opens made (tests count them).
    #[cfg(test)]
    opens: AtomicU64,
    /// Descriptor checks (`fstat`s) made (tests count them).
    #[cfg(test)]
    descriptor_checks: AtomicU64,
    /// How long each open takes at least (tests make it slow, so that lookups overlap it).
    #[cfg(test)]
    open_delay: std::time::Duration,
}

impl FileCache {
    /// A cache of at most `max_entries` files, those up to `memory_max_bytes` in memory too,
    /// each served unchecked for `valid` after a check (zero: every request is answered on a
    /// check that began after it arrived).
    pub fn new(max_entries: usize, memory_max_bytes: u64, valid: std::time::Duration) -> FileCache {
        let valid_ms = u64::try_from(valid.as_millis()).unwrap_or(u64::MAX);
        FileCache {
            shards: (0..SHARDS)
                .map(|_| Mutex::new(ShardMap::default()))
                .collect(),
            hasher: RandomState::new(),
            max_per_shard: max_entries.div_ceil(SHARDS).max(1),
            memory_max_bytes,
            valid_ms,
            path_check_ms: if valid_ms == 0 {
                STRICT_PATH_CHECK_MS
            } else {
                valid_ms
            },
            origin_ns: weft::coarse_clock::monotonic_ns(),
            #[cfg(test)]
            opens: AtomicU64::new(0),
            #[cfg(test)]
            descriptor_checks: AtomicU64::new(0),
            #[cfg(test)]
            open_delay: std::time::Duration::ZERO,
        }
    }

    fn shard(&self, relative: &[u8]) -> &Shard {
        &self.shards[self.hasher.hash_one(relative) as usize % SHARDS]
    }

    /// Milliseconds since the cache was made, on the coarse monotonic clock (a tick behind
    /// at most: the checks' intervals need no more, `weft::coarse_clock`).
    fn now_ms(&self) -> u64 {
        weft::coarse_clock::monotonic_ns().saturating_sub(self.origin_ns) / 1_000_000
    }

    /// Looks `relative` up below `root` for a request that arrived at `arrival` (the ticket
    /// of the read that brought it in, `weft::net::TcpStream::read_arrived`): from the cache
    /// when the entry still holds what the file held after the request arrived (or, with
    /// `valid` above zero, was checked within it), otherwise by opening it.
    pub fn lookup(
        &self,
        root: &Arc<Root>,
        relative: &[u8],
        arrival: Arrival,
    ) -> Result<Lookup, OpenError> {
        let shard = self.shard(relative);
        loop {
            let cached = lock(shard).files.get(relative).cloned();
            if let Some(entry) = cached {
                if let Some(hit) = self.revalidate(shard, root, relative, entry, arrival) {
                    return Ok(Lookup::File(hit));
                }
            }
            // A miss: open, or wait for the open of this path already under way.
            let (opening, role) = {
                let mut map = lock(shard);
                match map.opening.get(relative) {
                    Some(o) if arrival < o.began => (o.clone(), Role::Waiter),
                    Some(o) => (o.clone(), Role::Late),
                    None => {
                        let o = Arc::new(Opening {
                            began: Arrival::now(),
                            done: weft::sync::WaitGroup::new(),
                            outcome: Mutex::new(None),
                        });
                        o.done.add(1);
                        map.opening.insert(relative.into(), o.clone());
                        (o, Role::Opener)
                    }
                }
            };
            match role {
                Role::Waiter => {
                    if opening.done.wait().is_ok() {
                        if let Some(outcome) = lock(&opening.outcome).clone() {
                            return outcome.into_lookup();
                        }
                    }
                    // The opener unwound, or this fiber was cancelled: open by ourselves.
                    return self.open(shard, root, relative, Arrival::now());
                }
                Role::Late => {
                    // That open may have looked before this request arrived: its outcome
                    // is not ours to take. Let it finish (one open per path at a time), then
                    // look again: its entry is checked, or the next open is ours or shared.
                    if opening.done.wait().is_err() {
                        return self.open(shard, root, relative, Arrival::now());
                    }
                }
                Role::Opener => {
                    let guard = OpenerGuard {
                        shard,
                        relative,
                        opening,
                    };
                    let result = self.open(shard, root, relative, guard.opening.began);
                    *lock(&guard.opening.outcome) = Some(Outcome::of(&result));
                    return result;
                }
            }
        }
    }

    /// The hit path: `entry` if it may answer a request that arrived at `arrival`, after
    /// whatever checks that takes; `None` (and the entry dropped from the map) when the file
    /// changed.
    fn revalidate(
        &self,
        shard: &Shard,
        root: &Arc<Root>,
        relative: &[u8],
        entry: Arc<CachedFile>,
        arrival: Arrival,
    ) -> Option<Arc<CachedFile>> {
        let now = self.now_ms();
        let checked = entry.checked_ms.load(Ordering::Relaxed);
        let recent = checked <= now && now - checked < self.path_check_ms;
        // With `valid` zero: the descriptor must still hold what the head will announce
        // (length, modification time) and still be linked, so a file truncated, grown,
        // rewritten, replaced (the old inode loses its last link) or deleted is never
        // answered from the old entry. One fstat on a descriptor already open, made by this
        // request or, if one began after this request arrived, by another (`Verified`).
        let descriptor_ok =
            self.valid_ms > 0 || entry.verified.covers(arrival) || self.check_descriptor(&entry);
        if descriptor_ok && recent {
            return Some(entry);
        }
        // Once an interval, the path (a different file there, e.g. with another hard link to
        // the old one still alive; with `valid`, every change).
        if descriptor_ok {
            if let Ok(st) = root.stat(relative) {
                if identity_of_stat(&st) == entry.identity {
                    entry.checked_ms.store(now, Ordering::Relaxed);
                    return Some(entry);
                }
            }
        }
        let mut map = lock(shard);
        if map
            .files
            .get(relative)
            .is_some_and(|current| Arc::ptr_eq(current, &entry))
        {
            map.files.remove(relative);
        }
        None
    }

    /// Opens `relative` on the blocking pool (without looking at opens under way) and caches
    /// a file; `began` is a ticket taken before this call (the requests that arrived before
    /// it are served on this open).
    fn open(
        &self,
        shard: &Shard,
        root: &Arc<Root>,
        relative: &[u8],
        began: Arrival,
    ) -> Result<Lookup, OpenError> {
        #[cfg(test)]
        self.opens.fetch_add(1, Ordering::Relaxed);
        let opened = {
            let root = root.clone();
            let relative = relative.to_vec();
            let memory_max_bytes = self.memory_max_bytes;
            #[cfg(test)]
            let delay = self.open_delay;
            weft::blocking(move || {
                let opened = open_entry(&root, &relative, memory_max_bytes, began);
                // After the open looked: a file changed meanwhile is the shared open's hole.
                #[cfg(test)]
                std::thread::sleep(delay);
                opened
            })
        }?;
        let Some(mut entry) = opened else {
            return Ok(Lookup::Directory);
        };
        entry.checked_ms = AtomicU64::new(self.now_ms());
        let entry = Arc::new(entry);
        let mut map = lock(shard);
        if map.files.len() >= self.max_per_shard {
            if let Some(victim) = map.files.keys().next().cloned() {
                map.files.remove(&victim);
            }
        }
        map.files.insert(relative.into(), entry.clone());
        Ok(Lookup::File(entry))
    }

    /// [`descriptor_unchanged`], recorded in the entry's [`Verified`] mark when it holds, with
    /// a ticket taken before the `fstat`.
    fn check_descriptor(&self, entry: &CachedFile) -> bool {
        #[cfg(test)]
        self.descriptor_checks.fetch_add(1, Ordering::Relaxed);
        let began = Arrival::now();
        let unchanged = descriptor_unchanged(entry);
        if unchanged {
            entry.verified.checked(began);
        }
        unchanged
    }

    /// How many entries the cache holds.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.shards.iter().map(|s| lock(s).files.len()).sum()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    crate::fatal::lock(m, "file cache shard")
}

/// Which part a lookup that missed plays in the path's open.
enum Role {
    /// Opens, with the path in `opening`.
    Opener,
    /// Takes the outcome of an open that began after its request arrived.
    Waiter,
    /// Waits for an open that began before its request arrived, then looks again.
    Late,
}

/// Whether the entry's descriptor still has the identity it was opened with and a link.
fn descriptor_unchanged(entry: &CachedFile) -> bool {
    use std::os::fd::AsRawFd;
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: the descriptor is open for as long as `entry` (it owns it), and `st` is a
    // writable buffer of the size fstat fills.
    let r = unsafe { libc::fstat(entry.file.as_raw_fd(), st.as_mut_ptr()) };
    if r != 0 {
        return false;
    }
    // SAFETY: fstat returned 0, so it filled `st`.
    let st = unsafe { st.assume_init() };
    st.st_nlink > 0 && identity_of_stat(&st) == entry.identity
}

fn identity_of_stat(st: &libc::stat) -> Identity {
    Identity {
        dev: st.st_dev,
        ino: st.st_ino,
        len: st.st_size as u64,
        mtime_secs: st.st_mtime,
        mtime_nsecs: st.st_mtime_nsec,
    }
}

/// Opens and describes a file (blocking); `None` for a directory.
/// `began` is the ticket taken before the open (the entry's first check).
fn open_entry(
    root: &Root,
    relative: &[u8],
    memory_max_bytes: u64,
    began: Arrival,
) -> Result<Option<CachedFile>, OpenError> {
    let mut file = root.open(relative)?;
    let meta = file.metadata().map_err(OpenError::from_io)?;
    if meta.is_dir() {
        return Ok(None);
    }
    if !meta.is_file() {
        // Devices, FIFOs, sockets: never served (nginx answers 404 too).
        return Err(OpenError::NotFound);
    }
    let identity = Identity {
        dev: meta.dev(),
        ino: meta.ino(),
        len: meta.len(),
        mtime_secs: meta.mtime(),
        mtime_nsecs: meta.mtime_nsec(),
    };
    let mtime_secs = meta.mtime().max(0) as u64;
    let len = meta.len();
    let body = if len <= memory_max_bytes {
        let mut bytes = Vec::with_capacity(len as usize);
        (&mut file)
            .take(len)
            .read_to_end(&mut bytes)
            .map_err(OpenError::from_io)?;
        if bytes.len() as u64 != len {
            // Changed while being read; the next request's check reopens it.
            return Err(OpenError::Other(std::io::Error::other(
                "file changed while being read",
            )));
        }
        Some(bytes.into_boxed_slice())
    } else {
        None
    };
    let etag = format!("\"{mtime_secs:x}-{len:x}\"").into_bytes();
    let last_modified = crate::date::format(mtime_secs);
    let content_type = mime_guess::from_path(std::ffi::OsStr::from_bytes(relative))
        .first_raw()
        .unwrap_or("application/octet-stream");
    let mut header_lines = Vec::with_capacity(160);
    header_lines.extend_from_slice(b"Content-Type: ");
    header_lines.extend_from_slice(content_type.as_bytes());
    header_lines.extend_from_slice(b"\r\n");
    let type_line_len = header_lines.len();
    header_lines.extend_from_slice(b"Last-Modified: ");
    header_lines.extend_from_slice(&last_modified);
    header_lines.extend_from_slice(b"\r\nETag: ");
    header_lines.extend_from_slice(&etag);
    header_lines.extend_from_slice(b"\r\nAccept-Ranges: bytes\r\n");
    Ok(Some(CachedFile {
        file: weft::fs::File::from(file),
        len,
        mtime_secs,
        etag: etag.into_boxed_slice(),
        last_modified,
        header_lines: header_lines.into_boxed_slice(),
        content_type,
        type_line_len,
        body,
        identity,
        checked_ms: AtomicU64::new(UNCHECKED),
        verified: Verified::new(began),
    }))
}

#[cfg(test)]
mod tests;
