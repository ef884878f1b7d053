//! `weft bench study ...`: the scheduler study's application benchmarks (packet processing,
//! cache effects, staged pipeline, audio mixing, option pricing) on weft under a chosen policy,
//! and on tokio where the shape allows.

use std::io::{self, Write};

use anyhow::{bail, Context};
use clap::{Args, ValueEnum};
use weft_bench::study::{self, Outcome, Params, Runtime, Study};

#[derive(Debug, Args)]
#[command(after_long_help = after_help())]
pub struct StudyArgs {
    /// The benchmark: packet, packet-cache, packet-staged, audio, options, or all.
    #[arg(value_parser = parse_target)]
    name: Target,

    /// weft scheduling policy [default: the runtime's default]. See `weft bench sched --help`
    /// for the list.
    #[arg(long, value_parser = parse_scheduler)]
    scheduler: Option<String>,

    /// Processors (weft) or worker threads (tokio) [default: the number of CPUs].
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    processors: Option<u16>,

    /// weft, tokio (packet, packet-cache and options only), or both in the same run.
    #[arg(long, value_enum, default_value_t = RuntimeArg::Weft)]
    runtime: RuntimeArg,

    /// Packets (packet*), conferences (audio) or options (options) [default: 50000, 20, 64].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    tasks: Option<u64>,

    /// Extra busy work per packet, in nanoseconds (packet, packet-cache, packet-staged).
    #[arg(long, default_value_t = 0)]
    work_ns: u64,

    /// Spawner fibers (packet, packet-cache).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=1024))]
    spawners: u16,

    /// Outstanding packet handlers before the spawners back off (yield and retry, counted as
    /// `retries`): the bound on queued work (packet, packet-cache).
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    max_in_flight: u64,

    /// How long the audio benchmark streams, in milliseconds.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(10..=600_000))]
    audio_ms: u64,

    /// Print one JSON object per result instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    All,
    One(Study),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum RuntimeArg {
    Weft,
    Tokio,
    Both,
}

fn parse_target(s: &str) -> Result<Target, String> {
    if s == "all" {
        return Ok(Target::All);
    }
    s.parse()
        .map(Target::One)
        .map_err(|e| format!("{e}, or all"))
}

fn parse_scheduler(s: &str) -> Result<String, String> {
    weft::sched::by_name(s, 1)
        .map(|_| s.to_owned())
        .map_err(|e| e.to_string())
}

fn after_help() -> String {
    let mut help = String::from("Benchmarks:\n");
    for s in Study::ALL {
        let tokio = if s.has_tokio() { " (also tokio)" } else { "" };
        help.push_str(&format!("  {:<14} {}{tokio}\n", s.name(), s.summary()));
    }
    help.push_str(
        "\nWith --json each result is one line: benchmark, runtime, scheduler, processors, \
         tasks, seconds, tasks_per_sec, latency_ns {p50, p99, p9999}, and the benchmark's own \
         fields (retries, spawners, work_ns, variant, deadline_misses, miss_ratio, subtasks...).",
    );
    help
}

impl StudyArgs {
    fn params(&self, runtime: Runtime) -> Params {
        let processors = self.processors.map_or_else(
            || std::thread::available_parallelism().map_or(1, |n| n.get()),
            usize::from,
        );
        let mut p = Params::new(runtime, processors);
        if let Some(s) = &self.scheduler {
            p.scheduler = s.clone();
        }
        p.tasks = self.tasks;
        p.work_ns = self.work_ns;
        p.spawners = usize::from(self.spawners);
        p.audio_ms = self.audio_ms;
        p.max_in_flight = self.max_in_flight as usize;
        p
    }

    fn runtimes(&self) -> &'static [Runtime] {
        match self.runtime {
            RuntimeArg::Weft => &[Runtime::Weft],
            RuntimeArg::Tokio => &[Runtime::Tokio],
            RuntimeArg::Both => &[Runtime::Weft, Runtime::Tokio],
        }
    }

    /// The (benchmark, runtime) pairs to run, checked.
    fn plan(&self) -> anyhow::Result<Vec<(Study, Runtime)>> {
        let studies = match self.name {
            Target::All => Study::ALL.to_vec(),
            Target::One(s) => vec![s],
        };
        if self.runtime == RuntimeArg::Tokio && self.scheduler.is_some() {
            bail!("--scheduler chooses a weft policy; it has no meaning with --runtime tokio");
        }
        if let Target::One(s) = self.name {
            if self.runtime == RuntimeArg::Tokio && !s.has_tokio() {
                bail!("{s} has no tokio version (packet, packet-cache and options have)");
            }
        }
        Ok(studies
            .iter()
            .flat_map(|&s| self.runtimes().iter().map(move |&r| (s, r)))
            .filter(|&(s, r)| r == Runtime::Weft || s.has_tokio())
            .collect())
    }
}

pub fn run(args: &StudyArgs) -> anyhow::Result<()> {
    let plan = args.plan()?;
    let stdout = io::stdout();
    let mut out = stdout.lock();
    if !args.json {
        writeln!(out, "{}", header())?;
    }
    for (study, runtime) in plan {
        let outcomes = study::run(study, &args.params(runtime))
            .with_context(|| format!("{study} on {}", runtime.name()))?;
        for o in outcomes {
            if args.json {
                writeln!(out, "{}", o.to_json_line())?;
            } else {
                writeln!(out, "{}", row(&o))?;
            }
        }
        out.flush()?;
    }
    Ok(())
}

fn header() -> String {
    format!(
        "{:<14} {:<6} {:<20} {:>2} {:>9} {:>8} {:>12} {:>10} {:>10} {:>11}  extra",
        "benchmark",
        "rt",
        "scheduler",
        "P",
        "tasks",
        "seconds",
        "tasks/s",
        "p50 µs",
        "p99 µs",
        "p99.99 µs"
    )
}

/// One table row; benchmark-specific fields go at the end as `key=value`.
pub fn row(o: &Outcome) -> String {
    let us = |ns: u64| ns as f64 / 1000.0;
    let extra: Vec<String> = o
        .extra
        .iter()
        .map(|(k, v)| {
            format!(
                "{k}={}",
                v.as_str().map_or_else(|| v.to_string(), str::to_owned)
            )
        })
        .collect();
    format!(
        "{:<14} {:<6} {:<20} {:>2} {:>9} {:>8.3} {:>12.0} {:>10.1} {:>10.1} {:>11.1}  {}",
        o.benchmark,
        o.runtime,
        o.scheduler,
        o.processors,
        o.tasks,
        o.seconds,
        o.tasks_per_sec,
        us(o.latency_ns.p50),
        us(o.latency_ns.p99),
        us(o.latency_ns.p9999),
        extra.join(" ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct TestCli {
        #[command(flatten)]
        args: StudyArgs,
    }

    fn parse(args: &[&str]) -> Result<StudyArgs, clap::Error> {
        let mut argv = vec!["study"];
        argv.extend_from_slice(args);
        TestCli::try_parse_from(argv).map(|c| c.args)
    }

    #[test]
    fn options_parse_into_params() {
        let a = parse(&[
            "packet",
            "--scheduler",
            "ws-request",
            "--processors",
            "2",
            "--tasks",
            "100",
            "--work-ns",
            "500",
            "--spawners",
            "4",
            "--json",
        ])
        .unwrap();
        assert_eq!(a.name, Target::One(Study::Packet));
        let p = a.params(Runtime::Weft);
        assert_eq!(
            (
                p.scheduler.as_str(),
                p.processors,
                p.tasks,
                p.work_ns,
                p.spawners
            ),
            ("ws-request", 2, Some(100), 500, 4)
        );
        assert_eq!(a.plan().unwrap(), vec![(Study::Packet, Runtime::Weft)]);
    }

    #[test]
    fn all_with_both_runtimes_skips_the_weft_only_shapes_on_tokio() {
        let plan = parse(&["all", "--runtime", "both"])
            .unwrap()
            .plan()
            .unwrap();
        assert_eq!(plan.len(), Study::ALL.len() + 3);
        assert!(plan
            .iter()
            .all(|&(s, r)| r == Runtime::Weft || s.has_tokio()));
    }

    #[test]
    fn bad_input_is_explained() {
        let e = parse(&["packets"]).unwrap_err().to_string();
        assert!(e.contains("unknown study benchmark 'packets'") && e.contains("packet-cache"));
        let e = parse(&["packet", "--scheduler", "fifo"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown scheduler policy 'fifo'"), "{e}");
        let e = parse(&["audio", "--runtime", "tokio"])
            .unwrap()
            .plan()
            .unwrap_err();
        assert!(e.to_string().contains("no tokio version"), "{e}");
        let e = parse(&["packet", "--runtime", "tokio", "--scheduler", "global-fifo"])
            .unwrap()
            .plan()
            .unwrap_err();
        assert!(e.to_string().contains("no meaning"), "{e}");
        assert!(parse(&["packet", "--processors", "0"]).is_err());
        assert!(parse(&["packet", "--tasks", "0"]).is_err());
    }

    #[test]
    fn rows_show_extras() {
        let mut params = Params::new(Runtime::Weft, 1);
        params.tasks = Some(50);
        let o = &study::run(Study::Packet, &params).unwrap()[0];
        let r = row(o);
        assert!(r.starts_with("packet") && r.contains("retries=0"), "{r}");
    }
}
