/* fatal.c: the default error handler (MPI_ERRORS_ARE_FATAL), MPI_ERRORS_ABORT
 * and MPI_Abort end the whole job, with a status that is not 0 and a message
 * naming the call, also for an error of MPI_Init_thread itself (the case of a
 * function the library does not implement is written by the test, from the header). Each case is its own job, picked by the argument; each prints
 * "REACHED <case>" before the faulty call and "RETURNED" if the call comes back
 * (which it must not). The other ranks wait in a receive that never completes:
 * the job's end must come from the error. */
#include "check.h"

static void reached(const char *what) {
  printf("REACHED %s\n", what);
  fflush(stdout);
}

static void returned(int rc) {
  printf("RETURNED %d\n", rc);
  fflush(stdout);
}

/* Wait for a message nobody sends. */
static void stuck(void) {
  int x;
  MPI_Recv(&x, 1, MPI_INT, MPI_ANY_SOURCE, 999, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  printf("RETURNED from a receive nobody matched\n");
}

int main(int argc, char **argv) {
  const char *what = argc > 1 ? argv[1] : "";
  if (strcmp(what, "init_thread") == 0) {
    /* No place to write the level given: refused before the library starts. */
    reached(what);
    returned(MPI_Init_thread(&argc, &argv, MPI_THREAD_SINGLE, NULL));
    return 0;
  }
  start("fatal", &argc, &argv);
  int x = 0, rc = MPI_SUCCESS;
  if (strcmp(what, "send") == 0) {
    /* A bad rank on the world. */
    if (rank == 0) {
      reached(what);
      rc = MPI_Send(&x, 1, MPI_INT, size, 0, MPI_COMM_WORLD);
      returned(rc);
    } else {
      stuck();
    }
  } else if (strcmp(what, "wait") == 0) {
    /* A truncation found in MPI_Wait. */
    if (rank == 0) {
      MPI_Request r;
      int big[4] = {1, 2, 3, 4};
      OK(MPI_Irecv(&x, 1, MPI_INT, 0, 1, MPI_COMM_WORLD, &r));
      OK(MPI_Send(big, 4, MPI_INT, 0, 1, MPI_COMM_WORLD));
      reached(what);
      rc = MPI_Wait(&r, MPI_STATUS_IGNORE);
      returned(rc);
    } else {
      stuck();
    }
  } else if (strcmp(what, "bcast") == 0) {
    /* A bad root, on every rank. */
    reached(what);
    rc = MPI_Bcast(&x, 1, MPI_INT, size + 2, MPI_COMM_WORLD);
    returned(rc);
  } else if (strcmp(what, "type") == 0) {
    /* An error of no communicator: MPI_COMM_SELF's handler, fatal too. */
    if (rank == 0) {
      int n;
      reached(what);
      rc = MPI_Type_size(MPI_DATATYPE_NULL, &n);
      returned(rc);
    } else {
      stuck();
    }
  } else if (strcmp(what, "errors_abort") == 0) {
    /* MPI_ERRORS_ABORT set on a duplicate. */
    MPI_Comm c;
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &c));
    if (rank == 0) {
      OK(MPI_Comm_set_errhandler(c, MPI_ERRORS_ABORT));
      reached(what);
      rc = MPI_Recv(&x, 1, MPI_INT, 0, -5, c, MPI_STATUS_IGNORE);
      returned(rc);
    } else {
      stuck();
    }
  } else if (strcmp(what, "call_errhandler") == 0) {
    if (rank == 0) {
      reached(what);
      rc = MPI_Comm_call_errhandler(MPI_COMM_WORLD, MPI_ERR_OTHER);
      returned(rc);
    } else {
      stuck();
    }
  } else if (strcmp(what, "abort") == 0) {
    /* MPI_Abort's code is the job's status. */
    if (rank == size - 1) {
      reached(what);
      rc = MPI_Abort(MPI_COMM_WORLD, 7);
      returned(rc);
    } else {
      stuck();
    }
  } else {
    CHECK(0, "unknown case \"%s\"", what);
  }
  return finish();
}
