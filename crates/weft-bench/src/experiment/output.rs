//! What an experiment leaves behind: `results.json` and `results.csv` (every run of every
//! point), SVG plots of the medians with min–max bands, and a summary table.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context;

use super::plot::{self, Axes, Panel, Series, Unit};
use super::Point;
use crate::stats::median_min_max;

/// Writes the raw results; returns the files written.
pub fn write_raw(out: &Path, points: &[Point]) -> anyhow::Result<Vec<PathBuf>> {
    let json = out.join("results.json");
    std::fs::write(&json, serde_json::to_string_pretty(points)?)
        .with_context(|| format!("writing {}", json.display()))?;
    let csv = out.join("results.csv");
    let mut text = String::from(
        "experiment,panel,server,target,run,actual,p50_us,p90_us,p99_us,p999_us,max_us,errors,timeouts,error_rate_pct,generator_saturated\n",
    );
    for p in points {
        let _ = writeln!(
            text,
            "{},{},{},{},{},{:.1},{},{},{},{},{},{},{},{:.3},{}",
            p.experiment,
            p.panel,
            p.server,
            p.target,
            p.run,
            p.actual,
            p.p50_us,
            p.p90_us,
            p.p99_us,
            p.p999_us,
            p.max_us,
            p.errors,
            p.timeouts,
            p.error_rate_pct,
            p.generator_saturated
        );
    }
    std::fs::write(&csv, text).with_context(|| format!("writing {}", csv.display()))?;
    Ok(vec![json, csv])
}

/// Median, min and max of `f` over the runs of each (panel, server, target), per experiment.
type Grouped<'a> = BTreeMap<(String, String), BTreeMap<String, Vec<&'a Point>>>;

fn group(points: &[Point]) -> BTreeMap<String, Grouped<'_>> {
    let mut by: BTreeMap<String, Grouped<'_>> = BTreeMap::new();
    for p in points {
        by.entry(p.experiment.clone())
            .or_default()
            .entry((p.panel.clone(), p.server.clone()))
            .or_default()
            .entry(format!("{:020.3}", p.target))
            .or_default()
            .push(p);
    }
    by
}

fn panels(grouped: &Grouped<'_>, f: impl Fn(&Point) -> f64) -> Vec<Panel> {
    let mut panels: Vec<Panel> = Vec::new();
    for ((panel, server), targets) in grouped {
        let points = targets
            .values()
            .map(|runs| {
                let mut v: Vec<f64> = runs.iter().map(|p| f(p)).collect();
                let (med, lo, hi) = median_min_max(&mut v);
                (runs[0].target, med, lo, hi)
            })
            .collect();
        let series = Series {
            name: server.clone(),
            points,
        };
        match panels.iter_mut().find(|p| &p.title == panel) {
            Some(p) => p.series.push(series),
            None => panels.push(Panel {
                title: panel.clone(),
                series: vec![series],
            }),
        }
    }
    // "3% updates" before "10% updates".
    panels.sort_by_key(|p| {
        p.title
            .split('%')
            .next()
            .and_then(|n| n.parse::<u32>().ok())
            .unwrap_or(0)
    });
    panels
}

/// One figure: file suffix, title, axes, and the value plotted.
type Figure = (&'static str, String, Axes<'static>, fn(&Point) -> f64);

/// The figures of `experiment`: throughput against offered load, p99 latency on a log scale
/// and, for the static experiments, the error rate; every server of a setting in one panel.
pub fn figures(experiment: &str) -> Vec<Figure> {
    let (what, offered, done) = match experiment {
        "static" => ("Static files", "offered load (requests/s)", "replies/s"),
        "disk" => (
            "Static files from disk",
            "offered load (requests/s)",
            "replies/s",
        ),
        "updates" => (
            "memcached protocol by update share",
            "offered load (req/s)",
            "req/s",
        ),
        "memcached" => ("memcached protocol", "offered load (req/s)", "req/s"),
        other => (other, "offered load (req/s)", "req/s"),
    };
    let throughput_axis = match done {
        "replies/s" => "throughput (replies/s)",
        _ => "throughput (req/s)",
    };
    let mut figures: Vec<Figure> = vec![
        (
            "throughput",
            format!("{what}: throughput vs offered load"),
            Axes {
                x: offered,
                y: throughput_axis,
                y_unit: Unit::Count,
                log_y: false,
            },
            |p| p.actual,
        ),
        (
            "p99",
            format!("{what}: p99 latency vs offered load"),
            Axes {
                x: offered,
                y: "p99 latency (log scale)",
                y_unit: Unit::Micros,
                log_y: true,
            },
            |p| p.p99_us as f64,
        ),
    ];
    if experiment == "static" || experiment == "disk" {
        figures.push((
            "errors",
            format!("{what}: error rate vs offered load"),
            Axes {
                x: offered,
                y: "error rate (% of requests)",
                y_unit: Unit::Percent,
                log_y: false,
            },
            |p| p.error_rate_pct,
        ));
    }
    figures
}

/// Draws the figures of every experiment present; returns the files written.
pub fn write_plots(out: &Path, points: &[Point]) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for (experiment, grouped) in group(points) {
        for (name, title, axes, f) in figures(&experiment) {
            let path = out.join(format!("{experiment}-{name}.svg"));
            plot::draw(&path, &title, &axes, &panels(&grouped, f))
                .with_context(|| format!("drawing {}", path.display()))?;
            files.push(path);
        }
    }
    Ok(files)
}

/// A markdown table: per experiment, panel, server and target, the medians.
/// The closing line of a run: how many points, how long, which files.
pub fn print_written(points: usize, started: std::time::Instant, files: &[PathBuf]) {
    println!(
        "{} points in {:.0} s; wrote {}",
        points,
        started.elapsed().as_secs_f64(),
        files
            .iter()
            .map(|f| f.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
}

pub fn summary(points: &[Point]) -> String {
    let mut s = String::new();
    for (experiment, grouped) in group(points) {
        let _ = writeln!(s, "\n{experiment}");
        let _ = writeln!(
            s,
            "| setting | server | offered/s | throughput/s (median) | p50 µs | p99 µs | errors % | runs |"
        );
        let _ = writeln!(s, "|---|---|---:|---:|---:|---:|---:|---:|");
        for ((panel, server), targets) in &grouped {
            for runs in targets.values() {
                let med = |f: &dyn Fn(&Point) -> f64| {
                    let mut v: Vec<f64> = runs.iter().map(|p| f(p)).collect();
                    median_min_max(&mut v).0
                };
                let saturated = if runs.iter().any(|p| p.generator_saturated) {
                    " (gen. saturated)"
                } else {
                    ""
                };
                let _ = writeln!(
                    s,
                    "| {panel} | {server} | {:.0} | {:.0}{saturated} | {:.0} | {:.0} | {:.2} | {} |",
                    runs[0].target,
                    med(&|p| p.actual),
                    med(&|p| p.p50_us as f64),
                    med(&|p| p.p99_us as f64),
                    med(&|p| p.error_rate_pct),
                    runs.len()
                );
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(server: &str, target: f64, run: usize, actual: f64) -> Point {
        Point {
            experiment: "memcached".into(),
            panel: "3% updates".into(),
            server: server.into(),
            target,
            run,
            actual,
            p50_us: 50,
            p90_us: 90,
            p99_us: 99 + run as u64,
            p999_us: 999,
            max_us: 2000,
            errors: 0,
            timeouts: 0,
            error_rate_pct: 0.0,
            generator_saturated: false,
        }
    }

    #[test]
    fn outputs_hold_every_run_and_the_medians() {
        let dir = std::env::temp_dir().join(format!("weft-exp-out-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let points = vec![
            point("weft", 1000.0, 0, 990.0),
            point("weft", 1000.0, 1, 1000.0),
            point("weft", 1000.0, 2, 1010.0),
            point("memcached", 1000.0, 0, 900.0),
            point("weft", 2000.0, 0, 1990.0),
        ];
        let raw = write_raw(&dir, &points).unwrap();
        let csv = std::fs::read_to_string(&raw[1]).unwrap();
        assert_eq!(csv.lines().count(), 6);
        let back: Vec<Point> =
            serde_json::from_str(&std::fs::read_to_string(&raw[0]).unwrap()).unwrap();
        assert_eq!(back.len(), 5);
        let plots = write_plots(&dir, &points).unwrap();
        assert_eq!(plots.len(), 2);
        let table = summary(&points);
        assert!(
            table.contains("| 3% updates | weft | 1000 | 1000 | 50 | 100 | 0.00 | 3 |"),
            "{table}"
        );
        // The report names the commit the binary was built from, not the working
        // directory's, and the settings the defaults filled in.
        let info = RunInfo {
            command: "weft experiment quick".into(),
            seconds: 1.0,
            notes: vec![],
            settings: "1 run(s) a point".into(),
            design: SWEEP_DESIGN.into(),
            raw: sweep_raw(),
        };
        let report =
            std::fs::read_to_string(write_report(&dir, &points, &plots, &info).unwrap()).unwrap();
        let commit = format!("<tr><th>commit</th><td>{}</td></tr>", env!("WEFT_COMMIT"));
        assert!(report.contains(&commit), "{report}");
        assert!(report.contains("<tr><th>settings</th><td>1 run(s) a point</td></tr>"));
        assert!(report.contains("<tr><th>kernel</th>") && report.contains("<th>machine</th>"));
        assert!(
            report.contains("<a href=\"results.csv\">") && report.contains("one after another")
        );
        assert!(
            report.contains("<img src=\"memcached-p99.svg\">"),
            "{report}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn every_figure_names_its_measure_and_unit_in_words() {
        for experiment in ["memcached", "updates", "static", "disk"] {
            let figures = figures(experiment);
            let names: Vec<&str> = figures.iter().map(|f| f.0).collect();
            let statics = experiment == "static" || experiment == "disk";
            let expected: &[&str] = if statics {
                &["throughput", "p99", "errors"]
            } else {
                &["throughput", "p99"]
            };
            assert_eq!(names, expected, "{experiment}");
            for (name, title, axes, _) in &figures {
                let text = format!("{title} | {} | {}", axes.x, axes.y);
                for jargon in ["QPS", "qps", "target", "actual", "log10", "10^"] {
                    assert!(!text.contains(jargon), "{experiment}-{name}: {text}");
                }
                assert!(axes.x.starts_with("offered load (") && axes.x.ends_with("/s)"));
                match *name {
                    "throughput" => {
                        assert!(axes.y.starts_with("throughput (") && axes.y.ends_with("/s)"));
                        assert!(!axes.log_y && axes.y_unit == Unit::Count);
                    }
                    "p99" => {
                        assert_eq!(axes.y, "p99 latency (log scale)");
                        assert!(
                            axes.log_y && axes.y_unit == Unit::Micros,
                            "ticks carry µs/ms/s"
                        );
                    }
                    _ => {
                        assert_eq!(axes.y, "error rate (% of requests)");
                        assert!(!axes.log_y && axes.y_unit == Unit::Percent);
                    }
                }
            }
        }
        assert!(figures("static")[0].2.y.contains("replies/s"));
        assert!(figures("memcached")[0]
            .1
            .starts_with("memcached protocol: throughput"));
    }
}

/// What a run was, for its `report.html`: the command, the machine and the build.
#[derive(Debug, Clone, Default)]
pub struct RunInfo {
    /// The command line as typed.
    pub command: String,
    /// Seconds the run took.
    pub seconds: f64,
    /// Notes the run printed (skipped servers, …).
    pub notes: Vec<String>,
    /// What the defaults filled in: runs, seconds per point, connections, load shape.
    pub settings: String,
    /// What was run and in which order (CPUs, servers side by side, alternation).
    pub design: String,
    /// The raw results, as file names in OUT, linked from the report.
    pub raw: Vec<String>,
}

/// How the rate sweeps run, for their report.
pub const SWEEP_DESIGN: &str = "The servers run on CPU 0 and the load generator on CPU 1 \
    (when there are two CPUs). All servers of a setting run side by side; each round visits \
    every offered load once and, at each, measures the servers one after another, the first \
    one changing from round to round (see `experiment::schedule`), so drift on the machine \
    falls on every server alike. The runs of a point are these rounds.";

/// The raw files of the rate sweeps.
pub fn sweep_raw() -> Vec<String> {
    vec!["results.csv".into(), "results.json".into()]
}

/// Escapes text for HTML.
fn html(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The first line of `program args…`'s output, or "unknown".
fn first_line_of(program: &str, args: &[&str]) -> String {
    std::process::Command::new(program)
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .map(str::to_string)
        })
        .unwrap_or_else(|| "unknown".into())
}

/// Writes OUT/report.html for a run of rate sweeps: [`write_report_with`] with the summary
/// table of `points`.
pub fn write_report(
    out: &Path,
    points: &[Point],
    plots: &[PathBuf],
    info: &RunInfo,
) -> anyhow::Result<PathBuf> {
    write_report_with(out, points.len(), &summary(points), plots, info)
}

/// Writes OUT/report.html: what ran and in which order, on what machine and kernel, with
/// which commit, every plot inline and the `summary` table (markdown, shown as text).
pub fn write_report_with(
    out: &Path,
    points: usize,
    summary: &str,
    plots: &[PathBuf],
    info: &RunInfo,
) -> anyhow::Result<PathBuf> {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let kernel = first_line_of("uname", &["-srm"]);
    // Embedded at build time (build.rs): the working directory of a run need not be a checkout.
    let commit = env!("WEFT_COMMIT");
    let mut s = String::new();
    let _ = writeln!(
        s,
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>weft experiment</title>\
         <style>body{{font-family:sans-serif;max-width:1100px;margin:2em auto}}\
         td,th{{padding:2px 8px;text-align:right}}pre{{background:#f4f4f4;padding:8px}}\
         img{{max-width:100%}}.info td,.info th{{text-align:left}}</style></head><body>"
    );
    let _ = writeln!(s, "<h1>weft experiment</h1>");
    let _ = writeln!(
        s,
        "<table class=\"info\">\
         <tr><th>command</th><td><code>{}</code></td></tr>\
         <tr><th>settings</th><td>{}</td></tr>\
         <tr><th>commit</th><td>{}</td></tr>\
         <tr><th>weft</th><td>{}</td></tr>\
         <tr><th>kernel</th><td>{}</td></tr>\
         <tr><th>machine</th><td>{} × {}</td></tr>\
         <tr><th>took</th><td>{:.0} s, {} points</td></tr></table>",
        html(&info.command),
        html(&info.settings),
        html(commit),
        env!("CARGO_PKG_VERSION"),
        html(&kernel),
        cpus,
        html(&cpu),
        info.seconds,
        points
    );
    let raw: Vec<String> = info
        .raw
        .iter()
        .map(|f| format!("<a href=\"{0}\">{0}</a>", html(f)))
        .collect();
    let _ = writeln!(
        s,
        "<p>{} Each plot shows the median of the runs as a line inside a band from the \
         smallest to the largest run, the servers (or modes) compared in the same panel; \
         latency axes are logarithmic, their ticks in µs, ms or s. Raw points: {}.</p>",
        html(&info.design),
        raw.join(", ")
    );
    for note in &info.notes {
        let _ = writeln!(s, "<p>note: {}</p>", html(note));
    }
    for plot in plots {
        if let Some(name) = plot.file_name().and_then(|n| n.to_str()) {
            let _ = writeln!(s, "<h2>{}</h2><img src=\"{}\">", html(name), html(name));
        }
    }
    let _ = writeln!(
        s,
        "<h2>Summary</h2><pre>{}</pre></body></html>",
        html(summary)
    );
    let path = out.join("report.html");
    std::fs::write(&path, s).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}
