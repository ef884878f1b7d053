//! `weft bench echo`: echo server requests/s and server CPU per request, weft on io_uring or
//! epoll vs tokio (see `weft_bench::echo`); and the hidden `weft bench echo-server` the
//! benchmark re-executes this binary as, to run the server in its own pinned process.

use std::io::Write;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use weft_bench::echo::{self, Backend, EchoParams};

#[derive(Debug, Args)]
pub struct EchoArgs {
    /// The server: uring or epoll (weft, one processor) or tokio (current-thread runtime).
    #[arg(long, default_value = "uring")]
    backend: Backend,

    /// Client connections, each in a closed loop.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=60000))]
    connections: u32,

    /// Bytes per message.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=65536))]
    message_size: u32,

    /// Seconds measured (after a 0.5 s warm-up).
    #[arg(long, default_value = "5", value_parser = parse_seconds)]
    duration: Duration,

    /// Cap the server at this % of its core (a cgroup CPU quota with a 10 ms period; needs
    /// root), so that the server, not the one client core, is what saturates: requests/s then
    /// compare the servers' own costs even when the machine is slow.
    #[arg(long, value_name = "PCT", value_parser = clap::value_parser!(u32).range(1..=100))]
    server_cpu_pct: Option<u32>,

    /// Print one JSON object instead of a line of text.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct EchoServerArgs {
    /// uring, epoll or tokio.
    #[arg(long)]
    backend: Backend,
}

fn parse_seconds(s: &str) -> Result<Duration, String> {
    match s.parse::<f64>() {
        Ok(x) if x > 0.0 && x <= 86_400.0 => Ok(Duration::from_secs_f64(x)),
        _ => Err(format!("'{s}' is not a number of seconds in (0, 86400]")),
    }
}

/// Runs the benchmark and prints its report.
pub fn run(args: &EchoArgs) -> anyhow::Result<()> {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    anyhow::ensure!(
        cpus >= 2,
        "the echo benchmark pins the server to CPU 0 and the client to CPU 1; this machine \
         has {cpus} CPU"
    );
    let exe = std::env::current_exe().context("finding this binary to start the server")?;
    let mut server = std::process::Command::new(exe);
    server.args(["bench", "echo-server", "--backend", args.backend.name()]);
    let params = EchoParams {
        backend: args.backend,
        connections: args.connections as usize,
        message_size: args.message_size as usize,
        duration: args.duration,
        warmup: Duration::from_millis(500),
        server_cpu_pct: args.server_cpu_pct,
    };
    // Dropped after `echo::run` has stopped the server, so the cgroup is empty when removed.
    let cpu_limit = args
        .server_cpu_pct
        .map(|pct| weft_bench::cgroup::CpuLimit::new("weft-bench-echo", pct))
        .transpose()?;
    let r = echo::run(&params, server, |pid| match &cpu_limit {
        Some(limit) => limit.add(pid).map_err(std::io::Error::other),
        None => Ok(()),
    })
    .context("echo benchmark")?;
    let mut out = std::io::stdout().lock();
    if args.json {
        writeln!(out, "{}", serde_json::to_string(&r)?)?;
    } else {
        writeln!(
            out,
            "echo {:<5} connections={:<5} size={}B  {:>10.0} req/s  server CPU {:.2} s = {:.2} µs/req{}{}",
            r.backend,
            r.connections,
            r.message_size,
            r.requests_per_sec,
            r.server_cpu_seconds,
            r.server_cpu_us_per_request,
            r.server_cpu_pct
                .map(|p| format!("  (server capped at {p} %)"))
                .unwrap_or_default(),
            r.core_round_trip_ns
                .map(|ns| format!(
                    "  [CPU 0 <-> 1 round trip {ns:.0} ns before, {} after]",
                    r.core_round_trip_after_ns
                        .map_or_else(|| "-".to_owned(), |a| format!("{a:.0} ns"))
                ))
                .unwrap_or_default()
        )?;
    }
    Ok(())
}

/// The server half (runs until its standard input closes).
pub fn run_server(args: &EchoServerArgs) -> anyhow::Result<()> {
    echo::server::serve(args.backend).context("echo server")
}
