//! Carries out parsed commands against the store and appends memcached's exact replies to a
//! connection's [`Output`]. One function per command family, in the order memcached checks
//! things, because that order decides which error a client sees.
//!
//! Invariant: a shard lock is held only inside one command's handler, never across commands
//! and never while writing to a socket.

mod classic;
pub mod detail;
mod meta;
mod stats;

use std::collections::BTreeMap;
use std::io;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};

use crate::config::Settings;
use crate::output::Output;
use crate::protocol::{Command, Limits, VERSION};
use crate::stats::bump;
use crate::store::classes::SizeClasses;
use crate::store::{Entry, Store, StoreConfig};

/// memcached's `MAX_VERBOSITY_LEVEL`.
const MAX_VERBOSITY: u32 = 2;

/// What the connection does after a command.
#[derive(Debug, PartialEq, Eq)]
pub enum Flow {
    Continue,
    /// Discard this many input bytes (a data block that cannot be stored).
    Swallow(usize),
    /// Write what is pending, then flush it now (`mn`).
    Flush,
    /// Write what is pending, then close (`quit`).
    Close,
    /// Close at once, dropping what is pending (memcached's `conn_closing`: an HTTP request
    /// line, `shutdown`).
    CloseNow,
}

/// What `stats conns` knows about a connection.
#[derive(Clone, Debug)]
pub struct ConnInfo {
    pub addr: String,
    pub listen_addr: String,
}

/// Everything connections share: the store, the settings, server-wide counters.
#[derive(Debug)]
pub struct Context {
    pub store: Store,
    pub settings: Settings,
    pub limits: Limits,
    pub verbosity: AtomicU32,
    pub curr_connections: AtomicU64,
    /// Listeners and connections by descriptor, for `stats conns`.
    pub conns: Mutex<BTreeMap<i32, ConnInfo>>,
    /// Someone asked the server to stop: a client's `shutdown` (with `-A`), or its owner (a
    /// signal). The owner waits for it ([`ShutdownRequest::wait`]) and stops the server.
    pub shutdown: ShutdownRequest,
    /// Per-prefix counters for `stats detail` (`-D`).
    pub detail: detail::Detail,
}

/// A request to stop the server, and why: the first request's reason is kept. Safe to make
/// from a fiber (the lock is held only to store the reason and notify, never across a park).
#[derive(Debug, Default)]
pub struct ShutdownRequest {
    reason: Mutex<Option<String>>,
    made: Condvar,
}

impl ShutdownRequest {
    /// Asks the owner to stop the server; `reason` is what it reports (a later request's
    /// reason is dropped).
    pub fn request(&self, reason: &str) {
        let mut r = crate::fatal::lock(&self.reason, "shutdown request");
        if r.is_none() {
            *r = Some(reason.to_owned());
        }
        self.made.notify_all();
    }

    /// Whether a stop was asked for.
    pub fn is_requested(&self) -> bool {
        crate::fatal::lock(&self.reason, "shutdown request").is_some()
    }

    /// Blocks the calling thread (not a fiber) until a stop is asked for; returns the reason.
    pub fn wait(&self) -> String {
        let mut r = crate::fatal::lock(&self.reason, "shutdown request");
        loop {
            if let Some(reason) = r.as_ref() {
                return reason.clone();
            }
            r = self
                .made
                .wait(r)
                .unwrap_or_else(|_| crate::fatal::poisoned("shutdown request"));
        }
    }
}

impl Context {
    pub fn new(settings: Settings) -> Context {
        let store = Store::new(StoreConfig {
            memory_limit_bytes: settings.memory_limit_bytes(),
            evictions: settings.evictions,
            item_size_max: settings.item_size_max,
            use_cas: settings.use_cas,
            initial_items: settings.hashpower.map_or(0, |p| 1usize << p.min(40)),
            classes: SizeClasses::new(
                settings.slab_growth_factor,
                settings.slab_chunk_min,
                settings.slab_chunk_max,
            ),
            large_pages: settings.large_pages,
        });
        Context {
            store,
            limits: Limits {
                item_size_max: settings.item_size_max,
            },
            detail: detail::Detail::new(settings.prefix_delimiter, settings.detail_enabled),
            verbosity: AtomicU32::new(settings.verbosity),
            settings,
            curr_connections: AtomicU64::new(0),
            conns: Mutex::new(BTreeMap::new()),
            shutdown: ShutdownRequest::default(),
        }
    }

    pub fn verbose(&self) -> u32 {
        self.verbosity.load(Ordering::Relaxed)
    }
}

/// An item's data (with its `\r\n`) into the output: one copy when it is in one chunk, as
/// nearly every item is, without the pieces' iterator.
fn push_data(out: &mut Output, e: &Entry) {
    match e.data() {
        Some(data) => out.push(data),
        None => out.push_value(e.data_pieces()),
    }
}

/// Appends `line\r\n` unless the command asked for no reply.
fn out_string(out: &mut Output, line: &str, noreply: bool) {
    if !noreply {
        out.line(line);
    }
}

/// Writes pending output to the connection now (a multi-get's values as it goes).
pub type Drain<'a> = dyn FnMut(&mut Output) -> io::Result<()> + 'a;

/// Executes one command at clock reading `now`. A command whose reply can grow without bound
/// (a multi-get) hands its output to `drain` whenever it passes
/// [`crate::output::FLUSH_BYTES`]; an error from `drain` (the client stalled) ends it.
pub fn execute(
    cmd: Command<'_>,
    ctx: &Context,
    out: &mut Output,
    now: u32,
    drain: &mut Drain<'_>,
) -> io::Result<Flow> {
    Ok(match cmd {
        Command::Get {
            keys,
            with_cas,
            touch_exptime,
        } => classic::get(ctx, out, now, keys, with_cas, touch_exptime, drain)?,
        Command::Store {
            mode,
            key,
            flags,
            exptime,
            cas_unique,
            data,
            noreply,
        } => classic::store(
            ctx,
            out,
            now,
            classic::StoreArgs {
                mode,
                key,
                flags,
                exptime,
                cas_unique,
                data,
                noreply,
            },
        ),
        Command::Delete { key, noreply } => classic::delete(ctx, out, now, key, noreply),
        Command::Arith {
            incr,
            key,
            delta,
            noreply,
        } => classic::arith(ctx, out, now, incr, key, delta, noreply),
        Command::Touch {
            key,
            exptime,
            noreply,
        } => classic::touch(ctx, out, now, key, exptime, noreply),
        Command::FlushAll { delay, noreply } => {
            bump(&ctx.store.stats.cmd_flush);
            if !ctx.settings.flush_enabled {
                out_string(out, "CLIENT_ERROR flush_all not allowed", noreply);
            } else if let Some(delay) = delay {
                ctx.store.flush_all(delay, now);
                out_string(out, "OK", noreply);
            } else {
                out_string(out, "CLIENT_ERROR invalid exptime argument", noreply);
            }
            Flow::Continue
        }
        Command::Shutdown { mode_ok } => {
            if !ctx.settings.shutdown_command {
                out.line("ERROR: shutdown not enabled");
                Flow::Continue
            } else if mode_ok {
                ctx.shutdown.request("shutdown command received.");
                Flow::CloseNow
            } else {
                out.line("CLIENT_ERROR invalid shutdown mode");
                Flow::Continue
            }
        }
        Command::CloseNow => Flow::CloseNow,
        Command::Version => {
            out.push(b"VERSION ");
            out.line(VERSION);
            Flow::Continue
        }
        Command::Quit => Flow::Close,
        Command::Verbosity { level, noreply } => {
            ctx.verbosity
                .store(level.min(MAX_VERBOSITY), Ordering::Relaxed);
            out_string(out, "OK", noreply);
            Flow::Continue
        }
        Command::Stats(tokens) => stats::stats(ctx, out, now, tokens),
        Command::CacheMemlimit { megabytes, noreply } => {
            if megabytes < 8 {
                out_string(
                    out,
                    "MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m",
                    noreply,
                );
            } else if megabytes > 1_000_000_000 {
                out_string(
                    out,
                    "MEMLIMIT_ADJUST_FAILED input value is megabytes not bytes",
                    noreply,
                );
            } else {
                ctx.store.set_limit_bytes(megabytes as usize * 1024 * 1024);
                ctx.store.evict_elsewhere();
                out_string(out, "OK", noreply);
            }
            Flow::Continue
        }
        Command::MetaNoop => {
            out.line("MN");
            Flow::Flush
        }
        Command::Meta { op, tokens } => meta::meta(ctx, out, now, op, tokens),
        Command::MetaSet { tokens, data } => meta::mset(ctx, out, now, tokens, data),
        Command::Reply { line, noreply } => {
            out_string(out, line, noreply);
            Flow::Continue
        }
    })
}
