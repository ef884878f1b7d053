//! `weft experiment study`: the scheduler study's sweep. Every study benchmark runs under every
//! policy (or `--schedulers`) on 1, 2 and 4 processors (4 is more processors than this
//! machine's cores when it has 2: oversubscription), plus tokio where the benchmark has a tokio
//! version, `--runs` times each, in this process.
//!
//! Writes `OUT/study-results.json` (every outcome with its run number), `OUT/study-results.csv`,
//! `OUT/study-summary.md` (median throughput and p99 per policy and processor count, the tables
//! docs/SCHEDULERS.md quotes) and, per benchmark, `OUT/study-<benchmark>-throughput.svg` and
//! `OUT/study-<benchmark>-p99.svg` (one line per policy over the processor count, median inside a
//! min–max band), and `OUT/report.html`. Each run takes the policies one right after another at
//! each benchmark and processor count, the first one rotating by run ([`super::server_order`]).
//! Ctrl-C stops after the current benchmark and still writes what was measured.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use super::plot::{self, Axes, Panel, Series, Unit};
use crate::stats::median_min_max;
use crate::study::{self, Outcome, Params, Runtime, Study};
use anyhow::Context;
use serde::Serialize;

/// Processor counts swept.
pub const PROCESSORS: [usize; 3] = [1, 2, 4];

/// The audio benchmark streams this long per run (shorter than its 1 s default: it dominates
/// the sweep otherwise).
const AUDIO_MS: u64 = 500;

/// One measured outcome and its run number.
#[derive(Debug, Clone, Serialize)]
struct Measured {
    run: usize,
    #[serde(flatten)]
    outcome: Outcome,
}

/// Runs the sweep into `out`.
pub fn run(out: &Path, runs: usize, schedulers: &[String]) -> anyhow::Result<()> {
    anyhow::ensure!(runs >= 1, "--runs must be at least 1");
    let policies: Vec<String> = if schedulers.is_empty() {
        weft::sched::names()
            .into_iter()
            .map(str::to_owned)
            .collect()
    } else {
        for s in schedulers {
            weft::sched::by_name(s, 1)?;
        }
        schedulers.to_vec()
    };
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let started = std::time::Instant::now();
    let interrupted = crate::process::interrupt_flag()?;
    let mut measured = Vec::new();
    let mut result = Ok(());
    'sweep: for run in 1..=runs {
        for &bench in Study::ALL {
            for processors in PROCESSORS {
                // The policies one after another, who goes first rotating by run.
                let labels = labels(bench, &policies);
                for i in super::server_order(labels.len(), run - 1) {
                    let label = &labels[i];
                    if interrupted.load(Ordering::Relaxed) {
                        result = Err(anyhow::anyhow!("interrupted; wrote what was measured"));
                        break 'sweep;
                    }
                    let params = params_for(label, processors);
                    eprintln!("run {run}/{runs}: {bench} {label} x{processors}");
                    let outcomes = study::run(bench, &params)
                        .with_context(|| format!("{bench} {label} x{processors}"))?;
                    measured.extend(
                        outcomes
                            .into_iter()
                            .map(|outcome| Measured { run, outcome }),
                    );
                }
            }
        }
    }
    write_results(out, &measured)?;
    let summary = summary(&measured);
    std::fs::write(out.join("study-summary.md"), &summary)?;
    print!("{summary}");
    let plots = draw_plots(out, &measured)?;
    let info = super::output::RunInfo {
        command: std::env::args().collect::<Vec<_>>().join(" "),
        seconds: started.elapsed().as_secs_f64(),
        notes: Vec::new(),
        settings: format!(
            "{runs} run(s); policies {}; {PROCESSORS:?} processors; audio {AUDIO_MS} ms",
            policies.join(", ")
        ),
        design: "Every study benchmark runs in this process under every policy (and tokio \
                 where the benchmark has a tokio version) on 1, 2 and 4 processors. Each run \
                 takes the policies one right after another at each benchmark and processor \
                 count, the one that goes first rotating from run to run."
            .into(),
        raw: vec![
            "study-results.csv".into(),
            "study-results.json".into(),
            "study-summary.md".into(),
        ],
    };
    super::output::write_report_with(out, measured.len(), &summary, &plots, &info)?;
    eprintln!("wrote {}", out.display());
    result
}

/// The weft policies, then "tokio" when `bench` has a tokio version.
fn labels(bench: Study, policies: &[String]) -> Vec<String> {
    let mut labels = policies.to_vec();
    if bench.has_tokio() {
        labels.push("tokio".to_owned());
    }
    labels
}

fn params_for(label: &str, processors: usize) -> Params {
    let runtime = if label == "tokio" {
        Runtime::Tokio
    } else {
        Runtime::Weft
    };
    let mut params = Params::new(runtime, processors);
    if runtime == Runtime::Weft {
        params.scheduler = label.to_owned();
    }
    params.audio_ms = AUDIO_MS;
    params
}

/// The name a result is plotted and tabulated under: the scheduler, plus the layout for
/// packet-staged.
fn series_name(o: &Outcome) -> String {
    match o.extra_str("variant") {
        Some(v) => format!("{} ({v})", o.scheduler),
        None => o.scheduler.clone(),
    }
}

fn write_results(out: &Path, measured: &[Measured]) -> anyhow::Result<()> {
    let json = serde_json::to_string_pretty(measured)?;
    std::fs::write(out.join("study-results.json"), json)?;
    let mut csv = String::from(
        "benchmark,variant,runtime,scheduler,processors,run,tasks,seconds,tasks_per_sec,\
         p50_ns,p99_ns,p9999_ns,retries,deadline_misses\n",
    );
    for m in measured {
        let o = &m.outcome;
        let num = |k: &str| o.extra_f64(k).map_or(String::new(), |v| v.to_string());
        writeln!(
            csv,
            "{},{},{},{},{},{},{},{:.6},{:.1},{},{},{},{},{}",
            o.benchmark,
            o.extra_str("variant").unwrap_or(""),
            o.runtime,
            o.scheduler,
            o.processors,
            m.run,
            o.tasks,
            o.seconds,
            o.tasks_per_sec,
            o.latency_ns.p50,
            o.latency_ns.p99,
            o.latency_ns.p9999,
            num("retries"),
            num("deadline_misses"),
        )?;
    }
    std::fs::write(out.join("study-results.csv"), csv)?;
    Ok(())
}

/// benchmark → series → processors → values of `metric`.
type Grouped = BTreeMap<String, BTreeMap<String, BTreeMap<usize, Vec<f64>>>>;

fn group(measured: &[Measured], metric: impl Fn(&Outcome) -> f64) -> Grouped {
    let mut g = Grouped::new();
    for m in measured {
        let o = &m.outcome;
        g.entry(o.benchmark.clone())
            .or_default()
            .entry(series_name(o))
            .or_default()
            .entry(o.processors)
            .or_default()
            .push(metric(o));
    }
    g
}

fn throughput(o: &Outcome) -> f64 {
    o.tasks_per_sec
}

fn p99_us(o: &Outcome) -> f64 {
    o.latency_ns.p99 as f64 / 1000.0
}

/// Markdown tables: per benchmark, median throughput and p99 for each series and processor
/// count, best throughput in bold.
fn summary(measured: &[Measured]) -> String {
    let tput = group(measured, throughput);
    let p99 = group(measured, p99_us);
    let mut s = String::new();
    for (bench, series) in &tput {
        let _ = writeln!(s, "\n### {bench}\n");
        let mut head = String::from("| policy |");
        let mut rule = String::from("|---|");
        for p in PROCESSORS {
            let _ = write!(head, " {p}P tasks/s | {p}P p99 µs |");
            rule.push_str("---:|---:|");
        }
        let _ = writeln!(s, "{head}\n{rule}");
        let best: BTreeMap<usize, f64> = PROCESSORS
            .iter()
            .map(|&p| {
                let top = series
                    .values()
                    .filter_map(|by_p| by_p.get(&p))
                    .map(|v| median_min_max(&mut v.clone()).0)
                    .fold(0.0, f64::max);
                (p, top)
            })
            .collect();
        for (name, by_p) in series {
            let mut row = format!("| {name} |");
            for p in PROCESSORS {
                let Some(values) = by_p.get(&p) else {
                    row.push_str(" – | – |");
                    continue;
                };
                let (t, _, _) = median_min_max(&mut values.clone());
                let lat = p99[bench][name]
                    .get(&p)
                    .map_or(f64::NAN, |v| median_min_max(&mut v.clone()).0);
                let t = if t == best[&p] {
                    format!("**{t:.0}**")
                } else {
                    format!("{t:.0}")
                };
                let _ = write!(row, " {t} | {lat:.0} |");
            }
            let _ = writeln!(s, "{row}");
        }
    }
    s
}

/// Draws `OUT/study-<benchmark>-throughput.svg` and `-p99.svg`; returns the files written.
fn draw_plots(out: &Path, measured: &[Measured]) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for (metric, file, what, y, y_unit, log_y) in [
        (
            throughput as fn(&Outcome) -> f64,
            "throughput",
            "throughput",
            "throughput (tasks/s)",
            Unit::Count,
            false,
        ),
        (
            p99_us,
            "p99",
            "p99 latency",
            "p99 latency (log scale)",
            Unit::Micros,
            true,
        ),
    ] {
        for (bench, series) in group(measured, metric) {
            let series: Vec<Series> = series
                .into_iter()
                .map(|(name, by_p)| Series {
                    name,
                    points: by_p
                        .into_iter()
                        .map(|(p, mut v)| {
                            let (med, min, max) = median_min_max(&mut v);
                            (p as f64, med, min, max)
                        })
                        .collect(),
                })
                .collect();
            let panel = Panel {
                title: format!("{bench}: {what} by processors"),
                series,
            };
            let axes = Axes {
                x: "processors",
                y,
                y_unit,
                log_y,
            };
            let path = out.join(format!("study-{bench}-{file}.svg"));
            plot::draw(
                &path,
                &format!("weft scheduler study: {bench}"),
                &axes,
                &[panel],
            )?;
            files.push(path);
        }
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokio_only_where_the_benchmark_has_it() {
        let p = vec!["global-fifo".to_owned()];
        assert_eq!(labels(Study::Audio, &p), ["global-fifo"]);
        assert_eq!(labels(Study::Options, &p), ["global-fifo", "tokio"]);
        assert_eq!(params_for("tokio", 2).runtime, Runtime::Tokio);
        assert_eq!(params_for("ws-grow", 4).scheduler, "ws-grow");
    }

    #[test]
    fn summary_and_plots_from_real_outcomes() {
        let mut params = Params::new(Runtime::Weft, 1);
        params.tasks = Some(200);
        let outcomes = study::run(Study::Packet, &params).unwrap();
        let measured: Vec<Measured> = (1..=2)
            .flat_map(|run| {
                outcomes
                    .iter()
                    .cloned()
                    .map(move |outcome| Measured { run, outcome })
            })
            .collect();
        let s = summary(&measured);
        assert!(
            s.contains("### packet") && s.contains("| work-stealing |"),
            "{s}"
        );
        let dir = std::env::temp_dir().join(format!("weft-study-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        write_results(&dir, &measured).unwrap();
        draw_plots(&dir, &measured).unwrap();
        let csv = std::fs::read_to_string(dir.join("study-results.csv")).unwrap();
        assert_eq!(csv.lines().count(), 3);
        assert!(dir.join("study-packet-throughput.svg").exists());
        assert!(dir.join("study-packet-p99.svg").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
