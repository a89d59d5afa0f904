/* What cross-memory attach moves between two processes pinned to cores 0 and 1, the
 * floor under `sm`'s large messages (src/msg/split.rs): a buffer of SIZE bytes copied
 * from the sender's memory into the receiver's, FRACTION of it read by the receiver
 * (process_vm_readv) while the sender writes the rest (process_vm_writev) at the same
 * time, both buffers reused every round (as OSU's benchmarks do). FRACTION 1: the
 * receiver alone (a single-copy get); 0.5: half each. With HUGE=1 in the environment
 * both buffers are aligned to 2 MiB and backed by transparent huge pages
 * (MADV_HUGEPAGE before they are touched; the sender's huge-page-backed memory is
 * printed, to show the pages were given).
 *
 *   gcc -O2 -o /tmp/cma_split benches/compare/cma_split.c
 *   [HUGE=1] /tmp/cma_split SIZE FRACTION      (prints GB/s)
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define ROUNDS 2000

/* What the two processes share: the round each has finished, and the buffers. */
struct shared {
    _Atomic long sender, receiver;
    char *src, *dst;
    pid_t sender_pid, receiver_pid;
};

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void pin(int core)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(core, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0)
        perror("sched_setaffinity");
}

/* Whether HUGE=1 asked for buffers of huge pages. */
static int huge;

/* A buffer of `size` bytes, of huge pages if asked, touched with `byte`. */
static char *buffer(size_t size, int byte)
{
    void *p;
    if (posix_memalign(&p, huge ? 2u << 20 : 4096, size) != 0)
        exit(1);
    if (huge && madvise(p, size, MADV_HUGEPAGE) != 0)
        perror("madvise");
    memset(p, byte, size);
    return p;
}

static void copy(pid_t peer, char *local, char *remote, size_t len, int read)
{
    struct iovec l = {local, len}, r = {remote, len};
    ssize_t n = read ? process_vm_readv(peer, &l, 1, &r, 1, 0)
                     : process_vm_writev(peer, &l, 1, &r, 1, 0);
    if (n != (ssize_t)len) {
        perror(read ? "process_vm_readv" : "process_vm_writev");
        exit(1);
    }
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s SIZE FRACTION\n", argv[0]);
        return 2;
    }
    size_t size = strtoul(argv[1], NULL, 0);
    double fraction = atof(argv[2]);
    if (size == 0 || fraction < 0 || fraction > 1) {
        fprintf(stderr, "SIZE > 0, 0 <= FRACTION <= 1\n");
        return 2;
    }
    size_t cut = (size_t)(size * fraction);
    struct shared *s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE,
                            MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (s == MAP_FAILED)
        return 1;
    huge = getenv("HUGE") && atoi(getenv("HUGE"));
    s->src = buffer(size, 1);
    if (huge)
        system("grep AnonHugePages /proc/$PPID/smaps_rollup");
    s->sender_pid = getpid();
    pid_t child = fork();
    if (child == 0) {
        pin(1);
        s->dst = buffer(size, 0);
        s->receiver_pid = getpid();
        atomic_store(&s->receiver, -1);
        while (atomic_load(&s->sender) != -1)
            ;
        for (long i = 1; i <= ROUNDS; i++) {
            while (atomic_load(&s->sender) < i)
                ;
            if (cut)
                copy(s->sender_pid, s->dst, s->src, cut, 1);
            atomic_store(&s->receiver, i);
        }
        exit(0);
    }
    pin(0);
    while (atomic_load(&s->receiver) != -1)
        ;
    atomic_store(&s->sender, -1);
    double start = now();
    for (long i = 1; i <= ROUNDS; i++) {
        atomic_store(&s->sender, i);
        if (size > cut)
            copy(s->receiver_pid, s->src + cut, s->dst + cut, size - cut, 0);
        while (atomic_load(&s->receiver) < i)
            ;
    }
    double t = now() - start;
    printf("%zu bytes, receiver reads %.2f: %.2f GB/s\n", size, fraction,
           (double)size * ROUNDS / t / 1e9);
    int status;
    waitpid(child, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
