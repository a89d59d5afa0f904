/* The MPI side of `osu init` (benches/compare/nodes.sh): from the start of main until
 * this rank has exchanged one message with every other rank -- MPI_Init, then a first
 * alltoall done as one message to and from every rank (MPI_Isend/MPI_Irecv), which is
 * when a lazily connecting transport (Open MPI's tcp) connects every pair -- and what
 * each process holds afterwards: the TCP connections it opened since main began and its
 * file descriptors. Rank 0 prints the lines `osu init` prints.
 *
 *   init
 */
#include <dirent.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_FDS 4096

struct snapshot {
    int nfds;
    int fds[MAX_FDS];
    unsigned long sockets[MAX_FDS]; /* the socket inode of each descriptor, or 0 */
};

static void take(struct snapshot *s) {
    char path[64], target[128];
    s->nfds = 0;
    DIR *d = opendir("/proc/self/fd");
    if (!d) return;
    int own = dirfd(d);
    struct dirent *e;
    while ((e = readdir(d)) && s->nfds < MAX_FDS) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
        int fd = atoi(e->d_name);
        if (fd == own) continue;
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
        ssize_t n = readlink(path, target, sizeof target - 1);
        unsigned long inode = 0;
        if (n > 0) {
            target[n] = 0;
            sscanf(target, "socket:[%lu]", &inode);
        }
        s->fds[s->nfds] = fd;
        s->sockets[s->nfds] = inode;
        s->nfds++;
    }
    closedir(d);
}

static int has_socket(const struct snapshot *s, unsigned long inode) {
    for (int i = 0; i < s->nfds; i++)
        if (s->sockets[i] == inode) return 1;
    return 0;
}

static int has_fd(const struct snapshot *s, int fd) {
    for (int i = 0; i < s->nfds; i++)
        if (s->fds[i] == fd) return 1;
    return 0;
}

/* Established TCP connections (state 01) among `now`'s sockets that `before` lacks. */
static int tcp_opened(const struct snapshot *before, const struct snapshot *now) {
    const char *tables[] = {"/proc/self/net/tcp", "/proc/self/net/tcp6"};
    int count = 0;
    char line[512];
    for (int t = 0; t < 2; t++) {
        FILE *f = fopen(tables[t], "r");
        if (!f) continue;
        if (!fgets(line, sizeof line, f)) { fclose(f); continue; }
        while (fgets(line, sizeof line, f)) {
            char st[8];
            unsigned long inode;
            if (sscanf(line, "%*s %*s %*s %7s %*s %*s %*s %*s %*s %lu", st, &inode) != 2) continue;
            if (strcmp(st, "01") == 0 && has_socket(now, inode) && !has_socket(before, inode)) count++;
        }
        fclose(f);
    }
    return count;
}

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static struct snapshot before, after;

int main(int argc, char **argv) {
    /* The snapshot is the measurement's, not the wire-up's: the clock starts after it. */
    take(&before);
    double start = now_ms();
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int *in = calloc(size, sizeof *in);
    MPI_Request *reqs = calloc(2 * size, sizeof *reqs);
    int n = 0;
    for (int p = 0; p < size; p++)
        if (p != rank) MPI_Irecv(&in[p], 1, MPI_INT, p, 4, MPI_COMM_WORLD, &reqs[n++]);
    for (int k = 1; k < size; k++)
        MPI_Isend(&rank, 1, MPI_INT, (rank + k) % size, 4, MPI_COMM_WORLD, &reqs[n++]);
    MPI_Waitall(n, reqs, MPI_STATUSES_IGNORE);
    double ms = now_ms() - start;
    for (int p = 0; p < size; p++)
        if (p != rank && in[p] != p) {
            fprintf(stderr, "rank %d sent %d instead of its rank\n", p, in[p]);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    take(&after);
    int opened = 0;
    for (int i = 0; i < after.nfds; i++) opened += !has_fd(&before, after.fds[i]);
    double mine[4] = {ms, tcp_opened(&before, &after), after.nfds, opened};
    char host[MPI_MAX_PROCESSOR_NAME] = {0};
    int len;
    MPI_Get_processor_name(host, &len);
    double *all = rank == 0 ? calloc(4 * size, sizeof *all) : NULL;
    char *hosts = rank == 0 ? calloc(size, MPI_MAX_PROCESSOR_NAME) : NULL;
    MPI_Gather(mine, 4, MPI_DOUBLE, all, 4, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    MPI_Gather(host, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, hosts, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 0,
               MPI_COMM_WORLD);
    if (rank == 0) {
        double min[4], max[4], sum[4];
        for (int j = 0; j < 4; j++) min[j] = 1e300, max[j] = -1e300, sum[j] = 0;
        for (int r = 0; r < size; r++)
            for (int j = 0; j < 4; j++) {
                double v = all[4 * r + j];
                if (v < min[j]) min[j] = v;
                if (v > max[j]) max[j] = v;
                sum[j] += v;
            }
        int nodes = 0;
        for (int r = 0; r < size; r++) {
            int seen = 0;
            for (int q = 0; q < r; q++)
                seen |= !strcmp(hosts + r * MPI_MAX_PROCESSOR_NAME, hosts + q * MPI_MAX_PROCESSOR_NAME);
            nodes += !seen;
        }
        printf("# MPI Init Test: from the start of each process until it has exchanged a message "
               "with every other rank\n");
        printf("nprocs: %d, nodes: %d, min: %.2f ms, max: %.2f ms, avg: %.2f ms\n", size, nodes,
               min[0], max[0], sum[0] / size);
        printf("tcp connections opened per process: min %.0f, max %.0f, avg %.2f\n", min[1], max[1],
               sum[1] / size);
        printf("file descriptors per process: min %.0f, max %.0f, avg %.2f (opened: min %.0f, "
               "max %.0f, avg %.2f)\n",
               min[2], max[2], sum[2] / size, min[3], max[3], sum[3] / size);
    }
    MPI_Finalize();
    return 0;
}
