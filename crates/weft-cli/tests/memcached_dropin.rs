//! `weft memcached` as a drop-in for memcached 1.6.18, checked on the real binary and, where
//! the behaviour is memcached's, on the real memcached too (its own port, killed by PID):
//! `-M` never loses an acknowledged write, and memcached's command line starts weft unchanged.
//!
//! The real memcached (`weft_testkit::start_memcached`) is required under `CI=true`; elsewhere a
//! missing one is a `SKIP`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{spawn_with_stderr, start_memcached as start_weft};
use weft_testkit::{free_port, is_root, listening_within, status_kib, ChildGuard, MEMCACHED};

use weft_testkit::start_memcached as start_real;

/// A line-oriented text-protocol client.
struct Client {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Client {
    fn connect(addr: SocketAddr) -> Client {
        let s = TcpStream::connect(addr).unwrap();
        s.set_nodelay(true).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        Client {
            reader: BufReader::new(s.try_clone().unwrap()),
            writer: s,
        }
    }

    fn line(&mut self) -> String {
        let mut l = String::new();
        self.reader.read_line(&mut l).unwrap();
        l.trim_end().to_owned()
    }

    fn set(&mut self, key: &str, exptime: u32, len: usize) -> String {
        let mut req = format!("set {key} 0 {exptime} {len}\r\n").into_bytes();
        req.resize(req.len() + len, b'v');
        req.extend_from_slice(b"\r\n");
        self.writer.write_all(&req).unwrap();
        self.line()
    }

    fn has(&mut self, key: &str) -> bool {
        write!(self.writer, "get {key}\r\n").unwrap();
        let head = self.line();
        if head == "END" {
            return false;
        }
        assert!(head.starts_with(&format!("VALUE {key} ")), "{head}");
        let len: usize = head.rsplit(' ').next().unwrap().parse().unwrap();
        let mut data = vec![0u8; len + 2];
        self.reader.read_exact(&mut data).unwrap();
        assert_eq!(self.line(), "END");
        true
    }

    fn stat(&mut self, name: &str) -> u64 {
        self.writer.write_all(b"stats\r\n").unwrap();
        let mut found = None;
        loop {
            let l = self.line();
            if l == "END" {
                break;
            }
            let mut parts = l.split(' ');
            if parts.nth(1) == Some(name) {
                found = parts.next().map(|v| v.parse().unwrap());
            }
        }
        found.unwrap_or_else(|| panic!("no stat {name}"))
    }
}

const VALUE_BYTES: usize = 8 * 1024;
const OUT_OF_MEMORY: &str = "SERVER_ERROR out of memory storing object";

/// Sets `prefix<i>` until the server refuses; returns the keys it acknowledged.
fn fill_until_refused(c: &mut Client, prefix: &str, exptime: u32) -> Vec<String> {
    let mut stored = Vec::new();
    for i in 0..2000 {
        let key = format!("{prefix}{i}");
        match c.set(&key, exptime, VALUE_BYTES).as_str() {
            "STORED" => stored.push(key),
            OUT_OF_MEMORY => return stored,
            other => panic!("set {key}: {other}"),
        }
    }
    panic!("2000 values of {VALUE_BYTES} bytes were all stored under -m 2");
}

/// Under `-M` every acknowledged item stays: filled to refusal, then left alone, then sets
/// spaced out in time (each must be refused, none may push an old item out).
fn keeps_every_acknowledged_item(addr: SocketAddr, who: &str) {
    let mut c = Client::connect(addr);
    let stored = fill_until_refused(&mut c, "keep", 0);
    assert!(stored.len() > 100, "{who}: only {} stored", stored.len());
    std::thread::sleep(Duration::from_millis(1500));
    for i in 0..10 {
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(
            c.set(&format!("late{i}"), 0, VALUE_BYTES),
            OUT_OF_MEMORY,
            "{who}"
        );
    }
    let lost: Vec<&String> = stored.iter().filter(|k| !c.has(k)).collect();
    assert!(
        lost.is_empty(),
        "{who}: {} of {} acknowledged items lost: {lost:?}",
        lost.len(),
        stored.len()
    );
    assert_eq!(c.stat("evictions"), 0, "{who}");
    eprintln!("{who}: {} items kept under -M -m 2", stored.len());
}

#[test]
fn no_evictions_keeps_every_acknowledged_item() {
    let (_weft, addr) = start_weft(&["-M", "-m", "2"]);
    keeps_every_acknowledged_item(addr, "weft");
    if let Some((_real, addr)) = start_real(&["-M", "-m", "2"]) {
        keeps_every_acknowledged_item(addr, "memcached");
    }
}

/// Under `-M`, expired items are reclaimed before a store is refused: after the 2-second
/// items of a full cache expire, as many new ones fit again.
fn reclaims_expired_before_refusing(addr: SocketAddr, who: &str) {
    let mut c = Client::connect(addr);
    let first = fill_until_refused(&mut c, "ttl", 2);
    std::thread::sleep(Duration::from_millis(3500));
    let second = fill_until_refused(&mut c, "after", 0);
    assert!(
        second.len() * 20 >= first.len() * 19,
        "{who}: {} fit with 2 s TTLs, only {} after they expired",
        first.len(),
        second.len()
    );
    assert_eq!(c.stat("evictions"), 0, "{who}");
    eprintln!(
        "{who}: {} then {} items; reclaimed {}",
        first.len(),
        second.len(),
        c.stat("reclaimed")
    );
}

#[test]
fn no_evictions_reclaims_expired_items_before_refusing() {
    let (_weft, addr) = start_weft(&["-M", "-m", "2"]);
    reclaims_expired_before_refusing(addr, "weft");
    if let Some((_real, addr)) = start_real(&["-M", "-m", "2"]) {
        reclaims_expired_before_refusing(addr, "memcached");
    }
}

/// Debian's stock /etc/memcached.conf, as its start script turns it into flags (the
/// `logfile` line is the script's own; `-p` and `-P` point at this test's port and file).
const DEBIAN_CONF: &str = "\
# Run memcached as a daemon.
-d
logfile /var/log/memcached.log
-m 64
-p 11211
-u memcache
-l 127.0.0.1
-P /var/run/memcached/memcached.pid
";

fn conf_flags(conf: &str, port: u16, pidfile: &str) -> Vec<String> {
    let mut flags = Vec::new();
    for line in conf.lines() {
        let line = line.trim();
        if !line.starts_with('-') {
            continue;
        }
        let mut parts = line.splitn(2, ' ');
        let flag = parts.next().unwrap().to_owned();
        let value = parts.next().map(str::trim).map(str::to_owned);
        let value = match (flag.as_str(), value) {
            ("-p", _) => Some(port.to_string()),
            ("-P", _) => Some(pidfile.to_owned()),
            (_, v) => v,
        };
        flags.push(flag);
        flags.extend(value);
    }
    flags
}

fn wait_for(what: &str, within: Duration, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !ok() {
        assert!(Instant::now() < deadline, "{what} within {within:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until `child` itself listens on `addr` (not another process that took the port
/// first), then runs `body`; if either fails, the child is stopped and its stderr (piped by
/// [`spawn_with_stderr`]) is printed before the test fails, so a reset or a refused start
/// says what the server said.
fn serving<R>(
    child: &mut ChildGuard,
    addr: SocketAddr,
    body: impl FnOnce(&mut ChildGuard) -> R,
) -> R {
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        if let Err(e) = listening_within(addr, Some(&mut child.0), Duration::from_secs(10)) {
            panic!("weft memcached {e}");
        }
        body(child)
    }));
    outcome.unwrap_or_else(|panic| {
        let _ = child.0.kill();
        let status = child.0.wait();
        let err = stderr_of(child);
        eprintln!("weft memcached ({status:?}) wrote to stderr:\n{err}");
        std::panic::resume_unwind(panic)
    })
}

/// What a child started by [`spawn_with_stderr`] wrote to stderr, read to the end (so only
/// once it has exited or been signalled); empty if it was read before.
fn stderr_of(child: &mut ChildGuard) -> String {
    let mut err = String::new();
    if let Some(mut pipe) = child.0.stderr.take() {
        let _ = pipe.read_to_string(&mut err);
    }
    err
}

fn pid_alive(pid: i32) -> bool {
    // SAFETY: kill with signal 0 only checks that the process exists.
    unsafe { libc::kill(pid, 0) == 0 }
}

#[test]
fn debian_memcached_conf_starts_weft_unchanged() {
    let conf = std::fs::read_to_string("/etc/memcached.conf").unwrap_or_else(|_| {
        eprintln!("no /etc/memcached.conf here: using Debian's stock file");
        DEBIAN_CONF.to_owned()
    });
    let dir = std::env::temp_dir().join(format!("weft-debian-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // The daemon drops to the memcache user, which must be able to remove its PID file.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let pidfile = dir.join("memcached.pid");
    let port = free_port();
    let mut flags = conf_flags(&conf, port, pidfile.to_str().unwrap());
    if !is_root() {
        // -u only matters to root (memcached ignores it otherwise).
        if let Some(i) = flags.iter().position(|f| f == "-u") {
            flags.drain(i..i + 2);
        }
    }
    assert!(flags.contains(&"-d".to_owned()), "{flags:?}");
    let status = Command::new(env!("CARGO_BIN_EXE_weft"))
        .arg("memcached")
        .args(&flags)
        .stdin(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "weft memcached {flags:?}: {status}");
    // The parent returned once the daemon listened, with the PID file written.
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .expect("the -P file")
        .trim()
        .parse()
        .unwrap();
    assert!(pid_alive(pid));
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let mut c = Client::connect(addr);
    assert_eq!(c.set("debian", 0, 10), "STORED");
    assert!(c.has("debian"));
    // SAFETY: signalling the daemon this test started (its PID from the file).
    unsafe {
        libc::kill(pid, libc::SIGTERM);
    }
    wait_for("the daemon exits", Duration::from_secs(10), || {
        !pid_alive(pid)
    });
    if is_root() {
        // The daemon runs as memcache and may remove the file only in this open directory.
        wait_for("the PID file is removed", Duration::from_secs(2), || {
            !pidfile.exists()
        });
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_thesis_command_line_starts_weft() {
    let (_server, addr) = start_weft(&[
        "-b",
        "32768",
        "-c",
        "32768",
        "-m",
        "10240",
        "-o",
        "hashpower=24",
    ]);
    let mut c = Client::connect(addr);
    assert_eq!(c.set("thesis", 0, 100), "STORED");
    assert!(c.has("thesis"));
    c.writer.write_all(b"stats settings\r\n").unwrap();
    let mut settings = Vec::new();
    loop {
        let l = c.line();
        if l == "END" {
            break;
        }
        settings.push(l);
    }
    for want in [
        "STAT maxbytes 10737418240",
        "STAT maxconns 32768",
        "STAT tcp_backlog 32768",
        "STAT hashpower_init 24",
    ] {
        assert!(
            settings.iter().any(|l| l == want),
            "no {want:?} in {settings:?}"
        );
    }
}

/// Every flag of `memcached -h` at once (except those that end the program or that weft
/// refuses by name: -h, -i, -V, -d, -S, -Z, -U n): weft starts, serves, and says in -v
/// output what the ones without a behaviour do.
#[test]
fn every_flag_of_memcached_help_is_accepted() {
    let dir = std::env::temp_dir().join(format!("weft-flags-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let auth = dir.join("auth");
    std::fs::write(&auth, "u:p\n").unwrap();
    let auth = auth.to_str().unwrap().to_owned();
    let memfile = dir.join("mem").to_str().unwrap().to_owned();
    let pidfile = dir.join("pid").to_str().unwrap().to_owned();
    let port = free_port().to_string();
    let flags = [
        "-p",
        &port,
        "-U",
        "0",
        "-l",
        "127.0.0.1",
        "-a",
        "700",
        "-A",
        "-r",
        "-m",
        "64",
        "-M",
        "-c",
        "100",
        "-k",
        "-v",
        "-P",
        &pidfile,
        "-f",
        "1.5",
        "-n",
        "64",
        "-D",
        ":",
        "-t",
        "2",
        "-R",
        "10",
        "-C",
        "-b",
        "512",
        "-B",
        "ascii",
        "-I",
        "2m",
        "-F",
        "-X",
        "-W",
        "-Y",
        &auth,
        "-e",
        &memfile,
        "-N",
        "2",
        "-o",
        "idle_timeout=60,modern",
    ];
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_weft"));
    cmd.arg("memcached").args(flags);
    let mut child = spawn_with_stderr(&mut cmd);
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    serving(&mut child, addr, |child| {
        let mut c = Client::connect(addr);
        // -Y: authenticate first; -C: CAS 0; -F: no flush_all.
        c.writer.write_all(b"set x 0 0 3\r\nu p\r\n").unwrap();
        assert_eq!(c.line(), "STORED");
        c.writer
            .write_all(b"set k 0 0 1\r\nv\r\ngets k\r\nflush_all\r\n")
            .unwrap();
        assert_eq!(c.line(), "STORED");
        assert_eq!(c.line(), "VALUE k 0 1 0");
        assert_eq!(c.line(), "v");
        assert_eq!(c.line(), "END");
        assert_eq!(c.line(), "CLIENT_ERROR flush_all not allowed");
        // SAFETY: signalling the child this test started, by its PID.
        unsafe {
            libc::kill(child.0.id() as i32, libc::SIGTERM);
        }
        let err = stderr_of(child);
        // -f and -n shape the slab classes (no line); the others have no effect. (-L, which
        // depends on the kernel's huge pages, has its own test.)
        for flag in ["-e ", "-N 2", "-W", "-P"] {
            assert!(
                err.lines()
                    .any(|l| l.contains(flag) && l.contains("no effect")),
                "no -v line about {flag}: {err}"
            );
        }
    });
    let _ = std::fs::remove_dir_all(&dir);
}

/// memcached 1.6.18's `-o` options, each with a value memcached accepts.
const EXTENDED: &[&str] = &[
    "maxconns_fast",
    "no_maxconns_fast",
    "hashpower=16",
    "no_hashexpand",
    "slab_reassign",
    "slab_automove=1",
    "slab_automove_ratio=0.8",
    "slab_automove_window=30",
    "tail_repair_time=10",
    "hash_algorithm=xxh3",
    "lru_crawler",
    "lru_crawler_sleep=100",
    "lru_crawler_tocrawl=0",
    "lru_maintainer",
    "hot_lru_pct=20",
    "warm_lru_pct=40",
    "hot_max_factor=0.2",
    "warm_max_factor=2.0",
    "temporary_ttl=61",
    "idle_timeout=0",
    "watcher_logbuf_size=256",
    "worker_logbuf_size=64",
    "slab_sizes=96-120-512",
    "slab_chunk_max=512",
    "track_sizes",
    "no_inline_ascii_resp",
    "modern",
    "no_modern",
    "no_chunked_items",
    "no_slab_reassign",
    "no_slab_automove",
    "inline_ascii_resp",
    "no_lru_crawler",
    "no_lru_maintainer",
    "no_drop_privileges",
    "drop_privileges",
    "resp_obj_mem_limit=0",
    "read_buf_mem_limit=0",
    "sock_cookie_id=1",
    "ssl_chain_cert=/nonexistent",
    "ssl_key=/nonexistent",
    "ssl_verify_mode=0",
    "ssl_keyformat=1",
    "ssl_ciphers=ALL",
    "ssl_ca_cert=/nonexistent",
    "ssl_wbuf_size=16",
    "ssl_session_cache",
    "ssl_kernel_tls",
    "ssl_min_version=2",
    "ext_page_size=8",
    "ext_wbuf_size=4",
    "ext_threads=1",
    "ext_io_depth=1",
    "ext_item_size=512",
    "ext_item_age=0",
    "ext_low_ttl=0",
    "ext_recache_rate=2000",
    "ext_compact_under=1",
    "ext_drop_under=1",
    "ext_max_sleep=1000000",
    "ext_max_frag=0.8",
    "ext_drop_unread",
    "slab_automove_freeratio=0.01",
];

/// Item memory's least size here (`-m 64`): larger than any mapping a server advises for
/// something else (weft's lent receive buffers are one 2 MiB huge page a processor).
const ITEM_MAPPING_MIN_BYTES: u64 = 32 << 20;

/// Whether a mapping of process `pid` as large as item memory ([`ITEM_MAPPING_MIN_BYTES`] or
/// more) is advised `MADV_HUGEPAGE` (`hg` in its `VmFlags`).
fn has_huge_page_advice(pid: u32) -> bool {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap();
    let mut bytes = 0;
    smaps.lines().any(|l| {
        let range = l.split_once(' ').and_then(|(r, _)| r.split_once('-'));
        if let Some((start, end)) = range {
            if let (Ok(start), Ok(end)) =
                (u64::from_str_radix(start, 16), u64::from_str_radix(end, 16))
            {
                bytes = end - start;
                return false;
            }
        }
        bytes >= ITEM_MAPPING_MIN_BYTES
            && l.strip_prefix("VmFlags:")
                .is_some_and(|flags| flags.split_whitespace().any(|f| f == "hg"))
    })
}

/// `-L`, as memcached 1.6 does it on Linux: where transparent huge pages are `always` or
/// `madvise`, the item memory is advised into them (and without `-L` nothing is); where
/// they are `never`, both servers refuse to start.
#[test]
fn large_pages_advise_the_item_memory_as_memcached_does() {
    let mode =
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
    if !mode.contains("[always]") && !mode.contains("[madvise]") {
        let root: &[&str] = if is_root() { &["-u", "root"] } else { &[] };
        let args = [&["-L"][..], root].concat();
        let (weft_runs, err) = runs_with(env!("CARGO_BIN_EXE_weft"), &args, Duration::from_secs(2));
        assert!(
            !weft_runs && err.contains("Cannot enable large pages"),
            "{err}"
        );
        // The peer is checked for first (under CI=true a missing one fails); its guard stops it.
        if start_real(&[]).is_some() {
            let (real_runs, _) = runs_with(MEMCACHED, &args, Duration::from_secs(2));
            assert!(!real_runs, "memcached -L started without huge pages");
        }
        return;
    }
    let (weft, addr) = start_weft(&["-m", "64", "-L"]);
    let mut c = Client::connect(addr);
    assert_eq!(c.set("k", 0, 100), "STORED");
    assert!(c.has("k"));
    assert!(has_huge_page_advice(weft.0.id()), "weft -L advised nothing");
    let (plain, _) = start_weft(&["-m", "64"]);
    assert!(
        !has_huge_page_advice(plain.0.id()),
        "weft without -L advised a mapping"
    );
    if let Some((real, real_addr)) = start_real(&["-m", "64", "-L"]) {
        let mut c = Client::connect(real_addr);
        assert_eq!(c.set("k", 0, 100), "STORED");
        assert!(
            has_huge_page_advice(real.0.id()),
            "memcached -L advised nothing"
        );
    }
}

/// Whether a server started with `args` is still running after `settle` (a refused option
/// makes memcached and weft exit at once).
fn runs_with(program: &str, args: &[&str], settle: Duration) -> (bool, String) {
    let port = free_port().to_string();
    let mut cmd = Command::new(program);
    if program != MEMCACHED {
        cmd.arg("memcached");
    }
    cmd.args(["-U", "0", "-l", "127.0.0.1", "-p", &port])
        .args(args);
    let mut child = spawn_with_stderr(&mut cmd);
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let deadline = Instant::now() + settle;
    loop {
        if let Some(_status) = child.0.try_wait().unwrap() {
            return (false, stderr_of(&mut child));
        }
        if TcpStream::connect(addr).is_ok() || Instant::now() > deadline {
            return (true, String::new());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn every_extended_option_of_memcached_is_accepted_and_unknown_ones_refused() {
    let weft = env!("CARGO_BIN_EXE_weft");
    let mut refused = Vec::new();
    for opt in EXTENDED {
        let (ok, err) = runs_with(weft, &["-o", opt], Duration::from_secs(5));
        if !ok {
            refused.push(format!("{opt}: {err}"));
        }
    }
    assert!(refused.is_empty(), "weft refused: {refused:#?}");
    let (ok, err) = runs_with(weft, &["-o", "no_such_option"], Duration::from_secs(5));
    assert!(
        !ok && err.contains("Illegal suboption \"no_such_option\""),
        "{err}"
    );
    if start_real(&[]).is_some() {
        // The same options are memcached's own (one start each would take minutes; the
        // extstore ones need a storage file, which this checks only by name).
        for opt in EXTENDED
            .iter()
            .filter(|o| !o.starts_with("ext_") && !o.starts_with("ssl_"))
        {
            let (ok, err) = runs_with(MEMCACHED, &["-o", opt], Duration::from_millis(300));
            assert!(ok, "memcached refuses -o {opt}: {err}");
        }
        let (ok, err) = runs_with(MEMCACHED, &["-o", "no_such_option"], Duration::from_secs(5));
        assert!(
            !ok && err.contains("Illegal suboption \"no_such_option\""),
            "{err}"
        );
    }
}

#[test]
fn refused_flags_name_what_is_missing() {
    for (args, says) in [
        (&["-B", "binary"][..], "binary protocol"),
        (&["-S"][..], "SASL"),
        (&["-Z"][..], "TLS"),
        (&["-U", "11211"][..], "UDP"),
        (&["-o", "hashpower=5"][..], "multiplier of 5 is too low"),
        (
            &["-B", "nonsense"][..],
            "Invalid value for binding protocol",
        ),
    ] {
        let (ok, err) = runs_with(env!("CARGO_BIN_EXE_weft"), args, Duration::from_secs(5));
        assert!(!ok && err.contains(says), "{args:?}: {err}");
    }
}

#[test]
fn shutdown_command_stops_the_server_with_enable_shutdown() {
    let (mut server, addr) = start_weft(&["-A"]);
    let mut c = Client::connect(addr);
    c.writer.write_all(b"shutdown x\r\n").unwrap();
    assert_eq!(c.line(), "CLIENT_ERROR invalid shutdown mode");
    c.writer.write_all(b"shutdown\r\n").unwrap();
    let status = weft_testkit::wait_exit(&mut server.0, Duration::from_secs(10));
    assert!(status.success(), "{status}");
}

/// `-k` locks the memory weft uses, not the address space it reserves: the item pages' 4 GiB
/// reservation and every fiber stack's untouched pages stay unpopulated, so the server starts
/// at once and stays small (memcached's `-k` locks only what it allocated).
#[test]
fn lock_memory_locks_only_what_is_touched() {
    let port = free_port();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_weft"));
    cmd.arg("memcached")
        .args(["-p", &port.to_string(), "-U", "0", "-l", "127.0.0.1"])
        .args(["-t", "2", "-m", "64", "-k"]);
    let mut child = spawn_with_stderr(&mut cmd);
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    serving(&mut child, addr, |child| {
        let mut c = Client::connect(addr);
        c.writer.write_all(b"set k 0 0 5\r\nhello\r\n").unwrap();
        assert_eq!(c.line(), "STORED");
        let rss_mib = status_kib(child.0.id(), "VmRSS") >> 10;
        assert!(rss_mib < 512, "weft -k holds {rss_mib} MiB resident");
    });
}
