//! `weft_load::memcached::run` against scripted fake servers (plain std threads) and, when it
//! is installed, real memcached (required under `CI=true`).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use weft_load::dist::{KeyDist, ValueSize};
use weft_load::memcached::{self, Config};
use weft_testkit::{new_time_wait_to, time_wait_sockets_to};

/// How the fake server behaves.
#[derive(Clone, Copy)]
enum Fake {
    /// Gets miss, sets store.
    Honest,
    /// Answers nothing (every request times out).
    Silent,
    /// Closes each connection after this many requests.
    CloseAfter(usize),
    /// Answers like `Honest`, but one request at a time over all connections, each taking
    /// this long: a server whose capacity is 1 s / the delay.
    Slow(Duration),
}

/// Serialises the `Slow` fake's requests across its connections (one "core").
static SLOW_CORE: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn fake_server(mode: Fake) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { return };
            std::thread::spawn(move || serve(conn, mode));
        }
    });
    addr
}

fn serve(conn: TcpStream, mode: Fake) {
    let mut out = conn.try_clone().unwrap();
    let mut reader = BufReader::new(conn);
    let mut line = String::new();
    let mut served = 0;
    loop {
        line.clear();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        let reply: &[u8] = match words.first() {
            Some(&"get") => b"END\r\n",
            Some(&"set") => {
                let n: usize = words[4].parse().unwrap();
                let mut data = vec![0; n + 2];
                reader.read_exact(&mut data).unwrap();
                b"STORED\r\n"
            }
            _ => b"ERROR\r\n",
        };
        served += 1;
        if let Fake::Slow(each) = mode {
            let _core = SLOW_CORE.lock().unwrap_or_else(|p| p.into_inner());
            std::thread::sleep(each);
        }
        match mode {
            Fake::Silent => continue,
            Fake::CloseAfter(n) if served > n => return,
            _ => {}
        }
        if out.write_all(reply).is_err() {
            return;
        }
    }
}

fn config(server: String) -> Config {
    Config {
        server,
        connections: 4,
        qps: 2000.0,
        duration: Duration::from_millis(500),
        warmup: Duration::from_millis(100),
        update_ratio: 0.1,
        keys: 100,
        value_size: ValueSize::Uniform(1, 300),
        ..Config::default()
    }
}

/// Open loop at 2,000 req/s over 8 connections, a 500 ms window after 100 ms of warm-up.
fn open_loop_on_eight(server: String) -> Config {
    Config {
        qps: 2000.0,
        connections: 8,
        duration: Duration::from_millis(500),
        warmup: Duration::from_millis(100),
        ..config(server)
    }
}

#[test]
fn open_loop_hits_its_target_and_counts_misses() {
    let mut cfg = config(fake_server(Fake::Honest));
    cfg.preload = false;
    let report = memcached::run(&cfg).unwrap();
    // 2000/s for 0.5 s: ~1000 requests (Poisson, so not exact).
    assert!(
        (700..1300).contains(&report.requests),
        "requests {}",
        report.requests
    );
    assert_eq!(report.errors, 0);
    assert_eq!(report.timeouts, 0);
    // Every get misses on this server; about 90% of requests are gets.
    let gets = report.requests as f64 * 0.9;
    assert!(
        (report.misses as f64) > gets * 0.8 && (report.misses as f64) < gets * 1.1,
        "misses {} of {}",
        report.misses,
        report.requests
    );
    assert!(report.latency_us.p50 > 0 && report.latency_us.p50 <= report.latency_us.p99);
}

/// Open loop with pipelining (the per-connection schedule, arrivals already due written
/// together) keeps its target and loses nothing, against a server slow enough that arrivals
/// queue behind each other.
#[test]
fn open_loop_with_depth_hits_its_target() {
    let mut cfg = config(fake_server(Fake::Slow(Duration::from_micros(200))));
    cfg.preload = false;
    cfg.depth = 4;
    let report = memcached::run(&cfg).unwrap();
    // 2000/s for 0.5 s (Poisson) against a capacity of 5000/s: the arrivals the schedule drew
    // in the window, sent or not (a fresh-clone CI run starved this test to 670 sent; what
    // the generator held back is judged by `unsent` below).
    let drawn = report.requests + report.unsent;
    assert!((700..1300).contains(&drawn), "{report:?}");
    assert_eq!(report.errors, 0, "{report:?}");
    assert_eq!(report.timeouts, 0, "{report:?}");
    // On a loaded machine (a CI run's other tests) a connection's fiber can come to an
    // arrival intended just before the window's end only after it: never sent, counted as
    // `unsent`, not lost (once in a fresh-clone CI run, with the run's max latency 43 ms).
    // More than one in a hundred, while the server kept up, would be the generator holding
    // requests back. When the machine starves the 200 µs server itself (another CI run: p50
    // 26 ms, 127 unsent), depth 4 fills and the arrivals left at the window's end are rightly
    // unsent: that run says nothing about the generator.
    if report.latency_us.p50 < 2_000 {
        assert!(report.unsent * 100 <= report.requests, "{report:?}");
    }
}

/// Open loop past saturation, as mutilate and wrk2 count it: `actual` is the replies received
/// inside the window, so it shows the server's capacity, not the offered rate; the sender
/// stops at the end of the window (what it could not send is reported as `unsent`), and the
/// run ends within warm-up + duration + timeout. (It used to keep sending the whole backlog
/// after the window and count every reply to a request intended in it: `actual` equalled the
/// offered rate and a 3-second run took 20.)
#[test]
fn past_saturation_actual_is_the_capacity_and_the_run_ends_on_time() {
    // About 1,000 replies/s at most (1 ms each, one at a time), 5,000/s offered.
    let mut cfg = config(fake_server(Fake::Slow(Duration::from_millis(1))));
    cfg.preload = false;
    cfg.qps = 5000.0;
    cfg.connections = 16;
    cfg.depth = 1;
    cfg.update_ratio = 0.0;
    cfg.duration = Duration::from_secs(1);
    cfg.warmup = Duration::from_millis(200);
    cfg.timeout = Duration::from_millis(500);
    let started = std::time::Instant::now();
    let report = memcached::run(&cfg).unwrap();
    let took = started.elapsed();
    assert!(
        report.actual_qps < 1_300.0 && report.actual_qps > 300.0,
        "actual {:.0} req/s against a server that can do about 1,000: {report:?}",
        report.actual_qps
    );
    assert!(
        report.unsent > 1_000,
        "most of the 5,000 intended requests could not be sent: {report:?}"
    );
    assert!(
        took < Duration::from_millis(200 + 1000 + 500 + 1000),
        "a 1.2 s run took {took:?}"
    );
}

#[test]
fn a_silent_server_gives_timeouts_not_a_hang() {
    let mut cfg = config(fake_server(Fake::Silent));
    cfg.preload = false;
    cfg.timeout = Duration::from_millis(200);
    cfg.depth = 4;
    let report = memcached::run(&cfg).unwrap();
    assert!(report.timeouts > 0, "{report:?}");
    assert_eq!(report.actual_qps, 0.0);
}

/// Open loop at depth 1 (the dispatcher writes, the connections only read): a server that
/// never answers is given up after the timeout, and the run still ends.
#[test]
fn a_silent_server_at_depth_one_gives_timeouts_not_a_hang() {
    let mut cfg = open_loop_on_eight(fake_server(Fake::Silent));
    cfg.preload = false;
    cfg.timeout = Duration::from_millis(200);
    let started = std::time::Instant::now();
    let report = memcached::run(&cfg).unwrap();
    let took = started.elapsed();
    assert!(
        report.timeouts > 500,
        "about 1,000 requests, none answered: {report:?}"
    );
    assert_eq!((report.actual_qps, report.errors), (0.0, 0), "{report:?}");
    assert!(
        took < Duration::from_millis(100 + 500 + 300 + 1500),
        "a 0.6 s run with a 0.2 s timeout took {took:?}"
    );
}

#[test]
fn a_closing_server_at_depth_one_gives_errors() {
    let mut cfg = open_loop_on_eight(fake_server(Fake::CloseAfter(20)));
    cfg.preload = false;
    let report = memcached::run(&cfg).unwrap();
    assert!(report.errors > 0, "{report:?}");
    assert_eq!(report.timeouts, 0, "{report:?}");
}

/// Connections idle when the window ends leave with it: the reply timeout bounds a wait for
/// a reply, not the run.
#[test]
fn idle_connections_end_with_the_window_not_the_timeout() {
    let mut cfg = config(fake_server(Fake::Honest));
    cfg.preload = false;
    cfg.connections = 256;
    cfg.qps = 500.0;
    cfg.duration = Duration::from_millis(300);
    cfg.timeout = Duration::from_secs(5);
    let started = std::time::Instant::now();
    let report = memcached::run(&cfg).unwrap();
    let took = started.elapsed();
    assert_eq!((report.errors, report.timeouts), (0, 0), "{report:?}");
    assert!(report.requests > 50, "about 150 requests: {report:?}");
    assert!(
        took < Duration::from_secs(3),
        "a 0.4 s run with a 5 s timeout took {took:?}"
    );
}

#[test]
fn a_closing_server_gives_errors() {
    let mut cfg = config(fake_server(Fake::CloseAfter(20)));
    cfg.preload = false;
    let report = memcached::run(&cfg).unwrap();
    assert!(report.errors > 0, "{report:?}");
}

#[test]
fn closed_loop_with_depth_runs_as_fast_as_replies() {
    let mut cfg = config(fake_server(Fake::Honest));
    cfg.qps = 0.0;
    cfg.depth = 4;
    cfg.preload = false;
    cfg.duration = Duration::from_millis(300);
    let report = memcached::run(&cfg).unwrap();
    assert!(report.actual_qps > 1000.0, "{report:?}");
}

#[test]
fn nothing_listening_is_a_clear_error() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let err = memcached::run(&config(format!("127.0.0.1:{port}"))).unwrap_err();
    assert!(err.to_string().contains("cannot connect"), "{err}");
    let err = memcached::run(&config("no-such-host.invalid:1".into())).unwrap_err();
    assert!(err.to_string().contains("cannot resolve"), "{err}");
}

/// Against the real memcached (`weft_testkit`: required under `CI=true`).
#[test]
fn real_memcached_preloaded_gets_hit() {
    let Some((_server, addr)) = weft_testkit::start_memcached(&["-t", "1"]) else {
        return;
    };
    let mut cfg = config(addr.to_string());
    cfg.key_dist = KeyDist::Zipf(0.99);
    cfg.value_size = ValueSize::Fixed(100);
    let report = memcached::run(&cfg).unwrap();
    assert_eq!(report.errors, 0, "{report:?}");
    assert_eq!(report.misses, 0, "preloaded keys must hit: {report:?}");
    assert!(report.requests > 500, "{report:?}");
}

/// Open loop at depth 1 reports how late the generator itself sent (the C generator's
/// `send_lag`), so a run whose generator set the tail says so; closed loop has no schedule to
/// be late for.
#[test]
fn open_loop_reports_the_generators_own_send_lag() {
    let mut cfg = open_loop_on_eight(fake_server(Fake::Honest));
    let report = memcached::run(&cfg).unwrap();
    let lag = report
        .generator_send_lag_us
        .expect("open loop at depth 1 reports the send lag");
    assert!(lag.p50 <= lag.p99 && lag.p99 <= lag.max, "{report:?}");
    assert!(report.requests > 0);
    cfg.qps = 0.0;
    let closed = memcached::run(&cfg).unwrap();
    assert!(closed.generator_send_lag_us.is_none(), "{closed:?}");
}

/// Thousands of connections opened against a listener with std's queue of 128 open, not lost
/// to SYNs dropped on a full queue: the generator starts at most a queue's worth of connects
/// at once and makes one that timed out again. Started all at once, 3,000 connects
/// overflowed the queue and those whose SYN was dropped waited a second for its
/// retransmission: 1,822 lost to a 500 ms connect timeout, 987–2,306 to this test's 1 s
/// (15,360 against memcached lost 188 to a 5 s one). The fake server starts a thread for each
/// connection it accepts, so on a loaded machine its queue drains slowly and some connects
/// still time out three times (beside the other tests of a CI run 26 of 3,000 once at 500 ms
/// and 2 once at 1 s; up to 36 with two CPU hogs beside): the test allows 5 % (150), under a
/// sixth of the fewest that starting them all at once lost; an idle machine loses none.
#[test]
fn thousands_of_connections_open_without_overflowing_the_listen_queue() {
    let mut cfg = config(fake_server(Fake::Honest));
    cfg.connections = 3000;
    cfg.connect_timeout = Duration::from_secs(1);
    cfg.preload = false;
    cfg.qps = 1000.0;
    cfg.duration = Duration::from_millis(300);
    let report = memcached::run(&cfg).unwrap();
    assert_eq!(report.connections, 3000, "{report:?}");
    assert!(report.errors <= 150, "{report:?}");
}

/// The generator's idle poll (`--idle-poll-us`) reaches its cluster and its report, and a
/// window longer than the runtime allows is refused by name rather than cut short unseen.
#[test]
fn the_generators_idle_poll_is_taken_reported_and_bounded() {
    let mut cfg = open_loop_on_eight(fake_server(Fake::Honest));
    cfg.idle_poll = Duration::from_micros(50);
    let report = memcached::run(&cfg).unwrap();
    assert_eq!(report.generator_idle_poll_us, 50, "{report:?}");
    assert!(report.requests > 0 && report.errors == 0, "{report:?}");
    assert!(
        report.human().contains("idle poll: up to 50 us"),
        "{}",
        report.human()
    );
    cfg.idle_poll = Duration::ZERO;
    let still = memcached::run(&cfg).unwrap();
    assert_eq!(still.generator_idle_poll_us, 0);
    assert!(!still.human().contains("idle poll"), "{}", still.human());
    cfg.idle_poll = Duration::from_micros(1001);
    let err = memcached::run(&cfg).unwrap_err().to_string();
    assert!(err.contains("--idle-poll-us must be at most 1000"), "{err}");
}

/// The generator's connections end with a reset, not in `TIME_WAIT`: a run's `TIME_WAIT`
/// sockets expire together a minute later on the CPU that took the server's FIN, and with
/// thousands of connections that stalled the next run's server core for milliseconds.
#[test]
fn the_generators_connections_leave_no_time_wait_behind() {
    let server = fake_server(Fake::Honest);
    let port: u16 = server.rsplit(':').next().unwrap().parse().unwrap();
    let mut cfg = config(server);
    cfg.connections = 40;
    cfg.preload = false;
    // Sockets left by an earlier listener on the same port number are not this run's.
    let before = time_wait_sockets_to(port);
    let report = memcached::run(&cfg).unwrap();
    assert_eq!(report.errors, 0);
    assert!(report.requests > 0);
    assert_eq!(
        new_time_wait_to(port, &before),
        0,
        "connections to port {port} left in TIME_WAIT"
    );
}

/// A server that answers a connection's gets only when `depth` are waiting (or the
/// connection has gone quiet for 20 ms), all in one write, and reports for each connection
/// the gets it read and the data segments that carried them (`TCP_INFO`).
fn batching_server(depth: usize) -> (String, std::sync::mpsc::Receiver<(u64, u32)>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { return };
            let tx = tx.clone();
            std::thread::spawn(move || {
                conn.set_read_timeout(Some(Duration::from_millis(20)))
                    .unwrap();
                let mut out = conn.try_clone().unwrap();
                let mut reader = BufReader::new(conn.try_clone().unwrap());
                let (mut gets, mut waiting) = (0u64, 0usize);
                let mut line = String::new();
                loop {
                    match reader.read_line(&mut line) {
                        Ok(0) => break,
                        Ok(_) if line.ends_with('\n') => {
                            assert!(line.starts_with("get "), "{line:?}");
                            line.clear();
                            gets += 1;
                            waiting += 1;
                            if waiting < depth {
                                continue;
                            }
                        }
                        Ok(_) => continue,
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                            if waiting == 0 {
                                continue;
                            }
                        }
                        Err(_) => break,
                    }
                    if out.write_all(&b"END\r\n".repeat(waiting)).is_err() {
                        break;
                    }
                    waiting = 0;
                }
                let _ = tx.send((gets, data_segments_in(&conn)));
            });
        }
    });
    (addr, rx)
}

/// Segments with data the socket has received (`tcpi_data_segs_in`).
fn data_segments_in(conn: &TcpStream) -> u32 {
    use std::os::fd::AsRawFd;
    // SAFETY: `info` is a plain C struct for which all-zero bytes are valid, and the kernel
    // writes at most `len` bytes of it.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: the descriptor is open for the call, and `info`/`len` are valid for writes.
    let rc = unsafe {
        libc::getsockopt(
            conn.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    assert_eq!(rc, 0, "TCP_INFO: {}", std::io::Error::last_os_error());
    info.tcpi_data_segs_in
}

/// Closed loop at depth 4: the requests a connection may send together (its replies came
/// together) go out in one write, so the server receives a batch in one segment, as from a
/// client that buffers its pipelined requests; `--write-per-request` keeps one segment each.
#[test]
fn requests_due_together_go_out_in_one_write() {
    for per_request in [false, true] {
        let (server, reports) = batching_server(4);
        let mut cfg = config(server);
        cfg.connections = 1;
        cfg.qps = 0.0;
        cfg.depth = 4;
        cfg.update_ratio = 0.0;
        cfg.preload = false;
        cfg.duration = Duration::from_millis(300);
        cfg.write_per_request = per_request;
        let report = memcached::run(&cfg).unwrap();
        assert_eq!(report.errors, 0, "{report:?}");
        let (gets, segments) = reports.recv_timeout(Duration::from_secs(5)).unwrap();
        assert!(gets > 100, "only {gets} gets");
        if per_request {
            assert!(
                segments as u64 >= gets * 9 / 10,
                "{gets} gets in {segments} segments"
            );
        } else {
            assert!(
                segments as u64 * 2 <= gets,
                "{gets} gets in {segments} segments"
            );
        }
    }
}

/// The meta protocol's gets and sets (`mg`/`ms`) against the real memcached: every
/// preloaded key hits, every set is stored.
#[test]
fn real_memcached_meta_protocol_hits_and_stores() {
    let Some((_server, addr)) = weft_testkit::start_memcached(&["-t", "1"]) else {
        return;
    };
    let mut cfg = config(addr.to_string());
    cfg.protocol = memcached::request::Protocol::Meta;
    cfg.update_ratio = 0.2;
    cfg.qps = 0.0;
    cfg.depth = 4;
    cfg.value_size = ValueSize::Fixed(100);
    let report = memcached::run(&cfg).unwrap();
    assert_eq!(report.errors, 0, "{report:?}");
    assert_eq!(report.misses, 0, "preloaded keys must hit: {report:?}");
    assert!(report.requests > 500, "{report:?}");
}
