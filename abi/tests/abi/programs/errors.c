/* Over 600 lines on purpose: the standard's error classes, each bad input a case
 * of its own, in one program (one job for the whole chapter). */
/* errors.c: errors and the environment at 1 or more ranks. Before MPI_Init and
 * after MPI_Finalize: MPI_Initialized, MPI_Finalized, the versions. The thread
 * level (MPI_THREAD_MULTIPLE), processor name, clock. With MPI_ERRORS_RETURN,
 * each bad input returns the standard's class (checked with MPI_Error_class) and
 * an error string naming the class and the problem (a send-receive's refused send
 * without waiting for its receive): ranks, tags, counts, buffers,
 * truncation, communicators, datatypes, requests, groups, operations, roots,
 * topologies, dimensions, keys, info objects, error handlers, null pointers,
 * a collective's aliased buffers (a rooted one's root alone refusing) and its
 * members' counts that differ (seen by every member, at 4 ranks too);
 * freed handles, handles of another kind and values that are no handle at all are
 * errors. A user error handler is called with the communicator and the code,
 * inherited by duplicates, kept when freed while set, and run by
 * MPI_Comm_call_errhandler. Error classes, codes and strings of the program's own. */
#include "check.h"
#include <limits.h>

static int flag_unused;

/* A user operation that is never applied. */
static void never(void *in, void *inout, int *len, MPI_Datatype *type) {
  (void)in;
  (void)inout;
  (void)len;
  (void)type;
}

/* Deletions of attributes, counted. */
static int deletions = 0;
static int count_deletion(MPI_Comm comm, int key, void *value, void *extra) {
  (void)comm, (void)key, (void)value, (void)extra;
  deletions++;
  return MPI_SUCCESS;
}

static void test_environment_before(void) {
  int flag = -1, v = -1, sv = -1;
  OK(MPI_Initialized(&flag));
  CHECK(flag == 0, "MPI_Initialized before MPI_Init: %d", flag);
  OK(MPI_Finalized(&flag));
  CHECK(flag == 0, "MPI_Finalized before MPI_Init: %d", flag);
  OK(MPI_Get_version(&v, &sv));
  CHECK(v == MPI_VERSION && sv == MPI_SUBVERSION, "MPI_Get_version before MPI_Init: %d.%d", v,
        sv);
  OK(MPI_Abi_get_version(&v, &sv));
  CHECK(v == MPI_ABI_VERSION && sv == MPI_ABI_SUBVERSION, "MPI_Abi_get_version: %d.%d", v, sv);
  char lib[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = -1;
  OK(MPI_Get_library_version(lib, &len));
  CHECK(len > 0 && len < MPI_MAX_LIBRARY_VERSION_STRING && (size_t)len == strlen(lib),
        "MPI_Get_library_version: length %d for \"%s\"", len, lib);
}

static void test_environment(int provided) {
  int flag = -1, level = -1;
  CHECK(provided == MPI_THREAD_MULTIPLE,
        "MPI_Init_thread(MPI_THREAD_MULTIPLE) provided %d, not MPI_THREAD_MULTIPLE", provided);
  OK(MPI_Query_thread(&level));
  CHECK(level == provided, "MPI_Query_thread: %d, provided %d", level, provided);
  OK(MPI_Is_thread_main(&flag));
  CHECK(flag, "MPI_Is_thread_main is false on the main thread");
  OK(MPI_Initialized(&flag));
  CHECK(flag == 1, "MPI_Initialized after MPI_Init: %d", flag);
  OK(MPI_Finalized(&flag));
  CHECK(flag == 0, "MPI_Finalized before MPI_Finalize: %d", flag);
  char name[MPI_MAX_PROCESSOR_NAME];
  int len = -1;
  OK(MPI_Get_processor_name(name, &len));
  CHECK(len > 0 && len < MPI_MAX_PROCESSOR_NAME && (size_t)len == strlen(name),
        "MPI_Get_processor_name: length %d for \"%s\"", len, name);
  double t0 = MPI_Wtime(), t1 = MPI_Wtime(), tick = MPI_Wtick();
  CHECK(t0 <= t1, "MPI_Wtime went back: %g then %g", t0, t1);
  CHECK(tick > 0 && tick < 1, "MPI_Wtick: %g", tick);
  OK(MPI_Pcontrol(1));
}

static void test_p2p_errors(void) {
  int buf[10] = {0}, x = 0, flag = 0;
  MPI_Status st;
  MPI_Request r;
  EXPECT_ERR(MPI_Send(buf, 1, MPI_INT, size, 0, MPI_COMM_WORLD), MPI_ERR_RANK,
             "MPI_COMM_WORLD");
  EXPECT_ERR(MPI_Send(buf, 1, MPI_INT, -7, 0, MPI_COMM_WORLD), MPI_ERR_RANK, "-7");
  EXPECT_ERR(MPI_Send(buf, 1, MPI_INT, MPI_ANY_SOURCE, 0, MPI_COMM_WORLD), MPI_ERR_RANK, NULL);
  EXPECT_ERR(MPI_Recv(buf, 1, MPI_INT, size + 3, 0, MPI_COMM_WORLD, &st), MPI_ERR_RANK, NULL);
  EXPECT_ERR(MPI_Isend(buf, 1, MPI_INT, size, 0, MPI_COMM_WORLD, &r), MPI_ERR_RANK, NULL);
  EXPECT_ERR(MPI_Send(buf, 1, MPI_INT, 0, -1, MPI_COMM_WORLD), MPI_ERR_TAG, "-1");
  EXPECT_ERR(MPI_Recv(buf, 1, MPI_INT, 0, -5, MPI_COMM_WORLD, &st), MPI_ERR_TAG, "-5");
  EXPECT_ERR(MPI_Irecv(buf, 1, MPI_INT, 0, -5, MPI_COMM_WORLD, &r), MPI_ERR_TAG, NULL);
  EXPECT_ERR(MPI_Send(buf, -1, MPI_INT, 0, 0, MPI_COMM_WORLD), MPI_ERR_COUNT, "-1");
  EXPECT_ERR(MPI_Irecv(buf, -3, MPI_INT, 0, 0, MPI_COMM_WORLD, &r), MPI_ERR_COUNT, NULL);
  EXPECT_ERR(MPI_Send(NULL, 5, MPI_INT, 0, 0, MPI_COMM_WORLD), MPI_ERR_BUFFER, NULL);
  EXPECT_ERR(MPI_Allreduce(buf, NULL, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD), MPI_ERR_BUFFER, NULL);
  EXPECT_ERR(MPI_Allreduce(NULL, buf, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD), MPI_ERR_BUFFER, NULL);
  EXPECT_ERR(MPI_Bcast(NULL, 2, MPI_INT, 0, MPI_COMM_WORLD), MPI_ERR_BUFFER, NULL);
  EXPECT_ERR(MPI_Send(buf, 1, MPI_INT, 0, 0, MPI_COMM_NULL), MPI_ERR_COMM, "MPI_COMM_NULL");
  EXPECT_ERR(MPI_Send(buf, 1, MPI_DATATYPE_NULL, 0, 0, MPI_COMM_WORLD), MPI_ERR_TYPE,
             "MPI_DATATYPE_NULL");
  EXPECT_ERR(MPI_Probe(size, 0, MPI_COMM_WORLD, &st), MPI_ERR_RANK, NULL);
  /* A send-receive whose send is refused returns at once: its receive, posted
   * first, is cancelled (nothing would match it) and takes no later message. */
  EXPECT_ERR(MPI_Sendrecv(buf, 1, MPI_INT, size, 0, &x, 1, MPI_INT, rank, 11, MPI_COMM_WORLD,
                          &st),
             MPI_ERR_RANK, NULL);
  EXPECT_ERR(MPI_Sendrecv(buf, 1, MPI_INT, rank, -3, &x, 1, MPI_INT, rank, 11, MPI_COMM_WORLD,
                          &st),
             MPI_ERR_TAG, NULL);
  EXPECT_ERR(MPI_Sendrecv_replace(buf, 1, MPI_INT, -7, 0, rank, 11, MPI_COMM_WORLD, &st),
             MPI_ERR_RANK, NULL);
  x = 14;
  OK(MPI_Send(&x, 1, MPI_INT, rank, 11, MPI_COMM_WORLD));
  x = 0;
  OK(MPI_Recv(&x, 1, MPI_INT, rank, 11, MPI_COMM_WORLD, &st));
  CHECK(x == 14, "after refused send-receives: received %d", x);
  EXPECT_ERR(MPI_Send_init(buf, 1, MPI_INT, 0, -2 - 7, MPI_COMM_WORLD, &r), MPI_ERR_TAG,
             NULL);
  MPI_Datatype t;
  OK(MPI_Type_contiguous(2, MPI_INT, &t));
  EXPECT_ERR(MPI_Send(buf, 1, t, 0, 0, MPI_COMM_WORLD), MPI_ERR_TYPE, "commit");
  OK(MPI_Type_free(&t));

  /* A send without a place for its request is refused before anything leaves: the
   * only message with tag 7 is the second. */
  x = 11;
  EXPECT_ERR(MPI_Isend(&x, 1, MPI_INT, rank, 7, MPI_COMM_WORLD, NULL), MPI_ERR_ARG, "request");
  x = 12;
  OK(MPI_Send(&x, 1, MPI_INT, rank, 7, MPI_COMM_WORLD));
  x = 0;
  OK(MPI_Recv(&x, 1, MPI_INT, rank, 7, MPI_COMM_WORLD, &st));
  OK(MPI_Iprobe(rank, 7, MPI_COMM_WORLD, &flag, &st));
  CHECK(x == 12 && !flag, "after a refused MPI_Isend: received %d, another waiting: %d", x,
        flag);
  EXPECT_ERR(MPI_Irecv(&x, 1, MPI_INT, rank, 8, MPI_COMM_WORLD, NULL), MPI_ERR_ARG, "request");
  /* A matched message stays unreceived when MPI_Imrecv has no place for its request. */
  MPI_Message m;
  x = 13;
  OK(MPI_Send(&x, 1, MPI_INT, rank, 9, MPI_COMM_WORLD));
  OK(MPI_Mprobe(rank, 9, MPI_COMM_WORLD, &m, &st));
  EXPECT_ERR(MPI_Imrecv(&x, 1, MPI_INT, &m, NULL), MPI_ERR_ARG, "request");
  x = 0;
  OK(MPI_Mrecv(&x, 1, MPI_INT, &m, &st));
  CHECK(x == 13, "MPI_Mrecv after a refused MPI_Imrecv: %d", x);
  /* Nor does a collective start: member 0's refused broadcast takes no turn. */
  x = rank == 0 ? 5 : 0;
  if (rank == 0)
    EXPECT_ERR(MPI_Ibcast(&x, 1, MPI_INT, 0, MPI_COMM_WORLD, NULL), MPI_ERR_ARG, "request");
  EXPECT_ERR(MPI_Bcast_init(&x, 1, MPI_INT, 0, MPI_COMM_WORLD, MPI_INFO_NULL, NULL), MPI_ERR_ARG,
             "request");
  if (rank == 0)
    x = 6;
  OK(MPI_Bcast(&x, 1, MPI_INT, 0, MPI_COMM_WORLD));
  CHECK(x == 6, "MPI_Bcast after a refused MPI_Ibcast: %d", x);
  x = 0;

  /* Truncation, to itself. */
  OK(MPI_Irecv(buf, 5, MPI_INT, rank, 3, MPI_COMM_WORLD, &r));
  OK(MPI_Send(buf, 10, MPI_INT, rank, 3, MPI_COMM_WORLD));
  EXPECT_ERR(MPI_Wait(&r, &st), MPI_ERR_TRUNCATE, "receive buffer");

  /* Requests: completed ones, null ones, of another kind. */
  MPI_Request old;
  OK(MPI_Isend(&x, 1, MPI_INT, rank, 4, MPI_COMM_WORLD, &r));
  old = r;
  OK(MPI_Recv(&x, 1, MPI_INT, rank, 4, MPI_COMM_WORLD, &st));
  OK(MPI_Wait(&r, &st));
  CHECK(r == MPI_REQUEST_NULL, "MPI_Wait left a request");
  EXPECT_ERR(MPI_Wait(&old, &st), MPI_ERR_REQUEST, "not a request");
  EXPECT_ERR(MPI_Test(&old, &flag, &st), MPI_ERR_REQUEST, NULL);
  EXPECT_ERR(MPI_Request_free(&old), MPI_ERR_REQUEST, NULL);
  r = MPI_REQUEST_NULL;
  EXPECT_ERR(MPI_Request_free(&r), MPI_ERR_REQUEST, NULL);
  EXPECT_ERR(MPI_Cancel(&old), MPI_ERR_REQUEST, NULL);
  MPI_Request wrong = (MPI_Request)MPI_COMM_WORLD;
  EXPECT_ERR(MPI_Wait(&wrong, &st), MPI_ERR_REQUEST, NULL);
  MPI_Request two[2] = {MPI_REQUEST_NULL, old};
  EXPECT_ERR(MPI_Waitall(2, two, MPI_STATUSES_IGNORE), MPI_ERR_REQUEST, NULL);
  /* MPI_Start on a request that is not persistent, and on an active one. */
  OK(MPI_Irecv(&x, 1, MPI_INT, rank, 5, MPI_COMM_WORLD, &r));
  EXPECT_ERR(MPI_Start(&r), MPI_ERR_REQUEST, "persistent");
  OK(MPI_Cancel(&r));
  OK(MPI_Wait(&r, &st));
  MPI_Request p;
  OK(MPI_Recv_init(&x, 1, MPI_INT, rank, 6, MPI_COMM_WORLD, &p));
  OK(MPI_Start(&p));
  EXPECT_ERR(MPI_Start(&p), MPI_ERR_REQUEST, "active");
  OK(MPI_Send(&x, 1, MPI_INT, rank, 6, MPI_COMM_WORLD));
  OK(MPI_Wait(&p, &st));
  OK(MPI_Request_free(&p));

  /* Null pointers where a call must read or write, each named. */
  EXPECT_ERR(MPI_Wait(NULL, &st), MPI_ERR_REQUEST, "request pointer");
  EXPECT_ERR(MPI_Test(&r, NULL, &st), MPI_ERR_ARG, "flag pointer");
  EXPECT_ERR(MPI_Get_count(&st, MPI_INT, NULL), MPI_ERR_ARG, "count pointer");
  EXPECT_ERR(MPI_Comm_free(NULL), MPI_ERR_ARG, "communicator pointer");
  EXPECT_ERR(MPI_Type_commit(NULL), MPI_ERR_ARG, "type pointer");
  EXPECT_ERR(MPI_Iprobe(rank, 0, MPI_COMM_WORLD, NULL, &st), MPI_ERR_ARG, "flag pointer");
  EXPECT_ERR(MPI_Comm_size(MPI_COMM_WORLD, NULL), MPI_ERR_ARG, "size pointer");
  EXPECT_ERR(MPI_Comm_rank(MPI_COMM_WORLD, NULL), MPI_ERR_ARG, "rank pointer");
  /* (Errors of no object go to MPI_COMM_SELF's handler, set to return.) */
  MPI_Group g;
  OK(MPI_Comm_group(MPI_COMM_WORLD, &g));
  EXPECT_ERR(MPI_Group_size(g, NULL), MPI_ERR_ARG, "size pointer");
  EXPECT_ERR(MPI_Group_rank(g, NULL), MPI_ERR_ARG, "rank pointer");
  OK(MPI_Group_free(&g));
  /* MPI_IN_PLACE is no buffer of MPI_Reduce_local, nor are its two buffers one. */
  EXPECT_ERR(MPI_Reduce_local(MPI_IN_PLACE, buf, 1, MPI_INT, MPI_SUM), MPI_ERR_BUFFER,
             "MPI_IN_PLACE");
  EXPECT_ERR(MPI_Reduce_local(buf, MPI_IN_PLACE, 1, MPI_INT, MPI_SUM), MPI_ERR_BUFFER,
             "inoutbuf");
  EXPECT_ERR(MPI_Reduce_local(buf, buf, 1, MPI_INT, MPI_SUM), MPI_ERR_BUFFER, "one buffer");
}

static void test_handle_errors(void) {
  int n;
  MPI_Comm c, stale;
  /* Communicators: null, freed, of another kind, no handle at all, predefined. */
  EXPECT_ERR(MPI_Comm_size(MPI_COMM_NULL, &n), MPI_ERR_COMM, "MPI_COMM_NULL");
  OK(MPI_Comm_dup(MPI_COMM_WORLD, &c));
  OK(MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN));
  stale = c;
  OK(MPI_Comm_free(&c));
  EXPECT_ERR(MPI_Comm_rank(stale, &n), MPI_ERR_COMM, "freed");
  EXPECT_ERR(MPI_Barrier(stale), MPI_ERR_COMM, NULL);
  EXPECT_ERR(MPI_Comm_free(&stale), MPI_ERR_COMM, NULL);
  MPI_Group g;
  OK(MPI_Comm_group(MPI_COMM_WORLD, &g));
  EXPECT_ERR(MPI_Comm_size((MPI_Comm)g, &n), MPI_ERR_COMM, "another kind");
  EXPECT_ERR(MPI_Comm_size((MPI_Comm)(intptr_t)0x12345678, &n), MPI_ERR_COMM, NULL);
  EXPECT_ERR(MPI_Comm_size((MPI_Comm)&n, &n), MPI_ERR_COMM, NULL);
  c = MPI_COMM_WORLD;
  EXPECT_ERR(MPI_Comm_free(&c), MPI_ERR_COMM, "MPI_COMM_WORLD");
  EXPECT_ERR(MPI_Comm_remote_size(MPI_COMM_WORLD, &n), MPI_ERR_COMM, "intercommunicator");
  MPI_Group remote;
  EXPECT_ERR(MPI_Comm_remote_group(MPI_COMM_WORLD, &remote), MPI_ERR_COMM, "intercommunicator");
  EXPECT_ERR(MPI_Comm_split(MPI_COMM_WORLD, -2, 0, &c), MPI_ERR_ARG, "-2");

  /* Datatypes: null, freed, a freed handle whose slot was used again, another
   * kind, predefined ones that cannot change (their names can). */
  MPI_Datatype t, t2, old;
  EXPECT_ERR(MPI_Type_size(MPI_DATATYPE_NULL, &n), MPI_ERR_TYPE, "MPI_DATATYPE_NULL");
  MPI_Aint lb;
  EXPECT_ERR(MPI_Type_size(MPI_INT, NULL), MPI_ERR_ARG, "size");
  EXPECT_ERR(MPI_Type_get_extent(MPI_INT, &lb, NULL), MPI_ERR_ARG, "extent");
  OK(MPI_Type_contiguous(3, MPI_INT, &t));
  old = t;
  OK(MPI_Type_free(&t));
  CHECK(t == MPI_DATATYPE_NULL, "MPI_Type_free left the handle");
  OK(MPI_Type_contiguous(5, MPI_INT, &t2));
  EXPECT_ERR(MPI_Type_size(old, &n), MPI_ERR_TYPE, "freed");
  OK(MPI_Type_size(t2, &n));
  CHECK(n == 20, "a type made after another was freed has size %d", n);
  EXPECT_ERR(MPI_Type_free(&old), MPI_ERR_TYPE, NULL);
  OK(MPI_Type_free(&t2));
  EXPECT_ERR(MPI_Type_size((MPI_Datatype)MPI_COMM_WORLD, &n), MPI_ERR_TYPE, NULL);
  EXPECT_ERR(MPI_Type_size((MPI_Datatype)g, &n), MPI_ERR_TYPE, "another kind");
  /* A type joining several parts of more runs than this library lists is refused
   * before it takes room (one of a single older type keeps that type's runs and
   * their stride); a vector of as many blocks one after the other is one run. */
  OK(MPI_Type_vector(INT_MAX / 2, 1, 3, MPI_INT, &t));
  int two[2] = {1, 1};
  MPI_Aint two_at[2] = {0, 4};
  MPI_Datatype two_types[2] = {t, MPI_INT}, joined;
  EXPECT_ERR(MPI_Type_create_struct(2, two, two_at, two_types, &joined), MPI_ERR_TYPE, "runs");
  OK(MPI_Type_free(&t));
  OK(MPI_Type_vector(INT_MAX / 2, 2, 2, MPI_CHAR, &t));
  MPI_Count big = 0;
  OK(MPI_Type_size_c(t, &big));
  CHECK(big == (MPI_Count)(INT_MAX / 2) * 2, "a vector of adjacent blocks: %lld bytes",
        (long long)big);
  OK(MPI_Type_free(&t));
  t = MPI_INT;
  EXPECT_ERR(MPI_Type_free(&t), MPI_ERR_TYPE, "predefined");
  char tname[MPI_MAX_OBJECT_NAME];
  int tlen = 0;
  OK(MPI_Type_set_name(MPI_INT, "mine"));
  OK(MPI_Type_get_name(MPI_INT, tname, &tlen));
  CHECK(strcmp(tname, "mine") == 0 && tlen == 4, "MPI_INT renamed: \"%s\"", tname);
  OK(MPI_Type_set_name(MPI_INT, "MPI_INT"));
  EXPECT_ERR(MPI_Type_set_name(MPI_DATATYPE_NULL, "none"), MPI_ERR_TYPE, NULL);
  EXPECT_ERR(MPI_Type_contiguous(-1, MPI_INT, &t), MPI_ERR_COUNT, NULL);
  EXPECT_ERR(MPI_Type_vector(2, 1, 1, MPI_DATATYPE_NULL, &t), MPI_ERR_TYPE, NULL);
  int ints[1];
  MPI_Aint addrs[1];
  MPI_Datatype types[1];
  EXPECT_ERR(MPI_Type_get_contents(MPI_INT, 1, 1, 1, ints, addrs, types), MPI_ERR_TYPE,
             "predefined");

  /* Groups. */
  MPI_Group gg, stale_g;
  EXPECT_ERR(MPI_Group_size(MPI_GROUP_NULL, &n), MPI_ERR_GROUP, "MPI_GROUP_NULL");
  int one[1] = {0};
  OK(MPI_Group_incl(g, 1, one, &gg));
  stale_g = gg;
  OK(MPI_Group_free(&gg));
  CHECK(gg == MPI_GROUP_NULL, "MPI_Group_free left the handle");
  EXPECT_ERR(MPI_Group_size(stale_g, &n), MPI_ERR_GROUP, "freed");
  EXPECT_ERR(MPI_Group_free(&stale_g), MPI_ERR_GROUP, NULL);
  EXPECT_ERR(MPI_Group_size((MPI_Group)MPI_COMM_WORLD, &n), MPI_ERR_GROUP, NULL);
  int bad[1] = {size}, twice[2] = {0, 0};
  EXPECT_ERR(MPI_Group_incl(g, 1, bad, &gg), MPI_ERR_RANK, NULL);
  EXPECT_ERR(MPI_Group_incl(g, 2, twice, &gg), MPI_ERR_RANK, "twice");
  EXPECT_ERR(MPI_Group_excl(g, 1, bad, &gg), MPI_ERR_RANK, NULL);
  int ranges[1][3] = {{0, 0, 0}};
  EXPECT_ERR(MPI_Group_range_incl(g, 1, ranges, &gg), MPI_ERR_ARG, "stride");
  int out[1];
  EXPECT_ERR(MPI_Group_translate_ranks(g, 1, bad, g, out), MPI_ERR_RANK, NULL);
  EXPECT_ERR(MPI_Comm_create(MPI_COMM_WORLD, MPI_GROUP_NULL, &c), MPI_ERR_GROUP, NULL);

  /* Operations. */
  int v = 1, w;
  MPI_Op op, stale_op;
  EXPECT_ERR(MPI_Allreduce(&v, &w, 1, MPI_INT, MPI_OP_NULL, MPI_COMM_WORLD), MPI_ERR_OP,
             "MPI_OP_NULL");
  EXPECT_ERR(MPI_Allreduce(&v, &w, 1, MPI_DOUBLE, MPI_BAND, MPI_COMM_WORLD), MPI_ERR_OP,
             "MPI_BAND");
  EXPECT_ERR(MPI_Allreduce(&v, &w, 1, MPI_INT, MPI_MINLOC, MPI_COMM_WORLD), MPI_ERR_OP,
             "MPI_MINLOC");
  EXPECT_ERR(MPI_Allreduce(&v, &w, 1, MPI_2INT, MPI_SUM, MPI_COMM_WORLD), MPI_ERR_OP, NULL);
  EXPECT_ERR(MPI_Reduce_local(&v, &w, 1, MPI_INT, (MPI_Op)MPI_INT), MPI_ERR_OP, NULL);
  op = MPI_SUM;
  EXPECT_ERR(MPI_Op_free(&op), MPI_ERR_OP, "predefined");
  OK(MPI_Op_create(never, 1, &op));
  stale_op = op;
  OK(MPI_Op_free(&op));
  CHECK(op == MPI_OP_NULL, "MPI_Op_free left the handle");
  EXPECT_ERR(MPI_Reduce_local(&v, &w, 1, MPI_INT, stale_op), MPI_ERR_OP, "freed");
  EXPECT_ERR(MPI_Op_free(&stale_op), MPI_ERR_OP, NULL);

  /* Collectives: the same bad argument on every rank. */
  EXPECT_ERR(MPI_Bcast(&v, 1, MPI_INT, size, MPI_COMM_WORLD), MPI_ERR_ROOT, "root");
  EXPECT_ERR(MPI_Bcast(&v, 1, MPI_INT, -1, MPI_COMM_WORLD), MPI_ERR_ROOT, NULL);
  EXPECT_ERR(MPI_Reduce(&v, &w, 1, MPI_INT, MPI_SUM, size + 1, MPI_COMM_WORLD), MPI_ERR_ROOT,
             NULL);
  EXPECT_ERR(MPI_Allreduce(&v, &w, -1, MPI_INT, MPI_SUM, MPI_COMM_WORLD), MPI_ERR_COUNT, NULL);
  EXPECT_ERR(MPI_Bcast(&v, 1, MPI_DATATYPE_NULL, 0, MPI_COMM_WORLD), MPI_ERR_TYPE, NULL);
  EXPECT_ERR(MPI_Barrier(MPI_COMM_NULL), MPI_ERR_COMM, NULL);
  /* The world still works. */
  OK(MPI_Allreduce(&v, &w, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
  CHECK(w == size, "MPI_Allreduce after errors: %d", w);

  /* Topologies. */
  int coords[2], dims[2] = {2, 0};
  EXPECT_ERR(MPI_Cart_coords(MPI_COMM_WORLD, 0, 2, coords), MPI_ERR_TOPOLOGY, "Cartesian");
  EXPECT_ERR(MPI_Dims_create(7, 2, dims), MPI_ERR_DIMS, NULL);
  EXPECT_ERR(MPI_Dims_create(-6, 0, dims), MPI_ERR_ARG, "negative");
  int zero_dims[1] = {0}, periods[1] = {0}, many[1] = {size + 1};
  EXPECT_ERR(MPI_Cart_create(MPI_COMM_WORLD, 1, zero_dims, periods, 0, &c), MPI_ERR_DIMS, NULL);
  c = MPI_COMM_WORLD;
  EXPECT_ERR(MPI_Cart_create(MPI_COMM_WORLD, 1, many, periods, 0, &c), MPI_ERR_DIMS, NULL);
  CHECK(c == MPI_COMM_NULL, "a failed MPI_Cart_create left its output %#lx", (unsigned long)c);
  /* Made with the others, then freed where the output is null. */
  int all[1] = {size}, index[1] = {0};
  EXPECT_ERR(MPI_Cart_create(MPI_COMM_WORLD, 1, all, periods, 0, NULL), MPI_ERR_ARG,
             "communicator pointer");
  EXPECT_ERR(MPI_Graph_create(MPI_COMM_WORLD, 1, index, NULL, 0, NULL), MPI_ERR_ARG,
             "communicator pointer");
  EXPECT_ERR(MPI_Comm_split(MPI_COMM_WORLD, rank % 2 ? MPI_UNDEFINED : 0, 0, NULL), MPI_ERR_ARG,
             "communicator pointer");
  int counted;
  OK(MPI_Comm_create_keyval(MPI_COMM_DUP_FN, count_deletion, &counted, NULL));
  OK(MPI_Comm_set_attr(MPI_COMM_WORLD, counted, &counted));
  EXPECT_ERR(MPI_Comm_dup(MPI_COMM_WORLD, NULL), MPI_ERR_ARG, "communicator pointer");
  CHECK(deletions == 1, "the refused duplicate was not freed (%d deletions)", deletions);
  OK(MPI_Comm_delete_attr(MPI_COMM_WORLD, counted));
  CHECK(deletions == 2, "%d deletions", deletions);
  OK(MPI_Comm_free_keyval(&counted));
  int in, outd, wgt;
  EXPECT_ERR(MPI_Dist_graph_neighbors_count(MPI_COMM_WORLD, &in, &outd, &wgt),
             MPI_ERR_TOPOLOGY, NULL);

  /* Attribute keys. */
  int key;
  void *val;
  OK(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, MPI_COMM_NULL_DELETE_FN, &key, NULL));
  int stale_key = key;
  OK(MPI_Comm_free_keyval(&key));
  EXPECT_ERR(MPI_Comm_get_attr(MPI_COMM_WORLD, stale_key, &val, &flag_unused), MPI_ERR_KEYVAL,
             NULL);
  EXPECT_ERR(MPI_Comm_set_attr(MPI_COMM_WORLD, stale_key, NULL), MPI_ERR_KEYVAL, NULL);
  EXPECT_ERR(MPI_Comm_set_attr(MPI_COMM_WORLD, MPI_KEYVAL_INVALID, NULL), MPI_ERR_KEYVAL, NULL);
  EXPECT_ERR(MPI_Comm_set_attr(MPI_COMM_WORLD, MPI_TAG_UB, NULL), MPI_ERR_KEYVAL, NULL);

  /* Info objects. */
  MPI_Info info;
  char long_key[MPI_MAX_INFO_KEY + 10];
  memset(long_key, 'k', sizeof long_key - 1);
  long_key[sizeof long_key - 1] = 0;
  OK(MPI_Info_create(&info));
  EXPECT_ERR(MPI_Info_delete(info, "absent"), MPI_ERR_INFO_NOKEY, "absent");
  EXPECT_ERR(MPI_Info_set(info, long_key, "v"), MPI_ERR_INFO_KEY, NULL);
  MPI_Info stale_info = info;
  OK(MPI_Info_free(&info));
  EXPECT_ERR(MPI_Info_get_nkeys(stale_info, &n), MPI_ERR_INFO, "freed");
  /* MPI_INFO_NULL means no hints where an info is given, but is no object to read. */
  MPI_Info none;
  int found = -1;
  char value[8];
  EXPECT_ERR(MPI_Info_get_nkeys(MPI_INFO_NULL, &n), MPI_ERR_INFO, "MPI_INFO_NULL");
  EXPECT_ERR(MPI_Info_dup(MPI_INFO_NULL, &none), MPI_ERR_INFO, "MPI_INFO_NULL");
  EXPECT_ERR(MPI_Info_get(MPI_INFO_NULL, "k", 7, value, &found), MPI_ERR_INFO, "MPI_INFO_NULL");
  EXPECT_ERR(MPI_Info_set((MPI_Info)MPI_COMM_WORLD, "k", "v"), MPI_ERR_INFO, NULL);
  /* Hints a call does not read are still none or an info object: a freed one, or a
   * handle of another kind, is refused. */
  MPI_Comm dup = MPI_COMM_NULL;
  EXPECT_ERR(MPI_Comm_dup_with_info(MPI_COMM_WORLD, stale_info, &dup), MPI_ERR_INFO, "freed");
  MPI_Request barrier_req;
  EXPECT_ERR(MPI_Barrier_init(MPI_COMM_WORLD, (MPI_Info)MPI_COMM_WORLD, &barrier_req),
             MPI_ERR_INFO, NULL);
  char port[MPI_MAX_PORT_NAME];
  EXPECT_ERR(MPI_Open_port(stale_info, port), MPI_ERR_INFO, NULL);
  MPI_Win dynamic;
  EXPECT_ERR(MPI_Win_create_dynamic(stale_info, MPI_COMM_WORLD, &dynamic), MPI_ERR_INFO, NULL);
  /* As a communicator MPI_Pack_size does not use. */
  EXPECT_ERR(MPI_Pack_size(1, MPI_INT, (MPI_Comm)MPI_INT, &n), MPI_ERR_COMM, NULL);
  /* A pack buffer of a negative size, even with nothing to pack. */
  int packed_at = 0;
  EXPECT_ERR(MPI_Pack(value, 0, MPI_INT, port, -1, &packed_at, MPI_COMM_WORLD), MPI_ERR_COUNT,
             "negative");
  EXPECT_ERR(MPI_Unpack(port, -2, &packed_at, value, 0, MPI_INT, MPI_COMM_WORLD), MPI_ERR_COUNT,
             "negative");

  /* Error handlers. */
  EXPECT_ERR(MPI_Comm_set_errhandler(MPI_COMM_WORLD, (MPI_Errhandler)MPI_COMM_WORLD),
             MPI_ERR_ERRHANDLER, NULL);
  MPI_Errhandler eh = (MPI_Errhandler)(intptr_t)0x777;
  EXPECT_ERR(MPI_Errhandler_free(&eh), MPI_ERR_ERRHANDLER, NULL);

  /* Error codes themselves. */
  int cls;
  EXPECT_ERR(MPI_Error_class(-5, &cls), MPI_ERR_ARG, NULL);
  char text[MPI_MAX_ERROR_STRING];
  EXPECT_ERR(MPI_Error_string(-5, text, &n), MPI_ERR_ARG, NULL);
  OK(MPI_Group_free(&g));
}

/* A collective's send buffer that is its receive buffer (or the member's own block
 * of it) where MPI_IN_PLACE is meant: refused with MPI_ERR_BUFFER by the member that
 * gave it, before anything moves. In a rooted collective the root alone refuses:
 * its call with right arguments then meets the others' one. */
static void test_aliased_buffers(void) {
  int *a = malloc(sizeof(int) * 2 * size), *got = malloc(sizeof(int) * 2 * size), x = -1;
  for (int i = 0; i < 2 * size; i++)
    a[i] = rank * 100 + i;
  MPI_Request req;
  EXPECT_ERR(MPI_Allreduce(a, a, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD), MPI_ERR_BUFFER, "alias");
  EXPECT_ERR(MPI_Iallreduce(a, a, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &req), MPI_ERR_BUFFER,
             NULL);
  EXPECT_ERR(MPI_Scan(a, a, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD), MPI_ERR_BUFFER, NULL);
  EXPECT_ERR(MPI_Exscan(a, a, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD), MPI_ERR_BUFFER, NULL);
  EXPECT_ERR(MPI_Reduce_scatter_block(a, a, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD),
             MPI_ERR_BUFFER, NULL);
  EXPECT_ERR(MPI_Allgather(&a[rank], 1, MPI_INT, a, 1, MPI_INT, MPI_COMM_WORLD), MPI_ERR_BUFFER,
             "block");
  EXPECT_ERR(MPI_Alltoall(a, 1, MPI_INT, a, 1, MPI_INT, MPI_COMM_WORLD), MPI_ERR_BUFFER, NULL);
  EXPECT_ERR(MPI_Ialltoall(a, 2, MPI_INT, a, 2, MPI_INT, MPI_COMM_WORLD, &req), MPI_ERR_BUFFER,
             NULL);
  for (int i = 0; i < 2 * size; i++)
    CHECK(a[i] == rank * 100 + i, "a refused collective changed element %d: %d", i, a[i]);
  /* Nothing of the same buffers is refused where nothing moves, nor in place. */
  OK(MPI_Allreduce(a, a, 0, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
  OK(MPI_Allreduce(MPI_IN_PLACE, a, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
  CHECK(a[0] == (size - 1) * 100, "MPI_Allreduce in place after refusals: %d", a[0]);
  a[0] = rank * 100;

  int rc = MPI_Reduce(a, rank == 0 ? a : NULL, 2, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    EXPECT_ERR(rc, MPI_ERR_BUFFER, NULL);
    OK(MPI_Reduce(MPI_IN_PLACE, a, 2, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD));
    CHECK(a[1] == 100 * size * (size - 1) / 2 + size, "MPI_Reduce after a refusal: %d", a[1]);
    a[0] = 0, a[1] = 1;
  } else {
    OK(rc);
  }
  rc = MPI_Gather(a, 1, MPI_INT, a, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    EXPECT_ERR(rc, MPI_ERR_BUFFER, "block");
    OK(MPI_Gather(a, 1, MPI_INT, got, 1, MPI_INT, 0, MPI_COMM_WORLD));
    for (int r = 0; r < size; r++)
      CHECK(got[r] == r * 100, "MPI_Gather after a refusal: rank %d's %d", r, got[r]);
  } else {
    OK(rc);
  }
  rc = MPI_Iscatter(a, 1, MPI_INT, rank == 0 ? a : &x, 1, MPI_INT, 0, MPI_COMM_WORLD, &req);
  if (rank == 0) {
    EXPECT_ERR(rc, MPI_ERR_BUFFER, "block");
    OK(MPI_Iscatter(a, 1, MPI_INT, &x, 1, MPI_INT, 0, MPI_COMM_WORLD, &req));
  } else {
    OK(rc);
  }
  OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
  CHECK(x == rank, "MPI_Iscatter after a refusal: %d", x);
  free(a);
  free(got);
}

/* Members whose counts differ (an erroneous program): a member fails with
 * MPI_ERR_TRUNCATE where a message it receives, or its own block, has another
 * length than its arguments give, after doing its part, so that none waits for
 * another for ever; the next collectives meet. */
static void test_mismatched_counts(void) {
  int v[4] = {1, 2, 3, 4}, w[8] = {0}, rc;
  int *all = calloc(4 * (size_t)size, sizeof(int));
  MPI_Request req;
  EXPECT_ERR(MPI_Alltoall(v, 2, MPI_INT, w, 1, MPI_INT, MPI_COMM_SELF), MPI_ERR_TRUNCATE,
             "own block");
  if (size < 2) {
    free(all);
    return;
  }
  rc = MPI_Bcast(v, rank == 0 ? 1 : 4, MPI_INT, 0, MPI_COMM_WORLD);
  if (rank == 0)
    OK(rc);
  else
    EXPECT_ERR(rc, MPI_ERR_TRUNCATE, "differ");
  OK(MPI_Ibcast(v, rank == 0 ? 4 : 1, MPI_INT, 0, MPI_COMM_WORLD, &req));
  rc = MPI_Wait(&req, MPI_STATUS_IGNORE);
  if (rank == 0)
    OK(rc);
  else
    EXPECT_ERR(rc, MPI_ERR_TRUNCATE, "differ");
  EXPECT_ERR(MPI_Allreduce(v, w, rank + 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD), MPI_ERR_TRUNCATE,
             NULL);
  EXPECT_ERR(MPI_Allgather(v, rank + 1, MPI_INT, all, rank + 1, MPI_INT, MPI_COMM_WORLD),
             MPI_ERR_TRUNCATE, NULL);
  /* Only member 0 disagrees: members that receive only from the others learn of
   * it all the same (by recursive doubling at 4 ranks, member 3 exchanges with 2
   * and 1 alone). */
  EXPECT_ERR(MPI_Allreduce(v, w, rank == 0 ? 1 : 4, MPI_INT, MPI_SUM, MPI_COMM_WORLD),
             MPI_ERR_TRUNCATE, NULL);
  OK(MPI_Iallreduce(v, w, rank == 0 ? 4 : 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &req));
  EXPECT_ERR(MPI_Wait(&req, MPI_STATUS_IGNORE), MPI_ERR_TRUNCATE, NULL);
  EXPECT_ERR(MPI_Allgather(v, rank == 0 ? 1 : 4, MPI_INT, all, 4, MPI_INT, MPI_COMM_WORLD),
             MPI_ERR_TRUNCATE, NULL);
  /* A member with nothing to send says so with a message all the same. */
  EXPECT_ERR(MPI_Allgather(v, rank == 0 ? 0 : 1, MPI_INT, all, rank == 0 ? 0 : 1, MPI_INT,
                           MPI_COMM_WORLD),
             MPI_ERR_TRUNCATE, NULL);
  OK(MPI_Allreduce(v, w, 4, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
  CHECK(w[0] == size && w[3] == 4 * size, "MPI_Allreduce after mismatched counts: %d %d", w[0],
        w[3]);
  OK(MPI_Iallreduce(v, w, 4, MPI_INT, MPI_MAX, MPI_COMM_WORLD, &req));
  OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
  CHECK(w[3] == 4, "MPI_Iallreduce after mismatched counts: %d", w[3]);
  free(all);
}

/* A user error handler: what it saw. */
static MPI_Comm seen_comm = MPI_COMM_NULL;
static int seen_code = MPI_SUCCESS, seen_calls = 0;
static char seen_text[MPI_MAX_ERROR_STRING];

static void record(MPI_Comm *comm, int *code, ...) {
  seen_comm = *comm;
  seen_code = *code;
  seen_calls++;
  /* MPI works inside an error handler. */
  int len;
  if (MPI_Error_string(*code, seen_text, &len) != MPI_SUCCESS)
    strcpy(seen_text, "(no string)");
}

/* A handler that sets the code to return to MPI_SUCCESS. */
static void forgive(MPI_Comm *comm, int *code, ...) {
  (void)comm;
  *code = MPI_SUCCESS;
}

static void expect_seen(MPI_Comm comm, int rc, int calls, int cls, const char *word,
                        const char *what) {
  int got = -1;
  CHECK(seen_calls == calls, "%s: the handler ran %d times, expected %d", what, seen_calls,
        calls);
  CHECK(seen_comm == comm, "%s: the handler got another communicator", what);
  CHECK(seen_code == rc, "%s: the handler got code %d, the call returned %d", what, seen_code,
        rc);
  OK(MPI_Error_class(seen_code, &got));
  CHECK(got == cls, "%s: the handler got class %d, expected %d", what, got, cls);
  CHECK(word == NULL || strstr(seen_text, word) != NULL,
        "%s: the handler's error string does not say \"%s\": \"%s\"", what, word, seen_text);
}

static void test_user_handler(void) {
  MPI_Comm c, d;
  MPI_Errhandler eh, got;
  OK(MPI_Comm_dup(MPI_COMM_WORLD, &c));
  OK(MPI_Comm_create_errhandler(record, &eh));
  OK(MPI_Comm_set_errhandler(c, eh));
  OK(MPI_Comm_get_errhandler(c, &got));
  CHECK(got == eh, "MPI_Comm_get_errhandler gave another handler");
  int x = 0;
  int rc = MPI_Send(&x, 1, MPI_INT, size + 5, 0, c);
  expect_seen(c, rc, 1, MPI_ERR_RANK, "MPI_ERR_RANK", "a bad rank");
  /* Freed while set: still the communicator's. */
  OK(MPI_Errhandler_free(&eh));
  CHECK(eh == MPI_ERRHANDLER_NULL, "MPI_Errhandler_free left the handle");
  rc = MPI_Recv(&x, 1, MPI_INT, 0, -3, c, MPI_STATUS_IGNORE);
  expect_seen(c, rc, 2, MPI_ERR_TAG, NULL, "a bad tag, the handler freed");
  /* A duplicate inherits it. */
  OK(MPI_Comm_dup(c, &d));
  rc = MPI_Bcast(&x, 1, MPI_INT, -9, d);
  expect_seen(d, rc, 3, MPI_ERR_ROOT, NULL, "a bad root on a duplicate");
  /* The program's own classes and codes. */
  int cls, code, code2;
  OK(MPI_Add_error_class(&cls));
  CHECK(cls > MPI_ERR_ERRHANDLER, "MPI_Add_error_class gave %d, a predefined class", cls);
  OK(MPI_Add_error_code(cls, &code));
  OK(MPI_Add_error_code(cls, &code2));
  CHECK(code != code2, "two codes of one class are equal: %d", code);
  {
    /* Without a string, an added class's and code's are empty (MPI 4.1, 9.5). */
    char none[MPI_MAX_ERROR_STRING] = "x";
    int none_len = -1;
    OK(MPI_Error_string(cls, none, &none_len));
    CHECK(none[0] == 0 && none_len == 0, "an added class's string before one was given: %s",
          none);
    OK(MPI_Error_string(code2, none, &none_len));
    CHECK(none[0] == 0, "an added code's string before one was given: %s", none);
  }
  OK(MPI_Add_error_string(code, "the program's own error"));
  OK(MPI_Add_error_string(cls, "the program's own class"));
  int gotcls = -1, len = -1;
  char text[MPI_MAX_ERROR_STRING];
  OK(MPI_Error_class(code, &gotcls));
  CHECK(gotcls == cls, "the class of an added code: %d, expected %d", gotcls, cls);
  OK(MPI_Error_string(code, text, &len));
  CHECK(strcmp(text, "the program's own error") == 0 && len == (int)strlen(text),
        "an added code's string: \"%s\"", text);
  OK(MPI_Error_string(cls, text, &len));
  CHECK(strcmp(text, "the program's own class") == 0, "an added class's string: \"%s\"", text);
  EXPECT_ERR(MPI_Add_error_code(MPI_ERR_LASTCODE - 1, &code2), MPI_ERR_ARG, NULL);
  EXPECT_ERR(MPI_Add_error_string(MPI_ERR_RANK, "no"), MPI_ERR_ARG, NULL);
  /* MPI_Comm_call_errhandler runs the handler with the code. */
  OK(MPI_Comm_call_errhandler(c, code));
  CHECK(seen_calls == 4 && seen_comm == c && seen_code == code &&
            strcmp(seen_text, "the program's own error") == 0,
        "MPI_Comm_call_errhandler: %d calls, code %d", seen_calls, seen_code);
  OK(MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN));
  OK(MPI_Comm_call_errhandler(c, code));
  CHECK(seen_calls == 4, "MPI_Comm_call_errhandler with MPI_ERRORS_RETURN ran the handler");
  /* The code a handler leaves is what the call returns (MPI 4.1, 9.3). */
  MPI_Errhandler lenient;
  OK(MPI_Comm_create_errhandler(forgive, &lenient));
  OK(MPI_Comm_set_errhandler(c, lenient));
  OK(MPI_Errhandler_free(&lenient));
  rc = MPI_Send(&x, 1, MPI_INT, size + 5, 0, c);
  CHECK(rc == MPI_SUCCESS, "the handler left MPI_SUCCESS, the call returned %d", rc);
  /* A null handle has no handler to call. */
  EXPECT_ERR(MPI_Comm_call_errhandler(MPI_COMM_NULL, code), MPI_ERR_COMM, NULL);
  EXPECT_ERR(MPI_Win_call_errhandler(MPI_WIN_NULL, code), MPI_ERR_WIN, NULL);
  /* MPI_ERRORS_RETURN on one communicator leaves the others' as they were. */
  OK(MPI_Comm_get_errhandler(d, &got));
  CHECK(got != MPI_ERRORS_RETURN, "setting one communicator's handler changed another's");
  OK(MPI_Errhandler_free(&got));
  OK(MPI_Comm_free(&d));
  OK(MPI_Comm_free(&c));
}

int main(int argc, char **argv) {
  check_program = "errors";
  setvbuf(stdout, NULL, _IOLBF, 0);
  test_environment_before();
  int provided = -1;
  OK(MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided));
  OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  OK(MPI_Comm_size(MPI_COMM_WORLD, &size));
  test_environment(provided);
  /* Errors on the world, and those of no object, returned: those go to
   * MPI_COMM_WORLD's handler while the program has set none on MPI_COMM_SELF (as
   * programs written for MPI 3.1 expect), then to MPI_COMM_SELF's (MPI 4). */
  errors_return(MPI_COMM_WORLD, 1);
  int bytes;
  EXPECT_ERR(MPI_Type_size(MPI_DATATYPE_NULL, &bytes), MPI_ERR_TYPE, NULL);
  errors_return(MPI_COMM_SELF, 1);
  errors_return(MPI_COMM_WORLD, 0);
  EXPECT_ERR(MPI_Type_size(MPI_DATATYPE_NULL, &bytes), MPI_ERR_TYPE, NULL);
  errors_return(MPI_COMM_WORLD, 1);
  OK(MPI_Type_size(MPI_INT, &bytes));
  test_p2p_errors();
  test_handle_errors();
  test_aliased_buffers();
  test_mismatched_counts();
  test_user_handler();
  OK(MPI_Barrier(MPI_COMM_WORLD));
  OK(MPI_Finalize());
  int flag = -1, v = -1, sv = -1;
  MPI_Finalized(&flag);
  CHECK(flag == 1, "MPI_Finalized after MPI_Finalize: %d", flag);
  MPI_Initialized(&flag);
  CHECK(flag == 1, "MPI_Initialized after MPI_Finalize: %d", flag);
  MPI_Get_version(&v, &sv);
  CHECK(v == MPI_VERSION, "MPI_Get_version after MPI_Finalize: %d", v);
  printf("PASS errors rank %d/%d\n", rank, size);
  return 0;
}
