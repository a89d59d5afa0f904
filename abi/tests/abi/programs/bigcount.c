/* bigcount.c: counts beyond int in the large-count forms (MPI_X_c), at 1 and 2
 * ranks. A contiguous type of 20 million ints (one run of bytes); MPI_Pack_size_c,
 * MPI_Status_set_elements_c, MPI_Get_count_c and MPI_Get_elements_c of 2^31 + 7
 * bytes (MPI_Get_count then MPI_UNDEFINED); between two ranks, 2^31 + 7 bytes each
 * way by MPI_Send_c / MPI_Recv_c, MPI_Isend_c / MPI_Irecv_c and MPI_Bcast_c /
 * MPI_Ibcast_c, and reduced by MPI_Allreduce_c (in pieces), sampled bytes checked
 * and the receive's count read back. */
#include "check.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const MPI_Count N = ((MPI_Count)1 << 31) + 7;

/* Byte i of the message with `salt`: a byte of a word that mixes the word's index
 * (a message moved by any number of bytes shows). */
static uint64_t word(MPI_Count k, int salt) {
  return ((uint64_t)k * 0x9E3779B97F4A7C15u) ^ (uint64_t)salt;
}

static unsigned char at(MPI_Count i, int salt) {
  return (unsigned char)(word(i / 8, salt) >> (8 * (i % 8)));
}

static void fill(unsigned char *b, int salt) {
  for (MPI_Count k = 0; k < N / 8; k++) {
    uint64_t w = word(k, salt);
    memcpy(b + 8 * k, &w, 8);
  }
  for (MPI_Count i = N / 8 * 8; i < N; i++)
    b[i] = at(i, salt);
}

/* Every 4093rd byte and the last ones hold what `salt` put there. */
static void check_bytes(const unsigned char *b, int salt, const char *what) {
  for (MPI_Count i = 0; i < N; i += (i + 16 < N ? 4093 : 1))
    CHECK(b[i] == at(i, salt), "%s: byte %lld is %d, not %d", what, (long long)i, b[i],
          at(i, salt));
}

static void check_count(const MPI_Status *st, const char *what) {
  MPI_Count n = -1;
  OK(MPI_Get_count_c(st, MPI_BYTE, &n));
  CHECK(n == N, "%s: MPI_Get_count_c says %lld", what, (long long)n);
}

static void local(void) {
  MPI_Datatype t;
  OK(MPI_Type_contiguous(20000000, MPI_INT, &t));
  OK(MPI_Type_commit(&t));
  MPI_Count sz = -1;
  OK(MPI_Type_size_c(t, &sz));
  CHECK(sz == 80000000, "20 million ints: size %lld", (long long)sz);
  OK(MPI_Type_free(&t));
  MPI_Count packed = -1;
  OK(MPI_Pack_size_c(N, MPI_BYTE, MPI_COMM_WORLD, &packed));
  CHECK(packed >= N, "MPI_Pack_size_c: %lld", (long long)packed);
  MPI_Status st;
  OK(MPI_Status_set_elements_c(&st, MPI_BYTE, N));
  check_count(&st, "MPI_Status_set_elements_c");
  MPI_Count n = -1;
  OK(MPI_Get_elements_c(&st, MPI_BYTE, &n));
  CHECK(n == N, "MPI_Get_elements_c: %lld", (long long)n);
  int small = 0;
  OK(MPI_Get_count(&st, MPI_BYTE, &small));
  CHECK(small == MPI_UNDEFINED, "MPI_Get_count beyond int: %d", small);
}

static void between_two(MPI_Comm pair, int me) {
  unsigned char *b = malloc((size_t)N);
  CHECK(b != NULL, "no memory for %lld bytes", (long long)N);
  MPI_Status st;
  MPI_Request r;
  if (me == 0) {
    fill(b, 1);
    OK(MPI_Send_c(b, N, MPI_BYTE, 1, 1, pair));
    OK(MPI_Irecv_c(b, N, MPI_BYTE, 1, 2, pair, &r));
    OK(MPI_Wait(&r, &st));
    check_bytes(b, 2, "MPI_Irecv_c");
    check_count(&st, "MPI_Irecv_c");
    fill(b, 3);
  } else {
    OK(MPI_Recv_c(b, N, MPI_BYTE, 0, 1, pair, &st));
    check_bytes(b, 1, "MPI_Recv_c");
    check_count(&st, "MPI_Recv_c");
    fill(b, 2);
    OK(MPI_Isend_c(b, N, MPI_BYTE, 0, 2, pair, &r));
    OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
  }
  OK(MPI_Bcast_c(b, N, MPI_BYTE, 0, pair));
  check_bytes(b, 3, "MPI_Bcast_c");
  if (me == 1)
    fill(b, 4);
  OK(MPI_Ibcast_c(b, N, MPI_BYTE, 1, pair, &r));
  OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
  check_bytes(b, 4, "MPI_Ibcast_c");
  /* Reduced in pieces: rank 1's bytes XOR rank 0's zeros. */
  if (me == 0)
    memset(b, 0, (size_t)N);
  else
    fill(b, 5);
  OK(MPI_Allreduce_c(MPI_IN_PLACE, b, N, MPI_BYTE, MPI_BXOR, pair));
  check_bytes(b, 5, "MPI_Allreduce_c");
  free(b);
}

int main(int argc, char **argv) {
  start("bigcount", &argc, &argv);
  local();
  MPI_Comm pair;
  OK(MPI_Comm_split(MPI_COMM_WORLD, rank < 2 ? 0 : MPI_UNDEFINED, rank, &pair));
  if (size >= 2 && rank < 2)
    between_two(pair, rank);
  if (pair != MPI_COMM_NULL)
    OK(MPI_Comm_free(&pair));
  return finish();
}
