//! Invariant violations stop the server: a store shard poisoned by a panic while it was held
//! is never served from again; the next lock of it aborts the process with one clear line.
//! The abort must not take the test harness down, so the scenario runs in a child process
//! (this same test binary, re-run with an environment variable).

use std::process::Command;

use weft_cache::store::{classes::SizeClasses, Store, StoreConfig};

const CHILD_ENV: &str = "WEFT_CACHE_POISON_CHILD";
const SERVED: &str = "served from a poisoned shard";

fn store() -> Store {
    Store::new(StoreConfig {
        memory_limit_bytes: 1 << 20,
        evictions: true,
        item_size_max: 1 << 20,
        use_cas: true,
        initial_items: 0,
        classes: SizeClasses::default(),
        large_pages: false,
    })
}

/// In the child: a thread panics while holding a key's shard (as an `unreachable!` in the
/// middle of an LRU update would), then the key is looked up again.
fn child() {
    let store = store();
    let hash = store.hash(b"key");
    std::thread::scope(|s| {
        let joined = s
            .spawn(|| {
                let _shard = store.lock(hash, 0);
                panic!("an invariant broke while the shard was held");
            })
            .join();
        assert!(joined.is_err());
    });
    let mut shard = store.lock(hash, 0);
    let _ = shard.get(hash, b"key");
    println!("{SERVED}");
}

#[test]
fn a_shard_poisoned_by_a_panic_aborts_the_next_request() {
    if std::env::var_os(CHILD_ENV).is_some() {
        child();
        return;
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_shard_poisoned_by_a_panic_aborts_the_next_request",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stdout.contains(SERVED), "served on: {stdout}");
    assert!(!out.status.success(), "the child exited cleanly: {stdout}");
    {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(out.status.signal(), Some(libc::SIGABRT), "{stderr}");
    }
    assert!(
        stderr.contains("weft-cache: fatal: the store shard lock is poisoned"),
        "{stderr}"
    );
}
