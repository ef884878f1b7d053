//! benches/scale.sh's `mc_workload`: openloop and `weft load memcached` are given the same
//! memcached requests (value size, keys, share of sets), each in its own spelling. Until
//! 2026-11-30 the generators mode compared openloop's 32-byte values with `weft load`'s
//! default 200-byte ones.

use std::collections::HashMap;

use weft_testkit::run_bench_functions;

/// The flags `mc_workload GENERATOR` prints, by name, after `preamble`.
fn flags(preamble: &str, generator: &str) -> Option<HashMap<String, String>> {
    let lines = run_bench_functions(
        "scale.sh",
        &["mc_workload"],
        preamble,
        &format!("mc_workload {generator}\n"),
    )?;
    let text = lines.concat();
    let words: Vec<&str> = text.split_whitespace().collect();
    assert!(words.len() % 2 == 0, "flag and value pairs: {words:?}");
    Some(
        words
            .chunks(2)
            .map(|p| (p[0].to_string(), p[1].to_string()))
            .collect(),
    )
}

#[test]
fn both_generators_send_the_same_requests() {
    for (preamble, bytes) in [
        ("", "32"),
        ("MC_VALUE_BYTES=200 MC_KEYS=500 MC_UPDATE_RATIO=0.1", "200"),
    ] {
        let Some(openloop) = flags(preamble, "openloop") else {
            return;
        };
        let weft_load = flags(preamble, "weft-load:50").expect("bash ran once");
        assert_eq!(openloop["--value-size"], bytes, "{openloop:?}");
        assert_eq!(
            weft_load["--value-size"],
            format!("fixed:{bytes}"),
            "{weft_load:?}"
        );
        for flag in ["--keys", "--update-ratio"] {
            assert_eq!(openloop.get(flag), weft_load.get(flag), "{flag}");
        }
        assert_eq!(openloop.len(), 3, "{openloop:?}");
    }
}
