/* progress.c: work that needs a rank advances while that rank computes, with the
 * library's progress thread on (RBTL_MSG_PROGRESS_THREAD, microseconds; run at 2 and
 * 3 ranks). Every rank but 0 opens its window and posts a receive, then makes no MPI
 * call until what it waits for lies in its memory (20 s at most, then it fails):
 * rank 0 locks each such rank's window (its lock word: a transport atomic where the
 * window's control block is not mapped here), accumulates doubles into it (no
 * transport atomic adds doubles: the accumulate is shipped to the target, whose
 * process applies it) and unlocks, which waits for the target's answer; then sends
 * each a message of 4 MiB (a rendezvous, which the receiver's process answers).
 * Without the thread, each would wait for the other forever: the computing rank
 * fails. */
#include "check.h"
#include <time.h>

enum { DOUBLES = 4, BIG = 4 << 20 };

static double seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

/* Spin without calling MPI until *at is `want` (20 s at most): whether it came. */
static int computed_until(volatile const unsigned char *at, unsigned char want) {
  double end = seconds() + 20.0;
  while (*at != want)
    if (seconds() > end)
      return 0;
  return 1;
}

int main(int argc, char **argv) {
  start("progress", &argc, &argv);
  CHECK(size >= 2, "progress runs at 2 ranks or more");
  double mem[DOUBLES] = {0};
  MPI_Win win;
  OK(MPI_Win_create(mem, sizeof mem, sizeof(double), MPI_INFO_NULL, MPI_COMM_WORLD, &win));
  unsigned char *big = calloc(BIG, 1);
  CHECK(big != NULL, "no memory for the message");
  MPI_Request recv = MPI_REQUEST_NULL;
  if (rank != 0)
    OK(MPI_Irecv(big, BIG, MPI_BYTE, 0, 7, MPI_COMM_WORLD, &recv));
  OK(MPI_Barrier(MPI_COMM_WORLD));
  if (rank == 0) {
    double add[DOUBLES] = {1.0, 2.0, 3.0, 64.0};
    for (int r = 1; r < size; r++) {
      OK(MPI_Win_lock(MPI_LOCK_SHARED, r, 0, win));
      OK(MPI_Accumulate(add, DOUBLES, MPI_DOUBLE, r, 0, DOUBLES, MPI_DOUBLE, MPI_SUM, win));
      OK(MPI_Win_unlock(r, win));
    }
    memset(big, 0xab, BIG);
    for (int r = 1; r < size; r++)
      OK(MPI_Send(big, BIG, MPI_BYTE, r, 7, MPI_COMM_WORLD));
  } else {
    /* The last double's top byte (64.0 is 0x4050000000000000 in IEEE 754). */
    volatile unsigned char *last = (volatile unsigned char *)&mem[DOUBLES - 1];
    int top = (*(const unsigned char *)&(uint16_t){1}) ? (int)sizeof(double) - 1 : 0;
    CHECK(computed_until(last + top, 0x40),
          "the accumulate was not applied while this rank made no MPI call");
    CHECK(computed_until(big + BIG - 1, 0xab),
          "the message was not received while this rank made no MPI call");
    MPI_Status st;
    OK(MPI_Wait(&recv, &st));
    CHECK(big[0] == 0xab && big[BIG / 2] == 0xab, "the message came wrong");
    OK(MPI_Win_lock(MPI_LOCK_SHARED, rank, 0, win));
    CHECK(mem[0] == 1.0 && mem[1] == 2.0 && mem[2] == 3.0 && mem[3] == 64.0,
          "the window holds %g %g %g %g", mem[0], mem[1], mem[2], mem[3]);
    OK(MPI_Win_unlock(rank, win));
  }
  OK(MPI_Win_free(&win));
  free(big);
  return finish();
}
