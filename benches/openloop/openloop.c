/*
 * openloop: an independent open-loop load generator for memcached's text protocol and for
 * HTTP/1.1 keep-alive, in plain C on epoll, so that weft's servers (and weft's own generator,
 * which runs on weft) can be cross-checked by a tool that shares no code with them.
 *
 * What it does (mutilate's and wrk2's semantics):
 * - N persistent connections, opened before the run; at most one request outstanding per
 *   connection (depth 1).
 * - Arrivals form one Poisson process of rate Q; each arrival picks a connection uniformly at
 *   random, so every connection sees a Poisson process of rate Q/N. An arrival for a busy
 *   connection waits in that connection's queue; its latency is counted from its *intended*
 *   time, so a server that falls behind is charged for the queueing it causes.
 * - A warm-up (not recorded), then the measured window. `actual_qps` is replies received
 *   inside the window divided by its length. Requests intended inside the window are
 *   recorded whenever their reply comes, up to a bounded drain after the window; those still
 *   unanswered then count as `timeouts`, and intended requests that could not even be queued
 *   (a connection's queue full) as `unsent`.
 * - Per connection, the replies received inside the window: min / median / max and Jain's
 *   fairness index (1 = every connection served equally).
 * - Segments on the wire, per request sent, from the kernel's counts (TCP_INFO) of every
 *   connection at the end of the run: this generator's pure ACKs (segments without data) and
 *   the server's. Loopback runs the receiver's TCP input in the sender's context, so a pure
 *   ACK this generator sends costs its own core a trip through the server socket's input.
 * - At the end every connection is closed with a reset (SO_LINGER 0), so no TIME_WAIT sockets
 *   outlive the run: their expiry, a minute later and all at once, would stall whichever
 *   server a following run measures.
 * - Where a reply waited: every connection asks the kernel to stamp what it receives
 *   (SO_TIMESTAMPNS), so besides the latency to when this generator read the reply
 *   (`p99_us`) it reports the latency to when the reply reached this host's kernel
 *   (`arrived_p99_us`) and the wait between the two (`read_wait_p99_us`). When the generator
 *   itself is the bottleneck, the first grows and the second says by how much.
 *
 * Build: cc -O2 -o openloop openloop.c -lpthread -lm
 * Usage: openloop --help
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <netinet/in.h>
/* The kernel's header, not glibc's: its struct tcp_info has the segment counts. */
#include <linux/tcp.h>
#include <arpa/inet.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define QUEUE_CAP 64          /* intended requests waiting per connection */
#define RBUF_CAP (1 << 14)    /* per-connection receive buffer */
#define HIST_FINE 100000      /* 1 us buckets up to 100 ms */
#define HIST_COARSE 100000    /* 100 us buckets up to 10 s */
#define MAX_EVENTS 512

enum proto { MC, HTTP };

static struct {
    enum proto proto;
    struct sockaddr_in addr;
    int connections, threads, keys, value_size;
    double qps, duration_s, warmup_s, update_ratio, drain_s;
    const char *path;
    int json;
    uint64_t spin_ns;
    const char *trace; /* every recorded request to this file, for finding when the slow ones were */
} cfg = {MC, {0}, 100, 1, 10000, 32, 10000, 5, 1, 0.03, 1.0, "/", 0, 100000, NULL};

/* One recorded request of the trace: when it was intended (ns after the window opened), its
 * latency (ns), its reply's arrival in the kernel and its send's return (ns after intended),
 * and its connection. */
struct trace_row {
    uint64_t intended_ns, latency_ns, arrived_ns, sent_ns;
    int conn;
};

struct conn {
    int fd;
    uint64_t q[QUEUE_CAP]; /* intended times (ns) */
    int qhead, qlen;
    int outstanding;       /* a request is on the wire */
    int is_set;            /* the outstanding request is a set */
    char *rbuf;
    int rlen;
    char *wbuf;            /* unsent tail of the current request */
    int wlen, woff;
    uint64_t served;       /* replies received inside the window */
    uint64_t rx_ns;        /* kernel arrival (CLOCK_MONOTONIC) of the last bytes read */
    uint64_t sent_ns;      /* --trace: when the outstanding request's last byte was handed over */
    uint64_t key_seed;
};

struct worker {
    pthread_t thread;
    int index, nconns;
    struct conn *conns;
    double qps;
    uint64_t rng;
    uint32_t *fine, *coarse;
    uint32_t *lag_fine, *lag_coarse; /* arrival to send, for arrivals on idle connections */
    uint32_t *arr_fine, *arr_coarse;   /* intended time to the reply's arrival in the kernel */
    uint32_t *wait_fine, *wait_coarse; /* the reply's arrival in the kernel to its reading */
    uint64_t lag_recorded;
    uint64_t recorded, late_drops, sent, in_window, timeouts, unsent, errors;
    uint64_t max_ns;
    char *setbuf;
    struct trace_row *trace; /* --trace: rows of this worker, at most trace_cap */
    uint64_t trace_len, trace_cap;
};

static uint64_t t_start, t_window, t_end, t_drain_end;
/* CLOCK_REALTIME minus CLOCK_MONOTONIC, to turn the kernel's receive stamps into monotonic time. */
static int64_t realtime_offset_ns;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

static uint64_t xorshift(uint64_t *s) {
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

static double uniform01(uint64_t *s) { return (xorshift(s) >> 11) * (1.0 / 9007199254740992.0); }

static void die(const char *what) {
    fprintf(stderr, "openloop: %s: %s\n", what, strerror(errno));
    exit(2);
}

static void hist_add(uint32_t *fine, uint32_t *coarse, uint64_t ns) {
    uint64_t us = ns / 1000;
    if (us < HIST_FINE)
        fine[us]++;
    else {
        uint64_t b = us / 100;
        if (b >= HIST_COARSE) b = HIST_COARSE - 1;
        coarse[b]++;
    }
}

static void record(struct worker *w, uint64_t lat_ns) {
    hist_add(w->fine, w->coarse, lat_ns);
    if (lat_ns > w->max_ns) w->max_ns = lat_ns;
    w->recorded++;
}

/* Builds the next request for c into its write buffer. */
static void build_request(struct worker *w, struct conn *c) {
    static __thread char req[8192];
    int n;
    if (cfg.proto == HTTP) {
        n = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: bench\r\n\r\n", cfg.path);
        c->is_set = 0;
    } else {
        unsigned key = (unsigned)(xorshift(&w->rng) % (uint64_t)cfg.keys);
        if (uniform01(&w->rng) < cfg.update_ratio) {
            n = snprintf(req, sizeof req, "set key:%08u 0 0 %d\r\n", key, cfg.value_size);
            memcpy(req + n, w->setbuf, cfg.value_size);
            n += cfg.value_size;
            memcpy(req + n, "\r\n", 2);
            n += 2;
            c->is_set = 1;
        } else {
            n = snprintf(req, sizeof req, "get key:%08u\r\n", key);
            c->is_set = 0;
        }
    }
    memcpy(c->wbuf, req, n);
    c->wlen = n;
    c->woff = 0;
}

static int flush_write(struct conn *c) {
    while (c->woff < c->wlen) {
        ssize_t r = send(c->fd, c->wbuf + c->woff, c->wlen - c->woff, MSG_NOSIGNAL);
        if (r < 0) {
            if (errno == EAGAIN) return 0;
            return -1;
        }
        c->woff += r;
    }
    return 1;
}

static void start_next(struct worker *w, struct conn *c, int epfd) {
    if (c->outstanding || c->qlen == 0) return;
    build_request(w, c);
    c->outstanding = 1;
    w->sent++;
    int r = flush_write(c);
    if (r < 0) {
        w->errors++;
        return;
    }
    if (cfg.trace) c->sent_ns = r > 0 ? now_ns() : 0;
    if (r == 0) {
        struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.ptr = c};
        epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &ev);
    }
}

/* Length of one complete response at the front of buf, 0 if incomplete, -1 if malformed. */
static int response_len(const struct conn *c) {
    const char *b = c->rbuf;
    int n = c->rlen;
    if (cfg.proto == HTTP) {
        const char *end = memmem(b, n, "\r\n\r\n", 4);
        if (!end) return 0;
        int head = (int)(end - b) + 4;
        const char *cl = memmem(b, head, "Content-Length:", 15);
        if (!cl) cl = memmem(b, head, "content-length:", 15);
        long body = cl ? strtol(cl + 15, NULL, 10) : 0;
        return n >= head + body ? head + (int)body : 0;
    }
    const char *eol = memmem(b, n, "\r\n", 2);
    if (!eol) return 0;
    int line = (int)(eol - b) + 2;
    if (c->is_set) return line; /* STORED / NOT_STORED / SERVER_ERROR ... */
    if (n >= 5 && memcmp(b, "END\r\n", 5) == 0) return 5;
    if (n >= 6 && memcmp(b, "VALUE ", 6) == 0) {
        /* VALUE key flags bytes */
        const char *p = b + 6;
        int spaces = 0;
        while (p < eol && spaces < 2) {
            if (*p == ' ') spaces++;
            p++;
        }
        long bytes = strtol(p, NULL, 10);
        long total = line + bytes + 2 + 5;
        return n >= total ? (int)total : 0;
    }
    return line; /* an error line */
}

/* recv() that also takes the kernel's receive stamp of the data read (SO_TIMESTAMPNS) into
 * c->rx_ns; without one (none came), c->rx_ns is `now`. */
static ssize_t recv_stamped(struct conn *c, uint64_t now) {
    struct iovec iov = {c->rbuf + c->rlen, RBUF_CAP - c->rlen};
    union {
        char buf[CMSG_SPACE(sizeof(struct timespec))];
        struct cmsghdr align;
    } ctl;
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf};
    ssize_t r = recvmsg(c->fd, &m, 0);
    c->rx_ns = now;
    if (r > 0)
        for (struct cmsghdr *h = CMSG_FIRSTHDR(&m); h; h = CMSG_NXTHDR(&m, h))
            if (h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_TIMESTAMPNS) {
                struct timespec ts;
                memcpy(&ts, CMSG_DATA(h), sizeof ts);
                int64_t rx = (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec - realtime_offset_ns;
                /* A stamp from before the run or after now is a clock step: keep `now`. */
                if (rx > (int64_t)t_start && (uint64_t)rx <= now) c->rx_ns = (uint64_t)rx;
            }
    return r;
}

static void on_readable(struct worker *w, struct conn *c, int epfd, uint64_t now) {
    for (;;) {
        ssize_t r = recv_stamped(c, now);
        if (r < 0) {
            if (errno == EAGAIN) break;
            w->errors++;
            return;
        }
        if (r == 0) {
            w->errors++;
            epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, NULL);
            return;
        }
        c->rlen += r;
        break; /* level-triggered: what is left is reported again */
    }
    for (;;) {
        if (!c->outstanding) break;
        int len = response_len(c);
        if (len <= 0) break;
        memmove(c->rbuf, c->rbuf + len, c->rlen - len);
        c->rlen -= len;
        uint64_t intended = c->q[c->qhead];
        c->qhead = (c->qhead + 1) % QUEUE_CAP;
        c->qlen--;
        c->outstanding = 0;
        if (intended >= t_window && intended < t_end) {
            record(w, now - intended);
            /* A reply completed by bytes that arrived before it was sent cannot be: clamp. */
            uint64_t arrived = c->rx_ns > intended ? c->rx_ns - intended : 0;
            hist_add(w->arr_fine, w->arr_coarse, arrived);
            hist_add(w->wait_fine, w->wait_coarse, now - c->rx_ns);
            if (w->trace_len < w->trace_cap)
                w->trace[w->trace_len++] = (struct trace_row){
                    intended - t_window, now - intended, arrived,
                    c->sent_ns > intended ? c->sent_ns - intended : 0, (int)(c - w->conns)};
        }
        if (now >= t_window && now < t_end) {
            w->in_window++;
            c->served++;
        }
        start_next(w, c, epfd);
    }
}

/* Queues (and sends, on idle connections) every arrival due by `now`; returns the next
 * arrival time. None is intended after the window closes. */
static uint64_t arrivals(struct worker *w, int epfd, uint64_t next, double mean_gap_ns, uint64_t now) {
    while (next <= now && next < t_end) {
        struct conn *c = &w->conns[xorshift(&w->rng) % (uint64_t)w->nconns];
        if (c->qlen == QUEUE_CAP) {
            if (next >= t_window) w->unsent++;
        } else {
            c->q[(c->qhead + c->qlen) % QUEUE_CAP] = next;
            c->qlen++;
            if (!c->outstanding && next >= t_window) {
                hist_add(w->lag_fine, w->lag_coarse, now_ns() - next);
                w->lag_recorded++;
            }
            start_next(w, c, epfd);
        }
        next += (uint64_t)(-log(1.0 - uniform01(&w->rng)) * mean_gap_ns) + 1;
    }
    return next;
}

static void *run_worker(void *arg) {
    struct worker *w = arg;
    int epfd = epoll_create1(0);
    if (epfd < 0) die("epoll_create1");
    for (int i = 0; i < w->nconns; i++) {
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &w->conns[i]};
        if (epoll_ctl(epfd, EPOLL_CTL_ADD, w->conns[i].fd, &ev) < 0) die("epoll_ctl");
    }
    struct epoll_event events[MAX_EVENTS];
    double mean_gap_ns = 1e9 / w->qps;
    uint64_t next = t_start + (uint64_t)(-log(1.0 - uniform01(&w->rng)) * mean_gap_ns);
    for (;;) {
        uint64_t now = now_ns();
        next = arrivals(w, epfd, next, mean_gap_ns, now);
        if (now >= t_drain_end) break;
        if (now >= t_end) {
            int pending = 0;
            for (int i = 0; i < w->nconns && !pending; i++) pending = w->conns[i].qlen > 0;
            if (!pending) break;
        }
        uint64_t wake = next < t_end ? next : t_drain_end;
        struct timespec ts = {0, 0};
        /* A sleep shorter than --spin-us costs more (a timer wake-up is tens of us of CPU on a
         * nested VM) and comes back later than polling: poll instead. */
        if (wake > now + cfg.spin_ns) {
            uint64_t d = wake - now;
            ts.tv_sec = d / 1000000000ull;
            ts.tv_nsec = d % 1000000000ull;
        }
        int n = epoll_pwait2(epfd, events, MAX_EVENTS, &ts, NULL);
        if (n < 0) {
            if (errno == EINTR) continue;
            die("epoll_pwait2");
        }
        now = now_ns();
        for (int i = 0; i < n; i++) {
            struct conn *c = events[i].data.ptr;
            if (events[i].events & EPOLLOUT) {
                int r = flush_write(c);
                if (r > 0 && cfg.trace) c->sent_ns = now_ns();
                if (r != 0) {
                    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
                    epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &ev);
                }
                if (r < 0) w->errors++;
            }
            if (events[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP)) on_readable(w, c, epfd, now);
            /* Arrivals are not held back by a long batch of replies. */
            now = now_ns();
            next = arrivals(w, epfd, next, mean_gap_ns, now);
        }
    }
    for (int i = 0; i < w->nconns; i++) {
        struct conn *c = &w->conns[i];
        for (int k = 0; k < c->qlen; k++) {
            uint64_t intended = c->q[(c->qhead + k) % QUEUE_CAP];
            if (intended >= t_window && intended < t_end) w->timeouts++;
        }
    }
    close(epfd);
    return NULL;
}

static int connect_one(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) die("socket");
    if (connect(fd, (struct sockaddr *)&cfg.addr, sizeof cfg.addr) < 0) die("connect");
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one) < 0) die("SO_TIMESTAMPNS");
    return fd;
}

/* Stores every key once, over one blocking connection, so that gets hit. */
/* Closes a connection whose exchange is over with a reset, so that it leaves no TIME_WAIT
 * socket behind (see the end of main). */
static void close_with_reset(int fd) {
    struct linger abort_close = {.l_onoff = 1, .l_linger = 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &abort_close, sizeof abort_close);
    close(fd);
}

static void preload(const char *value) {
    int fd = connect_one();
    char req[8192], resp[256];
    for (int k = 0; k < cfg.keys; k++) {
        int n = snprintf(req, sizeof req, "set key:%08u 0 0 %d noreply\r\n", (unsigned)k,
                         cfg.value_size);
        memcpy(req + n, value, cfg.value_size);
        n += cfg.value_size;
        memcpy(req + n, "\r\n", 2);
        n += 2;
        if (send(fd, req, n, MSG_NOSIGNAL) != n) die("preload send");
    }
    const char *mn = "mn\r\n";
    send(fd, mn, 4, MSG_NOSIGNAL);
    int got = 0;
    while (got < 4 || memcmp(resp + got - 4, "MN\r\n", 4) != 0) {
        ssize_t r = recv(fd, resp + got, sizeof resp - 1 - got, 0);
        if (r <= 0) die("preload reply");
        got += r;
        if (got > 200) {
            memmove(resp, resp + got - 4, 4);
            got = 4;
        }
    }
    close_with_reset(fd);
}

/* `count / sent` as a JSON number with three decimals into buf, or null when the kernel gave
 * no segment counts or nothing was sent. */
static const char *per_request(uint64_t count, uint64_t sent, int ok, char *buf) {
    if (!ok || sent == 0) return "null";
    snprintf(buf, 32, "%.3f", (double)count / (double)sent);
    return buf;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static double pct(uint64_t *fine, uint64_t *coarse, uint64_t total, double p) {
    if (total == 0) return 0;
    uint64_t want = (uint64_t)ceil(p * total), seen = 0;
    for (int i = 0; i < HIST_FINE; i++)
        if ((seen += fine[i]) >= want) return i + 1;
    for (int i = 0; i < HIST_COARSE; i++)
        if ((seen += coarse[i]) >= want) return (i + 1) * 100.0;
    return HIST_COARSE * 100.0;
}

static void usage(void) {
    puts("openloop: open-loop load (memcached text protocol or HTTP/1.1 keep-alive)\n"
         "  --proto mc|http        protocol [mc]\n"
         "  --server HOST:PORT     server (IPv4) [required]\n"
         "  --connections N        persistent connections, depth 1 each [100]\n"
         "  --qps Q                offered requests per second, Poisson [10000]\n"
         "  --duration S           measured window, seconds [5]\n"
         "  --warmup S             load before the window, not recorded [1]\n"
         "  --drain S              wait after the window for replies to requests intended in it [1]\n"
         "  --threads T            generator threads (connections and rate split evenly) [1]\n"
         "  --update-ratio R       mc: fraction of sets [0.03]\n"
         "  --keys K               mc: key space, preloaded [10000]\n"
         "  --value-size B         mc: value bytes [32]\n"
         "  --path P               http: the path every request asks for [/]\n"
         "  --spin-us U            poll instead of sleeping when the next arrival is this close [100]\n"
         "  --trace FILE           write every recorded request to FILE: intended time (us after the\n"
         "                         window opened), latency (us), worker and connection index, and\n"
         "                         latency to the reply's arrival in the kernel (us), and when the\n"
         "                         request's send returned (us after intended); the first line\n"
         "                         gives the window's start on CLOCK_MONOTONIC\n"
         "Prints one JSON object: offered and actual rates, latency percentiles from the\n"
         "intended send time (us) to the reading of the reply (p*_us) and to its arrival in this\n"
         "host's kernel (arrived_p*_us), the generator's wait between the two (read_wait_p*_us),\n"
         "timeouts, unsent, per-connection served min/median/max, Jain.");
}

int main(int argc, char **argv) {
    static struct option opts[] = {
        {"proto", 1, 0, 'p'},       {"server", 1, 0, 's'},   {"connections", 1, 0, 'c'},
        {"qps", 1, 0, 'q'},         {"duration", 1, 0, 'd'}, {"warmup", 1, 0, 'w'},
        {"drain", 1, 0, 'D'},       {"threads", 1, 0, 't'},  {"update-ratio", 1, 0, 'u'},
        {"keys", 1, 0, 'k'},        {"value-size", 1, 0, 'v'}, {"path", 1, 0, 'P'},
        {"spin-us", 1, 0, 'S'},    {"trace", 1, 0, 'T'},       {"help", 0, 0, 'h'},        {0, 0, 0, 0}};
    int o;
    char *server = NULL;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (o) {
        case 'p':
            if (!strcmp(optarg, "mc")) cfg.proto = MC;
            else if (!strcmp(optarg, "http")) cfg.proto = HTTP;
            else { fprintf(stderr, "openloop: --proto is mc or http\n"); return 2; }
            break;
        case 's': server = optarg; break;
        case 'c': cfg.connections = atoi(optarg); break;
        case 'q': cfg.qps = atof(optarg); break;
        case 'd': cfg.duration_s = atof(optarg); break;
        case 'w': cfg.warmup_s = atof(optarg); break;
        case 'D': cfg.drain_s = atof(optarg); break;
        case 't': cfg.threads = atoi(optarg); break;
        case 'u': cfg.update_ratio = atof(optarg); break;
        case 'k': cfg.keys = atoi(optarg); break;
        case 'v': cfg.value_size = atoi(optarg); break;
        case 'P': cfg.path = optarg; break;
        case 'S': cfg.spin_ns = (uint64_t)(atof(optarg) * 1000); break;
        case 'T': cfg.trace = optarg; break;
        case 'h': usage(); return 0;
        default: usage(); return 2;
        }
    }
    if (!server) { fprintf(stderr, "openloop: --server HOST:PORT is required\n"); return 2; }
    char host[64];
    const char *colon = strrchr(server, ':');
    if (!colon || colon - server >= (long)sizeof host) { fprintf(stderr, "openloop: bad --server\n"); return 2; }
    memcpy(host, server, colon - server);
    host[colon - server] = 0;
    cfg.addr.sin_family = AF_INET;
    cfg.addr.sin_port = htons(atoi(colon + 1));
    if (inet_pton(AF_INET, host, &cfg.addr.sin_addr) != 1) { fprintf(stderr, "openloop: bad host\n"); return 2; }
    if (cfg.connections < 1 || cfg.threads < 1 || cfg.threads > cfg.connections || cfg.qps <= 0 ||
        cfg.duration_s <= 0 || cfg.value_size < 1 || cfg.value_size > 4000 || cfg.keys < 1) {
        fprintf(stderr, "openloop: need connections >= threads >= 1, qps > 0, duration > 0, "
                        "1 <= value-size <= 4000, keys >= 1\n");
        return 2;
    }
    /* Wake-ups on time: the default 50 us timer slack would delay every arrival. */
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_cur < (rlim_t)cfg.connections + 64) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    char *value = malloc(cfg.value_size);
    memset(value, 'v', cfg.value_size);
    if (cfg.proto == MC) preload(value);

    struct worker *ws = calloc(cfg.threads, sizeof *ws);
    for (int t = 0; t < cfg.threads; t++) {
        struct worker *w = &ws[t];
        w->index = t;
        w->nconns = cfg.connections / cfg.threads + (t < cfg.connections % cfg.threads);
        w->qps = cfg.qps * w->nconns / cfg.connections;
        w->rng = 0x9E3779B97F4A7C15ull * (t + 1);
        w->fine = calloc(HIST_FINE, sizeof(uint32_t));
        w->coarse = calloc(HIST_COARSE, sizeof(uint32_t));
        w->lag_fine = calloc(HIST_FINE, sizeof(uint32_t));
        w->lag_coarse = calloc(HIST_COARSE, sizeof(uint32_t));
        w->arr_fine = calloc(HIST_FINE, sizeof(uint32_t));
        w->arr_coarse = calloc(HIST_COARSE, sizeof(uint32_t));
        w->wait_fine = calloc(HIST_FINE, sizeof(uint32_t));
        w->wait_coarse = calloc(HIST_COARSE, sizeof(uint32_t));
        w->setbuf = value;
        w->conns = calloc(w->nconns, sizeof(struct conn));
        if (cfg.trace) {
            /* Room for twice the expected arrivals of the window; later rows are dropped. */
            w->trace_cap = (uint64_t)(2 * w->qps * cfg.duration_s) + 1024;
            w->trace = malloc(w->trace_cap * sizeof(struct trace_row));
            if (!w->trace) die("trace buffer");
        }
        for (int i = 0; i < w->nconns; i++) {
            struct conn *c = &w->conns[i];
            c->fd = connect_one();
            fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK);
            c->rbuf = malloc(RBUF_CAP);
            c->wbuf = malloc(8192);
        }
    }
    struct rusage ru0, ru1;
    getrusage(RUSAGE_SELF, &ru0);
    struct timespec rt;
    clock_gettime(CLOCK_REALTIME, &rt);
    t_start = now_ns();
    realtime_offset_ns = (int64_t)rt.tv_sec * 1000000000ll + rt.tv_nsec - (int64_t)t_start;
    t_window = t_start + (uint64_t)(cfg.warmup_s * 1e9);
    t_end = t_window + (uint64_t)(cfg.duration_s * 1e9);
    t_drain_end = t_end + (uint64_t)(cfg.drain_s * 1e9);
    for (int t = 0; t < cfg.threads; t++) pthread_create(&ws[t].thread, NULL, run_worker, &ws[t]);
    for (int t = 0; t < cfg.threads; t++) pthread_join(ws[t].thread, NULL);
    getrusage(RUSAGE_SELF, &ru1);
    /* Segments both ways over every connection's life (its handshake too), after the CPU
     * count: the 15,360 getsockopt calls are not the generator's work. */
    uint64_t segs_out = 0, data_segs_out = 0, segs_in = 0, data_segs_in = 0;
    int tcp_info_ok = 1;
    for (int t = 0; t < cfg.threads && tcp_info_ok; t++)
        for (int i = 0; i < ws[t].nconns; i++) {
            struct tcp_info ti;
            socklen_t len = sizeof ti;
            memset(&ti, 0, sizeof ti);
            if (getsockopt(ws[t].conns[i].fd, IPPROTO_TCP, TCP_INFO, &ti, &len) < 0 ||
                len < offsetof(struct tcp_info, tcpi_data_segs_out) + sizeof ti.tcpi_data_segs_out) {
                tcp_info_ok = 0;
                break;
            }
            segs_out += ti.tcpi_segs_out;
            data_segs_out += ti.tcpi_data_segs_out;
            segs_in += ti.tcpi_segs_in;
            data_segs_in += ti.tcpi_data_segs_in;
        }
    /* Closed with a reset, not a FIN: a connection this side closes first would sit in
     * TIME_WAIT for 60 s, and the kernel expires a run's TIME_WAIT sockets together, on the
     * CPU that took the server's FIN, which is the server's. With 15,360 of them that stopped
     * the next run's server core for 6.7 ms a minute later (whichever server then ran). The
     * window and its drain are over; nothing is lost. */
    for (int t = 0; t < cfg.threads; t++)
        for (int i = 0; i < ws[t].nconns; i++) close_with_reset(ws[t].conns[i].fd);
    if (cfg.trace) {
        FILE *f = fopen(cfg.trace, "w");
        if (!f) die(cfg.trace);
        fprintf(f, "# window opened at CLOCK_MONOTONIC %.1f us\n", t_window / 1e3);
        for (int t = 0; t < cfg.threads; t++)
            for (uint64_t i = 0; i < ws[t].trace_len; i++) {
                struct trace_row *r = &ws[t].trace[i];
                fprintf(f, "%.1f %.1f %d %d %.1f %.1f\n", r->intended_ns / 1e3, r->latency_ns / 1e3, t,
                        r->conn, r->arrived_ns / 1e3, r->sent_ns / 1e3);
            }
        if (fclose(f) != 0) die(cfg.trace);
    }
    double cpu = (ru1.ru_utime.tv_sec - ru0.ru_utime.tv_sec) + (ru1.ru_utime.tv_usec - ru0.ru_utime.tv_usec) / 1e6 +
                 (ru1.ru_stime.tv_sec - ru0.ru_stime.tv_sec) + (ru1.ru_stime.tv_usec - ru0.ru_stime.tv_usec) / 1e6;
    double wall = (now_ns() - t_start) / 1e9;

    uint64_t *fine = calloc(HIST_FINE, sizeof(uint64_t)), *coarse = calloc(HIST_COARSE, sizeof(uint64_t));
    uint64_t *lag_fine = calloc(HIST_FINE, sizeof(uint64_t)), *lag_coarse = calloc(HIST_COARSE, sizeof(uint64_t));
    uint64_t lag_recorded = 0;
    uint64_t *arr_fine = calloc(HIST_FINE, sizeof(uint64_t)), *arr_coarse = calloc(HIST_COARSE, sizeof(uint64_t));
    uint64_t *wait_fine = calloc(HIST_FINE, sizeof(uint64_t)), *wait_coarse = calloc(HIST_COARSE, sizeof(uint64_t));
    uint64_t recorded = 0, in_window = 0, timeouts = 0, unsent = 0, errors = 0, sent = 0, max_ns = 0;
    uint64_t *served = malloc(sizeof(uint64_t) * cfg.connections);
    int si = 0;
    double sum = 0, sumsq = 0;
    for (int t = 0; t < cfg.threads; t++) {
        struct worker *w = &ws[t];
        for (int i = 0; i < HIST_FINE; i++) fine[i] += w->fine[i];
        for (int i = 0; i < HIST_COARSE; i++) coarse[i] += w->coarse[i];
        recorded += w->recorded;
        for (int i = 0; i < HIST_FINE; i++) lag_fine[i] += w->lag_fine[i];
        for (int i = 0; i < HIST_COARSE; i++) lag_coarse[i] += w->lag_coarse[i];
        lag_recorded += w->lag_recorded;
        for (int i = 0; i < HIST_FINE; i++) arr_fine[i] += w->arr_fine[i], wait_fine[i] += w->wait_fine[i];
        for (int i = 0; i < HIST_COARSE; i++) arr_coarse[i] += w->arr_coarse[i], wait_coarse[i] += w->wait_coarse[i];
        in_window += w->in_window;
        timeouts += w->timeouts;
        unsent += w->unsent;
        errors += w->errors;
        sent += w->sent;
        if (w->max_ns > max_ns) max_ns = w->max_ns;
        for (int i = 0; i < w->nconns; i++) {
            uint64_t s = w->conns[i].served;
            served[si++] = s;
            sum += s;
            sumsq += (double)s * s;
        }
    }
    qsort(served, cfg.connections, sizeof(uint64_t), cmp_u64);
    char seg_buf[4][32];
    double jain = sumsq > 0 ? sum * sum / (cfg.connections * sumsq) : 0;
    printf("{\"proto\":\"%s\",\"connections\":%d,\"threads\":%d,\"offered_qps\":%.0f,"
           "\"actual_qps\":%.0f,\"recorded\":%llu,\"timeouts\":%llu,\"unsent\":%llu,\"errors\":%llu,"
           "\"p50_us\":%.0f,\"p90_us\":%.0f,\"p99_us\":%.0f,\"p999_us\":%.0f,\"max_us\":%.0f,"
           "\"conn_served_min\":%llu,\"conn_served_median\":%llu,\"conn_served_max\":%llu,"
           "\"jain\":%.4f,\"generator_cpu_s\":%.2f,\"generator_busy\":%.2f,"
           "\"send_lag_p99_us\":%.0f,\"send_lag_p999_us\":%.0f,"
           "\"arrived_p50_us\":%.0f,\"arrived_p99_us\":%.0f,\"arrived_p999_us\":%.0f,"
           "\"read_wait_p50_us\":%.0f,\"read_wait_p99_us\":%.0f,\"read_wait_p999_us\":%.0f,"
           "\"requests_sent\":%llu,\"generator_segs_per_request\":%s,\"generator_pure_acks_per_request\":%s,"
           "\"server_segs_per_request\":%s,\"server_pure_acks_per_request\":%s}\n",
           cfg.proto == MC ? "mc" : "http", cfg.connections, cfg.threads, cfg.qps,
           in_window / cfg.duration_s, (unsigned long long)recorded, (unsigned long long)timeouts,
           (unsigned long long)unsent, (unsigned long long)errors,
           pct(fine, coarse, recorded, 0.50), pct(fine, coarse, recorded, 0.90),
           pct(fine, coarse, recorded, 0.99), pct(fine, coarse, recorded, 0.999), max_ns / 1000.0,
           (unsigned long long)served[0], (unsigned long long)served[cfg.connections / 2],
           (unsigned long long)served[cfg.connections - 1], jain, cpu, cpu / wall / cfg.threads,
           pct(lag_fine, lag_coarse, lag_recorded, 0.99), pct(lag_fine, lag_coarse, lag_recorded, 0.999),
           pct(arr_fine, arr_coarse, recorded, 0.50), pct(arr_fine, arr_coarse, recorded, 0.99),
           pct(arr_fine, arr_coarse, recorded, 0.999), pct(wait_fine, wait_coarse, recorded, 0.50),
           pct(wait_fine, wait_coarse, recorded, 0.99), pct(wait_fine, wait_coarse, recorded, 0.999),
           (unsigned long long)sent, per_request(segs_out, sent, tcp_info_ok, seg_buf[0]),
           per_request(segs_out - data_segs_out, sent, tcp_info_ok, seg_buf[1]),
           per_request(segs_in, sent, tcp_info_ok, seg_buf[2]),
           per_request(segs_in - data_segs_in, sent, tcp_info_ok, seg_buf[3]));
    return 0;
}
