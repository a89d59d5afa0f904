/* What a library's copy between two of the program's buffers costs, by where the
 * buffers lie: MPI_Allgather on MPI_COMM_SELF (nothing but the copy of this member's
 * block) of BYTES, the send buffer at byte SRC of a page and the receive buffer at
 * byte DST of another, beside the C library's memcpy of the same. Where the two
 * offsets differ within a cache line, glibc's `rep movsb` (its copy from about 2 KiB)
 * runs many times slower on some AMD processors. Built from the same source against
 * either library:
 *
 *   target/release/mpicc -O2 -o /tmp/offset_copy_abi benches/compare/offset_copy.c
 *   mpicc.openmpi -O2 -o /tmp/offset_copy_ompi benches/compare/offset_copy.c
 *   target/release/mpiexec -n 1 /tmp/offset_copy_abi BYTES SRC DST [ROUNDS]
 *
 * Prints BYTES SRC DST, then the mean microseconds of MPI_Allgather and of memcpy. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PAGE 4096

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  long len = argc > 3 ? atol(argv[1]) : -1;
  long src = argc > 3 ? atol(argv[2]) : -1, dst = argc > 3 ? atol(argv[3]) : -1;
  int rounds = argc > 4 ? atoi(argv[4]) : 20000;
  if (len < 1 || len > 1 << 28 || src < 0 || src >= PAGE || dst < 0 || dst >= PAGE ||
      rounds < 1) {
    fprintf(stderr, "usage: offset_copy BYTES SRC DST [ROUNDS] (offsets below %d)\n", PAGE);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  char *a = aligned_alloc(PAGE, len + PAGE), *b = aligned_alloc(PAGE, len + PAGE);
  if (!a || !b)
    MPI_Abort(MPI_COMM_WORLD, 1);
  memset(a, 1, len + PAGE);
  memset(b, 2, len + PAGE);
  char *from = a + src, *to = b + dst;
  for (int i = 0; i < rounds / 10; i++)
    MPI_Allgather(from, len, MPI_BYTE, to, len, MPI_BYTE, MPI_COMM_SELF);
  double t = MPI_Wtime();
  for (int i = 0; i < rounds; i++)
    MPI_Allgather(from, len, MPI_BYTE, to, len, MPI_BYTE, MPI_COMM_SELF);
  double lib = (MPI_Wtime() - t) / rounds * 1e6;
  t = MPI_Wtime();
  for (int i = 0; i < rounds; i++) {
    memcpy(to, from, len);
    __asm__ volatile("" ::: "memory");
  }
  double libc = (MPI_Wtime() - t) / rounds * 1e6;
  printf("%ld %ld %ld %.3f %.3f\n", len, src, dst, lib, libc);
  free(a);
  free(b);
  MPI_Finalize();
  return 0;
}
