/*
 * tlb_stride: how the spacing of pages changes what touching them costs.
 *
 * Chases a pointer through N pages placed STRIDE pages apart (one 64-byte node a page, at
 * the varying line offsets a coloured stack top has), in a random cyclic order, and prints
 * the nanoseconds a step. Each step is one dependent load, so a step that misses the
 * second-level TLB pays a page walk. With a TLB indexed by the page number's low bits, an
 * even STRIDE leaves the pages half the sets: fiber stacks mapped back to back, each an even
 * number of pages, put every parked fiber's top page in the same half
 * (crates/weft/src/fiber/stack.rs, `mapping_len`; docs/notes/scale.md, "Stack tops in half
 * the TLB").
 *
 * Build and run:  cc -O2 -o /tmp/tlb_stride benches/tlb_stride/tlb_stride.c
 *                 for s in 18 19; do taskset -c 0 /tmp/tlb_stride 1000 $s; done
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc != 3 || atoi(argv[1]) < 2 || atoi(argv[2]) < 1) {
        fprintf(stderr, "usage: tlb_stride PAGES STRIDE_PAGES   (PAGES >= 2, STRIDE_PAGES >= 1)\n");
        return 2;
    }
    int n = atoi(argv[1]), stride = atoi(argv[2]);
    const long steps = 20000000;
    size_t len = (size_t)(n + 1) * stride * 4096;
    char *m = mmap(0, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (m == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    madvise(m, len, MADV_NOHUGEPAGE); /* 4 KiB pages, as fiber stacks have */
    int *order = malloc(n * sizeof *order);
    char **node = malloc(n * sizeof *node);
    if (!order || !node) {
        perror("malloc");
        return 1;
    }
    for (int i = 0; i < n; i++) order[i] = i;
    srand(1);
    for (int i = n - 1; i > 0; i--) {
        int j = rand() % (i + 1), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    for (int i = 0; i < n; i++) node[i] = m + (size_t)i * stride * 4096 + 2048 + (i * 7 % 24) * 64;
    for (int i = 0; i < n; i++) *(char **)node[order[i]] = node[order[(i + 1) % n]];
    char *p = node[order[0]];
    for (long s = 0; s < steps / 10; s++) p = *(char **)p; /* warm up: fault in, fill */
    double t0 = now_s();
    for (long s = 0; s < steps; s++) p = *(char **)p;
    double t1 = now_s();
    printf("pages %d stride %d: %.2f ns a step (%p)\n", n, stride, (t1 - t0) * 1e9 / steps,
           (void *)p);
    return 0;
}
