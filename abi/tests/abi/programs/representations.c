/* representations.c: data in the external32 representation and the Fortran 90
 * parameterized types (run at 1 and 2 ranks).
 * MPI_Pack_external_size of each kind whose size differs there (long, wchar_t, long
 * double) and of a struct; the bytes MPI_Pack_external writes (big-endian, long in
 * 4 bytes, long double as IEEE quadruple precision) from a strided type; the round
 * trip through MPI_Unpack_external, alone and between ranks; the errors (another
 * representation, no room, a long too large); the _c forms. MPI_Type_create_f90_*:
 * the kind chosen, the same handle again, the envelope and contents, not freeable,
 * a dup that is, a message of such a type, the errors. */
#include "check.h"
#include <stddef.h>
#include <wchar.h>

static void expect_ext_size(MPI_Datatype t, int count, MPI_Aint want, const char *what) {
  MPI_Aint got = -1;
  OK(MPI_Pack_external_size("external32", count, t, &got));
  CHECK(got == want, "%d %s take %ld bytes in external32, not %ld", count, what,
        (long)got, (long)want);
}

static void expect_bytes(const unsigned char *got, const unsigned char *want, int n,
                         const char *what) {
  for (int i = 0; i < n; i++)
    CHECK(got[i] == want[i], "%s: byte %d is %#x, not %#x", what, i, got[i], want[i]);
}

struct mixed {
  char c;
  long l;
  double d;
  long double ld;
  wchar_t w;
};

/* The struct type of `struct mixed` and a value of it from `seed`. */
static MPI_Datatype mixed_type(void) {
  int lens[5] = {1, 1, 1, 1, 1};
  MPI_Aint disps[5] = {offsetof(struct mixed, c), offsetof(struct mixed, l),
                       offsetof(struct mixed, d), offsetof(struct mixed, ld),
                       offsetof(struct mixed, w)};
  MPI_Datatype types[5] = {MPI_CHAR, MPI_LONG, MPI_DOUBLE, MPI_LONG_DOUBLE, MPI_WCHAR};
  MPI_Datatype t, r;
  OK(MPI_Type_create_struct(5, lens, disps, types, &t));
  OK(MPI_Type_create_resized(t, 0, sizeof(struct mixed), &r));
  OK(MPI_Type_free(&t));
  OK(MPI_Type_commit(&r));
  return r;
}

static struct mixed mixed_value(int seed) {
  struct mixed m;
  memset(&m, 0, sizeof m);
  m.c = (char)('a' + seed);
  m.l = -1000000L * (seed + 1);
  m.d = 0.5 + seed;
  m.ld = 1.0L / 3.0L + seed;
  m.w = (wchar_t)(0x263a + seed);
  return m;
}

static void expect_mixed(const struct mixed *got, int seed) {
  struct mixed want = mixed_value(seed);
  CHECK(got->c == want.c && got->l == want.l && got->d == want.d &&
            got->ld == want.ld && got->w == want.w,
        "element %d came back as {%c, %ld, %g, %Lg, %#x}", seed, got->c, got->l,
        got->d, got->ld, (unsigned)got->w);
}

static void test_sizes(void) {
  expect_ext_size(MPI_INT, 3, 12, "ints");
  expect_ext_size(MPI_LONG, 2, 8, "longs");
  expect_ext_size(MPI_UNSIGNED_LONG, 1, 4, "unsigned long");
  expect_ext_size(MPI_LONG_LONG, 1, 8, "long long");
  expect_ext_size(MPI_WCHAR, 5, 10, "wchar_t");
  expect_ext_size(MPI_LONG_DOUBLE, 1, 16, "long double");
  expect_ext_size(MPI_LONG_INT, 1, 8, "long-int pair");
  expect_ext_size(MPI_DOUBLE_INT, 1, 12, "double-int pair");
  expect_ext_size(MPI_C_DOUBLE_COMPLEX, 1, 16, "double complex");
  expect_ext_size(MPI_AINT, 1, 8, "MPI_Aint");
  MPI_Datatype m = mixed_type();
  expect_ext_size(m, 2, 2 * (1 + 4 + 8 + 16 + 2), "mixed structs");
  MPI_Count big = -1;
  OK(MPI_Pack_external_size_c("external32", 3, m, &big));
  CHECK(big == 3 * 31, "the _c form says %lld", (long long)big);
  OK(MPI_Type_free(&m));
}

static void test_bytes(void) {
  /* Every other int of six: 1, 3, -5 (a strided type packs in type-map order). */
  int a[6] = {1, 2, 3, 4, -5, 6};
  MPI_Datatype every_other;
  OK(MPI_Type_vector(3, 1, 2, MPI_INT, &every_other));
  OK(MPI_Type_commit(&every_other));
  unsigned char buf[64];
  MPI_Aint pos = 0;
  OK(MPI_Pack_external("external32", a, 1, every_other, buf, sizeof buf, &pos));
  long l = -5;
  double d = 1.0;
  long double ld = -2.5L;
  wchar_t w = L'A';
  OK(MPI_Pack_external("EXTERNAL32", &l, 1, MPI_LONG, buf, sizeof buf, &pos));
  OK(MPI_Pack_external("external32", &d, 1, MPI_DOUBLE, buf, sizeof buf, &pos));
  OK(MPI_Pack_external("external32", &ld, 1, MPI_LONG_DOUBLE, buf, sizeof buf, &pos));
  OK(MPI_Pack_external("external32", &w, 1, MPI_WCHAR, buf, sizeof buf, &pos));
  CHECK(pos == 12 + 4 + 8 + 16 + 2, "position %ld after packing", (long)pos);
  const unsigned char want[] = {
      0, 0, 0, 1, 0, 0, 0, 3, 0xff, 0xff, 0xff, 0xfb,             /* 1, 3, -5 */
      0xff, 0xff, 0xff, 0xfb,                                      /* (long)-5 */
      0x3f, 0xf0, 0, 0, 0, 0, 0, 0,                                /* 1.0 */
      0xc0, 0x00, 0x40, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,     /* -2.5L */
      0x00, 0x41,                                                  /* L'A' */
  };
  expect_bytes(buf, want, (int)sizeof want, "external32 bytes");
  /* Back, into the same strided places of zeroed memory. */
  int b[6] = {0};
  long l2 = 0;
  double d2 = 0;
  long double ld2 = 0;
  wchar_t w2 = 0;
  pos = 0;
  OK(MPI_Unpack_external("external32", buf, sizeof want, &pos, b, 1, every_other));
  OK(MPI_Unpack_external("external32", buf, sizeof want, &pos, &l2, 1, MPI_LONG));
  OK(MPI_Unpack_external("external32", buf, sizeof want, &pos, &d2, 1, MPI_DOUBLE));
  OK(MPI_Unpack_external("external32", buf, sizeof want, &pos, &ld2, 1, MPI_LONG_DOUBLE));
  OK(MPI_Unpack_external("external32", buf, sizeof want, &pos, &w2, 1, MPI_WCHAR));
  CHECK(pos == (MPI_Aint)sizeof want, "position %ld after unpacking", (long)pos);
  CHECK(b[0] == 1 && b[1] == 0 && b[2] == 3 && b[3] == 0 && b[4] == -5 && b[5] == 0,
        "the strided ints came back as %d %d %d %d %d %d", b[0], b[1], b[2], b[3],
        b[4], b[5]);
  CHECK(l2 == -5 && d2 == 1.0 && ld2 == -2.5L && w2 == L'A',
        "came back as %ld %g %Lg %#x", l2, d2, ld2, (unsigned)w2);
  /* The _c forms agree. */
  MPI_Count cpos = 0;
  unsigned char cbuf[16];
  OK(MPI_Pack_external_c("external32", a, 1, every_other, cbuf, sizeof cbuf, &cpos));
  CHECK(cpos == 12, "the _c form's position %lld", (long long)cpos);
  expect_bytes(cbuf, want, 12, "the _c form's bytes");
  memset(b, 0, sizeof b);
  cpos = 0;
  OK(MPI_Unpack_external_c("external32", cbuf, 12, &cpos, b, 1, every_other));
  CHECK(cpos == 12 && b[4] == -5, "the _c form unpacked %d at %lld", b[4], (long long)cpos);
  OK(MPI_Type_free(&every_other));
}

static void test_errors(void) {
  errors_return(MPI_COMM_WORLD, 1);
  errors_return(MPI_COMM_SELF, 1);
  int x = 7;
  unsigned char buf[8];
  MPI_Aint pos = 0, sz = 0;
  EXPECT_ERR(MPI_Pack_external("native", &x, 1, MPI_INT, buf, sizeof buf, &pos),
             MPI_ERR_UNSUPPORTED_DATAREP, "external32");
  EXPECT_ERR(MPI_Pack_external_size("xdr", 1, MPI_INT, &sz), MPI_ERR_UNSUPPORTED_DATAREP,
             "xdr");
  pos = 6;
  EXPECT_ERR(MPI_Pack_external("external32", &x, 1, MPI_INT, buf, sizeof buf, &pos),
             MPI_ERR_TRUNCATE, NULL);
  CHECK(pos == 6, "a refused pack moved the position to %ld", (long)pos);
  pos = 6;
  EXPECT_ERR(MPI_Unpack_external("external32", buf, sizeof buf, &pos, &x, 1, MPI_INT),
             MPI_ERR_TRUNCATE, NULL);
  long big = 1L << 40;
  pos = 0;
  EXPECT_ERR(MPI_Pack_external("external32", &big, 1, MPI_LONG, buf, sizeof buf, &pos),
             MPI_ERR_CONVERSION, "long");
  CHECK(pos == 0, "a refused conversion moved the position to %ld", (long)pos);
  EXPECT_ERR(MPI_Pack_external("external32", &x, -1, MPI_INT, buf, sizeof buf, &pos),
             MPI_ERR_COUNT, NULL);
  EXPECT_ERR(MPI_Pack_external("external32", &x, 1, MPI_INT, buf, sizeof buf, NULL),
             MPI_ERR_ARG, NULL);
  EXPECT_ERR(MPI_Pack_external_size("external32", 1, MPI_DATATYPE_NULL, &sz), MPI_ERR_TYPE,
             NULL);
  errors_return(MPI_COMM_SELF, 0);
  errors_return(MPI_COMM_WORLD, 0);
}

/* Structs packed to external32 by each rank and unpacked by the next. */
static void test_between_ranks(void) {
  MPI_Datatype m = mixed_type();
  enum { N = 3 };
  struct mixed out[N], in[N];
  for (int i = 0; i < N; i++)
    out[i] = mixed_value(rank * N + i);
  MPI_Aint need = 0, pos = 0;
  OK(MPI_Pack_external_size("external32", N, m, &need));
  unsigned char *sbuf = malloc(need), *rbuf = malloc(need);
  OK(MPI_Pack_external("external32", out, N, m, sbuf, need, &pos));
  CHECK(pos == need, "packed %ld of %ld bytes", (long)pos, (long)need);
  int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  OK(MPI_Sendrecv(sbuf, (int)need, MPI_BYTE, next, 5, rbuf, (int)need, MPI_BYTE, prev, 5,
                  MPI_COMM_WORLD, MPI_STATUS_IGNORE));
  memset(in, 0, sizeof in);
  pos = 0;
  OK(MPI_Unpack_external("external32", rbuf, need, &pos, in, N, m));
  for (int i = 0; i < N; i++)
    expect_mixed(&in[i], prev * N + i);
  free(sbuf);
  free(rbuf);
  OK(MPI_Type_free(&m));
}

static void expect_f90(MPI_Datatype t, int combiner, int ni, const int *ints, int tsize) {
  int n_ints = -1, n_addrs = -1, n_types = -1, comb = -1, got[2] = {-9, -9}, s = -1;
  OK(MPI_Type_get_envelope(t, &n_ints, &n_addrs, &n_types, &comb));
  CHECK(comb == combiner && n_ints == ni && n_addrs == 0 && n_types == 0,
        "envelope: combiner %d (want %d), %d ints, %d addresses, %d types", comb,
        combiner, n_ints, n_addrs, n_types);
  OK(MPI_Type_get_contents(t, 2, 0, 0, got, NULL, NULL));
  for (int i = 0; i < ni; i++)
    CHECK(got[i] == ints[i], "contents: int %d is %d, not %d", i, got[i], ints[i]);
  OK(MPI_Type_size(t, &s));
  CHECK(s == tsize, "size %d, not %d", s, tsize);
}

static void test_f90(void) {
  MPI_Datatype r6, r6again, r15, c15, i9, i10, dup;
  OK(MPI_Type_create_f90_real(6, MPI_UNDEFINED, &r6));
  OK(MPI_Type_create_f90_real(6, MPI_UNDEFINED, &r6again));
  CHECK(r6 == r6again, "the same arguments gave two handles");
  int ints[2] = {6, MPI_UNDEFINED};
  expect_f90(r6, MPI_COMBINER_F90_REAL, 2, ints, 4);
  OK(MPI_Type_create_f90_real(15, 300, &r15));
  int ints15[2] = {15, 300};
  expect_f90(r15, MPI_COMBINER_F90_REAL, 2, ints15, 8);
  OK(MPI_Type_create_f90_complex(MPI_UNDEFINED, 300, &c15));
  int intsc[2] = {MPI_UNDEFINED, 300};
  expect_f90(c15, MPI_COMBINER_F90_COMPLEX, 2, intsc, 16);
  OK(MPI_Type_create_f90_integer(9, &i9));
  int r9 = 9, r10 = 10;
  expect_f90(i9, MPI_COMBINER_F90_INTEGER, 1, &r9, 4);
  OK(MPI_Type_create_f90_integer(10, &i10));
  expect_f90(i10, MPI_COMBINER_F90_INTEGER, 1, &r10, 8);
  expect_ext_size(r15, 2, 16, "f90 reals of 15 digits");
  /* Not freeable; a dup is. */
  errors_return(MPI_COMM_WORLD, 1);
  errors_return(MPI_COMM_SELF, 1);
  MPI_Datatype keep = r6;
  EXPECT_ERR(MPI_Type_free(&keep), MPI_ERR_TYPE, "predefined");
  CHECK(keep == r6, "a refused free changed the handle");
  MPI_Datatype none;
  EXPECT_ERR(MPI_Type_create_f90_real(40, MPI_UNDEFINED, &none), MPI_ERR_ARG, "precision");
  EXPECT_ERR(MPI_Type_create_f90_real(MPI_UNDEFINED, MPI_UNDEFINED, &none), MPI_ERR_ARG,
             NULL);
  EXPECT_ERR(MPI_Type_create_f90_integer(39, &none), MPI_ERR_ARG, "range");
  EXPECT_ERR(MPI_Type_create_f90_integer(-3, &none), MPI_ERR_ARG, NULL);
  errors_return(MPI_COMM_SELF, 0);
  errors_return(MPI_COMM_WORLD, 0);
  OK(MPI_Type_dup(r15, &dup));
  OK(MPI_Type_free(&dup));
  /* A message of 8-byte reals, and a sum of 8-byte integers, in those types. */
  double v[2] = {rank + 0.25, -rank - 0.5}, got[2];
  int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  OK(MPI_Sendrecv(v, 2, r15, next, 6, got, 2, r15, prev, 6, MPI_COMM_WORLD,
                  MPI_STATUS_IGNORE));
  CHECK(got[0] == prev + 0.25 && got[1] == -prev - 0.5, "received %g %g", got[0], got[1]);
  long long one = 1, sum = 0;
  OK(MPI_Allreduce(&one, &sum, 1, i10, MPI_SUM, MPI_COMM_WORLD));
  CHECK(sum == size, "the sum of ones is %lld", sum);
}

int main(int argc, char **argv) {
  start("representations", &argc, &argv);
  test_sizes();
  test_bytes();
  test_errors();
  test_between_ranks();
  test_f90();
  return finish();
}
