//! The open-file cache's unit tests (beside the code, in a file of their own).

use super::*;

/// Every hit checks (the default).
const STRICT: std::time::Duration = std::time::Duration::ZERO;

fn setup() -> (tempfile::TempDir, Arc<Root>) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.html"), b"hello").unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    let root = Arc::new(Root::new(dir.path(), false).unwrap());
    (dir, root)
}

fn file(l: Result<Lookup, OpenError>) -> Arc<CachedFile> {
    match l {
        Ok(Lookup::File(f)) => f,
        _ => panic!("not a file"),
    }
}

/// Many fibers missing the same path at once share an open, and each gets the entry, a
/// directory, or the same error. (It used to be an open each: 4,000 first requests, 4,000
/// opens on 64 blocking-pool threads.)
#[test]
fn concurrent_misses_of_one_path_share_one_open() {
    let (dir, root) = setup();
    std::fs::write(dir.path().join("b.html"), b"shared").unwrap();
    let mut cache = FileCache::new(100, 1024, STRICT);
    // Longer than 200 lookups take to start, on a loaded test machine too.
    cache.open_delay = std::time::Duration::from_millis(200);
    let cache = Arc::new(cache);
    let cluster = weft::Cluster::builder().processors(1).build().unwrap();
    const FIBERS: usize = 200;
    for (path, expect) in [
        (&b"b.html"[..], "file"),
        (&b"sub"[..], "directory"),
        (&b"missing.html"[..], "404"),
    ] {
        let before = cache.opens.load(Ordering::Relaxed);
        // All start together (and the open is slow): a directory or an error is not
        // cached, so a lookup that began after the first open ended would open again.
        // Their requests all arrived before the first lookup began (as a burst's first
        // requests do), so each may take the open's outcome.
        let arrived = Arrival::now();
        let gate = Arc::new(weft::sync::Barrier::new(FIBERS));
        let handles: Vec<_> = (0..FIBERS)
            .map(|_| {
                let (cache, root, gate) = (cache.clone(), root.clone(), gate.clone());
                cluster.spawn(move || {
                    gate.wait().unwrap();
                    match cache.lookup(&root, path, arrived) {
                        Ok(Lookup::File(f)) => {
                            assert_eq!(f.body.as_deref(), Some(&b"shared"[..]));
                            "file"
                        }
                        Ok(Lookup::Directory) => "directory",
                        Err(e) => {
                            assert_eq!(e.status(), 404);
                            "404"
                        }
                    }
                })
            })
            .collect();
        for h in handles {
            assert_eq!(h.join().unwrap(), expect);
        }
        let opens = cache.opens.load(Ordering::Relaxed) - before;
        assert_eq!(
            opens, 1,
            "{FIBERS} concurrent misses of {expect}: {opens} opens"
        );
    }
    cluster.shutdown();
}

const POISON_CHILD_ENV: &str = "WEFT_HTTP_POISON_CHILD";
const SERVED_FROM_POISONED: &str = "served from a poisoned cache shard";

/// Invariant violations stop the server: a cache shard poisoned by a panic while it was
/// held (its map half-updated) is never served from again; the next lookup aborts the
/// process with one clear line. The abort must not take the harness down, so the scenario
/// runs in a child process (this test binary again, with an environment variable).
#[test]
fn a_shard_poisoned_by_a_panic_aborts_the_next_lookup() {
    if std::env::var_os(POISON_CHILD_ENV).is_some() {
        let (_dir, root) = setup();
        let cache = FileCache::new(100, 1024, STRICT);
        let _ = file(cache.lookup(&root, b"a.html", Arrival::now()));
        std::thread::scope(|s| {
            let joined = s
                .spawn(|| {
                    let _held: Vec<_> = cache.shards.iter().map(|m| m.lock()).collect();
                    panic!("an invariant broke while the shards were held");
                })
                .join();
            assert!(joined.is_err());
        });
        let _ = cache.lookup(&root, b"a.html", Arrival::now());
        println!("{SERVED_FROM_POISONED}");
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "cache::tests::a_shard_poisoned_by_a_panic_aborts_the_next_lookup",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(POISON_CHILD_ENV, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stdout.contains(SERVED_FROM_POISONED),
        "served on: {stdout}"
    );
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(libc::SIGABRT), "{stdout}{stderr}");
    assert!(
        stderr.contains("weft http: fatal: the file cache shard lock is poisoned"),
        "{stderr}"
    );
}

#[test]
fn describes_files() {
    let (_dir, root) = setup();
    let cache = FileCache::new(100, 1024, STRICT);
    let f = file(cache.lookup(&root, b"a.html", Arrival::now()));
    assert_eq!(f.len, 5);
    assert_eq!(f.body.as_deref(), Some(&b"hello"[..]));
    let etag = format!("\"{:x}-5\"", f.mtime_secs);
    assert_eq!(&*f.etag, etag.as_bytes());
    let lines = String::from_utf8(f.header_lines.to_vec()).unwrap();
    assert!(
        lines.starts_with("Content-Type: text/html\r\nLast-Modified: "),
        "{lines}"
    );
    assert_eq!(f.content_type, "text/html");
    assert!(f.validator_lines().starts_with(b"Last-Modified: "));
    assert!(matches!(
        cache.lookup(&root, b"sub", Arrival::now()),
        Ok(Lookup::Directory)
    ));
    assert!(matches!(
        cache.lookup(&root, b"x", Arrival::now()),
        Err(OpenError::NotFound)
    ));
    let big = FileCache::new(100, 2, STRICT);
    assert!(file(big.lookup(&root, b"a.html", Arrival::now()))
        .body
        .is_none());
}

#[test]
fn hits_reuse_the_entry_and_changes_are_noticed() {
    let (dir, root) = setup();
    let cache = FileCache::new(100, 1024, STRICT);
    let first = file(cache.lookup(&root, b"a.html", Arrival::now()));
    let again = file(cache.lookup(&root, b"a.html", Arrival::now()));
    assert!(Arc::ptr_eq(&first, &again));
    // A replaced file is noticed at the next check (forced here by aging the entry).
    std::fs::write(dir.path().join("new"), b"changed!").unwrap();
    std::fs::rename(dir.path().join("new"), dir.path().join("a.html")).unwrap();
    again.checked_ms.store(UNCHECKED, Ordering::Relaxed);
    let changed = file(cache.lookup(&root, b"a.html", Arrival::now()));
    assert_eq!(changed.len, 8);
    assert_eq!(changed.body.as_deref(), Some(&b"changed!"[..]));
    // A deleted file is noticed too.
    std::fs::remove_file(dir.path().join("a.html")).unwrap();
    changed.checked_ms.store(UNCHECKED, Ordering::Relaxed);
    assert!(matches!(
        cache.lookup(&root, b"a.html", Arrival::now()),
        Err(OpenError::NotFound)
    ));
}

#[test]
fn changes_within_the_second_are_noticed_on_the_descriptor() {
    let (dir, root) = setup();
    let cache = FileCache::new(100, 1024, STRICT);
    let first = file(cache.lookup(&root, b"a.html", Arrival::now()));
    // Truncated in place: same inode, the entry's path was checked within the second.
    std::fs::write(dir.path().join("a.html"), b"hi").unwrap();
    let now = file(cache.lookup(&root, b"a.html", Arrival::now()));
    assert!(!Arc::ptr_eq(&first, &now));
    assert_eq!(now.body.as_deref(), Some(&b"hi"[..]));
    // Deleted: the descriptor has no link left.
    std::fs::remove_file(dir.path().join("a.html")).unwrap();
    assert!(matches!(
        cache.lookup(&root, b"a.html", Arrival::now()),
        Err(OpenError::NotFound)
    ));
}

/// With `valid` above zero (nginx's `open_file_cache_valid`) an entry is served unchecked
/// within it, and the first hit after it sees any change.
#[test]
fn with_valid_an_entry_is_trusted_that_long_then_checked() {
    let (dir, root) = setup();
    let cache = FileCache::new(100, 1024, std::time::Duration::from_secs(3600));
    let first = file(cache.lookup(&root, b"a.html", Arrival::now()));
    // Rewritten in place with another length: within the window, the old entry.
    std::fs::write(dir.path().join("a.html"), b"hi").unwrap();
    let again = file(cache.lookup(&root, b"a.html", Arrival::now()));
    assert!(Arc::ptr_eq(&first, &again));
    assert_eq!(again.body.as_deref(), Some(&b"hello"[..]));
    // Past the window (forced by aging the entry): the change is seen.
    again.checked_ms.store(UNCHECKED, Ordering::Relaxed);
    let now = file(cache.lookup(&root, b"a.html", Arrival::now()));
    assert!(!Arc::ptr_eq(&first, &now));
    assert_eq!(now.body.as_deref(), Some(&b"hi"[..]));
    // An unchanged file passes the check and keeps its entry.
    now.checked_ms.store(UNCHECKED, Ordering::Relaxed);
    let kept = file(cache.lookup(&root, b"a.html", Arrival::now()));
    assert!(Arc::ptr_eq(&now, &kept));
    assert_ne!(kept.checked_ms.load(Ordering::Relaxed), UNCHECKED);
    // Replaced by a rename, then deleted: each seen at the check after the window.
    std::fs::write(dir.path().join("new"), b"renamed").unwrap();
    std::fs::rename(dir.path().join("new"), dir.path().join("a.html")).unwrap();
    assert!(Arc::ptr_eq(
        &kept,
        &file(cache.lookup(&root, b"a.html", Arrival::now()))
    ));
    kept.checked_ms.store(UNCHECKED, Ordering::Relaxed);
    let renamed = file(cache.lookup(&root, b"a.html", Arrival::now()));
    assert_eq!(renamed.body.as_deref(), Some(&b"renamed"[..]));
    std::fs::remove_file(dir.path().join("a.html")).unwrap();
    renamed.checked_ms.store(UNCHECKED, Ordering::Relaxed);
    assert!(matches!(
        cache.lookup(&root, b"a.html", Arrival::now()),
        Err(OpenError::NotFound)
    ));
}

/// The window is time on the cache's clock: once it has passed (with a tick's margin and
/// more), the next hit checks.
#[test]
fn a_change_is_seen_once_the_window_passed() {
    let (dir, root) = setup();
    let cache = FileCache::new(100, 1024, std::time::Duration::from_millis(50));
    let first = file(cache.lookup(&root, b"a.html", Arrival::now()));
    std::fs::write(dir.path().join("a.html"), b"changed!").unwrap();
    std::thread::sleep(std::time::Duration::from_millis(200));
    let now = file(cache.lookup(&root, b"a.html", Arrival::now()));
    assert!(!Arc::ptr_eq(&first, &now));
    assert_eq!(now.body.as_deref(), Some(&b"changed!"[..]));
}

/// A request that arrived while an open of its path was under way, after that open
/// looked, must not take the open's outcome: the file may have changed in between (its
/// client may have changed it). It waits for the open, then checks the entry like any
/// hit. (The old cache handed every lookup that found the open under way its outcome.)
#[test]
fn a_request_that_came_after_a_shared_open_looked_does_not_take_its_outcome() {
    let (dir, root) = setup();
    std::fs::write(dir.path().join("c.html"), b"old").unwrap();
    let mut cache = FileCache::new(100, 1024, STRICT);
    cache.open_delay = std::time::Duration::from_millis(300);
    let cache = Arc::new(cache);
    let cluster = weft::Cluster::builder().processors(1).build().unwrap();
    let opener = cluster.spawn({
        let (cache, root) = (cache.clone(), root.clone());
        move || file(cache.lookup(&root, b"c.html", Arrival::now()))
    });
    // The open has looked (it holds the old bytes) and is still under way.
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert_eq!(cache.opens.load(Ordering::Relaxed), 1);
    std::fs::write(dir.path().join("c.html"), b"changed").unwrap();
    // A request sent after the change: it arrives now.
    let late = cluster.spawn({
        let (cache, root) = (cache.clone(), root.clone());
        let arrived = Arrival::now();
        move || file(cache.lookup(&root, b"c.html", arrived))
    });
    assert_eq!(opener.join().unwrap().body.as_deref(), Some(&b"old"[..]));
    assert_eq!(late.join().unwrap().body.as_deref(), Some(&b"changed"[..]));
    cluster.shutdown();
}

/// One `fstat` answers every request that arrived before it began: those are served on
/// it even if the file changes afterwards (they came before the change); a request that
/// arrives after the change makes a check of its own and sees it.
#[test]
fn one_check_serves_every_request_that_arrived_before_it() {
    let (dir, root) = setup();
    let cache = FileCache::new(100, 1024, STRICT);
    let first = file(cache.lookup(&root, b"a.html", Arrival::now()));
    let checks = || cache.descriptor_checks.load(Ordering::Relaxed);
    // Requests that arrived together (one batch of receives), then one checks.
    let batch = Arrival::now();
    let checked = file(cache.lookup(&root, b"a.html", Arrival::now()));
    assert!(Arc::ptr_eq(&first, &checked));
    assert_eq!(checks(), 1);
    for _ in 0..10 {
        let hit = file(cache.lookup(&root, b"a.html", batch));
        assert!(Arc::ptr_eq(&first, &hit));
    }
    assert_eq!(
        checks(),
        1,
        "requests covered by a check made checks of their own"
    );
    // Changed in place after that check: a request that arrives now is not covered.
    std::fs::write(dir.path().join("a.html"), b"hi").unwrap();
    let now = file(cache.lookup(&root, b"a.html", Arrival::now()));
    assert_eq!(checks(), 2);
    assert_eq!(now.body.as_deref(), Some(&b"hi"[..]));
    // The open vouches for requests that arrived before it, without a check.
    let hit = file(cache.lookup(&root, b"a.html", batch));
    assert!(Arc::ptr_eq(&now, &hit));
    assert_eq!(checks(), 2);
}

#[test]
fn bounded() {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..200 {
        std::fs::write(dir.path().join(i.to_string()), b"x").unwrap();
    }
    let root = Arc::new(Root::new(dir.path(), false).unwrap());
    let cache = FileCache::new(32, 0, STRICT);
    for i in 0..200 {
        file(cache.lookup(&root, i.to_string().as_bytes(), Arrival::now()));
    }
    assert!(cache.len() <= 32, "{}", cache.len());
}
