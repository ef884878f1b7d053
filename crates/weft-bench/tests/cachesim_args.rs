//! benches/cachesim.sh refuses settings valgrind would reject, before it needs valgrind: a
//! TLB model whose entries are not a power of two (8-way sets must be a power of two in
//! number) and an unknown cache model.

use std::ffi::OsStr;

use weft_testkit::run_bench_script;

/// Runs the script with `env`; `None` without bash (a failure under `CI=true`).
fn run(env: &[(&str, &str)]) -> Option<(i32, String)> {
    let env: Vec<(&str, &OsStr)> = env.iter().map(|(k, v)| (*k, OsStr::new(v))).collect();
    let out = run_bench_script("bash", "cachesim.sh", &[], &env)?;
    Some((out.code, out.stderr))
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
