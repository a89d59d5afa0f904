/* Long on purpose: one program holds every one-sided check,
 * so that each rank count is one launch. */
/* rma.c: one-sided communication at any number of ranks (run at 1 to 4), every
 * result checked against values computed here. Windows over user memory
 * (MPI_Win_create) and allocated (MPI_Win_allocate): their group, name,
 * attributes and error handler; a window on a reordered communicator. Put and Get
 * of contiguous and derived types (vector, indexed) on either side, with
 * displacement units other than 1 (and different on each rank), under fences:
 * every rank puts to its right neighbour and gets from its left; MPI_PROC_NULL
 * as a target. Passive target: shared and exclusive locks (mutual exclusion of
 * read-modify-write), lock_all (waiting for a writer), a lock that others take
 * and give back in a loop handed on to a writer that waits, every flush,
 * MPI_Win_sync.
 * Post/start/complete/wait and MPI_Win_test. Accumulates: sums on MPI_CHAR,
 * MPI_INT, MPI_LONG_LONG, MPI_FLOAT, MPI_DOUBLE, MAX and MIN, REPLACE, bitwise
 * operations, derived types; Get_accumulate (MPI_NO_OP as an atomic read),
 * Fetch_and_op, Compare_and_swap;
 * a window whose base is not 8-byte aligned; and every rank incrementing the same
 * elements of rank 0's window 1000 times at once (int, long long, char modulo
 * 256, double), whose totals must be exact, and through a type of aligned and
 * misaligned ints beside single fetch-and-adds; 16 KiB get-accumulates mixed with
 * short accumulates on rank 0's window; a get-accumulate of 5000 ints; long
 * accumulates under exclusive locks, taken and asserted (MPI_MODE_NOCHECK). Dynamic
 * windows: regions attached, reached by address with every kind of operation under
 * lock_all and fences, detached and attached again, and their errors.
 * Request-based operations under lock_all, waited for together and one by one,
 * into a derived type, freed before completion,
 * and refused outside a passive-target epoch; a lock after a fence that started no
 * epoch; a rank that only flushes its own window serves the others' accumulates; MPI_PROC_NULL as the target of locks, flushes and requests. Errors: no
 * epoch, out of the window, a bad rank, a freed window, sizes that do not match,
 * through MPI_ERRORS_RETURN and a user's handler. */
#define _GNU_SOURCE /* RUSAGE_THREAD */
#include "check.h"
#include <stddef.h>
#include <sys/resource.h>

static int left, right;

/* What rank r's window holds at element i to begin with. */
static int val(int r, int i) { return r * 1000 + i; }

/* Ints in the windows of the put/get tests. */
#define N 96

/* A window over `mem` (n ints, MPI_Win_create), or allocated (n ints, its base
 * written to *mem), each int set to val(rank, i); the epoch that follows is open
 * to every kind of synchronization. */
static MPI_Win int_window(int allocate, int **mem, int n) {
  MPI_Win win;
  if (allocate)
    OK(MPI_Win_allocate(n * sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD,
                        mem, &win));
  else
    OK(MPI_Win_create(*mem, n * sizeof(int), sizeof(int), MPI_INFO_NULL,
                      MPI_COMM_WORLD, &win));
  for (int i = 0; i < n; i++)
    (*mem)[i] = val(rank, i);
  OK(MPI_Win_fence(MPI_MODE_NOPRECEDE | MPI_MODE_NOSUCCEED, win));
  return win;
}

/* --- Windows: group, name, attributes, flavors. --- */

/* The predefined attributes of `win`: the base itself, pointers to the others. */
static void check_attrs(MPI_Win win, void *base, MPI_Aint bytes, int du, int flavor) {
  void *b = NULL;
  MPI_Aint *sz = NULL;
  int *u = NULL, *f = NULL, *m = NULL, flags[5];
  OK(MPI_Win_get_attr(win, MPI_WIN_BASE, &b, &flags[0]));
  OK(MPI_Win_get_attr(win, MPI_WIN_SIZE, &sz, &flags[1]));
  OK(MPI_Win_get_attr(win, MPI_WIN_DISP_UNIT, &u, &flags[2]));
  OK(MPI_Win_get_attr(win, MPI_WIN_CREATE_FLAVOR, &f, &flags[3]));
  OK(MPI_Win_get_attr(win, MPI_WIN_MODEL, &m, &flags[4]));
  for (int i = 0; i < 5; i++)
    CHECK(flags[i], "predefined window attribute %d is missing", i);
  CHECK(b == base && *sz == bytes && *u == du && *f == flavor && *m == MPI_WIN_UNIFIED,
        "attributes: base %p (not %p), size %ld (%ld), unit %d (%d), flavor %d (%d), "
        "model %d", b, base, (long)*sz, (long)bytes, *u, du, *f, flavor, *m);
}

static void test_windows(void) {
  static int buf[16];
  int n, len;
  MPI_Win win;
  OK(MPI_Win_create(buf, sizeof buf, sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &win));
  MPI_Group g, world;
  OK(MPI_Win_get_group(win, &g));
  OK(MPI_Comm_group(MPI_COMM_WORLD, &world));
  OK(MPI_Group_compare(g, world, &n));
  CHECK(n == MPI_IDENT, "the window's group compares %d to the world's", n);
  OK(MPI_Group_rank(g, &n));
  CHECK(n == rank, "rank %d in the window's group", n);
  OK(MPI_Group_free(&g));
  OK(MPI_Group_free(&world));
  char name[MPI_MAX_OBJECT_NAME];
  OK(MPI_Win_get_name(win, name, &len));
  CHECK(len == 0 && name[0] == 0, "a new window is named \"%s\" (%d)", name, len);
  OK(MPI_Win_set_name(win, "rma window"));
  OK(MPI_Win_get_name(win, name, &len));
  CHECK(len == 10 && strcmp(name, "rma window") == 0, "the name \"%s\" (%d)", name, len);
  check_attrs(win, buf, sizeof buf, sizeof(int), MPI_WIN_FLAVOR_CREATE);
  MPI_Errhandler eh;
  OK(MPI_Win_get_errhandler(win, &eh));
  CHECK(eh == MPI_ERRORS_ARE_FATAL, "a new window's error handler is not fatal");
  OK(MPI_Win_free(&win));
  CHECK(win == MPI_WIN_NULL, "MPI_Win_free left the handle");

  /* Allocated: a size of its own on each rank, 8-byte units. */
  MPI_Aint bytes = 8 * (rank + 1);
  double *mem = NULL;
  OK(MPI_Win_allocate(bytes, 8, MPI_INFO_NULL, MPI_COMM_WORLD, &mem, &win));
  CHECK(mem != NULL, "MPI_Win_allocate gave no memory");
  mem[rank] = rank;
  check_attrs(win, mem, bytes, 8, MPI_WIN_FLAVOR_ALLOCATE);
  OK(MPI_Win_free(&win));
  /* An empty window (a null base) on MPI_COMM_SELF. */
  OK(MPI_Win_create(NULL, 0, 1, MPI_INFO_NULL, MPI_COMM_SELF, &win));
  check_attrs(win, NULL, 0, 1, MPI_WIN_FLAVOR_CREATE);
  OK(MPI_Win_free(&win));

  /* A window on the world reversed: targets are ranks of the window's group. Every
   * rank puts its world rank into slot [its window rank] of window rank 0. */
  MPI_Comm rev;
  OK(MPI_Comm_split(MPI_COMM_WORLD, 0, size - rank, &rev));
  int *slots = NULL, wrank = size - 1 - rank;
  OK(MPI_Win_allocate(size * sizeof(int), sizeof(int), MPI_INFO_NULL, rev, &slots, &win));
  for (int i = 0; i < size; i++)
    slots[i] = -1;
  OK(MPI_Win_fence(MPI_MODE_NOPRECEDE, win));
  OK(MPI_Put(&rank, 1, MPI_INT, 0, wrank, 1, MPI_INT, win));
  OK(MPI_Win_fence(MPI_MODE_NOSUCCEED, win));
  if (wrank == 0)
    for (int i = 0; i < size; i++)
      CHECK(slots[i] == size - 1 - i, "reversed window: slot %d holds %d", i, slots[i]);
  OK(MPI_Win_free(&win));
  OK(MPI_Comm_free(&rev));
}

/* --- Put and Get under fences. --- */

/* The ints a vector (4 blocks of 2, stride 3) and an indexed type (blocks of 1, 3,
 * 2, 2 at 0, 2, 7, 11) take, in order. */
static const int vec_at[8] = {0, 1, 3, 4, 6, 7, 9, 10};
static const int idx_at[8] = {0, 2, 3, 4, 7, 8, 11, 12};

static void test_fence(int allocate) {
  static int user[N];
  int *mem = user;
  MPI_Win win = int_window(allocate, &mem, N);
  MPI_Datatype vec, idx;
  int bl[4] = {1, 3, 2, 2}, dp[4] = {0, 2, 7, 11};
  OK(MPI_Type_vector(4, 2, 3, MPI_INT, &vec));
  OK(MPI_Type_indexed(4, bl, dp, MPI_INT, &idx));
  OK(MPI_Type_commit(&vec));
  OK(MPI_Type_commit(&idx));
  int out[24], in[8], vin[16];
  for (int i = 0; i < 24; i++)
    out[i] = -val(rank, i) - 1;
  for (int i = 0; i < 16; i++)
    vin[i] = -7;
  OK(MPI_Win_fence(MPI_MODE_NOPRECEDE, win));
  /* Contiguous: 8 ints to the right's [8, 16), 8 from the left's [0, 8). */
  OK(MPI_Put(out, 8, MPI_INT, right, 8, 8, MPI_INT, win));
  OK(MPI_Get(in, 8, MPI_INT, left, 0, 8, MPI_INT, win));
  /* A vector here to an indexed type there (at 24); two vectors there from 16
   * contiguous ints here (at 56, each 11 ints long). */
  OK(MPI_Put(out, 1, vec, right, 24, 1, idx, win));
  OK(MPI_Put(out + 8, 16, MPI_INT, right, 56, 2, vec, win));
  /* The left's vector at 40 into an indexed layout here. */
  OK(MPI_Get(vin, 1, idx, left, 40, 1, vec, win));
  /* A vector to this rank's own [80, 88), while the get above may be under way. */
  OK(MPI_Put(out, 1, vec, rank, 80, 8, MPI_INT, win));
  /* MPI_PROC_NULL as the target: nothing moves. */
  int pn = 5, pr = -1;
  OK(MPI_Put(out, 8, MPI_INT, MPI_PROC_NULL, 0, 8, MPI_INT, win));
  OK(MPI_Get(&pr, 1, MPI_INT, MPI_PROC_NULL, 0, 1, MPI_INT, win));
  OK(MPI_Accumulate(&pn, 1, MPI_INT, MPI_PROC_NULL, 0, 1, MPI_INT, MPI_SUM, win));
  OK(MPI_Fetch_and_op(&pn, &pr, MPI_INT, MPI_PROC_NULL, 0, MPI_SUM, win));
  OK(MPI_Compare_and_swap(&pn, &pn, &pr, MPI_INT, MPI_PROC_NULL, 0, win));
  OK(MPI_Win_fence(MPI_MODE_NOSUCCEED, win));
  CHECK(pr == -1, "an operation on MPI_PROC_NULL wrote %d", pr);
  int expect[N];
  for (int i = 0; i < N; i++)
    expect[i] = val(rank, i);
  for (int i = 0; i < 8; i++) {
    expect[8 + i] = -val(left, i) - 1;
    expect[24 + idx_at[i]] = -val(left, vec_at[i]) - 1;
    expect[56 + vec_at[i]] = -val(left, 8 + i) - 1;
    expect[56 + 11 + vec_at[i]] = -val(left, 16 + i) - 1;
    expect[80 + i] = -val(rank, vec_at[i]) - 1;
    CHECK(in[i] == val(left, i), "get: element %d is %d", i, in[i]);
  }
  for (int i = 0; i < N; i++)
    CHECK(mem[i] == expect[i], "after the puts (%s) element %d is %d, not %d",
          allocate ? "allocated" : "created", i, mem[i], expect[i]);
  for (int i = 0, k = 0; i < 16; i++) {
    int want = k < 8 && idx_at[k] == i ? val(left, 40 + vec_at[k++]) : -7;
    CHECK(vin[i] == want, "get of a vector: element %d is %d, not %d", i, vin[i], want);
  }
  OK(MPI_Type_free(&vec));
  OK(MPI_Type_free(&idx));
  OK(MPI_Win_free(&win));

  /* Displacement units of 4, 8 or 12 bytes by rank: the target's scales. */
  int du = 4 * (1 + rank % 3);
  unsigned char *bytes = NULL;
  OK(MPI_Win_allocate(256, du, MPI_INFO_NULL, MPI_COMM_WORLD, &bytes, &win));
  for (int i = 0; i < 256; i++)
    bytes[i] = (unsigned char)(rank * 31 + i);
  int three[3] = {rank + 1, rank + 2, rank + 3}, got[3];
  OK(MPI_Win_fence(MPI_MODE_NOPRECEDE, win));
  OK(MPI_Put(three, 3, MPI_INT, right, 5, 3, MPI_INT, win));
  OK(MPI_Get(got, 3, MPI_INT, left, 10, 3, MPI_INT, win));
  OK(MPI_Win_fence(MPI_MODE_NOSUCCEED, win));
  int here[3], ldu = 4 * (1 + left % 3);
  memcpy(here, bytes + 5 * du, sizeof here);
  unsigned char lb[12];
  for (int i = 0; i < 12; i++)
    lb[i] = (unsigned char)(left * 31 + 10 * ldu + i);
  for (int i = 0; i < 3; i++)
    CHECK(here[i] == left + 1 + i, "unit %d: put element %d is %d", du, i, here[i]);
  CHECK(memcmp(got, lb, 12) == 0, "unit %d: the get read other bytes", ldu);
  OK(MPI_Win_free(&win));
}

/* --- Passive target. --- */

static void test_passive(int allocate) {
  static int user[N];
  int *mem = user, out[8], in[8], x;
  MPI_Win win = int_window(allocate, &mem, N);
  for (int i = 0; i < 8; i++)
    out[i] = -val(rank, i) - 1;
  /* Exclusive on the right: put; then, once every put is done, read it here and,
   * under a shared lock, the left's. */
  OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, right, 0, win));
  OK(MPI_Put(out, 4, MPI_INT, right, 0, 4, MPI_INT, win));
  OK(MPI_Win_unlock(right, win));
  OK(MPI_Barrier(MPI_COMM_WORLD));
  OK(MPI_Win_lock(MPI_LOCK_SHARED, rank, MPI_MODE_NOCHECK, win));
  for (int i = 0; i < 4; i++)
    CHECK(mem[i] == -val(left, i) - 1, "exclusive put: element %d is %d", i, mem[i]);
  OK(MPI_Win_unlock(rank, win));
  OK(MPI_Win_lock(MPI_LOCK_SHARED, left, 0, win));
  OK(MPI_Get(in, 4, MPI_INT, left, 0, 4, MPI_INT, win));
  OK(MPI_Win_unlock(left, win));
  int l2 = (left - 1 + size) % size;
  for (int i = 0; i < 4; i++)
    CHECK(in[i] == -val(l2, i) - 1, "shared get: element %d is %d", i, in[i]);

  /* Mutual exclusion: 20 read-modify-writes (get, flush, put) of rank 0's [10]
   * by every rank under exclusive locks lose nothing. */
  for (int k = 0; k < 20; k++) {
    OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win));
    OK(MPI_Get(&x, 1, MPI_INT, 0, 10, 1, MPI_INT, win));
    OK(MPI_Win_flush(0, win));
    x++;
    OK(MPI_Put(&x, 1, MPI_INT, 0, 10, 1, MPI_INT, win));
    OK(MPI_Win_unlock(0, win));
  }
  OK(MPI_Barrier(MPI_COMM_WORLD));
  OK(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win));
  OK(MPI_Get(&x, 1, MPI_INT, 0, 10, 1, MPI_INT, win));
  OK(MPI_Win_unlock(0, win));
  CHECK(x == val(0, 10) + 20 * size, "exclusive increments: %d, not %d", x,
        val(0, 10) + 20 * size);

  /* lock_all: puts to the right flushed, gets from the left completed locally. */
  OK(MPI_Win_lock_all(0, win));
  OK(MPI_Put(out, 4, MPI_INT, right, 20, 4, MPI_INT, win));
  OK(MPI_Win_flush(right, win));
  OK(MPI_Get(in, 4, MPI_INT, left, 30, 4, MPI_INT, win));
  OK(MPI_Win_flush_local(left, win));
  for (int i = 0; i < 4; i++)
    CHECK(in[i] == val(left, 30 + i), "lock_all get: element %d is %d", i, in[i]);
  OK(MPI_Put(out + 4, 2, MPI_INT, right, 24, 2, MPI_INT, win));
  OK(MPI_Get(in, 2, MPI_INT, left, 34, 2, MPI_INT, win));
  OK(MPI_Win_flush_local_all(win));
  CHECK(in[0] == val(left, 34) && in[1] == val(left, 35), "flush_local_all: get");
  OK(MPI_Win_flush_all(win));
  /* A store here made visible by MPI_Win_sync, read by the right neighbour. */
  mem[40] = rank * 7 + 1;
  OK(MPI_Win_sync(win));
  OK(MPI_Barrier(MPI_COMM_WORLD));
  OK(MPI_Get(&x, 1, MPI_INT, left, 40, 1, MPI_INT, win));
  OK(MPI_Win_flush(left, win));
  CHECK(x == left * 7 + 1, "a store synced at the left reads %d", x);
  /* Puts into rank 0's [50 + rank], flushed: seen there after a barrier. */
  x = 100 + rank;
  OK(MPI_Put(&x, 1, MPI_INT, 0, 50 + rank, 1, MPI_INT, win));
  OK(MPI_Win_flush(0, win));
  OK(MPI_Barrier(MPI_COMM_WORLD));
  OK(MPI_Win_sync(win));
  if (rank == 0)
    for (int r = 0; r < size; r++)
      CHECK(mem[50 + r] == 100 + r, "flushed put of rank %d reads %d", r, mem[50 + r]);
  OK(MPI_Win_unlock_all(win));
  OK(MPI_Barrier(MPI_COMM_WORLD));
  OK(MPI_Win_sync(win));
  for (int i = 0; i < 6; i++)
    CHECK(mem[20 + i] == -val(left, i) - 1, "lock_all put: element %d is %d", 20 + i,
          mem[20 + i]);
  OK(MPI_Win_free(&win));
}

/* lock_all waits for a writer: rank 0 holds the last rank's lock exclusively
 * while the others call MPI_Win_lock_all, and lets go only after it has written
 * its last value there (polling the library meanwhile, so that it answers the
 * others' requests of its own lock word at once); each of them reads that value. */
static void test_lock_all_waits_for_a_writer(void) {
  if (size < 2)
    return;
  int *mem, last = size - 1, x = 1;
  MPI_Win win = int_window(1, &mem, 1);
  if (rank == 0) {
    OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, last, 0, win));
    OK(MPI_Put(&x, 1, MPI_INT, last, 0, 1, MPI_INT, win));
    OK(MPI_Win_flush(last, win));
  }
  OK(MPI_Barrier(MPI_COMM_WORLD));
  if (rank == 0) {
    int flag;
    double t0 = MPI_Wtime();
    while (MPI_Wtime() - t0 < 0.2)
      OK(MPI_Iprobe(MPI_ANY_SOURCE, 999, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE));
    x = 2;
    OK(MPI_Put(&x, 1, MPI_INT, last, 0, 1, MPI_INT, win));
    OK(MPI_Win_unlock(last, win));
  } else {
    OK(MPI_Win_lock_all(0, win));
    OK(MPI_Get(&x, 1, MPI_INT, last, 0, 1, MPI_INT, win));
    OK(MPI_Win_unlock_all(win));
    CHECK(x == 2, "lock_all, while a writer held the lock, read %d, not its last value 2", x);
  }
  OK(MPI_Barrier(MPI_COMM_WORLD));
  OK(MPI_Win_free(&win));
}

/* A lock handed on to a writer that waits (MPICH's linked_list): every rank but
 * the last takes rank 0's lock exclusively, reads a flag there and gives the lock
 * back, again and again, until the last rank, taking the same lock once, has set
 * the flag. Rank 0 locks its own member, the others lock it from afar; over tcp
 * rank 0 serves the others' tries only inside its own calls. The readers give up
 * after 20 s, so that a writer kept out for ever fails the check, not the run. */
static void test_lock_handed_on(void) {
  if (size < 2)
    return;
  int *mem, flag = 0, one = 1, last = size - 1;
  MPI_Win win = int_window(1, &mem, 1);
  *mem = 0;
  OK(MPI_Barrier(MPI_COMM_WORLD));
  if (rank == last) {
    /* The readers loop by the time the writer first tries. */
    double t0 = MPI_Wtime();
    while (MPI_Wtime() - t0 < 0.1)
      ;
    OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win));
    OK(MPI_Put(&one, 1, MPI_INT, 0, 0, 1, MPI_INT, win));
    OK(MPI_Win_unlock(0, win));
  } else {
    double t0 = MPI_Wtime();
    long tries = 0;
    while (flag == 0 && MPI_Wtime() - t0 < 20) {
      OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win));
      OK(MPI_Get(&flag, 1, MPI_INT, 0, 0, 1, MPI_INT, win));
      OK(MPI_Win_unlock(0, win));
      tries++;
    }
    CHECK(flag == 1, "rank %d took rank 0's lock %ld times in %.0f s and never saw the "
          "writer's flag: the writer never got the lock", rank, tries, MPI_Wtime() - t0);
  }
  OK(MPI_Barrier(MPI_COMM_WORLD));
  OK(MPI_Win_free(&win));
}

/* A get-accumulate of more elements than a transport has registrations (each
 * fetching atomic holds one while it is in flight). */
static void test_many_fetches(void) {
  enum { MANY = 5000 };
  int *mem = NULL, *one = malloc(MANY * sizeof(int)), *old = malloc(MANY * sizeof(int));
  CHECK(one && old, "out of memory");
  MPI_Win win;
  OK(MPI_Win_allocate(MANY * sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &mem,
                      &win));
  OK(MPI_Win_lock_all(0, win));
  for (int i = 0; i < MANY; i++) {
    mem[i] = i;
    one[i] = 1;
    old[i] = -1;
  }
  OK(MPI_Win_sync(win));
  OK(MPI_Barrier(MPI_COMM_WORLD));
  OK(MPI_Get_accumulate(one, MANY, MPI_INT, old, MANY, MPI_INT, right, 0, MANY, MPI_INT,
                        MPI_SUM, win));
  OK(MPI_Win_flush(right, win));
  OK(MPI_Barrier(MPI_COMM_WORLD));
  OK(MPI_Win_sync(win));
  for (int i = 0; i < MANY; i++) {
    CHECK(old[i] == i, "get-accumulate of %d ints: element %d was %d", MANY, i, old[i]);
    CHECK(mem[i] == i + 1, "get-accumulate of %d ints: element %d is %d", MANY, i, mem[i]);
  }
  OK(MPI_Win_unlock_all(win));
  OK(MPI_Win_free(&win));
  free(one);
  free(old);
}

/* --- Request-based operations (Rput, Rget, Raccumulate, Rget_accumulate). --- */

static void test_requests(int allocate) {
  static int user[N];
  int *mem = user, out[4], in[4], old[4], one = 1;
  MPI_Win win = int_window(allocate, &mem, N);
  MPI_Request req[4];
  for (int i = 0; i < 4; i++)
    out[i] = -val(rank, 60 + i) - 1;
  OK(MPI_Win_lock_all(0, win));
  /* A put to the right and a get from the left, waited for together. */
  OK(MPI_Rput(out, 4, MPI_INT, right, 60, 4, MPI_INT, win, &req[0]));
  OK(MPI_Rget(in, 4, MPI_INT, left, 64, 4, MPI_INT, win, &req[1]));
  /* Sums into rank 0's [70], the old values fetched from its [71..74]. */
  OK(MPI_Raccumulate(&one, 1, MPI_INT, 0, 70, 1, MPI_INT, MPI_SUM, win, &req[2]));
  OK(MPI_Rget_accumulate(&one, 1, MPI_INT, old, 1, MPI_INT, 0, 71, 1, MPI_INT, MPI_SUM,
                         win, &req[3]));
  OK(MPI_Waitall(4, req, MPI_STATUSES_IGNORE));
  for (int i = 0; i < 4; i++)
    CHECK(req[i] == MPI_REQUEST_NULL, "request %d is not freed by its wait", i);
  for (int i = 0; i < 4; i++)
    CHECK(in[i] == val(left, 64 + i), "Rget: element %d is %d", i, in[i]);
  CHECK(old[0] >= val(0, 71) && old[0] < val(0, 71) + size,
        "Rget_accumulate fetched %d (from %d, %d ranks adding)", old[0], val(0, 71), size);
  /* MPI_PROC_NULL as a target: complete, nothing moved; MPI_Test finds it done. */
  int flag = 0;
  OK(MPI_Rput(out, 4, MPI_INT, MPI_PROC_NULL, 0, 4, MPI_INT, win, &req[0]));
  OK(MPI_Test(&req[0], &flag, MPI_STATUS_IGNORE));
  CHECK(flag && req[0] == MPI_REQUEST_NULL, "a request to MPI_PROC_NULL is not done");
  /* Eight gets in flight together, completed one by one; one looked at with
   * MPI_Request_get_status until done; a get into every other int (unpacked);
   * a put freed before it completes (the unlock completes it). */
  MPI_Request many[8];
  int got[8], strided[8] = {0}, later[2] = {-7, -8};
  for (int i = 0; i < 8; i++) {
    got[i] = -1;
    OK(MPI_Rget(&got[i], 1, MPI_INT, left, i, 1, MPI_INT, win, &many[i]));
  }
  for (flag = 0; !flag;)
    OK(MPI_Request_get_status(many[7], &flag, MPI_STATUS_IGNORE));
  for (int k = 0; k < 8; k++) {
    int i = -1;
    OK(MPI_Waitany(8, many, &i, MPI_STATUS_IGNORE));
    CHECK(i >= 0 && got[i] == val(left, i), "Rget %d of 8 got %d", i, i >= 0 ? got[i] : 0);
  }
  MPI_Datatype every_other;
  OK(MPI_Type_vector(4, 1, 2, MPI_INT, &every_other));
  OK(MPI_Type_commit(&every_other));
  OK(MPI_Rget(strided, 1, every_other, left, 8, 4, MPI_INT, win, &req[0]));
  OK(MPI_Type_free(&every_other));
  OK(MPI_Wait(&req[0], MPI_STATUS_IGNORE));
  for (int i = 0; i < 4; i++)
    CHECK(strided[2 * i] == val(left, 8 + i) && strided[2 * i + 1] == 0,
          "strided Rget: %d, %d at %d", strided[2 * i], strided[2 * i + 1], 2 * i);
  OK(MPI_Rput(later, 2, MPI_INT, right, 80, 2, MPI_INT, win, &req[0]));
  OK(MPI_Request_free(&req[0]));
  OK(MPI_Win_unlock_all(win));
  OK(MPI_Barrier(MPI_COMM_WORLD));
  OK(MPI_Win_sync(win));
  for (int i = 0; i < 4; i++)
    CHECK(mem[60 + i] == -val(left, 60 + i) - 1, "Rput: element %d is %d", 60 + i,
          mem[60 + i]);
  if (rank == 0)
    CHECK(mem[70] == val(0, 70) + size && mem[71] == val(0, 71) + size,
          "Raccumulate / Rget_accumulate: %d and %d", mem[70], mem[71]);
  CHECK(mem[80] == -7 && mem[81] == -8, "the freed Rput: %d, %d", mem[80], mem[81]);

  /* A lock after a fence that no operation followed (which started no epoch);
   * MPI_PROC_NULL as the target of locks, flushes and request-based operations,
   * which do nothing. */
  int seen = -1;
  OK(MPI_Win_fence(0, win));
  OK(MPI_Win_lock(MPI_LOCK_SHARED, right, 0, win));
  OK(MPI_Get(&seen, 1, MPI_INT, right, 2, 1, MPI_INT, win));
  OK(MPI_Win_unlock(right, win));
  CHECK(seen == val(right, 2), "a get under a lock after a fence: %d", seen);
  OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, MPI_PROC_NULL, 0, win));
  OK(MPI_Rget(&seen, 1, MPI_INT, MPI_PROC_NULL, 0, 1, MPI_INT, win, &req[0]));
  OK(MPI_Win_flush(MPI_PROC_NULL, win));
  OK(MPI_Win_unlock(MPI_PROC_NULL, win));
  OK(MPI_Wait(&req[0], MPI_STATUS_IGNORE));
  CHECK(seen == val(right, 2), "a get from MPI_PROC_NULL wrote %d", seen);
  OK(MPI_Barrier(MPI_COMM_WORLD));

  /* Outside a passive-target epoch, and without a place for the request. */
  OK(MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN));
  OK(MPI_Win_fence(0, win));
  EXPECT_ERR(MPI_Rget(in, 1, MPI_INT, right, 0, 1, MPI_INT, win, &req[0]), MPI_ERR_RMA_SYNC,
             "passive-target");
  OK(MPI_Win_fence(MPI_MODE_NOSUCCEED, win));
  OK(MPI_Win_lock(MPI_LOCK_SHARED, right, 0, win));
  EXPECT_ERR(MPI_Rput(out, 1, MPI_INT, right, 0, 1, MPI_INT, win, NULL), MPI_ERR_ARG,
             "request");
  OK(MPI_Win_unlock(right, win));
  OK(MPI_Win_free(&win));
}

/* --- Dynamic windows (MPI_Win_create_dynamic, attach, detach). --- */

static void test_dynamic(void) {
  MPI_Win win;
  OK(MPI_Win_create_dynamic(MPI_INFO_NULL, MPI_COMM_WORLD, &win));
  check_attrs(win, MPI_BOTTOM, 0, 1, MPI_WIN_FLAVOR_DYNAMIC);
  int *a = malloc(N * sizeof(int));
  long long *b = malloc(8 * sizeof(long long));
  CHECK(a && b, "out of memory");
  for (int i = 0; i < N; i++)
    a[i] = val(rank, i);
  for (int i = 0; i < 8; i++)
    b[i] = 0;
  OK(MPI_Win_attach(win, a, N * sizeof(int)));
  OK(MPI_Win_attach(win, b, 8 * sizeof(long long)));
  MPI_Aint mine[2], all[128];
  OK(MPI_Get_address(a, &mine[0]));
  OK(MPI_Get_address(b, &mine[1]));
  OK(MPI_Allgather(mine, 2, MPI_AINT, all, 2, MPI_AINT, MPI_COMM_WORLD));
  MPI_Aint la = all[2 * left], ra = all[2 * right], b0 = all[1];

  /* Under lock_all: a get, a put, a strided put, sums, a fetch and a swap. */
  int in[4], out[4], strided[8];
  long long one = 1, fetched = -1, zero = 0, mark = rank + 1, was = -1;
  for (int i = 0; i < 4; i++)
    out[i] = -val(rank, 10 + i) - 1;
  for (int i = 0; i < 8; i++)
    strided[i] = 500 + rank * 10 + i;
  MPI_Datatype every_other;
  OK(MPI_Type_vector(4, 1, 2, MPI_INT, &every_other));
  OK(MPI_Type_commit(&every_other));
  OK(MPI_Win_lock_all(0, win));
  OK(MPI_Get(in, 4, MPI_INT, left, la + 5 * sizeof(int), 4, MPI_INT, win));
  OK(MPI_Put(out, 4, MPI_INT, right, ra + 10 * sizeof(int), 4, MPI_INT, win));
  OK(MPI_Put(strided, 4, MPI_INT, right, ra + 20 * sizeof(int), 1, every_other, win));
  OK(MPI_Accumulate(&one, 1, MPI_LONG_LONG, 0, b0, 1, MPI_LONG_LONG, MPI_SUM, win));
  OK(MPI_Fetch_and_op(&one, &fetched, MPI_LONG_LONG, 0, b0 + 8, MPI_SUM, win));
  OK(MPI_Compare_and_swap(&mark, &zero, &was, MPI_LONG_LONG, right, all[2 * right + 1] + 16,
                          win));
  /* Bytes summed: no transport atomic takes them (shipped, or under the mutex). */
  char c = 1;
  OK(MPI_Accumulate(&c, 1, MPI_CHAR, 0, b0 + 24, 1, MPI_CHAR, MPI_SUM, win));
  OK(MPI_Win_flush_all(win));
  OK(MPI_Win_unlock_all(win));
  for (int i = 0; i < 4; i++)
    CHECK(in[i] == val(left, 5 + i), "dynamic get: element %d is %d", i, in[i]);
  CHECK(fetched >= 0 && fetched < size, "dynamic fetch_and_op fetched %lld", fetched);
  CHECK(was == 0, "dynamic compare_and_swap found %lld", was);
  OK(MPI_Barrier(MPI_COMM_WORLD));
  OK(MPI_Win_sync(win));
  for (int i = 0; i < 4; i++) {
    CHECK(a[10 + i] == -val(left, 10 + i) - 1, "dynamic put: element %d is %d", 10 + i,
          a[10 + i]);
    CHECK(a[20 + 2 * i] == 500 + left * 10 + i && a[21 + 2 * i] == val(rank, 21 + 2 * i),
          "dynamic strided put: elements %d, %d are %d, %d", 20 + 2 * i, 21 + 2 * i,
          a[20 + 2 * i], a[21 + 2 * i]);
  }
  CHECK(b[2] == left + 1, "dynamic compare_and_swap left %lld", b[2]);
  if (rank == 0)
    CHECK(b[0] == size && b[1] == size && ((char *)b)[24] == (char)size,
          "dynamic sums: %lld, %lld, %d", b[0], b[1], ((char *)b)[24]);
  OK(MPI_Type_free(&every_other));

  /* A fence epoch. */
  OK(MPI_Win_fence(0, win));
  int x = 7000 + rank;
  OK(MPI_Put(&x, 1, MPI_INT, right, ra + 40 * sizeof(int), 1, MPI_INT, win));
  OK(MPI_Win_fence(MPI_MODE_NOSUCCEED, win));
  CHECK(a[40] == 7000 + left, "dynamic put under fences: %d", a[40]);

  /* Detached and attached again: what peers knew of it is learnt afresh. */
  OK(MPI_Barrier(MPI_COMM_WORLD));
  OK(MPI_Win_detach(win, a));
  a[50] = 9000 + rank;
  OK(MPI_Win_attach(win, a, N * sizeof(int)));
  OK(MPI_Barrier(MPI_COMM_WORLD));
  OK(MPI_Win_lock(MPI_LOCK_SHARED, left, 0, win));
  OK(MPI_Get(&x, 1, MPI_INT, left, la + 50 * sizeof(int), 1, MPI_INT, win));
  OK(MPI_Win_unlock(left, win));
  CHECK(x == 9000 + left, "a get after the region was attached again: %d", x);

  /* Two regions one after the other: one access crosses from the first to the
   * second; once the second is detached, it is out of range. */
  int *two = malloc(64 * sizeof(int)), cross[16], back[16];
  CHECK(two != NULL, "out of memory");
  for (int i = 0; i < 64; i++)
    two[i] = 0;
  OK(MPI_Win_attach(win, two, 32 * sizeof(int)));
  OK(MPI_Win_attach(win, two + 32, 32 * sizeof(int)));
  MPI_Aint t0, tall[64];
  OK(MPI_Get_address(two, &t0));
  OK(MPI_Allgather(&t0, 1, MPI_AINT, tall, 1, MPI_AINT, MPI_COMM_WORLD));
  MPI_Aint tr = tall[right];
  for (int i = 0; i < 16; i++)
    cross[i] = 100 * rank + i;
  OK(MPI_Win_lock(MPI_LOCK_SHARED, right, 0, win));
  OK(MPI_Put(cross, 8, MPI_INT, right, tr + 28 * sizeof(int), 8, MPI_INT, win));
  OK(MPI_Accumulate(cross, 16, MPI_INT, right, tr + 40 * sizeof(int), 16, MPI_INT, MPI_SUM,
                    win));
  OK(MPI_Accumulate(cross, 16, MPI_INT, right, tr + 24 * sizeof(int), 16, MPI_INT, MPI_SUM,
                    win));
  OK(MPI_Win_flush(right, win));
  OK(MPI_Get(back, 16, MPI_INT, right, tr + 24 * sizeof(int), 16, MPI_INT, win));
  OK(MPI_Win_unlock(right, win));
  for (int i = 0; i < 16; i++) {
    int want = cross[i] + (i >= 4 && i < 12 ? cross[i - 4] : 0);
    CHECK(back[i] == want, "across two regions: element %d is %d, not %d", 24 + i, back[i],
          want);
  }
  OK(MPI_Barrier(MPI_COMM_WORLD));
  OK(MPI_Win_detach(win, two + 32));
  OK(MPI_Barrier(MPI_COMM_WORLD));
  OK(MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN));
  OK(MPI_Win_lock(MPI_LOCK_SHARED, right, 0, win));
  EXPECT_ERR(MPI_Get(back, 16, MPI_INT, right, tr + 24 * sizeof(int), 16, MPI_INT, win),
             MPI_ERR_RMA_RANGE, "no region attached");
  OK(MPI_Get(back, 8, MPI_INT, right, tr + 24 * sizeof(int), 8, MPI_INT, win));
  OK(MPI_Win_unlock(right, win));
  CHECK(back[4] == cross[4] + cross[0], "the first region after the second's detach: %d",
        back[4]);
  OK(MPI_Barrier(MPI_COMM_WORLD));
  OK(MPI_Win_detach(win, two));
  free(two);

  /* Errors. */
  OK(MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN));
  EXPECT_ERR(MPI_Win_attach(win, a + 1, sizeof(int)), MPI_ERR_RMA_ATTACH, "overlap");
  EXPECT_ERR(MPI_Win_detach(win, strided), MPI_ERR_RMA_ATTACH, "attached");
  OK(MPI_Win_lock(MPI_LOCK_SHARED, right, 0, win));
  EXPECT_ERR(MPI_Get(in, 1, MPI_INT, right, ra + N * sizeof(int), 1, MPI_INT, win),
             MPI_ERR_RMA_RANGE, "no region");
  OK(MPI_Win_unlock(right, win));
  OK(MPI_Barrier(MPI_COMM_WORLD));
  int *plain = NULL;
  MPI_Win other;
  OK(MPI_Win_allocate(sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &plain,
                      &other));
  OK(MPI_Win_set_errhandler(other, MPI_ERRORS_RETURN));
  EXPECT_ERR(MPI_Win_attach(other, a, sizeof(int)), MPI_ERR_RMA_FLAVOR, "dynamic");
  OK(MPI_Win_free(&other));
  OK(MPI_Win_detach(win, a));
  OK(MPI_Win_detach(win, b));
  OK(MPI_Win_free(&win));
  free(a);
  free(b);
}

/* --- Post/start/complete/wait and MPI_Win_test. --- */

static void test_pscw(void) {
  static int user[N];
  int *mem = user, out[4], in[4];
  MPI_Win win = int_window(0, &mem, N);
  MPI_Group world, from, to;
  OK(MPI_Comm_group(MPI_COMM_WORLD, &world));
  OK(MPI_Group_incl(world, 1, &left, &from));
  OK(MPI_Group_incl(world, 1, &right, &to));
  for (int round = 0; round < 2; round++) {
    for (int i = 0; i < 4; i++)
      out[i] = -val(rank, 10 * round + i) - 1;
    OK(MPI_Win_post(from, 0, win)); /* the left accesses this window */
    OK(MPI_Win_start(to, 0, win));  /* this rank accesses the right's */
    if (round == 0) { /* no passive-target epoch inside */
      OK(MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN));
      EXPECT_ERR(MPI_Win_lock(MPI_LOCK_SHARED, right, 0, win), MPI_ERR_RMA_SYNC,
                 "MPI_Win_start");
      EXPECT_ERR(MPI_Win_lock_all(0, win), MPI_ERR_RMA_SYNC, NULL);
      OK(MPI_Win_set_errhandler(win, MPI_ERRORS_ARE_FATAL));
    }
    OK(MPI_Put(out, 4, MPI_INT, right, 60 + 8 * round, 4, MPI_INT, win));
    OK(MPI_Get(in, 4, MPI_INT, right, 70 + 8 * round, 4, MPI_INT, win));
    OK(MPI_Win_complete(win));
    if (round == 0) {
      OK(MPI_Win_wait(win));
    } else {
      int flag = 0;
      while (!flag)
        OK(MPI_Win_test(win, &flag));
    }
    for (int i = 0; i < 4; i++) {
      CHECK(in[i] == val(right, 70 + 8 * round + i), "pscw round %d: get %d is %d",
            round, i, in[i]);
      CHECK(mem[60 + 8 * round + i] == -val(left, 10 * round + i) - 1,
            "pscw round %d: put %d is %d", round, i, mem[60 + 8 * round + i]);
    }
  }
  OK(MPI_Group_free(&from));
  OK(MPI_Group_free(&to));
  OK(MPI_Group_free(&world));
  OK(MPI_Win_free(&win));
}

/* --- MPI_Fetch_and_op on a pair type with a gap (MPI_SHORT_INT: a short, two
 * bytes of padding, an int), on a window made each way: the origin and the result
 * are C structs, not packed bytes. --- */

typedef struct {
  short a;
  int b;
} short_int_t;

static void test_padded_pair(int allocate) {
  static short_int_t user[5];
  short_int_t *mem = user, loc[4];
  MPI_Win win;
  if (allocate)
    OK(MPI_Win_allocate(sizeof user, sizeof *user, MPI_INFO_NULL, MPI_COMM_WORLD, &mem, &win));
  else
    OK(MPI_Win_create(mem, sizeof user, sizeof *user, MPI_INFO_NULL, MPI_COMM_WORLD, &win));
  mem[0].a = -1, mem[0].b = -1;
  for (int j = 1; j < 5; j++)
    mem[j].a = 100, mem[j].b = -1;
  OK(MPI_Win_fence(MPI_MODE_NOPRECEDE, win));
  /* MINLOC of four structs from every rank at rank 0 (runs of memory that join
   * one struct's int to the next one's short). */
  for (int j = 0; j < 4; j++)
    loc[j].a = (short)((rank * 3 + j) % 5), loc[j].b = rank;
  OK(MPI_Accumulate(loc, 4, MPI_SHORT_INT, 0, 1, 4, MPI_SHORT_INT, MPI_MINLOC, win));
  short_int_t mine = {(short)(rank + 1), 70000 + rank}, old, seen;
  old.a = seen.a = 0, old.b = seen.b = 0;
  OK(MPI_Fetch_and_op(&mine, &old, MPI_SHORT_INT, right, 0, MPI_REPLACE, win));
  OK(MPI_Win_fence(0, win));
  OK(MPI_Fetch_and_op(NULL, &seen, MPI_SHORT_INT, right, 0, MPI_NO_OP, win));
  OK(MPI_Win_fence(MPI_MODE_NOSUCCEED, win));
  const char *how = allocate ? "allocated" : "created";
  CHECK(old.a == -1 && old.b == -1, "%s: MPI_SHORT_INT fetched {%d, %d}", how, old.a, old.b);
  for (int j = 0; j < 4 && rank == 0; j++) {
    int least = 100, at = -1;
    for (int r = 0; r < size; r++)
      if ((r * 3 + j) % 5 < least)
        least = (r * 3 + j) % 5, at = r;
    CHECK(mem[1 + j].a == least && mem[1 + j].b == at,
          "%s: MPI_MINLOC of MPI_SHORT_INT %d is {%d, %d}, not {%d, %d}", how, j, mem[1 + j].a,
          mem[1 + j].b, least, at);
  }
  CHECK(seen.a == rank + 1 && seen.b == 70000 + rank,
        "%s: MPI_SHORT_INT read back {%d, %d}, not {%d, %d}", how, seen.a, seen.b, rank + 1,
        70000 + rank);
  OK(MPI_Win_free(&win));
}

/* --- Accumulates. --- */

typedef struct {
  signed char c[4];
  int i[4], mx[4], mn[4], band[2], bor[2], bxor[2], rep[4], vec[12], cas_i;
  long long ll[4], fetch[4];
  float f[4];
  double d[4], dmx[4], dmn[4], dv[5], fd;
  unsigned char cas_b;
} acc_t;

#define AT(field) ((MPI_Aint)offsetof(acc_t, field))

/* What origin r adds at element j: sums, extremes, bits. */
static int add_of(int r, int j) { return r + j + 1; }
static int ext_of(int r, int j) { return (r * 5 + j * 3) % 7 - 3; }
static int bit_of(int r, int j) { return 1 << (r + 4 * j); }

/* The sum of every rank's add_of at element j. */
static int sum_of(int j) {
  int sum = 0;
  for (int r = 0; r < size; r++)
    sum += add_of(r, j);
  return sum;
}

static void test_accumulate(void) {
  static acc_t a;
  memset(&a, 0, sizeof a);
  for (int j = 0; j < 4; j++) {
    a.c[j] = (signed char)j, a.i[j] = val(rank, j), a.ll[j] = 1LL << 40;
    a.f[j] = 0.5f, a.d[j] = -1.25, a.mx[j] = a.dmx[j] = -1000, a.mn[j] = a.dmn[j] = 1000;
    a.fetch[j] = 1000 + rank;
  }
  a.band[0] = a.band[1] = -1, a.bxor[0] = a.bxor[1] = 0x5a5a;
  for (int j = 0; j < 12; j++)
    a.vec[j] = j;
  a.fd = 2.5, a.cas_i = 7, a.cas_b = 200;
  MPI_Win win;
  OK(MPI_Win_create(&a, sizeof a, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win));
  MPI_Datatype vec22, dvec22; /* elements 0, 1, 3, 4 */
  OK(MPI_Type_vector(2, 2, 3, MPI_INT, &vec22));
  OK(MPI_Type_vector(2, 2, 3, MPI_DOUBLE, &dvec22));
  OK(MPI_Type_commit(&vec22));
  OK(MPI_Type_commit(&dvec22));

  /* Every rank accumulates into every rank, under fences. */
  signed char c[4];
  int i4[4], mx[4], bits[2], bx[2], rep[4];
  long long ll[4];
  float f[4];
  double d[4], dm[4];
  for (int j = 0; j < 4; j++) {
    c[j] = (signed char)add_of(rank, j), i4[j] = add_of(rank, j);
    ll[j] = (long long)add_of(rank, j) << 33, f[j] = 0.25f * add_of(rank, j);
    d[j] = 0.5 * add_of(rank, j), mx[j] = ext_of(rank, j), dm[j] = 0.5 * ext_of(rank, j);
    rep[j] = val(rank, 100 + j);
  }
  for (int j = 0; j < 2; j++)
    bits[j] = bit_of(rank, j), bx[j] = (rank + 1) * 0x111 + j;
  OK(MPI_Win_fence(MPI_MODE_NOPRECEDE, win));
  for (int t = 0; t < size; t++) {
    OK(MPI_Accumulate(c, 4, MPI_CHAR, t, AT(c), 4, MPI_CHAR, MPI_SUM, win));
    OK(MPI_Accumulate(i4, 4, MPI_INT, t, AT(i), 4, MPI_INT, MPI_SUM, win));
    OK(MPI_Accumulate(ll, 4, MPI_LONG_LONG, t, AT(ll), 4, MPI_LONG_LONG, MPI_SUM, win));
    OK(MPI_Accumulate(f, 4, MPI_FLOAT, t, AT(f), 4, MPI_FLOAT, MPI_SUM, win));
    OK(MPI_Accumulate(d, 4, MPI_DOUBLE, t, AT(d), 4, MPI_DOUBLE, MPI_SUM, win));
    OK(MPI_Accumulate(mx, 4, MPI_INT, t, AT(mx), 4, MPI_INT, MPI_MAX, win));
    OK(MPI_Accumulate(mx, 4, MPI_INT, t, AT(mn), 4, MPI_INT, MPI_MIN, win));
    OK(MPI_Accumulate(dm, 4, MPI_DOUBLE, t, AT(dmx), 4, MPI_DOUBLE, MPI_MAX, win));
    OK(MPI_Accumulate(dm, 4, MPI_DOUBLE, t, AT(dmn), 4, MPI_DOUBLE, MPI_MIN, win));
    int nbits[2] = {~bits[0], ~bits[1]};
    OK(MPI_Accumulate(nbits, 2, MPI_INT, t, AT(band), 2, MPI_INT, MPI_BAND, win));
    OK(MPI_Accumulate(bits, 2, MPI_INT, t, AT(bor), 2, MPI_INT, MPI_BOR, win));
    OK(MPI_Accumulate(bx, 2, MPI_INT, t, AT(bxor), 2, MPI_INT, MPI_BXOR, win));
    /* Derived target type (vec[0,1,3,4]), derived origin (into vec[6..10)). */
    OK(MPI_Accumulate(i4, 4, MPI_INT, t, AT(vec), 1, vec22, MPI_SUM, win));
    int wide[5] = {i4[0], i4[1], -99, i4[2], i4[3]};
    OK(MPI_Accumulate(wide, 1, vec22, t, AT(vec[6]), 4, MPI_INT, MPI_SUM, win));
    OK(MPI_Accumulate(d, 4, MPI_DOUBLE, t, AT(dv), 1, dvec22, MPI_SUM, win));
  }
  OK(MPI_Accumulate(rep, 4, MPI_INT, right, AT(rep), 4, MPI_INT, MPI_REPLACE, win));
  OK(MPI_Win_fence(MPI_MODE_NOSUCCEED, win));
  for (int j = 0; j < 4; j++) {
    int sum = sum_of(j), emax = -1000, emin = 1000;
    for (int r = 0; r < size; r++) {
      emax = ext_of(r, j) > emax ? ext_of(r, j) : emax;
      emin = ext_of(r, j) < emin ? ext_of(r, j) : emin;
    }
    CHECK(a.c[j] == j + sum, "MPI_CHAR sum %d: %d", j, a.c[j]);
    CHECK(a.i[j] == val(rank, j) + sum, "MPI_INT sum %d: %d", j, a.i[j]);
    CHECK(a.ll[j] == (1LL << 40) + ((long long)sum << 33), "MPI_LONG_LONG sum %d", j);
    CHECK(a.f[j] == 0.5f + 0.25f * sum, "MPI_FLOAT sum %d: %g", j, a.f[j]);
    CHECK(a.d[j] == -1.25 + 0.5 * sum, "MPI_DOUBLE sum %d: %g", j, a.d[j]);
    CHECK(a.mx[j] == emax && a.mn[j] == emin, "MAX/MIN %d: %d %d", j, a.mx[j], a.mn[j]);
    CHECK(a.dmx[j] == 0.5 * emax && a.dmn[j] == 0.5 * emin, "double MAX/MIN %d", j);
    CHECK(a.rep[j] == val(left, 100 + j), "REPLACE %d: %d", j, a.rep[j]);
    CHECK(a.vec[vec_at[j]] == vec_at[j] + sum, "vector target %d: %d", j,
          a.vec[vec_at[j]]);
    CHECK(a.vec[6 + j] == 6 + j + sum, "vector origin %d: %d", j, a.vec[6 + j]);
    CHECK(a.dv[vec_at[j]] == 0.5 * sum, "double vector target %d: %g", j, a.dv[vec_at[j]]);
  }
  CHECK(a.vec[2] == 2 && a.vec[5] == 5 && a.vec[10] == 10 && a.dv[2] == 0,
        "the vectors' gaps changed");
  for (int j = 0; j < 2; j++) {
    int ors = 0, xors = 0x5a5a;
    for (int r = 0; r < size; r++)
      ors |= bit_of(r, j), xors ^= (r + 1) * 0x111 + j;
    CHECK(a.band[j] == ~ors && a.bor[j] == ors && a.bxor[j] == xors,
          "bitwise %d: %#x %#x %#x", j, a.band[j], a.bor[j], a.bxor[j]);
  }

  /* Fetching operations on the right neighbour's window, alone there, once it has
   * checked what the fence left there. */
  OK(MPI_Barrier(MPI_COMM_WORLD));
  long long add = 5, old = 0, one = 1;
  OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, right, 0, win));
  OK(MPI_Get_accumulate(&add, 1, MPI_LONG_LONG, &old, 1, MPI_LONG_LONG, right, AT(fetch),
                        1, MPI_LONG_LONG, MPI_SUM, win));
  CHECK(old == 1000 + right, "Get_accumulate fetched %lld", old);
  OK(MPI_Get_accumulate(NULL, 0, MPI_LONG_LONG, &old, 1, MPI_LONG_LONG, right,
                        AT(fetch), 1, MPI_LONG_LONG, MPI_NO_OP, win));
  CHECK(old == 1005 + right, "MPI_NO_OP read %lld", old);
  /* No element: any predefined operation, even one undefined on the type (mpi4py). */
  OK(MPI_Get_accumulate(NULL, 0, MPI_BYTE, NULL, 0, MPI_BYTE, right, AT(fetch), 0, MPI_BYTE,
                        MPI_SUM, win));
  OK(MPI_Fetch_and_op(&one, &old, MPI_LONG_LONG, right, AT(fetch[1]), MPI_SUM, win));
  OK(MPI_Fetch_and_op(NULL, &old, MPI_LONG_LONG, right, AT(fetch[1]), MPI_NO_OP, win));
  CHECK(old == 1001 + right, "Fetch_and_op then MPI_NO_OP read %lld", old);
  add = -3;
  OK(MPI_Fetch_and_op(&add, &old, MPI_LONG_LONG, right, AT(fetch[2]), MPI_REPLACE, win));
  CHECK(old == 1000 + right, "REPLACE fetched %lld", old);
  add = 77 + right;
  OK(MPI_Accumulate(&add, 1, MPI_LONG_LONG, right, AT(fetch[3]), 1, MPI_LONG_LONG, MPI_REPLACE,
                    win));
  OK(MPI_Fetch_and_op(NULL, &old, MPI_LONG_LONG, right, AT(fetch[3]), MPI_NO_OP, win));
  CHECK(old == 77 + right, "one element replaced, then read: %lld", old);
  int imax[4] = {-5, 100000, -5, 100000}, iold[5] = {0, 0, -9, 0, 0};
  OK(MPI_Get_accumulate(imax, 4, MPI_INT, iold, 1, vec22, right, AT(i), 4, MPI_INT,
                        MPI_MAX, win)); /* fetched into iold[0, 1, 3, 4] */
  double dadd = 0.75, dold = 0;
  OK(MPI_Fetch_and_op(&dadd, &dold, MPI_DOUBLE, right, AT(fd), MPI_SUM, win));
  CHECK(dold == 2.5, "double Fetch_and_op fetched %g", dold);
  OK(MPI_Fetch_and_op(NULL, &dold, MPI_DOUBLE, right, AT(fd), MPI_NO_OP, win));
  CHECK(dold == 3.25, "double MPI_NO_OP read %g", dold);
  /* Compare and swap: swapped when equal, untouched otherwise. */
  int cmp = 7, nv = 70, iresult = 0;
  OK(MPI_Compare_and_swap(&nv, &cmp, &iresult, MPI_INT, right, AT(cas_i), win));
  CHECK(iresult == 7, "CAS int fetched %d", iresult);
  OK(MPI_Compare_and_swap(&cmp, &cmp, &iresult, MPI_INT, right, AT(cas_i), win));
  CHECK(iresult == 70, "CAS int (no swap) fetched %d", iresult);
  long long lcmp = 1001 + right, lnv = -8, lres = 0;
  OK(MPI_Compare_and_swap(&lnv, &lcmp, &lres, MPI_LONG_LONG, right, AT(fetch[1]), win));
  CHECK(lres == 1001 + right, "CAS long long fetched %lld", lres);
  unsigned char bcmp = 200, bnv = 9, bres = 0;
  OK(MPI_Compare_and_swap(&bnv, &bcmp, &bres, MPI_BYTE, right, AT(cas_b), win));
  OK(MPI_Compare_and_swap(&bcmp, &bcmp, &bres, MPI_BYTE, right, AT(cas_b), win));
  CHECK(bres == 9, "CAS byte fetched %d", bres);
  OK(MPI_Win_unlock(right, win));
  CHECK(iold[1] == val(right, 1) + sum_of(1) && iold[2] == -9,
        "Get_accumulate MAX fetched %d (%d between)", iold[1], iold[2]);
  OK(MPI_Barrier(MPI_COMM_WORLD));
  OK(MPI_Win_sync(win));
  CHECK(a.fetch[0] == 1005 + rank && a.fetch[1] == -8 && a.fetch[2] == -3,
        "fetched elements hold %lld %lld %lld", a.fetch[0], a.fetch[1], a.fetch[2]);
  CHECK(a.i[0] == val(rank, 0) + sum_of(0) && a.i[1] == 100000 && a.cas_i == 70 &&
            a.cas_b == 9 && a.fd == 3.25,
        "after the fetching operations: %d %d %d %d %g", a.i[0], a.i[1], a.cas_i, a.cas_b,
        a.fd);
  OK(MPI_Type_free(&vec22));
  OK(MPI_Type_free(&dvec22));
  OK(MPI_Win_free(&win));

  /* A window whose base is not 8-byte aligned: long long sums at its start, and a
   * compare-and-swap 8 bytes on. */
  static long long raw[4];
  char *odd = (char *)raw + 4;
  long long got, zero = 0, mine = rank + 1;
  memset(raw, 0, sizeof raw);
  OK(MPI_Win_create(odd, 24, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win));
  OK(MPI_Win_fence(MPI_MODE_NOPRECEDE, win));
  for (int t = 0; t < size; t++)
    OK(MPI_Accumulate(&one, 1, MPI_LONG_LONG, t, 0, 1, MPI_LONG_LONG, MPI_SUM, win));
  OK(MPI_Win_fence(MPI_MODE_NOSUCCEED, win));
  memcpy(&got, odd, 8);
  CHECK(got == size, "unaligned long long sum: %lld", got);
  OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, right, 0, win));
  OK(MPI_Compare_and_swap(&mine, &zero, &got, MPI_LONG_LONG, right, 8, win));
  OK(MPI_Win_unlock(right, win));
  CHECK(got == 0, "unaligned CAS fetched %lld", got);
  OK(MPI_Barrier(MPI_COMM_WORLD));
  OK(MPI_Win_sync(win));
  memcpy(&got, odd + 8, 8);
  CHECK(got == left + 1, "unaligned CAS left %lld", got);
  OK(MPI_Win_free(&win));
}

/* --- Concurrent accumulates on the same elements: atomic per element. --- */

#define TIMES 1000

typedef struct {
  long long ll;
  double d;
  int i;
  signed char c;
} counters_t;

static void test_concurrency(int allocate) {
  static counters_t user;
  counters_t *cnt = &user;
  MPI_Win win;
  if (allocate)
    OK(MPI_Win_allocate(sizeof *cnt, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &cnt, &win));
  else
    OK(MPI_Win_create(cnt, sizeof *cnt, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win));
  memset(cnt, 0, sizeof *cnt);
  OK(MPI_Win_fence(MPI_MODE_NOPRECEDE | MPI_MODE_NOSUCCEED, win));
  long long fetched = 0, l1 = 1;
  int i1 = 1, iold;
  signed char c1 = 1, cold;
  double half = 0.5;
  OK(MPI_Win_lock_all(0, win));
  for (int k = 0; k < TIMES; k++) {
    OK(MPI_Fetch_and_op(&i1, &iold, MPI_INT, 0, offsetof(counters_t, i), MPI_SUM, win));
    fetched += iold;
    OK(MPI_Accumulate(&l1, 1, MPI_LONG_LONG, 0, offsetof(counters_t, ll), 1,
                      MPI_LONG_LONG, MPI_SUM, win));
    OK(MPI_Fetch_and_op(&c1, &cold, MPI_CHAR, 0, offsetof(counters_t, c), MPI_SUM, win));
    OK(MPI_Accumulate(&half, 1, MPI_DOUBLE, 0, offsetof(counters_t, d), 1, MPI_DOUBLE,
                      MPI_SUM, win));
  }
  OK(MPI_Win_flush(0, win));
  OK(MPI_Win_unlock_all(win));
  OK(MPI_Barrier(MPI_COMM_WORLD));
  /* Every rank reads the totals; the int's fetched values were 0 .. T-1, once each. */
  counters_t seen;
  OK(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win));
  OK(MPI_Get(&seen, sizeof seen, MPI_BYTE, 0, 0, sizeof seen, MPI_BYTE, win));
  OK(MPI_Win_unlock(0, win));
  long long total = (long long)TIMES * size, all = 0;
  const char *how = allocate ? "allocated" : "created";
  CHECK(seen.i == total, "%s: int counter %d, not %lld", how, seen.i, total);
  CHECK(seen.ll == total, "%s: long long counter %lld", how, seen.ll);
  CHECK((unsigned char)seen.c == total % 256, "%s: char counter %d, not %lld", how,
        (unsigned char)seen.c, total % 256);
  CHECK(seen.d == 0.5 * total, "%s: double counter %g", how, seen.d);
  OK(MPI_Allreduce(&fetched, &all, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD));
  CHECK(all == total * (total - 1) / 2, "%s: the fetched values sum to %lld", how, all);
  OK(MPI_Win_free(&win));
}

/* --- Concurrent integer accumulates through a type of aligned and misaligned
 * runs (64 ints from displacement 0, one at byte 258), mixed with single
 * fetch-and-adds on element 0: every rank at once, exact totals (the aligned
 * run's elements take the atomics, as the single ones do). --- */

#define MIXED 64

static void test_mixed_alignment(int allocate) {
  static int user[MIXED + 2], ones[MIXED + 1];
  int *mem = user;
  MPI_Win win = int_window(allocate, &mem, MIXED + 2);
  OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, rank, 0, win));
  memset(mem, 0, sizeof user);
  OK(MPI_Win_unlock(rank, win));
  for (int i = 0; i <= MIXED; i++)
    ones[i] = 1;
  int lens[2] = {MIXED, 1};
  MPI_Aint displs[2] = {0, MIXED * sizeof(int) + 2};
  MPI_Datatype mixed;
  OK(MPI_Type_create_hindexed(2, lens, displs, MPI_INT, &mixed));
  OK(MPI_Type_commit(&mixed));
  OK(MPI_Barrier(MPI_COMM_WORLD));
  int one = 1, was;
  OK(MPI_Win_lock_all(0, win));
  for (int k = 0; k < TIMES; k++) {
    OK(MPI_Accumulate(ones, MIXED + 1, MPI_INT, 0, 0, 1, mixed, MPI_SUM, win));
    OK(MPI_Fetch_and_op(&one, &was, MPI_INT, 0, 0, MPI_SUM, win));
  }
  OK(MPI_Win_unlock_all(win));
  OK(MPI_Barrier(MPI_COMM_WORLD));
  int seen[MIXED + 2];
  OK(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win));
  OK(MPI_Get(seen, sizeof seen, MPI_BYTE, 0, 0, sizeof seen, MPI_BYTE, win));
  OK(MPI_Win_unlock(0, win));
  const char *how = allocate ? "allocated" : "created";
  int total = TIMES * size, odd;
  memcpy(&odd, (char *)seen + displs[1], sizeof odd);
  CHECK(seen[0] == 2 * total, "%s: element 0 is %d, not %d", how, seen[0], 2 * total);
  for (int i = 1; i < MIXED; i++)
    if (seen[i] != total) {
      CHECK(0, "%s: element %d is %d, not %d", how, i, seen[i], total);
      break;
    }
  CHECK(odd == total, "%s: the misaligned element is %d, not %d", how, odd, total);
  OK(MPI_Type_free(&mixed));
  OK(MPI_Win_free(&win));
}

/* --- Long accumulates: 16 KiB at once (read, combined and written back from the
 * origin where the transport reaches the target's memory without its process,
 * shipped elsewhere), mixed with short ones (shipped) on an element they share. Then
 * 1 KiB at once, a size that goes either way where the transport offers both (the
 * faster of late, the other tried now and then: each rank's first two take one way
 * each), while other ranks' go the other. --- */

#define LONGN 2048
#define LONG_TIMES 50

static void test_long_accumulates(int allocate, int n) {
  static double user[LONGN], ones[LONGN], old[LONGN], seen[LONGN];
  double *mem = user;
  MPI_Win win;
  if (allocate)
    OK(MPI_Win_allocate(sizeof user, sizeof(double), MPI_INFO_NULL, MPI_COMM_WORLD, &mem,
                        &win));
  else
    OK(MPI_Win_create(mem, sizeof user, sizeof(double), MPI_INFO_NULL, MPI_COMM_WORLD,
                      &win));
  for (int i = 0; i < LONGN; i++)
    mem[i] = 0, ones[i] = 1;
  OK(MPI_Win_fence(MPI_MODE_NOPRECEDE | MPI_MODE_NOSUCCEED, win));
  const char *how = allocate ? "allocated" : "created";
  double half = 0.5, fetched = 0;
  int torn = 0;
  OK(MPI_Win_lock_all(0, win));
  for (int k = 0; k < LONG_TIMES; k++) {
    OK(MPI_Get_accumulate(ones, n, MPI_DOUBLE, old, n, MPI_DOUBLE, 0, 0, n, MPI_DOUBLE,
                          MPI_SUM, win));
    /* Elements 1.. change only by whole long accumulates: one fetch sees them equal. */
    for (int i = 2; i < n && !torn; i++)
      if (old[i] != old[1])
        torn = i;
    fetched += old[1];
    OK(MPI_Accumulate(&half, 1, MPI_DOUBLE, 0, 0, 1, MPI_DOUBLE, MPI_SUM, win));
  }
  OK(MPI_Win_unlock_all(win));
  CHECK(!torn, "%s, %d: a long get-accumulate fetched %g at %d and %g at 1", how, n,
        old[torn], torn, old[1]);
  OK(MPI_Barrier(MPI_COMM_WORLD));
  OK(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win));
  OK(MPI_Get(seen, LONGN, MPI_DOUBLE, 0, 0, LONGN, MPI_DOUBLE, win));
  OK(MPI_Win_unlock(0, win));
  double total = (double)LONG_TIMES * size, all = 0;
  CHECK(seen[0] == 1.5 * total, "%s, %d: element 0 is %g, not %g", how, n, seen[0],
        1.5 * total);
  for (int i = 1; i < LONGN; i++)
    if (seen[i] != (i < n ? total : 0)) {
      CHECK(0, "%s, %d: element %d is %g, not %g", how, n, i, seen[i], i < n ? total : 0);
      break;
    }
  /* Each long accumulate fetched the count of those before it: 0 .. total-1, once. */
  OK(MPI_Allreduce(&fetched, &all, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
  CHECK(all == total * (total - 1) / 2, "%s, %d: the fetched counts sum to %g", how, n, all);
  OK(MPI_Win_free(&win));
}

/* --- Long accumulates of integers, an operation transports perform atomically
 * (applied at the target element by element with the processor's atomic
 * instructions where shipped), mixed with single atomics on an element they share:
 * every element's fetched values are each count before it, once. --- */

#define INTN 5000

static void test_long_integer_accumulates(int allocate) {
  static int user[INTN], ones[INTN], old[INTN];
  int *mem = user;
  MPI_Win win;
  if (allocate)
    OK(MPI_Win_allocate(sizeof user, sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &mem, &win));
  else
    OK(MPI_Win_create(mem, sizeof user, sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &win));
  for (int i = 0; i < INTN; i++)
    mem[i] = 0, ones[i] = 1;
  OK(MPI_Win_fence(MPI_MODE_NOPRECEDE | MPI_MODE_NOSUCCEED, win));
  const char *how = allocate ? "allocated" : "created";
  long long first = 0, last = 0, total = (long long)LONG_TIMES * size;
  OK(MPI_Win_lock_all(0, win));
  for (int k = 0; k < LONG_TIMES; k++) {
    int one = 1, was;
    OK(MPI_Get_accumulate(ones, INTN, MPI_INT, old, INTN, MPI_INT, 0, 0, INTN, MPI_INT, MPI_SUM,
                          win));
    first += old[0];
    last += old[INTN - 1];
    OK(MPI_Fetch_and_op(&one, &was, MPI_INT, 0, 0, MPI_SUM, win));
    first += was;
  }
  /* A long read (no operation) sees no element beyond the counts. */
  OK(MPI_Get_accumulate(NULL, 0, MPI_INT, old, INTN, MPI_INT, 0, 0, INTN, MPI_INT, MPI_NO_OP,
                        win));
  OK(MPI_Win_unlock_all(win));
  for (int i = 1; i < INTN; i++)
    if (old[i] > total) {
      CHECK(0, "%s: a long read saw %d at %d, beyond %lld", how, old[i], i, total);
      break;
    }
  OK(MPI_Barrier(MPI_COMM_WORLD));
  /* The same read once every accumulate is done sees every element's total. */
  OK(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win));
  OK(MPI_Get_accumulate(NULL, 0, MPI_INT, old, INTN, MPI_INT, 0, 0, INTN, MPI_INT, MPI_NO_OP,
                        win));
  OK(MPI_Win_unlock(0, win));
  CHECK(old[0] == 2 * total, "%s: a read after the others saw %d at 0", how, old[0]);
  for (int i = 1; i < INTN; i++)
    if (old[i] != total) {
      CHECK(0, "%s: a read after the others saw %d at %d, not %lld", how, old[i], i, total);
      break;
    }
  if (rank == 0) {
    CHECK(mem[0] == 2 * total, "%s: element 0 is %d, not %lld", how, mem[0], 2 * total);
    for (int i = 1; i < INTN; i++)
      if (mem[i] != total) {
        CHECK(0, "%s: element %d is %d, not %lld", how, i, mem[i], total);
        break;
      }
  }
  long long sums[2] = {first, last}, all[2];
  OK(MPI_Allreduce(sums, all, 2, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD));
  CHECK(all[0] == 2 * total * (2 * total - 1) / 2,
        "%s: element 0's fetched counts sum to %lld", how, all[0]);
  CHECK(all[1] == total * (total - 1) / 2, "%s: the last element's fetched counts sum to %lld",
        how, all[1]);
  OK(MPI_Win_free(&win));
}

/* --- Long integer accumulates under exclusive locks, taken or asserted with
 * MPI_MODE_NOCHECK, where no other accumulate runs and a whole access may be
 * combined at once: every rank adds ones to every member's window in turn, each
 * fetch sees its elements alike, each member's fetched counts are each count before
 * it once; then, one rank at a time under MPI_MODE_NOCHECK, an exclusive or of
 * each rank's bit with long long elements, fetched as before. --- */

static void test_exclusive_accumulates(int allocate) {
  static int user[INTN], ones[INTN], old[INTN];
  static long long bits[INTN / 2], seen[INTN / 2];
  int *mem = user;
  MPI_Win win = int_window(allocate, &mem, INTN);
  OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, rank, 0, win));
  for (int i = 0; i < INTN; i++)
    mem[i] = 0, ones[i] = 1;
  OK(MPI_Win_unlock(rank, win));
  OK(MPI_Barrier(MPI_COMM_WORLD));
  const char *how = allocate ? "allocated" : "created";
  long long *fetched = calloc(size, sizeof *fetched), *all = calloc(size, sizeof *all);
  int torn = -1;
  for (int k = 0; k < LONG_TIMES; k++)
    for (int t = 0; t < size; t++) {
      OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, t, 0, win));
      OK(MPI_Get_accumulate(ones, INTN, MPI_INT, old, INTN, MPI_INT, t, 0, INTN, MPI_INT,
                            MPI_SUM, win));
      OK(MPI_Win_unlock(t, win));
      for (int i = 1; i < INTN && torn < 0; i++)
        if (old[i] != old[0])
          torn = i;
      fetched[t] += old[0];
    }
  CHECK(torn < 0, "%s: an exclusive get-accumulate fetched %d at %d and %d at 0", how,
        torn < 0 ? 0 : old[torn], torn, old[0]);
  OK(MPI_Allreduce(fetched, all, size, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD));
  long long n = (long long)LONG_TIMES * size;
  for (int t = 0; t < size; t++)
    CHECK(all[t] == n * (n - 1) / 2, "%s: member %d's fetched counts sum to %lld", how, t,
          all[t]);
  free(fetched);
  free(all);
  OK(MPI_Barrier(MPI_COMM_WORLD));
  for (int i = 0; i < INTN; i++)
    if (mem[i] != n) {
      CHECK(0, "%s: element %d is %d, not %lld", how, i, mem[i], n);
      break;
    }
  /* Long long elements (half as many) with an exclusive or, one rank at a time. */
  for (int i = 0; i < INTN / 2; i++)
    bits[i] = (long long)1 << (rank + 8 * (i % 7));
  OK(MPI_Barrier(MPI_COMM_WORLD));
  for (int turn = 0; turn < size; turn++) {
    if (turn == rank)
      for (int t = 0; t < size; t++) {
        OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, t, MPI_MODE_NOCHECK, win));
        OK(MPI_Get_accumulate(bits, INTN / 2, MPI_LONG_LONG, seen, INTN / 2, MPI_LONG_LONG, t,
                              0, INTN / 2, MPI_LONG_LONG, MPI_BXOR, win));
        OK(MPI_Win_unlock(t, win));
        for (int i = 0; i < INTN / 2; i++) {
          /* The turns before this one: their bits over the counts left by the sums. */
          long long want = n | ((long long)n << 32);
          for (int r = 0; r < turn; r++)
            want ^= (long long)1 << (r + 8 * (i % 7));
          if (seen[i] != want) {
            CHECK(0, "%s: member %d's long long %d was %llx, not %llx", how, t, i, seen[i], want);
            break;
          }
        }
      }
    OK(MPI_Barrier(MPI_COMM_WORLD));
  }
  OK(MPI_Win_free(&win));
}

/* --- Errors. --- */

static int handled = 0, handled_code = 0;
static MPI_Win handled_win = MPI_WIN_NULL;

static void on_win_error(MPI_Win *win, int *code, ...) {
  handled++;
  handled_win = *win;
  handled_code = *code;
}

/* Wrong accesses and synchronizations, on a window of 8 ints at each rank: made by
 * MPI_Win_create (over memory only its process maps), or by MPI_Win_allocate
 * (shared memory that the other ranks of the node map, puts and gets copied at
 * once). */
static void test_errors(int allocated) {
  int mem[8], x = 1, y[2] = {1, 2};
  double dx = 1;
  MPI_Win win;
  handled = 0;
  if (allocated) {
    int *base;
    OK(MPI_Win_allocate(sizeof mem, sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win));
  } else {
    OK(MPI_Win_create(mem, sizeof mem, sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &win));
  }
  OK(MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN));
  MPI_Errhandler eh;
  OK(MPI_Win_get_errhandler(win, &eh));
  CHECK(eh == MPI_ERRORS_RETURN, "the window's handler is not MPI_ERRORS_RETURN");
  /* Outside any epoch. */
  EXPECT_ERR(MPI_Put(&x, 1, MPI_INT, right, 0, 1, MPI_INT, win), MPI_ERR_RMA_SYNC, "epoch");
  EXPECT_ERR(MPI_Accumulate(&x, 1, MPI_INT, right, 0, 1, MPI_INT, MPI_SUM, win),
             MPI_ERR_RMA_SYNC, NULL);
  EXPECT_ERR(MPI_Win_unlock(right, win), MPI_ERR_RMA_SYNC, "not locked");
  EXPECT_ERR(MPI_Win_flush(right, win), MPI_ERR_RMA_SYNC, NULL);
  EXPECT_ERR(MPI_Win_complete(win), MPI_ERR_RMA_SYNC, NULL);
  EXPECT_ERR(MPI_Win_lock(12345, right, 0, win), MPI_ERR_LOCKTYPE, NULL);
  /* Assertions a call does not take (nothing started: the calls stay unmatched). */
  EXPECT_ERR(MPI_Win_fence(MPI_MODE_NOCHECK, win), MPI_ERR_ASSERT, "MPI_MODE_NOSUCCEED");
  EXPECT_ERR(MPI_Win_lock(MPI_LOCK_SHARED, right, MPI_MODE_NOPUT, win), MPI_ERR_ASSERT, NULL);
  EXPECT_ERR(MPI_Win_lock_all(MPI_MODE_NOSTORE, win), MPI_ERR_ASSERT, NULL);
  EXPECT_ERR(MPI_Win_post(MPI_GROUP_EMPTY, MPI_MODE_NOPRECEDE, win), MPI_ERR_ASSERT, NULL);
  EXPECT_ERR(MPI_Win_start(MPI_GROUP_EMPTY, 1 << 20, win), MPI_ERR_ASSERT, NULL);
  /* In a lock epoch on the right neighbour. */
  OK(MPI_Win_lock(MPI_LOCK_SHARED, right, 0, win));
  EXPECT_ERR(MPI_Win_lock(MPI_LOCK_SHARED, right, 0, win), MPI_ERR_RMA_SYNC, NULL);
  EXPECT_ERR(MPI_Win_fence(0, win), MPI_ERR_RMA_SYNC, NULL);
  /* (MPI_Win_free raises its errors on the window's handler, MPI_COMM_SELF's
   * staying fatal.) */
  EXPECT_ERR(MPI_Win_free(&win), MPI_ERR_RMA_SYNC, "epoch");
  /* Beyond the target's window (8 ints), or before it. */
  EXPECT_ERR(MPI_Put(&x, 1, MPI_INT, right, 8, 1, MPI_INT, win), MPI_ERR_RMA_RANGE,
             "outside");
  EXPECT_ERR(MPI_Put(y, 2, MPI_INT, right, 7, 2, MPI_INT, win), MPI_ERR_RMA_RANGE, NULL);
  EXPECT_ERR(MPI_Get(&x, 1, MPI_INT, right, -1, 1, MPI_INT, win), MPI_ERR_RMA_RANGE,
             "before");
  EXPECT_ERR(MPI_Accumulate(&x, 1, MPI_INT, right, 8, 1, MPI_INT, MPI_SUM, win),
             MPI_ERR_RMA_RANGE, NULL);
  EXPECT_ERR(MPI_Accumulate(&dx, 1, MPI_DOUBLE, right, 7, 1, MPI_DOUBLE, MPI_SUM, win),
             MPI_ERR_RMA_RANGE, NULL);
  /* Ranks outside the window's group. */
  EXPECT_ERR(MPI_Put(&x, 1, MPI_INT, size, 0, 1, MPI_INT, win), MPI_ERR_RANK, "rank");
  EXPECT_ERR(MPI_Get(&x, 1, MPI_INT, -7, 0, 1, MPI_INT, win), MPI_ERR_RANK, NULL);
  /* Origin and target of different sizes. */
  EXPECT_ERR(MPI_Put(y, 2, MPI_INT, right, 0, 1, MPI_INT, win), MPI_ERR_TYPE,
             "do not match");
  EXPECT_ERR(MPI_Get(&x, 1, MPI_INT, right, 0, 1, MPI_DOUBLE, win), MPI_ERR_TYPE,
             "do not match");
  EXPECT_ERR(MPI_Accumulate(y, 2, MPI_INT, right, 0, 1, MPI_INT, MPI_SUM, win),
             MPI_ERR_TYPE, "do not match");
  /* Operations accumulates do not take. */
  EXPECT_ERR(MPI_Accumulate(&x, 1, MPI_INT, right, 0, 1, MPI_INT, MPI_NO_OP, win),
             MPI_ERR_OP, NULL);
  EXPECT_ERR(MPI_Accumulate(&dx, 1, MPI_DOUBLE, right, 0, 1, MPI_DOUBLE, MPI_BAND, win),
             MPI_ERR_OP, NULL);
  /* Nothing to move (MPICH's badrma): a target of empty elements does nothing. */
  MPI_Datatype empty;
  OK(MPI_Type_contiguous(0, MPI_INT, &empty));
  OK(MPI_Type_commit(&empty));
  OK(MPI_Accumulate(&x, 0, MPI_INT, right, 0, 1, empty, MPI_SUM, win));
  OK(MPI_Get_accumulate(&x, 0, MPI_INT, &x, 0, MPI_INT, right, 0, 2, empty, MPI_SUM, win));
  OK(MPI_Type_free(&empty));
  OK(MPI_Win_unlock(right, win));

  /* A user's handler gets the window and the code. */
  MPI_Errhandler mine;
  OK(MPI_Win_create_errhandler(on_win_error, &mine));
  OK(MPI_Win_set_errhandler(win, mine));
  OK(MPI_Errhandler_free(&mine));
  int rc = MPI_Put(&x, 1, MPI_INT, right, 0, 1, MPI_INT, win);
  CHECK(rc != MPI_SUCCESS && handled == 1 && handled_win == win && handled_code == rc,
        "the user's handler ran %d times (code %d, returned %d)", handled, handled_code, rc);
  OK(MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN));

  /* A freed window, and MPI_WIN_NULL: their errors go to the world's handler. */
  MPI_Win stale = win;
  OK(MPI_Win_free(&win));
  errors_return(MPI_COMM_WORLD, 1);
  errors_return(MPI_COMM_SELF, 1);
  EXPECT_ERR(MPI_Put(&x, 1, MPI_INT, right, 0, 1, MPI_INT, stale), MPI_ERR_WIN, NULL);
  EXPECT_ERR(MPI_Win_fence(0, stale), MPI_ERR_WIN, NULL);
  EXPECT_ERR(MPI_Win_lock_all(0, MPI_WIN_NULL), MPI_ERR_WIN, "MPI_WIN_NULL");
  EXPECT_ERR(MPI_Win_free(&stale), MPI_ERR_WIN, NULL);
  errors_return(MPI_COMM_WORLD, 0);
  errors_return(MPI_COMM_SELF, 0);
}

/* With the argument "held-lock" (2 ranks, msg_peer_timeout 1 s): rank 1 holds an
 * exclusive lock on rank 0's window while it computes for 2.5 s, longer than the
 * timeout: rank 0's own MPI_Win_lock waits, and takes it once released; rank 0
 * prints how often its thread gave up the processor of its own accord meanwhile
 * (a sleep counts, a yield does not). Then rank 1 holds it while it waits in a
 * barrier for rank 0: rank 0's attempt gives up with MPI_ERR_RMA_SYNC after the
 * peer timeout instead of waiting forever. */
static void held_lock(void) {
  int *base;
  MPI_Win win;
  OK(MPI_Win_allocate(sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win));
  OK(MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN));
  for (int stalled = 0; stalled < 2; stalled++) {
    if (rank == 1)
      OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win));
    OK(MPI_Barrier(MPI_COMM_WORLD));
    double t0 = MPI_Wtime();
    if (rank == 0 && !stalled) {
      struct rusage before, after;
      CHECK(getrusage(RUSAGE_THREAD, &before) == 0, "getrusage");
      OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win));
      double waited = MPI_Wtime() - t0;
      CHECK(getrusage(RUSAGE_THREAD, &after) == 0, "getrusage");
      printf("held-lock: rank 0 gave up the processor %ld times while it waited\n",
             after.ru_nvcsw - before.ru_nvcsw);
      CHECK(waited >= 2.0, "the lock was taken after %.1f s, before its holder let it go", waited);
      OK(MPI_Win_unlock(0, win));
    } else if (rank == 0) {
      EXPECT_ERR(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win), MPI_ERR_RMA_SYNC, "msg_peer_timeout");
      double waited = MPI_Wtime() - t0;
      CHECK(waited >= 0.9 && waited < 30, "the lock was given up after %.1f s", waited);
    } else if (!stalled) {
      /* Computing, outside the library. */
      while (MPI_Wtime() - t0 < 2.5)
        ;
      OK(MPI_Win_unlock(0, win));
    }
    /* (Rank 1 waits in it for rank 0 while it holds the lock, the second time.) */
    OK(MPI_Barrier(MPI_COMM_WORLD));
    if (rank == 1 && stalled)
      OK(MPI_Win_unlock(0, win));
  }
  OK(MPI_Win_free(&win));
}

/* A rank that only polls its own window (a get-accumulate and a flush on itself,
 * again and again) still serves what the others' accumulates need of it: every
 * call progresses (MPI 4.1, 12.7). Each other rank adds 1 to rank 0's word and
 * waits for it; rank 0 polls for at most 20 s. */
static void test_flush_progresses(void) {
  int *mem = malloc(sizeof(int));
  *mem = 0;
  MPI_Win win;
  OK(MPI_Win_create(mem, sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &win));
  OK(MPI_Win_lock_all(0, win));
  if (rank == 0) {
    int seen = 0;
    double t0 = MPI_Wtime();
    while (seen < size - 1 && MPI_Wtime() - t0 < 20) {
      OK(MPI_Get_accumulate(NULL, 0, MPI_DATATYPE_NULL, &seen, 1, MPI_INT, 0, 0, 1, MPI_INT,
                            MPI_NO_OP, win));
      OK(MPI_Win_flush(0, win));
    }
    CHECK(seen == size - 1, "rank 0, polling its own window, saw %d of %d accumulates in %.0f s",
          seen, size - 1, MPI_Wtime() - t0);
  } else {
    int one = 1;
    OK(MPI_Accumulate(&one, 1, MPI_INT, 0, 0, 1, MPI_INT, MPI_SUM, win));
    OK(MPI_Win_flush(0, win));
  }
  OK(MPI_Win_unlock_all(win));
  OK(MPI_Barrier(MPI_COMM_WORLD));
  OK(MPI_Win_free(&win));
  free(mem);
}

int main(int argc, char **argv) {
  start("rma", &argc, &argv);
  if (argc > 1 && strcmp(argv[1], "held-lock") == 0) {
    CHECK(size == 2, "held-lock runs at 2 ranks");
    held_lock();
    return finish();
  }
  right = (rank + 1) % size;
  left = (rank - 1 + size) % size;
  test_windows();
  for (int allocate = 0; allocate < 2; allocate++) {
    test_fence(allocate);
    test_passive(allocate);
    test_concurrency(allocate);
    test_mixed_alignment(allocate);
    test_long_accumulates(allocate, LONGN);
    test_long_accumulates(allocate, 128);
    test_long_integer_accumulates(allocate);
    test_exclusive_accumulates(allocate);
    test_padded_pair(allocate);
    test_requests(allocate);
  }
  test_many_fetches();
  test_lock_all_waits_for_a_writer();
  test_lock_handed_on();
  test_flush_progresses();
  test_pscw();
  test_dynamic();
  test_accumulate();
  test_errors(0);
  test_errors(1);
  OK(MPI_Barrier(MPI_COMM_WORLD));
  return finish();
}
