//! `weft memcached` as an operator runs it, with real clients: pymemcache and the libmemcached
//! tools (memccp, memccat, memcrm, memcstat, memcslap, memcaslap) against the binary, and the
//! command line itself (refused flags, help, version, SIGTERM, the Unix socket).
//!
//! A test that needs a missing program prints `SKIP: ...` and passes, except under `CI=true`,
//! where a missing peer fails the test.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{memcached_command, start_memcached as start, weft};
use weft_testkit::{find_program, is_root, missing, wait_exit, ChildGuard};

/// The first of `names` that is installed (Debian renames memcp to memccp, ...).
fn tool(names: &[&str]) -> Option<PathBuf> {
    let found = names.iter().find_map(|n| find_program(n));
    if found.is_none() {
        missing(
            &format!("one of {names:?}"),
            "apt-get install libmemcached-tools",
        );
    }
    found
}

fn run_ok(program: &Path, args: &[&str]) -> Output {
    let out = Command::new(program).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{} {args:?}: {}\nstdout: {}\nstderr: {}",
        program.display(),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// One request line (and optional block) on a fresh connection; the reply up to `until`.
fn ask(addr: SocketAddr, request: &[u8], until: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(request).unwrap();
    let mut reader = BufReader::new(s);
    let mut out = String::new();
    while !out.ends_with(until) {
        if reader.read_line(&mut out).unwrap() == 0 {
            break;
        }
    }
    out
}

fn stat(addr: SocketAddr, name: &str) -> u64 {
    let reply = ask(addr, b"stats\r\n", "END\r\n");
    reply
        .lines()
        .find_map(|l| l.strip_prefix(&format!("STAT {name} ")))
        .unwrap_or_else(|| panic!("no stat {name} in {reply}"))
        .parse()
        .unwrap()
}

/// Every classic command through pymemcache, each result asserted in Python.
const PYMEMCACHE_SCRIPT: &str = r#"
import sys
from pymemcache.client.base import Client
c = Client(("127.0.0.1", int(sys.argv[1])), connect_timeout=5, timeout=5)
assert c.version().startswith(b"1.6"), c.version()
assert c.set("a", b"alpha") is True
assert c.get("a") == b"alpha"
assert c.set("b", b"beta", noreply=False) is True
assert c.get_many(["a", "b", "nope"]) == {"a": b"alpha", "b": b"beta"}
assert c.add("a", b"x", noreply=False) is False
assert c.add("c", b"gamma", noreply=False) is True
assert c.replace("missing", b"x", noreply=False) is False
assert c.replace("c", b"GAMMA", noreply=False) is True
assert c.append("a", b"-end", noreply=False) is True
assert c.prepend("a", b"start-", noreply=False) is True
assert c.get("a") == b"start-alpha-end"
value, cas = c.gets("a")
assert value == b"start-alpha-end" and cas is not None
assert c.cas("a", b"swapped", cas, noreply=False) is True
assert c.cas("a", b"stale", cas, noreply=False) is False
assert c.get("a") == b"swapped"
assert c.set("n", b"10") is True
assert c.incr("n", 5) == 15
assert c.decr("n", 20) == 0
assert c.incr("missing-counter", 1) is None
assert c.touch("n", 100, noreply=False) is True
assert c.touch("missing", 100, noreply=False) is False
assert c.delete("b", noreply=False) is True
assert c.delete("b", noreply=False) is False
assert c.get("b") is None
big = bytes(range(256)) * 2000
assert c.set("big", big) is True
assert c.get("big") == big
stats = c.stats()
assert stats[b"cmd_set"] >= 8, stats
assert stats[b"curr_items"] >= 4, stats
assert c.flush_all(noreply=False) is True
assert c.get("a") is None
c.close()
print("pymemcache ok")
"#;

#[test]
fn pymemcache_client_round_trip() {
    let Some(python) = find_program("python3") else {
        missing("python3", "apt-get install python3");
        return;
    };
    let probe = Command::new(&python)
        .args(["-c", "import pymemcache"])
        .output()
        .unwrap();
    if !probe.status.success() {
        missing("pymemcache", "pip install pymemcache");
        return;
    }
    let (_server, addr) = start(&[]);
    let out = run_ok(
        &python,
        &["-c", PYMEMCACHE_SCRIPT, &addr.port().to_string()],
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "pymemcache ok");
}

#[test]
fn libmemcached_tools_copy_cat_remove_stat() {
    let (Some(cp), Some(cat), Some(rm), Some(stat_tool)) = (
        tool(&["memccp", "memcp"]),
        tool(&["memccat", "memcat"]),
        tool(&["memcrm", "memrm"]),
        tool(&["memcstat", "memstat"]),
    ) else {
        return;
    };
    let (_server, addr) = start(&[]);
    let servers = format!("--servers=127.0.0.1:{}", addr.port());
    let dir = std::env::temp_dir().join(format!("weft-memc-tools-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("payload.bin");
    let content: Vec<u8> = (0..50_000u32).map(|i| b'a' + (i % 26) as u8).collect();
    std::fs::write(&file, &content).unwrap();

    run_ok(&cp, &[&servers, file.to_str().unwrap()]);
    let out = run_ok(&cat, &[&servers, "payload.bin"]);
    // memccat ends the value with a newline of its own.
    assert_eq!(
        out.stdout.strip_suffix(b"\n").unwrap_or(&out.stdout),
        content
    );
    run_ok(&rm, &[&servers, "payload.bin"]);
    let gone = Command::new(&cat)
        .args([&servers, "payload.bin"])
        .output()
        .unwrap();
    assert!(!gone.status.success(), "memccat found a removed key");

    let out = run_ok(&stat_tool, &[&servers]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("version: 1.6.18"), "{text}");
    assert!(text.contains("curr_connections:"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// memcdump lists the keys through `stats items` and `stats cachedump` (memcached's way).
#[test]
fn memcdump_lists_every_key() {
    let Some(dump) = tool(&["memcdump", "memdump"]) else {
        return;
    };
    let (_server, addr) = start(&[]);
    let mut keys: Vec<String> = Vec::new();
    let mut s = TcpStream::connect(addr).unwrap();
    let mut req = Vec::new();
    for (i, len) in [1usize, 100, 2000, 30_000, 200_000].iter().enumerate() {
        let key = format!("dump{i}");
        req.extend_from_slice(format!("set {key} 0 0 {len} noreply\r\n").as_bytes());
        req.extend(std::iter::repeat_n(b'd', *len));
        req.extend_from_slice(b"\r\n");
        keys.push(key);
    }
    req.extend_from_slice(b"version\r\n");
    s.write_all(&req).unwrap();
    let mut reader = BufReader::new(s);
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    assert!(line.starts_with("VERSION"), "{line}");
    let out = run_ok(&dump, &[&format!("--servers=127.0.0.1:{}", addr.port())]);
    let mut listed: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    listed.sort();
    assert_eq!(listed, keys);
}

#[test]
fn memcslap_and_memcaslap_short_runs() {
    let (Some(slap), Some(aslap)) = (
        tool(&["memcslap", "memslap"]),
        tool(&["memcaslap", "memaslap"]),
    ) else {
        return;
    };
    let (_server, addr) = start(&[]);
    let servers = format!("--servers=127.0.0.1:{}", addr.port());
    run_ok(
        &slap,
        &[
            &servers,
            "--concurrency=4",
            "--execute-number=2000",
            "--test=set",
        ],
    );
    assert!(stat(addr, "cmd_set") >= 8000);
    run_ok(
        &slap,
        &[
            &servers,
            "--concurrency=4",
            "--execute-number=2000",
            "--test=get",
        ],
    );
    assert!(stat(addr, "get_hits") > 0);
    let out = run_ok(
        &aslap,
        &["-s", &addr.to_string(), "-T", "1", "-c", "4", "-x", "2000"],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Ops: 2000"), "{text}");
}

/// Runs `weft memcached ARGS` expecting it to exit at once; returns (success, stdout+stderr).
fn run_cli(args: &[&str]) -> (bool, String) {
    let out = weft()
        .arg("memcached")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

#[test]
fn refused_flags_are_named() {
    let user: &[&str] = if is_root() { &["-u", "root"] } else { &[] };
    let with_user = |extra: &[&'static str]| {
        let mut v: Vec<&str> = extra.to_vec();
        v.extend_from_slice(user);
        v
    };
    // memcached's -o options are all accepted; an unknown one is refused in its words.
    let (ok, text) = run_cli(&with_user(&["-p", "0", "-o", "no_such_option"]));
    assert!(
        !ok && text.contains("Illegal suboption \"no_such_option\""),
        "{text}"
    );
    let (ok, text) = run_cli(&with_user(&["-p", "0", "--bogus-flag"]));
    assert!(!ok && text.contains("--bogus-flag"), "{text}");
    let (ok, text) = run_cli(&with_user(&["-p", "0", "-U", "11211"]));
    assert!(!ok && text.contains("UDP"), "{text}");
    if is_root() {
        let (ok, text) = run_cli(&["-p", "0"]);
        assert!(
            !ok && text.contains("can't run as root without the -u switch"),
            "{text}"
        );
    }
}

#[test]
fn help_and_version() {
    let (ok, text) = run_cli(&["-h"]);
    assert!(ok, "{text}");
    for flag in ["-p", "-m", "-c", "-t", "-U", "-s"] {
        assert!(text.contains(flag), "help lacks {flag}: {text}");
    }
    let (ok, text) = run_cli(&["-V"]);
    assert!(ok && text.contains("1.6.18"), "{text}");
}

#[test]
fn sigterm_with_a_client_connected_exits_cleanly() {
    let (mut server, addr) = start(&[]);
    let mut client = TcpStream::connect(addr).unwrap();
    client
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    client.write_all(b"set k 0 0 1\r\nv\r\n").unwrap();
    let mut reply = [0u8; 8];
    client.read_exact(&mut reply).unwrap();
    assert_eq!(&reply, b"STORED\r\n");
    // SAFETY: kill(2) on our own child, not yet reaped.
    let sent = unsafe { libc::kill(server.0.id() as libc::pid_t, libc::SIGTERM) };
    assert_eq!(sent, 0);
    let status = wait_exit(&mut server.0, Duration::from_secs(10));
    assert!(status.success(), "exit status {status}");
    // The open connection was closed, not left hanging.
    let mut rest = Vec::new();
    let _ = client.read_to_end(&mut rest);
    assert!(rest.is_empty(), "{rest:?}");
}

/// The main thread waits for a signal or a `shutdown` command without waking up: it used to
/// look every 50 ms, 20 wake-ups a second on the server's CPU.
#[test]
fn an_idle_server_main_thread_does_not_wake_periodically() {
    let (mut server, addr) = start(&[]);
    let _client = TcpStream::connect(addr).unwrap();
    let pid = server.0.id();
    let switches = || {
        let status = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/status")).unwrap();
        let line = status
            .lines()
            .find(|l| l.starts_with("voluntary_ctxt_switches:"))
            .unwrap()
            .to_owned();
        line.split_whitespace()
            .nth(1)
            .unwrap()
            .parse::<u64>()
            .unwrap()
    };
    std::thread::sleep(Duration::from_millis(200));
    let before = switches();
    std::thread::sleep(Duration::from_millis(1000));
    let woke = switches() - before;
    assert!(
        woke <= 2,
        "the main thread woke {woke} times in 1 s of idleness"
    );
    // And a signal still stops it.
    // SAFETY: kill(2) on our own child, not yet reaped.
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) }, 0);
    let status = wait_exit(&mut server.0, Duration::from_secs(10));
    assert!(status.success(), "exit status {status}");
}

#[test]
fn unix_socket_serves_a_raw_client() {
    let dir = std::env::temp_dir().join(format!("weft-memc-unix-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("cache.sock");
    let path_str = path.to_str().unwrap();
    let mut server = ChildGuard(
        memcached_command(&["-s", path_str, "-t", "1"])
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut stream = loop {
        match UnixStream::connect(&path) {
            Ok(s) => break s,
            Err(_) => {
                assert!(
                    server.0.try_wait().unwrap().is_none(),
                    "weft memcached -s exited"
                );
                assert!(Instant::now() < deadline, "nothing listens on {path_str}");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    };
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream
        .write_all(b"set u 5 0 4\r\nunix\r\nget u\r\n")
        .unwrap();
    let want = b"STORED\r\nVALUE u 5 4\r\nunix\r\nEND\r\n";
    let mut got = vec![0u8; want.len()];
    stream.read_exact(&mut got).unwrap();
    assert_eq!(got, want);
    drop(stream);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
