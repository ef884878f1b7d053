//! benches/scale.sh's `HALT_POLL_NS`: the guest's idle poll is a parameter of the
//! cpuidle-haltpoll driver, and with another cpuidle driver (or none) its sysfs file is still
//! there and writable but does nothing. The script used to set it anyway and record the value
//! in every point as if it had acted; it now refuses by name, before it touches the machine.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use weft_testkit::{run_bench_script, scratch_dir};

fn scratch(test: &str) -> PathBuf {
    scratch_dir("weft-scale-idle-poll", test)
}

/// Runs scale.sh with `HALT_POLL_NS=200000`, the cpuidle driver file of `dir` saying
/// `driver`, the idle poll file at `halt_poll`, and a weft binary that does not exist (so a
/// script that got past its checks stops at the next one instead of benchmarking); the exit
/// code and stderr. `None` without bash (a failure under `CI=true`).
fn run(dir: &Path, driver: &str, halt_poll: &Path) -> Option<(i32, String)> {
    let driver_file = dir.join("current_driver");
    std::fs::write(&driver_file, format!("{driver}\n")).expect("write the driver file");
    let weft = dir.join("no-such-weft");
    let env = [
        ("HALT_POLL_NS", OsStr::new("200000")),
        ("CPUIDLE_DRIVER_FILE", driver_file.as_os_str()),
        ("HALT_POLL_FILE", halt_poll.as_os_str()),
        ("WEFT", weft.as_os_str()),
        ("OUT", dir.as_os_str()),
    ];
    let out = run_bench_script("bash", "scale.sh", &[OsStr::new("mc")], &env)?;
    Some((out.code, out.stderr))
}

#[test]
fn an_idle_poll_without_the_haltpoll_driver_is_refused_by_name() {
    let dir = scratch("none");
    let halt_poll = dir.join("guest_halt_poll_ns");
    std::fs::write(&halt_poll, "0\n").expect("write the idle poll file");
    for driver in ["none", "acpi_idle"] {
        let Some((code, err)) = run(&dir, driver, &halt_poll) else {
            return;
        };
        assert_eq!(code, 2, "driver {driver}: {err}");
        assert!(
            err.contains(&format!("cpuidle driver is '{driver}'"))
                && err.contains("would do nothing"),
            "driver {driver}: {err}"
        );
        let left = std::fs::read_to_string(&halt_poll).expect("read the idle poll file");
        assert_eq!(left, "0\n", "the idle poll was left alone");
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn with_the_haltpoll_driver_the_idle_poll_file_must_be_writable() {
    let dir = scratch("haltpoll");
    let Some((code, err)) = run(&dir, "haltpoll", &dir.join("missing/guest_halt_poll_ns")) else {
        return;
    };
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("not writable"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}
