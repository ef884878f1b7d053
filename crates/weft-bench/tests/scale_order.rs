//! benches/scale.sh's `round_order`: over 2 × servers rounds, each server runs in each place
//! of a round equally often (before, the middle one of three was always in the middle); and
//! `first_turn`: a table starts that cycle at a random turn, so a point of fewer rounds than
//! the cycle does not take the same places in every table. The `variants` mode's servers (names
//! with spaces) and the `generators` mode's pairs go through the same order.

use std::collections::HashMap;

use weft_testkit::run_bench_functions;

/// The lines printed by `program` run after the shell functions `functions` of scale.sh.
fn run_functions(functions: &[&str], preamble: &str, program: &str) -> Option<Vec<String>> {
    run_bench_functions("scale.sh", functions, preamble, program)
}

/// The orders `round_order` gives for turns `0..turns` of `names`.
fn orders(turns: usize, names: &[&str]) -> Option<Vec<Vec<String>>> {
    let calls: String = (0..turns)
        .map(|turn| format!("round_order {turn} {}\n", names.join(" ")))
        .collect();
    let lines = run_functions(&["round_order"], "", &calls)?;
    Some(
        lines
            .iter()
            .map(|l| l.split_whitespace().map(str::to_string).collect())
            .collect(),
    )
}

#[test]
fn each_server_takes_each_place_of_a_round_equally_often() {
    for names in [
        &["memcached-2", "memcached", "weft"][..],
        &[
            "nginx",
            "weft",
            "weft:--io,epoll",
            "weft:--scheduler,global-fifo",
        ][..],
    ] {
        let turns = 2 * names.len();
        let Some(orders) = orders(turns, names) else {
            return;
        };
        assert_eq!(orders.len(), turns);
        let mut places: HashMap<(&str, usize), usize> = HashMap::new();
        for order in &orders {
            let mut sorted = order.clone();
            sorted.sort();
            let mut expected: Vec<String> = names.iter().map(|n| n.to_string()).collect();
            expected.sort();
            assert_eq!(sorted, expected, "every server once a round: {order:?}");
            for (place, name) in order.iter().enumerate() {
                let name = names.iter().find(|n| **n == name).expect("a known name");
                *places.entry((name, place)).or_default() += 1;
            }
        }
        for name in names {
            for place in 0..names.len() {
                assert_eq!(
                    places.get(&(*name, place)),
                    Some(&2),
                    "{name} in place {place}: {orders:?}"
                );
            }
        }
    }
}

/// What `first_turn` prints for `names`, `calls` times in one shell, with `TURN0` as given
/// (empty: unset).
fn first_turns(calls: usize, turn0: &str, names: &[&str]) -> Option<Vec<usize>> {
    let program = format!("first_turn {}\n", names.join(" ")).repeat(calls);
    let lines = run_functions(&["first_turn"], &format!("TURN0={turn0}"), &program)?;
    Some(
        lines
            .iter()
            .map(|l| l.trim().parse().expect("a turn number"))
            .collect(),
    )
}

#[test]
fn a_table_starts_its_rounds_at_any_turn_of_the_cycle() {
    let names = ["memcached-2", "memcached", "weft"];
    // Unset: any of the 2 × 3 turns after which round_order repeats, so a point's four
    // rounds take different places from table to table (from turn 0 every table gave weft
    // the same two places at 1,000 connections and 50 %). 600 draws miss one of six turns
    // with a chance of about 6 × (5/6)^600, never in practice.
    let Some(turns) = first_turns(600, "", &names) else {
        return;
    };
    let mut seen = [0usize; 6];
    for turn in turns {
        assert!(turn < 6, "turn {turn} is outside the cycle");
        seen[turn] += 1;
    }
    assert!(seen.iter().all(|&n| n > 0), "turns drawn: {seen:?}");
    // TURN0 repeats a table's order.
    let Some(turns) = first_turns(3, "4", &names) else {
        return;
    };
    assert_eq!(turns, [4, 4, 4]);
}

#[test]
fn a_round_of_servers_whose_names_hold_spaces_takes_round_orders_places() {
    // The `variants` mode's seven servers, as `one_round` gets them. Until 2026-11-30 that
    // mode only reversed every other round, so the fourth of seven ran fourth in every round.
    let names = [
        "memcached",
        "weft",
        "weft --io epoll",
        "weft --scheduler work-stealing",
        "weft --scheduler relaxed-fifo",
        "weft --scheduler lifo-stealing",
        "weft --scheduler global-fifo",
    ];
    let quoted: Vec<String> = names.iter().map(|n| format!("'{n}'")).collect();
    // `point` stubbed: one row naming the server and the round's turn and place.
    let preamble = r#"work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
point() { printf '{"server": "%s", "turn": %s, "place": %s}\n' "$2" "$round_turn" "$round_place"; }"#;
    let turns = 2 * names.len();
    let program = format!(
        "for t in $(seq 0 {}); do one_round $t mc 15360 1000 50 2000 {}; done\ncat \"$work/table.jsonl\"\n",
        turns - 1,
        quoted.join(" ")
    );
    let Some(lines) = run_functions(&["round_order", "one_round"], preamble, &program) else {
        return;
    };
    for row in rows_in_round_order(&lines, &names) {
        assert_eq!(row["fraction"].as_u64(), Some(50), "{row}");
        assert_eq!(row["peer_peak"].as_u64(), Some(2000), "{row}");
    }
}

/// The rows `lines` of 2 × `names` rounds run from turn 0, checked: row `i` is of round
/// `i / names` and takes place `i % names` in it, names one of `names`, and each name takes
/// each place twice. Returns the rows.
fn rows_in_round_order(lines: &[String], names: &[&str]) -> Vec<serde_json::Value> {
    let n = names.len();
    assert_eq!(lines.len(), 2 * n * n, "{lines:?}");
    let mut places: HashMap<(String, u64), usize> = HashMap::new();
    let rows: Vec<serde_json::Value> = lines
        .iter()
        .map(|line| serde_json::from_str(line).expect("a JSON row"))
        .collect();
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(row["turn"].as_u64(), Some((i / n) as u64), "{row}");
        let place = row["place"].as_u64().expect("a place");
        assert_eq!(place, (i % n) as u64, "{row}");
        let server = row["server"].as_str().expect("a server").to_string();
        assert!(names.contains(&server.as_str()), "{server}");
        *places.entry((server, place)).or_default() += 1;
    }
    for name in names {
        for place in 0..n as u64 {
            assert_eq!(
                places.get(&(name.to_string(), place)),
                Some(&2),
                "{name} in place {place}"
            );
        }
    }
    rows
}

/// Runs the `generators` mode's rounds for a whole cycle of turns, with `GENERATORS` set to
/// `generators` when given, and checks that `pairs` take round_order's places.
fn generator_rounds_take_round_orders_places(generators: Option<&str>, pairs: &[&str]) {
    let set = generators.map_or(String::new(), |g| format!("GENERATORS=\"{g}\""));
    let preamble = format!(
        r#"work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
{set}
point() {{ printf '{{"server": "%s", "generator": "%s", "turn": %s, "place": %s}}\n' "$2" "$5" "$round_turn" "$round_place"; }}"#
    );
    let turns = 2 * pairs.len();
    let program = format!(
        "for t in $(seq 0 {}); do generator_round $t 15360 50000; done\ncat \"$work/table.jsonl\"\n",
        turns - 1
    );
    let Some(lines) = run_functions(&["round_order", "generator_round"], &preamble, &program)
    else {
        return;
    };
    rows_in_round_order(&lines, pairs);
}

#[test]
fn the_generators_mode_takes_its_pairs_in_round_orders_places() {
    // Until 2026-11-30 every round ran memcached with openloop first and weft with `weft
    // load` last.
    generator_rounds_take_round_orders_places(
        None,
        &[
            "memcached / openloop",
            "memcached / weft-load",
            "weft / openloop",
            "weft / weft-load",
        ],
    );
}

#[test]
fn the_generators_mode_adds_a_pair_per_server_for_each_generator_it_is_given() {
    // `weft load` with and without its idle poll against openloop, on each server, six pairs
    // in round_order's places.
    generator_rounds_take_round_orders_places(
        Some("openloop weft-load weft-load:50"),
        &[
            "memcached / openloop",
            "memcached / weft-load",
            "memcached / weft-load:50",
            "weft / openloop",
            "weft / weft-load",
            "weft / weft-load:50",
        ],
    );
}
