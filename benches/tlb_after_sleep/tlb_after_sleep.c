/*
 * tlb_after_sleep: what a sleep costs the next few memory touches, in page walks and lines.
 *
 * A server thread that sleeps between requests finds on waking whatever the CPU kept of its
 * TLB and caches. On a virtual machine the host may run something else on the core while the
 * vCPU halts, and flush or evict both. This program measures it: after waiting WAIT_US
 * microseconds, either asleep (nanosleep: the thread blocks and the CPU idles) or spinning
 * (the same time, nothing lost), it chases a pointer through 64 nodes, one dependent load a
 * node, laid out two ways:
 *   spread  one node on each of 64 pages (a line each: a request touching 64 pages);
 *   dense   all 64 nodes on one page (the same 64 lines' worth of misses, one page).
 * Both chains were touched just before the wait, so what the wait took away is what they
 * pay. `spread - dense`, over 64, is what one page costs beyond its line: the page walk a
 * lost TLB entry costs. Nanoseconds a chain, min-median-max over ROUNDS rounds.
 *
 * Build and run:  cc -O2 -o /tmp/tlb_after_sleep benches/tlb_after_sleep/tlb_after_sleep.c
 *                 for us in 0 50 200 1000; do taskset -c 0 /tmp/tlb_after_sleep $us; done
 * (docs/notes/scale.md, "What a sleep costs the next touches").
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

enum { NODES = 64, PAGE = 4096, LINE = 64, ROUNDS = 2001 };

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Links NODES nodes at `at[i]` into one cycle in a shuffled order; returns the first. */
static void **link_cycle(char **at, unsigned seed) {
    int order[NODES];
    for (int i = 0; i < NODES; i++)
        order[i] = i;
    for (int i = NODES - 1; i > 0; i--) {
        seed = seed * 1103515245u + 12345u;
        int j = (int)((seed >> 8) % (unsigned)(i + 1));
        int t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    for (int i = 0; i < NODES; i++)
        *(void **)at[order[i]] = at[order[(i + 1) % NODES]];
    return (void **)at[order[0]];
}

static void *chase(void **p) {
    for (int i = 0; i < NODES; i++)
        p = (void **)*p;
    return p;
}

static void wait_us(long us, int asleep) {
    if (us == 0)
        return;
    if (asleep) {
        struct timespec t = {us / 1000000, (us % 1000000) * 1000};
        nanosleep(&t, NULL);
    } else {
        uint64_t end = now_ns() + (uint64_t)us * 1000;
        while (now_ns() < end)
            ;
    }
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    char *end = NULL;
    long us = argc == 2 ? strtol(argv[1], &end, 10) : -1;
    if (argc != 2 || *end != '\0' || us < 0 || us > 1000000) {
        fprintf(stderr, "usage: tlb_after_sleep WAIT_US   (0 to 1000000)\n");
        return 2;
    }
    /* 4 KiB pages for sure: the spread chain must cost a TLB entry a node. Pages 37 apart,
     * so no two share a line of page-table entries (8 a line). */
    size_t len = (size_t)(NODES * 37 + 2) * PAGE;
    char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    madvise(m, len, MADV_NOHUGEPAGE);
    memset(m, 1, len);
    char *spread_at[NODES], *dense_at[NODES];
    for (int i = 0; i < NODES; i++) {
        /* Line offsets vary, so the spread nodes do not crowd one cache set. */
        spread_at[i] = m + (size_t)(37 * i + 1) * PAGE + (size_t)(i % (PAGE / LINE)) * LINE;
        dense_at[i] = m + (size_t)(NODES * 37 + 1) * PAGE + (size_t)i * LINE;
    }
    void **spread = link_cycle(spread_at, 1), **dense = link_cycle(dense_at, 2);
    static uint64_t t[2][2][ROUNDS]; /* [asleep][layout][round] */
    void *sink = NULL;
    for (int r = 0; r < ROUNDS; r++) {
        for (int asleep = 0; asleep < 2; asleep++) {
            for (int layout = 0; layout < 2; layout++) {
                void **chain = layout ? dense : spread;
                sink = chase(chain); /* warm: what the wait may take away */
                wait_us(us, asleep);
                uint64_t t0 = now_ns();
                sink = chase((void **)sink);
                t[asleep][layout][r] = now_ns() - t0;
            }
        }
    }
    printf("wait %ld us, %d nodes a chain, ns a chain (min-median-max of %d)\n", us, NODES,
           ROUNDS);
    for (int asleep = 0; asleep < 2; asleep++) {
        uint64_t med[2];
        for (int layout = 0; layout < 2; layout++) {
            qsort(t[asleep][layout], ROUNDS, sizeof(uint64_t), cmp_u64);
            med[layout] = t[asleep][layout][ROUNDS / 2];
        }
        printf("%-8s spread %6llu-%6llu-%6llu  dense %6llu-%6llu-%6llu  a page beyond its line "
               "%6.1f ns\n",
               asleep ? "asleep" : "spinning", (unsigned long long)t[asleep][0][0],
               (unsigned long long)med[0], (unsigned long long)t[asleep][0][ROUNDS - 1],
               (unsigned long long)t[asleep][1][0], (unsigned long long)med[1],
               (unsigned long long)t[asleep][1][ROUNDS - 1],
               ((double)med[0] - (double)med[1]) / NODES);
    }
    return sink == NULL; /* keeps the chase */
}
