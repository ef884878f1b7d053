//! `weft bench load`'s command line; the benchmark is `weft_bench::generators`.

use clap::Args;

#[derive(Debug, Args)]
pub struct LoadBenchArgs {
    /// Connections for the closed-loop comparisons.
    #[arg(long, default_value_t = 32)]
    connections: usize,
    /// Seconds per measurement.
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
    /// Repetitions of each comparison (medians are reported; single runs on a shared VM move
    /// by ±15 %, so three were not enough to settle a 10 % agreement).
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Offered loads (req/s) at which generator and memcached CPU per request are compared (110k
    /// is near memcached -t 1's saturation on one core; 0 = closed loop, as fast as the
    /// generator's one core can drive memcached's one core).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "20000,50000,80000,110000,0"
    )]
    cpu_rates: Vec<f64>,
    /// Connections of the open-loop cross-check against benches/openloop/openloop.c (the
    /// thesis's 15,360; needs `ulimit -n` of at least that plus 64, and cc). 0 skips it.
    #[arg(long, default_value_t = 15_360)]
    open_loop_connections: usize,
    /// Offered requests/s of the open-loop cross-check (a quarter to a half of memcached
    /// -t 1's peak at 15,360 connections on a 2-core VM).
    #[arg(long, default_value_t = 50_000.0)]
    open_loop_qps: f64,
    /// Print one JSON object per comparison.
    #[arg(long)]
    json: bool,
}

impl LoadBenchArgs {
    /// The benchmark's options, as the library takes them.
    pub fn options(&self) -> weft_bench::generators::Options {
        weft_bench::generators::Options {
            connections: self.connections,
            duration: self.duration,
            runs: self.runs,
            cpu_rates: self.cpu_rates.clone(),
            open_loop_connections: self.open_loop_connections,
            open_loop_qps: self.open_loop_qps,
            json: self.json,
        }
    }
}

pub fn run(args: &LoadBenchArgs) -> anyhow::Result<()> {
    weft_bench::generators::run(&args.options())
}
