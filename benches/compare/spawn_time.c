/* spawn_time.c: the time of MPI_Comm_spawn as a program sees it. The parents spawn
 * CHILDREN copies of this program, meet them in a barrier over the
 * intercommunicator and disconnect, ROUNDS times; rank 0 prints each round's time
 * (from a barrier of the parents to the disconnect's end) in milliseconds.
 *
 *   spawn_time [ROUNDS [CHILDREN]]     (defaults 10 and 2)
 *
 * Plain MPI: built against any MPI library (benches/compare/spawn.sh). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm parent;
  MPI_Comm_get_parent(&parent);
  if (parent != MPI_COMM_NULL) {
    MPI_Barrier(parent);
    MPI_Comm_disconnect(&parent);
    MPI_Finalize();
    return 0;
  }
  int rounds = argc > 1 ? atoi(argv[1]) : 10, children = argc > 2 ? atoi(argv[2]) : 2, rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  char *args[] = {"child", NULL};
  for (int r = 0; r < rounds; r++) {
    MPI_Comm inter;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    MPI_Comm_spawn(argv[0], args, children, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &inter,
                   MPI_ERRCODES_IGNORE);
    MPI_Barrier(inter);
    MPI_Comm_disconnect(&inter);
    double t = MPI_Wtime() - t0;
    if (rank == 0)
      printf("%d %.3f\n", r, 1e3 * t);
  }
  MPI_Finalize();
  return 0;
}
