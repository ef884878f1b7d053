//! `weft experiment threads`: the same server code on a fiber per connection and on an OS
//! thread per connection (`--threads-per-connection`), side by side; the measuring is
//! `weft_load::experiment::threads`.

use std::path::Path;
use std::time::Instant;

use anyhow::Context;
use weft_load::experiment::{self, threads};

/// Runs the rounds into `out` and writes threads.jsonl, threads.svg and threads-summary.md.
pub fn run(
    out: &Path,
    rounds: usize,
    connections: Vec<usize>,
    duration: f64,
    warmup: f64,
) -> anyhow::Result<()> {
    anyhow::ensure!(rounds >= 1, "--runs must be at least 1");
    anyhow::ensure!(
        !connections.is_empty() && connections.iter().all(|&c| c > 0),
        "--thread-connections needs at least one count above 0"
    );
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let settings = threads::Settings {
        out: std::path::absolute(out)?,
        weft_exe: std::env::current_exe().context("finding the weft executable")?,
        rounds,
        connections,
        duration,
        warmup,
    };
    let started = Instant::now();
    let interrupted = experiment::interrupt_flag()?;
    let mut records = Vec::new();
    let outcome = threads::run(&settings, &interrupted, &mut records);
    if !records.is_empty() {
        let svg = threads::plot(&settings.out, &records)?;
        let table = threads::summary(&records);
        let md = settings.out.join("threads-summary.md");
        std::fs::write(&md, &table).with_context(|| format!("writing {}", md.display()))?;
        println!("{table}");
        println!(
            "{} points in {:.0} s; wrote {}, {}, {}",
            records.len(),
            started.elapsed().as_secs_f64(),
            settings.out.join("threads.jsonl").display(),
            svg.display(),
            md.display()
        );
    }
    outcome
}
