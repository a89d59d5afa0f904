/* What every conformance program shares: starting and ending (each rank prints
 * "PASS <program> rank R/N" once MPI_Finalize has returned), and the checks, which
 * print "FAIL rank R: <what> (file:line)" and end the whole job with MPI_Abort. */
#ifndef CHECK_H
#define CHECK_H

#include <mpi.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* This process's rank in MPI_COMM_WORLD and the world's size, once started. */
static int rank = -1, size = -1;
static const char *check_program = "?";

static void check_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), noreturn));

static void check_fail(const char *file, int line, const char *fmt, ...) {
  char what[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  printf("FAIL rank %d: %s (%s:%d)\n", rank, what, file, line);
  fflush(stdout);
  fprintf(stderr, "FAIL rank %d: %s (%s:%d)\n", rank, what, file, line);
  fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  exit(1);
}

/* CHECK(condition, printf-style description of what broke). */
#define CHECK(cond, ...)                                                       \
  do {                                                                         \
    if (!(cond))                                                               \
      check_fail(__FILE__, __LINE__, __VA_ARGS__);                             \
  } while (0)

/* The text of an error code (for failure messages). */
static inline const char *error_text(int code) {
  static char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS)
    snprintf(text, sizeof text, "(code %d has no string)", code);
  return text;
}

/* OK(call): the call returns MPI_SUCCESS. */
#define OK(call)                                                               \
  do {                                                                         \
    int ok_rc_ = (call);                                                       \
    if (ok_rc_ != MPI_SUCCESS)                                                 \
      check_fail(__FILE__, __LINE__, "%s returned %d: %s", #call, ok_rc_,      \
                 error_text(ok_rc_));                                          \
  } while (0)

/* The class of an error code (failing the check when it has none). */
static inline int class_of_at(int code, const char *file, int line) {
  int cls = -1;
  int rc = MPI_Error_class(code, &cls);
  if (rc != MPI_SUCCESS)
    check_fail(file, line, "MPI_Error_class(%d) failed with %d", code, rc);
  return cls;
}

/* EXPECT_ERR(call, class, word): the call returns an error of `class`, whose
 * string names the class and contains `word` (NULL: no word asked for). */
#define EXPECT_ERR(call, cls, word)                                            \
  expect_err_at((call), (cls), #cls, (word), #call, __FILE__, __LINE__)

static inline void expect_err_at(int rc, int cls, const char *cls_name,
                          const char *word, const char *call, const char *file,
                          int line) {
  if (rc == MPI_SUCCESS)
    check_fail(file, line, "%s succeeded; expected %s", call, cls_name);
  int got = class_of_at(rc, file, line);
  if (got != cls)
    check_fail(file, line, "%s returned class %d (%s); expected %s (%d)", call,
               got, error_text(rc), cls_name, cls);
  char text[MPI_MAX_ERROR_STRING];
  int len = -1;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS)
    check_fail(file, line, "MPI_Error_string of %s's code failed", call);
  if (len < 0 || len >= MPI_MAX_ERROR_STRING || (size_t)len != strlen(text))
    check_fail(file, line, "MPI_Error_string of %s: length %d for \"%s\"", call,
               len, text);
  if (strstr(text, cls_name) == NULL)
    check_fail(file, line, "the string of %s's error does not name %s: \"%s\"",
               call, cls_name, text);
  if (word != NULL && strstr(text, word) == NULL)
    check_fail(file, line, "the string of %s's error does not say \"%s\": \"%s\"",
               call, word, text);
}

/* Start MPI and the checks of `program`. */
static inline void start(const char *program, int *argc, char ***argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  check_program = program;
  OK(MPI_Init(argc, argv));
  OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  OK(MPI_Comm_size(MPI_COMM_WORLD, &size));
}

/* End MPI and report this rank's success. */
static inline int finish(void) {
  OK(MPI_Finalize());
  printf("PASS %s rank %d/%d\n", check_program, rank, size);
  fflush(stdout);
  return 0;
}

/* Errors on `comm` returned (1) or fatal again (0). */
static inline void errors_return(MPI_Comm comm, int on) {
  OK(MPI_Comm_set_errhandler(comm, on ? MPI_ERRORS_RETURN : MPI_ERRORS_ARE_FATAL));
}

#endif
