/* grequest.c: generalized requests (MPI_Grequest_start, _complete), at 1 or more
 * ranks (run at 1 and 2), under MPI_THREAD_MULTIPLE.
 *
 * - tested before and after the program completes it: the status its query
 *   function sets (source, tag, elements through MPI_Status_set_elements), the
 *   query run by the first call that asks for the status, not by
 *   MPI_Grequest_complete, its free function run once, after the test that took
 *   it, not before;
 * - MPI_Request_get_status on it, which leaves it;
 * - waited for among point-to-point requests (MPI_Waitall, MPI_Waitany);
 * - completed by another thread while this one waits in MPI_Wait;
 * - cancelled: the cancel function told it has not completed, completing it
 *   (an MPI call from the callback), the query marking the status cancelled; a
 *   cancel after completion told so;
 * - freed before it completes: no query, the free function at completion;
 * - the query's and the free function's errors returned by the completion call
 *   (MPI_ERR_IN_STATUS from MPI_Waitall, the status holding the query's);
 * - errors: MPI_Grequest_complete twice, on a request of another kind, null
 *   functions. */
#include "check.h"
#include <pthread.h>
#include <unistd.h>

/* What a request's functions saw and do. */
struct op {
  int queries, frees, cancels, cancelled_complete;
  int query_rc, free_rc;
  int cancel; /* the query marks the status cancelled */
  int complete_on_cancel;
  MPI_Request self; /* for the cancel function to complete */
};

static int query(void *extra, MPI_Status *st) {
  struct op *o = extra;
  o->queries++;
  st->MPI_SOURCE = 5;
  st->MPI_TAG = 7;
  OK(MPI_Status_set_elements(st, MPI_INT, 3));
  OK(MPI_Status_set_cancelled(st, o->cancel));
  return o->query_rc;
}

static int free_fn(void *extra) {
  struct op *o = extra;
  o->frees++;
  return o->free_rc;
}

static int cancel_fn(void *extra, int complete) {
  struct op *o = extra;
  o->cancels++;
  o->cancelled_complete = complete;
  if (!complete && o->complete_on_cancel) {
    o->cancel = 1;
    OK(MPI_Grequest_complete(o->self));
  }
  return MPI_SUCCESS;
}

static MPI_Request start_op(struct op *o) {
  MPI_Request r = MPI_REQUEST_NULL;
  OK(MPI_Grequest_start(query, free_fn, cancel_fn, o, &r));
  CHECK(r != MPI_REQUEST_NULL, "MPI_Grequest_start gave the null request");
  o->self = r;
  return r;
}

static void check_status(const MPI_Status *st, const char *what) {
  int count = -1;
  OK(MPI_Get_count(st, MPI_INT, &count));
  CHECK(st->MPI_SOURCE == 5 && st->MPI_TAG == 7 && count == 3,
        "%s: source %d tag %d count %d, not 5 7 3", what, st->MPI_SOURCE, st->MPI_TAG, count);
}

static void test_tested(void) {
  struct op o = {0};
  MPI_Request r = start_op(&o);
  int flag = -1;
  MPI_Status st;
  OK(MPI_Test(&r, &flag, &st));
  CHECK(flag == 0 && o.queries == 0, "an incomplete request tested complete");
  OK(MPI_Request_get_status(r, &flag, &st));
  CHECK(flag == 0, "an incomplete request's status given");
  OK(MPI_Grequest_complete(r));
  /* The query runs in the call that asks for the status (MPI 4.1 §13.2), once. */
  CHECK(o.queries == 0 && o.frees == 0, "at completion: %d queries, %d frees", o.queries,
        o.frees);
  OK(MPI_Request_get_status(r, &flag, &st));
  CHECK(flag == 1 && r != MPI_REQUEST_NULL && o.queries == 1,
        "MPI_Request_get_status after completion: %d queries", o.queries);
  check_status(&st, "MPI_Request_get_status");
  CHECK(o.frees == 0, "freed by MPI_Request_get_status");
  OK(MPI_Test(&r, &flag, &st));
  CHECK(flag == 1 && r == MPI_REQUEST_NULL, "the test after completion: flag %d", flag);
  check_status(&st, "MPI_Test");
  int cancelled = -1;
  OK(MPI_Test_cancelled(&st, &cancelled));
  CHECK(!cancelled && o.frees == 1 && o.queries == 1, "after the test: %d frees, %d queries",
        o.frees, o.queries);
}

/* A receive from this rank, a send to it, and a generalized request. */
static void test_among_others(void) {
  struct op o = {0};
  int in = -1, out = 42;
  MPI_Request reqs[3];
  reqs[0] = start_op(&o);
  OK(MPI_Irecv(&in, 1, MPI_INT, rank, 3, MPI_COMM_WORLD, &reqs[1]));
  OK(MPI_Isend(&out, 1, MPI_INT, rank, 3, MPI_COMM_WORLD, &reqs[2]));
  int index = -1;
  MPI_Status st;
  OK(MPI_Waitany(2, &reqs[1], &index, &st)); /* the receive or the send */
  OK(MPI_Grequest_complete(reqs[0]));
  MPI_Status sts[3];
  OK(MPI_Waitall(3, reqs, sts));
  check_status(&sts[0], "MPI_Waitall");
  CHECK(in == 42 && o.frees == 1, "among others: received %d, %d frees", in, o.frees);
}

static void *complete_later(void *arg) {
  usleep(50 * 1000); /* the main thread waits in MPI_Wait by now */
  OK(MPI_Grequest_complete(*(MPI_Request *)arg));
  return NULL;
}

static void test_other_thread(void) {
  struct op o = {0};
  MPI_Request r = start_op(&o), copy = r;
  pthread_t t;
  CHECK(pthread_create(&t, NULL, complete_later, &copy) == 0, "pthread_create");
  MPI_Status st;
  OK(MPI_Wait(&r, &st));
  CHECK(pthread_join(t, NULL) == 0, "pthread_join");
  check_status(&st, "completed by another thread");
  CHECK(r == MPI_REQUEST_NULL && o.frees == 1, "waited: %d frees", o.frees);
}

static void test_cancel(void) {
  struct op o = {.complete_on_cancel = 1};
  MPI_Request r = start_op(&o);
  OK(MPI_Cancel(&r));
  CHECK(o.cancels == 1 && o.cancelled_complete == 0 && o.queries == 0,
        "cancel: %d calls, complete %d, %d queries", o.cancels, o.cancelled_complete,
        o.queries);
  MPI_Status st;
  OK(MPI_Wait(&r, &st));
  int cancelled = -1;
  OK(MPI_Test_cancelled(&st, &cancelled));
  CHECK(cancelled == 1 && o.queries == 1, "the cancelled request's status is not cancelled");

  struct op late = {0};
  r = start_op(&late);
  OK(MPI_Grequest_complete(r));
  OK(MPI_Cancel(&r));
  CHECK(late.cancels == 1 && late.cancelled_complete == 1, "a late cancel: complete %d",
        late.cancelled_complete);
  OK(MPI_Wait(&r, &st));
  OK(MPI_Test_cancelled(&st, &cancelled));
  CHECK(cancelled == 0, "a late cancel cancelled");
}

static void test_freed_early(void) {
  struct op o = {0};
  MPI_Request r = start_op(&o), keep = r;
  OK(MPI_Request_free(&r));
  CHECK(r == MPI_REQUEST_NULL && o.frees == 0, "freed before completion: %d frees", o.frees);
  OK(MPI_Grequest_complete(keep));
  CHECK(o.frees == 1 && o.queries == 0, "completed after its free: %d frees, %d queries",
        o.frees, o.queries);

  /* Freed after completion: the free function at once. */
  struct op later = {0};
  r = start_op(&later);
  OK(MPI_Grequest_complete(r));
  OK(MPI_Request_free(&r));
  CHECK(later.frees == 1, "freed after completion: %d frees", later.frees);
}

static void test_errors(void) {
  errors_return(MPI_COMM_SELF, 1);
  errors_return(MPI_COMM_WORLD, 1);
  struct op o = {.query_rc = MPI_ERR_OTHER};
  MPI_Request r = start_op(&o);
  OK(MPI_Grequest_complete(r));
  MPI_Status st;
  EXPECT_ERR(MPI_Wait(&r, &st), MPI_ERR_OTHER, "query function returned");
  CHECK(r == MPI_REQUEST_NULL && o.frees == 1, "a failed query's request not freed");

  struct op in_status = {.query_rc = MPI_ERR_OTHER};
  MPI_Request reqs[2] = {start_op(&in_status), MPI_REQUEST_NULL};
  OK(MPI_Grequest_complete(reqs[0]));
  MPI_Status sts[2];
  EXPECT_ERR(MPI_Waitall(2, reqs, sts), MPI_ERR_IN_STATUS, NULL);
  int cls = -1;
  OK(MPI_Error_class(sts[0].MPI_ERROR, &cls));
  CHECK(cls == MPI_ERR_OTHER, "the status holds class %d", cls);

  struct op bad_free = {.free_rc = MPI_ERR_ARG};
  r = start_op(&bad_free);
  OK(MPI_Grequest_complete(r));
  EXPECT_ERR(MPI_Wait(&r, &st), MPI_ERR_ARG, "free function returned");
  check_status(&st, "a request whose free function failed");

  struct op twice = {0};
  r = start_op(&twice);
  OK(MPI_Grequest_complete(r));
  EXPECT_ERR(MPI_Grequest_complete(r), MPI_ERR_REQUEST, "completed already");
  OK(MPI_Wait(&r, &st));
  int x = 0;
  MPI_Request p2p;
  OK(MPI_Isend(&x, 1, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &p2p));
  EXPECT_ERR(MPI_Grequest_complete(p2p), MPI_ERR_REQUEST, "not a generalized request");
  OK(MPI_Wait(&p2p, &st));
  EXPECT_ERR(MPI_Grequest_start(NULL, free_fn, cancel_fn, NULL, &r), MPI_ERR_ARG, "functions");
  errors_return(MPI_COMM_WORLD, 0);
  errors_return(MPI_COMM_SELF, 0);
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  check_program = "grequest";
  int provided = -1;
  OK(MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided));
  OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  OK(MPI_Comm_size(MPI_COMM_WORLD, &size));
  CHECK(provided == MPI_THREAD_MULTIPLE, "provided %d", provided);
  test_tested();
  test_among_others();
  test_other_thread();
  test_cancel();
  test_freed_early();
  test_errors();
  return finish();
}
