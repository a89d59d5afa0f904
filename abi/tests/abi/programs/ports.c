/* ports.c: ports and names (MPI 4.1, 11.8.5-11.8.6), at 2 or more ranks. The world
 * splits in two: the first rank opens a port, publishes it under a service name
 * and accepts on it with its half; the others look the name up and connect with
 * theirs. Over the intercommunicator every member sends to every member of the
 * other side; it is merged (the accepting side first) and all-reduced, then
 * disconnected. The same port takes a second connection. Errors: an unknown
 * service (MPI_ERR_NAME), a service published twice or unpublished when it is not
 * (MPI_ERR_SERVICE), a port this process did not open or no port at all
 * (MPI_ERR_PORT). */
#include "check.h"

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

int main(int argc, char **argv) {
  start("ports", &argc, &argv);
  CHECK(size >= 2, "ports needs 2 ranks or more, not %d", size);
  int accepting = rank == 0;
  MPI_Comm half;
  OK(MPI_Comm_split(MPI_COMM_WORLD, accepting, rank, &half));
  char port[MPI_MAX_PORT_NAME] = "", found[MPI_MAX_PORT_NAME] = "";
  const char *service = "org.rbtl.test.ports";
  errors_return(MPI_COMM_SELF, 1);
  if (accepting) {
    OK(MPI_Open_port(MPI_INFO_NULL, port));
    OK(MPI_Publish_name(service, MPI_INFO_NULL, port));
    EXPECT_ERR(MPI_Publish_name(service, MPI_INFO_NULL, port), MPI_ERR_SERVICE, "published");
  }
  OK(MPI_Barrier(MPI_COMM_WORLD));
  if (!accepting && rank == 1) {
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
  errors_return(MPI_COMM_SELF, 0);
  OK(MPI_Comm_free(&half));
  OK(MPI_Barrier(MPI_COMM_WORLD));
  return finish();
}
