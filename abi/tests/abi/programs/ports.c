/* ports.c: ports and names (MPI 4.1, 11.8.5-11.8.6), at 2 or more ranks. The world
 * splits in two: the first rank opens a port, publishes it under a service name
 * and accepts on it with its half; the others look the name up and connect with
 * theirs. Over the intercommunicator every member sends to every member of the
 * other side; it is merged (the accepting side first) and all-reduced, then
 * disconnected. The same port takes a second connection. Errors: an unknown
 * service (MPI_ERR_NAME), a service published twice or unpublished when it is not
 * (MPI_ERR_SERVICE), a port this process did not open or no port at all, a
 * port closed, a port where no one accepts within the info's "timeout"
 * (MPI_ERR_PORT). Then MPI_Comm_join: on each node, its first and last ranks
 * join over a loopback TCP connection, talk over the intercommunicator and merge
 * it, and the socket still carries their bytes afterwards; a socket whose other end
 * is closed and a descriptor that is none are errors. A connection whose request
 * waits for a port when it closes is told so. MPI_APPNUM (MPI 4.1, 11.10.3) is
 * absent or which executable this is, never negative (Slurm numbers none).
 *
 * With the argument "unnamed", for a launcher that keeps no names (hydra, Slurm
 * and rbtlrun all keep them): publishing and looking up fail, the port travels by
 * MPI_Bcast, and a connection to a port already closed gives up after the info's
 * "timeout". */
#include "check.h"
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

static void talk(MPI_Comm inter, int accepting, int round) {
  int me, remote;
  OK(MPI_Comm_rank(inter, &me));
  OK(MPI_Comm_remote_size(inter, &remote));
  CHECK(remote >= 1 && remote <= 64, "remote group of %d", remote);
  MPI_Request reqs[128];
  int out[64], in[64];
  for (int r = 0; r < remote; r++) {
    out[r] = 1000 * round + 100 * accepting + 10 * me + r;
    OK(MPI_Isend(&out[r], 1, MPI_INT, r, round, inter, &reqs[r]));
    OK(MPI_Irecv(&in[r], 1, MPI_INT, r, round, inter, &reqs[remote + r]));
  }
  OK(MPI_Waitall(2 * remote, reqs, MPI_STATUSES_IGNORE));
  for (int r = 0; r < remote; r++) {
    int want = 1000 * round + 100 * !accepting + 10 * r + me;
    CHECK(in[r] == want, "round %d: %d from %d, not %d", round, in[r], r, want);
  }
  MPI_Comm merged;
  OK(MPI_Intercomm_merge(inter, !accepting, &merged));
  int n = -1, sum = -1, one = 1;
  OK(MPI_Comm_size(merged, &n));
  CHECK(n == size, "the merged communicator holds %d", n);
  OK(MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, merged));
  CHECK(sum == size, "an all-reduce across the connection: %d", sum);
  OK(MPI_Comm_free(&merged));
}

static void test_join(void) {
  MPI_Comm node;
  OK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  int nrank = -1, nsize = 0;
  OK(MPI_Comm_rank(node, &nrank));
  OK(MPI_Comm_size(node, &nsize));
  int last = nsize - 1, port = 0, fd = -1;
  if (nsize == 1) {
    /* Alone on its node: no one to join over loopback. */
  } else if (nrank == 0) {
    int l = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    CHECK(l >= 0 && bind(l, (struct sockaddr *)&a, sizeof a) == 0 && listen(l, 1) == 0 &&
              getsockname(l, (struct sockaddr *)&a, &len) == 0,
          "listening on loopback");
    port = ntohs(a.sin_port);
    OK(MPI_Send(&port, 1, MPI_INT, last, 0, node));
    fd = accept(l, NULL, NULL);
    close(l);
  } else if (nrank == last) {
    OK(MPI_Recv(&port, 1, MPI_INT, 0, 0, node, MPI_STATUS_IGNORE));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    fd = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0, "connecting to %d", port);
  }
  if (nsize > 1 && (nrank == 0 || nrank == last)) {
    CHECK(fd >= 0, "the socket");
    MPI_Comm inter, merged;
    OK(MPI_Comm_join(fd, &inter));
    int flag = 0, remote = 0, got = -1, n = 0;
    OK(MPI_Comm_test_inter(inter, &flag));
    OK(MPI_Comm_remote_size(inter, &remote));
    CHECK(flag && remote == 1, "the join: intercommunicator %d, remote size %d", flag, remote);
    OK(MPI_Sendrecv(&nrank, 1, MPI_INT, 0, 5, &got, 1, MPI_INT, 0, 5, inter, MPI_STATUS_IGNORE));
    CHECK(got == last - nrank, "over the joined intercommunicator: %d", got);
    OK(MPI_Intercomm_merge(inter, nrank != 0, &merged));
    OK(MPI_Comm_size(merged, &n));
    OK(MPI_Allreduce(&nrank, &got, 1, MPI_INT, MPI_SUM, merged));
    CHECK(n == 2 && got == last, "merged: %d members, sum %d", n, got);
    OK(MPI_Comm_free(&merged));
    OK(MPI_Comm_disconnect(&inter));
    char c = 'j';
    if (nrank == 0)
      CHECK(write(fd, &c, 1) == 1, "writing after the join");
    else
      CHECK(read(fd, &c, 1) == 1 && c == 'j', "the socket after the join: %c", c);
    close(fd);
  }
  OK(MPI_Comm_free(&node));
  /* Errors: the other end closed; no descriptor. */
  int pair[2];
  CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, pair) == 0, "socketpair");
  close(pair[1]);
  MPI_Comm none;
  errors_return(MPI_COMM_SELF, 1);
  EXPECT_ERR(MPI_Comm_join(pair[0], &none), MPI_ERR_OTHER, "closed");
  EXPECT_ERR(MPI_Comm_join(-1, &none), MPI_ERR_ARG, "descriptor");
  errors_return(MPI_COMM_SELF, 0);
  close(pair[0]);
}

int main(int argc, char **argv) {
  start("ports", &argc, &argv);
  CHECK(size >= 2, "ports needs 2 ranks or more, not %d", size);
  int unnamed = argc > 1 && strcmp(argv[1], "unnamed") == 0;
  int *appnum, flag;
  OK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_APPNUM, &appnum, &flag));
  CHECK(!flag || *appnum >= 0, "MPI_APPNUM: %d", *appnum);
  int accepting = rank == 0;
  MPI_Comm half;
  OK(MPI_Comm_split(MPI_COMM_WORLD, accepting, rank, &half));
  char port[MPI_MAX_PORT_NAME] = "", found[MPI_MAX_PORT_NAME] = "";
  const char *service = "org.rbtl.test.ports";
  errors_return(MPI_COMM_SELF, 1);
  if (accepting) {
    OK(MPI_Open_port(MPI_INFO_NULL, port));
    if (!unnamed)
      OK(MPI_Publish_name(service, MPI_INFO_NULL, port));
    /* (rbtlrun says "service_already_published", hydra "key_already_present";
     * Slurm would replace it: the library looks first.) */
    EXPECT_ERR(MPI_Publish_name(service, MPI_INFO_NULL, port), MPI_ERR_SERVICE, NULL);
  }
  OK(MPI_Barrier(MPI_COMM_WORLD));
  if (unnamed) {
    if (accepting)
      memcpy(found, port, sizeof found);
    OK(MPI_Bcast(found, MPI_MAX_PORT_NAME, MPI_CHAR, 0, MPI_COMM_WORLD));
    if (rank == 1)
      EXPECT_ERR(MPI_Lookup_name(service, MPI_INFO_NULL, port), MPI_ERR_NAME, NULL);
  } else if (!accepting && rank == 1) {
    EXPECT_ERR(MPI_Lookup_name("org.rbtl.test.nothing", MPI_INFO_NULL, found), MPI_ERR_NAME,
               NULL);
    OK(MPI_Lookup_name(service, MPI_INFO_NULL, found));
    CHECK(strncmp(found, "rbtl-port:", 10) == 0, "the looked-up port: %s", found);
  }
  for (int round = 1; round <= 2; round++) {
    MPI_Comm inter;
    if (accepting)
      OK(MPI_Comm_accept(port, MPI_INFO_NULL, 0, half, &inter));
    else
      OK(MPI_Comm_connect(found, MPI_INFO_NULL, 0, half, &inter));
    int flag = 0;
    OK(MPI_Comm_test_inter(inter, &flag));
    CHECK(flag, "the connection is no intercommunicator");
    talk(inter, accepting, round);
    OK(MPI_Comm_disconnect(&inter));
    CHECK(inter == MPI_COMM_NULL, "MPI_Comm_disconnect left the handle");
  }
  if (accepting) {
    if (!unnamed)
      OK(MPI_Unpublish_name(service, MPI_INFO_NULL, port));
    EXPECT_ERR(MPI_Unpublish_name(service, MPI_INFO_NULL, port), MPI_ERR_SERVICE, NULL);
    OK(MPI_Close_port(port));
    EXPECT_ERR(MPI_Close_port(port), MPI_ERR_PORT, "opened");
  }
  /* Not a port of this library: refused at the root at once. */
  MPI_Comm none;
  errors_return(half, 1);
  EXPECT_ERR(MPI_Comm_connect("tcp://198.18.0.1:1", MPI_INFO_NULL, 0, half, &none),
             MPI_ERR_PORT, NULL);
  /* The port closed: connecting to it fails at once (an answer to one of its
   * earlier connections is not taken for one). A port open where no one accepts:
   * the connection gives up after the info's "timeout". */
  OK(MPI_Barrier(MPI_COMM_WORLD));
  if (accepting)
    OK(MPI_Open_port(MPI_INFO_NULL, port));
  OK(MPI_Bcast(port, MPI_MAX_PORT_NAME, MPI_CHAR, 0, MPI_COMM_WORLD));
  if (!accepting) {
    MPI_Info brief;
    OK(MPI_Info_create(&brief));
    OK(MPI_Info_set(brief, "timeout", "0.5"));
    if (unnamed)
      EXPECT_ERR(MPI_Comm_connect(found, brief, 0, half, &none), MPI_ERR_PORT, "answer");
    else
      EXPECT_ERR(MPI_Comm_connect(found, MPI_INFO_NULL, 0, half, &none), MPI_ERR_PORT, "open");
    double t0 = MPI_Wtime();
    EXPECT_ERR(MPI_Comm_connect(port, brief, 0, half, &none), MPI_ERR_PORT, "answer");
    CHECK(MPI_Wtime() - t0 < 60, "the connection gave up after %.1f s", MPI_Wtime() - t0);
    /* A bad timeout: the root's error; the others hear of it (MPI_ERR_PORT). */
    OK(MPI_Info_set(brief, "timeout", "soon"));
    int hr = -1;
    OK(MPI_Comm_rank(half, &hr));
    int rc = MPI_Comm_connect(port, brief, 0, half, &none);
    if (hr == 0)
      EXPECT_ERR(rc, MPI_ERR_INFO_VALUE, "timeout");
    else
      EXPECT_ERR(rc, MPI_ERR_PORT, "timeout");
    OK(MPI_Info_free(&brief));
  }
  OK(MPI_Barrier(MPI_COMM_WORLD));
  if (accepting)
    OK(MPI_Close_port(port));
  /* A request waiting for a port when it closes is told so (where there are names,
   * the connector may hear it from the name service first). */
  if (accepting)
    OK(MPI_Open_port(MPI_INFO_NULL, port));
  OK(MPI_Bcast(port, MPI_MAX_PORT_NAME, MPI_CHAR, 0, MPI_COMM_WORLD));
  if (accepting) {
    sleep(2);
    OK(MPI_Close_port(port));
  } else {
    EXPECT_ERR(MPI_Comm_connect(port, MPI_INFO_NULL, 0, half, &none), MPI_ERR_PORT,
               unnamed ? "closed" : NULL);
  }
  OK(MPI_Barrier(MPI_COMM_WORLD));
  errors_return(MPI_COMM_SELF, 0);
  OK(MPI_Comm_free(&half));
  OK(MPI_Barrier(MPI_COMM_WORLD));
  test_join();
  return finish();
}
