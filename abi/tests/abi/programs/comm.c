/* Long on purpose: one program holds every communicator and group check,
 * so that each rank count is one launch. */
/* comm.c: communicators and groups at 1 or more ranks. Names; MPI_Comm_compare
 * (IDENT, CONGRUENT, SIMILAR, UNEQUAL); dup, split (colours, keys, MPI_UNDEFINED),
 * split_type (MPI_COMM_TYPE_SHARED, and guided by the info's hardware level), create and create_group, each used for
 * traffic afterwards; every group operation and MPI_GROUP_EMPTY; attributes
 * (copy and delete callbacks on dup, set, delete and free, MPI_COMM_NULL_COPY_FN
 * and MPI_COMM_DUP_FN, a freed key's attributes still deleted, MPI_COMM_SELF's
 * deleted at MPI_Finalize, the predefined MPI_TAG_UB and others); Cartesian
 * topologies (Dims_create, Cart_create, coords, rank, shift, get, sub, map,
 * Topo_test) and distributed graphs (with and without weights); info objects;
 * handles to Fortran and back. */
#include "check.h"

/* MPI_UNWEIGHTED and MPI_WEIGHTS_EMPTY are small integers cast to pointers, which
 * GCC takes for arrays of no room when they go to array parameters. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wstringop-overread"
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#endif

static void expect_compare(MPI_Comm a, MPI_Comm b, int want, const char *what) {
  int r = -1;
  OK(MPI_Comm_compare(a, b, &r));
  CHECK(r == want, "MPI_Comm_compare of %s: %d, expected %d", what, r, want);
}

static void expect_comm_name(MPI_Comm c, const char *name) {
  char got[MPI_MAX_OBJECT_NAME];
  int len = -1;
  OK(MPI_Comm_get_name(c, got, &len));
  CHECK(strcmp(got, name) == 0 && len == (int)strlen(name),
        "communicator name \"%s\" (length %d), expected \"%s\"", got, len, name);
}

/* The world ranks of `c`'s members, in `c`'s order. */
static void world_ranks(MPI_Comm c, int *out) {
  MPI_Group g, w;
  int n;
  OK(MPI_Comm_group(c, &g));
  OK(MPI_Comm_group(MPI_COMM_WORLD, &w));
  OK(MPI_Group_size(g, &n));
  int *in = malloc(sizeof(int) * n);
  for (int i = 0; i < n; i++)
    in[i] = i;
  OK(MPI_Group_translate_ranks(g, n, in, w, out));
  free(in);
  OK(MPI_Group_free(&g));
  OK(MPI_Group_free(&w));
}

/* A ring exchange and a sum on `c`: they reach the right members. */
static void exercise(MPI_Comm c, const char *what) {
  int n, me;
  OK(MPI_Comm_size(c, &n));
  OK(MPI_Comm_rank(c, &me));
  int *wr = malloc(sizeof(int) * n);
  world_ranks(c, wr);
  CHECK(wr[me] == rank, "%s: member %d is world rank %d, not this one (%d)", what,
        me, wr[me], rank);
  int right = (me + 1) % n, left = (me + n - 1) % n, got = -1;
  MPI_Status st;
  OK(MPI_Sendrecv(&rank, 1, MPI_INT, right, 7, &got, 1, MPI_INT, left, 7, c, &st));
  CHECK(got == wr[left] && st.MPI_SOURCE == left,
        "%s: from the left (%d) came %d, source %d; expected world rank %d", what,
        left, got, st.MPI_SOURCE, wr[left]);
  int sum = -1, want = 0;
  for (int i = 0; i < n; i++)
    want += wr[i];
  OK(MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, c));
  CHECK(sum == want, "%s: the sum of world ranks is %d, expected %d", what, sum, want);
  free(wr);
}

static void test_basics(void) {
  expect_comm_name(MPI_COMM_WORLD, "MPI_COMM_WORLD");
  expect_comm_name(MPI_COMM_SELF, "MPI_COMM_SELF");
  /* The null handles are named too (as MPICH names them). */
  expect_comm_name(MPI_COMM_NULL, "MPI_COMM_NULL");
  char named[MPI_MAX_OBJECT_NAME];
  int named_len = -1;
  OK(MPI_Win_get_name(MPI_WIN_NULL, named, &named_len));
  CHECK(strcmp(named, "MPI_WIN_NULL") == 0, "MPI_WIN_NULL is named \"%s\"", named);
  OK(MPI_Type_get_name(MPI_DATATYPE_NULL, named, &named_len));
  CHECK(strcmp(named, "MPI_DATATYPE_NULL") == 0, "MPI_DATATYPE_NULL is named \"%s\"", named);
  int n = -1, r = -1, flag = -1;
  OK(MPI_Comm_size(MPI_COMM_SELF, &n));
  OK(MPI_Comm_rank(MPI_COMM_SELF, &r));
  CHECK(n == 1 && r == 0, "MPI_COMM_SELF: size %d rank %d", n, r);
  OK(MPI_Comm_test_inter(MPI_COMM_WORLD, &flag));
  CHECK(!flag, "MPI_COMM_WORLD is an intercommunicator");
  MPI_Comm parent = MPI_COMM_WORLD;
  OK(MPI_Comm_get_parent(&parent));
  CHECK(parent == MPI_COMM_NULL, "MPI_Comm_get_parent is not MPI_COMM_NULL");
  expect_compare(MPI_COMM_WORLD, MPI_COMM_WORLD, MPI_IDENT, "the world with itself");
  expect_compare(MPI_COMM_SELF, MPI_COMM_WORLD, size == 1 ? MPI_CONGRUENT : MPI_UNEQUAL,
                 "MPI_COMM_SELF with the world");
  exercise(MPI_COMM_SELF, "MPI_COMM_SELF");
  exercise(MPI_COMM_WORLD, "MPI_COMM_WORLD");

  MPI_Comm dup, dup2;
  OK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
  expect_compare(dup, MPI_COMM_WORLD, MPI_CONGRUENT, "a duplicate with the world");
  OK(MPI_Comm_set_name(dup, "my duplicate"));
  expect_comm_name(dup, "my duplicate");
  expect_comm_name(MPI_COMM_WORLD, "MPI_COMM_WORLD");
  exercise(dup, "a duplicate");
  MPI_Info info;
  OK(MPI_Info_create(&info));
  OK(MPI_Comm_dup_with_info(dup, info, &dup2));
  OK(MPI_Info_free(&info));
  expect_compare(dup2, dup, MPI_CONGRUENT, "a duplicate with info");
  exercise(dup2, "a duplicate with info");
  OK(MPI_Comm_free(&dup2));
  CHECK(dup2 == MPI_COMM_NULL, "MPI_Comm_free left the handle");
  OK(MPI_Comm_disconnect(&dup));
  CHECK(dup == MPI_COMM_NULL, "MPI_Comm_disconnect left the handle");
}

static void test_split(void) {
  MPI_Comm c;
  /* By parity, reversed. */
  OK(MPI_Comm_split(MPI_COMM_WORLD, rank % 2, -rank, &c));
  int n = -1, me = -1, want_n = (size - rank % 2 + 1) / 2;
  OK(MPI_Comm_size(c, &n));
  OK(MPI_Comm_rank(c, &me));
  int want_me = (size - 1 - rank) / 2;
  CHECK(n == want_n && me == want_me, "split by parity: size %d rank %d, expected %d %d",
        n, me, want_n, want_me);
  int wr[64];
  world_ranks(c, wr);
  for (int i = 0; i < n; i++) {
    int w = (size - 1 - (size - 1 - rank % 2) % 2) - 2 * i;
    CHECK(wr[i] == w, "split by parity: member %d is world rank %d, expected %d", i,
          wr[i], w);
  }
  expect_compare(c, MPI_COMM_WORLD, size == 1 ? MPI_CONGRUENT : MPI_UNEQUAL,
                 "a split by parity with the world");
  exercise(c, "a split by parity");
  OK(MPI_Comm_free(&c));

  /* One colour, reversed: the same members in another order. */
  OK(MPI_Comm_split(MPI_COMM_WORLD, 5, -rank, &c));
  expect_compare(c, MPI_COMM_WORLD, size == 1 ? MPI_CONGRUENT : MPI_SIMILAR,
                 "a reversed split with the world");
  OK(MPI_Comm_rank(c, &me));
  CHECK(me == size - 1 - rank, "a reversed split: rank %d", me);
  exercise(c, "a reversed split");
  OK(MPI_Comm_free(&c));

  /* Equal keys keep the parent's order. */
  OK(MPI_Comm_split(MPI_COMM_WORLD, 0, 0, &c));
  expect_compare(c, MPI_COMM_WORLD, MPI_CONGRUENT, "a split of one colour with the world");
  OK(MPI_Comm_free(&c));

  /* MPI_UNDEFINED: no communicator. */
  OK(MPI_Comm_split(MPI_COMM_WORLD, rank == 0 ? MPI_UNDEFINED : 1, 0, &c));
  if (rank == 0) {
    CHECK(c == MPI_COMM_NULL, "MPI_UNDEFINED gave a communicator");
  } else {
    OK(MPI_Comm_size(c, &n));
    CHECK(n == size - 1, "the split without rank 0 has size %d", n);
    exercise(c, "a split without rank 0");
    OK(MPI_Comm_free(&c));
  }

  /* A split of a split. */
  MPI_Comm half, quarter;
  OK(MPI_Comm_split(MPI_COMM_WORLD, rank < size / 2, rank, &half));
  OK(MPI_Comm_split(half, rank % 2, 0, &quarter));
  exercise(quarter, "a split of a split");
  OK(MPI_Comm_free(&quarter));
  OK(MPI_Comm_free(&half));

  /* Shared memory: every rank here is on one node. */
  OK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &c));
  expect_compare(c, MPI_COMM_WORLD, MPI_CONGRUENT, "the node's communicator with the world");
  exercise(c, "the node's communicator");
  OK(MPI_Comm_free(&c));
  OK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_UNDEFINED, rank, MPI_INFO_NULL, &c));
  CHECK(c == MPI_COMM_NULL, "split_type MPI_UNDEFINED gave a communicator");
  /* Guided by hardware (MPI 4.1, 7.4.2): the level the info names, the node for
   * mpi_shared_memory and hwloc's machine; MPI_COMM_NULL for a level not known here
   * and for none named. */
  const char *levels[] = {"mpi_shared_memory", "machine", "core", NULL};
  const int kinds[] = {MPI_COMM_TYPE_HW_GUIDED, MPI_COMM_TYPE_RESOURCE_GUIDED};
  for (int k = 0; k < 2; k++) {
    for (int l = 0; l < 4; l++) {
      MPI_Info info = MPI_INFO_NULL;
      if (levels[l]) {
        OK(MPI_Info_create(&info));
        OK(MPI_Info_set(info, "mpi_hw_resource_type", levels[l]));
      }
      OK(MPI_Comm_split_type(MPI_COMM_WORLD, kinds[k], rank, info, &c));
      if (l < 2) {
        expect_compare(c, MPI_COMM_WORLD, MPI_CONGRUENT, "a split guided to the node");
        OK(MPI_Comm_free(&c));
      } else {
        CHECK(c == MPI_COMM_NULL, "a split guided to %s gave a communicator",
              levels[l] ? levels[l] : "nothing");
      }
      if (info != MPI_INFO_NULL)
        OK(MPI_Info_free(&info));
    }
  }
}

static void test_create(void) {
  MPI_Group world, evens, odds;
  OK(MPI_Comm_group(MPI_COMM_WORLD, &world));
  int range[1][3] = {{0, size - 1, 2}};
  OK(MPI_Group_range_incl(world, 1, range, &evens));
  OK(MPI_Group_range_excl(world, 1, range, &odds));
  MPI_Comm c;
  OK(MPI_Comm_create(MPI_COMM_WORLD, evens, &c));
  if (rank % 2) {
    CHECK(c == MPI_COMM_NULL, "MPI_Comm_create gave a communicator to a non-member");
  } else {
    int n, me;
    OK(MPI_Comm_size(c, &n));
    OK(MPI_Comm_rank(c, &me));
    CHECK(n == (size + 1) / 2 && me == rank / 2, "MPI_Comm_create: size %d rank %d", n,
          me);
    MPI_Group g;
    int cmp = -1;
    OK(MPI_Comm_group(c, &g));
    OK(MPI_Group_compare(g, evens, &cmp));
    CHECK(cmp == MPI_IDENT, "the group of MPI_Comm_create's communicator: %d", cmp);
    OK(MPI_Group_free(&g));
    exercise(c, "MPI_Comm_create's communicator");
    OK(MPI_Comm_free(&c));
  }
  /* Only the members call MPI_Comm_create_group. */
  if (rank % 2) {
    OK(MPI_Comm_create_group(MPI_COMM_WORLD, odds, 12, &c));
    int n;
    OK(MPI_Comm_size(c, &n));
    CHECK(n == size / 2, "MPI_Comm_create_group: size %d", n);
    exercise(c, "MPI_Comm_create_group's communicator");
    OK(MPI_Comm_free(&c));
  }
  /* The empty group: nobody gets a communicator. */
  OK(MPI_Comm_create(MPI_COMM_WORLD, MPI_GROUP_EMPTY, &c));
  CHECK(c == MPI_COMM_NULL, "MPI_Comm_create of the empty group gave a communicator");
  OK(MPI_Group_free(&evens));
  if (size > 1)
    OK(MPI_Group_free(&odds));
  OK(MPI_Group_free(&world));
}

static void expect_group(MPI_Group g, int n, const int *world_ranks_of,
                         const char *what) {
  int gs = -1, gr = -1;
  OK(MPI_Group_size(g, &gs));
  CHECK(gs == n, "%s: size %d, expected %d", what, gs, n);
  MPI_Group world;
  OK(MPI_Comm_group(MPI_COMM_WORLD, &world));
  int in[64], out[64], want_rank = MPI_UNDEFINED;
  for (int i = 0; i < n; i++) {
    in[i] = i;
    if (world_ranks_of[i] == rank)
      want_rank = i;
  }
  OK(MPI_Group_translate_ranks(g, n, in, world, out));
  for (int i = 0; i < n; i++)
    CHECK(out[i] == world_ranks_of[i], "%s: member %d is world rank %d, expected %d",
          what, i, out[i], world_ranks_of[i]);
  OK(MPI_Group_rank(g, &gr));
  CHECK(gr == want_rank, "%s: MPI_Group_rank %d, expected %d", what, gr, want_rank);
  OK(MPI_Group_free(&world));
}

static void test_groups(void) {
  MPI_Group world, g, evens, odds, rev;
  int w[64], n;
  OK(MPI_Comm_group(MPI_COMM_WORLD, &world));
  for (int i = 0; i < size; i++)
    w[i] = i;
  expect_group(world, size, w, "the world's group");
  /* incl, in the order given */
  int pick[2] = {size - 1, 0};
  OK(MPI_Group_incl(world, size > 1 ? 2 : 1, pick, &g));
  expect_group(g, size > 1 ? 2 : 1, pick, "MPI_Group_incl");
  OK(MPI_Group_free(&g));
  CHECK(g == MPI_GROUP_NULL, "MPI_Group_free left the handle");
  /* excl */
  int zero[1] = {0};
  OK(MPI_Group_excl(world, 1, zero, &g));
  expect_group(g, size - 1, w + 1, "MPI_Group_excl of rank 0");
  if (size == 1)
    CHECK(g == MPI_GROUP_EMPTY, "excluding everybody is not MPI_GROUP_EMPTY");
  else
    OK(MPI_Group_free(&g));
  /* ranges: evens, odds, and the world backwards */
  int ev[64], od[64], bw[64], ne = 0, no = 0;
  for (int i = 0; i < size; i++) {
    if (i % 2)
      od[no++] = i;
    else
      ev[ne++] = i;
    bw[i] = size - 1 - i;
  }
  int evr[1][3] = {{0, size - 1, 2}}, bwr[1][3] = {{size - 1, 0, -1}};
  OK(MPI_Group_range_incl(world, 1, evr, &evens));
  expect_group(evens, ne, ev, "MPI_Group_range_incl of the evens");
  OK(MPI_Group_range_excl(world, 1, evr, &odds));
  expect_group(odds, no, od, "MPI_Group_range_excl of the evens");
  OK(MPI_Group_range_incl(world, 1, bwr, &rev));
  expect_group(rev, size, bw, "MPI_Group_range_incl backwards");
  /* set operations */
  int eo[64];
  for (int i = 0; i < ne; i++)
    eo[i] = ev[i];
  for (int i = 0; i < no; i++)
    eo[ne + i] = od[i];
  OK(MPI_Group_union(evens, odds, &g));
  expect_group(g, size, eo, "the union of evens and odds");
  OK(MPI_Group_free(&g));
  OK(MPI_Group_union(evens, world, &g));
  expect_group(g, size, eo, "the union of evens and the world");
  OK(MPI_Group_free(&g));
  OK(MPI_Group_intersection(rev, evens, &g));
  {
    int want[64], k = 0;
    for (int i = size - 1; i >= 0; i--)
      if (i % 2 == 0)
        want[k++] = i;
    expect_group(g, k, want, "the intersection of the reversed world and the evens");
  }
  OK(MPI_Group_free(&g));
  OK(MPI_Group_difference(world, evens, &g));
  expect_group(g, no, od, "the world without the evens");
  if (no)
    OK(MPI_Group_free(&g));
  else
    CHECK(g == MPI_GROUP_EMPTY, "an empty difference is not MPI_GROUP_EMPTY");
  /* translate: members, non-members, MPI_PROC_NULL */
  int in[3] = {0, size - 1, MPI_PROC_NULL}, out[3];
  OK(MPI_Group_translate_ranks(world, 3, in, evens, out));
  CHECK(out[0] == 0, "world rank 0 in the evens: %d", out[0]);
  CHECK(out[1] == ((size - 1) % 2 ? MPI_UNDEFINED : (size - 1) / 2),
        "world rank %d in the evens: %d", size - 1, out[1]);
  CHECK(out[2] == MPI_PROC_NULL, "MPI_PROC_NULL translates to %d", out[2]);
  /* compare */
  int cmp = -1;
  OK(MPI_Group_compare(world, world, &cmp));
  CHECK(cmp == MPI_IDENT, "the world's group with itself: %d", cmp);
  OK(MPI_Group_compare(world, rev, &cmp));
  CHECK(cmp == (size == 1 ? MPI_IDENT : MPI_SIMILAR), "the world with itself backwards: %d",
        cmp);
  OK(MPI_Group_compare(world, evens, &cmp));
  CHECK(cmp == (size == 1 ? MPI_IDENT : MPI_UNEQUAL), "the world with the evens: %d", cmp);
  /* the empty group */
  OK(MPI_Group_size(MPI_GROUP_EMPTY, &n));
  CHECK(n == 0, "MPI_GROUP_EMPTY has size %d", n);
  OK(MPI_Group_rank(MPI_GROUP_EMPTY, &n));
  CHECK(n == MPI_UNDEFINED, "a rank in MPI_GROUP_EMPTY: %d", n);
  OK(MPI_Group_incl(world, 0, NULL, &g));
  OK(MPI_Group_size(g, &n));
  CHECK(n == 0, "an empty MPI_Group_incl has size %d", n);
  OK(MPI_Group_compare(g, MPI_GROUP_EMPTY, &cmp));
  CHECK(cmp == MPI_IDENT, "an empty group with MPI_GROUP_EMPTY: %d", cmp);
  if (g != MPI_GROUP_EMPTY)
    OK(MPI_Group_free(&g));
  OK(MPI_Group_free(&evens));
  if (no)
    OK(MPI_Group_free(&odds));
  OK(MPI_Group_free(&rev));
  OK(MPI_Group_free(&world));
}

/* Attribute callbacks: what they saw. */
static int copies, deletes, extra_ok = 1, self_deleted;
static intptr_t last_deleted;
static int the_extra;

static int copy_plus_one(MPI_Comm old, int key, void *extra, void *in, void *out,
                         int *flag) {
  (void)old;
  (void)key;
  if (extra != &the_extra)
    extra_ok = 0;
  copies++;
  *(void **)out = (void *)((intptr_t)in + 1);
  *flag = 1;
  return MPI_SUCCESS;
}

static int copy_none(MPI_Comm old, int key, void *extra, void *in, void *out,
                     int *flag) {
  (void)old;
  (void)key;
  (void)extra;
  (void)in;
  (void)out;
  copies++;
  *flag = 0;
  return MPI_SUCCESS;
}

static int count_delete(MPI_Comm c, int key, void *value, void *extra) {
  (void)c;
  (void)key;
  if (extra != &the_extra)
    extra_ok = 0;
  deletes++;
  last_deleted = (intptr_t)value;
  return MPI_SUCCESS;
}

static int self_delete(MPI_Comm c, int key, void *value, void *extra) {
  (void)key;
  (void)extra;
  if (c == MPI_COMM_SELF && (intptr_t)value == 99)
    self_deleted++;
  return MPI_SUCCESS;
}

static void expect_attr(MPI_Comm c, int key, int present, intptr_t value,
                        const char *what) {
  void *v = NULL;
  int flag = -1;
  OK(MPI_Comm_get_attr(c, key, &v, &flag));
  CHECK(flag == present, "%s: attribute present %d, expected %d", what, flag, present);
  if (present)
    CHECK((intptr_t)v == value, "%s: attribute %ld, expected %ld", what, (long)(intptr_t)v,
          (long)value);
}

static int copy_fails(MPI_Comm old, int key, void *extra, void *in, void *out, int *flag) {
  (void)old;
  (void)key;
  (void)extra;
  (void)in;
  (void)out;
  *flag = 0;
  return MPI_ERR_ARG;
}

/* A copy function that fails with a code the program added. */
static int program_code;
static int copy_fails_with_code(MPI_Comm old, int key, void *extra, void *in, void *out,
                                int *flag) {
  (void)old, (void)key, (void)extra, (void)in, (void)out;
  *flag = 0;
  return program_code;
}

static int type_copy_fails(MPI_Datatype old, int key, void *extra, void *in, void *out,
                           int *flag) {
  (void)old;
  return copy_fails(MPI_COMM_NULL, key, extra, in, out, flag);
}

static void test_attributes(void) {
  int plus, none, same, nulled;
  OK(MPI_Comm_create_keyval(copy_plus_one, count_delete, &plus, &the_extra));
  OK(MPI_Comm_create_keyval(copy_none, count_delete, &none, &the_extra));
  OK(MPI_Comm_create_keyval(MPI_COMM_DUP_FN, MPI_COMM_NULL_DELETE_FN, &same, NULL));
  OK(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, count_delete, &nulled, &the_extra));
  MPI_Comm a, b;
  OK(MPI_Comm_dup(MPI_COMM_WORLD, &a));
  expect_attr(a, plus, 0, 0, "an attribute never set");
  OK(MPI_Comm_set_attr(a, plus, (void *)(intptr_t)10));
  OK(MPI_Comm_set_attr(a, none, (void *)(intptr_t)20));
  OK(MPI_Comm_set_attr(a, same, (void *)(intptr_t)30));
  OK(MPI_Comm_set_attr(a, nulled, (void *)(intptr_t)40));
  expect_attr(a, plus, 1, 10, "an attribute set");
  copies = deletes = 0;
  OK(MPI_Comm_dup(a, &b));
  CHECK(copies == 2, "MPI_Comm_dup called %d copy callbacks, expected 2", copies);
  expect_attr(b, plus, 1, 11, "an attribute copied plus one");
  expect_attr(b, none, 0, 0, "an attribute whose copy said no");
  expect_attr(b, same, 1, 30, "an attribute of MPI_COMM_DUP_FN");
  expect_attr(b, nulled, 0, 0, "an attribute of MPI_COMM_NULL_COPY_FN");
  expect_attr(a, plus, 1, 10, "the original attribute after a dup");
  /* Replacing deletes the old value; deleting deletes it. */
  OK(MPI_Comm_set_attr(a, plus, (void *)(intptr_t)12));
  CHECK(deletes == 1 && last_deleted == 10, "replacing: %d deletes, last %ld", deletes,
        (long)last_deleted);
  OK(MPI_Comm_delete_attr(a, plus));
  CHECK(deletes == 2 && last_deleted == 12, "deleting: %d deletes, last %ld", deletes,
        (long)last_deleted);
  expect_attr(a, plus, 0, 0, "a deleted attribute");
  /* Freeing deletes every attribute. */
  deletes = 0;
  OK(MPI_Comm_free(&b));
  CHECK(deletes == 1 && last_deleted == 11, "freeing a duplicate: %d deletes, last %ld",
        deletes, (long)last_deleted);
  /* A freed key's attributes stay, read and deleted under the key's number (MPI
   * 4.1, 7.7.2), or deleted with their communicator; freeing it again (as MPICH
   * allows) changes nothing. */
  deletes = 0;
  int none_kept = none, again = none;
  OK(MPI_Comm_free_keyval(&none));
  CHECK(none == MPI_KEYVAL_INVALID, "MPI_Comm_free_keyval left the key");
  CHECK(deletes == 0, "freeing a key deleted its attributes");
  expect_attr(a, none_kept, 1, 20, "the attribute of a freed key");
  OK(MPI_Comm_free_keyval(&again));
  OK(MPI_Comm_delete_attr(a, none_kept));
  CHECK(deletes == 1 && last_deleted == 20, "deleting under a freed key: %d deletes", deletes);
  OK(MPI_Comm_free(&a));
  CHECK(deletes == 2, "freeing a communicator with an attribute of MPI_COMM_NULL_COPY_FN: "
                      "%d deletes, expected 2",
        deletes);
  /* A copy callback that fails fails the duplicate, handed out as MPI_COMM_NULL,
   * with the class of the callback's code; what was copied before it (keys in
   * the order they were made) is deleted from the failed duplicate. */
  int failing;
  OK(MPI_Comm_create_keyval(copy_fails, MPI_COMM_NULL_DELETE_FN, &failing, NULL));
  OK(MPI_Comm_dup(MPI_COMM_WORLD, &a));
  OK(MPI_Comm_set_attr(a, plus, (void *)(intptr_t)50));
  OK(MPI_Comm_set_attr(a, failing, NULL));
  errors_return(a, 1);
  b = MPI_COMM_WORLD;
  copies = deletes = 0;
  EXPECT_ERR(MPI_Comm_dup(a, &b), MPI_ERR_ARG, "copy function");
  CHECK(b == MPI_COMM_NULL, "a failed MPI_Comm_dup handed out %#lx", (unsigned long)(uintptr_t)b);
  CHECK(copies == 1 && deletes == 1 && last_deleted == 51,
        "a failed MPI_Comm_dup: %d copies, %d deletes (last %ld), expected the copy deleted",
        copies, deletes, (long)last_deleted);
  OK(MPI_Comm_free(&a));
  CHECK(deletes == 2 && last_deleted == 50, "freeing after a failed dup: %d deletes", deletes);

  OK(MPI_Comm_free_keyval(&failing));
  /* The same of a datatype's (whose errors go to MPI_COMM_SELF's handler). */
  MPI_Datatype t, t_copy = MPI_INT;
  OK(MPI_Type_create_keyval(type_copy_fails, MPI_TYPE_NULL_DELETE_FN, &failing, NULL));
  OK(MPI_Type_dup(MPI_INT, &t));
  OK(MPI_Type_set_attr(t, failing, NULL));
  errors_return(MPI_COMM_SELF, 1);
  EXPECT_ERR(MPI_Type_dup(t, &t_copy), MPI_ERR_ARG, NULL);
  errors_return(MPI_COMM_SELF, 0);
  CHECK(t_copy == MPI_DATATYPE_NULL, "a failed MPI_Type_dup handed out %#lx",
        (unsigned long)(uintptr_t)t_copy);
  OK(MPI_Type_free(&t));
  OK(MPI_Type_free_keyval(&failing));
  CHECK(extra_ok, "a callback did not get the extra state");
  OK(MPI_Comm_free_keyval(&plus));
  OK(MPI_Comm_free_keyval(&same));
  OK(MPI_Comm_free_keyval(&nulled));

  /* MPI_COMM_SELF's attributes are deleted first thing in MPI_Finalize. */
  int key;
  OK(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, self_delete, &key, NULL));
  OK(MPI_Comm_set_attr(MPI_COMM_SELF, key, (void *)(intptr_t)99));

  /* Predefined attributes of the world. */
  int *v = NULL, flag = -1;
  OK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &v, &flag));
  CHECK(flag && *v >= 32767, "MPI_TAG_UB: flag %d value %d", flag, flag ? *v : 0);
  OK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_WTIME_IS_GLOBAL, &v, &flag));
  CHECK(!flag || *v == 0 || *v == 1, "MPI_WTIME_IS_GLOBAL: %d", *v);
  OK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_UNIVERSE_SIZE, &v, &flag));
  /* The launcher's word, which the test gives too; else absent or no smaller than
   * the job. */
  const char *universe = getenv("ABI_TEST_UNIVERSE");
  if (universe)
    CHECK(flag && *v == atoi(universe), "MPI_UNIVERSE_SIZE: flag %d value %d, expected %s", flag,
          flag ? *v : 0, universe);
  else
    CHECK(!flag || *v >= size, "MPI_UNIVERSE_SIZE: %d", *v);
  OK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_HOST, &v, &flag));
  CHECK(flag && (*v == MPI_PROC_NULL || (*v >= 0 && *v < size)), "MPI_HOST: %d", *v);
  OK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_IO, &v, &flag));
  CHECK(flag && (*v == MPI_ANY_SOURCE || *v == MPI_PROC_NULL || (*v >= 0 && *v < size)),
        "MPI_IO: %d", *v);
  /* Which program of the launch this is: the test names it where it joins several
   * (each given its own variable); else the first, where the launcher numbers them
   * (Slurm does not). */
  OK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_APPNUM, &v, &flag));
  const char *appnum = getenv("ABI_TEST_APPNUM");
  if (appnum)
    CHECK(flag && *v == atoi(appnum), "MPI_APPNUM: flag %d value %d, expected %s", flag,
          flag ? *v : 0, appnum);
  else
    CHECK(!flag || *v == 0, "MPI_APPNUM: %d", *v);
  /* The program's classes are above MPI_ERR_LASTCODE; the largest class or code
   * in use covers every one given out. */
  int cls, code;
  OK(MPI_Add_error_class(&cls));
  OK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_LASTUSEDCODE, &v, &flag));
  CHECK(cls > MPI_ERR_LASTCODE && flag && *v == cls,
        "MPI_Add_error_class gave %d, MPI_LASTUSEDCODE %d (MPI_ERR_LASTCODE %d)", cls, *v,
        MPI_ERR_LASTCODE);
  OK(MPI_Add_error_code(cls, &code));
  OK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_LASTUSEDCODE, &v, &flag));
  CHECK(flag && *v >= code && *v >= cls && *v >= MPI_ERR_LASTCODE,
        "MPI_LASTUSEDCODE: %d, below %d or MPI_ERR_LASTCODE", *v, code);
  /* Such a code, returned by a copy function, is what the call returns (its
   * class and string the program's). */
  int coded;
  program_code = code;
  OK(MPI_Comm_create_keyval(copy_fails_with_code, MPI_COMM_NULL_DELETE_FN, &coded, NULL));
  OK(MPI_Comm_dup(MPI_COMM_WORLD, &a));
  OK(MPI_Comm_set_attr(a, coded, NULL));
  errors_return(a, 1);
  int rc = MPI_Comm_dup(a, &b);
  CHECK(rc == code, "a copy function's own code %d came back as %d", code, rc);
  OK(MPI_Comm_free(&a));
  OK(MPI_Comm_free_keyval(&coded));
}

static void test_cart(void) {
  int dims[3] = {0, 0, 0};
  OK(MPI_Dims_create(size, 2, dims));
  CHECK(dims[0] * dims[1] == size && dims[0] >= dims[1] && dims[1] >= 1,
        "MPI_Dims_create(%d, 2): %d x %d", size, dims[0], dims[1]);
  {
    int d[3] = {0, 3, 0};
    OK(MPI_Dims_create(12, 3, d));
    CHECK(d[0] == 2 && d[1] == 3 && d[2] == 2, "MPI_Dims_create(12, {0, 3, 0}): %d %d %d",
          d[0], d[1], d[2]);
    int e[3] = {0, 0, 0};
    OK(MPI_Dims_create(6, 3, e));
    CHECK(e[0] == 3 && e[1] == 2 && e[2] == 1, "MPI_Dims_create(6, 3): %d %d %d", e[0],
          e[1], e[2]);
    int f[2] = {0, 0};
    OK(MPI_Dims_create(7, 2, f));
    CHECK(f[0] == 7 && f[1] == 1, "MPI_Dims_create(7, 2): %d %d", f[0], f[1]);
  }
  int status = -1;
  OK(MPI_Topo_test(MPI_COMM_WORLD, &status));
  CHECK(status == MPI_UNDEFINED, "MPI_Topo_test of the world: %d", status);

  int periods[2] = {1, 0};
  MPI_Comm cart;
  OK(MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 0, &cart));
  OK(MPI_Topo_test(cart, &status));
  CHECK(status == MPI_CART, "MPI_Topo_test of a grid: %d", status);
  int nd = -1, me;
  OK(MPI_Cartdim_get(cart, &nd));
  CHECK(nd == 2, "MPI_Cartdim_get: %d", nd);
  OK(MPI_Comm_rank(cart, &me));
  int gd[2], gp[2], gc[2];
  OK(MPI_Cart_get(cart, 2, gd, gp, gc));
  CHECK(gd[0] == dims[0] && gd[1] == dims[1] && gp[0] == 1 && gp[1] == 0,
        "MPI_Cart_get: dims %d %d periods %d %d", gd[0], gd[1], gp[0], gp[1]);
  CHECK(gc[0] == me / dims[1] && gc[1] == me % dims[1],
        "MPI_Cart_get: coordinates %d %d of rank %d (row-major)", gc[0], gc[1], me);
  for (int r = 0; r < size; r++) {
    int c[2], back = -1;
    OK(MPI_Cart_coords(cart, r, 2, c));
    OK(MPI_Cart_rank(cart, c, &back));
    CHECK(back == r && c[0] == r / dims[1] && c[1] == r % dims[1],
          "rank %d: coordinates %d %d, back to rank %d", r, c[0], c[1], back);
  }
  {
    /* Periodic in the first dimension: coordinates wrap. */
    int c[2] = {gc[0] + dims[0], gc[1]}, back = -1;
    OK(MPI_Cart_rank(cart, c, &back));
    CHECK(back == me, "a wrapped coordinate gives rank %d, not %d", back, me);
  }
  int src, dst;
  OK(MPI_Cart_shift(cart, 0, 1, &src, &dst));
  int want_src = ((gc[0] + dims[0] - 1) % dims[0]) * dims[1] + gc[1];
  int want_dst = ((gc[0] + 1) % dims[0]) * dims[1] + gc[1];
  CHECK(src == want_src && dst == want_dst, "MPI_Cart_shift(0, 1): %d %d, expected %d %d",
        src, dst, want_src, want_dst);
  int got = -1;
  OK(MPI_Sendrecv(&me, 1, MPI_INT, dst, 3, &got, 1, MPI_INT, src, 3, cart,
                  MPI_STATUS_IGNORE));
  CHECK(got == src, "a shift along a periodic dimension brought %d from %d", got, src);
  OK(MPI_Cart_shift(cart, 1, 1, &src, &dst));
  want_src = gc[1] == 0 ? MPI_PROC_NULL : me - 1;
  want_dst = gc[1] == dims[1] - 1 ? MPI_PROC_NULL : me + 1;
  CHECK(src == want_src && dst == want_dst, "MPI_Cart_shift(1, 1): %d %d, expected %d %d",
        src, dst, want_src, want_dst);
  got = -1;
  OK(MPI_Sendrecv(&me, 1, MPI_INT, dst, 4, &got, 1, MPI_INT, src, 4, cart,
                  MPI_STATUS_IGNORE));
  CHECK(got == (src == MPI_PROC_NULL ? -1 : src), "a shift along a line brought %d", got);
  /* A column: the first dimension kept. */
  MPI_Comm column;
  int keep[2] = {1, 0};
  OK(MPI_Cart_sub(cart, keep, &column));
  int n, cr;
  OK(MPI_Comm_size(column, &n));
  OK(MPI_Comm_rank(column, &cr));
  CHECK(n == dims[0] && cr == gc[0], "MPI_Cart_sub: size %d rank %d, expected %d %d", n,
        cr, dims[0], gc[0]);
  OK(MPI_Cartdim_get(column, &nd));
  CHECK(nd == 1, "MPI_Cart_sub: %d dimensions", nd);
  exercise(column, "a column of the grid");
  OK(MPI_Comm_free(&column));
  /* Keeping no dimension: a grid of one. */
  MPI_Comm point;
  int none[2] = {0, 0};
  OK(MPI_Cart_sub(cart, none, &point));
  OK(MPI_Comm_size(point, &n));
  OK(MPI_Cartdim_get(point, &nd));
  CHECK(n == 1 && nd == 0, "MPI_Cart_sub keeping nothing: size %d, %d dimensions", n, nd);
  OK(MPI_Comm_free(&point));
  /* A duplicate keeps the topology. */
  MPI_Comm dup;
  OK(MPI_Comm_dup(cart, &dup));
  OK(MPI_Topo_test(dup, &status));
  int dd[2], dp[2], dc[2];
  OK(MPI_Cart_get(dup, 2, dd, dp, dc));
  CHECK(status == MPI_CART && dd[0] == dims[0] && dc[1] == gc[1],
        "a duplicate of a grid: topology %d, dims %d", status, dd[0]);
  OK(MPI_Comm_free(&dup));
  int newrank = -1;
  OK(MPI_Cart_map(MPI_COMM_WORLD, 2, dims, periods, &newrank));
  CHECK(newrank >= 0 && newrank < size, "MPI_Cart_map: %d", newrank);
  OK(MPI_Comm_free(&cart));
  /* No dimensions at all: rank 0 alone. */
  OK(MPI_Cart_create(MPI_COMM_WORLD, 0, NULL, NULL, 0, &cart));
  if (rank == 0) {
    OK(MPI_Comm_size(cart, &n));
    OK(MPI_Cartdim_get(cart, &nd));
    CHECK(n == 1 && nd == 0, "a grid of no dimensions: size %d, %d dimensions", n, nd);
    OK(MPI_Comm_free(&cart));
  } else {
    CHECK(cart == MPI_COMM_NULL, "a grid of no dimensions has rank %d", rank);
  }

  /* A grid smaller than the world: the rest get no communicator. */
  if (size > 1) {
    int line[1] = {size - 1}, per[1] = {0};
    OK(MPI_Cart_create(MPI_COMM_WORLD, 1, line, per, 0, &cart));
    if (rank == size - 1) {
      CHECK(cart == MPI_COMM_NULL, "a rank outside the grid got a communicator");
    } else {
      exercise(cart, "a grid smaller than the world");
      OK(MPI_Comm_free(&cart));
    }
    OK(MPI_Cart_map(MPI_COMM_WORLD, 1, line, per, &newrank));
    CHECK((rank == size - 1) == (newrank == MPI_UNDEFINED),
          "MPI_Cart_map outside the grid: %d", newrank);
  }
}

static void test_graph(void) {
  int left = (rank + size - 1) % size, right = (rank + 1) % size;
  MPI_Comm g;
  OK(MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, 1, &left, MPI_UNWEIGHTED, 1, &right,
                                    MPI_UNWEIGHTED, MPI_INFO_NULL, 0, &g));
  int status = -1, in = -1, out = -1, weighted = -1;
  OK(MPI_Topo_test(g, &status));
  CHECK(status == MPI_DIST_GRAPH, "MPI_Topo_test of a graph: %d", status);
  OK(MPI_Dist_graph_neighbors_count(g, &in, &out, &weighted));
  CHECK(in == 1 && out == 1 && !weighted, "neighbours: %d in, %d out, weighted %d", in,
        out, weighted);
  int s = -1, d = -1;
  OK(MPI_Dist_graph_neighbors(g, 1, &s, MPI_UNWEIGHTED, 1, &d, MPI_UNWEIGHTED));
  CHECK(s == left && d == right, "neighbours: from %d to %d", s, d);
  exercise(g, "a graph's communicator");
  OK(MPI_Comm_free(&g));
  /* With weights. */
  int sw[1] = {5 + rank}, dw[1] = {7 + rank};
  OK(MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, 1, &left, sw, 1, &right, dw,
                                    MPI_INFO_NULL, 0, &g));
  OK(MPI_Dist_graph_neighbors_count(g, &in, &out, &weighted));
  CHECK(in == 1 && out == 1 && weighted, "weighted neighbours: %d in, %d out, weighted %d",
        in, out, weighted);
  int gsw = -1, gdw = -1;
  OK(MPI_Dist_graph_neighbors(g, 1, &s, &gsw, 1, &d, &gdw));
  CHECK(s == left && d == right && gsw == 5 + rank && gdw == 7 + rank,
        "weighted neighbours: from %d (weight %d) to %d (weight %d)", s, gsw, d, gdw);
  OK(MPI_Comm_free(&g));
  /* No neighbours at all. */
  OK(MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, 0, NULL, MPI_UNWEIGHTED, 0, NULL,
                                    MPI_UNWEIGHTED, MPI_INFO_NULL, 0, &g));
  OK(MPI_Dist_graph_neighbors_count(g, &in, &out, &weighted));
  CHECK(in == 0 && out == 0, "no neighbours: %d in, %d out", in, out);
  OK(MPI_Comm_free(&g));
}

static void test_info(void) {
  MPI_Info info, copy;
  int n = -1, flag = -1, len;
  char key[MPI_MAX_INFO_KEY], value[64];
  OK(MPI_Info_create(&info));
  OK(MPI_Info_get_nkeys(info, &n));
  CHECK(n == 0, "a new info has %d keys", n);
  OK(MPI_Info_set(info, "alpha", "one"));
  OK(MPI_Info_set(info, "beta", "a longer value"));
  OK(MPI_Info_set(info, "alpha", "uno"));
  OK(MPI_Info_get_nkeys(info, &n));
  CHECK(n == 2, "an info with two keys has %d", n);
  OK(MPI_Info_get_nthkey(info, 0, key));
  CHECK(strcmp(key, "alpha") == 0, "the first key is \"%s\"", key);
  OK(MPI_Info_get_nthkey(info, 1, key));
  CHECK(strcmp(key, "beta") == 0, "the second key is \"%s\"", key);
  len = sizeof value;
  OK(MPI_Info_get_string(info, "alpha", &len, value, &flag));
  CHECK(flag && strcmp(value, "uno") == 0 && len == 4, "alpha is \"%s\" (length %d)",
        value, len);
  /* A buffer too short: cut, and the length needed given back. */
  len = 5;
  OK(MPI_Info_get_string(info, "beta", &len, value, &flag));
  CHECK(flag && strcmp(value, "a lo") == 0 && len == 15,
        "beta in 5 bytes is \"%s\" (length %d)", value, len);
  len = sizeof value;
  OK(MPI_Info_get_string(info, "gamma", &len, value, &flag));
  CHECK(!flag, "a key never set was found");
  OK(MPI_Info_dup(info, &copy));
  OK(MPI_Info_delete(info, "alpha"));
  OK(MPI_Info_get_nkeys(info, &n));
  CHECK(n == 1, "after a delete, %d keys", n);
  OK(MPI_Info_get_nkeys(copy, &n));
  CHECK(n == 2, "the copy has %d keys after a delete in the original", n);
  OK(MPI_Info_free(&info));
  CHECK(info == MPI_INFO_NULL, "MPI_Info_free left the handle");
  OK(MPI_Info_free(&copy));
}

static void test_fortran_handles(void) {
  MPI_Comm dup;
  OK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
  CHECK(MPI_Comm_f2c(MPI_Comm_c2f(MPI_COMM_WORLD)) == MPI_COMM_WORLD, "MPI_COMM_WORLD");
  CHECK(MPI_Comm_f2c(MPI_Comm_c2f(dup)) == dup, "a duplicate's Fortran handle");
  CHECK(MPI_Comm_c2f(dup) != MPI_Comm_c2f(MPI_COMM_WORLD), "two communicators, one integer");
  MPI_Datatype t;
  OK(MPI_Type_contiguous(2, MPI_INT, &t));
  CHECK(MPI_Type_f2c(MPI_Type_c2f(t)) == t, "a datatype's Fortran handle");
  CHECK(MPI_Type_f2c(MPI_Type_c2f(MPI_DOUBLE)) == MPI_DOUBLE, "MPI_DOUBLE");
  MPI_Group g;
  OK(MPI_Comm_group(dup, &g));
  CHECK(MPI_Group_f2c(MPI_Group_c2f(g)) == g, "a group's Fortran handle");
  MPI_Info info;
  OK(MPI_Info_create(&info));
  CHECK(MPI_Info_f2c(MPI_Info_c2f(info)) == info, "an info's Fortran handle");
  MPI_Request r;
  int x = 0;
  OK(MPI_Irecv(&x, 1, MPI_INT, MPI_PROC_NULL, 0, dup, &r));
  CHECK(MPI_Request_f2c(MPI_Request_c2f(r)) == r, "a request's Fortran handle");
  CHECK(MPI_Request_f2c(MPI_Request_c2f(MPI_REQUEST_NULL)) == MPI_REQUEST_NULL,
        "MPI_REQUEST_NULL");
  OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
  CHECK(MPI_Op_f2c(MPI_Op_c2f(MPI_SUM)) == MPI_SUM, "MPI_SUM");
  CHECK(MPI_File_f2c(MPI_File_c2f(MPI_FILE_NULL)) == MPI_FILE_NULL, "MPI_FILE_NULL");
  CHECK(MPI_Session_f2c(MPI_Session_c2f(MPI_SESSION_NULL)) == MPI_SESSION_NULL,
        "MPI_SESSION_NULL");
  CHECK(MPI_Message_f2c(MPI_Message_c2f(MPI_MESSAGE_NULL)) == MPI_MESSAGE_NULL,
        "MPI_MESSAGE_NULL");
  CHECK(MPI_Errhandler_f2c(MPI_Errhandler_c2f(MPI_ERRORS_RETURN)) == MPI_ERRORS_RETURN,
        "MPI_ERRORS_RETURN");
  OK(MPI_Info_free(&info));
  OK(MPI_Group_free(&g));
  OK(MPI_Type_free(&t));
  OK(MPI_Comm_free(&dup));
}

int main(int argc, char **argv) {
  start("comm", &argc, &argv);
  test_basics();
  test_split();
  test_create();
  test_groups();
  test_attributes();
  test_cart();
  test_graph();
  test_info();
  test_fortran_handles();
  OK(MPI_Barrier(MPI_COMM_WORLD));
  OK(MPI_Finalize());
  CHECK(self_deleted == 1, "MPI_Finalize ran MPI_COMM_SELF's delete callback %d times",
        self_deleted);
  printf("PASS comm rank %d/%d\n", rank, size);
  return 0;
}
