/* One one-sided operation and its flush, timed over many iterations with one clock
 * read at each end (OSU's one-sided latency tests read MPI_Wtime twice an iteration,
 * which costs about as much as the operation on one node and rounds to 10 ns): the
 * nanoseconds per operation of any MPI, the same source built with each one's mpicc.
 * Rank 0 works on rank 1's window (MPI_Win_allocate, a shared lock held), MPI_CHAR
 * elements as OSU's defaults; the other ranks only wait.
 *
 *   rma_ops OP [ITERATIONS]     OP: put get acc fop cas (8 bytes; fop and cas 1)
 *
 * For example, on one node:
 *   target/release/mpicc -O2 benches/compare/rma_ops.c -o /tmp/rma_abi
 *   mpicc.openmpi -O2 benches/compare/rma_ops.c -o /tmp/rma_ompi
 *   target/release/mpiexec -n 2 --bind-to core /tmp/rma_abi acc
 *   mpirun.openmpi -np 2 --bind-to core --mca pml ob1 --mca btl self,vader /tmp/rma_ompi acc
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WARMUP 20000

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    const char *op = argc > 1 ? argv[1] : "put";
    long n = argc > 2 ? atol(argv[2]) : 2000000;
    if (strcmp(op, "put") && strcmp(op, "get") && strcmp(op, "acc") && strcmp(op, "fop") &&
        strcmp(op, "cas")) {
        if (rank == 0)
            fprintf(stderr, "rma_ops: unknown operation %s (put get acc fop cas)\n", op);
        MPI_Finalize();
        return 2;
    }
    char *base;
    MPI_Win win;
    MPI_Win_allocate(4096, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    memset(base, 0, 4096);
    MPI_Barrier(MPI_COMM_WORLD);
    char s[8] = {1, 1, 1, 1, 1, 1, 1, 1}, r[8], c[8] = {0};
    if (rank == 0) {
        MPI_Win_lock(MPI_LOCK_SHARED, 1, 0, win);
        double t0 = 0;
        for (long i = 0; i < n + WARMUP; i++) {
            if (i == WARMUP)
                t0 = now_ns();
            if (!strcmp(op, "put"))
                MPI_Put(s, 8, MPI_CHAR, 1, 0, 8, MPI_CHAR, win);
            else if (!strcmp(op, "get"))
                MPI_Get(r, 8, MPI_CHAR, 1, 0, 8, MPI_CHAR, win);
            else if (!strcmp(op, "acc"))
                MPI_Accumulate(s, 8, MPI_CHAR, 1, 0, 8, MPI_CHAR, MPI_SUM, win);
            else if (!strcmp(op, "fop"))
                MPI_Fetch_and_op(s, r, MPI_CHAR, 1, 0, MPI_SUM, win);
            else
                MPI_Compare_and_swap(s, c, r, MPI_CHAR, 1, 0, win);
            MPI_Win_flush(1, win);
        }
        printf("%s %.1f ns\n", op, (now_ns() - t0) / n);
        MPI_Win_unlock(1, win);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Win_free(&win);
    MPI_Finalize();
    return 0;
}
