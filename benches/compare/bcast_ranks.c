/* Each rank's mean time in MPI_Bcast, in a loop like OSU's osu_bcast (a broadcast
 * from rank 0, timed, then a barrier; a tenth as many untimed rounds first): where
 * the time OSU averages over the ranks goes. Built from the same source against
 * either library:
 *
 *   target/release/mpicc -O2 -o /tmp/bcast_ranks_abi benches/compare/bcast_ranks.c
 *   mpicc.openmpi -O2 -o /tmp/bcast_ranks_ompi benches/compare/bcast_ranks.c
 *   target/release/mpiexec -n 4 /tmp/bcast_ranks_abi BYTES [ROUNDS]
 *
 * Prints BYTES, then each rank's mean in microseconds, rank 0 (the root) first. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  long len = argc > 1 ? atol(argv[1]) : -1;
  int rounds = argc > 2 ? atoi(argv[2]) : 2000;
  if (len < 0 || len > 1 << 30 || rounds < 1) {
    if (rank == 0)
      fprintf(stderr, "usage: bcast_ranks BYTES [ROUNDS]\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  char *buf = malloc(len ? len : 1);
  double *all = malloc(sizeof(double) * size);
  if (!buf || !all)
    MPI_Abort(MPI_COMM_WORLD, 1);
  for (long i = 0; i < len; i++)
    buf[i] = (char)i;
  int skip = rounds / 10;
  double spent = 0;
  for (int i = 0; i < rounds + skip; i++) {
    double start = MPI_Wtime();
    MPI_Bcast(buf, (int)len, MPI_CHAR, 0, MPI_COMM_WORLD);
    double end = MPI_Wtime();
    if (i >= skip)
      spent += end - start;
    MPI_Barrier(MPI_COMM_WORLD);
  }
  double mine = spent / rounds * 1e6;
  MPI_Gather(&mine, 1, MPI_DOUBLE, all, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    printf("%ld", len);
    for (int r = 0; r < size; r++)
      printf(" %.2f", all[r]);
    printf("\n");
  }
  free(all);
  free(buf);
  MPI_Finalize();
  return 0;
}
