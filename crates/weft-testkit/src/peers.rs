//! The peers the tests compare weft against (the real memcached, nginx, client tools) and the
//! one rule for a missing one: a failure under `CI=true`, naming the command that installs it;
//! elsewhere a `SKIP:` line, and the test passes.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::net::{free_port, listening_within, NotListening};
use crate::process::{is_root, ChildGuard};

/// Debian's memcached, the reference the differential tests compare with.
pub const MEMCACHED: &str = "/usr/bin/memcached";

/// The command that installs `program` on Debian (what `.ci/run` runs).
pub fn install_hint(program: &str) -> String {
    let package = match program {
        "memccp" | "memcp" | "memccat" | "memcat" | "memcrm" | "memrm" | "memcstat" | "memstat"
        | "memcslap" | "memslap" | "memcaslap" | "memaslap" => "libmemcached-tools",
        "ab" => "apache2-utils",
        "pymemcache" => return "pip install pymemcache".into(),
        other => other,
    };
    format!("apt-get install {package}")
}

/// Notes that `what` is missing: under `CI=true` the test fails with `install`; elsewhere one
/// `SKIP:` line on stderr, and the caller returns.
pub fn missing(what: &str, install: &str) {
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{what} is required under CI=true ({install})"
    );
    eprintln!("SKIP: {what} is not installed ({install})");
}

/// Finds `name` on PATH or in the usual bin and sbin directories.
pub fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/bin", "/sbin", "/bin", "/usr/local/bin"].map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// The program's path if it is installed; else [`missing`] (a failure under `CI=true`) and
/// `None`.
pub fn require(program: &str) -> Option<PathBuf> {
    let found = find_program(program);
    if found.is_none() {
        missing(program, &install_hint(program));
    }
    found
}

/// Starts the real memcached with `extra` flags on a free localhost port (no UDP, `-u root`
/// when root) and waits until it accepts; `None` when it is not installed (see [`missing`]).
pub fn start_memcached(extra: &[&str]) -> Option<(ChildGuard, SocketAddr)> {
    if !Path::new(MEMCACHED).exists() {
        missing(MEMCACHED, &install_hint("memcached"));
        return None;
    }
    let started = start_listening(|port| {
        let mut cmd = Command::new(MEMCACHED);
        cmd.args(["-U", "0", "-l", "127.0.0.1", "-p", &port.to_string()])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if is_root() {
            cmd.args(["-u", "root"]);
        }
        ChildGuard(cmd.spawn().expect("spawn memcached"))
    });
    Some(started.unwrap_or_else(|e| panic!("memcached {extra:?}: {e}")))
}

/// How many ports a server is started on before its failing to listen fails the test:
/// another process can take a [`free_port`] before the server binds it, and the server then
/// exits.
pub const START_ATTEMPTS: u32 = 4;

/// Starts a server with `spawn(port)` on a [`free_port`] and waits (up to 10 s) until it
/// listens there ([`listening_within`]). A server that exits first is started again on
/// another port, up to `START_ATTEMPTS` times in all; `Err` is the last failure.
pub fn start_listening(
    mut spawn: impl FnMut(u16) -> ChildGuard,
) -> Result<(ChildGuard, SocketAddr), NotListening> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let port = free_port();
        let mut child = spawn(port);
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        match listening_within(addr, Some(&mut child.0), Duration::from_secs(10)) {
            Ok(()) => return Ok((child, addr)),
            Err(NotListening::Exited(_)) if attempt < START_ATTEMPTS => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Starts nginx (`nginx`, from [`require`]) on a free localhost port with the configuration
/// `config(port)` written to `work/nginx.conf`, its prefix and startup log in `work`, and
/// waits until it accepts. The configuration is the project's one template
/// (`weft_load::nginx`); this crate takes it as text so that it depends on no crate of the
/// workspace.
pub fn start_nginx(
    nginx: &Path,
    work: &Path,
    config: impl Fn(u16) -> String,
) -> (ChildGuard, SocketAddr) {
    let conf = work.join("nginx.conf");
    let log = work.join("nginx-error.log");
    let started = start_listening(|port| {
        std::fs::write(&conf, config(port)).unwrap();
        ChildGuard(
            Command::new(nginx)
                .arg("-e")
                .arg(&log)
                .arg("-p")
                .arg(work)
                .arg("-c")
                .arg(&conf)
                .stdin(Stdio::null())
                .spawn()
                .expect("spawn nginx"),
        )
    });
    started.unwrap_or_else(|e| {
        let log = std::fs::read_to_string(&log).unwrap_or_default();
        panic!("nginx {e}; its log:\n{log}");
    })
}
