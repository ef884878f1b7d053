//! `weft memcached`: the memcached-compatible cache server, accepting memcached's own flags so
//! an operator can swap the binaries. Flags weft does not support are refused by name.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::builder::TypedValueParser;
use clap::Args;
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use weft_cache::{Server, Settings};

/// How long connections get to finish what they have read after SIGTERM/SIGINT.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

#[derive(Debug, Args)]
#[command(
    disable_version_flag = true,
    about = "A memcached-compatible cache server (text and meta protocol of memcached 1.6)",
    after_help = "Like memcached: `weft memcached -p 11211 -m 64 -c 1024 -t 4 -U 0 -u memcache`.\n\
                  Not supported (refused): UDP (-U other than 0), -o options, the binary protocol."
)]
pub struct MemcachedArgs {
    /// TCP port to listen on (0 = any free port).
    #[arg(short = 'p', long = "port", default_value_t = 11211)]
    port: u16,

    /// Interface(s) to listen on, comma-separated or repeated [default: all interfaces].
    #[arg(short = 'l', long = "listen", value_delimiter = ',')]
    listen: Vec<String>,

    /// Item memory in megabytes (a k/m/g suffix is accepted).
    #[arg(short = 'm', long = "memory-limit", default_value = "64", value_parser = parse_megabytes)]
    memory_limit_mb: usize,

    /// Maximum simultaneous connections; more are told "ERROR Too many open connections".
    #[arg(short = 'c', long = "conn-limit", default_value_t = 1024,
          value_parser = clap::value_parser!(u32).range(1..).map(|n| n as usize))]
    conn_limit: usize,

    /// Processors (OS threads running connection fibers).
    #[arg(short = 't', long = "threads", default_value_t = 4,
          value_parser = clap::value_parser!(u32).range(1..=1024).map(|n| n as usize))]
    threads: usize,

    /// Largest item (bytes, or with a k/m suffix), 1k..1024m.
    #[arg(short = 'I', long = "max-item-size", default_value = "1m", value_parser = parse_item_size)]
    max_item_size: usize,

    /// Return an error when memory is exhausted instead of evicting items.
    #[arg(short = 'M', long = "disable-evictions")]
    disable_evictions: bool,

    /// UDP port: only 0 (off) is accepted; weft does not serve UDP.
    #[arg(short = 'U', long = "udp-port", default_value_t = 0)]
    udp_port: u16,

    /// Run as this user (required when started as root; `-u root` keeps root).
    #[arg(short = 'u', long = "user")]
    user: Option<String>,

    /// Verbose: -v errors and connection events, -vv also every command.
    #[arg(short = 'v', long = "verbose", action = clap::ArgAction::Count)]
    verbose: u8,

    /// Listen on this Unix socket instead of TCP.
    #[arg(short = 's', long = "unix-socket")]
    unix_socket: Option<PathBuf>,

    /// Permission bits (octal) of the Unix socket.
    #[arg(short = 'a', long = "unix-mask", default_value = "700", value_parser = parse_octal)]
    unix_mask: u32,

    /// Print the version and exit.
    #[arg(short = 'V', long = "version")]
    version: bool,

    /// memcached's extended options: none is supported, each is refused by name.
    #[arg(short = 'o', long = "extended", value_delimiter = ',')]
    extended: Vec<String>,

    /// weft scheduling policy (`weft bench sched --list-schedulers` lists them all).
    #[arg(long, default_value = weft_cache::config::DEFAULT_SCHEDULER)]
    scheduler: String,

    /// A client that does not read its replies for this many milliseconds is disconnected.
    #[arg(long, default_value_t = 30_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    write_stall_timeout_ms: u64,

    /// I/O backend: uring or epoll [default: uring, epoll when io_uring is unavailable].
    #[arg(long, value_parser = ["uring", "epoll"])]
    io: Option<String>,
}

fn parse_size_with_suffix(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (digits, mult) = match s.chars().last() {
        Some('k' | 'K') => (&s[..s.len() - 1], 1u64 << 10),
        Some('m' | 'M') => (&s[..s.len() - 1], 1u64 << 20),
        Some('g' | 'G') => (&s[..s.len() - 1], 1u64 << 30),
        _ => (s, 1),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("'{s}' is not a size (a number with an optional k, m or g)"))?;
    n.checked_mul(mult)
        .ok_or_else(|| format!("'{s}' is too large"))
}

fn parse_megabytes(s: &str) -> Result<usize, String> {
    // A bare number is megabytes (memcached's -m); a suffixed one is bytes.
    let bytes = if s.trim().chars().all(|c| c.is_ascii_digit()) {
        parse_size_with_suffix(s)? << 20
    } else {
        parse_size_with_suffix(s)?
    };
    let mb = (bytes >> 20) as usize;
    if mb == 0 {
        return Err("the memory limit must be at least 1 megabyte".into());
    }
    Ok(mb)
}

fn parse_item_size(s: &str) -> Result<usize, String> {
    let n = parse_size_with_suffix(s)?;
    if n < 1024 {
        return Err("Item max size cannot be less than 1024 bytes.".into());
    }
    if n > 1024 * 1024 * 1024 {
        return Err("Cannot set item size limit higher than 1 gigabyte.".into());
    }
    Ok(n as usize)
}

fn parse_octal(s: &str) -> Result<u32, String> {
    u32::from_str_radix(s, 8).map_err(|_| format!("'{s}' is not an octal permission mask"))
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// memcached's `-u`: switch to that user (only meaningful as root).
fn drop_privileges(user: &str) -> anyhow::Result<()> {
    if !is_root() || user == "root" {
        return Ok(());
    }
    let name = std::ffi::CString::new(user).context("bad user name")?;
    // SAFETY: getpwnam returns a pointer to static storage or null; we read it at once.
    let (uid, gid) = unsafe {
        let pw = libc::getpwnam(name.as_ptr());
        if pw.is_null() {
            bail!("can't find the user {user} to switch to");
        }
        ((*pw).pw_uid, (*pw).pw_gid)
    };
    // SAFETY: plain system calls with values from getpwnam.
    unsafe {
        if libc::setgroups(0, std::ptr::null()) != 0 && libc::setgid(gid) != 0
            || libc::setgid(gid) != 0
            || libc::setuid(uid) != 0
        {
            bail!("failed to assume identity of user {user}");
        }
    }
    Ok(())
}

impl MemcachedArgs {
    fn settings(&self) -> anyhow::Result<Settings> {
        if let Some(opt) = self.extended.first() {
            bail!(
                "weft memcached does not support the -o option '{opt}' (no extended options are \
                 supported; remove -o)"
            );
        }
        if self.udp_port != 0 {
            bail!(
                "weft memcached does not serve UDP (-U {}); start it with -U 0",
                self.udp_port
            );
        }
        if is_root() && self.user.is_none() {
            bail!("can't run as root without the -u switch");
        }
        let memory = self.memory_limit_mb * 1024 * 1024;
        if self.max_item_size > memory / 2 {
            bail!("Cannot set item size limit higher than 1/2 of memory max.");
        }
        let io = match self.io.as_deref() {
            Some("uring") => Some(weft::IoBackend::Uring),
            Some("epoll") => Some(weft::IoBackend::Epoll),
            _ => None,
        };
        if !weft::sched::POLICIES
            .iter()
            .any(|p| p.name == self.scheduler)
        {
            let names: Vec<_> = weft::sched::POLICIES.iter().map(|p| p.name).collect();
            bail!(
                "unknown scheduler '{}' (known: {})",
                self.scheduler,
                names.join(", ")
            );
        }
        Ok(Settings {
            port: self.port,
            listen: self.listen.clone(),
            memory_limit_mb: self.memory_limit_mb,
            max_connections: self.conn_limit,
            processors: self.threads,
            item_size_max: self.max_item_size,
            evictions: !self.disable_evictions,
            verbosity: u32::from(self.verbose),
            unix_socket: self.unix_socket.clone(),
            unix_mask: self.unix_mask,
            scheduler: self.scheduler.clone(),
            io,
            write_stall_timeout_ms: self.write_stall_timeout_ms,
            ..Settings::default()
        })
    }
}

pub fn run(args: MemcachedArgs) -> anyhow::Result<()> {
    if args.version {
        println!(
            "weft memcached {} (memcached {} protocol)",
            env!("CARGO_PKG_VERSION"),
            weft_cache::protocol::VERSION
        );
        return Ok(());
    }
    let settings = args.settings()?;
    let verbose = settings.verbosity > 0;
    // Signals are blocked into the iterator before any processor thread starts.
    let mut signals = Signals::new([SIGTERM, SIGINT]).context("installing signal handlers")?;
    let server = Server::start(settings).context("starting the server")?;
    if let Some(user) = &args.user {
        drop_privileges(user)?;
    }
    if verbose {
        for a in server.local_addrs() {
            println!("weft memcached listening on {a}");
        }
    }
    if let Some(sig) = signals.forever().next() {
        if verbose {
            eprintln!("Signal handled: {sig}. Shutting down.");
        }
    }
    server.shutdown(SHUTDOWN_GRACE);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_item_size("1m"), Ok(1 << 20));
        assert_eq!(parse_item_size("2048"), Ok(2048));
        assert!(parse_item_size("10").is_err());
        assert_eq!(parse_megabytes("64"), Ok(64));
        assert_eq!(parse_megabytes("1g"), Ok(1024));
        assert!(parse_megabytes("x").is_err());
    }
}
