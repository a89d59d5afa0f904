/* shared.c: shared-memory windows, at any number of ranks on one node (run at 1 to
 * 4). MPI_Win_allocate_shared on the node's communicator (MPI_Comm_split_type,
 * MPI_COMM_TYPE_SHARED), each rank asking for a different size (one asks for none):
 * the parts are contiguous in every rank's view (rank r's starts where rank r-1's
 * ends), MPI_Win_shared_query gives every part's size, displacement unit and
 * address (MPI_PROC_NULL: the first part that has bytes; null for an empty part);
 * each rank writes its part with stores and reads every other part with loads;
 * MPI_Put to a neighbour's part and accumulates from every rank land where the
 * owner reads them; the window's attributes. A window of 48 MiB in all. MPI_Win_shared_query on an
 * allocated window (each rank's own memory) and its errors. MPI_COMM_TYPE_HW_UNGUIDED
 * splits by node where the job spans several, else gives MPI_COMM_NULL.
 *
 * Where the job spans several nodes (the node's communicator is smaller than the
 * world), MPI_Win_allocate_shared on MPI_COMM_WORLD: each node's ranks could map
 * their own node's parts but not the others', and every rank fails alike with
 * MPI_ERR_RMA_SHARED.
 *
 * Run with a heap too small for the window of 48 MiB, or over tcp alone (no heap):
 * the window is a segment of its own, which every rank maps, and all of the above
 * holds. */
#include "check.h"
#include <stddef.h>

/* Ints in rank r's part (rank 1 asks for none). */
static int ints_of(int r) { return r == 1 ? 0 : 64 + 16 * r; }

/* The next rank after r (of n) whose part has ints. */
static int next_with_part(int r, int n) {
  int next = (r + 1) % n;
  while (ints_of(next) == 0)
    next = (next + 1) % n;
  return next;
}

/* What rank r writes at element i of its part. */
static int val(int r, int i) { return r * 100000 + i; }

static void test_parts(MPI_Comm node) {
  int n, me;
  OK(MPI_Comm_size(node, &n));
  OK(MPI_Comm_rank(node, &me));
  int *mine = NULL;
  MPI_Win win;
  OK(MPI_Win_allocate_shared(ints_of(me) * sizeof(int), sizeof(int), MPI_INFO_NULL,
                             node, &mine, &win));
  CHECK(mine != NULL, "no base for rank %d's part", me);
  for (int i = 0; i < ints_of(me); i++)
    mine[i] = val(me, i);

  /* Every part, where this rank maps it: contiguous, of the size asked for. */
  int *first = NULL;
  MPI_Aint sz = -1;
  int du = -1;
  OK(MPI_Win_shared_query(win, 0, &sz, &du, &first));
  CHECK(first != NULL && sz == ints_of(0) * (MPI_Aint)sizeof(int) && du == sizeof(int),
        "rank 0's part: %p, %ld bytes, unit %d", (void *)first, (long)sz, du);
  int at = 0;
  for (int r = 0; r < n; r++) {
    int *part = NULL;
    OK(MPI_Win_shared_query(win, r, &sz, &du, &part));
    CHECK(sz == ints_of(r) * (MPI_Aint)sizeof(int), "rank %d's part: %ld bytes", r,
          (long)sz);
    CHECK(du == sizeof(int), "rank %d's unit %d", r, du);
    if (ints_of(r) == 0)
      CHECK(part == NULL, "rank %d's empty part at %p, not null", r, (void *)part);
    else
      CHECK(part == first + at, "rank %d's part at %p, not right after rank %d's (%p)", r,
            (void *)part, r - 1, (void *)(first + at));
    at += ints_of(r);
  }
  int before = 0;
  for (int r = 0; r < me; r++)
    before += ints_of(r);
  CHECK(mine == first + before, "my base %p is not my part %p", (void *)mine,
        (void *)(first + before));
  int *any = NULL;
  OK(MPI_Win_shared_query(win, MPI_PROC_NULL, &sz, &du, &any));
  CHECK(any == first && sz == ints_of(0) * (MPI_Aint)sizeof(int),
        "MPI_PROC_NULL: %p, %ld bytes", (void *)any, (long)sz);

  /* Loads of every other part once all have written theirs. */
  OK(MPI_Win_lock_all(MPI_MODE_NOCHECK, win));
  OK(MPI_Win_sync(win));
  OK(MPI_Barrier(node));
  OK(MPI_Win_sync(win));
  at = 0;
  for (int r = 0; r < n; r++) {
    for (int i = 0; i < ints_of(r); i++)
      CHECK(first[at + i] == val(r, i), "rank %d's element %d reads %d", r, i,
            first[at + i]);
    at += ints_of(r);
  }
  OK(MPI_Win_unlock_all(win));

  /* Each rank puts to the next rank that has a part (at an element of its own),
   * and adds to rank 0's part. */
  int word = -7 - me;
  OK(MPI_Win_fence(0, win));
  OK(MPI_Put(&word, 1, MPI_INT, next_with_part(me, n), 10 + me, 1, MPI_INT, win));
  int one = me + 1;
  OK(MPI_Accumulate(&one, 1, MPI_INT, 0, 5, 1, MPI_INT, MPI_SUM, win));
  OK(MPI_Win_fence(0, win));
  if (me == 0) {
    int sum = val(0, 5);
    for (int r = 0; r < n; r++)
      sum += r + 1;
    CHECK(mine[5] == sum, "rank 0's element 5 holds %d, not %d", mine[5], sum);
  }
  for (int r = 0; r < n; r++)
    if (next_with_part(r, n) == me)
      CHECK(mine[10 + r] == -7 - r, "my element %d holds %d, not rank %d's put", 10 + r,
            mine[10 + r], r);

  /* Attributes. */
  void *b = NULL;
  int *flavor = NULL, flag = 0;
  OK(MPI_Win_get_attr(win, MPI_WIN_BASE, &b, &flag));
  CHECK(flag && b == mine, "MPI_WIN_BASE %p, not %p", b, (void *)mine);
  OK(MPI_Win_get_attr(win, MPI_WIN_CREATE_FLAVOR, &flavor, &flag));
  CHECK(flag && *flavor == MPI_WIN_FLAVOR_SHARED, "flavor %d", flag ? *flavor : -1);

  /* Errors: a rank outside the window, outputs missing. */
  errors_return(MPI_COMM_WORLD, 1);
  OK(MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN));
  EXPECT_ERR(MPI_Win_shared_query(win, n, &sz, &du, &any), MPI_ERR_RANK, NULL);
  EXPECT_ERR(MPI_Win_shared_query(win, 0, NULL, &du, &any), MPI_ERR_ARG, NULL);
  EXPECT_ERR(MPI_Win_shared_query(MPI_WIN_NULL, 0, &sz, &du, &any), MPI_ERR_WIN, NULL);
  errors_return(MPI_COMM_WORLD, 0);
  OK(MPI_Win_free(&win));
}

/* 48 MiB in all, the first and last bytes of every part written and read. */
/* A window of 48 MiB over the node's ranks, parts written where they lie and
 * through the window, read where they lie. */
static void test_large(MPI_Comm node) {
  int n, me;
  OK(MPI_Comm_size(node, &n));
  OK(MPI_Comm_rank(node, &me));
  MPI_Aint each = ((MPI_Aint)48 << 20) / n;
  char *mine = NULL;
  MPI_Win win;
  OK(MPI_Win_allocate_shared(each, 1, MPI_INFO_NULL, node, &mine, &win));
  OK(MPI_Win_lock_all(MPI_MODE_NOCHECK, win));
  mine[0] = (char)(me + 1);
  mine[each - 1] = (char)(me + 101);
  /* Through the window too: a byte into the next rank's part. */
  char mark = (char)(me + 51);
  OK(MPI_Put(&mark, 1, MPI_CHAR, (me + 1) % n, 1, 1, MPI_CHAR, win));
  OK(MPI_Win_flush_all(win));
  OK(MPI_Win_sync(win));
  OK(MPI_Barrier(node));
  OK(MPI_Win_sync(win));
  CHECK(mine[1] == (char)((me + n - 1) % n + 51), "a put into a part of a large window: %d",
        mine[1]);
  for (int r = 0; r < n; r++) {
    char *part = NULL;
    MPI_Aint sz = 0;
    int du = 0;
    OK(MPI_Win_shared_query(win, r, &sz, &du, &part));
    CHECK(sz == each && part[0] == (char)(r + 1) && part[each - 1] == (char)(r + 101),
          "rank %d's part of %ld bytes reads %d ... %d", r, (long)sz, part[0],
          part[each - 1]);
  }
  OK(MPI_Win_unlock_all(win));
  OK(MPI_Win_free(&win));
}

/* MPI_Win_shared_query on an allocated window: this rank's own memory at least. */
static void test_allocated(void) {
  int *base = NULL;
  MPI_Win win;
  OK(MPI_Win_allocate(16 * sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD,
                      &base, &win));
  int *got = NULL;
  MPI_Aint sz = 0;
  int du = 0;
  OK(MPI_Win_shared_query(win, rank, &sz, &du, &got));
  CHECK(got == base && sz == 16 * sizeof(int) && du == sizeof(int),
        "my allocated memory: %p, %ld bytes, unit %d", (void *)got, (long)sz, du);
  OK(MPI_Win_free(&win));
}

/* A shared window on MPI_COMM_WORLD, where the world spans several nodes. */
static void test_across_nodes(MPI_Comm node) {
  int n;
  OK(MPI_Comm_size(node, &n));
  if (n == size)
    return;
  errors_return(MPI_COMM_WORLD, 1);
  int *base = NULL;
  MPI_Win win = MPI_WIN_NULL;
  EXPECT_ERR(MPI_Win_allocate_shared(4096, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win),
             MPI_ERR_RMA_SHARED, "one node");
  CHECK(win == MPI_WIN_NULL, "a window was handed out across nodes");
  errors_return(MPI_COMM_WORLD, 0);
  OK(MPI_Barrier(MPI_COMM_WORLD));
}

/* MPI_COMM_TYPE_HW_UNGUIDED: the node's ranks where the world spans several nodes
 * (and the info then names the level: mpi_shared_memory), else MPI_COMM_NULL (no
 * finer level is known, and the node's ranks are all of the world's). */
static void test_unguided(MPI_Comm node) {
  int node_size, result, has = 0;
  char level[MPI_MAX_INFO_VAL + 1] = "";
  OK(MPI_Comm_size(node, &node_size));
  MPI_Info info;
  MPI_Comm c;
  OK(MPI_Info_create(&info));
  OK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_HW_UNGUIDED, 0, info, &c));
  OK(MPI_Info_get(info, "mpi_hw_resource_type", MPI_MAX_INFO_VAL, level, &has));
  if (node_size < size) {
    CHECK(c != MPI_COMM_NULL, "an unguided split across nodes gave MPI_COMM_NULL");
    OK(MPI_Comm_compare(c, node, &result));
    CHECK(result == MPI_CONGRUENT, "an unguided split across nodes is not the node's ranks");
    CHECK(has && strcmp(level, "mpi_shared_memory") == 0, "the unguided split's level: %s",
          has ? level : "(none)");
    OK(MPI_Comm_free(&c));
  } else {
    CHECK(c == MPI_COMM_NULL, "an unguided split on one node gave a communicator");
    CHECK(!has, "an unguided split that gave nothing named a level: %s", level);
  }
  OK(MPI_Info_free(&info));
}

int main(int argc, char **argv) {
  start("shared", &argc, &argv);
  MPI_Comm node;
  OK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  test_parts(node);
  test_large(node);
  test_allocated();
  test_across_nodes(node);
  test_unguided(node);
  OK(MPI_Comm_free(&node));
  OK(MPI_Barrier(MPI_COMM_WORLD));
  return finish();
}
