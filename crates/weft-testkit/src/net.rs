//! Ports and listeners: a free port, waiting until something accepts, the server a test is
//! pointed at by `WEFT_TEST_SERVER`, and the `TIME_WAIT` sockets a client left behind.

use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::process::Child;
use std::time::{Duration, Instant};

/// The variable that points the memcached-protocol tests at a server already running, as
/// memcached's `T_MEMD_USE_DAEMON` does for its own test suite: `WEFT_TEST_SERVER=host:port`.
///
/// Honoured by the tests that start a server on the default settings and assume nothing of
/// its state (weft-cache's `hostile.rs`, the five on default settings, and
/// `differential_flags.rs`'s `http_request_line_closes_like_memcached`); a test that needs
/// other settings, or looks inside the server, still starts its own. The server must speak
/// memcached 1.6.18's text protocol with its default limits (`weft memcached` with no flags,
/// say a release build, or one under `strace` or `perf`).
pub const SERVER_ENV: &str = "WEFT_TEST_SERVER";

/// The server [`SERVER_ENV`] names, or `None` when it is unset or empty. A value that does not
/// resolve fails the test: a typo must not quietly test the in-process server instead.
pub fn server_from_env() -> Option<SocketAddr> {
    let value = std::env::var(SERVER_ENV).ok().filter(|v| !v.is_empty())?;
    let addr = value
        .to_socket_addrs()
        .unwrap_or_else(|e| panic!("{SERVER_ENV}={value}: not host:port ({e})"))
        .next()
        .unwrap_or_else(|| panic!("{SERVER_ENV}={value}: resolves to no address"));
    eprintln!("{SERVER_ENV}: testing the server on {addr}");
    Some(addr)
}

/// Ports below this are left alone (services, and the low ports some hosts reserve).
const FREE_PORT_FLOOR: u16 = 20_000;

/// A free TCP port on 127.0.0.1 for a child to bind (bound here and released).
///
/// Taken outside the kernel's ephemeral range (`ip_local_port_range`) when the range leaves
/// room, at random, and never the same twice in one process: a port from the ephemeral range
/// can be taken between this call and the child's `bind` by any `connect` or `bind(0)` on the
/// host (a test's clients, another test's server), and the child then exits with
/// `EADDRINUSE`. Falls back to a port the kernel picks.
pub fn free_port() -> u16 {
    use std::collections::HashSet;
    use std::sync::Mutex;
    static GIVEN: Mutex<Option<HashSet<u16>>> = Mutex::new(None);
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    let given = given.get_or_insert_with(HashSet::new);
    let candidates = ports_outside_ephemeral();
    if !candidates.is_empty() {
        // A fresh `RandomState` is randomly keyed: its hash of the attempt is a random draw.
        let random = std::hash::RandomState::new();
        for attempt in 0..200u32 {
            let port = candidates.pick(std::hash::BuildHasher::hash_one(&random, attempt));
            if given.contains(&port) {
                continue;
            }
            if TcpListener::bind(("127.0.0.1", port)).is_ok() {
                given.insert(port);
                return port;
            }
        }
    }
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    given.insert(port);
    port
}

/// The ports from [`FREE_PORT_FLOOR`] up that lie outside the ephemeral range, as two spans.
struct PortSpans([(u16, u16); 2]);

impl PortSpans {
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn len(&self) -> u64 {
        self.0
            .iter()
            .map(|&(lo, hi)| if hi >= lo { (hi - lo) as u64 + 1 } else { 0 })
            .sum()
    }

    /// The port at `x` modulo the number of ports, counting through both spans.
    fn pick(&self, x: u64) -> u16 {
        let mut i = x % self.len();
        for &(lo, hi) in &self.0 {
            if hi < lo {
                continue;
            }
            let n = (hi - lo) as u64 + 1;
            if i < n {
                return lo + i as u16;
            }
            i -= n;
        }
        unreachable!("i < len")
    }
}

fn ports_outside_ephemeral() -> PortSpans {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok();
    let bounds: Vec<u16> = range
        .as_deref()
        .unwrap_or("")
        .split_whitespace()
        .filter_map(|v| v.parse().ok())
        .collect();
    match bounds[..] {
        [lo, hi] if lo <= hi => PortSpans([
            (FREE_PORT_FLOOR, lo.saturating_sub(1)),
            (
                hi.saturating_add(1).max(FREE_PORT_FLOOR),
                if hi == u16::MAX { 0 } else { u16::MAX },
            ),
        ]),
        _ => PortSpans([(1, 0), (1, 0)]),
    }
}

/// Why a child did not come to listen: it exited first (most often because another process
/// took the free port between [`free_port`] and the child's `bind`; start it again on another
/// port), or the time ran out.
#[derive(Debug)]
pub enum NotListening {
    Exited(String),
    TimedOut(String),
}

impl std::fmt::Display for NotListening {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotListening::Exited(s) | NotListening::TimedOut(s) => f.write_str(s),
        }
    }
}

/// Waits until something accepts on `addr` and, with `child`, until the listening socket is
/// the child's own (it or a descendant holds it): a port taken by another process between
/// [`free_port`] and the child's `bind` must not pass for the child listening. `Err` (saying
/// which) if `child` exits first or `within` passes.
pub fn listening_within(
    addr: SocketAddr,
    mut child: Option<&mut Child>,
    within: Duration,
) -> Result<(), NotListening> {
    let deadline = Instant::now() + within;
    loop {
        let accepts = TcpStream::connect(addr).is_ok();
        match child.as_deref_mut() {
            None if accepts => return Ok(()),
            Some(c) if accepts && listener_is_in_tree(c.id(), addr.port()) != Some(false) => {
                return Ok(())
            }
            Some(c) => {
                if let Some(status) = c.try_wait().unwrap() {
                    return Err(NotListening::Exited(format!(
                        "exited ({status}) before listening on {addr}"
                    )));
                }
            }
            None => {}
        }
        if Instant::now() >= deadline {
            let whose = if child.is_some() {
                "the child"
            } else {
                "nothing"
            };
            return Err(NotListening::TimedOut(format!(
                "{whose} listens on {addr} after {within:?}"
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether a TCP socket listening on `port` is held by process `pid` or one of its
/// descendants (nginx's master holds its listeners; a forking daemon's child may). `None`
/// where `/proc` cannot tell (not Linux): the caller takes the connection as proof.
fn listener_is_in_tree(pid: u32, port: u16) -> Option<bool> {
    let inodes = listening_inodes(port)?;
    let mut pending = vec![pid];
    let mut seen = Vec::new();
    while let Some(p) = pending.pop() {
        if seen.contains(&p) {
            continue;
        }
        seen.push(p);
        if holds_any_socket(p, &inodes) {
            return Some(true);
        }
        pending.extend(children_of(p));
    }
    Some(false)
}

/// The inodes of the sockets listening on `port`, IPv4 and IPv6, from `/proc/net/tcp{,6}`.
fn listening_inodes(port: u16) -> Option<Vec<u64>> {
    const LISTEN: &str = "0A";
    let mut inodes = Vec::new();
    let mut any_table = false;
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        any_table = true;
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
            let (Some(local), Some(state), Some(inode)) =
                (fields.get(1), fields.get(3), fields.get(9))
            else {
                continue;
            };
            let local_port = local
                .rsplit(':')
                .next()
                .and_then(|h| u16::from_str_radix(h, 16).ok());
            if *state == LISTEN && local_port == Some(port) {
                if let Ok(inode) = inode.parse() {
                    inodes.push(inode);
                }
            }
        }
    }
    any_table.then_some(inodes)
}

/// Whether process `pid` has a descriptor on one of the socket `inodes`.
fn holds_any_socket(pid: u32, inodes: &[u64]) -> bool {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    dir.flatten().any(|fd| {
        let Ok(target) = std::fs::read_link(fd.path()) else {
            return false;
        };
        let target = target.to_string_lossy();
        target
            .strip_prefix("socket:[")
            .and_then(|t| t.strip_suffix(']'))
            .and_then(|t| t.parse::<u64>().ok())
            .is_some_and(|i| inodes.contains(&i))
    })
}

/// The children of process `pid`, from `/proc/<pid>/task/*/children`.
fn children_of(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|c| {
            c.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

/// The sockets in `TIME_WAIT` whose remote end is `port` on 127.0.0.1 (`/proc/net/tcp`, state
/// 06: connections to it that this host's client side closed first), by their local address
/// (the table's hex `address:port`). A test that owns `port` only since it bound it compares the sets
/// before and after its run ([`new_time_wait_to`]): `TIME_WAIT` sockets to an earlier
/// listener that had the same port number (another test's, up to a minute ago) are not its.
pub fn time_wait_sockets_to(port: u16) -> std::collections::HashSet<String> {
    let table = std::fs::read_to_string("/proc/net/tcp").expect("read /proc/net/tcp");
    let remote = format!("0100007F:{port:04X}");
    table
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() > 3 && f[2] == remote && f[3] == "06").then(|| f[1].to_owned())
        })
        .collect()
}

/// The `TIME_WAIT` sockets to `port` that are not in `before` (a [`time_wait_sockets_to`]
/// taken before the run).
pub fn new_time_wait_to(port: u16, before: &std::collections::HashSet<String>) -> usize {
    time_wait_sockets_to(port).difference(before).count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// A port another process listens on is not the child listening: the old check (a
    /// connection succeeds) passed here, and a test then spoke to the wrong server.
    #[test]
    fn a_listener_the_child_does_not_hold_is_not_the_child() {
        let stolen = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = stolen.local_addr().unwrap();
        let mut child = Command::new("sleep").arg("5").spawn().unwrap();
        let got = listening_within(addr, Some(&mut child), Duration::from_millis(300));
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(
            matches!(got, Err(NotListening::TimedOut(_))),
            "took {addr}, held by the test itself, for the child's: {got:?}"
        );
    }

    /// The child's own listener passes, and so does one its child holds.
    #[test]
    fn the_childs_listener_and_its_descendants_pass() {
        let port = free_port();
        let script = format!(
            "exec python3 -c 'import socket,time; s=socket.socket(); \
             s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); \
             s.bind((\"127.0.0.1\", {port})); s.listen(); time.sleep(5)'"
        );
        for wrap in ["", "sh -c \"$0\" & wait"] {
            let mut cmd = Command::new("sh");
            if wrap.is_empty() {
                cmd.args(["-c", &script]);
            } else {
                cmd.args(["-c", wrap, &script]);
            }
            let mut child = cmd.spawn().unwrap();
            let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
            let got = listening_within(addr, Some(&mut child), Duration::from_secs(10));
            for grandchild in children_of(child.id()) {
                // SAFETY: kill(2) with a pid and a signal number; no memory is shared.
                unsafe { libc::kill(grandchild as libc::pid_t, libc::SIGKILL) };
            }
            child.kill().unwrap();
            child.wait().unwrap();
            assert!(got.is_ok(), "{wrap:?}: {got:?}");
        }
    }

    /// Free ports stay out of the ephemeral range (where any `connect` may take them) and
    /// are not handed out twice.
    #[test]
    fn free_ports_avoid_the_ephemeral_range_and_repeat_nothing() {
        let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap();
        let b: Vec<u16> = range
            .split_whitespace()
            .map(|v| v.parse().unwrap())
            .collect();
        let ports: Vec<u16> = (0..50).map(|_| free_port()).collect();
        if ports_outside_ephemeral().len() > 1000 {
            for &p in &ports {
                assert!(p < b[0] || p > b[1], "{p} is in the ephemeral range {b:?}");
                assert!(p >= FREE_PORT_FLOOR, "{p}");
            }
        }
        let distinct: std::collections::HashSet<_> = ports.iter().collect();
        assert_eq!(distinct.len(), ports.len(), "{ports:?}");
    }

    #[test]
    fn port_spans_count_through_both() {
        let spans = PortSpans([(20_000, 20_002), (61_000, 61_001)]);
        assert_eq!(spans.len(), 5);
        let picked: Vec<u16> = (0..5).map(|i| spans.pick(i)).collect();
        assert_eq!(picked, [20_000, 20_001, 20_002, 61_000, 61_001]);
        assert_eq!(spans.pick(5), 20_000);
        assert!(PortSpans([(1, 0), (1, 0)]).is_empty());
    }

    /// A child that exits first is reported as exited, so the caller can retry elsewhere.
    #[test]
    fn a_child_that_exits_is_reported() {
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let mut child = Command::new("true").spawn().unwrap();
        let got = listening_within(addr, Some(&mut child), Duration::from_secs(10));
        assert!(matches!(got, Err(NotListening::Exited(_))), "{got:?}");
    }
}
