//! Presenting [`Record`]s: an aligned text table for terminals and markdown for the docs.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use crate::Record;

/// The header of the text table; [`table_row`] lines up under it.
pub fn table_header() -> String {
    format!(
        "{:<17} {:<7} {:<14} {:>5} {:>7} {:<7} {:>12} {:>8} {:>14} {:>10} {:>11}",
        "benchmark",
        "runtime",
        "scheduler",
        "procs",
        "fibers",
        "variant",
        "ops",
        "seconds",
        "ops/s",
        "ns/op",
        "rss B/fiber"
    )
}

/// One record as a line of the text table.
pub fn table_row(r: &Record) -> String {
    let rss = r
        .rss_bytes_per_fiber
        .map_or_else(|| "-".to_owned(), |b| format!("{b:.0}"));
    format!(
        "{:<17} {:<7} {:<14} {:>5} {:>7} {:<7} {:>12} {:>8.3} {:>14.0} {:>10.1} {:>11}",
        r.benchmark,
        r.runtime,
        r.scheduler,
        r.processors,
        r.fibers,
        r.variant,
        r.ops,
        r.seconds,
        r.ops_per_sec,
        r.ns_per_op,
        rss
    )
}

/// The throughput benchmarks, in the order the markdown shows them.
const THROUGHPUT: &[&str] = &[
    "cycle",
    "yield",
    "churn",
    "locality-shared",
    "locality-noshare",
    "transfer",
];
/// The benchmarks whose weft/tokio ratio the team tracks, at `RATIO_PROCESSORS`.
const RATIO: &[&str] = &["cycle", "yield", "churn"];
const RATIO_PROCESSORS: usize = 2;

/// Schedulers in the order columns show them: weft policies as they appear, tokio last.
fn schedulers(records: &[Record]) -> Vec<String> {
    let mut seen = Vec::<String>::new();
    for r in records {
        if r.scheduler != "tokio" && !seen.contains(&r.scheduler) {
            seen.push(r.scheduler.clone());
        }
    }
    if records.iter().any(|r| r.scheduler == "tokio") {
        seen.push("tokio".to_owned());
    }
    seen
}

/// The median of `field` over the records matching `pred` (runs that repeat a point); the
/// mean of the middle two for an even count. The median rather than the best run: on a shared
/// machine a run whose processor thread lost its core can post an inflated number (the other
/// processor's fibers run uncontended meanwhile).
fn median(
    records: &[Record],
    pred: impl Fn(&Record) -> bool,
    field: impl Fn(&Record) -> Option<f64>,
) -> Option<f64> {
    let values: Vec<f64> = records
        .iter()
        .filter(|r| pred(r))
        .filter_map(field)
        .collect();
    if values.is_empty() {
        return None;
    }
    Some(crate::stats::median(&values))
}

fn ops_per_sec(r: &Record) -> Option<f64> {
    Some(r.ops_per_sec)
}

fn ns_per_op(r: &Record) -> Option<f64> {
    Some(r.ns_per_op)
}

/// Millions of operations per second, to three significant digits (transfer runs at thousands).
fn millions(ops_per_sec: f64) -> String {
    let m = ops_per_sec / 1e6;
    let decimals = if m >= 100.0 {
        0
    } else if m >= 10.0 {
        1
    } else if m >= 1.0 {
        2
    } else if m > 0.0 {
        // Two more than the number of leading zeros after the point.
        (2 - m.log10().floor() as i64).clamp(2, 8) as usize
    } else {
        2
    };
    format!("{m:.decimals$}")
}

/// Rows show the many-fiber preset first, then few, then custom counts.
fn variant_rank(variant: &str) -> u8 {
    match variant {
        "many" => 0,
        "few" => 1,
        _ => 2,
    }
}

/// Markdown tables of `records`: throughput per benchmark (M ops/s, one column per
/// scheduler), switch and spawn+join latency, memory per sleeping fiber, and the ratio of the
/// best weft policy to tokio for cycle, yield and churn at two processors. When a point was
/// run more than once, the median run is shown.
pub fn markdown(records: &[Record]) -> String {
    let scheds = schedulers(records);
    let mut out = String::new();
    let header = |out: &mut String, first: &[&str]| {
        let cols: Vec<String> = first
            .iter()
            .map(|s| (*s).to_owned())
            .chain(scheds.iter().cloned())
            .collect();
        let _ = writeln!(out, "| {} |", cols.join(" | "));
        let _ = writeln!(out, "|{}", "---|".repeat(cols.len()));
    };

    let _ = writeln!(
        out,
        "Throughput in millions of operations per second (higher is better).\n"
    );
    for bench in THROUGHPUT {
        let rows: BTreeSet<(usize, u8, String, usize)> = records
            .iter()
            .filter(|r| r.benchmark == *bench)
            .map(|r| {
                let rank = variant_rank(&r.variant);
                (r.processors, rank, r.variant.clone(), r.fibers)
            })
            .collect();
        if rows.is_empty() {
            continue;
        }
        let _ = writeln!(out, "**{bench}**\n");
        header(&mut out, &["procs", "variant", "fibers"]);
        for (procs, _, variant, fibers) in rows {
            let cells: Vec<String> = scheds
                .iter()
                .map(|s| {
                    let at = |r: &Record| {
                        r.benchmark == *bench
                            && r.processors == procs
                            && r.variant == variant
                            && r.fibers == fibers
                            && r.scheduler == *s
                    };
                    median(records, at, ops_per_sec).map_or_else(|| "-".to_owned(), millions)
                })
                .collect();
            let _ = writeln!(
                out,
                "| {procs} | {variant} | {fibers} | {} |",
                cells.join(" | ")
            );
        }
        let _ = writeln!(out);
    }

    for (bench, what) in [
        (
            "switch",
            "ns per fiber-to-fiber switch (two fibers, one processor)",
        ),
        (
            "switch-raw",
            "ns per raw corosensei resume+suspend round trip",
        ),
        (
            "spawn-join",
            "ns per spawn + join of an empty fiber, from a fiber",
        ),
    ] {
        let procs: BTreeSet<usize> = records
            .iter()
            .filter(|r| r.benchmark == bench)
            .map(|r| r.processors)
            .collect();
        if procs.is_empty() {
            continue;
        }
        let _ = writeln!(out, "**{bench}**: {what} (lower is better)\n");
        header(&mut out, &["procs"]);
        for p in procs {
            let cells: Vec<String> = scheds
                .iter()
                .map(|s| {
                    let at =
                        |r: &Record| r.benchmark == bench && r.processors == p && r.scheduler == *s;
                    median(records, at, ns_per_op)
                        .map_or_else(|| "-".to_owned(), |ns| format!("{ns:.1}"))
                })
                .collect();
            let _ = writeln!(out, "| {p} | {} |", cells.join(" | "));
        }
        let _ = writeln!(out);
    }

    let sleepers: Vec<&Record> = records
        .iter()
        .filter(|r| r.benchmark == "sleepers")
        .collect();
    if !sleepers.is_empty() {
        let _ = writeln!(
            out,
            "**sleepers**: resident bytes per sleeping fiber (lower is better)\n"
        );
        header(&mut out, &["procs", "fibers"]);
        let rows: BTreeSet<(usize, usize)> =
            sleepers.iter().map(|r| (r.processors, r.fibers)).collect();
        for (p, n) in rows {
            let cells: Vec<String> = scheds
                .iter()
                .map(|s| {
                    let at = |r: &Record| {
                        r.benchmark == "sleepers"
                            && r.processors == p
                            && r.fibers == n
                            && r.scheduler == *s
                    };
                    median(records, at, |r| r.rss_bytes_per_fiber)
                        .map_or_else(|| "-".to_owned(), |b| format!("{b:.0}"))
                })
                .collect();
            let _ = writeln!(out, "| {p} | {n} | {} |", cells.join(" | "));
        }
        let _ = writeln!(out);
    }

    let _ = writeln!(
        out,
        "**weft's best policy vs tokio at {RATIO_PROCESSORS} processors** (target: ≥ 1.5×)\n"
    );
    let _ = writeln!(
        out,
        "| benchmark | variant | best weft policy | weft M ops/s | tokio M ops/s | weft/tokio |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|");
    for bench in RATIO {
        for variant in ["many", "few"] {
            let at = |r: &Record| {
                r.benchmark == *bench && r.processors == RATIO_PROCESSORS && r.variant == variant
            };
            let weft = scheds
                .iter()
                .filter(|s| *s != "tokio")
                .filter_map(|s| {
                    median(records, |r| at(r) && r.scheduler == *s, ops_per_sec).map(|m| (s, m))
                })
                .max_by(|a, b| a.1.total_cmp(&b.1));
            let tokio = median(records, |r| at(r) && r.runtime == "tokio", ops_per_sec);
            if let (Some((policy, w)), Some(t)) = (weft, tokio) {
                let _ = writeln!(
                    out,
                    "| {bench} | {variant} | {policy} | {} | {} | {:.2}× |",
                    millions(w),
                    millions(t),
                    w / t
                );
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(bench: &str, runtime: &str, sched: &str, procs: usize, ops: u64) -> Record {
        let mut r = Record::new(bench, ops, 1.0);
        r.runtime = runtime.to_owned();
        r.scheduler = sched.to_owned();
        r.processors = procs;
        r.fibers = 10;
        r.variant = "many".to_owned();
        r
    }

    #[test]
    fn table_row_lines_up_with_header() {
        let r = rec("cycle", "weft", "global-fifo", 2, 1_000_000);
        assert_eq!(table_header().len(), table_row(&r).len());
    }

    #[test]
    fn markdown_has_columns_and_ratio() {
        let records = vec![
            rec("cycle", "weft", "global-fifo", 2, 3_000_000),
            rec("cycle", "weft", "work-stealing", 2, 6_000_000),
            rec("cycle", "tokio", "tokio", 2, 2_000_000),
        ];
        let md = markdown(&records);
        assert!(md.contains("| procs | variant | fibers | global-fifo | work-stealing | tokio |"));
        assert!(md.contains("| 2 | many | 10 | 3.00 | 6.00 | 2.00 |"));
        assert!(md.contains("| cycle | many | work-stealing | 6.00 | 2.00 | 3.00× |"));
    }

    #[test]
    fn repeated_points_show_the_median() {
        let records = vec![
            rec("yield", "weft", "global-fifo", 2, 1_000_000),
            rec("yield", "weft", "global-fifo", 2, 9_000_000),
            rec("yield", "weft", "global-fifo", 2, 2_000_000),
            rec("yield", "tokio", "tokio", 2, 1_000_000),
            rec("yield", "tokio", "tokio", 2, 3_000_000),
        ];
        let md = markdown(&records);
        assert!(md.contains("| 2 | many | 10 | 2.00 | 2.00 |"), "{md}");
        assert!(
            md.contains("| yield | many | global-fifo | 2.00 | 2.00 | 1.00× |"),
            "{md}"
        );
    }

    #[test]
    fn millions_keeps_three_significant_digits() {
        assert_eq!(millions(123_456_789.0), "123");
        assert_eq!(millions(12_345_678.0), "12.3");
        assert_eq!(millions(1_234_567.0), "1.23");
        assert_eq!(millions(123_456.0), "0.123");
        assert_eq!(millions(2_046.0), "0.00205");
        assert_eq!(millions(0.0), "0.00");
    }
}
