/* The MPI side of benches/compare/compare.sh: the osu_latency, osu_bw, osu_bibw,
 * osu_put_latency and osu_get_latency loops on MPI, with the OSU defaults and output
 * (`# ` header lines, then `%-10d%20.2f` rows), so that any MPI can be measured
 * exactly as `osu` measures rbtl.
 *
 *   pingpong MODE [-m MIN] [-M MAX]     MODE: lat bw bibw put_lat get_lat
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LARGE 8192
#define WINDOW 64

static int rank;

static void loops(int latency, size_t size, int *iters, int *skip) {
    if (latency) {
        *iters = size > LARGE ? 1000 : 10000;
        *skip = size > LARGE ? 10 : 100;
    } else {
        *iters = size > LARGE ? 20 : 100;
        *skip = size > LARGE ? 2 : 10;
    }
}

static double lat(char *s, char *r, size_t n) {
    int iters, skip;
    double t0 = 0;
    loops(1, n, &iters, &skip);
    MPI_Barrier(MPI_COMM_WORLD);
    for (int i = 0; i < iters + skip; i++) {
        if (i == skip) t0 = MPI_Wtime();
        if (rank == 0) {
            MPI_Send(s, (int)n, MPI_CHAR, 1, 1, MPI_COMM_WORLD);
            MPI_Recv(r, (int)n, MPI_CHAR, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(r, (int)n, MPI_CHAR, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(s, (int)n, MPI_CHAR, 0, 1, MPI_COMM_WORLD);
        }
    }
    return (MPI_Wtime() - t0) * 1e6 / (2.0 * iters);
}

static double bw(char *s, char *r, size_t n, int both) {
    int iters, skip;
    MPI_Request req[2 * WINDOW];
    /* A status array, as OSU's osu_bw passes (MPICH's headers warn at MPI_STATUSES_IGNORE). */
    static MPI_Status status[2 * WINDOW];
    char ack[4] = {0};
    double t0 = 0;
    loops(0, n, &iters, &skip);
    MPI_Barrier(MPI_COMM_WORLD);
    for (int i = 0; i < iters + skip; i++) {
        if (i == skip) t0 = MPI_Wtime();
        if (both) {
            for (int w = 0; w < WINDOW; w++)
                MPI_Irecv(r, (int)n, MPI_CHAR, 1 - rank, 1, MPI_COMM_WORLD, &req[w]);
            for (int w = 0; w < WINDOW; w++)
                MPI_Isend(s, (int)n, MPI_CHAR, 1 - rank, 1, MPI_COMM_WORLD, &req[WINDOW + w]);
            MPI_Waitall(2 * WINDOW, req, status);
        } else if (rank == 0) {
            for (int w = 0; w < WINDOW; w++)
                MPI_Isend(s, (int)n, MPI_CHAR, 1, 1, MPI_COMM_WORLD, &req[w]);
            MPI_Waitall(WINDOW, req, status);
            MPI_Recv(ack, 4, MPI_CHAR, 1, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            for (int w = 0; w < WINDOW; w++)
                MPI_Irecv(r, (int)n, MPI_CHAR, 0, 1, MPI_COMM_WORLD, &req[w]);
            MPI_Waitall(WINDOW, req, status);
            MPI_Send(ack, 4, MPI_CHAR, 0, 2, MPI_COMM_WORLD);
        }
    }
    double t = MPI_Wtime() - t0;
    return (double)n * iters * WINDOW * (both ? 2 : 1) / t / 1e6;
}

static double rma_lat(char *s, char *r, size_t n, MPI_Win win, int put) {
    int iters, skip;
    double t0 = 0, us = 0;
    loops(1, n, &iters, &skip);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        MPI_Win_lock(MPI_LOCK_SHARED, 1, 0, win);
        for (int i = 0; i < iters + skip; i++) {
            if (i == skip) t0 = MPI_Wtime();
            if (put)
                MPI_Put(s, (int)n, MPI_CHAR, 1, 0, (int)n, MPI_CHAR, win);
            else
                MPI_Get(r, (int)n, MPI_CHAR, 1, 0, (int)n, MPI_CHAR, win);
            MPI_Win_flush(1, win);
        }
        us = (MPI_Wtime() - t0) * 1e6 / iters;
        MPI_Win_unlock(1, win);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    return us;
}

int main(int argc, char **argv) {
    size_t min = 0, max = 4u << 20;
    const char *mode = argc > 1 ? argv[1] : "lat";
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-m")) min = strtoul(argv[i + 1], 0, 10);
        if (!strcmp(argv[i], "-M")) max = strtoul(argv[i + 1], 0, 10);
    }
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int latency = !strcmp(mode, "lat") || !strcmp(mode, "put_lat") || !strcmp(mode, "get_lat");
    int rma = !strncmp(mode, "put", 3) || !strncmp(mode, "get", 3);
    char *s = NULL, *r = NULL, *base = NULL;
    MPI_Win win = MPI_WIN_NULL;
    if (posix_memalign((void **)&s, 4096, max + 1) || posix_memalign((void **)&r, 4096, max + 1)) return 1;
    memset(s, 'a', max + 1);
    memset(r, 'b', max + 1);
    if (rma) MPI_Win_allocate((MPI_Aint)max + 1, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    if (rank == 0)
        printf("# MPI %s\n# Size%24s\n", mode, latency ? "Latency (us)" : "Bandwidth (MB/s)");
    if (min == 0 && !latency) min = 1;
    for (size_t n = min; n <= max; n = n ? n * 2 : 1) {
        double v;
        if (!strcmp(mode, "lat")) v = lat(s, r, n);
        else if (!strcmp(mode, "bw")) v = bw(s, r, n, 0);
        else if (!strcmp(mode, "bibw")) v = bw(s, r, n, 1);
        else v = rma_lat(s, r, n, win, !strcmp(mode, "put_lat"));
        if (rank == 0) {
            /* Latencies with 4 decimals: at 0.1 us, 2 would round ratios by up to 10%. */
            printf(latency ? "%-10zu%20.4f\n" : "%-10zu%20.2f\n", n, v);
            fflush(stdout);
        }
    }
    if (rma) MPI_Win_free(&win);
    free(s);
    free(r);
    MPI_Finalize();
    return 0;
}
