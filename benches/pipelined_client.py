#!/usr/bin/env python3
"""An independent pipelining memcached client, to cross-check `weft load memcached --depth`.

Closed loop: CONNECTIONS connections keep DEPTH gets outstanding each; whenever a read
completes replies, the same number of new gets go out in one write (as a client that buffers
its pipelined requests does). Keys `key:%012d` over --keys, all stored first (200-byte values),
so every get hits. Python's standard library only, nothing shared with weft.
Prints one JSON object: req/s, requests per write, hits, misses (and the server's busy share).
"""
import argparse
import json
import os
import random
import selectors
import socket
import sys
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--server", default="127.0.0.1:11211", help="HOST:PORT")
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--keys", type=int, default=10000)
    ap.add_argument("--protocol", choices=["classic", "meta"], default="classic",
                    help="get KEY, or mg KEY v")
    ap.add_argument("--server-pid", type=int,
                    help="also report this process's CPU share over the measured window")
    a = ap.parse_args()
    if min(a.connections, a.depth, a.keys) < 1 or a.seconds <= 0:
        sys.exit("--connections, --depth, --keys and --seconds must be positive")
    host, port = a.server.rsplit(":", 1)
    addr = (host, int(port))
    meta = a.protocol == "meta"

    # Store every key once (classic sets; both protocols read the same items).
    s = socket.create_connection(addr)
    value = b"x" * 200
    batch = []
    for i in range(a.keys):
        batch.append(b"set key:%012d 0 0 200\r\n%s\r\n" % (i, value))
        if len(batch) == 200 or i == a.keys - 1:
            s.sendall(b"".join(batch))
            want, got = 8 * len(batch), b""
            while len(got) < want:
                chunk = s.recv(1 << 16)
                if not chunk:
                    sys.exit("server closed the connection during the preload")
                got += chunk
            if got != b"STORED\r\n" * len(batch):
                sys.exit("preload: unexpected reply %r" % got[:80])
            batch = []
    s.close()

    rng = random.Random(1)
    fmt = b"mg key:%012d v\r\n" if meta else b"get key:%012d\r\n"

    def requests(n):
        return b"".join(fmt % rng.randrange(a.keys) for _ in range(n))

    def parse(buf):
        """Complete replies at the front of buf: (hits, misses, rest)."""
        hits = misses = i = 0
        while True:
            j = buf.find(b"\r\n", i)
            if j < 0:
                break
            line = buf[i:j]
            if line in (b"END", b"EN"):
                misses += 1
                i = j + 2
                continue
            if meta and line.startswith(b"VA "):
                end = j + 2 + int(line.split()[1]) + 2
            elif not meta and line.startswith(b"VALUE "):
                end = j + 2 + int(line.split()[3]) + 2 + 5
            else:
                sys.exit("unexpected reply %r" % line[:80])
            if end > len(buf):
                break
            hits += 1
            i = end
        return hits, misses, buf[i:]

    sel = selectors.DefaultSelector()
    pending = {}
    for _ in range(a.connections):
        c = socket.create_connection(addr)
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        c.sendall(requests(a.depth))
        c.setblocking(False)
        pending[c] = b""
        sel.register(c, selectors.EVENT_READ)
    def cpu_seconds():
        if a.server_pid is None:
            return 0.0
        with open("/proc/%d/stat" % a.server_pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    hits = misses = writes = 0
    cpu0 = cpu_seconds()
    start = time.monotonic()
    end = start + a.seconds
    while time.monotonic() < end:
        for key, _ in sel.select(0.1):
            c = key.fileobj
            data = c.recv(1 << 16)
            if not data:
                sys.exit("server closed a connection")
            h, m, pending[c] = parse(pending[c] + data)
            if h + m:
                hits, misses = hits + h, misses + m
                c.sendall(requests(h + m))
                writes += 1
    elapsed = time.monotonic() - start
    busy = (cpu_seconds() - cpu0) / elapsed
    done = hits + misses
    print(json.dumps({"req_per_s": round(done / elapsed), "requests": done,
                      "requests_per_write": round(done / max(writes, 1), 2),
                      "hits": hits, "misses": misses, "protocol": a.protocol,
                      "connections": a.connections, "depth": a.depth,
                      "server_busy": round(busy, 3) if a.server_pid else None}))


if __name__ == "__main__":
    main()
