//! The subcommands, one file each. Adding one is a variant here and a file beside this one.

pub mod bench;
pub mod bench_memcached;
pub mod bench_memory;
pub mod echo;
pub mod experiment;
pub mod fileset;
pub mod http;
pub mod http_bench;
pub mod load;
pub mod load_bench;
pub mod memcached;
mod memcached_options;
pub mod sendfile;
pub mod study;

use clap::Subcommand;

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run benchmarks (scheduler micro-benchmarks, ...) on weft and on tokio.
    Bench(bench::BenchArgs),
    /// Serve a directory over HTTP/1.1 (static files) until SIGTERM.
    Http(http::HttpArgs),
    /// Load generators: drive a memcached or HTTP server and measure it from outside.
    Load(load::LoadArgs),
    /// Write the thesis's static-web file set (21,600 files at scale 1), deterministically.
    Fileset(fileset::FilesetArgs),
    /// The thesis experiments end to end: start weft's servers and memcached/nginx, sweep
    /// rates, write results and SVG plots. `weft experiment quick` takes about 2 minutes.
    Experiment(experiment::ExperimentArgs),
    /// A memcached-compatible cache server (accepts memcached's flags).
    Memcached(memcached::MemcachedArgs),
}

/// Runs a parsed subcommand.
pub fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Bench(args) => bench::run(args),
        Command::Http(args) => http::run(args),
        Command::Load(args) => load::run(args),
        Command::Fileset(args) => fileset::run(args),
        Command::Experiment(args) => experiment::run(args),
        Command::Memcached(args) => memcached::run(args),
    }
}
