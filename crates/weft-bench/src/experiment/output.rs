//! What an experiment leaves behind: `results.json` and `results.csv` (every run of every
//! point), SVG plots of the medians with min–max bands, and a summary table.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context;

use super::plot::{self, Axes, Panel, Series};
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
type Figure = (String, String, Axes<'static>, Box<dyn Fn(&Point) -> f64>);

/// Draws the thesis's figures for every experiment present; returns the files written.
pub fn write_plots(out: &Path, points: &[Point]) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for (experiment, grouped) in group(points) {
        let figures: Vec<Figure> = if experiment == "static" || experiment == "disk" {
            let what = if experiment == "disk" {
                "Static files from disk"
            } else {
                "Static files"
            };
            vec![
                (
                    "throughput".into(),
                    format!("{what}: replies/s vs request rate"),
                    Axes {
                        x: "target rate (requests/s)",
                        y: "throughput (replies/s in the window)",
                        log_y: false,
                    },
                    Box::new(|p: &Point| p.actual),
                ),
                (
                    "errors".into(),
                    format!("{what}: error rate vs request rate"),
                    Axes {
                        x: "target rate (requests/s)",
                        y: "errors (% of requests)",
                        log_y: false,
                    },
                    Box::new(|p: &Point| p.error_rate_pct),
                ),
                (
                    "p99".into(),
                    format!("{what}: p99 latency vs request rate"),
                    Axes {
                        x: "target rate (requests/s)",
                        y: "p99 latency (µs, log scale)",
                        log_y: true,
                    },
                    Box::new(|p: &Point| p.p99_us as f64),
                ),
            ]
        } else {
            vec![
                (
                    "throughput".into(),
                    format!("{experiment}: actual vs target QPS"),
                    Axes {
                        x: "target rate (requests/s)",
                        y: "actual rate (replies/s in the window)",
                        log_y: false,
                    },
                    Box::new(|p: &Point| p.actual),
                ),
                (
                    "p99".into(),
                    format!("{experiment}: p99 latency vs target QPS"),
                    Axes {
                        x: "target rate (requests/s)",
                        y: "p99 latency (µs, log scale)",
                        log_y: true,
                    },
                    Box::new(|p: &Point| p.p99_us as f64),
                ),
            ]
        };
        for (name, title, axes, f) in figures {
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
            "| setting | server | target/s | actual/s (median) | p50 us | p99 us | errors % | runs |"
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
        };
        let report =
            std::fs::read_to_string(write_report(&dir, &points, &plots, &info).unwrap()).unwrap();
        let commit = format!("<tr><th>commit</th><td>{}</td></tr>", env!("WEFT_COMMIT"));
        assert!(report.contains(&commit), "{report}");
        assert!(report.contains("<tr><th>settings</th><td>1 run(s) a point</td></tr>"));
        std::fs::remove_dir_all(&dir).unwrap();
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

/// Writes OUT/report.html: what ran, on what machine and kernel, with which commit, the
/// summary table and every plot inline.
pub fn write_report(
    out: &Path,
    points: &[Point],
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
        points.len()
    );
    let _ = writeln!(
        s,
        "<p>Servers on CPU 0, the load generator on CPU 1 (when there are two CPUs). Each plot: \
         the median of the runs as a line, min–max as a band; p99 on a log scale. Raw points: \
         <a href=\"results.csv\">results.csv</a>, <a href=\"results.json\">results.json</a>.</p>"
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
        html(&summary(points))
    );
    let path = out.join("report.html");
    std::fs::write(&path, s).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}
