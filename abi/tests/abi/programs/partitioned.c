/* partitioned.c: partitioned communication around the ring (run at 1 to 3 ranks):
 * each rank sends to the next and receives from the one before.
 *
 * - rounds of one pair of requests: nothing arrived (MPI_Parrived) and the send
 *   not done (MPI_Test) before the partitions are ready; partitions marked ready
 *   one by one in reverse order, by range and by list; every element received;
 *   the same requests started again with new data;
 * - the receiver's partitions cut differently from the sender's;
 * - a strided datatype, freed before the start (the requests keep it; its data in
 *   the buffer once MPI_Parrived says so), and so for plain persistent requests
 *   (MPI_Send_init, MPI_Recv_init);
 * - a wildcard receive (MPI_ANY_SOURCE, MPI_ANY_TAG) posted on the same
 *   communicator does not take a partitioned message;
 * - two pairs of one tag pair in the order of their inits, whatever the order of
 *   their partitions and starts; a send of no partitions leaves at its start;
 * - MPI_PROC_NULL: both sides complete at once;
 * - errors: a partition ready twice, out of range, before the start; MPI_Parrived
 *   on a send; wildcards and no partitions refused; a start while active. */
#include "check.h"

enum { P = 4, K = 1000 };

static int next(void) { return (rank + 1) % size; }
static int prev(void) { return (rank + size - 1) % size; }

/* What rank r sends as element i in round n. */
static int value(int r, int i, int n) { return r * 1000000 + n * 10000 + i; }

static void fill(int *out, int n) {
  for (int i = 0; i < P * K; i++)
    out[i] = value(rank, i, n);
}

static void check_received(const int *in, int n, const char *what) {
  for (int i = 0; i < P * K; i++)
    CHECK(in[i] == value(prev(), i, n), "%s round %d: element %d is %d, not %d", what, n, i,
          in[i], value(prev(), i, n));
}

/* Wait until partition p of `recv` has arrived (MPI_Parrived progresses). */
static void until_arrived(MPI_Request recv, int p) {
  int flag = 0;
  while (!flag)
    OK(MPI_Parrived(recv, p, &flag));
}

static void test_rounds(void) {
  int *out = malloc(P * K * sizeof(int)), *in = malloc(P * K * sizeof(int));
  CHECK(out && in, "out of memory");
  MPI_Request r[2];
  OK(MPI_Psend_init(out, P, K, MPI_INT, next(), 5, MPI_COMM_WORLD, MPI_INFO_NULL, &r[0]));
  OK(MPI_Precv_init(in, P, K, MPI_INT, prev(), 5, MPI_COMM_WORLD, MPI_INFO_NULL, &r[1]));
  for (int n = 0; n < 3; n++) {
    memset(in, 0xff, P * K * sizeof(int));
    OK(MPI_Startall(2, r));
    int flag = -1;
    OK(MPI_Parrived(r[1], 0, &flag));
    CHECK(flag == 0, "round %d: a partition arrived before any was ready", n);
    OK(MPI_Test(&r[0], &flag, MPI_STATUS_IGNORE));
    CHECK(flag == 0, "round %d: the send is done before its partitions are ready", n);
    OK(MPI_Barrier(MPI_COMM_WORLD)); /* every rank has looked */
    fill(out, n);
    if (n == 0) {
      for (int p = P - 1; p >= 0; p--)
        OK(MPI_Pready(p, r[0]));
    } else if (n == 1) {
      OK(MPI_Pready_range(0, P - 1, r[0]));
    } else {
      int list[P] = {2, 0, 3, 1};
      OK(MPI_Pready_list(P, list, r[0]));
    }
    until_arrived(r[1], P - 1);
    MPI_Status st[2];
    OK(MPI_Waitall(2, r, st));
    CHECK(st[1].MPI_SOURCE == prev() && st[1].MPI_TAG == 5, "round %d: source %d tag %d", n,
          st[1].MPI_SOURCE, st[1].MPI_TAG);
    check_received(in, n, "rounds");
  }
  OK(MPI_Request_free(&r[0]));
  OK(MPI_Request_free(&r[1]));
  free(out);
  free(in);
}

/* The receiver in 8 partitions of K / 2; the sender as before. A wildcard receive
 * posted first must not take the partitioned message. */
static void test_cut_differently(void) {
  int *out = malloc(P * K * sizeof(int)), *in = malloc(P * K * sizeof(int));
  CHECK(out && in, "out of memory");
  int stray = -1, marker = 77;
  MPI_Request wild, r[2];
  OK(MPI_Irecv(&stray, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &wild));
  OK(MPI_Psend_init(out, P, K, MPI_INT, next(), 6, MPI_COMM_WORLD, MPI_INFO_NULL, &r[0]));
  OK(MPI_Precv_init(in, 2 * P, K / 2, MPI_INT, prev(), 6, MPI_COMM_WORLD, MPI_INFO_NULL,
                    &r[1]));
  OK(MPI_Startall(2, r));
  fill(out, 7);
  OK(MPI_Pready_range(0, P - 1, r[0]));
  until_arrived(r[1], 2 * P - 1);
  OK(MPI_Waitall(2, r, MPI_STATUSES_IGNORE));
  check_received(in, 7, "cut differently");
  int flag = -1;
  OK(MPI_Test(&wild, &flag, MPI_STATUS_IGNORE));
  CHECK(flag == 0, "the wildcard receive took a partitioned message (%d)", stray);
  OK(MPI_Barrier(MPI_COMM_WORLD));
  OK(MPI_Send(&marker, 1, MPI_INT, next(), 9, MPI_COMM_WORLD));
  MPI_Status st;
  OK(MPI_Wait(&wild, &st));
  CHECK(stray == 77 && st.MPI_TAG == 9, "the wildcard receive got %d tag %d", stray, st.MPI_TAG);
  OK(MPI_Request_free(&r[0]));
  OK(MPI_Request_free(&r[1]));
  free(out);
  free(in);
}

/* Partitions of one strided int each (every other int of the buffer). */
static void test_strided(void) {
  int out[2 * P], in[2 * P];
  for (int i = 0; i < 2 * P; i++) {
    out[i] = i % 2 ? -1 : value(rank, i, 9);
    in[i] = -2;
  }
  MPI_Datatype every_other;
  OK(MPI_Type_create_resized(MPI_INT, 0, 2 * sizeof(int), &every_other));
  OK(MPI_Type_commit(&every_other));
  MPI_Request r[4];
  OK(MPI_Psend_init(out, P, 1, every_other, next(), 7, MPI_COMM_WORLD, MPI_INFO_NULL, &r[0]));
  OK(MPI_Precv_init(in, P, 1, every_other, prev(), 7, MPI_COMM_WORLD, MPI_INFO_NULL, &r[1]));
  OK(MPI_Send_init(out, P, every_other, next(), 8, MPI_COMM_WORLD, &r[2]));
  OK(MPI_Recv_init(in, P, every_other, prev(), 8, MPI_COMM_WORLD, &r[3]));
  OK(MPI_Type_free(&every_other)); /* the requests keep it */
  for (int round = 0; round < 2; round++) {
    for (int i = 0; i < 2 * P; i++)
      in[i] = -2;
    int pair = 2 * round; /* partitioned, then plain persistent */
    OK(MPI_Startall(2, &r[pair]));
    if (round == 0) {
      OK(MPI_Pready_range(0, P - 1, r[0]));
      /* Arrived means in the buffer, before any completion call. */
      until_arrived(r[1], P - 1);
      for (int i = 0; i < 2 * P; i += 2)
        CHECK(in[i] == value(prev(), i, 9), "strided, arrived: element %d is %d", i, in[i]);
    }
    OK(MPI_Waitall(2, &r[pair], MPI_STATUSES_IGNORE));
    for (int i = 0; i < 2 * P; i++)
      CHECK(in[i] == (i % 2 ? -2 : value(prev(), i, 9)), "strided, round %d: element %d is %d",
            round, i, in[i]);
  }
  for (int i = 0; i < 4; i++)
    OK(MPI_Request_free(&r[i]));
}

/* Pairs A and B of one tag: the sender readies B first while only A's receive is
 * started; A's data must still land in A's receive. Then pairs of no partitions. */
static void test_init_order(void) {
  int a_out[P], b_out[P], a_in[P], b_in[P];
  for (int i = 0; i < P; i++) {
    a_out[i] = value(rank, i, 20);
    b_out[i] = value(rank, i, 21);
    a_in[i] = b_in[i] = -1;
  }
  MPI_Request a, b, a_r, b_r;
  OK(MPI_Psend_init(a_out, P, 1, MPI_INT, next(), 10, MPI_COMM_WORLD, MPI_INFO_NULL, &a));
  OK(MPI_Psend_init(b_out, P, 1, MPI_INT, next(), 10, MPI_COMM_WORLD, MPI_INFO_NULL, &b));
  OK(MPI_Precv_init(a_in, P, 1, MPI_INT, prev(), 10, MPI_COMM_WORLD, MPI_INFO_NULL, &a_r));
  OK(MPI_Precv_init(b_in, P, 1, MPI_INT, prev(), 10, MPI_COMM_WORLD, MPI_INFO_NULL, &b_r));
  OK(MPI_Start(&a_r));
  OK(MPI_Start(&b));
  OK(MPI_Start(&a));
  OK(MPI_Pready_range(0, P - 1, b)); /* B's message leaves first */
  OK(MPI_Start(&b_r));
  OK(MPI_Pready_range(0, P - 1, a));
  MPI_Request all[4] = {a, b, a_r, b_r};
  MPI_Status st[4];
  OK(MPI_Waitall(4, all, st));
  for (int i = 0; i < P; i++)
    CHECK(a_in[i] == value(prev(), i, 20) && b_in[i] == value(prev(), i, 21),
          "pairs crossed: element %d is %d and %d", i, a_in[i], b_in[i]);
  CHECK(st[2].MPI_TAG == 10 && st[3].MPI_TAG == 10, "the receives' tags: %d %d",
        st[2].MPI_TAG, st[3].MPI_TAG);
  for (int i = 0; i < 4; i++)
    OK(MPI_Request_free(&all[i]));

  /* No partitions: the message (of nothing) leaves at the start. */
  MPI_Request none[2];
  OK(MPI_Psend_init(a_out, 0, 1, MPI_INT, next(), 11, MPI_COMM_WORLD, MPI_INFO_NULL, &none[0]));
  OK(MPI_Precv_init(a_in, 0, 1, MPI_INT, prev(), 11, MPI_COMM_WORLD, MPI_INFO_NULL, &none[1]));
  OK(MPI_Startall(2, none));
  OK(MPI_Waitall(2, none, st));
  int count = -1;
  OK(MPI_Get_count(&st[1], MPI_INT, &count));
  CHECK(count == 0, "a receive of no partitions got %d elements", count);
  OK(MPI_Request_free(&none[0]));
  OK(MPI_Request_free(&none[1]));
}

static void test_proc_null_and_errors(void) {
  int buf[P] = {0};
  MPI_Request r[2];
  OK(MPI_Psend_init(buf, P, 1, MPI_INT, MPI_PROC_NULL, 8, MPI_COMM_WORLD, MPI_INFO_NULL,
                    &r[0]));
  OK(MPI_Precv_init(buf, P, 1, MPI_INT, MPI_PROC_NULL, 8, MPI_COMM_WORLD, MPI_INFO_NULL,
                    &r[1]));
  errors_return(MPI_COMM_SELF, 1);
  errors_return(MPI_COMM_WORLD, 1);
  EXPECT_ERR(MPI_Pready(0, r[0]), MPI_ERR_REQUEST, "not started");
  OK(MPI_Startall(2, r));
  EXPECT_ERR(MPI_Start(&r[0]), MPI_ERR_REQUEST, "active");
  int flag = -1;
  EXPECT_ERR(MPI_Parrived(r[0], 0, &flag), MPI_ERR_REQUEST, "not a send");
  EXPECT_ERR(MPI_Parrived(r[1], P, &flag), MPI_ERR_ARG, "not one of");
  OK(MPI_Pready(1, r[0]));
  EXPECT_ERR(MPI_Pready(1, r[0]), MPI_ERR_ARG, "ready already");
  EXPECT_ERR(MPI_Pready(P, r[0]), MPI_ERR_ARG, "not one of");
  OK(MPI_Pready_list(3, (int[]){0, 2, 3}, r[0]));
  MPI_Status st[2];
  OK(MPI_Waitall(2, r, st));
  CHECK(st[1].MPI_SOURCE == MPI_PROC_NULL, "MPI_PROC_NULL's status: source %d",
        st[1].MPI_SOURCE);
  MPI_Request bad;
  EXPECT_ERR(MPI_Precv_init(buf, P, 1, MPI_INT, MPI_ANY_SOURCE, 8, MPI_COMM_WORLD,
                            MPI_INFO_NULL, &bad),
             MPI_ERR_RANK, NULL);
  EXPECT_ERR(MPI_Precv_init(buf, P, 1, MPI_INT, 0, MPI_ANY_TAG, MPI_COMM_WORLD, MPI_INFO_NULL,
                            &bad),
             MPI_ERR_TAG, NULL);
  EXPECT_ERR(MPI_Psend_init(buf, -1, 1, MPI_INT, 0, 8, MPI_COMM_WORLD, MPI_INFO_NULL, &bad),
             MPI_ERR_ARG, "not negative");
  /* A negative count a partition, even of no partitions. */
  EXPECT_ERR(MPI_Psend_init(buf, 0, -5, MPI_INT, 0, 8, MPI_COMM_WORLD, MPI_INFO_NULL, &bad),
             MPI_ERR_COUNT, "negative");
  EXPECT_ERR(MPI_Pready(0, MPI_REQUEST_NULL), MPI_ERR_REQUEST, "not a partitioned request");
  errors_return(MPI_COMM_WORLD, 0);
  errors_return(MPI_COMM_SELF, 0);
  OK(MPI_Request_free(&r[0]));
  OK(MPI_Request_free(&r[1]));
}

int main(int argc, char **argv) {
  start("partitioned", &argc, &argv);
  test_rounds();
  test_cut_differently();
  test_strided();
  test_init_order();
  test_proc_null_and_errors();
  return finish();
}
