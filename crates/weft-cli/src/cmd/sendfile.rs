//! `weft bench send-file`: the ways of sending a file over loopback TCP
//! (`weft_bench::files`).

use std::io::Write;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use weft::fs::SendFileMethod;
use weft::IoBackend;
use weft_bench::files::{self, FilesParams};

#[derive(Debug, Args)]
pub struct SendFileArgs {
    /// uring or epoll.
    #[arg(long, default_value = "uring")]
    backend: IoBackend,

    /// Comma-separated methods: auto, sendfile, splice, read-send.
    #[arg(
        long,
        default_value = "sendfile,splice,read-send",
        value_delimiter = ','
    )]
    method: Vec<SendFileMethod>,

    /// Comma-separated file sizes in bytes.
    #[arg(long, default_value = "4096,65536,1048576", value_delimiter = ',')]
    size: Vec<usize>,

    /// Client connections (threads), each in a closed loop.
    #[arg(long, default_value_t = 8)]
    connections: usize,

    /// Seconds measured per combination.
    #[arg(long, default_value_t = 2.0)]
    duration: f64,

    /// Print JSON lines instead of text.
    #[arg(long)]
    json: bool,
}

/// Runs every method × size and prints one line each.
pub fn run(args: &SendFileArgs) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    for &size_bytes in &args.size {
        for &method in &args.method {
            let p = FilesParams {
                backend: args.backend,
                method,
                size_bytes,
                connections: args.connections.max(1),
                duration: Duration::from_secs_f64(args.duration),
            };
            let r = files::run(&p).with_context(|| format!("send-file {method:?} {size_bytes}"))?;
            if args.json {
                writeln!(out, "{}", serde_json::to_string(&r)?)?;
            } else {
                writeln!(
                    out,
                    "send-file {:<5} {:<9} {:>8} B  {:>9.0} req/s  {:>6.2} Gbit/s  server {:>6.2} µs/req",
                    r.backend, r.method, r.size_bytes, r.requests_per_sec, r.gbit_per_sec,
                    r.server_cpu_us_per_request
                )?;
            }
        }
    }
    Ok(())
}
