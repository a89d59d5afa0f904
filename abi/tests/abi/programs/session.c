/* session.c: sessions (MPI 4.1, 11.3), at 1 to 3 ranks.
 *
 * - info objects made and read before anything and after the end, an error
 *   handler made before the session it is given to;
 * - MPI_Session_init before MPI_Init (MPI_Initialized still false), given hints:
 *   the process sets, their names (the length asked first) and info (mpi_size);
 *   groups from them; communicators made from groups (of every rank, of the even
 *   ranks only, of this process alone), each carrying its own traffic: an all-reduce and a ring
 *   of messages checked; two made from the same group with different tags kept
 *   apart; an intercommunicator between the even and the odd ranks
 *   (MPI_Intercomm_create_from_groups: an all-reduce across it checked); the
 *   session's info (its thread level) and error handlers (a program's,
 *   called by MPI_Session_call_errhandler and by a bad process set name; the one
 *   given to MPI_Comm_create_from_group, called on its errors); the
 *   session's buffer for buffered sends (used by its communicators and those made
 *   from them, after a communicator's own, its room counted, flushed, detached);
 * - then MPI_Init_thread: the world model joins the running library; MPI_Finalize
 *   with the session open leaves its communicators working (MPI_Finalized true);
 *   MPI_Session_finalize leaves it for sessions to come; it ends at exit.
 * With the argument "only": sessions alone, two at once; after the last one
 * ends, a session begins again (the library stays), then MPI_Init and
 * MPI_Finalize. */
#include "check.h"

static int handled;
static MPI_Session handled_on;

static void on_error(MPI_Session *s, int *code, ...) {
  handled++;
  handled_on = *s;
  (void)code;
}

/* An all-reduce of the ranks and a ring message on `comm` (of `n` processes,
 * this one at `me` of them, the job's rank `job`). */
static void check_comm(MPI_Comm comm, int n, const char *what) {
  int csize = -1, me = -1;
  OK(MPI_Comm_size(comm, &csize));
  OK(MPI_Comm_rank(comm, &me));
  CHECK(csize == n, "%s: %d processes, not %d", what, csize, n);
  int sum = -1, want = n * (n - 1) / 2;
  OK(MPI_Allreduce(&me, &sum, 1, MPI_INT, MPI_SUM, comm));
  CHECK(sum == want, "%s: the ranks sum to %d, not %d", what, sum, want);
  int got = -1, mine = 100 + me;
  OK(MPI_Sendrecv(&mine, 1, MPI_INT, (me + 1) % n, 3, &got, 1, MPI_INT, (me + n - 1) % n, 3,
                  comm, MPI_STATUS_IGNORE));
  CHECK(got == 100 + (me + n - 1) % n, "%s: the ring gave %d", what, got);
}

static int pset_size(MPI_Session s, const char *pset) {
  MPI_Info info;
  OK(MPI_Session_get_pset_info(s, pset, &info));
  char value[32];
  int len = sizeof value, flag = 0;
  OK(MPI_Info_get_string(info, "mpi_size", &len, value, &flag));
  CHECK(flag, "no mpi_size in the info of %s", pset);
  OK(MPI_Info_free(&info));
  return atoi(value);
}

static MPI_Comm comm_of(MPI_Session s, const char *pset, const char *tag) {
  MPI_Group g;
  OK(MPI_Group_from_session_pset(s, pset, &g));
  MPI_Comm c;
  OK(MPI_Comm_create_from_group(g, tag, MPI_INFO_NULL, MPI_ERRORS_RETURN, &c));
  OK(MPI_Group_free(&g));
  return c;
}

static void test_session(MPI_Session s) {
  int n = -1;
  OK(MPI_Session_get_num_psets(s, MPI_INFO_NULL, &n));
  CHECK(n == 2, "%d process sets, not 2", n);
  int len = 0;
  OK(MPI_Session_get_nth_pset(s, MPI_INFO_NULL, 0, &len, NULL));
  CHECK(len == (int)strlen("mpi://WORLD") + 1, "the name's length %d", len);
  char name[64];
  OK(MPI_Session_get_nth_pset(s, MPI_INFO_NULL, 0, &len, name));
  CHECK(strcmp(name, "mpi://WORLD") == 0, "process set 0 is %s", name);
  len = sizeof name;
  OK(MPI_Session_get_nth_pset(s, MPI_INFO_NULL, 1, &len, name));
  CHECK(strcmp(name, "mpi://SELF") == 0, "process set 1 is %s", name);
  size = pset_size(s, "mpi://WORLD");
  CHECK(pset_size(s, "mpi://SELF") == 1, "mpi://SELF is not of one process");

  MPI_Comm all = comm_of(s, "mpi://WORLD", "org.rbtl.session.all");
  MPI_Comm again = comm_of(s, "mpi://WORLD", "org.rbtl.session.again");
  MPI_Comm alone = comm_of(s, "mpi://SELF", "org.rbtl.session.alone");
  OK(MPI_Comm_rank(all, &rank));
  /* Traffic on `again` posted first must not take `all`'s. */
  int early = -1, late = -1, one = 1, two = 2;
  MPI_Request r;
  OK(MPI_Irecv(&early, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, again, &r));
  OK(MPI_Sendrecv(&one, 1, MPI_INT, rank, 4, &late, 1, MPI_INT, rank, 4, all,
                  MPI_STATUS_IGNORE));
  OK(MPI_Send(&two, 1, MPI_INT, rank, 5, again));
  OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
  CHECK(late == 1 && early == 2, "traffic crossed communicators: %d %d", late, early);
  check_comm(all, size, "mpi://WORLD");
  check_comm(again, size, "mpi://WORLD again");
  check_comm(alone, 1, "mpi://SELF");

  /* The even ranks only. */
  MPI_Group world, evens;
  OK(MPI_Group_from_session_pset(s, "mpi://WORLD", &world));
  int ranges[1][3] = {{0, size - 1, 2}};
  OK(MPI_Group_range_incl(world, 1, ranges, &evens));
  if (rank % 2 == 0) {
    MPI_Comm even;
    OK(MPI_Comm_create_from_group(evens, "org.rbtl.session.even", MPI_INFO_NULL,
                                  MPI_ERRORS_RETURN, &even));
    check_comm(even, (size + 1) / 2, "the even ranks");
    OK(MPI_Comm_free(&even));
  }
  if (size > 1) {
    /* Evens against odds: each side's all-reduce gets the other side's sum. */
    MPI_Group odds, mine, other;
    int odd_ranges[1][3] = {{1, size - 1, 2}};
    OK(MPI_Group_range_incl(world, 1, odd_ranges, &odds));
    mine = rank % 2 ? odds : evens;
    other = rank % 2 ? evens : odds;
    MPI_Comm inter;
    OK(MPI_Intercomm_create_from_groups(mine, 0, other, 0, "org.rbtl.session.inter",
                                        MPI_INFO_NULL, MPI_ERRORS_RETURN, &inter));
    int remote = -1, sum = -1, want = 0;
    OK(MPI_Comm_remote_size(inter, &remote));
    int other_size = rank % 2 ? (size + 1) / 2 : size / 2;
    CHECK(remote == other_size, "the remote group has %d, not %d", remote, other_size);
    for (int r = 1 - rank % 2; r < size; r += 2)
      want += r;
    OK(MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, inter));
    CHECK(sum == want, "across the intercommunicator: %d, not %d", sum, want);
    OK(MPI_Comm_free(&inter));
    OK(MPI_Group_free(&odds));
  }
  OK(MPI_Group_free(&evens));
  OK(MPI_Group_free(&world));
  OK(MPI_Comm_free(&all));
  OK(MPI_Comm_free(&again));
  OK(MPI_Comm_free(&alone));

  MPI_Info info;
  OK(MPI_Session_get_info(s, &info));
  char level[64];
  int flag = 0;
  len = sizeof level;
  OK(MPI_Info_get_string(info, "mpi_thread_support_level", &len, level, &flag));
  CHECK(flag && strcmp(level, "MPI_THREAD_SINGLE") == 0, "the session's level: %s", level);
  len = sizeof level;
  OK(MPI_Info_get_string(info, "thread_level", &len, level, &flag));
  CHECK(flag && strcmp(level, "MPI_THREAD_SINGLE") == 0, "thread_level: %s", level);
  OK(MPI_Info_free(&info));
}

static int comm_handled;

static void on_comm_error(MPI_Comm *c, int *code, ...) {
  comm_handled++;
  (void)c;
  (void)code;
}

/* MPI_Comm_create_from_group's errors go to the handler it is given. */
static void test_given_handler(MPI_Session s) {
  MPI_Group g;
  MPI_Errhandler eh;
  OK(MPI_Group_from_session_pset(s, "mpi://SELF", &g));
  OK(MPI_Comm_create_errhandler(on_comm_error, &eh));
  int rc = MPI_Comm_create_from_group(g, "org.rbtl.session.given", MPI_INFO_NULL, eh, NULL);
  int cls = -1;
  OK(MPI_Error_class(rc, &cls));
  CHECK(cls == MPI_ERR_ARG && comm_handled == 1, "a null communicator pointer: class %d, %d calls",
        cls, comm_handled);
  OK(MPI_Errhandler_free(&eh));
  OK(MPI_Group_free(&g));
}

static void test_errhandlers(MPI_Session s) {
  MPI_Errhandler eh, got;
  OK(MPI_Session_create_errhandler(on_error, &eh));
  OK(MPI_Session_set_errhandler(s, eh));
  OK(MPI_Session_get_errhandler(s, &got));
  CHECK(got == eh, "MPI_Session_get_errhandler");
  OK(MPI_Session_call_errhandler(s, MPI_ERR_OTHER));
  CHECK(handled == 1 && handled_on == s, "the program's handler: %d calls", handled);
  MPI_Group g = MPI_GROUP_NULL;
  int rc = MPI_Group_from_session_pset(s, "mpi://NOWHERE", &g);
  int cls = -1;
  OK(MPI_Error_class(rc, &cls));
  CHECK(cls == MPI_ERR_ARG && handled == 2, "a bad process set: class %d, %d calls", cls,
        handled);
  OK(MPI_Session_set_errhandler(s, MPI_ERRORS_RETURN));
  OK(MPI_Errhandler_free(&eh));
  /* MPI_Session_init's errors go to the handler it is given. */
  MPI_Info bad;
  OK(MPI_Info_create(&bad));
  OK(MPI_Info_set(bad, "mpi_thread_support_level", "MPI_THREAD_SOMETIMES"));
  MPI_Session none = MPI_SESSION_NULL;
  rc = MPI_Session_init(bad, MPI_ERRORS_RETURN, &none);
  OK(MPI_Error_class(rc, &cls));
  CHECK(cls == MPI_ERR_ARG && none == MPI_SESSION_NULL, "a bad thread level: class %d", cls);
  /* A program's handler given to it is called, on no session. */
  MPI_Errhandler mine;
  OK(MPI_Session_create_errhandler(on_error, &mine));
  int before = handled;
  rc = MPI_Session_init(bad, mine, &none);
  OK(MPI_Error_class(rc, &cls));
  CHECK(cls == MPI_ERR_ARG && handled == before + 1 && handled_on == MPI_SESSION_NULL,
        "a bad thread level, a program's handler: class %d, %d calls", cls, handled - before);
  OK(MPI_Errhandler_free(&mine));
  OK(MPI_Info_free(&bad));
  EXPECT_ERR(MPI_Session_set_errhandler(s, MPI_ERRHANDLER_NULL), MPI_ERR_ERRHANDLER, NULL);
}

/* Buffered sends of the session's communicators go through its buffer. */
static void test_buffers(MPI_Session s) {
  MPI_Comm all = comm_of(s, "mpi://WORLD", "org.rbtl.session.buffers"), dup, small;
  OK(MPI_Comm_dup(all, &dup));
  int x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, y[8];
  EXPECT_ERR(MPI_Bsend(x, 8, MPI_INT, rank, 1, all), MPI_ERR_BUFFER,
             "MPI_Session_attach_buffer");
  enum { ROOM = 2 * (MPI_BSEND_OVERHEAD + 8 * sizeof(int)) };
  static char room[ROOM];
  OK(MPI_Session_attach_buffer(s, room, ROOM));
  EXPECT_ERR(MPI_Session_attach_buffer(s, room, ROOM), MPI_ERR_BUFFER, "attached");
  /* Two messages take room in it, on the communicator and on one made from it: then
   * a message of all its size does not fit. */
  static int whole[ROOM / sizeof(int)];
  OK(MPI_Bsend(x, 8, MPI_INT, rank, 1, all));
  OK(MPI_Bsend(x, 8, MPI_INT, rank, 2, dup));
  EXPECT_ERR(MPI_Bsend(whole, ROOM / sizeof(int) - 2 * 8, MPI_INT, rank, 3, all),
             MPI_ERR_BUFFER, "free");
  OK(MPI_Recv(y, 8, MPI_INT, rank, 1, all, MPI_STATUS_IGNORE));
  CHECK(y[7] == 8, "the first buffered message ends with %d", y[7]);
  OK(MPI_Recv(y, 8, MPI_INT, rank, 2, dup, MPI_STATUS_IGNORE));
  OK(MPI_Session_flush_buffer(s));
  MPI_Request r;
  OK(MPI_Session_iflush_buffer(s, &r));
  OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
  /* A communicator's own buffer comes first: too small for its size in ints. */
  static char tiny[MPI_BSEND_OVERHEAD + 4];
  OK(MPI_Comm_dup(all, &small));
  OK(MPI_Comm_attach_buffer(small, tiny, sizeof tiny));
  EXPECT_ERR(MPI_Bsend(whole, sizeof tiny / sizeof(int), MPI_INT, rank, 4, small),
             MPI_ERR_BUFFER, NULL);
  OK(MPI_Bsend(x, 1, MPI_INT, rank, 4, small));
  OK(MPI_Recv(y, 1, MPI_INT, rank, 4, small, MPI_STATUS_IGNORE));
  void *back = NULL;
  int back_size = -1;
  OK(MPI_Comm_detach_buffer(small, &back, &back_size));
  OK(MPI_Session_detach_buffer(s, &back, &back_size));
  CHECK(back == room && back_size == ROOM, "detached %p of %d bytes", back, back_size);
  EXPECT_ERR(MPI_Bsend(x, 1, MPI_INT, rank, 5, dup), MPI_ERR_BUFFER, NULL);
  EXPECT_ERR(MPI_Session_detach_buffer(s, &back, &back_size), MPI_ERR_BUFFER, NULL);
  /* Without a limit. */
  OK(MPI_Session_attach_buffer(s, MPI_BUFFER_AUTOMATIC, 0));
  for (int i = 0; i < 4; i++)
    OK(MPI_Bsend(x, 8, MPI_INT, rank, 6, all));
  for (int i = 0; i < 4; i++)
    OK(MPI_Recv(y, 8, MPI_INT, rank, 6, all, MPI_STATUS_IGNORE));
  OK(MPI_Session_detach_buffer(s, &back, &back_size));
  CHECK(back == MPI_BUFFER_AUTOMATIC && back_size == 0, "an automatic buffer came back as %p",
        back);
  OK(MPI_Comm_free(&small));
  OK(MPI_Comm_free(&dup));
  OK(MPI_Comm_free(&all));
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  check_program = "session";
  int flag = -1;
  OK(MPI_Initialized(&flag));
  CHECK(flag == 0, "initialized before anything");
  /* Info objects before anything (MPI 4.1, 11.2.1): the session's hints. */
  MPI_Info hints, env;
  int nkeys = -1;
  OK(MPI_Info_create(&hints));
  OK(MPI_Info_set(hints, "mpi_thread_support_level", "MPI_THREAD_SINGLE"));
  OK(MPI_Info_get_nkeys(hints, &nkeys));
  CHECK(nkeys == 1, "an info made before MPI_Init holds %d keys", nkeys);
  OK(MPI_Info_create_env(argc, argv, &env));
  char value[64];
  int len = sizeof value;
  OK(MPI_Info_get_string(env, "maxprocs", &len, value, &flag));
  CHECK(flag && atoi(value) >= 1, "MPI_Info_create_env before MPI_Init: maxprocs %s", value);
  OK(MPI_Info_free(&env));
  /* And the session's error handler, made before it. */
  MPI_Errhandler early, got;
  OK(MPI_Session_create_errhandler(on_error, &early));
  MPI_Session s;
  OK(MPI_Session_init(hints, early, &s));
  OK(MPI_Info_free(&hints));
  OK(MPI_Session_get_errhandler(s, &got));
  CHECK(got == early, "the session's handler is not the one made before it");
  OK(MPI_Session_set_errhandler(s, MPI_ERRORS_RETURN));
  OK(MPI_Errhandler_free(&early));
  OK(MPI_Initialized(&flag));
  CHECK(flag == 0, "a session made MPI_Initialized true");
  test_session(s);
  test_errhandlers(s);
  test_given_handler(s);
  test_buffers(s);
  if (argc > 1 && strcmp(argv[1], "only") == 0) {
    MPI_Session second;
    OK(MPI_Session_init(MPI_INFO_NULL, MPI_ERRORS_RETURN, &second));
    test_session(second);
    OK(MPI_Session_finalize(&s));
    CHECK(s == MPI_SESSION_NULL, "MPI_Session_finalize left the handle");
    MPI_Comm c = comm_of(second, "mpi://WORLD", "org.rbtl.session.last");
    check_comm(c, size, "the second session");
    OK(MPI_Comm_free(&c));
    OK(MPI_Session_finalize(&second));
    /* The library stays for sessions to come (MPI 4.1, 11.3.1): one begins
     * again, then the world model. */
    OK(MPI_Session_init(MPI_INFO_NULL, MPI_ERRORS_RETURN, &s));
    c = comm_of(s, "mpi://WORLD", "org.rbtl.session.reborn");
    check_comm(c, size, "a session begun after the last one ended");
    OK(MPI_Comm_free(&c));
    OK(MPI_Session_finalize(&s));
    OK(MPI_Init(&argc, &argv));
    check_comm(MPI_COMM_WORLD, size, "MPI_COMM_WORLD after the sessions");
    OK(MPI_Finalize());
  } else {
    int provided = -1;
    OK(MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided));
    CHECK(provided == MPI_THREAD_FUNNELED, "provided %d", provided);
    /* A session reports the level the library now gives (as MPICH and Open MPI). */
    MPI_Info used;
    char level[64];
    len = sizeof level;
    OK(MPI_Session_get_info(s, &used));
    OK(MPI_Info_get_string(used, "mpi_thread_support_level", &len, level, &flag));
    CHECK(flag && strcmp(level, "MPI_THREAD_FUNNELED") == 0, "the session's level: %s", level);
    OK(MPI_Info_free(&used));
    OK(MPI_Initialized(&flag));
    CHECK(flag == 1, "MPI_Init did not count");
    check_comm(MPI_COMM_WORLD, size, "MPI_COMM_WORLD");
    MPI_Comm c = comm_of(s, "mpi://WORLD", "org.rbtl.session.after");
    OK(MPI_Finalize());
    OK(MPI_Finalized(&flag));
    CHECK(flag == 1, "MPI_Finalize did not count");
    check_comm(c, size, "a session's communicator after MPI_Finalize");
    OK(MPI_Comm_free(&c));
    OK(MPI_Session_finalize(&s));
  }
  /* And after the library ended. */
  OK(MPI_Info_create(&hints));
  OK(MPI_Info_free(&hints));
  printf("PASS %s rank %d/%d\n", check_program, rank, size);
  return 0;
}
