//! `weft bench http --open-loop F1,F2,...`: nginx's closed-loop peak over `--connections`
//! keep-alive connections (`weft load http --rate 0`, one 4 KiB file), then both servers open
//! loop over as many persistent connections (`weft load http --persistent --rate R`) at each
//! fraction of it, alternating, with p50/p99/p999 and req/s side by side (the table shared with
//! `weft bench memcached --open-loop`).

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::AtomicBool;

use anyhow::Context;

use super::{load_http_json, Options, Server};

/// The open-loop mode: nginx's closed-loop peak over --connections keep-alive connections,
/// then both servers open loop at each fraction of it; appends the table to `report`.
pub(super) fn run(
    args: &Options,
    servers: &[&Server],
    load: &Command,
    work: &Path,
    report: &mut String,
    interrupted: &AtomicBool,
) -> anyhow::Result<()> {
    use crate::memcached::{open_loop_footer, open_loop_header, open_loop_row, OpenLoopSample};
    let urls = work.join("bench-4k.urls");
    std::fs::write(&urls, "/bench-4k.bin\n")?;
    let conns = args.keepalive_conns.to_string();
    let common = |rate: f64| -> Vec<String> {
        let mut a: Vec<String> = vec!["--urls".into(), urls.display().to_string()];
        a.extend(["--connections".into(), conns.clone()]);
        a.extend(["--rate".into(), rate.to_string()]);
        a
    };
    let nginx = servers
        .iter()
        .find(|s| s.name == "nginx")
        .context("no nginx")?;
    let mut peaks = Vec::new();
    for _ in 0..args.repeat {
        let v = load_http_json(load, nginx, &common(0.0), args.duration, interrupted)?;
        peaks.push(v["replies_per_sec"].as_f64().unwrap_or(0.0));
    }
    let peak = crate::stats::median(&peaks);
    writeln!(
        report,
        "open loop, one 4 KiB file over {} keep-alive connections; nginx peak (weft load http \
         --rate 0, closed loop): {peak:.0} req/s (median of {})\n",
        args.keepalive_conns, args.repeat
    )?;
    writeln!(report, "{}", open_loop_header())?;
    let mut saturated = false;
    for &fraction in &args.open_loop {
        let offered = (fraction * peak).round().max(1.0);
        let mut all: Vec<Vec<OpenLoopSample>> = servers.iter().map(|_| Vec::new()).collect();
        for _ in 0..args.repeat {
            for (i, s) in servers.iter().enumerate() {
                let mut a = common(offered);
                a.push("--persistent".into());
                let v = load_http_json(load, s, &a, args.duration, interrupted)
                    .with_context(|| format!("measuring {}", s.name))?;
                let sample = OpenLoopSample {
                    actual: v["replies_per_sec"].as_f64().unwrap_or(0.0),
                    latency: serde_json::from_value(v["latency_us"].clone())
                        .context("weft load http's latency_us")?,
                    lag_p99_us: None,
                    saturated: v["generator_saturated"].as_bool() == Some(true),
                };
                saturated |= sample.saturated;
                all[i].push(sample);
            }
        }
        for (s, samples) in servers.iter().zip(&all) {
            writeln!(
                report,
                "{}",
                open_loop_row(fraction, offered, s.name, samples)
            )?;
        }
    }
    writeln!(report, "{}", open_loop_footer(saturated))?;
    Ok(())
}
