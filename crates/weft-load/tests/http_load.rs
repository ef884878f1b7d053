//! `weft_load::http::run` against a scripted std-thread HTTP server.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use weft_load::http::{self, Config, Source};
use weft_testkit::{new_time_wait_to, time_wait_sockets_to};

/// Answers every request with `status` and a 1000-byte body; closes when asked.
fn fake_server(status: u16, hold: bool) -> String {
    server(status, hold, None)
}

/// Serialises the slow server's replies across its connections (one "core").
static SLOW_CORE: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// `fake_server(status, hold, Some(each))` answers one request at a time over all its
/// connections, each taking `each`: a server whose capacity is 1 s / `each`.
fn server(status: u16, hold: bool, each: Option<Duration>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { return };
            std::thread::spawn(move || serve(conn, status, hold, each));
        }
    });
    addr
}

fn serve(conn: TcpStream, status: u16, hold: bool, each: Option<Duration>) {
    // As real servers do on keep-alive connections: no Nagle stalls between replies.
    conn.set_nodelay(true).unwrap();
    let mut out = conn.try_clone().unwrap();
    let mut reader = BufReader::new(conn);
    loop {
        let Some(close) = read_head(&mut reader) else {
            return;
        };
        if hold {
            std::thread::sleep(Duration::from_secs(5));
            return;
        }
        if let Some(each) = each {
            let _core = SLOW_CORE.lock().unwrap_or_else(|p| p.into_inner());
            std::thread::sleep(each);
        }
        let body = vec![b'x'; 1000];
        let head = format!(
            "HTTP/1.1 {status} X\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        if out.write_all(head.as_bytes()).is_err() || out.write_all(&body).is_err() || close {
            return;
        }
    }
}

/// Reads one request head; whether it asked to close (`Connection: close`), or `None` at the
/// end of the stream.
fn read_head(reader: &mut BufReader<TcpStream>) -> Option<bool> {
    let mut close = false;
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return None;
        }
        if line.eq_ignore_ascii_case("connection: close\r\n") {
            close = true;
        }
        if line == "\r\n" {
            return Some(close);
        }
    }
}

fn urls() -> std::path::PathBuf {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let file = std::env::temp_dir().join(format!("weft-http-load-urls-{}-{n}", std::process::id()));
    std::fs::write(&file, "/a.html\n/b.html\n").unwrap();
    file
}

fn config(server: String) -> Config {
    Config {
        server,
        source: Source::Urls(urls()),
        session_rate: 400.0,
        connections: 0,
        persistent: false,
        requests_per_session: 2,
        client_closes: false,
        think: Duration::ZERO,
        duration: Duration::from_millis(500),
        warmup: Duration::from_millis(100),
        timeout: Duration::from_secs(2),
        threads: 1,
        max_sessions: 0,
        seed: 1,
    }
}

#[test]
fn sessions_reach_their_rate() {
    let report = http::run(&config(fake_server(200, false))).unwrap();
    // 400 sessions/s × 2 requests × 0.5 s ≈ 400 replies.
    assert!((280..520).contains(&report.replies), "{report:?}");
    assert_eq!(report.errors_total, 0, "{report:?}");
    assert!(report.latency_us.p50 > 0);
    assert_eq!(report.target_rate, 800.0);
}

#[test]
fn error_statuses_are_bad_status() {
    let report = http::run(&config(fake_server(404, false))).unwrap();
    assert_eq!(report.replies, 0);
    assert!(report.errors.bad_status > 100, "{report:?}");
}

#[test]
fn timeouts_and_refusals_are_counted_by_kind() {
    let mut cfg = config(fake_server(200, true));
    cfg.timeout = Duration::from_millis(200);
    cfg.session_rate = 50.0;
    let report = http::run(&cfg).unwrap();
    assert!(report.errors.timeout > 5, "{report:?}");

    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let report = http::run(&config(format!("127.0.0.1:{port}"))).unwrap();
    assert!(report.errors.refused > 50, "{report:?}");
    assert_eq!(report.replies, 0);
}

#[test]
fn closed_loop_keeps_connections_busy() {
    let mut cfg = config(fake_server(200, false));
    cfg.session_rate = 0.0;
    cfg.connections = 4;
    let report = http::run(&cfg).unwrap();
    assert!(report.replies > 200, "{report:?}");
    assert_eq!(report.errors_total, 0, "{report:?}");
    cfg.connections = 0;
    assert!(http::run(&cfg).is_err());
}

/// Open loop past saturation, as wrk2 and mutilate count it: `replies_per_sec` is the replies
/// received inside the window, so it shows the server's capacity, not the offered rate, and
/// latency still runs from each session's intended start. (It counted every reply to a session
/// started in the window, whenever it came, and waited timeout + 2 s for them.)
#[test]
fn past_saturation_replies_are_the_capacity_and_the_run_ends_on_time() {
    // About 500 replies/s at most (2 ms each, one at a time), 1,500/s offered.
    let mut cfg = config(server(200, false, Some(Duration::from_millis(2))));
    cfg.session_rate = 1500.0;
    cfg.requests_per_session = 1;
    cfg.duration = Duration::from_secs(1);
    cfg.warmup = Duration::from_millis(200);
    cfg.timeout = Duration::from_secs(3);
    let report = http::run(&cfg).unwrap();
    assert!(
        report.replies_per_sec < 700.0 && report.replies_per_sec > 150.0,
        "{:.0} replies/s from a server that can do about 500: {report:?}",
        report.replies_per_sec
    );
    assert!(
        report.unsent == 0,
        "one-request sessions are sent when they start"
    );
}

/// Open loop over persistent keep-alive connections (wrk2's and the C generator's http mode):
/// the rate is reached on the given connections, without errors.
#[test]
fn persistent_open_loop_reaches_its_rate_on_its_connections() {
    let report = http::run(&persistent(fake_server(200, false), 8)).unwrap();
    assert_eq!(report.errors_total, 0, "{report:?}");
    // 1000/s for 0.5 s: ~500 requests (Poisson, so not exact).
    assert!(
        report.replies > 300 && report.replies < 700,
        "{} replies: {report:?}",
        report.replies
    );
    assert!(report.latency_us.p50 > 0, "{report:?}");
}

/// The open loop over `connections` persistent connections to `server`, 1000 requests/s.
fn persistent(server: String, connections: usize) -> Config {
    let mut cfg = config(server);
    cfg.persistent = true;
    cfg.connections = connections;
    cfg.session_rate = 1000.0;
    cfg.requests_per_session = 1;
    cfg
}

/// The persistent connections end with a reset, not in `TIME_WAIT` (see the memcached
/// generator's test of the same name).
#[test]
fn persistent_connections_leave_no_time_wait_behind() {
    let server = fake_server(200, false);
    let port: u16 = server.rsplit(':').next().unwrap().parse().unwrap();
    // Sockets left by an earlier listener on the same port number are not this run's.
    let before = time_wait_sockets_to(port);
    let report = http::run(&persistent(server, 30)).unwrap();
    assert_eq!(report.errors_total, 0, "{report:?}");
    assert_eq!(
        new_time_wait_to(port, &before),
        0,
        "connections to port {port} left in TIME_WAIT"
    );
}

/// How the connections to [`ending_server`] ended: by the client's end of stream after a
/// number of requests, or after a request that asked the server to close.
#[derive(Default)]
struct Endings {
    /// Requests seen on each connection the client closed.
    closed_by_client: std::sync::Mutex<Vec<usize>>,
    /// Requests that carried `Connection: close`.
    asked_to_close: std::sync::atomic::AtomicUsize,
}

/// A server like `fake_server` that records how each connection ended.
fn ending_server() -> (String, std::sync::Arc<Endings>) {
    use std::sync::atomic::Ordering;
    let endings = std::sync::Arc::new(Endings::default());
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let record = endings.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { return };
            let record = record.clone();
            std::thread::spawn(move || {
                conn.set_nodelay(true).unwrap();
                let mut out = conn.try_clone().unwrap();
                let mut reader = BufReader::new(conn);
                let mut requests = 0;
                loop {
                    let Some(close) = read_head(&mut reader) else {
                        if requests > 0 {
                            record.closed_by_client.lock().unwrap().push(requests);
                        }
                        return;
                    };
                    requests += 1;
                    if close {
                        record.asked_to_close.fetch_add(1, Ordering::Relaxed);
                    }
                    let reply = "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc";
                    if out.write_all(reply.as_bytes()).is_err() || close {
                        return;
                    }
                }
            });
        }
    });
    (addr, endings)
}

#[test]
fn sessions_end_as_asked_by_the_server_or_by_the_client() {
    use std::sync::atomic::Ordering;
    // By default the last request asks the server to close.
    let (addr, endings) = ending_server();
    let report = http::run(&config(addr)).unwrap();
    assert!(report.replies > 50, "{report:?}");
    assert!(endings.asked_to_close.load(Ordering::Relaxed) > 25);
    assert!(endings.closed_by_client.lock().unwrap().is_empty());
    // httperf's ending: no request asks, and the client closes after the session's last reply.
    let (addr, endings) = ending_server();
    let mut c = config(addr);
    c.client_closes = true;
    let report = http::run(&c).unwrap();
    assert!(report.client_closes);
    assert_eq!(report.errors_total, 0, "{report:?}");
    assert_eq!(endings.asked_to_close.load(Ordering::Relaxed), 0);
    let closed = endings.closed_by_client.lock().unwrap().clone();
    assert!(closed.len() > 25, "{closed:?}");
    // Sessions cut by the end of the window may stop after their first request.
    assert!(closed.iter().all(|&n| n == 2 || n == 1), "{closed:?}");
    assert!(
        closed.iter().filter(|&&n| n == 2).count() > 25,
        "{closed:?}"
    );
}
