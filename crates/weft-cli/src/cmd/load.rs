//! `weft load ...`: load generators that measure a server from outside (memcached, HTTP).

use std::time::Duration;

use std::path::PathBuf;

use clap::{ArgGroup, Args, Subcommand};
use weft_load::dist::{KeyDist, ValueSize};
use weft_load::{http, memcached};

#[derive(Debug, Args)]
pub struct LoadArgs {
    #[command(subcommand)]
    command: LoadCommand,
}

#[derive(Debug, Subcommand)]
enum LoadCommand {
    /// Open-loop memcached load (like mutilate): Poisson arrivals per connection, get/set mix,
    /// latency from the intended send time. Works against weft's cache and real memcached.
    Memcached(MemcachedArgs),
    /// HTTP load (like httperf): sessions on a Poisson schedule, each a new connection with
    /// --requests-per-session requests, names drawn from a file set or URL list; a request not
    /// answered within --timeout is an error.
    Http(HttpArgs),
}

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("names").required(true).args(["fileset", "urls"])))]
#[command(group(ArgGroup::new("rate_kind").required(true).args(["session_rate", "rate"])))]
struct HttpArgs {
    /// Server address, HOST:PORT.
    #[arg(long, default_value = "127.0.0.1:8080")]
    server: String,
    /// A directory made by `weft fileset` (the same tree the server serves); names are drawn
    /// with the popularity its manifest gives.
    #[arg(long, value_name = "DIR")]
    fileset: Option<PathBuf>,
    /// A file of URL paths, one per line, most popular first (drawn Zipf, s = 1).
    #[arg(long, value_name = "FILE")]
    urls: Option<PathBuf>,
    /// Sessions started per second.
    #[arg(long)]
    session_rate: Option<f64>,
    /// Requests per second (sessions per second = rate / --requests-per-session);
    /// 0 = closed loop: --connections keep-alive connections sending back to back (like wrk).
    #[arg(long)]
    rate: Option<f64>,
    /// Open loop over --connections persistent keep-alive connections instead of httperf's
    /// sessions: --rate requests/s, Poisson, each sent on a random connection, one request
    /// outstanding per connection (like wrk2 and benches/openloop). Replies/s counts what came
    /// back inside the window; latency runs from each request's intended time.
    #[arg(long)]
    persistent: bool,
    /// Connections of the closed loop (--rate 0) or of --persistent.
    #[arg(long, default_value_t = 32)]
    connections: usize,
    /// Requests in each session, sent one after another on its connection.
    #[arg(long, default_value_t = 1)]
    requests_per_session: usize,
    /// End each session as httperf does: the last request does not carry `Connection:
    /// close`, and the client closes the connection once its reply is in (by default the
    /// last request asks the server to close, and the server closes first)
    #[arg(long)]
    client_closes: bool,
    /// Milliseconds a session waits between a reply and its next request.
    #[arg(long, default_value_t = 0)]
    think_time: u64,
    /// Seconds measured (after the warm-up).
    #[arg(long, default_value_t = 10.0, value_parser = parse_seconds)]
    duration: f64,
    /// Seconds of load before measuring starts.
    #[arg(long, default_value_t = 1.0, value_parser = parse_seconds)]
    warmup: f64,
    /// Client timeout in seconds: a request not answered by then is an error.
    #[arg(long, default_value_t = 10.0, value_parser = parse_seconds)]
    timeout: f64,
    /// Generator threads (processors of its weft cluster).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Most sessions open at once; 0 = as many as the descriptor limit allows.
    #[arg(long, default_value_t = 0)]
    max_sessions: usize,
    /// Seed of the schedule and name draws.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print one JSON object (target_rate, replies_per_sec, errors {timeout refused reset
    /// bad_status fd_unavailable other}, latency_us {...}, generator_*) instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct MemcachedArgs {
    /// Server address, HOST:PORT.
    #[arg(long, default_value = "127.0.0.1:11211")]
    server: String,
    /// Client connections; each sees Poisson arrivals of rate qps/connections (at depth 1 one
    /// Poisson process per generator thread, each arrival sent on a random connection: the
    /// same load at one timer for all).
    #[arg(long, default_value_t = 32)]
    connections: usize,
    /// Target requests per second over all connections; 0 = closed loop, as fast as replies
    /// come back (each connection keeps --depth requests outstanding).
    #[arg(long, default_value_t = 0.0)]
    qps: f64,
    /// Seconds measured (after the warm-up).
    #[arg(long, default_value_t = 10.0, value_parser = parse_seconds)]
    duration: f64,
    /// Seconds of load before measuring starts.
    #[arg(long, default_value_t = 1.0, value_parser = parse_seconds)]
    warmup: f64,
    /// Share of requests that are sets (the rest are gets), between 0 and 1.
    #[arg(long, default_value_t = 0.03)]
    update_ratio: f64,
    /// Distinct keys (`key:000000000000` ...); all are stored once before the run unless
    /// --no-preload.
    #[arg(long, default_value_t = 10_000)]
    keys: u64,
    /// Key popularity: uniform or zipf:S.
    #[arg(long, default_value = "uniform")]
    key_dist: KeyDist,
    /// Value sizes of sets: fixed:N, uniform:A:B, gpareto:LOC:SCALE:SHAPE or etc (Facebook
    /// ETC, as mutilate's fb_value).
    #[arg(long, default_value = "fixed:200")]
    value_size: ValueSize,
    /// Most requests outstanding on one connection (pipelining depth).
    #[arg(long, default_value_t = 1)]
    depth: usize,
    /// Request protocol: classic (get/set) or meta (mg/ms). memcached 1.6 sends each
    /// pipelined classic get's reply on its own but a batch of meta gets' replies together.
    #[arg(long, default_value = "classic")]
    protocol: memcached::request::Protocol,
    /// With --depth above 1: one write per request. By default a connection writes every
    /// request that is due and has room in one write (one segment), as pipelining clients
    /// buffer theirs.
    #[arg(long)]
    write_per_request: bool,
    /// Generator threads (processors of its weft cluster).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// A reply slower than this many seconds counts as a timeout.
    #[arg(long, default_value_t = 1.0, value_parser = parse_seconds)]
    timeout: f64,
    /// Do not store every key before the run (gets of unstored keys miss).
    #[arg(long)]
    no_preload: bool,
    /// Open loop, depth 1: poll (yield) instead of sleeping when the next arrival is at most
    /// this many microseconds away. A sleep costs the generator's thread a wake-up (tens of
    /// us of CPU on a VM) and comes back late; polling keeps the core busy, so judge the
    /// generator by `generator_send_lag_us` then, not by its busy share. 0 = always sleep.
    #[arg(long, default_value_t = 100)]
    spin_us: u64,
    /// The generator's idle processors poll their completion queues for up to this many
    /// microseconds before they sleep (the runtime's idle poll; at most 1000), so a reply
    /// that comes soon is read without a wake-up. Costs the generator's cores the time they
    /// poll: with a send lag measured (open loop, depth 1) that judges the generator, not its
    /// busy share. io_uring only. 0 = sleep at once.
    #[arg(long, default_value_t = 0)]
    idle_poll_us: u64,
    /// Seed of the key, size and schedule draws.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print one JSON object (target_qps, actual_qps, requests, misses, errors, timeouts,
    /// latency_us {mean p50 p90 p99 p999 max}, generator_*) instead of text.
    #[arg(long)]
    json: bool,
    /// Say why connections closed.
    #[arg(short, long)]
    verbose: bool,
}

fn parse_seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!("`{s}` is not a number of seconds >= 0")),
    }
}

/// Runs a parsed `weft load` command.
pub fn run(args: LoadArgs) -> anyhow::Result<()> {
    match args.command {
        LoadCommand::Memcached(a) => {
            let config = memcached::Config {
                server: a.server,
                connections: a.connections,
                qps: a.qps,
                duration: Duration::from_secs_f64(a.duration),
                warmup: Duration::from_secs_f64(a.warmup),
                update_ratio: a.update_ratio,
                keys: a.keys,
                key_dist: a.key_dist,
                value_size: a.value_size,
                depth: a.depth,
                protocol: a.protocol,
                write_per_request: a.write_per_request,
                threads: a.threads,
                timeout: Duration::from_secs_f64(a.timeout),
                preload: !a.no_preload,
                seed: a.seed,
                connect_timeout: Duration::from_secs(5),
                verbose: a.verbose,
                spin: Duration::from_micros(a.spin_us),
                idle_poll: Duration::from_micros(a.idle_poll_us),
            };
            let report = memcached::run(&config)?;
            if a.json {
                println!("{}", serde_json::to_string(&report)?);
            } else {
                println!("{}", report.human());
            }
            if report.generator_saturated && a.json {
                eprintln!("weft load: warning: the generator's own cores were saturated; the server may be faster than measured");
            }
            Ok(())
        }
        LoadCommand::Http(a) => {
            let source = match (a.fileset, a.urls) {
                (Some(dir), _) => http::Source::Fileset(dir),
                (None, Some(file)) => http::Source::Urls(file),
                (None, None) => unreachable!("clap requires --fileset or --urls"),
            };
            let per = a.requests_per_session.max(1) as f64;
            let session_rate = match (a.session_rate, a.rate) {
                (Some(r), _) => r,
                (None, Some(r)) => r / per,
                (None, None) => unreachable!("clap requires --session-rate or --rate"),
            };
            let config = http::Config {
                server: a.server,
                source,
                session_rate,
                connections: a.connections,
                persistent: a.persistent,
                requests_per_session: a.requests_per_session,
                client_closes: a.client_closes,
                think: Duration::from_millis(a.think_time),
                duration: Duration::from_secs_f64(a.duration),
                warmup: Duration::from_secs_f64(a.warmup),
                timeout: Duration::from_secs_f64(a.timeout),
                threads: a.threads,
                max_sessions: a.max_sessions,
                seed: a.seed,
            };
            let report = http::run(&config)?;
            if a.json {
                println!("{}", serde_json::to_string(&report)?);
                if report.generator_saturated {
                    eprintln!("weft load: warning: the generator's own cores were saturated; the server may be faster than measured");
                }
            } else {
                println!("{}", report.human());
            }
            Ok(())
        }
    }
}
