//! `weft experiment disk`: static files from disk, the server's page cache held far below
//! the file set by a memory cgroup; the measuring is `weft_load::experiment::disk`.

use std::time::Instant;

use anyhow::Context;
use weft_load::experiment::{self, disk, output, Settings};
use weft_load::fileset;

/// Default memory limit of the server's cgroup: 256 MiB, a ninth of the scale-1 set.
pub const DEFAULT_LIMIT_MIB: u64 = 256;

/// Prepares the file set and the uniform manifest, runs, and writes the usual outputs plus
/// OUT/disk.jsonl.
pub fn run(mut settings: Settings, limit_mib: u64, rates: Vec<f64>) -> anyhow::Result<()> {
    let started = Instant::now();
    let root = settings.fileset.clone();
    eprintln!(
        "preparing the file set (scale {}) in {}",
        settings.fileset_scale,
        root.display()
    );
    fileset::generate(&root, settings.fileset_scale, 1)?;
    let load_dir = settings.out.join("disk-load");
    let total = disk::uniform_manifest(&root, &load_dir)?;
    settings.fileset = load_dir;
    let limit_bytes = limit_mib << 20;
    let note = format!(
        "file set {} MiB at {}, names drawn uniformly; server cgroup limit {} MiB; page cache \
         dropped before every point",
        total >> 20,
        root.display(),
        limit_mib
    );
    eprintln!("{note}");
    let interrupted = experiment::interrupt_flag()?;
    let mut records = Vec::new();
    let config = disk::Disk {
        root,
        limit_bytes,
        rates,
    };
    let outcome = disk::run(&settings, &config, &interrupted, &mut records);
    let points: Vec<_> = records.iter().map(|r| r.point.clone()).collect();
    let mut files = output::write_raw(&settings.out, &points)?;
    if !points.is_empty() {
        let plots = output::write_plots(&settings.out, &points)?;
        let read: u64 = records.iter().map(|r| r.disk_read_bytes).sum();
        let notes = vec![
            note,
            format!(
                "the block device read {} MiB over all points (OUT/disk.jsonl has it per point)",
                read >> 20
            ),
        ];
        let info = output::RunInfo {
            command: std::env::args().collect::<Vec<_>>().join(" "),
            seconds: started.elapsed().as_secs_f64(),
            notes,
        };
        files.push(
            output::write_report(&settings.out, &points, &plots, &info)
                .context("writing the report")?,
        );
        files.extend(plots);
        println!("{}", output::summary(&points));
    }
    files.push(settings.out.join("disk.jsonl"));
    println!(
        "{} points in {:.0} s; wrote {}",
        points.len(),
        started.elapsed().as_secs_f64(),
        files
            .iter()
            .map(|f| f.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    outcome
}
