//! `-m` holds for the real binary: a write-heavy load of random value sizes (far more data
//! than fits) must not grow the server's RSS much past `-m` plus its idle footprint, with no
//! allocator setting (the store keeps items in its own size-class pages, `weft_cache::store`).
//! The target (≤ 1.15 × m + idle) is measured by `weft bench memory` in release; this
//! test uses a looser bound so that it only catches a regression of the accounting. Four
//! processors are covered by `weft-cache`'s `tests/memory_limit.rs`; release figures for
//! `-t 1` and `-t 4` are in `docs/notes/memcached-slabs.md`.

use std::process::Command;
use std::time::Duration;

const MEMORY_MB: u64 = 16;
/// Growth of the peak RSS over the idle RSS allowed per byte of `-m` here.
const BOUND_RATIO: f64 = 1.3;

mod common;
use common::start_memcached_threads;
use weft_testkit::status_kib;

#[test]
fn rss_stays_near_the_memory_limit_under_random_size_churn() {
    let (server, addr) = start_memcached_threads("1", &["-m", &MEMORY_MB.to_string()]);
    let pid = server.0.id();
    std::thread::sleep(Duration::from_millis(200));
    let idle_kib = status_kib(pid, "VmRSS");

    // About 20 × -m of data: 8,000 keys of 100..50,000 bytes, preloaded, then 90% sets.
    let load = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["load", "memcached", "--server", &addr.to_string()])
        .args(["--update-ratio", "0.9", "--value-size", "uniform:100:50000"])
        .args(["--keys", "8000", "--qps", "0", "--connections", "8"])
        .args(["--duration", "3", "--warmup", "0", "--json"])
        .output()
        .unwrap();
    assert!(
        load.status.success(),
        "weft load memcached: {}",
        String::from_utf8_lossy(&load.stderr)
    );
    let report = String::from_utf8_lossy(&load.stdout);
    assert!(report.contains("\"errors\":0"), "{report}");

    // VmHWM: the kernel's high-water mark of the resident set.
    let peak_kib = status_kib(pid, "VmHWM");
    let growth = (peak_kib.saturating_sub(idle_kib)) as f64 / (MEMORY_MB * 1024) as f64;
    eprintln!(
        "-m {MEMORY_MB}: idle {idle_kib} KiB, peak {peak_kib} KiB, (peak - idle) / m = {growth:.3}"
    );
    assert!(
        growth <= BOUND_RATIO,
        "RSS grew {growth:.3} x -m (idle {idle_kib} KiB, peak {peak_kib} KiB)"
    );
}
