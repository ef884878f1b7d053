//! `weft memcached`: the memcached-compatible cache server, accepting memcached 1.6.18's whole
//! command line so an operator can swap the binaries: the flags weft has a behaviour for set
//! it, the tuning ones weft has no behaviour for are accepted with a `-v` line saying why
//! they have no effect, and only what would silently weaken a deployment (UDP, SASL, TLS, the binary
//! protocol) is refused by name.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::builder::TypedValueParser;
use clap::Args;
use signal_hook::consts::{SIGINT, SIGTERM, SIGUSR1};
use signal_hook::iterator::Signals;
use weft_cache::{Server, Settings};

use super::memcached_options::{extended_option, Extended, NO_WATCH};

/// How long connections get to finish what they have read after SIGTERM/SIGINT.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

const AFTER_HELP: &str = "\
Started like memcached 1.6.18: every flag of `memcached -h` is accepted, e.g.
`weft memcached -d -P /run/memcached.pid -m 64 -p 11211 -u memcache -l 127.0.0.1`.

What memcached's flags do in weft:
  -p -U 0 -s -a -l -u -m -M -c -t -I -v -V -h   as in memcached (UDP: only -U 0)
  -d -P        daemonize (the parent exits once the server listens, with its error
               if it cannot start); the PID file is written with -d and removed on exit
  -A           the `shutdown` and `shutdown graceful` commands stop the server gracefully
  -b           the listen backlog
  -c           connections over the limit get `ERROR Too many open connections`
  -C           no CAS: every item's CAS value is 0, as in memcached
  -D <char>    per-prefix `stats detail` counters, on from the start
  -F -X -W     refuse flush_all, stats cachedump, watch with memcached's errors
  -R <n>       a connection yields to others after n requests of one read
  -Y <file>    ASCII authentication (`set <key> 0 0 <n>` with `user pass`), user:pass lines
  -B ascii|auto  the text protocol (`binary` is refused: weft has no binary protocol)
  -k -r        mlockall(2), pages locked as touched; core file size limit raised to its maximum
  -f -n        the chunk sizes of the slab classes whose 1 MiB pages hold the items,
               as memcached's
  -L           the item pages in transparent huge pages (madvise), as memcached's on
               Linux; refused, as by memcached, where the kernel has them set to never
  -e -N        accepted, no effect (no memory file, no NAPI ids)
  -S -Z        refused: SASL needs the binary protocol; weft serves no TLS
  -o <opts>    every memcached 1.6.18 option is accepted; honoured: hashpower,
               idle_timeout, lru_crawler, no_lru_crawler, lru_crawler_tocrawl,
               slab_chunk_max, maxconns_fast, modern; the others are accepted with a -v
               line saying why they have no effect; an unknown name is refused.
  -i           prints the license";

#[derive(Debug, Args)]
#[command(
    disable_version_flag = true,
    // memcached takes the last of a repeated flag (`-t 2 -t 1` runs one thread).
    args_override_self = true,
    about = "A memcached-compatible cache server (text and meta protocol of memcached 1.6)",
    after_help = AFTER_HELP
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

    /// Print the license and exit.
    #[arg(short = 'i', long = "license")]
    license: bool,

    /// Enable the `shutdown` command.
    #[arg(short = 'A', long = "enable-shutdown")]
    enable_shutdown: bool,

    /// Run as a daemon.
    #[arg(short = 'd', long = "daemon")]
    daemon: bool,

    /// Save the PID in this file (only with -d, as memcached).
    #[arg(short = 'P', long = "pidfile")]
    pidfile: Option<PathBuf>,

    /// Raise the core file size limit to its maximum.
    #[arg(short = 'r', long = "enable-coredumps")]
    enable_coredumps: bool,

    /// Lock all paged memory (mlockall).
    #[arg(short = 'k', long = "lock-memory")]
    lock_memory: bool,

    /// Slab growth factor: the chunk sizes of the slab classes.
    #[arg(short = 'f', long = "slab-growth-factor", default_value_t = 1.25)]
    slab_growth_factor: f64,

    /// Minimum space for key+value+flags of the smallest size class.
    #[arg(short = 'n', long = "slab-min-size", default_value_t = 48)]
    slab_min_size: usize,

    /// Large memory pages: the item pages are advised into transparent huge pages (one TLB
    /// entry for 2 MiB of items), as memcached does; refused where they are set to `never`.
    #[arg(short = 'L', long = "enable-largepages")]
    large_pages: bool,

    /// Key prefix delimiter for `stats detail`; turns per-prefix stats on.
    #[arg(short = 'D')]
    delimiter: Option<char>,

    /// Requests one connection runs before yielding to others.
    #[arg(short = 'R', long = "max-reqs-per-event", default_value_t = 20,
          value_parser = clap::value_parser!(u32).range(1..).map(|n| n as usize))]
    max_reqs_per_event: usize,

    /// Disable CAS (every item's CAS value is 0).
    #[arg(short = 'C', long = "disable-cas")]
    disable_cas: bool,

    /// Listen backlog.
    #[arg(short = 'b', long = "listen-backlog", default_value_t = 1024,
          value_parser = clap::value_parser!(u32).range(1..))]
    listen_backlog: u32,

    /// Protocol: ascii or auto (both serve the text protocol); binary is refused.
    #[arg(short = 'B', long = "protocol", default_value = "auto")]
    protocol: String,

    /// SASL (binary protocol only): refused, weft has no binary protocol.
    #[arg(short = 'S', long = "enable-sasl")]
    enable_sasl: bool,

    /// Disable the flush_all command.
    #[arg(short = 'F', long = "disable-flush-all")]
    disable_flush_all: bool,

    /// Disable stats cachedump and lru_crawler metadump.
    #[arg(short = 'X', long = "disable-dumping")]
    disable_dumping: bool,

    /// Disable watch commands (weft refuses them in any case).
    #[arg(short = 'W', long = "disable-watch")]
    disable_watch: bool,

    /// ASCII authentication from a file of user:password lines.
    #[arg(short = 'Y', long = "auth-file")]
    auth_file: Option<PathBuf>,

    /// memcached's restartable memory file: accepted, no effect (items are in memory only).
    #[arg(short = 'e', long = "memory-file")]
    memory_file: Option<PathBuf>,

    /// TLS: refused, weft serves no TLS.
    #[arg(short = 'Z', long = "enable-ssl")]
    enable_ssl: bool,

    /// NAPI ids: accepted, no effect.
    #[arg(short = 'N', long = "napi-ids")]
    napi_ids: Option<u32>,

    /// memcached's extended options (comma-separated): see below.
    #[arg(short = 'o', long = "extended", value_delimiter = ',')]
    extended: Vec<String>,

    /// weft scheduling policy (`weft bench sched --list-schedulers` lists them all).
    #[arg(long, default_value = weft_cache::config::DEFAULT_SCHEDULER)]
    scheduler: String,

    /// A client that does not read its replies for this many milliseconds is disconnected.
    #[arg(long, default_value_t = 30_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    write_stall_timeout_ms: u64,

    /// Serve each connection on an OS thread of its own instead of a fiber: the same session
    /// code, whose socket calls then block the thread (the accept loop stays a fiber). For
    /// comparing fibers with OS threads (`weft experiment threads`).
    #[arg(long)]
    threads_per_connection: bool,

    /// I/O backend: uring or epoll [default: uring, epoll when io_uring is unavailable].
    #[arg(long, value_parser = ["uring", "epoll"])]
    io: Option<String>,

    /// How long an idle processor polls for the next request before it sleeps, in
    /// microseconds (0, the default: sleep at once). Polling spares a request the wake-up of
    /// a sleeping thread (tens of microseconds on a virtual machine) and costs the CPU it
    /// spends; a processor polls only while at least half of its recent idle periods ended
    /// within the window, and keeps at least 10 % of its time asleep.
    #[arg(long, default_value_t = weft::DEFAULT_IDLE_POLL.as_micros() as u64, value_parser = clap::value_parser!(u64).range(0..=weft::MAX_IDLE_POLL.as_micros() as u64))]
    idle_poll_us: u64,

    /// While serving, each processor keeps a timer armed when it sleeps, due at the kernel's
    /// next tick or this many microseconds from now if that is sooner (0: none), so that the
    /// kernel keeps the CPU's tick running and a request that wakes the server does not pay for
    /// restarting it (a trap to the hypervisor on a virtual machine, 4-5 microseconds here).
    /// Due with the tick it shares the tick's interrupt; a period shorter than the tick (1000,
    /// the first default) adds an interrupt of its own each period. After 4 periods with
    /// nothing to do the processor stops arming it.
    #[arg(long, default_value_t = weft::DEFAULT_KEEP_TICK.as_micros() as u64, value_parser = clap::value_parser!(u64).range(0..=weft::MAX_KEEP_TICK.as_micros() as u64))]
    keep_tick_us: u64,
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

/// Where Linux says whether transparent huge pages are used: `always`, `madvise` or `never`,
/// the one in force in brackets.
const THP_ENABLED: &str = "/sys/kernel/mm/transparent_hugepage/enabled";

/// `-L` as memcached 1.6 checks it on Linux: transparent huge pages must exist and not be
/// `never` (the item pages are then advised into them); otherwise it refuses to start.
/// `enabled` is the content of [`THP_ENABLED`], `None` if it cannot be read.
fn check_large_pages(enabled: Option<&str>) -> anyhow::Result<()> {
    let mode = enabled.and_then(|text| {
        let start = text.find('[')? + 1;
        let len = text[start..].find(']')?;
        Some(&text[start..start + len])
    });
    match mode {
        Some("always" | "madvise") => Ok(()),
        Some(other) => bail!(
            "Cannot enable large pages on this system: transparent huge pages are set to \
             '{other}' ({THP_ENABLED})"
        ),
        None => bail!(
            "Cannot enable large pages on this system: no transparent huge pages \
             ({THP_ENABLED} cannot be read)"
        ),
    }
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

/// Reads a `-Y` file: one `user:password` per line (memcached's format).
fn load_auth_file(path: &std::path::Path) -> anyhow::Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let text = std::fs::read(path)
        .with_context(|| format!("could not load the auth file {}", path.display()))?;
    let mut users = Vec::new();
    for (i, line) in text.split(|&b| b == b'\n').enumerate() {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            continue;
        }
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            bail!(
                "auth file {} line {}: not user:password",
                path.display(),
                i + 1
            );
        };
        users.push((line[..colon].to_vec(), line[colon + 1..].to_vec()));
    }
    if users.is_empty() {
        bail!("auth file {} has no user:password line", path.display());
    }
    Ok(users)
}

impl MemcachedArgs {
    /// The server settings, and the `-v` lines about flags that have no effect in weft.
    pub(super) fn settings(&self) -> anyhow::Result<(Settings, Vec<String>)> {
        if self.udp_port != 0 {
            bail!(
                "weft memcached does not serve UDP (-U {}); start it with -U 0",
                self.udp_port
            );
        }
        if self.enable_sasl {
            bail!(
                "weft memcached does not support SASL (-S): it authenticates only the binary \
                 protocol, which weft does not serve; use -Y for ASCII authentication"
            );
        }
        if self.enable_ssl {
            bail!("weft memcached does not serve TLS (-Z); put a TLS proxy in front of it");
        }
        let binding_protocol = match self.protocol.as_str() {
            "auto" => "auto-negotiate",
            "ascii" => "ascii",
            "binary" => bail!(
                "weft memcached does not serve memcached's binary protocol (-B binary); \
                 use -B ascii or -B auto"
            ),
            other => bail!(
                "Invalid value for binding protocol: {other}\n -- should be one of auto, \
                 binary, or ascii"
            ),
        };
        if self.slab_growth_factor <= 1.0 {
            bail!("Factor must be greater than 1");
        }
        if self.slab_min_size == 0 {
            bail!("Chunk size must be greater than 0");
        }
        if is_root() && self.user.is_none() {
            bail!("can't run as root without the -u switch");
        }
        let memory = self.memory_limit_mb * 1024 * 1024;
        if self.max_item_size > memory / 2 {
            bail!("Cannot set item size limit higher than 1/2 of memory max.");
        }
        if self.large_pages {
            check_large_pages(std::fs::read_to_string(THP_ENABLED).ok().as_deref())?;
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
        let prefix_delimiter = match self.delimiter {
            None => b':',
            Some(c) if c.is_ascii() => c as u8,
            Some(c) => bail!("-D needs a single ASCII character, not '{c}'"),
        };
        let auth = match &self.auth_file {
            Some(path) => Some(load_auth_file(path)?),
            None => None,
        };
        let unix_socket = match &self.unix_socket {
            // Absolute, so that -d's chdir("/") does not move it.
            Some(p) => Some(std::path::absolute(p).context("the -s path")?),
            None => None,
        };
        let mut settings = Settings {
            port: self.port,
            listen: self.listen.clone(),
            memory_limit_mb: self.memory_limit_mb,
            max_connections: self.conn_limit,
            processors: self.threads,
            item_size_max: self.max_item_size,
            evictions: !self.disable_evictions,
            verbosity: u32::from(self.verbose),
            unix_socket,
            unix_mask: self.unix_mask,
            scheduler: self.scheduler.clone(),
            io,
            idle_poll_us: self.idle_poll_us,
            keep_tick_us: self.keep_tick_us,
            write_stall_timeout_ms: self.write_stall_timeout_ms,
            threads_per_connection: self.threads_per_connection,
            backlog: self.listen_backlog,
            shutdown_command: self.enable_shutdown,
            flush_enabled: !self.disable_flush_all,
            dump_enabled: !self.disable_dumping,
            use_cas: !self.disable_cas,
            large_pages: self.large_pages,
            auth,
            prefix_delimiter,
            detail_enabled: self.delimiter.is_some(),
            reqs_per_event: self.max_reqs_per_event,
            binding_protocol,
            slab_growth_factor: self.slab_growth_factor,
            slab_chunk_min: self.slab_min_size,
            ..Settings::default()
        };
        let mut notes = Vec::new();
        let mut note = |flag: String, why: &str| notes.push(format!("{flag}: no effect: {why}"));
        if let Some(file) = &self.memory_file {
            note(
                format!("-e {}", file.display()),
                "items are kept in memory only, so a restart starts empty",
            );
        }
        if let Some(n) = self.napi_ids {
            note(
                format!("-N {n}"),
                "weft does not group connections by NAPI id",
            );
        }
        if self.disable_watch {
            settings
                .reported
                .push(("watch_enabled".into(), "no".into()));
            note("-W".into(), NO_WATCH);
        }
        if self.pidfile.is_some() && !self.daemon {
            note(
                "-P".into(),
                "the PID file is written only with -d (as memcached)",
            );
        }
        for item in &self.extended {
            match extended_option(&mut settings, item).map_err(anyhow::Error::msg)? {
                Extended::Honoured => {}
                Extended::Inert(why) => note(format!("-o {item}"), why),
            }
        }
        Ok((settings, notes))
    }
}

/// Forks into the background (memcached's `daemonize`): the parent waits until the child
/// reports on a pipe that it listens (exit 0) or why it could not start (printed, exit 1).
/// Returns, in the child, the pipe to report on. Must run before any thread starts.
fn daemonize(nochdir: bool, noclose: bool) -> anyhow::Result<std::fs::File> {
    use std::io::Read;
    use std::os::fd::FromRawFd;
    let mut fds = [0i32; 2];
    // SAFETY: pipe2 fills the two-element array we pass.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        bail!("pipe: {}", std::io::Error::last_os_error());
    }
    // SAFETY: pipe2 returned two fresh descriptors that nothing else owns.
    let (mut reader, writer) = unsafe {
        (
            std::fs::File::from_raw_fd(fds[0]),
            std::fs::File::from_raw_fd(fds[1]),
        )
    };
    // SAFETY: the process has one thread here (nothing started any), so the child may run
    // arbitrary code after fork.
    match unsafe { libc::fork() } {
        -1 => bail!("fork: {}", std::io::Error::last_os_error()),
        0 => {
            drop(reader);
            // SAFETY: plain system calls in the child; /dev/null is opened read-write and
            // duplicated onto the standard descriptors.
            unsafe {
                if libc::setsid() == -1 {
                    bail!("setsid: {}", std::io::Error::last_os_error());
                }
                if !nochdir && libc::chdir(c"/".as_ptr()) != 0 {
                    bail!("chdir /: {}", std::io::Error::last_os_error());
                }
                if !noclose {
                    let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
                    if null >= 0 {
                        libc::dup2(null, 0);
                        libc::dup2(null, 1);
                        libc::dup2(null, 2);
                        if null > 2 {
                            libc::close(null);
                        }
                    }
                }
            }
            Ok(writer)
        }
        _ => {
            drop(writer);
            let mut report = String::new();
            let _ = reader.read_to_string(&mut report);
            if report == "ok" {
                std::process::exit(0);
            }
            if report.is_empty() {
                report = "the daemon exited before it listened".into();
            }
            eprintln!("weft memcached: {report}");
            std::process::exit(1);
        }
    }
}

fn write_pidfile(path: &std::path::Path) -> anyhow::Result<()> {
    std::fs::write(path, format!("{}\n", std::process::id()))
        .with_context(|| format!("Could not open the pid file {} for writing", path.display()))
}

/// `-r`: the core file size limit up to the hard limit (memcached's `maxcore`).
fn raise_core_limit() {
    // SAFETY: getrlimit/setrlimit on a local struct.
    unsafe {
        let mut r: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_CORE, &mut r) == 0 {
            r.rlim_cur = r.rlim_max;
            libc::setrlimit(libc::RLIMIT_CORE, &r);
        }
    }
}

const LICENSE: &str = "\
weft is licensed under the MIT license or the Apache License, Version 2.0, at your option.
It speaks the protocol of memcached (Copyright (c) 2003, Danga Interactive, Inc., BSD
license), whose command line and replies it follows; it contains none of memcached's code.";

pub fn run(args: MemcachedArgs) -> anyhow::Result<()> {
    if args.version {
        println!(
            "weft memcached {} (memcached {} protocol)",
            env!("CARGO_PKG_VERSION"),
            weft_cache::protocol::VERSION
        );
        return Ok(());
    }
    if args.license {
        println!("{LICENSE}");
        return Ok(());
    }
    let (settings, notes) = args.settings()?;
    let verbose = settings.verbosity > 0;
    if verbose {
        for n in &notes {
            eprintln!("weft memcached: {n}");
        }
    }
    let pidfile = match (&args.pidfile, args.daemon) {
        (Some(p), true) => Some(std::path::absolute(p).context("the -P path")?),
        _ => None,
    };
    let mut report = if args.daemon {
        Some(daemonize(args.enable_coredumps, verbose)?)
    } else {
        None
    };
    // Registered before any processor thread starts (in the daemon, after the fork).
    let mut signals = signals_or_exit();
    let started = start(&args, settings, pidfile.as_deref());
    let server = match (started, report.as_mut()) {
        (Ok(s), Some(pipe)) => {
            use std::io::Write;
            let _ = pipe.write_all(b"ok");
            s
        }
        (Ok(s), None) => s,
        (Err(e), Some(pipe)) => {
            use std::io::Write;
            let _ = pipe.write_all(format!("{e:#}").as_bytes());
            return Err(e);
        }
        (Err(e), None) => return Err(e),
    };
    drop(report);
    // Wait for SIGTERM/SIGINT (SIGUSR1: memcached's graceful stop) or a `shutdown` command,
    // both blocked on: no periodic wake-up on the server's CPU.
    let ctx = server.context().clone();
    std::thread::Builder::new()
        .name("weft-mc-signals".into())
        .spawn(move || {
            if let Some(sig) = signals.forever().next() {
                ctx.shutdown.request(&format!("Signal handled: {sig}."));
            }
        })
        .context("starting the signal thread")?;
    let reason = server.wait_shutdown_requested();
    if verbose {
        eprintln!("{reason} Shutting down.");
    }
    server.shutdown(SHUTDOWN_GRACE);
    if let Some(p) = &pidfile {
        if let Err(e) = std::fs::remove_file(p) {
            eprintln!("Could not remove the pid file {}: {e}", p.display());
        }
    }
    Ok(())
}

fn signals_or_exit() -> Signals {
    Signals::new([SIGTERM, SIGINT, SIGUSR1]).unwrap_or_else(|e| {
        eprintln!("weft memcached: installing signal handlers: {e}");
        std::process::exit(1);
    })
}

/// Everything between parsing and serving: limits, the server, the PID file, privileges.
fn start(
    args: &MemcachedArgs,
    settings: Settings,
    pidfile: Option<&std::path::Path>,
) -> anyhow::Result<Server> {
    if args.enable_coredumps {
        raise_core_limit();
    }
    if args.lock_memory {
        // MCL_ONFAULT: lock pages as they are touched. Without it every mapping is populated
        // in full, the item pages' reservation (`-m` × 2, at least 4 GiB, MAP_NORESERVE) and
        // each fiber stack included: seconds to start and gigabytes resident, where memcached
        // locks only what it allocated.
        let flags = libc::MCL_CURRENT | libc::MCL_FUTURE | libc::MCL_ONFAULT;
        // SAFETY: mlockall takes flags only.
        if unsafe { libc::mlockall(flags) } != 0 {
            eprintln!(
                "warning: -k invalid, mlockall() failed: {}",
                std::io::Error::last_os_error()
            );
        }
    }
    let verbose = settings.verbosity > 0;
    let server = Server::start(settings).context("starting the server")?;
    if let Some(p) = pidfile {
        write_pidfile(p)?;
    }
    if let Some(user) = &args.user {
        drop_privileges(user)?;
    }
    if verbose {
        for a in server.local_addrs() {
            println!("weft memcached listening on {a}");
        }
    }
    Ok(server)
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

    #[test]
    fn large_pages_need_transparent_huge_pages_that_are_not_never() {
        assert!(check_large_pages(Some("always [madvise] never\n")).is_ok());
        assert!(check_large_pages(Some("[always] madvise never\n")).is_ok());
        let never = check_large_pages(Some("always madvise [never]\n")).unwrap_err();
        assert!(
            never.to_string().contains("Cannot enable large pages")
                && never.to_string().contains("'never'"),
            "{never}"
        );
        let missing = check_large_pages(None).unwrap_err();
        assert!(missing.to_string().contains("cannot be read"), "{missing}");
    }
}
