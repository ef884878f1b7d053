//! `weft bench ...`: benchmarks comparing weft with tokio, and rendering their results.

use std::io::{self, BufRead, Write};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::builder::TypedValueParser as _;
use clap::{Args, Subcommand, ValueEnum};
use weft_bench::sched::{self, Bench, Fibers, Params, Runtime};
use weft_bench::{report, Record};

#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    command: BenchCommand,
}

#[derive(Debug, Subcommand)]
enum BenchCommand {
    /// Scheduler micro-benchmarks (the Cforall thesis's set) on weft or tokio.
    #[command(after_long_help = sched_after_help())]
    Sched(SchedArgs),
    /// Render JSON lines written by `weft bench ... --json` as markdown tables.
    Render(RenderArgs),
    /// Echo server requests/s and CPU per request: weft (uring, epoll) vs tokio.
    Echo(super::echo::EchoArgs),
    /// The echo benchmark's server process (started by `weft bench echo`).
    #[command(hide = true)]
    EchoServer(super::echo::EchoServerArgs),
    /// File sending over TCP: sendfile vs splice vs read+send, by file size.
    SendFile(super::sendfile::SendFileArgs),
    /// Static HTTP: weft http vs nginx, pinned side by side (keep-alive, short-lived, open loop).
    Http(super::http_bench::HttpBenchArgs),
    /// The load generators measured: agreement with wrk and memcaslap (closed loop), CPU per
    /// request against memcached's, cost of a latency sample.
    Load(super::load_bench::LoadBenchArgs),
    /// The scheduler study: packet processing, cache effects, staged pipeline, audio mixing,
    /// option pricing, under any weft policy (and tokio where the shape allows).
    Study(super::study::StudyArgs),
    /// weft memcached vs memcached (-t 1 each, pinned): peak, p99 at 80% load, CPU/request.
    Memcached(super::bench_memcached::MemcachedBenchArgs),
    /// Does -m hold? weft memcached vs memcached RSS under a write-heavy random-size load.
    Memory(super::bench_memory::MemoryBenchArgs),
}

/// Which benchmark `weft bench sched` runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    All,
    One(Bench),
}

fn parse_target(s: &str) -> Result<Target, String> {
    if s == "all" {
        return Ok(Target::All);
    }
    s.parse::<Bench>()
        .map(Target::One)
        .map_err(|e| format!("{e}, or all"))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum RuntimeArg {
    /// weft fibers on a cluster with the chosen --scheduler.
    Weft,
    /// tokio's multi-thread runtime (worker_threads = --processors).
    Tokio,
}

#[derive(Debug, Args)]
struct SchedArgs {
    /// The benchmark: cycle, yield, churn, locality-shared, locality-noshare, transfer, switch,
    /// spawn-join, sleepers, or all (every one in turn, sleepers last). See below for each.
    #[arg(value_parser = parse_target, required_unless_present = "list_schedulers")]
    name: Option<Target>,

    /// The runtime to measure.
    #[arg(long, value_enum, default_value_t = RuntimeArg::Weft)]
    runtime: RuntimeArg,

    /// weft scheduling policy (weft only) [default: the runtime's default policy].
    #[arg(long, value_parser = parse_scheduler, long_help = scheduler_help())]
    scheduler: Option<String>,

    /// Processors (weft) or worker threads (tokio) [default: the number of CPUs]. `switch`
    /// always uses one.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    processors: Option<u16>,

    /// How many fibers: `many` (many per processor: queue throughput), `few` (processors go
    /// idle: the idle-sleep path) or a number (rounded down to whole rings for cycle and
    /// locality-*). The presets per benchmark are listed below.
    #[arg(long, value_parser = parse_fibers, default_value = "many")]
    fibers: Fibers,

    /// Seconds each timed benchmark runs (fractions allowed).
    #[arg(long, value_parser = parse_duration, default_value = "5")]
    duration: Duration,

    /// Fibers per ring in cycle and locality-*.
    #[arg(long, default_value_t = sched::DEFAULT_RING_SIZE,
          value_parser = clap::value_parser!(u32).range(1..).map(|n| n as usize))]
    ring_size: usize,

    /// weft fiber stack size in bytes [default: the cluster default, 256 KiB] (weft only).
    #[arg(long)]
    stack_size: Option<usize>,

    /// Spawn weft's fibers migratable (resumed on any processor once started, the `unsafe`
    /// opt-in `Builder::migratable`) instead of bound to the processor that first ran them:
    /// measures what the sound default costs (weft only; the bodies hold nothing thread-bound).
    #[arg(long)]
    migratable: bool,

    /// cycle and locality-* on weft: place each ring's fibers on one processor (rings in
    /// contiguous blocks per processor, `Builder::processor`) instead of wherever they first
    /// run, so a ring's hand-offs stay on one processor under the sound default.
    #[arg(long)]
    place_rings: bool,

    /// Print one JSON object per result line instead of a table.
    #[arg(long)]
    json: bool,

    /// Print the known weft scheduling policies, one per line, and exit.
    #[arg(long)]
    list_schedulers: bool,
}

#[derive(Debug, Args)]
struct RenderArgs {
    /// Files of JSON lines (`-` or none: standard input).
    files: Vec<PathBuf>,
}

fn scheduler_help() -> String {
    let mut help = format!(
        "weft scheduling policy (weft only) [default: {}]. Known policies:",
        weft::sched::DEFAULT_POLICY
    );
    for p in weft::sched::POLICIES {
        help.push_str(&format!("\n  {:<16} {}", p.name, p.summary));
    }
    help
}

fn sched_after_help() -> String {
    let mut help = String::from("Benchmarks (fiber counts for --fibers many / few):\n");
    for b in Bench::ALL {
        let many = preset(*b, Fibers::Many);
        let few = preset(*b, Fibers::Few);
        help.push_str(&format!(
            "  {:<17} {} [{many} / {few}]\n",
            b.name(),
            b.summary()
        ));
    }
    help.push_str(
        "\nP = processors; ring size = --ring-size. With --json every result is one line of \
         JSON with benchmark, runtime, scheduler (\"tokio\" for tokio), processors, fibers, \
         variant, ops, seconds, ops_per_sec, ns_per_op, rss_bytes_per_fiber (sleepers), and \
         core_round_trip_ns and core_round_trip_after_ns (at 2+ processors: a cache line's round \
         trip between CPUs 0 and 1 just before and just after the run, which tells how far apart \
         the host placed them).",
    );
    help
}

/// A preset's fiber count as a formula, for `--help`.
fn preset(bench: Bench, fibers: Fibers) -> String {
    match (bench, fibers) {
        (Bench::Cycle | Bench::LocalityShared | Bench::LocalityNoshare, Fibers::Many) => {
            "100 rings".to_owned()
        }
        (Bench::Cycle | Bench::LocalityShared | Bench::LocalityNoshare, _) => "1 ring".to_owned(),
        (Bench::Yield | Bench::Churn, Fibers::Many) => "1000×P".to_owned(),
        (Bench::Yield, _) => "P".to_owned(),
        (Bench::Transfer, Fibers::Many) => "100×P".to_owned(),
        (Bench::Churn | Bench::Transfer, _) => "max(2,P)".to_owned(),
        (b, f) => b.fibers(f, 1, 1).to_string(),
    }
}

fn parse_scheduler(s: &str) -> Result<String, String> {
    if weft::sched::names().contains(&s) {
        Ok(s.to_owned())
    } else {
        Err(weft::sched::UnknownPolicy(s.to_owned()).to_string())
    }
}

fn parse_fibers(s: &str) -> Result<Fibers, String> {
    s.parse()
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let secs: f64 = s
        .parse()
        .map_err(|_| format!("'{s}' is not a number of seconds"))?;
    if !(secs > 0.0 && secs <= 86_400.0) {
        return Err(format!(
            "the duration must be more than 0 and at most 86400 seconds, not {s}"
        ));
    }
    Ok(Duration::from_secs_f64(secs))
}

impl SchedArgs {
    /// The benchmark parameters these arguments describe, checked.
    fn params(&self) -> anyhow::Result<Params> {
        let runtime = match self.runtime {
            RuntimeArg::Weft => Runtime::Weft,
            RuntimeArg::Tokio => Runtime::Tokio,
        };
        if runtime == Runtime::Tokio {
            if self.scheduler.is_some() {
                bail!("--scheduler chooses a weft policy; it has no meaning with --runtime tokio");
            }
            if self.stack_size.is_some() {
                bail!(
                    "--stack-size sets weft fiber stacks; it has no meaning with --runtime tokio"
                );
            }
            if self.migratable {
                bail!("--migratable concerns weft fibers; it has no meaning with --runtime tokio");
            }
            if self.place_rings {
                bail!("--place-rings places weft fibers; it has no meaning with --runtime tokio");
            }
        }
        if self.place_rings {
            if self.migratable {
                bail!("--place-rings binds each ring to a processor; it cannot be combined with --migratable");
            }
            if let Some(b) = self.benches().into_iter().find(|b| {
                !matches!(
                    b,
                    Bench::Cycle | Bench::LocalityShared | Bench::LocalityNoshare
                )
            }) {
                bail!(
                    "--place-rings applies to the ring benchmarks (cycle, locality-shared, \
                     locality-noshare), not to {}",
                    b.name()
                );
            }
        }
        let processors = match self.processors {
            Some(n) => usize::from(n),
            None => std::thread::available_parallelism().map_or(1, |n| n.get()),
        };
        let mut params = Params::new(runtime, processors);
        if let Some(s) = &self.scheduler {
            params.scheduler = s.clone();
        }
        params.fibers = self.fibers;
        params.duration = self.duration;
        params.ring_size = self.ring_size;
        params.stack_size = self.stack_size;
        params.migratable = self.migratable;
        params.place_rings = self.place_rings;
        Ok(params)
    }

    fn benches(&self) -> Vec<Bench> {
        match self.name {
            Some(Target::One(b)) => vec![b],
            Some(Target::All) | None => Bench::ALL.to_vec(),
        }
    }
}

pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    let stdout = io::stdout();
    let mut out = stdout.lock();
    match args.command {
        BenchCommand::Sched(args) => run_sched(&args, &mut out),
        BenchCommand::Render(args) => run_render(&args, &mut out),
        BenchCommand::Echo(args) => super::echo::run(&args),
        BenchCommand::EchoServer(args) => super::echo::run_server(&args),
        BenchCommand::SendFile(args) => super::sendfile::run(&args),
        BenchCommand::Http(args) => super::http_bench::run(&args),
        BenchCommand::Load(args) => super::load_bench::run(&args),
        BenchCommand::Study(args) => super::study::run(&args),
        BenchCommand::Memcached(args) => super::bench_memcached::run(&args),
        BenchCommand::Memory(args) => super::bench_memory::run(&args),
    }
}

fn run_sched(args: &SchedArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    if args.list_schedulers {
        for name in weft::sched::names() {
            writeln!(out, "{name}")?;
        }
        return Ok(());
    }
    let params = args.params()?;
    if !args.json {
        writeln!(out, "{}", report::table_header())?;
    }
    for bench in args.benches() {
        let records = sched::run(bench, &params)
            .with_context(|| format!("benchmark {bench} on {}", params.runtime.name()))?;
        for r in records {
            if args.json {
                writeln!(out, "{}", r.to_json_line())?;
            } else {
                writeln!(out, "{}", report::table_row(&r))?;
                if let Some(ns) = r.core_round_trip_ns {
                    let after = r
                        .core_round_trip_after_ns
                        .map(|a| format!(", after: {a:.0} ns"))
                        .unwrap_or_default();
                    writeln!(
                        out,
                        "  CPU 0 <-> CPU 1 cache-line round trip before the run: {ns:.0} ns{after}"
                    )?;
                }
                if let Some(note) = &r.note {
                    writeln!(out, "  note: {note}")?;
                }
            }
        }
        out.flush()?;
    }
    Ok(())
}

fn run_render(args: &RenderArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let mut records = Vec::new();
    let stdin_only = args.files.is_empty();
    let inputs: Vec<PathBuf> = if stdin_only {
        vec![PathBuf::from("-")]
    } else {
        args.files.clone()
    };
    for path in inputs {
        let reader: Box<dyn BufRead> = if path.as_os_str() == "-" {
            Box::new(io::BufReader::new(io::stdin()))
        } else {
            let file = std::fs::File::open(&path)
                .with_context(|| format!("cannot open {}", path.display()))?;
            Box::new(io::BufReader::new(file))
        };
        records.extend(read_records(reader, &path.display().to_string())?);
    }
    write!(out, "{}", report::markdown(&records))?;
    Ok(())
}

/// Parses JSON lines (blank lines skipped) into records, naming the line of a bad one.
fn read_records(reader: impl BufRead, source: &str) -> anyhow::Result<Vec<Record>> {
    let mut records = Vec::new();
    for (i, line) in reader.lines().enumerate() {
        let line = line.with_context(|| format!("reading {source}"))?;
        if line.trim().is_empty() {
            continue;
        }
        let r: Record = serde_json::from_str(&line)
            .with_context(|| format!("{source}:{}: not a benchmark record", i + 1))?;
        records.push(r);
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct TestCli {
        #[command(subcommand)]
        command: crate::cmd::Command,
    }

    fn sched_args(args: &[&str]) -> Result<SchedArgs, clap::Error> {
        let mut argv = vec!["weft", "bench", "sched"];
        argv.extend_from_slice(args);
        let cli = TestCli::try_parse_from(argv)?;
        let crate::cmd::Command::Bench(BenchArgs { command }) = cli.command else {
            unreachable!("parsed `weft bench ...`")
        };
        match command {
            BenchCommand::Sched(a) => Ok(a),
            _ => unreachable!(),
        }
    }

    #[test]
    fn defaults() {
        let a = sched_args(&["cycle"]).unwrap();
        assert_eq!(a.name, Some(Target::One(Bench::Cycle)));
        assert_eq!(a.runtime, RuntimeArg::Weft);
        assert_eq!(a.fibers, Fibers::Many);
        assert_eq!(a.duration, Duration::from_secs(5));
        assert_eq!(a.ring_size, 5);
        assert!(!a.json);
        let p = a.params().unwrap();
        assert_eq!(p.scheduler, weft::sched::DEFAULT_POLICY);
        assert!(p.processors >= 1);
    }

    #[test]
    fn every_option_parses() {
        let a = sched_args(&[
            "churn",
            "--runtime",
            "weft",
            "--scheduler",
            "global-fifo",
            "--processors",
            "2",
            "--fibers",
            "few",
            "--duration",
            "0.5",
            "--ring-size",
            "3",
            "--stack-size",
            "65536",
            "--migratable",
            "--json",
        ])
        .unwrap();
        let p = a.params().unwrap();
        assert_eq!(p.runtime, Runtime::Weft);
        assert_eq!(p.processors, 2);
        assert_eq!(p.fibers, Fibers::Few);
        assert_eq!(p.duration, Duration::from_millis(500));
        assert_eq!(p.ring_size, 3);
        assert_eq!(p.stack_size, Some(65536));
        assert!(p.migratable);
        assert!(a.json);
        assert_eq!(
            sched_args(&["yield", "--fibers", "42"]).unwrap().fibers,
            Fibers::Count(42)
        );
        assert_eq!(sched_args(&["all"]).unwrap().benches(), Bench::ALL.to_vec());
        for b in Bench::ALL {
            assert_eq!(sched_args(&[b.name()]).unwrap().name, Some(Target::One(*b)));
        }
    }

    #[test]
    fn bad_values_are_explained() {
        let err = |args: &[&str]| sched_args(args).unwrap_err().to_string();
        let e = err(&["cycle", "--scheduler", "nope"]);
        assert!(e.contains("unknown scheduler policy 'nope'"), "{e}");
        assert!(e.contains(weft::sched::DEFAULT_POLICY), "{e}");
        let e = err(&["spin"]);
        assert!(
            e.contains("unknown benchmark 'spin'") && e.contains("cycle"),
            "{e}"
        );
        assert!(err(&["cycle", "--processors", "0"]).contains("0"));
        assert!(err(&["cycle", "--fibers", "0"]).contains("at least 1"));
        assert!(err(&["cycle", "--fibers", "lots"]).contains("'lots'"));
        assert!(err(&["cycle", "--duration", "0"]).contains("more than 0"));
        assert!(err(&["cycle", "--duration", "x"]).contains("not a number"));
        assert!(err(&["cycle", "--runtime", "go"]).contains("go"));
        assert!(err(&[]).contains("required"));
        let tokio_with_policy =
            sched_args(&["cycle", "--runtime", "tokio", "--scheduler", "global-fifo"])
                .unwrap()
                .params()
                .unwrap_err()
                .to_string();
        assert!(tokio_with_policy.contains("--runtime tokio"));
        let tokio_migratable = sched_args(&["cycle", "--runtime", "tokio", "--migratable"])
            .unwrap()
            .params()
            .unwrap_err()
            .to_string();
        assert!(
            tokio_migratable.contains("--migratable"),
            "{tokio_migratable}"
        );
        let params_err =
            |args: &[&str]| sched_args(args).unwrap().params().unwrap_err().to_string();
        let e = params_err(&["yield", "--place-rings"]);
        assert!(e.contains("ring benchmarks") && e.contains("yield"), "{e}");
        let e = params_err(&["cycle", "--place-rings", "--migratable"]);
        assert!(e.contains("--migratable"), "{e}");
        let e = params_err(&["cycle", "--place-rings", "--runtime", "tokio"]);
        assert!(e.contains("--runtime tokio"), "{e}");
        assert!(
            sched_args(&["cycle", "--place-rings"])
                .unwrap()
                .params()
                .unwrap()
                .place_rings
        );
    }

    #[test]
    fn list_schedulers_needs_no_benchmark() {
        let a = sched_args(&["--list-schedulers"]).unwrap();
        let mut out = Vec::new();
        run_sched(&a, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text.lines().collect::<Vec<_>>(), weft::sched::names());
    }

    #[test]
    fn json_lines_have_the_documented_shape() {
        let a = sched_args(&[
            "yield",
            "--runtime",
            "tokio",
            "--processors",
            "1",
            "--fibers",
            "2",
            "--duration",
            "0.05",
            "--json",
        ])
        .unwrap();
        let mut out = Vec::new();
        run_sched(&a, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<_> = text.lines().collect();
        assert_eq!(lines.len(), 1, "{text}");
        let v: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
        assert_eq!(v["benchmark"], "yield");
        assert_eq!(v["runtime"], "tokio");
        assert_eq!(v["scheduler"], "tokio");
        assert_eq!(v["processors"], 1);
        assert_eq!(v["fibers"], 2);
        assert_eq!(v["variant"], "custom");
        assert!(v["ops"].as_u64().unwrap() > 0);
        assert!(v["seconds"].as_f64().unwrap() > 0.0);
        assert!(v["ops_per_sec"].as_f64().unwrap() > 0.0);
        assert!(v["ns_per_op"].as_f64().unwrap() > 0.0);
        // Round trip through `render`'s reader.
        let records = read_records(text.as_bytes(), "test").unwrap();
        assert_eq!(records[0].benchmark, "yield");
    }

    #[test]
    fn table_output_has_header_and_row() {
        let a = sched_args(&[
            "yield",
            "--runtime",
            "weft",
            "--processors",
            "1",
            "--fibers",
            "2",
            "--duration",
            "0.05",
        ])
        .unwrap();
        let mut out = Vec::new();
        run_sched(&a, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<_> = text.lines().collect();
        assert_eq!(lines[0], report::table_header());
        assert!(lines[1].starts_with("yield "), "{text}");
    }

    #[test]
    fn render_rejects_garbage_with_the_line() {
        let e = read_records("\n{\"x\":1}\n".as_bytes(), "f.jsonl").unwrap_err();
        assert!(format!("{e:#}").contains("f.jsonl:2"));
    }
}
