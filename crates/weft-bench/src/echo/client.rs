//! The closed-loop load generator: N connections on one thread and one io_uring. Each
//! connection sends a message, waits for all of it to come back, and sends the next.
//!
//! `user_data` is `connection << 1 | kind` (0: send, 1: recv). One `io_uring_enter` submits
//! every new SQE and waits for at least one completion, so the client's per-request cost is
//! little more than the kernel's, and one core drives more than one core of server.

use std::io;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::time::Instant;

use io_uring::{opcode, squeue, types::Fd, IoUring};

use super::EchoParams;

struct Conn {
    stream: TcpStream,
    /// Where the echo lands.
    buf: Vec<u8>,
    /// Bytes of the current echo received.
    got: usize,
    /// Bytes of the current message sent.
    sent: usize,
}

fn push(ring: &mut IoUring, entry: &squeue::Entry) -> io::Result<()> {
    loop {
        // SAFETY: every buffer named by our entries lives in `conns` or `msg`, which outlive
        // the ring (dropped first in `drive`).
        if unsafe { ring.submission().push(entry) }.is_ok() {
            return Ok(());
        }
        ring.submit()?;
    }
}

fn send_entry(i: usize, c: &Conn, msg: &[u8]) -> squeue::Entry {
    let rest = &msg[c.sent..];
    opcode::Send::new(Fd(c.stream.as_raw_fd()), rest.as_ptr(), rest.len() as u32)
        .build()
        .user_data((i as u64) << 1)
}

fn recv_entry(i: usize, c: &mut Conn) -> squeue::Entry {
    let rest = &mut c.buf[c.got..];
    opcode::Recv::new(
        Fd(c.stream.as_raw_fd()),
        rest.as_mut_ptr(),
        rest.len() as u32,
    )
    .build()
    .user_data((i as u64) << 1 | 1)
}

/// Connects, warms up, then counts round trips for `params.duration`. Returns (requests,
/// seconds, server CPU seconds over the window from `server_cpu`).
pub fn drive(
    addr: SocketAddr,
    params: &EchoParams,
    server_cpu: impl Fn() -> io::Result<f64>,
) -> io::Result<(u64, f64, f64)> {
    let size = params.message_size.max(1);
    let msg: Vec<u8> = (0..size).map(|i| b'a' + (i % 26) as u8).collect();
    let mut conns = Vec::with_capacity(params.connections);
    for _ in 0..params.connections {
        let stream = TcpStream::connect(addr)?;
        stream.set_nodelay(true)?;
        conns.push(Conn {
            stream,
            buf: vec![0; size],
            got: 0,
            sent: 0,
        });
    }
    let entries = (2 * params.connections)
        .next_power_of_two()
        .clamp(64, 16384) as u32;
    // Deferred task work: completions are processed only when we enter the kernel to wait,
    // in one go, instead of interrupting the loop (fewer wake-ups per request).
    let mut ring = IoUring::builder()
        .setup_cqsize(entries * 2)
        .setup_single_issuer()
        .setup_defer_taskrun()
        .build(entries)
        .or_else(|_| IoUring::builder().setup_cqsize(entries * 2).build(entries))?;
    for (i, c) in conns.iter_mut().enumerate() {
        let e = send_entry(i, c, &msg);
        push(&mut ring, &e)?;
        let e = recv_entry(i, c);
        push(&mut ring, &e)?;
    }
    let start = Instant::now();
    let window_start = start + params.warmup;
    let window_end = window_start + params.duration;
    let mut requests = 0u64;
    let mut counted_from: Option<(u64, Instant, f64)> = None;
    // With many connections, wait for several completions per enter: fewer client syscalls
    // per request, so the one client core stays ahead of the server.
    let wait_for = (params.connections / 16).clamp(1, 32);
    let mut done: Vec<(u64, i32)> = Vec::with_capacity(1024);
    loop {
        let now = Instant::now();
        if counted_from.is_none() && now >= window_start {
            counted_from = Some((requests, now, server_cpu()?));
        }
        if now >= window_end {
            break;
        }
        ring.submit_and_wait(wait_for)?;
        done.clear();
        done.extend(ring.completion().map(|c| (c.user_data(), c.result())));
        for &(data, res) in &done {
            let i = (data >> 1) as usize;
            if res <= 0 {
                return Err(io::Error::other(format!(
                    "echo client: connection {i}: {} returned {res}",
                    if data & 1 == 0 { "send" } else { "recv" }
                )));
            }
            let c = &mut conns[i];
            if data & 1 == 0 {
                c.sent += res as usize;
                if c.sent < size {
                    let e = send_entry(i, c, &msg);
                    push(&mut ring, &e)?;
                }
            } else {
                c.got += res as usize;
                if c.got == size {
                    requests += 1;
                    c.got = 0;
                    c.sent = 0;
                    let e = send_entry(i, c, &msg);
                    push(&mut ring, &e)?;
                }
                let e = recv_entry(i, c);
                push(&mut ring, &e)?;
            }
        }
    }
    let (from_requests, from_time, from_cpu) = counted_from.expect("window opened");
    let seconds = from_time.elapsed().as_secs_f64();
    let cpu = server_cpu()? - from_cpu;
    drop(ring);
    Ok((requests - from_requests, seconds, cpu))
}
