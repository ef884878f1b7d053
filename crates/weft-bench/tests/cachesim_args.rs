//! benches/cachesim.sh refuses settings valgrind would reject, before it needs valgrind: a
//! TLB model whose entries are not a power of two (8-way sets must be a power of two in
//! number) and an unknown cache model.

use std::path::PathBuf;
use std::process::Command;

use weft_testkit::require;

/// Runs the script with `env`; `None` without bash (a failure under `CI=true`).
fn run(env: &[(&str, &str)]) -> Option<(i32, String)> {
    let bash = require("bash")?;
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../benches/cachesim.sh");
    let out = Command::new(bash)
        .arg(script)
        .envs(env.iter().copied())
        .output()
        .expect("run bash");
    Some((
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

#[test]
fn a_tlb_that_is_not_a_power_of_two_is_refused_by_name() {
    for bad in ["100", "4", "0", "abc", "-8"] {
        let Some((code, err)) = run(&[("TLB_ENTRIES", bad)]) else {
            return;
        };
        assert_eq!(code, 2, "TLB_ENTRIES={bad:?}: {err}");
        assert!(
            err.contains("TLB_ENTRIES must be a power of two"),
            "TLB_ENTRIES={bad:?}: {err}"
        );
    }
}

#[test]
fn an_unknown_model_is_refused_by_name() {
    let Some((code, err)) = run(&[("MODELS", "lines tlb")]) else {
        return;
    };
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("unknown model 'tlb'"), "{err}");
}
