/* algorithms.c: the collective algorithms a user chooses. argv[1] names the
 * all-reduce's (auto, doubling, ring, halving, gathered), argv[2] the broadcast's
 * tree (auto, binomial, in_order, flat), argv[3] the barrier's (auto, dissemination,
 * gathered), argv[4] the all-gather's (auto, doubling, ring); the test sets them as
 * msg_allreduce_algorithm, msg_bcast_algorithm, msg_barrier_algorithm and
 * msg_allgather_algorithm (run at 1 to 7 ranks), and the control variables must say
 * the same. Every result is checked against a reference computed here: all-reduces
 * of 1 element to 1 MiB from a send buffer and in place, a nonblocking one, on a
 * sub-communicator, and with an operation that does not commute (affine maps
 * composed in rank order); broadcasts of 1 B to 200 KB from two roots; barriers;
 * all-gathers of blocks of one length, short and long, and of several lengths.
 * Where the algorithm applies, the sends and receives this rank started during the
 * call (the tool interface's coll_schedule_transfers) must be the algorithm's own,
 * so that a choice not followed fails; where it does not (an operation that does
 * not commute: recursive doubling then), those of the algorithm taken instead. */
#include "check.h"

static const char *alg = "auto";
static MPI_T_pvar_session session;
static MPI_T_pvar_handle started;

static unsigned long long transfers(void) {
  unsigned long long v = 0;
  OK(MPI_T_pvar_read(session, started, &v));
  return v;
}

/* The largest power of two not above n, and its exponent. */
static int pof2_of(int n, int *log) {
  int p = 1;
  *log = 0;
  while (p * 2 <= n) {
    p *= 2;
    ++*log;
  }
  return p;
}

/* The blocks `way` cuts a vector into among n members (0: it does not cut). */
static int blocks(const char *way, int n) {
  int log;
  if (!strcmp(way, "ring"))
    return n;
  if (!strcmp(way, "halving"))
    return pof2_of(n, &log);
  return 0;
}

/* The sends and receives member `me` of `n` starts in an all-reduce by `way`.
 * Doubling and halving first fold the members beyond the largest power of two
 * into their neighbours (each even one below 2 rem sends its operand to the odd one
 * above and gets the result back); a round of doubling is one exchange, halving
 * takes twice as many (halve, then gather back). */
static long expected(const char *way, int me, int n) {
  int log, pof2 = pof2_of(n, &log), rem = n - pof2;
  if (n == 1)
    return 0;
  if (!strcmp(way, "ring"))
    return 4L * (n - 1);
  if (!strcmp(way, "gathered"))
    return me == 0 ? 2L * (n - 1) : 2;
  long rounds = !strcmp(way, "halving") ? 2L * log : log;
  if (me < 2 * rem)
    return me % 2 == 0 ? 2 : 2 + 2 * rounds;
  return 2 * rounds;
}

/* Check that this member of `comm` started `way`'s sends and receives since
 * `before`, where a way was chosen and applies to `count` elements. */
static void check_way(const char *what, MPI_Comm comm, const char *way, int count,
                      unsigned long long before) {
  int n, me;
  OK(MPI_Comm_size(comm, &n));
  OK(MPI_Comm_rank(comm, &me));
  if (!strcmp(alg, "auto") || count < blocks(way, n))
    return;
  long got = (long)(transfers() - before), want = expected(way, me, n);
  CHECK(got == want, "%s by %s: %ld sends and receives started, %s starts %ld", what, alg,
        got, way, want);
}

/* Sums of doubles, from a send buffer and in place, of `len` elements. */
static void sums(MPI_Comm comm, int len, const char *what) {
  int n, me;
  OK(MPI_Comm_size(comm, &n));
  OK(MPI_Comm_rank(comm, &me));
  double *a = malloc(sizeof(double) * len), *b = malloc(sizeof(double) * len);
  for (int i = 0; i < len; i++)
    a[i] = (me + 1) * (i % 13 + 1);
  unsigned long long before = transfers();
  OK(MPI_Allreduce(a, b, len, MPI_DOUBLE, MPI_SUM, comm));
  check_way(what, comm, alg, len, before);
  for (int i = 0; i < len; i++) {
    CHECK(b[i] == n * (n + 1) / 2.0 * (i % 13 + 1), "%s of %d: element %d is %g", what, len, i,
          b[i]);
    CHECK(a[i] == (me + 1) * (i % 13 + 1), "%s of %d wrote its send buffer", what, len);
  }
  before = transfers();
  OK(MPI_Allreduce(MPI_IN_PLACE, a, len, MPI_DOUBLE, MPI_MAX, comm));
  check_way(what, comm, alg, len, before);
  for (int i = 0; i < len; i++)
    CHECK(a[i] == n * (i % 13 + 1), "%s of %d in place: element %d is %g", what, len, i, a[i]);
  free(a);
  free(b);
}

/* x -> a x + b modulo 1009; combined as "in, then inout" (in from lower ranks). */
typedef struct {
  int a, b;
} affine;

static void compose(void *in, void *inout, int *len, MPI_Datatype *type) {
  (void)type;
  affine *f = in, *g = inout;
  for (int j = 0; j < *len; j++)
    g[j] = (affine){g[j].a * f[j].a % 1009, (g[j].a * f[j].b + g[j].b) % 1009};
}

static affine map_of(int r, int j) { return (affine){(r + j) % 7 + 2, r * 3 + j}; }

static void in_rank_order(void) {
  enum { N = 9 };
  MPI_Datatype t;
  MPI_Op op;
  OK(MPI_Type_contiguous(2, MPI_INT, &t));
  OK(MPI_Type_commit(&t));
  OK(MPI_Op_create(compose, 0, &op));
  affine mine[N], all[N];
  for (int j = 0; j < N; j++)
    mine[j] = map_of(rank, j);
  unsigned long long before = transfers();
  OK(MPI_Allreduce(mine, all, N, t, op, MPI_COMM_WORLD));
  check_way("a composition", MPI_COMM_WORLD, "doubling", N, before);
  for (int j = 0; j < N; j++) {
    affine want = map_of(0, j);
    for (int r = 1; r < size; r++) {
      affine g = map_of(r, j);
      want = (affine){g.a * want.a % 1009, (g.a * want.b + g.b) % 1009};
    }
    CHECK(all[j].a == want.a && all[j].b == want.b,
          "a composition in rank order: element %d is (%d, %d), expected (%d, %d)", j, all[j].a,
          all[j].b, want.a, want.b);
  }
  OK(MPI_Op_free(&op));
  OK(MPI_Type_free(&t));
}

/* Check that control variable `name` says `want`. */
static void says(const char *name, const char *want) {
  int i = -1, count = 0;
  OK(MPI_T_cvar_get_index(name, &i));
  MPI_T_cvar_handle h;
  char got[64] = "";
  OK(MPI_T_cvar_handle_alloc(i, NULL, &h, &count));
  CHECK(count > 0 && count <= (int)sizeof got, "%s: %d chars", name, count);
  OK(MPI_T_cvar_read(h, got));
  OK(MPI_T_cvar_handle_free(&h));
  CHECK(!strcmp(got, want), "%s is \"%s\", the test chose \"%s\"", name, got, want);
}

/* The sends and receives member vr (counted from the root) of n starts in a
 * broadcast of one piece down `tree`: one receive but at the root, a send to each
 * child. Binomial: the children are vr plus each power of two below its lowest set
 * bit (all below n at the root); in order: vr plus each power of two above its
 * highest set bit; flat: the root's are all the others. */
static long bcast_expected(const char *tree, int vr, int n) {
  long children = 0;
  if (!strcmp(tree, "flat"))
    children = vr == 0 ? n - 1 : 0;
  else if (!strcmp(tree, "binomial")) {
    int low = 1;
    while (vr != 0 && !(vr & low))
      low *= 2;
    if (vr == 0)
      while (low < n)
        low *= 2;
    for (int k = 1; k < low; k *= 2)
      children += vr + k < n;
  } else {
    int above = 1;
    while (above <= vr)
      above *= 2;
    for (long k = above; vr + k < n; k *= 2)
      children++;
  }
  return (vr != 0) + children;
}

/* Broadcasts from the first and the last rank: of one piece (4 KiB: the transfers
 * counted) and of several, checked. */
static void broadcasts(const char *tree) {
  const int lengths[] = {1, 4096, 20000, 200000};
  char *buf = malloc(200000);
  for (int root = 0; root < size; root += size - 1 > 0 ? size - 1 : 1) {
    for (unsigned k = 0; k < sizeof lengths / sizeof *lengths; k++) {
      int len = lengths[k];
      for (int i = 0; i < len; i++)
        buf[i] = rank == root ? (char)(i * 7 + root) : -1;
      unsigned long long before = transfers();
      OK(MPI_Bcast(buf, len, MPI_CHAR, root, MPI_COMM_WORLD));
      long got = (long)(transfers() - before);
      long want = bcast_expected(tree, (rank - root + size) % size, size);
      CHECK(!strcmp(tree, "auto") || len != 4096 || got == want,
            "a broadcast from %d down %s: %ld sends and receives started, expected %ld", root,
            tree, got, want);
      for (int i = 0; i < len; i++)
        CHECK(buf[i] == (char)(i * 7 + root), "a broadcast of %d from %d: byte %d", len, root,
              i);
    }
  }
  free(buf);
}

/* Barriers: dissemination takes ceil(log2 n) rounds of a send and a receive;
 * gathered (2 to 8 ranks, all on this node), rank 0 hears from and releases every
 * other, which signals it and hears back. */
static void barriers(const char *way) {
  int rounds = 0;
  while ((1 << rounds) < size)
    rounds++;
  long want = 2L * rounds;
  if (!strcmp(way, "gathered") && size >= 2 && size <= 8)
    want = rank == 0 ? 2L * (size - 1) : 2;
  for (int k = 0; k < 3; k++) {
    unsigned long long before = transfers();
    OK(MPI_Barrier(MPI_COMM_WORLD));
    long got = (long)(transfers() - before);
    CHECK(!strcmp(way, "auto") || got == want,
          "a barrier by %s: %ld sends and receives started, expected %ld", way, got, want);
  }
}

/* All-gathers of 3 and 20,000 ints a rank (the transfers counted: recursive
 * doubling, at a power of two of ranks, takes log2 n rounds of a send and a
 * receive, the ring n - 1), and of rank + 1 ints a rank (blocks of several lengths:
 * the ring, whatever was chosen). */
static void allgathers(const char *way) {
  const int lengths[] = {3, 20000};
  int *all = malloc(sizeof(int) * 20000 * size), *mine = malloc(sizeof(int) * 20000);
  int log, pof2 = pof2_of(size, &log);
  long want = !strcmp(way, "doubling") && pof2 == size ? 2L * log : 2L * (size - 1);
  for (int k = 0; k < 2; k++) {
    int len = lengths[k];
    for (int i = 0; i < len; i++)
      mine[i] = rank * 100003 + i;
    unsigned long long before = transfers();
    OK(MPI_Allgather(mine, len, MPI_INT, all, len, MPI_INT, MPI_COMM_WORLD));
    long got = (long)(transfers() - before);
    CHECK(!strcmp(way, "auto") || got == want,
          "an all-gather of %d by %s: %ld sends and receives started, expected %ld", len, way,
          got, want);
    for (int r = 0; r < size; r++)
      for (int i = 0; i < len; i++)
        CHECK(all[r * len + i] == r * 100003 + i, "an all-gather of %d: rank %d's element %d",
              len, r, i);
  }
  int *counts = malloc(sizeof(int) * size), *displs = malloc(sizeof(int) * size);
  for (int r = 0, at = 0; r < size; at += r + 1, r++) {
    counts[r] = r + 1;
    displs[r] = at;
  }
  OK(MPI_Allgatherv(mine, rank + 1, MPI_INT, all, counts, displs, MPI_INT, MPI_COMM_WORLD));
  for (int r = 0; r < size; r++)
    for (int i = 0; i <= r; i++)
      CHECK(all[displs[r] + i] == r * 100003 + i, "an all-gather of several lengths: rank %d's %d",
            r, i);
  free(counts);
  free(displs);
  free(all);
  free(mine);
}

int main(int argc, char **argv) {
  start("algorithms", &argc, &argv);
  CHECK(argc == 5, "give the algorithms of the all-reduce, broadcast, barrier and all-gather");
  alg = argv[1];
  int provided, i = -1, count = 0;
  OK(MPI_T_init_thread(MPI_THREAD_SINGLE, &provided));
  says("msg_allreduce_algorithm", argv[1]);
  says("msg_bcast_algorithm", argv[2]);
  says("msg_barrier_algorithm", argv[3]);
  says("msg_allgather_algorithm", argv[4]);
  OK(MPI_T_pvar_get_index("coll_schedule_transfers", MPI_T_PVAR_CLASS_COUNTER, &i));
  OK(MPI_T_pvar_session_create(&session));
  OK(MPI_T_pvar_handle_alloc(session, i, NULL, &started, &count));

  /* Short and long, counts below and above the members' and not divisible by them. */
  const int lengths[] = {1, 2, 3, 5, 7, 8, 5003, 131101};
  for (unsigned k = 0; k < sizeof lengths / sizeof *lengths; k++)
    sums(MPI_COMM_WORLD, lengths[k], "an all-reduce");

  /* Nonblocking: the same schedule. */
  enum { L = 4099 };
  static int x[L], y[L];
  for (int j = 0; j < L; j++)
    x[j] = rank * j % 17;
  unsigned long long before = transfers();
  MPI_Request req;
  OK(MPI_Iallreduce(x, y, L, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &req));
  OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
  check_way("a nonblocking all-reduce", MPI_COMM_WORLD, alg, L, before);
  for (int j = 0; j < L; j++) {
    int want = 0;
    for (int r = 0; r < size; r++)
      want += r * j % 17;
    CHECK(y[j] == want, "a nonblocking all-reduce: element %d is %d, expected %d", j, y[j], want);
  }

  /* The odd and the even ranks apart, each in reverse order. */
  MPI_Comm half;
  OK(MPI_Comm_split(MPI_COMM_WORLD, rank % 2, -rank, &half));
  sums(half, 5003, "an all-reduce on half the ranks");
  OK(MPI_Comm_free(&half));

  in_rank_order();
  broadcasts(argv[2]);
  barriers(argv[3]);
  allgathers(argv[4]);

  OK(MPI_T_pvar_handle_free(session, &started));
  OK(MPI_T_pvar_session_free(&session));
  OK(MPI_T_finalize());
  return finish();
}
