/* Long on purpose: one program holds every point-to-point check,
 * so that each rank count is one launch. */
/* p2p.c: point-to-point at 2 or more ranks. Sends in every mode (standard,
 * synchronous: not complete before its receive is posted, ready, buffered: with
 * MPI_ERR_BUFFER when the attached buffer is missing or too small), blocking and
 * not; Sendrecv and Sendrecv_replace; wildcards and the status they report;
 * ordering per pair (small and large messages mixed) and per communicator (two
 * communicators, and collectives, never match each other's messages); truncation
 * (MPI_ERR_TRUNCATE, also in MPI_Wait, where it goes through the request's
 * communicator's handler, and MPI_ERR_IN_STATUS in MPI_Waitall); a message
 * ending inside a basic element of the receive's type (MPI_ERR_TYPE); probes and
 * matched probes; MPI_Get_count and MPI_Get_elements; cancelling a receive, and
 * a send (eager, rendezvous, synchronous, matched or not); the
 * Test and Wait families with null and inactive requests; persistent requests;
 * many small sends at once; MPI_PROC_NULL; large messages, contiguous and not;
 * MPI_Isendrecv(_replace). */
#include "check.h"
#include <unistd.h>

static void fill(int *b, int n, int seed) {
  for (int i = 0; i < n; i++)
    b[i] = seed * 100000 + i;
}

static void expect_filled(const int *b, int n, int seed, const char *what) {
  for (int i = 0; i < n; i++)
    CHECK(b[i] == seed * 100000 + i, "%s: element %d is %d, expected %d", what,
          i, b[i], seed * 100000 + i);
}

static void expect_status(const MPI_Status *st, int source, int tag,
                          MPI_Datatype ty, int count, const char *what) {
  int n = -1;
  OK(MPI_Get_count(st, ty, &n));
  CHECK(st->MPI_SOURCE == source, "%s: status source %d, expected %d", what,
        st->MPI_SOURCE, source);
  CHECK(st->MPI_TAG == tag, "%s: status tag %d, expected %d", what, st->MPI_TAG,
        tag);
  CHECK(n == count, "%s: count %d, expected %d", what, n, count);
}

/* The status of a null or inactive request, or of a receive from MPI_PROC_NULL
 * (source MPI_PROC_NULL). */
static void expect_empty(const MPI_Status *st, int source, const char *what) {
  int n = -1, cancelled = -1;
  OK(MPI_Get_count(st, MPI_INT, &n));
  OK(MPI_Test_cancelled(st, &cancelled));
  CHECK(st->MPI_SOURCE == source && st->MPI_TAG == MPI_ANY_TAG && n == 0 &&
            !cancelled,
        "%s: not an empty status (source %d, tag %d, count %d, cancelled %d)",
        what, st->MPI_SOURCE, st->MPI_TAG, n, cancelled);
}

static void test_standard(void) {
  int out[100], in[100];
  MPI_Status st;
  if (rank == 0) {
    fill(out, 100, 1);
    OK(MPI_Send(out, 100, MPI_INT, 1, 11, MPI_COMM_WORLD));
    OK(MPI_Recv(in, 100, MPI_INT, 1, 12, MPI_COMM_WORLD, &st));
    expect_status(&st, 1, 12, MPI_INT, 100, "MPI_Recv of the reply");
    expect_filled(in, 100, 2, "MPI_Recv of the reply");
    /* An empty message; a null buffer is fine with count 0. */
    OK(MPI_Send(NULL, 0, MPI_INT, 1, 13, MPI_COMM_WORLD));
  } else if (rank == 1) {
    OK(MPI_Recv(in, 100, MPI_INT, 0, 11, MPI_COMM_WORLD, &st));
    expect_status(&st, 0, 11, MPI_INT, 100, "MPI_Recv");
    expect_filled(in, 100, 1, "MPI_Recv");
    fill(out, 100, 2);
    OK(MPI_Send(out, 100, MPI_INT, 0, 12, MPI_COMM_WORLD));
    OK(MPI_Recv(in, 100, MPI_INT, 0, 13, MPI_COMM_WORLD, &st));
    expect_status(&st, 0, 13, MPI_INT, 0, "an empty message");
  }
  /* Both ways at once, nonblocking. */
  if (rank < 2) {
    int peer = 1 - rank;
    MPI_Request r[2];
    MPI_Status sts[2];
    fill(out, 100, 10 + rank);
    OK(MPI_Irecv(in, 100, MPI_INT, peer, 14, MPI_COMM_WORLD, &r[0]));
    OK(MPI_Isend(out, 100, MPI_INT, peer, 14, MPI_COMM_WORLD, &r[1]));
    OK(MPI_Waitall(2, r, sts));
    CHECK(r[0] == MPI_REQUEST_NULL && r[1] == MPI_REQUEST_NULL,
          "MPI_Waitall left a request not null");
    expect_status(&sts[0], peer, 14, MPI_INT, 100, "MPI_Irecv");
    expect_filled(in, 100, 10 + peer, "MPI_Irecv");
  }
}

static void test_synchronous(void) {
  int x = 42, go = 1, got = 0;
  MPI_Request r;
  MPI_Status st;
  if (rank == 0) {
    OK(MPI_Issend(&x, 1, MPI_INT, 1, 21, MPI_COMM_WORLD, &r));
    /* Rank 1 posts its receive only once told to: until then the synchronous
     * send cannot complete. */
    for (int i = 0; i < 200; i++) {
      int flag = -1;
      OK(MPI_Test(&r, &flag, MPI_STATUS_IGNORE));
      CHECK(!flag, "MPI_Issend completed before its receive was posted");
      CHECK(r != MPI_REQUEST_NULL, "MPI_Test freed an incomplete request");
    }
    OK(MPI_Send(&go, 1, MPI_INT, 1, 22, MPI_COMM_WORLD));
    OK(MPI_Wait(&r, &st));
    CHECK(r == MPI_REQUEST_NULL, "MPI_Wait left the request");
    /* Blocking forms. */
    OK(MPI_Ssend(&x, 1, MPI_INT, 1, 23, MPI_COMM_WORLD));
    OK(MPI_Recv(&got, 1, MPI_INT, 1, 24, MPI_COMM_WORLD, &st));
    CHECK(got == 43, "MPI_Ssend's reply is %d", got);
  } else if (rank == 1) {
    OK(MPI_Recv(&got, 1, MPI_INT, 0, 22, MPI_COMM_WORLD, &st));
    OK(MPI_Recv(&got, 1, MPI_INT, 0, 21, MPI_COMM_WORLD, &st));
    CHECK(got == 42, "MPI_Issend's message is %d", got);
    OK(MPI_Recv(&got, 1, MPI_INT, 0, 23, MPI_COMM_WORLD, &st));
    got++;
    OK(MPI_Ssend(&got, 1, MPI_INT, 0, 24, MPI_COMM_WORLD));
  }
}

static void test_ready(void) {
  int data[8], ready = 0;
  MPI_Request r;
  MPI_Status st;
  if (rank == 1) {
    OK(MPI_Irecv(data, 8, MPI_INT, 0, 31, MPI_COMM_WORLD, &r));
    OK(MPI_Send(&ready, 1, MPI_INT, 0, 30, MPI_COMM_WORLD));
    OK(MPI_Wait(&r, &st));
    expect_status(&st, 0, 31, MPI_INT, 8, "the receive of MPI_Rsend");
    expect_filled(data, 8, 3, "MPI_Rsend");
    OK(MPI_Irecv(data, 8, MPI_INT, 0, 32, MPI_COMM_WORLD, &r));
    OK(MPI_Send(&ready, 1, MPI_INT, 0, 30, MPI_COMM_WORLD));
    OK(MPI_Wait(&r, &st));
    expect_filled(data, 8, 4, "MPI_Irsend");
    for (int k = 0; k < 3; k++) {
      OK(MPI_Irecv(data, 8, MPI_INT, 0, 33, MPI_COMM_WORLD, &r));
      OK(MPI_Send(&ready, 1, MPI_INT, 0, 30, MPI_COMM_WORLD));
      OK(MPI_Wait(&r, &st));
      expect_filled(data, 8, 5 + k, "a persistent ready send");
    }
  } else if (rank == 0) {
    OK(MPI_Recv(&ready, 1, MPI_INT, 1, 30, MPI_COMM_WORLD, &st));
    fill(data, 8, 3);
    OK(MPI_Rsend(data, 8, MPI_INT, 1, 31, MPI_COMM_WORLD));
    OK(MPI_Recv(&ready, 1, MPI_INT, 1, 30, MPI_COMM_WORLD, &st));
    fill(data, 8, 4);
    OK(MPI_Irsend(data, 8, MPI_INT, 1, 32, MPI_COMM_WORLD, &r));
    OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    OK(MPI_Rsend_init(data, 8, MPI_INT, 1, 33, MPI_COMM_WORLD, &r));
    for (int k = 0; k < 3; k++) {
      OK(MPI_Recv(&ready, 1, MPI_INT, 1, 30, MPI_COMM_WORLD, &st));
      fill(data, 8, 5 + k);
      OK(MPI_Start(&r));
      OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    }
    OK(MPI_Request_free(&r));
  }
}

static void test_buffered(void) {
  enum { N = 100 };
  int packed = 0;
  OK(MPI_Pack_size(N, MPI_INT, MPI_COMM_WORLD, &packed));
  int room = 4 * (packed + MPI_BSEND_OVERHEAD);
  char *attached = malloc(room);
  CHECK(attached != NULL, "malloc");
  if (rank == 0) {
    int a[N], b[N], c[N], d[N];
    MPI_Request r, p;
    fill(a, N, 5);
    fill(b, N, 6);
    fill(c, N, 7);
    fill(d, N, 8);
    OK(MPI_Buffer_attach(attached, room));
    OK(MPI_Bsend(a, N, MPI_INT, 1, 41, MPI_COMM_WORLD));
    OK(MPI_Bsend(b, N, MPI_INT, 1, 42, MPI_COMM_WORLD));
    OK(MPI_Ibsend(c, N, MPI_INT, 1, 43, MPI_COMM_WORLD, &r));
    /* The data was copied: the user's buffers may change at once. */
    memset(a, 0, sizeof a);
    memset(b, 0, sizeof b);
    OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    memset(c, 0, sizeof c);
    OK(MPI_Bsend_init(d, N, MPI_INT, 1, 40, MPI_COMM_WORLD, &p));
    OK(MPI_Start(&p));
    OK(MPI_Wait(&p, MPI_STATUS_IGNORE));
    memset(d, 0, sizeof d);
    OK(MPI_Request_free(&p));
    void *back = NULL;
    int back_size = -1;
    OK(MPI_Buffer_detach(&back, &back_size));
    CHECK(back == attached && back_size == room,
          "MPI_Buffer_detach gave %p (%d bytes), attached %p (%d bytes)", back,
          back_size, (void *)attached, room);
    /* A message takes 96 bytes of room besides its own (as MPICH's do), less than
     * MPI_BSEND_OVERHEAD: room for two of 10 ints. */
    fill(a, 10, 9);
    OK(MPI_Buffer_attach(attached, 2 * (10 * sizeof(int) + 96)));
    OK(MPI_Bsend(a, 10, MPI_INT, 1, 45, MPI_COMM_WORLD));
    OK(MPI_Bsend(a, 10, MPI_INT, 1, 46, MPI_COMM_WORLD));
    OK(MPI_Buffer_detach(&back, &back_size));

    /* MPI_ERR_BUFFER: nothing attached, too small, attached twice (errors of
     * MPI_Buffer_attach, which has no communicator, go to MPI_COMM_SELF's
     * handler). */
    errors_return(MPI_COMM_WORLD, 1);
    errors_return(MPI_COMM_SELF, 1);
    EXPECT_ERR(MPI_Bsend(a, N, MPI_INT, 1, 44, MPI_COMM_WORLD), MPI_ERR_BUFFER,
               "MPI_Buffer_attach");
    OK(MPI_Buffer_attach(attached, 16));
    EXPECT_ERR(MPI_Bsend(a, N, MPI_INT, 1, 44, MPI_COMM_WORLD), MPI_ERR_BUFFER,
               NULL);
    EXPECT_ERR(MPI_Buffer_attach(attached, room), MPI_ERR_BUFFER, NULL);
    OK(MPI_Buffer_detach(&back, &back_size));
    CHECK(back_size == 16, "detached %d bytes", back_size);
    errors_return(MPI_COMM_WORLD, 0);
    errors_return(MPI_COMM_SELF, 0);
  } else if (rank == 1) {
    int got[N];
    MPI_Status st;
    /* Buffered sends complete without their receives: take them in reverse. */
    OK(MPI_Recv(got, N, MPI_INT, 0, 43, MPI_COMM_WORLD, &st));
    expect_filled(got, N, 7, "MPI_Ibsend");
    OK(MPI_Recv(got, N, MPI_INT, 0, 42, MPI_COMM_WORLD, &st));
    expect_filled(got, N, 6, "the second MPI_Bsend");
    OK(MPI_Recv(got, N, MPI_INT, 0, 41, MPI_COMM_WORLD, &st));
    expect_filled(got, N, 5, "the first MPI_Bsend");
    OK(MPI_Recv(got, N, MPI_INT, 0, 40, MPI_COMM_WORLD, &st));
    expect_filled(got, N, 8, "MPI_Bsend_init's start");
    for (int tag = 45; tag <= 46; tag++) {
      OK(MPI_Recv(got, 10, MPI_INT, 0, tag, MPI_COMM_WORLD, &st));
      expect_filled(got, 10, 9, "a buffered send in room of 96 bytes besides its own");
    }
  }
  free(attached);
}

static void test_sendrecv(void) {
  int right = (rank + 1) % size, left = (rank + size - 1) % size;
  int out[10], in[10];
  MPI_Status st;
  fill(out, 10, rank);
  OK(MPI_Sendrecv(out, 10, MPI_INT, right, 51, in, 10, MPI_INT, left, 51,
                  MPI_COMM_WORLD, &st));
  expect_status(&st, left, 51, MPI_INT, 10, "MPI_Sendrecv around the ring");
  expect_filled(in, 10, left, "MPI_Sendrecv around the ring");
  /* With itself. */
  OK(MPI_Sendrecv(out, 10, MPI_INT, rank, 52, in, 10, MPI_INT, rank, 52,
                  MPI_COMM_WORLD, &st));
  expect_filled(in, 10, rank, "MPI_Sendrecv with itself");
  /* Replace, with a type that is not contiguous: every other int of 20. */
  int wide[20];
  MPI_Datatype every_other;
  OK(MPI_Type_vector(10, 1, 2, MPI_INT, &every_other));
  OK(MPI_Type_commit(&every_other));
  for (int i = 0; i < 20; i++)
    wide[i] = i % 2 ? -1 : rank * 100000 + i / 2;
  OK(MPI_Sendrecv_replace(wide, 1, every_other, right, 53, left, 53,
                          MPI_COMM_WORLD, &st));
  expect_status(&st, left, 53, every_other, 1, "MPI_Sendrecv_replace");
  for (int i = 0; i < 20; i++) {
    int want = i % 2 ? -1 : left * 100000 + i / 2;
    CHECK(wide[i] == want, "MPI_Sendrecv_replace: int %d is %d, expected %d", i,
          wide[i], want);
  }
  OK(MPI_Type_free(&every_other));
  CHECK(every_other == MPI_DATATYPE_NULL, "MPI_Type_free left the handle");
  /* MPI_PROC_NULL on both sides. */
  in[0] = -7;
  OK(MPI_Sendrecv(out, 10, MPI_INT, MPI_PROC_NULL, 54, in, 10, MPI_INT,
                  MPI_PROC_NULL, 54, MPI_COMM_WORLD, &st));
  expect_empty(&st, MPI_PROC_NULL, "MPI_Sendrecv with MPI_PROC_NULL");
  CHECK(in[0] == -7, "a receive from MPI_PROC_NULL changed the buffer");
  /* To and from MPI_PROC_NULL the type is not looked at: MPI_DATATYPE_NULL, null
   * buffers (as MPICH allows). */
  MPI_Request r;
  OK(MPI_Irecv(NULL, 0, MPI_DATATYPE_NULL, MPI_PROC_NULL, 55, MPI_COMM_WORLD, &r));
  OK(MPI_Wait(&r, &st));
  expect_empty(&st, MPI_PROC_NULL, "MPI_Irecv of MPI_DATATYPE_NULL from MPI_PROC_NULL");
  OK(MPI_Recv(NULL, 0, MPI_DATATYPE_NULL, MPI_PROC_NULL, 55, MPI_COMM_WORLD, &st));
  expect_empty(&st, MPI_PROC_NULL, "MPI_Recv of MPI_DATATYPE_NULL from MPI_PROC_NULL");
  OK(MPI_Send(NULL, 0, MPI_DATATYPE_NULL, MPI_PROC_NULL, 55, MPI_COMM_WORLD));
  /* A message of no elements at a null buffer, to this very rank; of
   * MPI_DATATYPE_NULL too (as MPICH allows). */
  OK(MPI_Isend(NULL, 0, MPI_INT, rank, 56, MPI_COMM_WORLD, &r));
  OK(MPI_Recv(NULL, 0, MPI_INT, rank, 56, MPI_COMM_WORLD, &st));
  OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
  OK(MPI_Isend(NULL, 0, MPI_DATATYPE_NULL, rank, 57, MPI_COMM_WORLD, &r));
  OK(MPI_Recv(NULL, 0, MPI_DATATYPE_NULL, rank, 57, MPI_COMM_WORLD, &st));
  OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
}

static void test_wildcards(void) {
  if (rank == 0) {
    int seen[64] = {0}, buf[64];
    MPI_Status st;
    for (int k = 1; k < size; k++) {
      OK(MPI_Recv(buf, 64, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD,
                  &st));
      int s = st.MPI_SOURCE;
      CHECK(s >= 1 && s < size && !seen[s],
            "MPI_ANY_SOURCE reported source %d (seen before: %d)", s,
            s >= 1 && s < size ? seen[s] : -1);
      seen[s] = 1;
      expect_status(&st, s, 60 + s, MPI_INT, s + 1, "MPI_ANY_SOURCE/MPI_ANY_TAG");
      expect_filled(buf, s + 1, s, "MPI_ANY_SOURCE/MPI_ANY_TAG");
    }
    OK(MPI_Barrier(MPI_COMM_WORLD));
    /* A tag with any source skips the other tags; a source with any tag finds
     * what that source sent first. */
    for (int k = 1; k < size; k++) {
      OK(MPI_Recv(buf, 64, MPI_INT, MPI_ANY_SOURCE, 62, MPI_COMM_WORLD, &st));
      CHECK(st.MPI_TAG == 62 && buf[0] == 1000 + st.MPI_SOURCE,
            "MPI_ANY_SOURCE with tag 62 got tag %d, data %d", st.MPI_TAG,
            buf[0]);
    }
    for (int s = 1; s < size; s++) {
      OK(MPI_Recv(buf, 64, MPI_INT, s, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
      CHECK(st.MPI_SOURCE == s && st.MPI_TAG == 61 && buf[0] == 2000 + s,
            "source %d with MPI_ANY_TAG got source %d tag %d data %d", s,
            st.MPI_SOURCE, st.MPI_TAG, buf[0]);
    }
  } else {
    int buf[64];
    fill(buf, rank + 1, rank);
    OK(MPI_Send(buf, rank + 1, MPI_INT, 0, 60 + rank, MPI_COMM_WORLD));
    OK(MPI_Barrier(MPI_COMM_WORLD));
    buf[0] = 2000 + rank;
    OK(MPI_Send(buf, 1, MPI_INT, 0, 61, MPI_COMM_WORLD));
    buf[0] = 1000 + rank;
    OK(MPI_Send(buf, 1, MPI_INT, 0, 62, MPI_COMM_WORLD));
  }
}

/* Messages of one pair keep their order, small and large mixed. */
static void test_order(void) {
  enum { COUNT = 40, LARGE = 30000 };
  int *big = malloc(sizeof(int) * LARGE);
  CHECK(big != NULL, "malloc");
  if (rank == 0) {
    MPI_Request r[COUNT];
    int **bufs = malloc(sizeof(int *) * COUNT);
    for (int i = 0; i < COUNT; i++) {
      int n = i % 3 == 2 ? LARGE : 1 + i;
      bufs[i] = malloc(sizeof(int) * n);
      for (int j = 0; j < n; j++)
        bufs[i][j] = i;
      OK(MPI_Isend(bufs[i], n, MPI_INT, 1, 70, MPI_COMM_WORLD, &r[i]));
    }
    OK(MPI_Waitall(COUNT, r, MPI_STATUSES_IGNORE));
    /* Blocking, received with requests posted ahead this time. */
    for (int i = 0; i < COUNT; i++) {
      int n = i % 3 == 2 ? LARGE : 1 + i;
      OK(MPI_Send(bufs[i], n, MPI_INT, 1, 71, MPI_COMM_WORLD));
    }
    for (int i = 0; i < COUNT; i++)
      free(bufs[i]);
    free(bufs);
  } else if (rank == 1) {
    MPI_Status st;
    for (int i = 0; i < COUNT; i++) {
      int n = i % 3 == 2 ? LARGE : 1 + i, got = -1;
      OK(MPI_Recv(big, LARGE, MPI_INT, 0, 70, MPI_COMM_WORLD, &st));
      OK(MPI_Get_count(&st, MPI_INT, &got));
      CHECK(got == n && big[0] == i && big[n - 1] == i,
            "message %d arrived out of order: %d ints starting with %d", i, got,
            big[0]);
    }
    MPI_Request r[COUNT];
    int **bufs = malloc(sizeof(int *) * COUNT);
    for (int i = 0; i < COUNT; i++) {
      bufs[i] = malloc(sizeof(int) * LARGE);
      OK(MPI_Irecv(bufs[i], LARGE, MPI_INT, MPI_ANY_SOURCE, 71, MPI_COMM_WORLD,
                   &r[i]));
    }
    MPI_Status sts[COUNT];
    OK(MPI_Waitall(COUNT, r, sts));
    for (int i = 0; i < COUNT; i++) {
      int n = i % 3 == 2 ? LARGE : 1 + i;
      expect_status(&sts[i], 0, 71, MPI_INT, n, "a posted receive, in order");
      CHECK(bufs[i][0] == i && bufs[i][n - 1] == i,
            "posted receive %d got message %d", i, bufs[i][0]);
      free(bufs[i]);
    }
    free(bufs);
  }
  free(big);

  /* Per source, with several senders and MPI_ANY_SOURCE. */
  enum { EACH = 30 };
  if (rank == 0) {
    int next[64] = {0}, v[2];
    MPI_Status st;
    for (int k = 0; k < EACH * (size - 1); k++) {
      OK(MPI_Recv(v, 2, MPI_INT, MPI_ANY_SOURCE, 72, MPI_COMM_WORLD, &st));
      int s = st.MPI_SOURCE;
      CHECK(v[0] == s && v[1] == next[s],
            "from %d: message %d of source %d, expected number %d", s, v[1],
            v[0], next[s]);
      next[s]++;
    }
  } else {
    for (int i = 0; i < EACH; i++) {
      int v[2] = {rank, i};
      OK(MPI_Send(v, 2, MPI_INT, 0, 72, MPI_COMM_WORLD));
    }
  }
}

/* Two communicators never match each other's messages, nor collectives their
 * point-to-point ones. */
static void test_contexts(void) {
  MPI_Comm dup;
  OK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
  int v = 0, flag = -1;
  MPI_Status st;
  if (rank == 0) {
    v = 1;
    OK(MPI_Send(&v, 1, MPI_INT, 1, 80, dup));
    OK(MPI_Recv(&v, 1, MPI_INT, 1, 81, MPI_COMM_WORLD, &st));
    v = 2;
    OK(MPI_Send(&v, 1, MPI_INT, 1, 80, MPI_COMM_WORLD));
  } else if (rank == 1) {
    OK(MPI_Probe(0, 80, dup, &st));
    OK(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st));
    CHECK(!flag, "a message on a duplicate was seen on MPI_COMM_WORLD");
    OK(MPI_Send(&v, 1, MPI_INT, 0, 81, MPI_COMM_WORLD));
    OK(MPI_Recv(&v, 1, MPI_INT, 0, 80, MPI_COMM_WORLD, &st));
    CHECK(v == 2, "MPI_COMM_WORLD's receive got %d, the duplicate's message", v);
    OK(MPI_Recv(&v, 1, MPI_INT, 0, 80, dup, &st));
    CHECK(v == 1, "the duplicate's receive got %d", v);
  }
  /* A receive of anything stays pending across collectives. */
  MPI_Request r = MPI_REQUEST_NULL;
  int got = -1, data[4] = {9, 9, 9, 9};
  if (rank == 1)
    OK(MPI_Irecv(&got, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD,
                 &r));
  OK(MPI_Barrier(MPI_COMM_WORLD));
  OK(MPI_Bcast(data, 4, MPI_INT, 0, MPI_COMM_WORLD));
  OK(MPI_Allreduce(MPI_IN_PLACE, data, 4, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
  OK(MPI_Barrier(MPI_COMM_WORLD));
  if (rank == 1) {
    OK(MPI_Test(&r, &flag, &st));
    CHECK(!flag, "a point-to-point receive matched a collective's message");
    OK(MPI_Send(&v, 1, MPI_INT, 0, 82, MPI_COMM_WORLD));
    OK(MPI_Wait(&r, &st));
    CHECK(got == 77 && st.MPI_TAG == 83, "the pending receive got %d tag %d",
          got, st.MPI_TAG);
  } else if (rank == 0) {
    OK(MPI_Recv(&v, 1, MPI_INT, 1, 82, MPI_COMM_WORLD, &st));
    v = 77;
    OK(MPI_Send(&v, 1, MPI_INT, 1, 83, MPI_COMM_WORLD));
  }
  OK(MPI_Comm_free(&dup));
  CHECK(dup == MPI_COMM_NULL, "MPI_Comm_free left the handle");
}

/* A user error handler: what it saw. */
static MPI_Comm handled_comm = MPI_COMM_NULL;
static int handled_code = MPI_SUCCESS, handled_calls = 0;
static void record_error(MPI_Comm *comm, int *code, ...) {
  handled_comm = *comm;
  handled_code = *code;
  handled_calls++;
}

static void test_truncation(void) {
  /* Errors of this communicator are returned; MPI_COMM_SELF's (those of no
   * object) stay fatal: a truncation in a completion call goes through the
   * request's communicator. */
  MPI_Comm comm;
  OK(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
  errors_return(comm, 1);
  int out[10], in[5];
  MPI_Status st;
  MPI_Request r;
  if (rank == 0) {
    fill(out, 10, 8);
    OK(MPI_Send(out, 10, MPI_INT, 1, 90, comm));
    OK(MPI_Send(out, 10, MPI_INT, 1, 91, comm));
    char *big = calloc(1, 1 << 20);
    OK(MPI_Send(big, 1 << 20, MPI_BYTE, 1, 92, comm));
    free(big);
    OK(MPI_Send(out, 3, MPI_INT, 1, 93, comm));
    OK(MPI_Send(out, 10, MPI_INT, 1, 94, comm));
    OK(MPI_Send(out, 10, MPI_INT, 1, 95, comm));
    OK(MPI_Send(out, 5, MPI_INT, 1, 96, comm));
    char chars[32] = "abcdefghijklmnopqrstuvwxyz";
    OK(MPI_Send(chars, 3, MPI_CHAR, 1, 97, comm));
    OK(MPI_Send(chars, 3, MPI_CHAR, 1, 98, comm));
    OK(MPI_Send(chars, 13 + 5, MPI_BYTE, 1, 99, comm));
    OK(MPI_Send(chars, 13 + 1, MPI_BYTE, 1, 100, comm));
  } else if (rank == 1) {
    st.MPI_SOURCE = st.MPI_TAG = -99;
    EXPECT_ERR(MPI_Recv(in, 5, MPI_INT, 0, 90, comm, &st), MPI_ERR_TRUNCATE,
               NULL);
    CHECK(st.MPI_SOURCE == 0 && st.MPI_TAG == 90,
          "a truncated receive's status: source %d tag %d", st.MPI_SOURCE,
          st.MPI_TAG);
    OK(MPI_Irecv(in, 5, MPI_INT, 0, 91, comm, &r));
    EXPECT_ERR(MPI_Wait(&r, &st), MPI_ERR_TRUNCATE, NULL);
    CHECK(r == MPI_REQUEST_NULL, "MPI_Wait of a truncated receive left it");
    char small[1000];
    EXPECT_ERR(MPI_Recv(small, 1000, MPI_BYTE, 0, 92, comm, &st),
               MPI_ERR_TRUNCATE, NULL);
    MPI_Request two[2];
    MPI_Status sts[2];
    int fits[5];
    OK(MPI_Irecv(fits, 5, MPI_INT, 0, 93, comm, &two[0]));
    OK(MPI_Irecv(in, 5, MPI_INT, 0, 94, comm, &two[1]));
    sts[0].MPI_ERROR = sts[1].MPI_ERROR = -1;
    EXPECT_ERR(MPI_Waitall(2, two, sts), MPI_ERR_IN_STATUS, NULL);
    CHECK(sts[0].MPI_ERROR == MPI_SUCCESS,
          "MPI_Waitall: the status of the receive that fitted has error %d",
          sts[0].MPI_ERROR);
    int cls = -1;
    OK(MPI_Error_class(sts[1].MPI_ERROR, &cls));
    CHECK(cls == MPI_ERR_TRUNCATE,
          "MPI_Waitall: the truncated receive's status has class %d", cls);
    expect_filled(fits, 3, 8, "the receive beside a truncated one");
    /* A user's handler sees the request's communicator and the code. */
    MPI_Errhandler eh;
    OK(MPI_Comm_create_errhandler(record_error, &eh));
    OK(MPI_Comm_set_errhandler(comm, eh));
    OK(MPI_Errhandler_free(&eh));
    OK(MPI_Irecv(in, 5, MPI_INT, 0, 95, comm, &r));
    int rc = MPI_Wait(&r, &st);
    CHECK(rc != MPI_SUCCESS && handled_calls == 1 && handled_code == rc &&
              handled_comm == comm,
          "the user's handler on a truncation in MPI_Wait: rc %d, %d calls, "
          "code %d, right communicator %d",
          rc, handled_calls, handled_code, handled_comm == comm);
    /* The communicator still works. */
    OK(MPI_Recv(in, 5, MPI_INT, 0, 96, comm, &st));
    expect_filled(in, 5, 8, "a receive after truncations");
    /* A message that ends inside a basic element of the receive's type was sent
       with another type signature: MPI_ERR_TYPE, its bytes still counted. */
    OK(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
    EXPECT_ERR(MPI_Recv(in, 4, MPI_INT, 0, 97, comm, &st), MPI_ERR_TYPE, "signature");
    int got = -1;
    OK(MPI_Get_count(&st, MPI_BYTE, &got));
    CHECK(got == 3, "3 chars received as ints: %d bytes", got);
    OK(MPI_Get_count(&st, MPI_INT, &got));
    CHECK(got == MPI_UNDEFINED, "3 chars received as ints: a count of %d ints", got);
    MPI_Datatype spaced, cdi;
    OK(MPI_Type_vector(2, 1, 2, MPI_INT, &spaced));
    OK(MPI_Type_commit(&spaced));
    OK(MPI_Irecv(out, 1, spaced, 0, 98, comm, &r));
    EXPECT_ERR(MPI_Wait(&r, &st), MPI_ERR_TYPE, "signature");
    int lens[3] = {1, 1, 1};
    MPI_Aint at[3] = {0, 8, 16};
    MPI_Datatype kinds[3] = {MPI_CHAR, MPI_DOUBLE, MPI_INT};
    OK(MPI_Type_create_struct(3, lens, at, kinds, &cdi));
    OK(MPI_Type_commit(&cdi));
    char structs[2 * 24];
    EXPECT_ERR(MPI_Recv(structs, 2, cdi, 0, 99, comm, &st), MPI_ERR_TYPE, "signature");
    OK(MPI_Recv(structs, 2, cdi, 0, 100, comm, &st));
    OK(MPI_Get_elements(&st, cdi, &got));
    CHECK(got == 4, "a struct and a char received: %d basic elements", got);
    OK(MPI_Type_free(&spaced));
    OK(MPI_Type_free(&cdi));
  }
  OK(MPI_Comm_free(&comm));
}

static void test_probe(void) {
  MPI_Status st;
  if (rank == 0) {
    int a[3] = {1, 2, 3}, b[7];
    fill(b, 7, 9);
    OK(MPI_Send(a, 3, MPI_INT, 1, 100, MPI_COMM_WORLD));
    OK(MPI_Send(b, 7, MPI_INT, 1, 101, MPI_COMM_WORLD));
    OK(MPI_Send(a, 3, MPI_INT, 1, 102, MPI_COMM_WORLD));
    OK(MPI_Send(b, 7, MPI_INT, 1, 102, MPI_COMM_WORLD));
    OK(MPI_Send(a, 2, MPI_INT, 1, 103, MPI_COMM_WORLD));
    OK(MPI_Send(b, 6, MPI_INT, 1, 104, MPI_COMM_WORLD));
    OK(MPI_Send(a, 3, MPI_INT, 1, 105, MPI_COMM_WORLD));
  } else if (rank == 1) {
    int buf[16], n = -1, flag = 0;
    OK(MPI_Probe(MPI_ANY_SOURCE, 101, MPI_COMM_WORLD, &st));
    expect_status(&st, 0, 101, MPI_INT, 7, "MPI_Probe");
    OK(MPI_Probe(0, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
    expect_status(&st, 0, 100, MPI_INT, 3, "MPI_Probe of the first message");
    OK(MPI_Get_count(&st, MPI_INT, &n));
    OK(MPI_Recv(buf, n, MPI_INT, st.MPI_SOURCE, st.MPI_TAG, MPI_COMM_WORLD, &st));
    CHECK(buf[2] == 3, "the probed message holds %d", buf[2]);
    while (!flag)
      OK(MPI_Iprobe(0, 101, MPI_COMM_WORLD, &flag, &st));
    expect_status(&st, 0, 101, MPI_INT, 7, "MPI_Iprobe");
    OK(MPI_Recv(buf, 16, MPI_INT, 0, 101, MPI_COMM_WORLD, &st));
    expect_filled(buf, 7, 9, "the message after MPI_Iprobe");
    /* A matched probe takes its message: a later receive gets the next. */
    MPI_Message m;
    OK(MPI_Mprobe(0, 102, MPI_COMM_WORLD, &m, &st));
    expect_status(&st, 0, 102, MPI_INT, 3, "MPI_Mprobe");
    CHECK(MPI_Message_f2c(MPI_Message_c2f(m)) == m, "a message's Fortran handle");
    OK(MPI_Recv(buf, 16, MPI_INT, 0, 102, MPI_COMM_WORLD, &st));
    expect_status(&st, 0, 102, MPI_INT, 7, "a receive after MPI_Mprobe");
    OK(MPI_Mrecv(buf, 16, MPI_INT, &m, &st));
    CHECK(m == MPI_MESSAGE_NULL, "MPI_Mrecv left the message handle");
    expect_status(&st, 0, 102, MPI_INT, 3, "MPI_Mrecv");
    CHECK(buf[0] == 1 && buf[2] == 3, "MPI_Mrecv got %d %d", buf[0], buf[2]);
    flag = 0;
    while (!flag)
      OK(MPI_Improbe(0, 103, MPI_COMM_WORLD, &flag, &m, &st));
    expect_status(&st, 0, 103, MPI_INT, 2, "MPI_Improbe");
    MPI_Request r;
    OK(MPI_Imrecv(buf, 16, MPI_INT, &m, &r));
    CHECK(m == MPI_MESSAGE_NULL, "MPI_Imrecv left the message handle");
    OK(MPI_Wait(&r, &st));
    expect_status(&st, 0, 103, MPI_INT, 2, "MPI_Imrecv");
    /* MPI_PROC_NULL: found at once, nothing to receive. */
    OK(MPI_Probe(MPI_PROC_NULL, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
    expect_empty(&st, MPI_PROC_NULL, "MPI_Probe of MPI_PROC_NULL");
    OK(MPI_Iprobe(MPI_PROC_NULL, 5, MPI_COMM_WORLD, &flag, &st));
    CHECK(flag, "MPI_Iprobe of MPI_PROC_NULL found nothing");
    OK(MPI_Mprobe(MPI_PROC_NULL, 5, MPI_COMM_WORLD, &m, &st));
    CHECK(m == MPI_MESSAGE_NO_PROC, "MPI_Mprobe of MPI_PROC_NULL");
    OK(MPI_Mrecv(buf, 16, MPI_INT, &m, &st));
    expect_empty(&st, MPI_PROC_NULL, "MPI_Mrecv of MPI_MESSAGE_NO_PROC");
    /* A synchronous send to itself, found by a test, then received through a
     * matched probe, completes. */
    MPI_Request sync;
    int one = 7;
    OK(MPI_Issend(&one, 1, MPI_INT, 0, 9, MPI_COMM_SELF, &sync));
    OK(MPI_Test(&sync, &flag, MPI_STATUS_IGNORE));
    CHECK(!flag, "MPI_Issend to itself completed before its receive");
    OK(MPI_Mprobe(0, 9, MPI_COMM_SELF, &m, &st));
    OK(MPI_Mrecv(buf, 16, MPI_INT, &m, &st));
    flag = 0;
    for (int k = 0; k < 1000000 && !flag; k++)
      OK(MPI_Test(&sync, &flag, MPI_STATUS_IGNORE));
    CHECK(flag && buf[0] == 7, "MPI_Issend to itself, matched by MPI_Mprobe: done %d, got %d", flag,
          buf[0]);
    /* Get_count and Get_elements with a type the message does not fill. */
    MPI_Datatype three;
    OK(MPI_Type_contiguous(3, MPI_INT, &three));
    OK(MPI_Type_commit(&three));
    OK(MPI_Probe(0, 104, MPI_COMM_WORLD, &st));
    OK(MPI_Recv(buf, 5, three, 0, 104, MPI_COMM_WORLD, &st));
    OK(MPI_Get_count(&st, three, &n));
    CHECK(n == 2, "MPI_Get_count of 6 ints in 3-int elements: %d", n);
    OK(MPI_Get_elements(&st, three, &n));
    CHECK(n == 6, "MPI_Get_elements of 6 ints: %d", n);
    OK(MPI_Get_count(&st, MPI_DOUBLE, &n));
    CHECK(n == 3, "MPI_Get_count of 24 bytes as doubles: %d", n);
    MPI_Datatype five;
    OK(MPI_Type_contiguous(5, MPI_INT, &five));
    OK(MPI_Get_count(&st, five, &n));
    CHECK(n == MPI_UNDEFINED, "MPI_Get_count of 6 ints in 5-int elements: %d", n);
    /* A matched message too long for the buffer: MPI_ERR_TRUNCATE on the message's
     * communicator's handler (MPI_COMM_SELF's stays fatal). */
    OK(MPI_Mprobe(0, 105, MPI_COMM_WORLD, &m, &st));
    errors_return(MPI_COMM_WORLD, 1);
    EXPECT_ERR(MPI_Mrecv(buf, 2, MPI_INT, &m, &st), MPI_ERR_TRUNCATE, NULL);
    errors_return(MPI_COMM_WORLD, 0);
    OK(MPI_Type_free(&five));
    OK(MPI_Type_free(&three));
  }
}

/* On a communicator whose ranks are the world's reversed, statuses name its
 * ranks, not the world's. */
static void test_reordered(void) {
  MPI_Comm rev;
  OK(MPI_Comm_split(MPI_COMM_WORLD, 0, size - rank, &rev));
  int me, right, left, x = rank, got = -1;
  OK(MPI_Comm_rank(rev, &me));
  right = (me + 1) % size;
  left = (me + size - 1) % size;
  MPI_Status st;
  MPI_Request r;
  OK(MPI_Isend(&x, 1, MPI_INT, right, 115, rev, &r));
  OK(MPI_Probe(MPI_ANY_SOURCE, 115, rev, &st));
  CHECK(st.MPI_SOURCE == left, "MPI_Probe on a reordered communicator: source %d, expected %d",
        st.MPI_SOURCE, left);
  MPI_Message m;
  OK(MPI_Mprobe(MPI_ANY_SOURCE, 115, rev, &m, &st));
  CHECK(st.MPI_SOURCE == left, "MPI_Mprobe on a reordered communicator: source %d", st.MPI_SOURCE);
  OK(MPI_Mrecv(&got, 1, MPI_INT, &m, &st));
  CHECK(st.MPI_SOURCE == left && got == size - 1 - left,
        "MPI_Mrecv on a reordered communicator: source %d, got %d", st.MPI_SOURCE, got);
  OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
  OK(MPI_Sendrecv(&x, 1, MPI_INT, right, 116, &got, 1, MPI_INT, MPI_ANY_SOURCE, 116, rev, &st));
  CHECK(st.MPI_SOURCE == left && got == size - 1 - left,
        "MPI_Sendrecv on a reordered communicator: source %d, got %d", st.MPI_SOURCE, got);
  OK(MPI_Comm_free(&rev));
}

static void test_elements(void) {
  /* 5 ints into elements of 3: 1 whole element and 2 basic ones. */
  MPI_Status st;
  if (rank == 0) {
    int a[5] = {1, 2, 3, 4, 5};
    OK(MPI_Send(a, 5, MPI_INT, 1, 110, MPI_COMM_WORLD));
  } else if (rank == 1) {
    int b[9];
    MPI_Datatype three;
    OK(MPI_Type_contiguous(3, MPI_INT, &three));
    OK(MPI_Type_commit(&three));
    OK(MPI_Recv(b, 3, three, 0, 110, MPI_COMM_WORLD, &st));
    int n = -1;
    OK(MPI_Get_count(&st, three, &n));
    CHECK(n == MPI_UNDEFINED, "MPI_Get_count of 5 ints in 3-int elements: %d", n);
    OK(MPI_Get_elements(&st, three, &n));
    CHECK(n == 5, "MPI_Get_elements of 5 ints in 3-int elements: %d", n);
    CHECK(b[4] == 5, "the partial element holds %d", b[4]);
    OK(MPI_Type_free(&three));
  }
}

static void test_cancel(void) {
  int x = 0, flag = -1;
  MPI_Request r;
  MPI_Status st;
  OK(MPI_Irecv(&x, 1, MPI_INT, MPI_ANY_SOURCE, 120, MPI_COMM_WORLD, &r));
  OK(MPI_Cancel(&r));
  OK(MPI_Wait(&r, &st));
  OK(MPI_Test_cancelled(&st, &flag));
  CHECK(flag, "a receive nobody matched was not cancelled");
  /* A message of that tag, sent once the cancel is done, goes to the next
   * receive. */
  OK(MPI_Barrier(MPI_COMM_WORLD));
  if (rank == 0) {
    x = 5;
    OK(MPI_Send(&x, 1, MPI_INT, 1, 120, MPI_COMM_WORLD));
  } else if (rank == 1) {
    OK(MPI_Recv(&x, 1, MPI_INT, 0, 120, MPI_COMM_WORLD, &st));
    OK(MPI_Test_cancelled(&st, &flag));
    CHECK(x == 5 && !flag, "the receive after a cancelled one got %d", x);
  }
}

/* Cancelling a send may succeed or not, but not both: a cancelled message is
 * never received, one that was not is. A freed active send still goes. */
static void test_cancel_send(void) {
  int x = 61, cancelled = -1, got = -1, flag = -1;
  MPI_Request r;
  MPI_Status st;
  if (rank == 0) {
    OK(MPI_Isend(&x, 1, MPI_INT, 1, 125, MPI_COMM_WORLD, &r));
    OK(MPI_Cancel(&r));
    OK(MPI_Wait(&r, &st));
    OK(MPI_Test_cancelled(&st, &cancelled));
    OK(MPI_Send(&cancelled, 1, MPI_INT, 1, 126, MPI_COMM_WORLD));
    OK(MPI_Isend(&x, 1, MPI_INT, 1, 127, MPI_COMM_WORLD, &r));
    OK(MPI_Request_free(&r));
    CHECK(r == MPI_REQUEST_NULL, "MPI_Request_free left an active request's handle");
  } else if (rank == 1) {
    OK(MPI_Recv(&cancelled, 1, MPI_INT, 0, 126, MPI_COMM_WORLD, &st));
    if (cancelled) {
      OK(MPI_Iprobe(0, 125, MPI_COMM_WORLD, &flag, &st));
      CHECK(!flag, "a cancelled send arrived");
    } else {
      OK(MPI_Recv(&got, 1, MPI_INT, 0, 125, MPI_COMM_WORLD, &st));
      CHECK(got == 61, "a send whose cancel failed brought %d", got);
    }
    OK(MPI_Recv(&got, 1, MPI_INT, 0, 127, MPI_COMM_WORLD, &st));
    CHECK(got == 61, "a freed active send brought %d", got);
  }
}

/* An empty status, its MPI_ERROR field MPI_SUCCESS too (MPI 4.1 §3.7.3), where
 * the call had it MPI_ERR_OTHER. */
static void expect_empty_whole(const MPI_Status *st, const char *what) {
  expect_empty(st, MPI_ANY_SOURCE, what);
  CHECK(st->MPI_ERROR == MPI_SUCCESS, "%s: MPI_ERROR %d in an empty status", what,
        st->MPI_ERROR);
}

/* A rendezvous send and a synchronous send that no receive matched are
 * cancelled: their waits return though the receiver never posts a receive for
 * them, and they are never received. A send whose receive was posted before it
 * started is matched on arrival, before its cancel: it completes as sent. A
 * synchronous send to this process is cancelled within MPI_Cancel. */
static void test_cancel_unmatched_sends(void) {
  enum { BIG = 1 << 18 }; /* ints: 1 MiB, past every transport's eager limit */
  int *big = malloc(sizeof(int) * BIG);
  int one = 7, flag = -1, cancelled[2] = {-1, -1};
  MPI_Request r;
  MPI_Status st;
  if (rank == 0) {
    fill(big, BIG, 3);
    OK(MPI_Isend(big, BIG, MPI_INT, 1, 130, MPI_COMM_WORLD, &r));
    OK(MPI_Cancel(&r));
    OK(MPI_Wait(&r, &st));
    OK(MPI_Test_cancelled(&st, &cancelled[0]));
    OK(MPI_Issend(&one, 1, MPI_INT, 1, 131, MPI_COMM_WORLD, &r));
    OK(MPI_Cancel(&r));
    OK(MPI_Wait(&r, &st));
    OK(MPI_Test_cancelled(&st, &cancelled[1]));
    CHECK(cancelled[0] && cancelled[1],
          "unmatched sends not cancelled: rendezvous %d, synchronous %d",
          cancelled[0], cancelled[1]);
    OK(MPI_Send(cancelled, 2, MPI_INT, 1, 132, MPI_COMM_WORLD));
    OK(MPI_Recv(&flag, 1, MPI_INT, 1, 133, MPI_COMM_WORLD, &st));
    OK(MPI_Isend(big, BIG, MPI_INT, 1, 134, MPI_COMM_WORLD, &r));
    OK(MPI_Cancel(&r));
    OK(MPI_Wait(&r, &st));
    OK(MPI_Test_cancelled(&st, &flag));
    CHECK(!flag, "a send matched on arrival was cancelled");
  } else if (rank == 1) {
    OK(MPI_Recv(cancelled, 2, MPI_INT, 0, 132, MPI_COMM_WORLD, &st));
    for (int t = 130; t <= 131; t++) {
      OK(MPI_Iprobe(0, t, MPI_COMM_WORLD, &flag, &st));
      CHECK(!flag, "a cancelled send of tag %d arrived", t);
    }
    memset(big, 0, sizeof(int) * BIG);
    OK(MPI_Irecv(big, BIG, MPI_INT, 0, 134, MPI_COMM_WORLD, &r));
    OK(MPI_Send(&one, 1, MPI_INT, 0, 133, MPI_COMM_WORLD));
    OK(MPI_Wait(&r, &st));
    expect_filled(big, BIG, 3, "a send whose cancel came after its match");
  }
  /* To this process: cancelled inside MPI_Cancel. */
  OK(MPI_Issend(&one, 1, MPI_INT, rank, 135, MPI_COMM_WORLD, &r));
  OK(MPI_Cancel(&r));
  OK(MPI_Request_get_status(r, &flag, &st));
  CHECK(flag, "a synchronous send to this process was not complete after its cancel");
  OK(MPI_Test_cancelled(&st, &flag));
  CHECK(flag, "a synchronous send to this process was not cancelled");
  OK(MPI_Wait(&r, &st));
  OK(MPI_Iprobe(rank, 135, MPI_COMM_WORLD, &flag, &st));
  CHECK(!flag, "a cancelled send to this process arrived");
  free(big);
}

static void test_completions(void) {
  MPI_Request nulls[3] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  MPI_Status st, sts[4];
  int index = -1, flag = -1, outcount = -1, indices[4];
  MPI_Request r = MPI_REQUEST_NULL;
  st.MPI_ERROR = MPI_ERR_OTHER;
  OK(MPI_Wait(&r, &st));
  expect_empty_whole(&st, "MPI_Wait on MPI_REQUEST_NULL");
  st.MPI_ERROR = MPI_ERR_OTHER;
  OK(MPI_Test(&r, &flag, &st));
  CHECK(flag, "MPI_Test on MPI_REQUEST_NULL: flag %d", flag);
  expect_empty_whole(&st, "MPI_Test on MPI_REQUEST_NULL");
  st.MPI_ERROR = MPI_ERR_OTHER;
  OK(MPI_Request_get_status(r, &flag, &st));
  expect_empty_whole(&st, "MPI_Request_get_status of MPI_REQUEST_NULL");
  st.MPI_ERROR = MPI_ERR_OTHER;
  OK(MPI_Waitany(3, nulls, &index, &st));
  CHECK(index == MPI_UNDEFINED, "MPI_Waitany of nulls: index %d", index);
  expect_empty_whole(&st, "MPI_Waitany of nulls");
  st.MPI_ERROR = MPI_ERR_OTHER;
  OK(MPI_Testany(3, nulls, &index, &flag, &st));
  CHECK(flag && index == MPI_UNDEFINED, "MPI_Testany of nulls: flag %d index %d",
        flag, index);
  expect_empty_whole(&st, "MPI_Testany of nulls");
  st.MPI_ERROR = MPI_ERR_OTHER;
  OK(MPI_Request_get_status_any(3, nulls, &index, &flag, &st));
  CHECK(flag && index == MPI_UNDEFINED, "MPI_Request_get_status_any of nulls: flag %d index %d",
        flag, index);
  expect_empty_whole(&st, "MPI_Request_get_status_any of nulls");
  OK(MPI_Waitsome(3, nulls, &outcount, indices, sts));
  CHECK(outcount == MPI_UNDEFINED, "MPI_Waitsome of nulls: %d", outcount);
  OK(MPI_Testsome(3, nulls, &outcount, indices, sts));
  CHECK(outcount == MPI_UNDEFINED, "MPI_Testsome of nulls: %d", outcount);
  OK(MPI_Testall(3, nulls, &flag, sts));
  CHECK(flag, "MPI_Testall of nulls: %d", flag);
  OK(MPI_Waitall(0, NULL, NULL));

  if (rank == 1) {
    /* Waitall with nulls among the requests: their statuses are empty. */
    int a = -1, b = -1, go = 0;
    MPI_Request rs[4] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL, MPI_REQUEST_NULL,
                         MPI_REQUEST_NULL};
    OK(MPI_Irecv(&a, 1, MPI_INT, 0, 131, MPI_COMM_WORLD, &rs[1]));
    OK(MPI_Irecv(&b, 1, MPI_INT, 0, 132, MPI_COMM_WORLD, &rs[3]));
    /* All or nothing: only the first is sent yet. */
    OK(MPI_Send(&go, 1, MPI_INT, 0, 130, MPI_COMM_WORLD));
    flag = 0;
    while (!flag)
      OK(MPI_Request_get_status(rs[1], &flag, MPI_STATUS_IGNORE));
    CHECK(rs[1] != MPI_REQUEST_NULL, "MPI_Request_get_status freed the request");
    for (int i = 0; i < 50; i++) {
      OK(MPI_Testall(4, rs, &flag, sts));
      CHECK(!flag, "MPI_Testall true while a receive has no message");
      CHECK(rs[1] != MPI_REQUEST_NULL && rs[3] != MPI_REQUEST_NULL,
            "MPI_Testall freed requests without completing all");
    }
    OK(MPI_Send(&go, 1, MPI_INT, 0, 130, MPI_COMM_WORLD));
    for (int i = 0; i < 4; i++)
      sts[i].MPI_SOURCE = -99;
    OK(MPI_Waitall(4, rs, sts));
    expect_empty(&sts[0], MPI_ANY_SOURCE, "MPI_Waitall: the first null");
    expect_empty(&sts[2], MPI_ANY_SOURCE, "MPI_Waitall: the second null");
    expect_status(&sts[1], 0, 131, MPI_INT, 1, "MPI_Waitall");
    expect_status(&sts[3], 0, 132, MPI_INT, 1, "MPI_Waitall");
    CHECK(a == 131 && b == 132, "MPI_Waitall received %d and %d", a, b);

    /* Waitany and Testany: each once, in whatever order, the rest null. */
    int v[4], done[4] = {0};
    for (int i = 0; i < 4; i++)
      OK(MPI_Irecv(&v[i], 1, MPI_INT, 0, 140 + i, MPI_COMM_WORLD, &rs[i]));
    OK(MPI_Send(&go, 1, MPI_INT, 0, 130, MPI_COMM_WORLD));
    for (int k = 0; k < 2; k++) {
      OK(MPI_Waitany(4, rs, &index, &st));
      CHECK(index >= 0 && index < 4 && !done[index] && rs[index] == MPI_REQUEST_NULL,
            "MPI_Waitany: index %d", index);
      CHECK(st.MPI_TAG == 140 + index && v[index] == 140 + index,
            "MPI_Waitany: index %d has tag %d", index, st.MPI_TAG);
      done[index] = 1;
    }
    for (int k = 0; k < 2;) {
      OK(MPI_Testany(4, rs, &index, &flag, &st));
      if (!flag)
        continue;
      CHECK(index >= 0 && index < 4 && !done[index], "MPI_Testany: index %d", index);
      CHECK(st.MPI_TAG == 140 + index, "MPI_Testany: index %d has tag %d",
            index, st.MPI_TAG);
      done[index] = 1;
      k++;
    }
    OK(MPI_Testany(4, rs, &index, &flag, &st));
    CHECK(flag && index == MPI_UNDEFINED, "MPI_Testany when all are done");

    /* Waitsome and Testsome. */
    for (int i = 0; i < 4; i++) {
      done[i] = 0;
      OK(MPI_Irecv(&v[i], 1, MPI_INT, 0, 150 + i, MPI_COMM_WORLD, &rs[i]));
    }
    OK(MPI_Send(&go, 1, MPI_INT, 0, 130, MPI_COMM_WORLD));
    int total = 0, use_wait = 1;
    while (total < 4) {
      if (use_wait)
        OK(MPI_Waitsome(4, rs, &outcount, indices, sts));
      else
        OK(MPI_Testsome(4, rs, &outcount, indices, sts));
      use_wait = !use_wait;
      CHECK(outcount >= 0 && outcount <= 4 - total, "MPI_Waitsome/Testsome: %d",
            outcount);
      for (int k = 0; k < outcount; k++) {
        int i = indices[k];
        CHECK(i >= 0 && i < 4 && !done[i] && rs[i] == MPI_REQUEST_NULL,
              "MPI_Waitsome/Testsome: index %d", i);
        CHECK(sts[k].MPI_TAG == 150 + i && v[i] == 150 + i,
              "MPI_Waitsome/Testsome: index %d has tag %d", i, sts[k].MPI_TAG);
        done[i] = 1;
      }
      total += outcount;
    }
    OK(MPI_Waitsome(4, rs, &outcount, indices, sts));
    CHECK(outcount == MPI_UNDEFINED, "MPI_Waitsome when all are done: %d",
          outcount);

    /* MPI_Request_get_status reports a completed request's status and leaves the
     * request for the call that completes it. */
    int got[3] = {0, 0, 0};
    OK(MPI_Irecv(got, 3, MPI_INT, MPI_ANY_SOURCE, 135, MPI_COMM_WORLD, &r));
    OK(MPI_Send(&go, 1, MPI_INT, 0, 130, MPI_COMM_WORLD));
    flag = 0;
    while (!flag)
      OK(MPI_Request_get_status(r, &flag, &st));
    CHECK(r != MPI_REQUEST_NULL, "MPI_Request_get_status freed the request");
    expect_status(&st, 0, 135, MPI_INT, 3, "MPI_Request_get_status");
    CHECK(got[2] == 137, "the buffer after MPI_Request_get_status: %d", got[2]);
    OK(MPI_Request_get_status(r, &flag, &st));
    CHECK(flag, "MPI_Request_get_status asked twice");
    expect_status(&st, 0, 135, MPI_INT, 3, "MPI_Request_get_status asked twice");
    OK(MPI_Wait(&r, &st));
    CHECK(r == MPI_REQUEST_NULL, "MPI_Wait after MPI_Request_get_status left the request");
    expect_status(&st, 0, 135, MPI_INT, 3, "MPI_Wait after MPI_Request_get_status");
    /* The same on a persistent request, twice. */
    MPI_Request p;
    OK(MPI_Recv_init(got, 3, MPI_INT, 0, 136, MPI_COMM_WORLD, &p));
    for (int k = 0; k < 2; k++) {
      OK(MPI_Start(&p));
      OK(MPI_Send(&go, 1, MPI_INT, 0, 130, MPI_COMM_WORLD));
      flag = 0;
      while (!flag)
        OK(MPI_Request_get_status(p, &flag, &st));
      expect_status(&st, 0, 136, MPI_INT, 3, "MPI_Request_get_status of a persistent request");
      OK(MPI_Wait(&p, &st));
      CHECK(p != MPI_REQUEST_NULL, "MPI_Wait freed a persistent request");
      expect_status(&st, 0, 136, MPI_INT, 3, "MPI_Wait of a persistent request after "
                                             "MPI_Request_get_status");
    }
    OK(MPI_Request_free(&p));
  } else if (rank == 0) {
    int x, go;
    OK(MPI_Recv(&go, 1, MPI_INT, 1, 130, MPI_COMM_WORLD, &st));
    x = 131;
    OK(MPI_Send(&x, 1, MPI_INT, 1, 131, MPI_COMM_WORLD));
    OK(MPI_Recv(&go, 1, MPI_INT, 1, 130, MPI_COMM_WORLD, &st));
    x = 132;
    OK(MPI_Send(&x, 1, MPI_INT, 1, 132, MPI_COMM_WORLD));
    OK(MPI_Recv(&go, 1, MPI_INT, 1, 130, MPI_COMM_WORLD, &st));
    for (int i = 3; i >= 0; i--) {
      x = 140 + i;
      OK(MPI_Send(&x, 1, MPI_INT, 1, 140 + i, MPI_COMM_WORLD));
    }
    OK(MPI_Recv(&go, 1, MPI_INT, 1, 130, MPI_COMM_WORLD, &st));
    for (int i = 0; i < 4; i++) {
      x = 150 + (i * 3) % 4;
      OK(MPI_Send(&x, 1, MPI_INT, 1, x, MPI_COMM_WORLD));
    }
    int three[3] = {135, 136, 137};
    OK(MPI_Recv(&go, 1, MPI_INT, 1, 130, MPI_COMM_WORLD, &st));
    OK(MPI_Send(three, 3, MPI_INT, 1, 135, MPI_COMM_WORLD));
    for (int k = 0; k < 2; k++) {
      OK(MPI_Recv(&go, 1, MPI_INT, 1, 130, MPI_COMM_WORLD, &st));
      OK(MPI_Send(three, 3, MPI_INT, 1, 136, MPI_COMM_WORLD));
    }
  }
}

static void test_persistent(void) {
  enum { ROUNDS = 10 };
  int out[4], in[4], flag = -1;
  MPI_Request r[2];
  MPI_Status sts[2], st;
  if (rank < 2) {
    int peer = 1 - rank;
    OK(MPI_Recv_init(in, 4, MPI_INT, peer, 160, MPI_COMM_WORLD, &r[0]));
    if (rank == 0)
      OK(MPI_Send_init(out, 4, MPI_INT, peer, 160, MPI_COMM_WORLD, &r[1]));
    else
      OK(MPI_Ssend_init(out, 4, MPI_INT, peer, 160, MPI_COMM_WORLD, &r[1]));
    /* Inactive: complete at once, with an empty status, and stay. */
    OK(MPI_Test(&r[0], &flag, &st));
    CHECK(flag && r[0] != MPI_REQUEST_NULL, "MPI_Test of an inactive request");
    expect_empty(&st, MPI_ANY_SOURCE, "MPI_Test of an inactive request");
    OK(MPI_Waitall(2, r, sts));
    CHECK(r[0] != MPI_REQUEST_NULL && r[1] != MPI_REQUEST_NULL,
          "MPI_Waitall freed inactive persistent requests");
    for (int k = 0; k < ROUNDS; k++) {
      fill(out, 4, rank * 100 + k);
      if (k % 2) {
        OK(MPI_Startall(2, r));
      } else {
        OK(MPI_Start(&r[0]));
        OK(MPI_Start(&r[1]));
      }
      OK(MPI_Waitall(2, r, sts));
      CHECK(r[0] != MPI_REQUEST_NULL && r[1] != MPI_REQUEST_NULL,
            "MPI_Waitall freed persistent requests");
      expect_status(&sts[0], peer, 160, MPI_INT, 4, "a persistent receive");
      expect_filled(in, 4, peer * 100 + k, "a persistent receive");
    }
    OK(MPI_Request_free(&r[0]));
    OK(MPI_Request_free(&r[1]));
    CHECK(r[0] == MPI_REQUEST_NULL && r[1] == MPI_REQUEST_NULL,
          "MPI_Request_free left the handles");
  }
  /* MPI_PROC_NULL: every start completes at once. */
  OK(MPI_Send_init(out, 4, MPI_INT, MPI_PROC_NULL, 161, MPI_COMM_WORLD, &r[0]));
  OK(MPI_Recv_init(in, 4, MPI_INT, MPI_PROC_NULL, 161, MPI_COMM_WORLD, &r[1]));
  for (int k = 0; k < 3; k++) {
    OK(MPI_Startall(2, r));
    OK(MPI_Waitall(2, r, sts));
    expect_empty(&sts[1], MPI_PROC_NULL, "a persistent receive from MPI_PROC_NULL");
  }
  OK(MPI_Request_free(&r[0]));
  OK(MPI_Request_free(&r[1]));
}

/* Small nonblocking sends, more at once than the transport holds (some end as
 * they start, others wait for room: the receiver sleeps, then waits in a
 * barrier), completed in every way: each is a request until completed, not
 * persistent, named alike in Fortran, looked at without being freed; every
 * message arrives, in order. */
static void test_many_sends(void) {
  enum { N = 4096, LEN = 64, TAG = 170 };
  static MPI_Request r[N];
  static int out[N][LEN], in[LEN];
  static MPI_Status sts[N];
  static int indices[N];
  int flag = 0, index = -1, outcount = 0;
  MPI_Status st;
  if (rank == 0) {
    for (int i = 0; i < N; i++) {
      fill(out[i], LEN, i);
      OK(MPI_Isend(out[i], LEN, MPI_INT, 1, TAG, MPI_COMM_WORLD, &r[i]));
      CHECK(r[i] != MPI_REQUEST_NULL, "MPI_Isend %d gave a null request", i);
    }
  } else if (rank == 1) {
    usleep(100000); /* (outside the library: nothing drains the transport) */
  }
  OK(MPI_Barrier(MPI_COMM_WORLD));
  if (rank == 0) {
    OK(MPI_Request_get_status(r[0], &flag, &st));
    CHECK(r[0] != MPI_REQUEST_NULL, "MPI_Request_get_status freed a send's request");
    CHECK(MPI_Request_f2c(MPI_Request_c2f(r[1])) == r[1],
          "a send's request did not come back from its Fortran handle");
    /* (A request's error outside a completion has no communicator.) */
    errors_return(MPI_COMM_SELF, 1);
    EXPECT_ERR(MPI_Start(&r[2]), MPI_ERR_REQUEST, NULL);
    errors_return(MPI_COMM_SELF, 0);
    OK(MPI_Request_free(&r[3]));
    CHECK(r[3] == MPI_REQUEST_NULL, "MPI_Request_free left a send's handle");
    OK(MPI_Wait(&r[0], &st));
    CHECK(r[0] == MPI_REQUEST_NULL, "MPI_Wait left a send's handle");
    for (flag = 0; !flag;)
      OK(MPI_Test(&r[1], &flag, &st));
    CHECK(r[1] == MPI_REQUEST_NULL, "MPI_Test left a send's handle");
    /* A hundred of the first thousand, one at a time. */
    for (int k = 0; k < 100; k++) {
      OK(MPI_Waitany(1000, r, &index, &st));
      CHECK(index >= 0 && index < 1000 && r[index] == MPI_REQUEST_NULL,
            "MPI_Waitany gave index %d", index);
    }
    /* The next thousand, some at a time, each once. */
    int done = 0;
    for (;;) {
      OK(MPI_Waitsome(1000, r + 1000, &outcount, indices, sts));
      if (outcount == MPI_UNDEFINED)
        break;
      for (int k = 0; k < outcount; k++)
        CHECK(r[1000 + indices[k]] == MPI_REQUEST_NULL,
              "MPI_Waitsome left request %d", 1000 + indices[k]);
      done += outcount;
    }
    CHECK(done == 1000, "MPI_Waitsome completed %d sends of 1000", done);
    for (flag = 0; !flag;)
      OK(MPI_Testall(1000, r + 2000, &flag, sts));
    OK(MPI_Waitall(N, r, sts));
    for (int i = 0; i < N; i++)
      CHECK(r[i] == MPI_REQUEST_NULL, "request %d left after MPI_Waitall", i);
  } else if (rank == 1) {
    for (int i = 0; i < N; i++) {
      OK(MPI_Recv(in, LEN, MPI_INT, 0, TAG, MPI_COMM_WORLD, &st));
      expect_filled(in, LEN, i, "one of many small sends");
    }
  }
}

static void test_proc_null(void) {
  int x = 3;
  MPI_Request r;
  MPI_Status st;
  OK(MPI_Send(&x, 1, MPI_INT, MPI_PROC_NULL, 170, MPI_COMM_WORLD));
  OK(MPI_Ssend(&x, 1, MPI_INT, MPI_PROC_NULL, 170, MPI_COMM_WORLD));
  OK(MPI_Rsend(&x, 1, MPI_INT, MPI_PROC_NULL, 170, MPI_COMM_WORLD));
  OK(MPI_Recv(&x, 1, MPI_INT, MPI_PROC_NULL, 170, MPI_COMM_WORLD, &st));
  expect_empty(&st, MPI_PROC_NULL, "MPI_Recv from MPI_PROC_NULL");
  CHECK(x == 3, "a receive from MPI_PROC_NULL wrote %d", x);
  OK(MPI_Isend(&x, 1, MPI_INT, MPI_PROC_NULL, 170, MPI_COMM_WORLD, &r));
  OK(MPI_Wait(&r, &st));
  OK(MPI_Irecv(&x, 1, MPI_INT, MPI_PROC_NULL, MPI_ANY_TAG, MPI_COMM_WORLD, &r));
  OK(MPI_Wait(&r, &st));
  expect_empty(&st, MPI_PROC_NULL, "MPI_Irecv from MPI_PROC_NULL");
}

/* Single-completion calls leave the status's MPI_ERROR field alone. */
static void test_error_field(void) {
  MPI_Status st;
  int x = 1;
  if (rank == 0) {
    OK(MPI_Send(&x, 1, MPI_INT, 1, 175, MPI_COMM_WORLD));
  } else if (rank == 1) {
    st.MPI_ERROR = 12345;
    OK(MPI_Recv(&x, 1, MPI_INT, 0, 175, MPI_COMM_WORLD, &st));
    CHECK(st.MPI_ERROR == 12345, "MPI_Recv changed MPI_ERROR to %d", st.MPI_ERROR);
  }
}

/* Messages of several MiB (sent in the message layer's rendezvous), contiguous
 * and not, blocking and not, each way; synchronous and buffered too. */
static void test_large(void) {
  enum { N = 1 << 19 }; /* doubles: 4 MiB */
  if (rank > 1)
    return;
  int peer = 1 - rank;
  double *a = malloc(sizeof(double) * N), *b = malloc(sizeof(double) * N);
  CHECK(a && b, "malloc");
  for (int i = 0; i < N; i++)
    a[i] = rank * 1e7 + i;
  MPI_Status st;
  /* Synchronous: not complete before the receive is posted, whatever the size. */
  if (rank == 0) {
    MPI_Request r;
    int flag = -1, go = 0;
    OK(MPI_Issend(a, N, MPI_DOUBLE, peer, 183, MPI_COMM_WORLD, &r));
    for (int i = 0; i < 100; i++) {
      OK(MPI_Test(&r, &flag, MPI_STATUS_IGNORE));
      CHECK(!flag, "a large MPI_Issend completed before its receive was posted");
    }
    OK(MPI_Send(&go, 1, MPI_INT, peer, 184, MPI_COMM_WORLD));
    OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
  } else {
    int go;
    OK(MPI_Recv(&go, 1, MPI_INT, peer, 184, MPI_COMM_WORLD, &st));
    OK(MPI_Recv(b, N, MPI_DOUBLE, peer, 183, MPI_COMM_WORLD, &st));
    CHECK(b[N - 1] == N - 1, "a large MPI_Issend: last element %g", b[N - 1]);
  }
  /* Buffered: copied out at once; detaching waits until it has left. */
  if (rank == 0) {
    int room = 0;
    OK(MPI_Pack_size(N, MPI_DOUBLE, MPI_COMM_WORLD, &room));
    room += MPI_BSEND_OVERHEAD;
    char *attached = malloc(room);
    OK(MPI_Buffer_attach(attached, room));
    OK(MPI_Bsend(a, N, MPI_DOUBLE, peer, 185, MPI_COMM_WORLD));
    for (int i = 0; i < N; i++)
      a[i] = -2;
    void *back;
    int back_size;
    OK(MPI_Buffer_detach(&back, &back_size));
    CHECK(back == attached && back_size == room, "detaching after a large MPI_Bsend");
    free(attached);
    for (int i = 0; i < N; i++)
      a[i] = rank * 1e7 + i;
  } else {
    OK(MPI_Recv(b, N, MPI_DOUBLE, peer, 185, MPI_COMM_WORLD, &st));
    for (int i = 0; i < N; i++)
      CHECK(b[i] == i, "a large MPI_Bsend: element %d is %g", i, b[i]);
  }
  if (rank == 0) {
    OK(MPI_Send(a, N, MPI_DOUBLE, peer, 180, MPI_COMM_WORLD));
    OK(MPI_Recv(b, N, MPI_DOUBLE, peer, 180, MPI_COMM_WORLD, &st));
  } else {
    OK(MPI_Recv(b, N, MPI_DOUBLE, peer, 180, MPI_COMM_WORLD, &st));
    OK(MPI_Send(a, N, MPI_DOUBLE, peer, 180, MPI_COMM_WORLD));
  }
  expect_status(&st, peer, 180, MPI_DOUBLE, N, "a 4 MiB message");
  for (int i = 0; i < N; i++)
    CHECK(b[i] == peer * 1e7 + i, "a 4 MiB message: element %d is %g", i, b[i]);
  /* Both at once, nonblocking, every other double (2 MiB over 4). */
  MPI_Datatype strided;
  OK(MPI_Type_vector(N / 2, 1, 2, MPI_DOUBLE, &strided));
  OK(MPI_Type_commit(&strided));
  for (int i = 0; i < N; i++)
    b[i] = -1;
  MPI_Request r[2];
  OK(MPI_Irecv(b, 1, strided, peer, 181, MPI_COMM_WORLD, &r[0]));
  OK(MPI_Isend(a, 1, strided, peer, 181, MPI_COMM_WORLD, &r[1]));
  OK(MPI_Waitall(2, r, MPI_STATUSES_IGNORE));
  for (int i = 0; i < N; i++) {
    double want = i % 2 ? -1 : peer * 1e7 + i;
    CHECK(b[i] == want, "a strided 2 MiB message: element %d is %g, expected %g",
          i, b[i], want);
  }
  /* Strided one way, contiguous the other (the same signature). */
  if (rank == 0) {
    OK(MPI_Send(a, 1, strided, peer, 182, MPI_COMM_WORLD));
  } else {
    OK(MPI_Recv(b, N / 2, MPI_DOUBLE, peer, 182, MPI_COMM_WORLD, &st));
    for (int i = 0; i < N / 2; i++)
      CHECK(b[i] == peer * 1e7 + 2 * i, "strided to contiguous: element %d is %g",
            i, b[i]);
  }
  OK(MPI_Type_free(&strided));
  free(a);
  free(b);
}

/* MPI_Isendrecv(_replace) around the ring, small and 1 MiB (the send buffer
 * reused before the request completes: its data was taken at the call); a send to
 * a rank that does not exist fails and leaves no receive behind. */
static void test_isendrecv(void) {
  int right = (rank + 1) % size, left = (rank + size - 1) % size;
  int out = rank, in = -1;
  MPI_Request r;
  MPI_Status st;
  OK(MPI_Isendrecv(&out, 1, MPI_INT, right, 12, &in, 1, MPI_INT, left, 12, MPI_COMM_WORLD, &r));
  out = -7;
  OK(MPI_Wait(&r, &st));
  CHECK(in == left && st.MPI_SOURCE == left && st.MPI_TAG == 12, "isendrecv got %d from %d", in,
        st.MPI_SOURCE);
  int n = 1 << 18, *big = malloc(sizeof(int) * n), *got = malloc(sizeof(int) * n);
  fill(big, n, rank);
  OK(MPI_Isendrecv(big, n, MPI_INT, right, 13, got, n, MPI_INT, MPI_ANY_SOURCE, 13,
                   MPI_COMM_WORLD, &r));
  fill(big, n, 99);
  OK(MPI_Wait(&r, &st));
  expect_filled(got, n, left, "a 1 MiB isendrecv");
  fill(big, n, rank);
  OK(MPI_Isendrecv_replace(big, n, MPI_INT, right, 14, left, 14, MPI_COMM_WORLD, &r));
  OK(MPI_Wait(&r, &st));
  expect_filled(big, n, left, "a 1 MiB isendrecv_replace");
  free(big);
  free(got);
  errors_return(MPI_COMM_WORLD, 1);
  EXPECT_ERR(MPI_Isendrecv(&out, 1, MPI_INT, size, 15, &in, 1, MPI_INT, left, 15,
                           MPI_COMM_WORLD, &r),
             MPI_ERR_RANK, NULL);
  errors_return(MPI_COMM_WORLD, 0);
  out = rank;
  OK(MPI_Sendrecv(&out, 1, MPI_INT, right, 15, &in, 1, MPI_INT, left, 15, MPI_COMM_WORLD, &st));
  CHECK(in == left, "after a refused isendrecv, the receive got %d", in);
}

int main(int argc, char **argv) {
  start("p2p", &argc, &argv);
  CHECK(size >= 2, "p2p needs 2 ranks or more, not %d", size);
  test_standard();
  test_synchronous();
  test_ready();
  test_buffered();
  test_sendrecv();
  test_wildcards();
  test_order();
  test_contexts();
  test_truncation();
  test_probe();
  test_reordered();
  test_elements();
  test_cancel();
  test_cancel_send();
  test_cancel_unmatched_sends();
  test_completions();
  test_persistent();
  test_many_sends();
  test_proc_null();
  test_error_field();
  test_large();
  test_isendrecv();
  OK(MPI_Barrier(MPI_COMM_WORLD));
  return finish();
}
