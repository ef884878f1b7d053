//! Child processes of a benchmark or experiment: servers and load generators, pinned to
//! CPUs, always killed by PID when their guard drops (also on error and on Ctrl-C, which
//! [`interrupt_flag`] turns into a flag every wait here looks at).

use std::fs::File;
use std::io::{self, Read};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

/// A running child; dropping it kills it (SIGTERM, then SIGKILL after a grace period).
#[derive(Debug)]
pub struct Running {
    child: Child,
    name: String,
    /// Where its output goes, quoted when it fails to start; none for an adopted child.
    log: Option<PathBuf>,
}

impl Running {
    /// Starts `program args` pinned to `cpu` (if given), stdout and stderr to `log`.
    pub fn start(
        name: &str,
        program: &Path,
        args: &[String],
        cpu: Option<usize>,
        log: PathBuf,
    ) -> anyhow::Result<Running> {
        let out = File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let mut cmd = Command::new(program);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out);
        pin(&mut cmd, cpu);
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {name} ({})", program.display()))?;
        Ok(Running {
            child,
            name: name.to_string(),
            log: Some(log),
        })
    }

    /// Guards a child the caller spawned itself (its own pinning, its own pipes).
    pub fn adopt(name: &str, child: Child) -> Running {
        Running {
            child,
            name: name.to_string(),
            log: None,
        }
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits until `addr` accepts connections; fails if the child exits first or `timeout`
    /// passes, quoting the end of its log.
    pub fn wait_for_port(&mut self, addr: SocketAddr, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                return Ok(());
            }
            if let Some(status) = self.child.try_wait()? {
                bail!(
                    "{} exited ({status}) before listening on {addr}: {}",
                    self.name,
                    self.log_tail()
                );
            }
            if Instant::now() > deadline {
                bail!(
                    "{} did not listen on {addr} within {timeout:?}: {}",
                    self.name,
                    self.log_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn log_tail(&self) -> String {
        self.log
            .as_deref()
            .map_or_else(|| "(no log)".to_string(), log_tail)
    }

    /// Stops the child: SIGTERM, up to 3 s to exit, then SIGKILL.
    pub fn stop(&mut self) {
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        // SAFETY: kill(2) on our own child's pid, which has not been reaped yet (try_wait
        // above saw it running), so the pid cannot name another process.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Ctrl-C / SIGTERM flag, registered once.
pub fn interrupt_flag() -> anyhow::Result<Arc<AtomicBool>> {
    let flag = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, flag.clone()).context("installing the Ctrl-C handler")?;
    }
    Ok(flag)
}

/// Runs `program args` pinned to `cpu` to completion and returns its stdout. Gives up (and
/// kills it) when `interrupted` is set or after `limit`.
pub fn run_to_end(
    program: &Path,
    args: &[String],
    cpu: Option<usize>,
    interrupted: &AtomicBool,
    limit: Duration,
) -> anyhow::Result<String> {
    let mut cmd = Command::new(program);
    cmd.args(args);
    pin(&mut cmd, cpu);
    command_to_end(&mut cmd, &program.display().to_string(), interrupted, limit)
}

/// Runs `cmd` (already given its program, arguments and pinning; `what` names it in errors)
/// to completion and returns its stdout, as [`run_to_end`] does.
pub fn command_to_end(
    cmd: &mut Command,
    what: &str,
    interrupted: &AtomicBool,
    limit: Duration,
) -> anyhow::Result<String> {
    if interrupted.load(Ordering::Relaxed) {
        bail!("interrupted");
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().with_context(|| format!("starting {what}"))?;
    let mut stdout = child.stdout.take().expect("piped");
    let mut stderr = child.stderr.take().expect("piped");
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if interrupted.load(Ordering::Relaxed) || Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            if interrupted.load(Ordering::Relaxed) {
                bail!("interrupted");
            }
            bail!("{what} ran longer than {limit:?}; killed");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = out_reader.join().unwrap_or_default();
    let err = err_reader.join().unwrap_or_default();
    if !status.success() {
        bail!("{what} failed ({status}): {}", err.trim());
    }
    Ok(out)
}

/// Makes the child run only on `cpu`.
fn pin(cmd: &mut Command, cpu: Option<usize>) {
    let Some(cpu) = cpu else { return };
    // SAFETY: the closure runs in the forked child before exec and only calls
    // sched_setaffinity on a stack-local set, which is async-signal-safe (no allocation,
    // no locks).
    unsafe {
        cmd.pre_exec(move || {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// A number field of the text of /proc/PID/status, `name` without its colon (`VmRSS` and
/// `VmHWM` are in KiB, `Threads` is a count).
pub fn status_field(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
}

/// That field of process `pid` now (`"self"`: this process); `None` when the process or the
/// field is gone.
pub fn proc_status_field(pid: impl std::fmt::Display, name: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status_field(&text, name)
}

/// The last few lines of a log, for error messages.
pub fn log_tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().rev().take(5).collect();
    if lines.is_empty() {
        return format!("(no output; log {})", log.display());
    }
    lines.into_iter().rev().collect::<Vec<_>>().join(" | ")
}

/// A free TCP port on 127.0.0.1 for a server child to bind: outside the kernel's ephemeral
/// range, never the same twice in one run (`weft_testkit::free_port`). A port from
/// `bind(0)` would be an ephemeral one, which the clients of the previous measurement (in
/// `TIME_WAIT`) or of this one can take before the server binds it.
pub fn free_port() -> io::Result<u16> {
    Ok(weft_testkit::free_port())
}

/// Finds `name` on PATH or in the usual sbin directories.
pub fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/bin", "/sbin"].map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// The CPUs for servers and for load generators: the lowest two this process may use (its
/// affinity mask, so `taskset -c 2,3 weft bench …` measures on CPUs 2 and 3), else no pinning
/// at all (both share whatever there is).
pub fn server_and_load_cpus() -> (Option<usize>, Option<usize>) {
    pick_server_and_load(&weft_load::cpu::allowed_cpu_ids().unwrap_or_default())
}

/// [`server_and_load_cpus`] for the affinity mask `allowed` (CPU numbers, lowest first).
pub fn pick_server_and_load(allowed: &[usize]) -> (Option<usize>, Option<usize>) {
    match allowed {
        [server, load, ..] => (Some(*server), Some(*load)),
        _ => (None, None),
    }
}

/// Where servers and load run, as a report's header says it, for a process allowed on the
/// CPUs `allowed` ([`server_and_load_cpus`]). Run under `taskset -c 1`, the cache's
/// 16-connection peak came out 1.6x memcached's instead of 1.2x: with servers and load on one
/// CPU the comparison is another one, so the header must not claim the pinning.
pub fn placement_text(allowed: &[usize]) -> String {
    match pick_server_and_load(allowed) {
        (Some(server), Some(load)) => format!("pinned to CPU {server}; load from CPU {load}"),
        _ => "NOT pinned apart (this process may use one CPU: taskset or a cpuset), so servers \
              and load share it and the figures are not comparable with a two-CPU run"
            .to_string(),
    }
}

/// [`placement_text`] for this process, with a warning on stderr when it cannot pin apart.
pub fn placement() -> String {
    let allowed = weft_load::cpu::allowed_cpu_ids().unwrap_or_default();
    if allowed.len() < 2 {
        eprintln!(
            "warning: this process may use {} CPU; servers and load are not pinned apart \
             (run it without taskset to measure them on two CPUs)",
            allowed.len().max(1)
        );
    }
    placement_text(&allowed)
}

/// The flags that make memcached — or `weft memcached`, which takes the same ones — one
/// server thread on `127.0.0.1:port` with no UDP, `memory_mb` of cache and room for
/// `connections` clients; `-u root` when running as root (memcached refuses root without
/// it). `port` may be a placeholder such as `{port}`.
pub fn memcached_flags(port: &str, memory_mb: u32, connections: u32) -> Vec<String> {
    let mut flags: Vec<String> = ["-p", port, "-l", "127.0.0.1", "-t", "1", "-U", "0"]
        .map(String::from)
        .to_vec();
    flags.extend(["-m".into(), memory_mb.to_string()]);
    flags.extend(["-c".into(), connections.to_string()]);
    // The thesis's clients open 15,360 connections at once: a listen backlog that holds them.
    flags.extend(["-b".into(), "16384".into()]);
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        flags.extend(["-u".into(), "root".into()]);
    }
    flags
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A header claims the pinning only when there are two CPUs to pin apart, and names the
    /// CPUs the mask allows, not 0 and 1 whatever it is.
    #[test]
    fn placement_text_says_when_servers_and_load_share_a_cpu() {
        assert_eq!(placement_text(&[0, 1]), "pinned to CPU 0; load from CPU 1");
        assert_eq!(
            placement_text(&[0, 1, 2, 3, 4, 5, 6, 7]),
            "pinned to CPU 0; load from CPU 1"
        );
        assert_eq!(placement_text(&[2, 5]), "pinned to CPU 2; load from CPU 5");
        for one in [&[][..], &[0][..], &[3][..]] {
            let text = placement_text(one);
            assert!(text.starts_with("NOT pinned apart"), "{text}");
            assert!(text.contains("share"), "{text}");
        }
    }

    /// Servers and load go on the lowest two CPUs the mask allows.
    #[test]
    fn servers_and_load_take_the_cpus_the_mask_allows() {
        assert_eq!(pick_server_and_load(&[0, 1]), (Some(0), Some(1)));
        assert_eq!(pick_server_and_load(&[2, 3]), (Some(2), Some(3)));
        assert_eq!(pick_server_and_load(&[1, 4, 6]), (Some(1), Some(4)));
        assert_eq!(pick_server_and_load(&[1]), (None, None));
        assert_eq!(pick_server_and_load(&[]), (None, None));
    }

    /// This process's own mask: the CPUs picked are ones it may use.
    #[test]
    fn the_cpus_picked_are_allowed() {
        let allowed = weft_load::cpu::allowed_cpu_ids().unwrap();
        assert!(!allowed.is_empty());
        assert_eq!(allowed.len(), weft_load::cpu::allowed_cpus().unwrap());
        let (server, load) = server_and_load_cpus();
        for cpu in [server, load].into_iter().flatten() {
            assert!(allowed.contains(&cpu), "{cpu} not in {allowed:?}");
        }
    }

    /// The kernel's ephemeral port range, `(low, high)`.
    fn ephemeral_range() -> (u16, u16) {
        let text = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap();
        let v: Vec<u16> = text
            .split_whitespace()
            .map(|s| s.parse().unwrap())
            .collect();
        (v[0], v[1])
    }

    /// A port from the ephemeral range can be taken by any client's `connect` before the
    /// server binds it (after a 15,360-connection run, its `TIME_WAIT` sockets hold thousands
    /// of them), and the server then exits with `EADDRINUSE`.
    #[test]
    fn free_ports_are_outside_the_ephemeral_range() {
        let (lo, hi) = ephemeral_range();
        for _ in 0..50 {
            let port = free_port().unwrap();
            assert!(!(lo..=hi).contains(&port), "{port} is in {lo}-{hi}");
        }
    }
}
