//! `weft experiment disk`: the disk-bound static experiment the thesis left out. The server
//! runs in a memory cgroup ([`crate::cgroup`]) whose limit is far below the file set, the
//! page cache is dropped before every point, and names are drawn uniformly over the set, so
//! most requests must read from disk: weft http (a read that would wait for the disk goes to
//! the blocking pool: `RWF_NOWAIT` reads, `mincore` checks before `sendfile`) against nginx
//! with the project's template (`sendfile`, blocking reads in its one worker) and with
//! `aio threads` (nginx's thread pool for reads and `sendfile`).
//!
//! Every point starts from a fresh server and a cold page cache, with the load of the
//! static experiment (`weft load http`, httperf-style sessions of one request, a 2 s client
//! timeout), in the order of [`super::schedule`]: each round every rate once, the servers one
//! after another at each rate, the first one rotating from round to round. Each point also
//! records the bytes the file set's block device read while it ran and the cgroup's memory at
//! the end, which show whether the run was in fact disk-bound.
//!
//! Invariant: the cgroup exists only while [`run_points`] does (its guard removes it after the last
//! server stopped), and every server is a [`Running`] guard killed by PID.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde::Serialize;

use super::sweeps::{Load, Sweep};
use super::{output, Point, Settings};
use crate::cgroup::MemoryLimit;
use crate::process::{self, Running};
use weft_load::fileset;

/// The servers compared, by name.
pub const SERVERS: [&str; 3] = ["weft", "nginx", "nginx aio threads"];

/// Default memory limit of the server's cgroup: 256 MiB, a ninth of the scale-1 set.
pub const DEFAULT_LIMIT_MIB: u64 = 256;

/// What `run_points` needs beyond the common settings (whose `fileset` is the load's manifest).
#[derive(Debug, Clone)]
pub struct Disk {
    /// The files served.
    pub root: PathBuf,
    /// The cgroup's memory limit.
    pub limit_bytes: u64,
    pub rates: Vec<f64>,
}

/// One point with the disk evidence (a line of `disk.jsonl`).
#[derive(Debug, Clone, Serialize)]
pub struct Record {
    #[serde(flatten)]
    pub point: Point,
    /// Bytes read by the file set's block device during the point (all processes).
    pub disk_read_bytes: u64,
    /// The cgroup's memory (anonymous + page cache) when the load ended.
    pub cgroup_bytes: u64,
}

/// Writes a manifest in `load_dir` naming every file of the set at `root` with equal weight,
/// for the load generator (`--fileset load_dir`); returns the set's total bytes.
pub fn uniform_manifest(root: &Path, load_dir: &Path) -> anyhow::Result<u64> {
    let entries = fileset::read_manifest(root)?;
    std::fs::create_dir_all(load_dir)?;
    let weight = 1.0 / entries.len() as f64;
    let mut text = String::new();
    for e in &entries {
        text.push_str(&format!("{weight}\t{}\t{}\n", e.size, e.path));
    }
    let path = load_dir.join(fileset::MANIFEST_NAME);
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    Ok(entries.iter().map(|e| e.size).sum())
}

/// Drops the clean page cache (every file's cached pages), so a point starts cold.
pub fn drop_caches() -> anyhow::Result<()> {
    // SAFETY: sync has no preconditions.
    unsafe { libc::sync() };
    std::fs::write("/proc/sys/vm/drop_caches", "3")
        .context("writing 3 to /proc/sys/vm/drop_caches (needs root)")
}

/// Runs rounds × rates × servers in the order of [`super::schedule`]; appends every record to
/// OUT/disk.jsonl as it goes.
pub fn run_points(
    settings: &Settings,
    disk: &Disk,
    interrupted: &AtomicBool,
    records: &mut Vec<Record>,
) -> anyhow::Result<()> {
    let logs = settings.out.join("logs");
    std::fs::create_dir_all(&logs)?;
    let nginx = process::find_program("nginx");
    let group = MemoryLimit::new("weft-disk", disk.limit_bytes)?;
    eprintln!(
        "cgroup {} ({:?}), limit {} MiB",
        group.dir().display(),
        group.version(),
        disk.limit_bytes >> 20
    );
    let jsonl = settings.out.join("disk.jsonl");
    let mut sink = std::fs::File::create(&jsonl)?;
    let (server_cpu, load_cpu) = process::server_and_load_cpus();
    let sweep = Sweep {
        experiment: "disk".into(),
        panel: format!("page cache limited to {} MiB", disk.limit_bytes >> 20),
        servers: Vec::new(),
        rates: disk.rates.clone(),
        load: Load::Static,
    };
    let device = block_device_stat(&disk.root)?;
    for turn in super::schedule(settings.runs, disk.rates.len(), SERVERS.len()) {
        let (run, rate, server) = (turn.round, disk.rates[turn.rate], SERVERS[turn.server]);
        if interrupted.load(Ordering::Relaxed) {
            bail!("interrupted");
        }
        if server != "weft" && nginx.is_none() {
            continue;
        }
        drop_caches()?;
        let port = process::free_port()?;
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let (program, args) = match server {
            "weft" => (
                settings.weft_exe.clone(),
                super::weft_http_args(&disk.root.display().to_string(), &addr.to_string()),
            ),
            _ => {
                let conf = logs.join(format!("{}.conf", file_name(server)));
                let mut text = weft_load::nginx::config(&logs, port, &disk.root, "");
                if server == "nginx aio threads" {
                    text = text.replace("  sendfile on;\n", "  sendfile on;\n  aio threads;\n");
                }
                std::fs::write(&conf, text)?;
                let args = vec![
                    "-c".to_string(),
                    conf.display().to_string(),
                    "-e".to_string(),
                    logs.join("nginx-error.log").display().to_string(),
                ];
                (nginx.clone().expect("checked above"), args)
            }
        };
        let log = logs.join(format!("disk-{}.log", file_name(server)));
        let mut running = Running::start(server, &program, &args, server_cpu, log)?;
        group.add(running.pid())?;
        running.wait_for_port(addr, Duration::from_secs(10))?;
        let before = read_sectors(&device);
        let point = super::sweeps::measure(
            settings,
            &sweep,
            server,
            addr,
            rate,
            run,
            load_cpu,
            interrupted,
        )?;
        let after = read_sectors(&device);
        let cgroup_bytes = group.current().unwrap_or(0);
        running.stop();
        let record = Record {
            point,
            disk_read_bytes: after.saturating_sub(before) * 512,
            cgroup_bytes,
        };
        eprintln!(
            "run {} {server} @ {rate}: {:.0} replies/s, {:.2} % errors, p99 {} us, \
             disk read {} MiB, cgroup {} MiB",
            run + 1,
            record.point.actual,
            record.point.error_rate_pct,
            record.point.p99_us,
            record.disk_read_bytes >> 20,
            record.cgroup_bytes >> 20
        );
        writeln!(sink, "{}", serde_json::to_string(&record)?)?;
        records.push(record);
    }
    Ok(())
}

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
    let total = uniform_manifest(&root, &load_dir)?;
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
    let interrupted = crate::process::interrupt_flag()?;
    let mut records = Vec::new();
    let config = Disk {
        root,
        limit_bytes,
        rates,
    };
    let outcome = run_points(&settings, &config, &interrupted, &mut records);
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
            settings: settings.describe(),
            design: "The server runs on CPU 0 in a memory cgroup, the load generator on CPU 1 \
                     (when there are two CPUs). Every point starts a fresh server after the \
                     page cache was dropped; each round visits every offered load once and, at \
                     each, measures the servers one after another, the first one changing from \
                     round to round (see `experiment::schedule`). The runs of a point are \
                     these rounds."
                .into(),
            raw: {
                let mut raw = output::sweep_raw();
                raw.push("disk.jsonl".into());
                raw
            },
        };
        files.push(
            output::write_report(&settings.out, &points, &plots, &info)
                .context("writing the report")?,
        );
        files.extend(plots);
        println!("{}", output::summary(&points));
    }
    files.push(settings.out.join("disk.jsonl"));
    output::print_written(points.len(), started, &files);
    outcome
}

fn file_name(s: &str) -> String {
    s.replace(' ', "-")
}

/// The `stat` file of the block device holding `path` (whole disk or partition).
fn block_device_stat(path: &Path) -> anyhow::Result<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(path)?.dev();
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let stat = PathBuf::from(format!("/sys/dev/block/{major}:{minor}/stat"));
    if !stat.exists() {
        bail!(
            "{} is on device {major}:{minor}, which has no {} (not a block device?)",
            path.display(),
            stat.display()
        );
    }
    Ok(stat)
}

/// Sectors (512 B) read so far by the device (field 3 of its `stat`).
fn read_sectors(stat: &Path) -> u64 {
    std::fs::read_to_string(stat)
        .ok()
        .and_then(|s| s.split_whitespace().nth(2)?.parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_uniform_manifest_names_every_file_with_equal_weight() {
        let dir = std::env::temp_dir().join(format!("weft-disk-test-{}", std::process::id()));
        let root = dir.join("set");
        let entries = fileset::generate(&root, 0.002, 1).unwrap();
        let total = uniform_manifest(&root, &dir.join("load")).unwrap();
        assert_eq!(total, entries.iter().map(|e| e.size).sum::<u64>());
        let uniform = fileset::read_manifest(&dir.join("load")).unwrap();
        assert_eq!(uniform.len(), entries.len());
        let w = uniform[0].weight;
        assert!(uniform.iter().all(|e| (e.weight - w).abs() < 1e-12));
        assert!((w * entries.len() as f64 - 1.0).abs() < 1e-9);
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(read_sectors(Path::new("/nonexistent")) == 0);
    }
}
