/* The machine's floor for small-message latency: two processes pinned to cores 0 and
 * 1 bounce one cache line in shared memory. Prints the median one-way time in ns over
 * 1000 batches of 1000 round trips: `cacheline_ns N`.
 *
 * With the argument `2`, each direction has its own line (the parent writes one and
 * polls the other), as in any transport whose two directions use separate rings or
 * boxes: `cacheline2_ns N`.
 *
 * A second argument W has each side compute for about W ns between seeing a message
 * and writing its reply, as any software stack does (`cacheline_after_W_ns N`,
 * `cacheline2_after_W_ns N`). While one side computes, the other side's polling takes
 * a shared line back, and the reply pays a second transfer.
 *
 * A third argument `pause` has each side wait with the x86 `pause` instruction between
 * two looks at the line (`..._pause_ns N`): fewer loads of a line the other side is
 * about to write.
 *
 * A third argument `prefetchw` has each side, as soon as it sees a message, ask for the
 * line it will write its reply to in a writable state (x86 `prefetchw`), before its W ns
 * of work (`..._prefetchw_ns N`): taking the line away from the polling side then
 * overlaps the work instead of delaying the reply.
 *
 * How fast a line bounces depends on the poll loop itself. The default loop also tests
 * the mode flags on every look. A third argument `tight` polls with nothing in the loop
 * but the load and the compare (`..._tight_ns N`); `fence` adds an x86 `lfence` after
 * each look (`..._fence_ns N`), so that one look finishes before the next starts. */
#define _GNU_SOURCE
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <immintrin.h>
#define PAUSE() _mm_pause()
#define LFENCE() _mm_lfence()
#define PREFETCHW(p) __asm__ volatile("prefetchw %0" : : "m"(*(const char *)(p)))
#else
#define PAUSE() ((void)0)
#define LFENCE() ((void)0)
#define PREFETCHW(p) ((void)0)
#endif

static void pin(int core) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(core, &set);
    sched_setaffinity(0, sizeof set, &set);
}

/* Dependent arithmetic, `n` steps. */
static long work(long n) {
    long x = 1;
    for (long i = 0; i < n; i++) {
        x = x * 3 + i;
        __asm__ volatile("" : "+r"(x));
    }
    return x;
}

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

/* Steps of `work` that take about `ns` nanoseconds here. */
static long steps_for(double ns) {
    if (ns <= 0) return 0;
    enum { CALIBRATE = 10000000 };
    double t0 = now_ns();
    work(CALIBRATE);
    double per_step = (now_ns() - t0) / CALIBRATE;
    return (long)(ns / per_step + 0.5);
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    enum { BATCHES = 1000, ROUNDS = 1000 };
    int two = argc > 1 && argv[1][0] == '2';
    int work_ns = argc > 2 ? atoi(argv[2]) : 0;
    long steps = steps_for(work_ns);
    int pause = argc > 3 && strcmp(argv[3], "pause") == 0;
    int prefetch = argc > 3 && strcmp(argv[3], "prefetchw") == 0;
    int tight = argc > 3 && strcmp(argv[3], "tight") == 0;
    int fence = argc > 3 && strcmp(argv[3], "fence") == 0;
    _Atomic long *line = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (line == MAP_FAILED) return 1;
    /* The parent writes `line`, the child writes `back` (the same line unless `two`). */
    _Atomic long *back = two ? line + 8 : line;
    atomic_store(line, 0);
    atomic_store(back, 0);
    pid_t child = fork();
    if (child == 0) {
        pin(1);
        for (long v = 1; v < 2L * BATCHES * ROUNDS + 2; v += 2) {
            if (tight)
                while (atomic_load_explicit(line, memory_order_acquire) != v)
                    ;
            else if (fence)
                while (atomic_load_explicit(line, memory_order_acquire) != v)
                    LFENCE();
            else
                while (atomic_load_explicit(line, memory_order_acquire) != v)
                    if (pause) PAUSE();
            if (prefetch) PREFETCHW(back);
            work(steps);
            atomic_store_explicit(back, v + 1, memory_order_release);
        }
        _exit(0);
    }
    pin(0);
    static double ns[BATCHES];
    long v = 0;
    for (int b = 0; b < BATCHES; b++) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (int i = 0; i < ROUNDS; i++) {
            atomic_store_explicit(line, v + 1, memory_order_release);
            if (tight)
                while (atomic_load_explicit(back, memory_order_acquire) != v + 2)
                    ;
            else if (fence)
                while (atomic_load_explicit(back, memory_order_acquire) != v + 2)
                    LFENCE();
            else
                while (atomic_load_explicit(back, memory_order_acquire) != v + 2)
                    if (pause) PAUSE();
            if (prefetch) PREFETCHW(line);
            work(steps);
            v += 2;
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        ns[b] = ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / ROUNDS / 2.0;
    }
    atomic_store_explicit(line, v + 1, memory_order_release);
    waitpid(child, 0, 0);
    qsort(ns, BATCHES, sizeof ns[0], cmp);
    const char *name = two ? "cacheline2" : "cacheline";
    const char *how = pause      ? "_pause"
                      : prefetch ? "_prefetchw"
                      : tight    ? "_tight"
                      : fence    ? "_fence"
                                 : "";
    if (work_ns > 0)
        printf("%s_after_%d%s_ns %.1f\n", name, work_ns, how, ns[BATCHES / 2]);
    else
        printf("%s%s_ns %.1f\n", name, how, ns[BATCHES / 2]);
    return 0;
}
