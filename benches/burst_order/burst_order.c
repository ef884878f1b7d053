// burst_order: which requests wait longest when a burst of keep-alive connections starts.
//
// A closed-loop HTTP/1.1 client like `wrk -t1 -cN` (one thread, epoll, every connection
// sending its next GET as soon as its reply is in), that keeps every request: when it was sent
// (from the start of the run), how long its reply took, its connection and its number on that
// connection. It prints, as one JSON object:
//   - the latency percentiles (p50, p99, p99.9, p99.99, longest) and requests/s;
//   - the slowest requests (`--top`), each with its start, connection and number: whether
//     the longest waits are the first requests of the last connections (a server that takes
//     a burst of new connections late), or something else;
//   - for each connection's first request, how many requests sent after it were answered
//     before it ("overtaken"): 0 for a server that answers in the order requests arrive;
//   - the share of the slowest 0.1 % that were first requests, and when the last first
//     reply came.
// A reply is framed by its Content-Length (a reply without one, a status other than 2xx, or a
// connection the server closes is an error; errors are counted and the connection is not
// reused).
//
// Build: cc -O2 -o burst_order burst_order.c
// Usage: burst_order --server 127.0.0.1:8080 [--connections 1000] [--duration 3]
//                    [--path /] [--top 10]
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BUF_BYTES 65536

typedef struct {
    int fd;
    int connected;
    int dead;
    double sent;     // when the outstanding request was sent (s since start)
    long n;          // requests answered on this connection
    size_t have;     // bytes buffered of the reply being read
    long body_left;  // -1: still in the head
    char *buf;
} Conn;

typedef struct {
    double start;  // s since the start of the run
    double reply;  // s since the start of the run
    int conn;
    long n;
} Rec;

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void usage(void) {
    fprintf(stderr,
            "usage: burst_order --server HOST:PORT [--connections N] [--duration S] [--path P] "
            "[--top K]\n");
    exit(2);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int by_latency_desc(const void *a, const void *b) {
    const Rec *x = a, *y = b;
    double lx = x->reply - x->start, ly = y->reply - y->start;
    return (lx < ly) - (lx > ly);
}

static int by_start_desc(const void *a, const void *b) {
    const Rec *x = a, *y = b;
    return (x->start < y->start) - (x->start > y->start);
}

// Parses what `c` holds of a reply; returns 1 when a whole reply was taken off the buffer,
// 0 when more bytes are needed, -1 on a reply it cannot frame.
static int take_reply(Conn *c) {
    if (c->body_left < 0) {
        char *end = memmem(c->buf, c->have, "\r\n\r\n", 4);
        if (!end) return c->have >= BUF_BYTES ? -1 : 0;
        size_t head = (size_t)(end - c->buf) + 4;
        if (c->have < 12 || memcmp(c->buf, "HTTP/1.", 7) != 0 || c->buf[9] != '2') return -1;
        long length = -1;
        for (char *line = memmem(c->buf, head, "\r\n", 2); line && line < end;
             line = memmem(line + 2, head - (size_t)(line + 2 - c->buf), "\r\n", 2)) {
            if (strncasecmp(line + 2, "Content-Length:", 15) == 0) {
                length = strtol(line + 17, NULL, 10);
                break;
            }
        }
        if (length < 0) return -1;
        memmove(c->buf, c->buf + head, c->have - head);
        c->have -= head;
        c->body_left = length;
    }
    size_t take = (size_t)c->body_left < c->have ? (size_t)c->body_left : c->have;
    memmove(c->buf, c->buf + take, c->have - take);
    c->have -= take;
    c->body_left -= (long)take;
    if (c->body_left > 0) return 0;
    c->body_left = -1;
    return 1;
}

int main(int argc, char **argv) {
    const char *server = NULL, *path = "/";
    int connections = 1000, top = 10;
    double duration = 3;
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc) usage();
        if (!strcmp(argv[i], "--server")) server = argv[++i];
        else if (!strcmp(argv[i], "--connections")) connections = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--duration")) duration = atof(argv[++i]);
        else if (!strcmp(argv[i], "--path")) path = argv[++i];
        else if (!strcmp(argv[i], "--top")) top = atoi(argv[++i]);
        else usage();
    }
    if (!server || connections < 1 || duration <= 0 || top < 0) usage();
    char host[256];
    const char *colon = strrchr(server, ':');
    if (!colon || (size_t)(colon - server) >= sizeof host) usage();
    memcpy(host, server, (size_t)(colon - server));
    host[colon - server] = 0;
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) {
        fprintf(stderr, "burst_order: not an IPv4 address: %s\n", host);
        return 2;
    }
    struct rlimit lim;
    if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < (rlim_t)connections + 16) {
        lim.rlim_cur = lim.rlim_max;
        setrlimit(RLIMIT_NOFILE, &lim);
    }
    char request[1024];
    int request_len = snprintf(request, sizeof request, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", path, server);
    if (request_len >= (int)sizeof request) usage();

    Conn *conns = calloc((size_t)connections, sizeof *conns);
    size_t cap = 1 << 20, count = 0;
    Rec *recs = malloc(cap * sizeof *recs);
    int ep = epoll_create1(0);
    if (!conns || !recs || ep < 0) {
        perror("burst_order");
        return 1;
    }
    long errors = 0;
    double t0 = now_s(), end = t0 + duration;
    // Every connection at once, as wrk does: the burst a server's accept meets.
    for (int i = 0; i < connections; i++) {
        Conn *c = &conns[i];
        c->body_left = -1;
        c->buf = malloc(BUF_BYTES);
        c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        int one = 1;
        if (!c->buf || c->fd < 0) {
            perror("burst_order: socket");
            return 1;
        }
        setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (connect(c->fd, (struct sockaddr *)&addr, sizeof addr) != 0 && errno != EINPROGRESS) {
            perror("burst_order: connect");
            return 1;
        }
        struct epoll_event e = {.events = EPOLLIN | EPOLLOUT, .data.u32 = (uint32_t)i};
        epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &e);
    }
    struct epoll_event events[512];
    while (now_s() < end) {
        int n = epoll_wait(ep, events, 512, 10);
        for (int j = 0; j < n; j++) {
            int i = (int)events[j].data.u32;
            Conn *c = &conns[i];
            if (c->dead) continue;
            if (events[j].events & (EPOLLERR | EPOLLHUP) && !(events[j].events & EPOLLIN)) {
                c->dead = 1;
                errors++;
                continue;
            }
            if (!c->connected && (events[j].events & EPOLLOUT)) {
                c->connected = 1;
                struct epoll_event e = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
                epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &e);
                c->sent = now_s() - t0;
                if (write(c->fd, request, (size_t)request_len) != request_len) {
                    c->dead = 1;
                    errors++;
                }
                continue;
            }
            if (!(events[j].events & EPOLLIN)) continue;
            for (;;) {
                ssize_t r = read(c->fd, c->buf + c->have, BUF_BYTES - c->have);
                if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
                    c->dead = 1;
                    errors++;
                    break;
                }
                if (r < 0) break;
                c->have += (size_t)r;
                int got;
                while ((got = take_reply(c)) == 1) {
                    double t = now_s() - t0;
                    if (count == cap) {
                        cap *= 2;
                        recs = realloc(recs, cap * sizeof *recs);
                        if (!recs) {
                            perror("burst_order");
                            return 1;
                        }
                    }
                    recs[count++] = (Rec){c->sent, t, i, c->n};
                    c->n++;
                    c->sent = t;
                    if (write(c->fd, request, (size_t)request_len) != request_len) {
                        c->dead = 1;
                        errors++;
                        break;
                    }
                }
                if (got < 0) {
                    c->dead = 1;
                    errors++;
                }
                if (c->dead || c->have == BUF_BYTES) break;
            }
        }
    }
    if (count == 0) {
        fprintf(stderr, "burst_order: no reply in %.1f s (%ld errors)\n", duration, errors);
        return 1;
    }

    double *lat = malloc(count * sizeof *lat);
    for (size_t i = 0; i < count; i++) lat[i] = recs[i].reply - recs[i].start;
    qsort(lat, count, sizeof *lat, cmp_double);
#define PCT(p) (lat[(size_t)((double)(count - 1) * (p))] * 1e6)

    // Overtaken: for each first request, the requests sent after it and answered before it.
    // Walk by start, latest first, keeping the reply times seen in a Fenwick tree over their
    // ranks; a first request counts the seen replies earlier than its own.
    double *replies = malloc(count * sizeof *replies);
    for (size_t i = 0; i < count; i++) replies[i] = recs[i].reply;
    qsort(replies, count, sizeof *replies, cmp_double);
    qsort(recs, count, sizeof *recs, by_start_desc);
    long *tree = calloc(count + 1, sizeof *tree);
    long overtaken_max = 0, firsts = 0;
    double overtaken_sum = 0, last_first_reply = 0, first_latency_max = 0;
    for (size_t i = 0; i < count; i++) {
        // This reply's rank: how many replies came strictly earlier.
        size_t lo = 0, hi = count;
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (replies[mid] < recs[i].reply) lo = mid + 1;
            else hi = mid;
        }
        if (recs[i].n == 0) {
            long earlier = 0;
            for (size_t k = lo; k > 0; k -= k & -k) earlier += tree[k];
            overtaken_sum += (double)earlier;
            if (earlier > overtaken_max) overtaken_max = earlier;
            firsts++;
            if (recs[i].reply > last_first_reply) last_first_reply = recs[i].reply;
            double l = recs[i].reply - recs[i].start;
            if (l > first_latency_max) first_latency_max = l;
        }
        for (size_t k = lo + 1; k <= count; k += k & -k) tree[k]++;
    }

    qsort(recs, count, sizeof *recs, by_latency_desc);
    size_t slowest = count / 1000 ? count / 1000 : 1, slowest_first = 0;
    for (size_t i = 0; i < slowest; i++) slowest_first += recs[i].n == 0;

    printf("{\"server\": \"%s\", \"connections\": %d, \"duration_s\": %.3f, \"requests\": %zu, "
           "\"requests_per_sec\": %.0f, \"errors\": %ld,\n",
           server, connections, duration, count, (double)count / duration, errors);
    printf(" \"latency_us\": {\"p50\": %.0f, \"p99\": %.0f, \"p999\": %.0f, \"p9999\": %.0f, "
           "\"max\": %.0f},\n",
           PCT(0.5), PCT(0.99), PCT(0.999), PCT(0.9999), lat[count - 1] * 1e6);
    printf(" \"first_requests\": {\"answered\": %ld, \"overtaken_max\": %ld, "
           "\"overtaken_mean\": %.1f, \"latency_max_us\": %.0f, \"last_reply_ms\": %.1f},\n",
           firsts, overtaken_max, firsts ? overtaken_sum / (double)firsts : 0.0,
           first_latency_max * 1e6, last_first_reply * 1e3);
    printf(" \"slowest_0_1_pct_first_requests\": %.3f,\n", (double)slowest_first / (double)slowest);
    printf(" \"slowest\": [");
    for (int i = 0; i < top && (size_t)i < count; i++)
        printf("%s\n  {\"latency_us\": %.0f, \"start_ms\": %.1f, \"connection\": %d, \"request\": %ld}",
               i ? "," : "", (recs[i].reply - recs[i].start) * 1e6, recs[i].start * 1e3,
               recs[i].conn, recs[i].n);
    printf("]}\n");
    return 0;
}
