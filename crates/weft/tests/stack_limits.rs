//! Stack overflow and mapping exhaustion are reported clearly. Each case runs in a child process
//! (this test binary, re-executed) because the first aborts and the second exhausts a
//! process-wide limit.

use std::process::Command;

fn run_child(test: &str, mode: &str) -> std::process::Output {
    Command::new(std::env::current_exe().unwrap())
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env("WEFT_STACK_LIMITS_CHILD", mode)
        .output()
        .unwrap()
}

#[inline(never)]
fn recurse(depth: u64) -> u64 {
    let frame = std::hint::black_box([depth as u8; 512]);
    if depth == u64::MAX {
        return 0;
    }
    recurse(depth + 1).wrapping_add(frame[7] as u64)
}

#[test]
fn stack_overflow_names_the_fiber() {
    if std::env::var("WEFT_STACK_LIMITS_CHILD").as_deref() == Ok("overflow") {
        let c = weft::Cluster::builder().processors(1).build().unwrap();
        let h = weft::Builder::new()
            .name("deep-recursion")
            .stack_size(64 * 1024)
            .cluster(&c)
            .spawn(|| recurse(0))
            .unwrap();
        let _ = h.join();
        unreachable!("the overflow should have aborted the process");
    }
    let out = run_child("stack_overflow_names_the_fiber", "overflow");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("fiber 'deep-recursion' (id ")
            && stderr.contains("has overflowed its stack"),
        "stderr was: {stderr}"
    );
}

#[test]
fn a_segfault_outside_fiber_stacks_is_not_reported_as_overflow() {
    if std::env::var("WEFT_STACK_LIMITS_CHILD").as_deref() == Ok("segv") {
        let c = weft::Cluster::builder().processors(1).build().unwrap();
        let h = c.spawn(|| {
            // SAFETY: deliberately faults (this runs in a throw-away child process).
            unsafe { std::ptr::write_volatile(16 as *mut u64, 1) };
        });
        let _ = h.join();
        unreachable!();
    }
    let out = run_child(
        "a_segfault_outside_fiber_stacks_is_not_reported_as_overflow",
        "segv",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(!stderr.contains("overflowed"), "stderr was: {stderr}");
}

#[test]
fn exhausting_mappings_fails_spawn_with_a_clear_error() {
    if std::env::var("WEFT_STACK_LIMITS_CHILD").as_deref() == Ok("maps") {
        let limit: usize = std::fs::read_to_string("/proc/sys/vm/max_map_count")
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let c = weft::Cluster::builder()
            .processors(1)
            .stack_size(16 * 1024)
            .build()
            .unwrap();
        // Use up mappings directly (cheaper than fibers) until about 100 are left, then spawn
        // fibers until the kernel refuses.
        let mut used = std::fs::read_to_string("/proc/self/maps")
            .unwrap()
            .lines()
            .count();
        let page = 4096;
        while used + 100 < limit {
            // SAFETY: fresh anonymous one-page mappings, deliberately leaked in a child process;
            // alternating protections keep the kernel from merging neighbours into one mapping.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    page,
                    if used % 2 == 0 {
                        libc::PROT_READ
                    } else {
                        libc::PROT_NONE
                    },
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            assert_ne!(p, libc::MAP_FAILED);
            used += 1;
        }
        let mut handles = Vec::new();
        let err = loop {
            match weft::Builder::new()
                .cluster(&c)
                .spawn(|| weft::sleep(std::time::Duration::from_secs(600)))
            {
                Ok(h) => handles.push(h),
                Err(e) => break e,
            }
            assert!(
                handles.len() < 10_000,
                "the mapping limit was never reached"
            );
        };
        println!("SPAWN-ERROR: {err}");
        // The cluster still works for fibers that need no new stack.
        drop(handles);
        std::process::exit(0);
    }
    let limit: usize = std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    if limit > 1_100_000 {
        eprintln!("vm.max_map_count = {limit}: too high to exhaust in a test, skipped");
        return;
    }
    let out = run_child("exhausting_mappings_fails_spawn_with_a_clear_error", "maps");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "child failed: {stdout}\n{stderr}");
    assert!(
        stdout.contains("SPAWN-ERROR: cannot map a") && stdout.contains("vm.max_map_count"),
        "stdout was: {stdout}"
    );
}
