//! Differential tests of memcached's behaviour flags: the real memcached 1.6.18 started with a
//! flag and weft with the same setting get the same scripts, and the replies must be
//! byte-identical (`-A`, `-C`, `-D`, `-F`, `-X`, `-Y`, `-o idle_timeout`), plus what memcached
//! closes a connection on. The real memcached is required under `CI=true`. The HTTP
//! request-line test runs against the server `WEFT_TEST_SERVER=host:port` names when it is set.

mod common;

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::{exchange, session, show, test_settings, WeftServer};
use weft_cache::Settings;
use weft_testkit::start_memcached;

/// Runs `scripts` in order on both servers (each on a new connection, up to the `mn`
/// sentinel) and collects the differences.
fn differences(mc: SocketAddr, weft: SocketAddr, scripts: &[&[u8]]) -> Vec<String> {
    let mut out = Vec::new();
    for script in scripts {
        let want = session(mc, script);
        let got = session(weft, script);
        if want != got {
            out.push(format!(
                "script: {}\n  memcached: {}\n  weft:      {}",
                show(script),
                show(&want),
                show(&got)
            ));
        }
    }
    out
}

fn check(flags: &[&str], settings: Settings, scripts: &[&[u8]]) {
    let Some((_mc, mc)) = start_memcached(flags) else {
        return;
    };
    let weft = WeftServer::start(settings);
    let diffs = differences(mc, weft.addr, scripts);
    assert!(diffs.is_empty(), "{flags:?}:\n{}", diffs.join("\n"));
}

#[test]
fn disable_cas_matches_memcached() {
    check(
        &["-C"],
        Settings {
            use_cas: false,
            ..test_settings()
        },
        &[
            b"set a 0 0 1\r\nx\r\ngets a\r\nmg a c\r\ncas a 0 0 1 0\r\ny\r\ncas a 0 0 1 1\r\nz\r\n",
            b"ms b 1 C0\r\nq\r\nms b 1 C5\r\nq\r\nmg b v c\r\nms b 1 I\r\nq\r\nmg b c v\r\n",
            b"md b C3\r\nmd b C0\r\nma n N0 J5\r\nma n c\r\nincr n 1\r\ngets n\r\n",
            b"set f 0 0 1\r\nx\r\nflush_all\r\nget f\r\nset f 0 0 1\r\ny\r\nget f\r\n",
        ],
    );
}

#[test]
fn disable_flush_and_dumping_match_memcached() {
    check(
        &["-F", "-X"],
        Settings {
            flush_enabled: false,
            dump_enabled: false,
            ..test_settings()
        },
        &[
            b"set a 0 0 1\r\nx\r\nflush_all\r\nflush_all 0\r\nflush_all noreply\r\nflush_all x\r\nget a\r\n",
            b"stats cachedump 1 1\r\nstats cachedump\r\n",
        ],
    );
}

#[test]
fn shutdown_refusal_and_bad_mode_match_memcached() {
    // Without -A: refused. With -A: a bad mode is an error (the good ones stop the server;
    // the CLI tests cover that).
    check(
        &[],
        test_settings(),
        &[b"shutdown\r\n", b"shutdown graceful\r\n", b"shutdown x\r\n"],
    );
    check(
        &["-A"],
        Settings {
            shutdown_command: true,
            ..test_settings()
        },
        &[b"shutdown x\r\n", b"shutdown graceful now\r\n"],
    );
}

#[test]
fn shutdown_with_enable_shutdown_closes_and_asks_to_stop() {
    let weft = WeftServer::start(Settings {
        shutdown_command: true,
        ..test_settings()
    });
    let reply = exchange(
        weft.addr,
        b"version\r\nshutdown\r\n",
        b"",
        Duration::from_secs(2),
    );
    // memcached closes at once, dropping the replies still pending.
    assert_eq!(reply, b"<closed>");
    assert!(weft.server().shutdown_requested());
}

#[test]
fn prefix_stats_match_memcached() {
    check(
        &["-D", ":"],
        Settings {
            detail_enabled: true,
            ..test_settings()
        },
        &[
            b"set a:1 0 0 1\r\nx\r\nset b 0 0 1\r\nx\r\nget a:1 a:2 b c\r\ndelete a:1\r\n",
            b"mg a:1 v\r\nms q:1 1\r\nx\r\nmd q:1\r\ntouch a:1 10\r\ngets a:1\r\n",
            b"stats detail dump\r\nstats detail off\r\nget a:1\r\nstats detail dump\r\n",
            b"stats detail on\r\nset a:9 0 0 1\r\nx\r\nstats detail dump\r\n",
            b"stats detail\r\nstats detail on off\r\nstats detail dump x\r\n",
        ],
    );
    // Off by default; `stats detail on` turns it on with ':' as the delimiter.
    check(
        &[],
        test_settings(),
        &[
            b"set x:1 0 0 1\r\nx\r\nstats detail dump\r\n",
            b"stats detail on\r\nset x-1 0 0 1\r\nx\r\nset y:1 0 0 1\r\nx\r\nstats detail dump\r\n",
        ],
    );
}

#[test]
fn ascii_authentication_matches_memcached() {
    let dir = std::env::temp_dir().join(format!("weft-auth-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("auth");
    std::fs::write(&file, "user1:pass1\nuser2:pw2\n").unwrap();
    let users = vec![
        (b"user1".to_vec(), b"pass1".to_vec()),
        (b"user2".to_vec(), b"pw2".to_vec()),
    ];
    let path = file.to_str().unwrap().to_owned();
    check(
        &["-Y", &path],
        Settings {
            auth: Some(users),
            ..test_settings()
        },
        &[
            b"get a\r\n",
            b"set a 0 0 11\r\nuser1 pass1\r\nget a\r\nversion\r\n",
            b"set a 0 0 11\r\nuser1 wrong\r\n",
            // Several answers before authenticating, in one read: memcached sends the last.
            b"set a 0 0 11\r\nuser1 wrong\r\nversion\r\n",
            b"set a 0 0 5\r\nuser1\r\n",
            b"set a 0 0 9 noreply\r\nuser2 pw2\r\nversion\r\n",
            b"set a 0 0 3\r\nabc\r\n",
            b"add a 0 0 9\r\nuser2 pw2\r\n",
            b"set a 0 0 9\r\nuser2 pw2x\r\n",
            b"set a 5 0 9\r\nuser2 pw2\r\nset b 0 0 1\r\nx\r\nget b\r\n",
            b"set a 0 0 9\r\nuser2 pw2XY",
            b"set a 0\r\n",
        ],
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn unauthenticated_clients_are_counted_and_others_still_served() {
    let weft = WeftServer::start(Settings {
        auth: Some(vec![(b"u".to_vec(), b"p".to_vec())]),
        ..test_settings()
    });
    // A line without a newline past 2048 bytes closes, like memcached.
    let reply = exchange(weft.addr, &[b'x'; 3000], b"", Duration::from_secs(2));
    assert_eq!(reply, b"<closed>");
    // A credentials block larger than any credentials closes too (never buffered).
    let reply = exchange(
        weft.addr,
        b"set a 0 0 100000000\r\n",
        b"",
        Duration::from_secs(2),
    );
    assert_eq!(reply, b"<closed>");
    let ok = session(
        weft.addr,
        b"set a 0 0 3\r\nu p\r\nset k 0 0 1\r\nv\r\nget k\r\n",
    );
    assert_eq!(ok, b"STORED\r\nSTORED\r\nVALUE k 0 1\r\nv\r\nEND\r\nMN\r\n");
    let bad = exchange(
        weft.addr,
        b"set a 0 0 3\r\nu q\r\n",
        b"failure\r\n",
        Duration::from_secs(2),
    );
    assert_eq!(bad, b"CLIENT_ERROR authentication failure\r\n");
    let stats = &weft.server().context().store.stats;
    assert_eq!(
        stats.auth_cmds.load(std::sync::atomic::Ordering::Relaxed),
        2
    );
    assert_eq!(
        stats.auth_errors.load(std::sync::atomic::Ordering::Relaxed),
        1
    );
}

#[test]
fn http_request_line_closes_like_memcached() {
    let Some((_mc, mc)) = start_memcached(&[]) else {
        return;
    };
    // Honours WEFT_TEST_SERVER: only `version` and refused lines, no state.
    let weft = WeftServer::default_or_env();
    for script in [
        &b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"[..],
        b"version\r\nGET / HTTP/1.0\r\n",
        b"POST /x HTTP/1.1\r\n",
        b"foo bar HTTP/1.1\r\n",
        b"mxx HTTP/1.1\r\n",
        // Not closed: a command family memcached knows, or HTTP/ not last.
        b"get / HTTP/1.1\r\n",
        b"gx / HTTP/1.1\r\n",
        b"sx HTTP/1.1\r\n",
        b"FOO HTTP/1.1 x\r\n",
    ] {
        let want = exchange(mc, script, b"", Duration::from_millis(500));
        let got = exchange(weft.addr, script, b"", Duration::from_millis(500));
        assert_eq!(show(&want), show(&got), "script: {}", show(script));
    }
    // The server keeps serving others.
    assert_eq!(
        session(weft.addr, b"version\r\n"),
        b"VERSION 1.6.18\r\nMN\r\n"
    );
}

/// How long until the server closes an idle connection (`None`: not within `within`).
fn closed_after(addr: SocketAddr, within: Duration) -> Option<Duration> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(b"version\r\n").unwrap();
    let start = Instant::now();
    let reply = exchange_on(&mut s, within);
    reply.then(|| start.elapsed())
}

/// Reads until the peer closes (true) or `within` passes (false).
fn exchange_on(s: &mut TcpStream, within: Duration) -> bool {
    use std::io::Read;
    s.set_read_timeout(Some(within)).unwrap();
    let deadline = Instant::now() + within;
    let mut buf = [0u8; 256];
    while Instant::now() < deadline {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
    false
}

#[test]
fn idle_timeout_closes_idle_connections_like_memcached() {
    let Some((_mc, mc)) = start_memcached(&["-o", "idle_timeout=1"]) else {
        return;
    };
    let weft = WeftServer::start(Settings {
        idle_timeout_secs: 1,
        ..test_settings()
    });
    for (who, addr) in [("memcached", mc), ("weft", weft.addr)] {
        // memcached's idle checker wakes up now and then: it closes after 1 to ~4 s.
        let after = closed_after(addr, Duration::from_secs(10));
        let after = after.unwrap_or_else(|| panic!("{who} kept an idle connection 10 s"));
        assert!(
            after >= Duration::from_millis(900),
            "{who} closed after {after:?}"
        );
    }
    // Without it, an idle connection stays.
    let weft = WeftServer::start(test_settings());
    assert_eq!(closed_after(weft.addr, Duration::from_millis(1500)), None);
}
