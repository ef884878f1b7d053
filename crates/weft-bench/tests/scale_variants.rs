//! benches/scale.sh's `variants` mode (`variants_sweep`): the peer and weft with each backend
//! and core policy at each `CONNS:PERCENT` of `VARIANT_POINTS`, at that share of the peer's
//! peak measured once per connection count. Until 2026-12-03 the mode ran one point
//! (15,360 connections at 50 %) only, so a backend or policy that regressed at 1,000 or 4,000
//! connections, or at a quarter or three quarters of the peak, did not show.

use std::collections::BTreeMap;

use weft_testkit::run_bench_functions;

const SERVERS: usize = 7;

/// `point` stubbed: a peak run (400,000 req/s offered) reports twice the connection count as
/// its rate and is logged to `$work/peaks`; any other run is one row naming the server, the
/// connection count and the rate. Under the script's own `set -euo pipefail`.
const PREAMBLE: &str = r#"set -euo pipefail
TURN0=
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
point() {
  if [ "$4" = 400000 ]; then echo "$2 $3" >>"$work/peaks"; printf '{"actual_qps": %s}\n' $(($3 * 2)); return; fi
  printf '{"server": "%s", "connections": %s, "qps": %s}\n' "$2" "$3" "$4"
}"#;

const FUNCTIONS: &[&str] = &["round_order", "first_turn", "one_round", "variants_sweep"];

/// The rows and the peak runs of `variants_sweep PROTO` with `settings` (shell assignments).
fn sweep(settings: &str, proto: &str) -> Option<(Vec<serde_json::Value>, Vec<String>)> {
    let preamble = format!("{PREAMBLE}\n{settings}");
    let program = format!(
        "variants_sweep {proto} 2>/dev/null\ncat \"$work/table.jsonl\"\necho PEAKS\ncat \"$work/peaks\"\n"
    );
    let lines = run_bench_functions("scale.sh", FUNCTIONS, &preamble, &program)?;
    let split = lines.iter().position(|l| l == "PEAKS").expect("the marker");
    let rows = lines[..split]
        .iter()
        .map(|l| serde_json::from_str(l).expect("a JSON row"))
        .collect();
    Some((rows, lines[split + 1..].to_vec()))
}

#[test]
fn every_point_of_variant_points_runs_each_server_at_its_share_of_the_peak() {
    let Some((rows, peaks)) = sweep("ROUNDS=2 VARIANT_POINTS=\"1000:25 4000:50 1000:75\"", "mc")
    else {
        return;
    };
    // The peak once per connection count, by the peer.
    assert_eq!(peaks, ["memcached 1000", "memcached 4000"]);
    assert_eq!(rows.len(), 3 * 2 * SERVERS, "{rows:?}");
    let mut per_point: BTreeMap<(u64, u64), BTreeMap<String, usize>> = BTreeMap::new();
    for row in &rows {
        let conns = row["connections"].as_u64().expect("connections");
        let fraction = row["fraction"].as_u64().expect("fraction");
        assert_eq!(row["peer_peak"].as_u64(), Some(conns * 2), "{row}");
        assert_eq!(
            row["qps"].as_u64(),
            Some(conns * 2 * fraction / 100),
            "{row}"
        );
        let server = row["server"].as_str().expect("server").to_string();
        *per_point
            .entry((conns, fraction))
            .or_default()
            .entry(server)
            .or_default() += 1;
    }
    assert_eq!(
        per_point.keys().copied().collect::<Vec<_>>(),
        [(1000, 25), (1000, 75), (4000, 50)]
    );
    for (point, servers) in &per_point {
        assert_eq!(servers.len(), SERVERS, "{point:?}: {servers:?}");
        assert!(servers.values().all(|&n| n == 2), "{point:?}: {servers:?}");
        assert!(servers.contains_key("memcached") && servers.contains_key("weft --io epoll"));
    }
}

#[test]
fn without_variant_points_the_mode_runs_fifteen_thousand_connections_at_half_the_peak() {
    let Some((rows, peaks)) = sweep("ROUNDS=1", "http") else {
        return;
    };
    assert_eq!(peaks, ["nginx 15360"]);
    assert_eq!(rows.len(), SERVERS);
    for row in &rows {
        assert_eq!(row["connections"].as_u64(), Some(15360), "{row}");
        assert_eq!(row["fraction"].as_u64(), Some(50), "{row}");
        assert_eq!(row["qps"].as_u64(), Some(15360), "{row}");
    }
}

#[test]
fn a_point_that_is_not_connections_and_percent_is_refused_before_anything_runs() {
    for bad in ["15360", "1000:", "1000:25%", "a:50"] {
        let program =
            "( variants_sweep mc ) 2>&1 || echo \"rc=$?\"; cat \"$work/peaks\" 2>/dev/null || true\n";
        let preamble = format!("{PREAMBLE}\nROUNDS=1 VARIANT_POINTS=\"4000:50 {bad}\"");
        let Some(lines) = run_bench_functions("scale.sh", FUNCTIONS, &preamble, program) else {
            return;
        };
        assert!(
            lines[0].contains("VARIANT_POINTS takes CONNS:PERCENT") && lines[0].contains(bad),
            "{bad}: {lines:?}"
        );
        assert_eq!(lines[1..], ["rc=2"], "{bad}: nothing measured: {lines:?}");
    }
}
