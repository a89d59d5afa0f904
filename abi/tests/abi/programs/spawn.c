/* spawn.c: dynamic processes, at 1 or more ranks. The parents first ask for a
 * spawn the root refuses (maxprocs 0): every rank gets the error. Then they spawn
 * two copies of this program (argument "child"; named bare, found in the folder
 * the info's "path" gives, run in its "wdir"); parents and children exchange a
 * message with every member of the other group over the intercommunicator, meet
 * in its barrier, broadcast and all-reduce across it, make an intercommunicator
 * of both worlds over it (MPI_Intercomm_create), merge it (parents first), reduce
 * and broadcast on the merged communicator; both roots join (MPI_Comm_join, where
 * they share a node), and all disconnect; then meet again through a port the
 * parents' root opened (accept and connect between the two jobs, traffic both
 * ways). Then the parents' root alone spawns two more ("late", below), which both
 * worlds meet through MPI_Intercomm_create, then through a port between groups of
 * both jobs, and which spawn one more together. The first children then wait until
 * every parent has exited and still talk among themselves: a parent leaving is no
 * failure of theirs (none is counted). The children report as "spawn-child",
 * "spawn-late" and "spawn-grand".
 *
 * With the arguments "selves ROUNDS": every parent spawns on its own (over
 * MPI_COMM_SELF, all at once), ROUNDS times, two programs of 1 and 2 processes
 * that meet it in a barrier, disconnect and end, reporting as "spawn-self" (their
 * MPI_APPNUM checked): their first meeting among themselves is MPI_Finalize's; the
 * parents meet in a barrier of the world after each round.
 *
 * With the argument "placed [HOST]": one child, on HOST (the info key
 * "host"; rank 0's own node without), which tells the parents its node
 * ("spawn-placed"). With "misplaced HOST" (a node the launcher cannot start on): the
 * spawn fails on every rank, naming the key. */
#include "check.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#define CHILDREN 2

/* Every member of this side sends to every member of the other, then receives
 * from each: value 1000 * sender + receiver, tag `tag`. */
static void exchange(MPI_Comm inter, int tag) {
  int rank, remote;
  OK(MPI_Comm_rank(inter, &rank));
  OK(MPI_Comm_remote_size(inter, &remote));
  MPI_Request reqs[64];
  int out[64], in[64];
  CHECK(remote <= 64, "remote group of %d", remote);
  for (int r = 0; r < remote; r++) {
    out[r] = 1000 * rank + r;
    OK(MPI_Isend(&out[r], 1, MPI_INT, r, tag, inter, &reqs[r]));
  }
  for (int r = 0; r < remote; r++) {
    MPI_Status st;
    OK(MPI_Recv(&in[r], 1, MPI_INT, r, tag, inter, &st));
    CHECK(in[r] == 1000 * r + rank, "from remote %d: %d, expected %d", r, in[r], 1000 * r + rank);
    CHECK(st.MPI_SOURCE == r && st.MPI_TAG == tag, "status %d/%d", st.MPI_SOURCE, st.MPI_TAG);
  }
  OK(MPI_Waitall(remote, reqs, MPI_STATUSES_IGNORE));
}

/* Collectives across `inter`: a broadcast from the parents' rank 0 (MPI_ROOT),
 * an all-reduction of each side's ranks; then MPI_Intercomm_create between the two
 * jobs' worlds over it, and traffic over that. */
static void across(MPI_Comm inter, int parent) {
  int local, remote;
  OK(MPI_Comm_rank(inter, &local));
  OK(MPI_Comm_remote_size(inter, &remote));
  int word = parent && local == 0 ? 5151 : 0;
  int root = parent ? (local == 0 ? MPI_ROOT : MPI_PROC_NULL) : 0;
  OK(MPI_Bcast(&word, 1, MPI_INT, root, inter));
  CHECK(word == (parent && local != 0 ? 0 : 5151), "broadcast across: %d", word);
  int sum = -1;
  OK(MPI_Allreduce(&local, &sum, 1, MPI_INT, MPI_SUM, inter));
  CHECK(sum == remote * (remote - 1) / 2, "all-reduction across: %d", sum);
  MPI_Comm made = MPI_COMM_NULL;
  OK(MPI_Intercomm_create(MPI_COMM_WORLD, 0, inter, 0, 9, &made));
  exchange(made, 3);
  OK(MPI_Comm_free(&made));
}

/* The children of one parent alone (spawned over MPI_COMM_SELF; `peer` is the
 * intercommunicator there, MPI_COMM_NULL at the other parents):
 * MPI_Intercomm_create between both jobs' worlds over it reaches parents that never
 * met the children; every member talks to every member of the other job. Merged,
 * it splits into two halves that each hold processes of both jobs (alternate
 * ranks), and the first accepts on a port while the second connects; then the
 * merged communicator, of both jobs, spawns one more ("grand"), which talks with
 * every member. */
static void late(const char *program, MPI_Comm peer, int parent) {
  MPI_Comm inter, all, half, again, grand;
  OK(MPI_Intercomm_create(MPI_COMM_WORLD, 0, peer, 0, 123, &inter));
  exchange(inter, 11);
  OK(MPI_Intercomm_merge(inter, !parent, &all));
  int ar = -1;
  OK(MPI_Comm_rank(all, &ar));
  OK(MPI_Comm_split(all, ar % 2, ar, &half));
  char port[MPI_MAX_PORT_NAME] = "";
  if (ar == 0)
    OK(MPI_Open_port(MPI_INFO_NULL, port));
  OK(MPI_Bcast(port, MPI_MAX_PORT_NAME, MPI_CHAR, 0, all));
  if (ar % 2 == 0)
    OK(MPI_Comm_accept(port, MPI_INFO_NULL, 0, half, &again));
  else
    OK(MPI_Comm_connect(port, MPI_INFO_NULL, 0, half, &again));
  exchange(again, 12);
  OK(MPI_Comm_disconnect(&again));
  if (ar == 0)
    OK(MPI_Close_port(port));
  char *grand_args[] = {"grand", NULL};
  OK(MPI_Comm_spawn(program, grand_args, 1, MPI_INFO_NULL, 0, all, &grand, MPI_ERRCODES_IGNORE));
  exchange(grand, 13);
  OK(MPI_Comm_disconnect(&grand));
  OK(MPI_Comm_free(&half));
  OK(MPI_Comm_free(&all));
  OK(MPI_Comm_disconnect(&inter));
  if (peer != MPI_COMM_NULL)
    OK(MPI_Comm_disconnect(&peer));
}

/* Merge `inter` (`high`: this side last), check the order, reduce, broadcast
 * from the last rank, free. */
static void merge(MPI_Comm inter, int high, int parents) {
  MPI_Comm merged;
  OK(MPI_Intercomm_merge(inter, high, &merged));
  int local, mr, ms;
  OK(MPI_Comm_rank(inter, &local));
  OK(MPI_Comm_rank(merged, &mr));
  OK(MPI_Comm_size(merged, &ms));
  CHECK(ms == parents + CHILDREN, "merged size %d, expected %d", ms, parents + CHILDREN);
  int expected = high ? parents + local : local;
  CHECK(mr == expected, "merged rank %d, expected %d", mr, expected);
  int sum = -1;
  OK(MPI_Allreduce(&mr, &sum, 1, MPI_INT, MPI_SUM, merged));
  CHECK(sum == ms * (ms - 1) / 2, "sum of merged ranks %d", sum);
  int word = mr == ms - 1 ? 4242 : 0;
  OK(MPI_Bcast(&word, 1, MPI_INT, ms - 1, merged));
  CHECK(word == 4242, "broadcast from the last merged rank: %d", word);
  int flag = -1;
  OK(MPI_Comm_test_inter(merged, &flag));
  CHECK(flag == 0, "the merged communicator is an intracommunicator");
  OK(MPI_Comm_free(&merged));
}

/* The roots of both jobs (`parent`: the parents'), where they run on one node:
 * MPI_Comm_join over a loopback socket between the jobs, a message each way over
 * the intercommunicator it gives, and the socket left readable. On two nodes they
 * skip it. */
static void join_roots(MPI_Comm inter, int parent) {
  char mine[MPI_MAX_PROCESSOR_NAME] = "", theirs[MPI_MAX_PROCESSOR_NAME] = "";
  int len = 0, port = 0, fd = -1;
  OK(MPI_Get_processor_name(mine, &len));
  OK(MPI_Sendrecv(mine, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 0, 20, theirs,
                  MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 0, 20, inter, MPI_STATUS_IGNORE));
  if (strcmp(mine, theirs) != 0)
    return;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  if (parent) {
    int l = socket(AF_INET, SOCK_STREAM, 0);
    socklen_t alen = sizeof a;
    CHECK(l >= 0 && bind(l, (struct sockaddr *)&a, sizeof a) == 0 && listen(l, 1) == 0 &&
              getsockname(l, (struct sockaddr *)&a, &alen) == 0,
          "listening on loopback");
    port = ntohs(a.sin_port);
    OK(MPI_Send(&port, 1, MPI_INT, 0, 21, inter));
    fd = accept(l, NULL, NULL);
    close(l);
  } else {
    OK(MPI_Recv(&port, 1, MPI_INT, 0, 21, inter, MPI_STATUS_IGNORE));
    a.sin_port = htons(port);
    fd = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0, "connecting to %d", port);
  }
  CHECK(fd >= 0, "the socket between the jobs' roots");
  MPI_Comm joined;
  OK(MPI_Comm_join(fd, &joined));
  int remote = 0, out = parent ? 1 : 2, in = -1;
  OK(MPI_Comm_remote_size(joined, &remote));
  CHECK(remote == 1, "the join between the jobs: remote size %d", remote);
  OK(MPI_Sendrecv(&out, 1, MPI_INT, 0, 22, &in, 1, MPI_INT, 0, 22, joined, MPI_STATUS_IGNORE));
  CHECK(in == 3 - out, "over the join between the jobs: %d", in);
  OK(MPI_Comm_disconnect(&joined));
  char c = 'j';
  if (parent)
    CHECK(write(fd, &c, 1) == 1, "writing after the join");
  else
    CHECK(read(fd, &c, 1) == 1 && c == 'j', "the socket after the join: %c", c);
  close(fd);
}

/* Every parent sends its process id to every child over `inter`; the children
 * receive them into `pids` (room for 64). */
static void send_pids(MPI_Comm inter, int parent, int *pids) {
  int remote;
  OK(MPI_Comm_remote_size(inter, &remote));
  CHECK(remote <= 64, "remote group of %d", remote);
  for (int r = 0; r < remote; r++) {
    if (parent) {
      int pid = (int)getpid();
      OK(MPI_Send(&pid, 1, MPI_INT, r, 2, inter));
    } else {
      OK(MPI_Recv(&pids[r], 1, MPI_INT, r, 2, inter, MPI_STATUS_IGNORE));
    }
  }
}

/* Whether process `pid` has ended (gone, or a zombie not yet reaped). */
static int ended(int pid) {
  if (kill(pid, 0) != 0)
    return errno == ESRCH;
  char path[64], state = 0;
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE *f = fopen(path, "r");
  if (!f)
    return 1;
  int n = fscanf(f, "%*d (%*[^)]) %c", &state);
  fclose(f);
  return n == 1 && state == 'Z';
}

/* How many processes this one is connected to are known to have failed (the
 * performance variable msg_failed_peers). */
static unsigned long long failed_peers(void) {
  int provided = -1, index = -1, count = -1;
  OK(MPI_T_init_thread(MPI_THREAD_SINGLE, &provided));
  OK(MPI_T_pvar_get_index("msg_failed_peers", MPI_T_PVAR_CLASS_SIZE, &index));
  MPI_T_pvar_session session;
  MPI_T_pvar_handle handle;
  OK(MPI_T_pvar_session_create(&session));
  OK(MPI_T_pvar_handle_alloc(session, index, NULL, &handle, &count));
  unsigned long long n = 0;
  OK(MPI_T_pvar_read(session, handle, &n));
  OK(MPI_T_pvar_handle_free(session, &handle));
  OK(MPI_T_pvar_session_free(&session));
  OK(MPI_T_finalize());
  return n;
}

/* The children, once every one of `parents` processes `pids` has ended (within
 * 60 s): barriers and a ring over their own world still succeed, and the parents'
 * ends, after their disconnection, count as no failure. */
static void talk_after_parents_left(const int *pids, int parents) {
  for (int waited = 0; waited < 6000; waited++) {
    int left = 0;
    for (int p = 0; p < parents; p++)
      left += !ended(pids[p]);
    if (left == 0)
      break;
    CHECK(waited < 5999, "%d parents still running after 60 s", left);
    usleep(10000);
  }
  int rank, size;
  OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  OK(MPI_Comm_size(MPI_COMM_WORLD, &size));
  for (int round = 0; round < 20; round++) {
    OK(MPI_Barrier(MPI_COMM_WORLD));
    int out = 100 * round + rank, in = -1, from = (rank + size - 1) % size;
    OK(MPI_Sendrecv(&out, 1, MPI_INT, (rank + 1) % size, 3, &in, 1, MPI_INT, from, 3,
                    MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    CHECK(in == 100 * round + from, "round %d: %d from %d", round, in, from);
    usleep(1000);
  }
  unsigned long long failed = failed_peers();
  CHECK(failed == 0, "%llu processes disconnected from count as failed", failed);
}

int main(int argc, char **argv) {
  start("spawn", &argc, &argv);
  MPI_Comm parent, inter;
  int parents = -1, pids[64];
  OK(MPI_Comm_get_parent(&parent));
  int flag = -1;
  if (parent == MPI_COMM_NULL && argc == 3 && strcmp(argv[1], "selves") == 0) {
    char *commands[2] = {argv[0], argv[0]};
    char *args[] = {"self", NULL};
    char **argvs[2] = {args, args};
    int counts[2] = {1, 2};
    MPI_Info infos[2] = {MPI_INFO_NULL, MPI_INFO_NULL};
    for (int round = 0; round < atoi(argv[2]); round++) {
      OK(MPI_Comm_spawn_multiple(2, commands, argvs, counts, infos, 0, MPI_COMM_SELF, &inter,
                                 MPI_ERRCODES_IGNORE));
      OK(MPI_Barrier(inter));
      OK(MPI_Comm_disconnect(&inter));
      OK(MPI_Barrier(MPI_COMM_WORLD));
    }
    return finish();
  }
  if (parent != MPI_COMM_NULL && argc == 2 && strcmp(argv[1], "self") == 0) {
    check_program = "spawn-self";
    int rank, *appnum = NULL;
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    OK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_APPNUM, &appnum, &flag));
    CHECK(flag && *appnum == (rank == 0 ? 0 : 1), "MPI_APPNUM of rank %d", rank);
    OK(MPI_Barrier(parent));
    OK(MPI_Comm_disconnect(&parent));
    return finish();
  }
  if (parent == MPI_COMM_NULL && argc >= 2 && strstr(argv[1], "placed")) {
    char host[MPI_MAX_PROCESSOR_NAME] = "", there[MPI_MAX_PROCESSOR_NAME] = "";
    int len = 0;
    OK(MPI_Get_processor_name(host, &len));
    OK(MPI_Bcast(host, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 0, MPI_COMM_WORLD));
    if (argc == 3)
      snprintf(host, sizeof host, "%s", argv[2]);
    MPI_Info where;
    OK(MPI_Info_create(&where));
    OK(MPI_Info_set(where, "host", host));
    char *args[] = {"report", NULL};
    errors_return(MPI_COMM_WORLD, 1);
    int rc = MPI_Comm_spawn(argv[0], args, 1, where, 0, MPI_COMM_WORLD, &inter,
                            MPI_ERRCODES_IGNORE);
    OK(MPI_Info_free(&where));
    if (strcmp(argv[1], "misplaced") == 0) {
      EXPECT_ERR(rc, MPI_ERR_SPAWN, "host");
      return finish();
    }
    OK(rc);
    OK(MPI_Bcast(there, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 0, inter));
    CHECK(strcmp(there, host) == 0, "the child asked on %s runs on %s", host, there);
    OK(MPI_Comm_disconnect(&inter));
    return finish();
  }
  if (parent != MPI_COMM_NULL && argc == 2 && strcmp(argv[1], "report") == 0) {
    check_program = "spawn-placed";
    char here[MPI_MAX_PROCESSOR_NAME] = "";
    int len = 0;
    OK(MPI_Get_processor_name(here, &len));
    OK(MPI_Bcast(here, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, MPI_ROOT, parent));
    OK(MPI_Comm_disconnect(&parent));
    return finish();
  }
  if (parent == MPI_COMM_NULL) {
    errors_return(MPI_COMM_WORLD, 1);
    char *args[] = {"child", NULL};
    /* maxprocs matters at the root only: the root refuses, every rank hears. */
    int rc = MPI_Comm_spawn(argv[0], args, 0, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &inter,
                            MPI_ERRCODES_IGNORE);
    if (rank == 0)
      EXPECT_ERR(rc, MPI_ERR_ARG, "maxprocs");
    else
      EXPECT_ERR(rc, MPI_ERR_SPAWN, "maxprocs");

    /* The program by its bare name, found in the folder the info's "path" names;
     * the children run in the folder its "wdir" names. */
    int codes[CHILDREN] = {-1, -1};
    char folder[4096];
    snprintf(folder, sizeof folder, "%s", argv[0]);
    char *slash = strrchr(folder, '/');
    const char *name = slash ? slash + 1 : argv[0];
    if (slash)
      *slash = '\0';
    else
      snprintf(folder, sizeof folder, ".");
    MPI_Info where;
    OK(MPI_Info_create(&where));
    OK(MPI_Info_set(where, "path", folder));
    OK(MPI_Info_set(where, "wdir", "/"));
    OK(MPI_Comm_spawn(name, args, CHILDREN, where, 0, MPI_COMM_WORLD, &inter, codes));
    OK(MPI_Info_free(&where));
    CHECK(codes[0] == MPI_SUCCESS && codes[1] == MPI_SUCCESS, "error codes %d %d", codes[0],
          codes[1]);
    OK(MPI_Comm_test_inter(inter, &flag));
    CHECK(flag == 1, "MPI_Comm_spawn gives an intercommunicator");
    int rs = -1, ls = -1;
    OK(MPI_Comm_remote_size(inter, &rs));
    OK(MPI_Comm_size(inter, &ls));
    CHECK(rs == CHILDREN && ls == size, "sizes: remote %d, local %d", rs, ls);
    exchange(inter, 1);
    OK(MPI_Barrier(inter));
    across(inter, 1);
    merge(inter, 0, size);
    send_pids(inter, 1, NULL);
  } else if (argc == 2 && strcmp(argv[1], "late") == 0) {
    check_program = "spawn-late";
    late(argv[0], parent, 0);
    return finish();
  } else if (argc == 2 && strcmp(argv[1], "grand") == 0) {
    check_program = "spawn-grand";
    exchange(parent, 13);
    OK(MPI_Comm_disconnect(&parent));
    return finish();
  } else {
    check_program = "spawn-child";
    CHECK(argc == 2 && strcmp(argv[1], "child") == 0, "the child's arguments (%d)", argc);
    char cwd[4096];
    CHECK(getcwd(cwd, sizeof cwd) && strcmp(cwd, "/") == 0, "the child runs in %s", cwd);
    CHECK(size == CHILDREN, "the children's world holds %d", size);
    int *appnum = NULL;
    OK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_APPNUM, &appnum, &flag));
    CHECK(flag && *appnum == 0, "MPI_APPNUM");
    inter = parent;
    OK(MPI_Comm_test_inter(inter, &flag));
    CHECK(flag == 1, "the parent communicator is an intercommunicator");
    char name[MPI_MAX_OBJECT_NAME];
    int len = 0;
    OK(MPI_Comm_get_name(inter, name, &len));
    CHECK(strcmp(name, "MPI_COMM_PARENT") == 0, "the parent communicator's name: %s", name);
    OK(MPI_Comm_remote_size(inter, &parents));
    exchange(inter, 1);
    OK(MPI_Barrier(inter));
    across(inter, 0);
    merge(inter, 1, parents);
    CHECK(parents <= 64, "%d parents", parents);
    send_pids(inter, 0, pids);
  }
  /* The roots join; the parents' root opens a port and tells the children's root
   * over the intercommunicator; once disconnected, the two jobs meet again through
   * it. */
  char port[MPI_MAX_PORT_NAME] = "";
  if (rank == 0)
    join_roots(inter, parents < 0);
  if (parents < 0 && rank == 0) { /* a parent (no count of parents) */
    OK(MPI_Open_port(MPI_INFO_NULL, port));
    OK(MPI_Send(port, MPI_MAX_PORT_NAME, MPI_CHAR, 0, 9, inter));
  } else if (parents > 0 && rank == 0) {
    OK(MPI_Recv(port, MPI_MAX_PORT_NAME, MPI_CHAR, 0, 9, inter, MPI_STATUS_IGNORE));
  }
  OK(MPI_Comm_disconnect(&inter));
  CHECK(inter == MPI_COMM_NULL, "MPI_Comm_disconnect sets the handle to MPI_COMM_NULL");
  MPI_Comm again;
  if (parents < 0) {
    OK(MPI_Comm_accept(port, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &again));
    exchange(again, 7);
    OK(MPI_Comm_disconnect(&again));
    if (rank == 0)
      OK(MPI_Close_port(port));
  } else {
    OK(MPI_Comm_connect(port, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &again));
    exchange(again, 7);
    OK(MPI_Comm_disconnect(&again));
  }
  if (parents < 0) {
    MPI_Comm one = MPI_COMM_NULL;
    char *late_args[] = {"late", NULL};
    if (rank == 0)
      OK(MPI_Comm_spawn(argv[0], late_args, CHILDREN, MPI_INFO_NULL, 0, MPI_COMM_SELF, &one,
                        MPI_ERRCODES_IGNORE));
    late(argv[0], one, 1);
  }
  if (parents > 0)
    talk_after_parents_left(pids, parents);
  return finish();
}
