/* inquiry.c: the inquiries and small calls of MPI 4.1 and 5.0, at 1 or more ranks
 * (run at 1 and 2):
 * - MPI_Abi_get_info (the sizes of MPI_Aint, MPI_Count, MPI_Offset);
 *   MPI_Get_hw_resource_info; MPI_INFO_ENV and MPI_Info_create_env (command,
 *   argv, maxprocs, thread_level);
 * - MPI_Request_get_status_all, _any and _some over a receive not yet matched, a
 *   completed send, a null request and a persistent one not started: nothing
 *   freed, the statuses those of the completed ones, then again once the receive
 *   has its message; with no active request;
 * - MPI_Remove_error_class, _code and _string, refused while a class has codes,
 *   a class's number given again once removed,
 *   and the removed ones no longer known;
 * - MPI_Win_call_errhandler; MPI_Type_get_value_index; MPI_Type_match_size;
 * - MPI_Status_c2f and the other status conversions, there and back, and in
 *   place. */
#include "check.h"

static int info_int(MPI_Info info, const char *key) {
  char v[MPI_MAX_INFO_VAL];
  int len = sizeof v, flag = 0;
  OK(MPI_Info_get_string(info, key, &len, v, &flag));
  CHECK(flag, "no %s", key);
  return atoi(v);
}

static void info_string(MPI_Info info, const char *key, char *v, int len) {
  int flag = 0;
  OK(MPI_Info_get_string(info, key, &len, v, &flag));
  CHECK(flag, "no %s", key);
}

static void test_infos(int argc, char **argv) {
  MPI_Info abi;
  OK(MPI_Abi_get_info(&abi));
  CHECK(info_int(abi, "mpi_aint_size") == (int)sizeof(MPI_Aint) &&
            info_int(abi, "mpi_count_size") == (int)sizeof(MPI_Count) &&
            info_int(abi, "mpi_offset_size") == (int)sizeof(MPI_Offset),
        "MPI_Abi_get_info's sizes");
  OK(MPI_Info_free(&abi));
  MPI_Info hw;
  OK(MPI_Get_hw_resource_info(&hw));
  OK(MPI_Info_free(&hw));

  CHECK(info_int(MPI_INFO_ENV, "maxprocs") == size, "MPI_INFO_ENV's maxprocs");
  char v[MPI_MAX_INFO_VAL];
  info_string(MPI_INFO_ENV, "thread_level", v, sizeof v);
  CHECK(strcmp(v, "MPI_THREAD_SINGLE") == 0, "MPI_INFO_ENV's thread_level: %s", v);
  info_string(MPI_INFO_ENV, "command", v, sizeof v);
  CHECK(strcmp(v, argv[0]) == 0, "MPI_INFO_ENV's command: %s", v);
  char *given[3] = {"prog", "-x", "7"};
  MPI_Info env;
  OK(MPI_Info_create_env(3, given, &env));
  info_string(env, "command", v, sizeof v);
  CHECK(strcmp(v, "prog") == 0, "MPI_Info_create_env's command: %s", v);
  info_string(env, "argv", v, sizeof v);
  CHECK(strcmp(v, "-x 7") == 0, "MPI_Info_create_env's argv: %s", v);
  OK(MPI_Info_free(&env));
  (void)argc;
}

static void test_get_status(void) {
  int in = -1, out = 5, flag = -1, idx = -1, n = -1, indices[4];
  MPI_Request r[4];
  MPI_Status st[4];
  OK(MPI_Irecv(&in, 1, MPI_INT, rank, 6, MPI_COMM_WORLD, &r[0]));
  OK(MPI_Isend(&out, 1, MPI_INT, MPI_PROC_NULL, 6, MPI_COMM_WORLD, &r[1]));
  r[2] = MPI_REQUEST_NULL;
  OK(MPI_Send_init(&out, 1, MPI_INT, rank, 7, MPI_COMM_WORLD, &r[3]));
  OK(MPI_Request_get_status_all(4, r, &flag, st));
  CHECK(flag == 0, "all complete while a receive waits");
  OK(MPI_Request_get_status_any(4, r, &idx, &flag, &st[0]));
  CHECK(flag == 1 && idx == 1 && st[0].MPI_SOURCE == MPI_PROC_NULL,
        "any: flag %d index %d source %d", flag, idx, st[0].MPI_SOURCE);
  OK(MPI_Request_get_status_some(4, r, &n, indices, st));
  CHECK(n == 1 && indices[0] == 1, "some: %d, first %d", n, indices[0]);
  CHECK(r[0] != MPI_REQUEST_NULL && r[1] != MPI_REQUEST_NULL, "a request was freed");
  OK(MPI_Send(&out, 1, MPI_INT, rank, 6, MPI_COMM_WORLD));
  do
    OK(MPI_Request_get_status_all(4, r, &flag, st));
  while (!flag);
  CHECK(st[0].MPI_SOURCE == rank && st[0].MPI_TAG == 6 && st[2].MPI_SOURCE == MPI_ANY_SOURCE,
        "all: receive from %d tag %d, null's source %d", st[0].MPI_SOURCE, st[0].MPI_TAG,
        st[2].MPI_SOURCE);
  OK(MPI_Request_get_status_some(4, r, &n, indices, st));
  CHECK(n == 2 && indices[0] == 0 && indices[1] == 1, "some after: %d", n);
  OK(MPI_Waitall(2, r, MPI_STATUSES_IGNORE));
  CHECK(in == 5, "the receive got %d", in);
  /* Nothing active: the null ones and the persistent one not started. */
  OK(MPI_Request_get_status_any(4, r, &idx, &flag, &st[0]));
  CHECK(flag == 1 && idx == MPI_UNDEFINED, "any of none: flag %d index %d", flag, idx);
  OK(MPI_Request_get_status_some(4, r, &n, indices, st));
  CHECK(n == MPI_UNDEFINED, "some of none: %d", n);
  OK(MPI_Request_free(&r[3]));
}

static void test_remove_errors(void) {
  int cls, code, rc, got = -1;
  OK(MPI_Add_error_class(&cls));
  OK(MPI_Add_error_code(cls, &code));
  OK(MPI_Add_error_string(code, "a code of the program's"));
  errors_return(MPI_COMM_SELF, 1);
  EXPECT_ERR(MPI_Remove_error_class(cls), MPI_ERR_ARG, "remove its codes first");
  EXPECT_ERR(MPI_Remove_error_code(code), MPI_ERR_ARG, "still has a string");
  OK(MPI_Remove_error_string(code));
  EXPECT_ERR(MPI_Remove_error_string(code), MPI_ERR_ARG, "no string");
  OK(MPI_Remove_error_code(code));
  EXPECT_ERR(MPI_Remove_error_code(code), MPI_ERR_ARG, "not an error code");
  OK(MPI_Add_error_string(cls, "a class of the program's"));
  EXPECT_ERR(MPI_Remove_error_class(cls), MPI_ERR_ARG, "still has a string");
  OK(MPI_Remove_error_string(cls));
  OK(MPI_Remove_error_class(cls));
  rc = MPI_Error_class(cls, &got);
  CHECK(rc != MPI_SUCCESS, "a removed class is still a class");
  /* Classes added and removed many times over: their numbers are given again. */
  for (int i = 0; i < 1000; i++) {
    int again;
    OK(MPI_Add_error_class(&again));
    OK(MPI_Remove_error_class(again));
  }
  EXPECT_ERR(MPI_Remove_error_class(MPI_ERR_RANK), MPI_ERR_ARG, "MPI_Add_error_class");
  errors_return(MPI_COMM_SELF, 0);
}

static int win_handled;
static void on_win_error(MPI_Win *w, int *code, ...) {
  (void)w;
  win_handled = *code;
}

static void test_small_calls(void) {
  int mem = 0;
  MPI_Win w;
  OK(MPI_Win_create(&mem, sizeof mem, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &w));
  MPI_Errhandler eh;
  OK(MPI_Win_create_errhandler(on_win_error, &eh));
  OK(MPI_Win_set_errhandler(w, eh));
  OK(MPI_Win_call_errhandler(w, MPI_ERR_OTHER));
  CHECK(win_handled == MPI_ERR_OTHER, "MPI_Win_call_errhandler: %d", win_handled);
  OK(MPI_Errhandler_free(&eh));
  OK(MPI_Win_free(&w));

  MPI_Datatype t = MPI_DATATYPE_NULL;
  OK(MPI_Type_get_value_index(MPI_DOUBLE, MPI_INT, &t));
  CHECK(t == MPI_DOUBLE_INT, "the pair of double and int");
  OK(MPI_Type_get_value_index(MPI_CHAR, MPI_INT, &t));
  CHECK(t == MPI_DATATYPE_NULL, "a pair the standard does not name");
  OK(MPI_Type_match_size(MPI_TYPECLASS_REAL, 8, &t));
  CHECK(t == MPI_REAL8, "MPI_Type_match_size of 8-byte reals");
  errors_return(MPI_COMM_SELF, 1);
  EXPECT_ERR(MPI_Type_match_size(MPI_TYPECLASS_INTEGER, 3, &t), MPI_ERR_ARG, "3 bytes");
  errors_return(MPI_COMM_SELF, 0);

  MPI_Status c = {.MPI_SOURCE = 3, .MPI_TAG = 4, .MPI_ERROR = 5}, back;
  MPI_Fint f[MPI_F_STATUS_SIZE];
  MPI_F08_status f08;
  OK(MPI_Status_set_elements(&c, MPI_INT, 9));
  OK(MPI_Status_c2f(&c, f));
  CHECK(f[MPI_F_SOURCE] == 3 && f[MPI_F_TAG] == 4 && f[MPI_F_ERROR] == 5, "MPI_Status_c2f");
  OK(MPI_Status_f2f08(f, &f08));
  OK(MPI_Status_f082c(&f08, &back));
  int count = -1;
  OK(MPI_Get_count(&back, MPI_INT, &count));
  CHECK(back.MPI_SOURCE == 3 && back.MPI_TAG == 4 && count == 9, "a status there and back");
  /* In place: the forms share one layout, and C lets a value be assigned onto
   * itself. */
  OK(MPI_Status_c2f08(&back, &back));
  OK(MPI_Get_count(&back, MPI_INT, &count));
  CHECK(back.MPI_SOURCE == 3 && count == 9, "a status converted in place");
}

int main(int argc, char **argv) {
  start("inquiry", &argc, &argv);
  test_infos(argc, argv);
  test_get_status();
  test_remove_errors();
  test_small_calls();
  return finish();
}
