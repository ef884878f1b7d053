//! `weft bench http`'s command line; the benchmark is `weft_bench::http`.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum IoArg {
    Uring,
    Epoll,
}

#[derive(Debug, Args)]
pub struct HttpBenchArgs {
    /// Seconds each measurement runs.
    #[arg(long, default_value_t = 10)]
    pub(super) duration: u64,

    /// Repetitions of each measurement (alternating servers); the median is reported.
    #[arg(long, alias = "runs", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub(super) repeat: u32,

    /// Connections for the keep-alive 4 KiB measurement (a) and the --open-loop mode (at most
    /// 15,360; the open-file limit is raised to its hard limit).
    #[arg(long, alias = "connections", default_value_t = 100,
          value_parser = clap::value_parser!(u32).range(1..=15_360))]
    pub(super) keepalive_conns: u32,

    /// Open-loop mode, instead of (a)–(c): comma-separated fractions of nginx's closed-loop peak
    /// over --connections keep-alive connections (e.g. 0.25,0.5,0.75), one 4 KiB file. The
    /// peak is measured first (`weft load http --rate 0`, median of --runs), then both servers
    /// open loop over as many persistent connections (`weft load http --persistent --rate R`)
    /// at each fraction, alternating per run; the table gives offered and actual req/s and
    /// p50 / p99 / p999 in ms as min–median–max over the runs.
    #[arg(long, value_name = "FRACTIONS", value_delimiter = ',',
          value_parser = super::bench_memcached::parse_fraction)]
    pub(super) open_loop: Vec<f64>,

    /// Connection counts for the short-lived closed-loop measurement (b), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "100,1000")]
    conns: Vec<u32>,

    /// Target request rates for the open-loop sweep (c), comma-separated; empty to skip.
    #[arg(long, value_delimiter = ',', default_value = "4000,8000,16000,32000")]
    rates: Vec<u32>,

    /// File-set scale (`weft fileset --scale`; 1 = the thesis's 21,600 files, 2.3 GB).
    #[arg(long, default_value_t = 0.05)]
    scale: f64,

    /// File-set seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,

    /// Where the file set is kept between runs [default: $TMPDIR/weft-bench-http-S-N].
    #[arg(long)]
    fileset_dir: Option<PathBuf>,

    /// I/O backend of weft http.
    #[arg(long, value_enum, default_value_t = IoArg::Uring)]
    io: IoArg,

    /// Give nginx `listen ... deferred` (TCP_DEFER_ACCEPT, which weft http uses by default);
    /// without it nginx runs with the listen options the issue names.
    #[arg(long)]
    nginx_deferred: bool,

    /// Cap both servers together at this % of their core (a cgroup CPU quota with a 10 ms
    /// period; needs root). With the whole core, one load core cannot open connections fast
    /// enough to saturate a server; capped, the servers saturate first, so their throughput
    /// shows their cost per request and the open-loop sweep goes past their saturation.
    #[arg(long, value_name = "PCT", value_parser = clap::value_parser!(u32).range(1..=100))]
    server_cpu_pct: Option<u32>,

    /// Which measurements to run, comma-separated: keepalive, short, open.
    #[arg(long, value_delimiter = ',', default_value = "keepalive,short,open")]
    only: Vec<String>,
}

impl HttpBenchArgs {
    /// The benchmark's options, as the library takes them.
    pub fn options(&self) -> weft_bench::http::Options {
        weft_bench::http::Options {
            duration: self.duration,
            repeat: self.repeat,
            keepalive_conns: self.keepalive_conns,
            open_loop: self.open_loop.clone(),
            conns: self.conns.clone(),
            rates: self.rates.clone(),
            scale: self.scale,
            seed: self.seed,
            fileset_dir: self.fileset_dir.clone(),
            io: match self.io {
                IoArg::Uring => weft_bench::http::Io::Uring,
                IoArg::Epoll => weft_bench::http::Io::Epoll,
            },
            nginx_deferred: self.nginx_deferred,
            server_cpu_pct: self.server_cpu_pct,
            only: self.only.clone(),
        }
    }
}

pub fn run(args: &HttpBenchArgs) -> anyhow::Result<()> {
    weft_bench::http::run(&args.options())
}
