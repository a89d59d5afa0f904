/* One long accumulate of ints and its flush under MPI_Win_lock_all, timed over many
 * iterations with one clock read at each end: the microseconds per accumulate of any
 * MPI, the same source built with each one's mpicc. Rank 0 works on TARGET's window
 * (MPI_Win_allocate, COUNT ints); the other ranks only wait. Under a shared epoch, as
 * here, other processes' accumulates may reach the same elements at any time, so each
 * element must change atomically (MPICH's rma_contig times the same under each lock).
 *
 *   rma_long OP TARGET [COUNT [ITERATIONS]]
 *     OP: replace (MPI_Accumulate, MPI_REPLACE), bxor (MPI_Accumulate, MPI_BXOR),
 *         sum (MPI_Accumulate, MPI_SUM), noop (MPI_Get_accumulate, MPI_NO_OP),
 *         fetch (MPI_Get_accumulate, MPI_SUM)
 *     COUNT: ints (default 524288, 2 MiB); ITERATIONS (default 200)
 *
 * For example, on one node:
 *   target/release/mpicc -O2 benches/compare/rma_long.c -o /tmp/long_abi
 *   mpicc.openmpi -O2 benches/compare/rma_long.c -o /tmp/long_ompi
 *   target/release/mpiexec -n 2 --bind-to core /tmp/long_abi replace 1
 *   mpirun.openmpi -np 2 --bind-to core --mca pml ob1 --mca btl self,vader /tmp/long_ompi replace 1
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WARMUP 10

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *ops[] = {"replace", "bxor", "sum", "noop", "fetch"};
    MPI_Op mpi_ops[] = {MPI_REPLACE, MPI_BXOR, MPI_SUM, MPI_NO_OP, MPI_SUM};
    int which = -1;
    for (int i = 0; argc > 1 && i < 5; i++)
        if (!strcmp(argv[1], ops[i]))
            which = i;
    int target = argc > 2 ? atoi(argv[2]) : -1;
    int count = argc > 3 ? atoi(argv[3]) : 524288;
    long n = argc > 4 ? atol(argv[4]) : 200;
    if (which < 0 || target < 0 || target >= size || count < 1 || n < 1) {
        if (rank == 0)
            fprintf(stderr, "usage: rma_long replace|bxor|sum|noop|fetch TARGET [COUNT "
                            "[ITERATIONS]], TARGET a rank\n");
        MPI_Finalize();
        return 2;
    }
    int *base, *origin = malloc(count * sizeof(int)), *result = malloc(count * sizeof(int));
    for (int i = 0; i < count; i++)
        origin[i] = i;
    MPI_Win win;
    MPI_Win_allocate(count * sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &base,
                     &win);
    memset(base, 0, count * sizeof(int));
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        MPI_Win_lock_all(0, win);
        double t0 = 0;
        for (long i = 0; i < n + WARMUP; i++) {
            if (i == WARMUP)
                t0 = now_us();
            if (which >= 3)
                MPI_Get_accumulate(origin, count, MPI_INT, result, count, MPI_INT, target, 0,
                                   count, MPI_INT, mpi_ops[which], win);
            else
                MPI_Accumulate(origin, count, MPI_INT, target, 0, count, MPI_INT,
                               mpi_ops[which], win);
            MPI_Win_flush(target, win);
        }
        printf("%s of %d ints to rank %d: %.1f us\n", ops[which], count, target,
               (now_us() - t0) / n);
        MPI_Win_unlock_all(win);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Win_free(&win);
    free(origin);
    free(result);
    MPI_Finalize();
    return 0;
}
