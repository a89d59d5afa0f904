/* Long on purpose: one program holds every collective's check, so that each rank count
 * (1 to 8) is one launch. */
/* coll.c: collectives at any number of ranks (run at 1 to 8), each result checked
 * against a reference computed here from every rank's input. Barrier (no rank leaves
 * before a late one enters; the ranks share one node's clock); Bcast from several
 * roots, small and over 64 KiB, with a type that is not contiguous; Reduce and
 * Allreduce with every predefined operation on several types (MPI_INT, MPI_DOUBLE,
 * MPI_LONG_LONG, MPI_UNSIGNED_CHAR, MPI_C_BOOL, MPI_2INT, MPI_DOUBLE_INT, and long
 * double, its complex and MPI_LONG_DOUBLE_INT with values a double cannot hold, half
 * and quadruple floats: MPI_REAL2, MPI_COMPLEX4, MPI_REAL16, MPI_COMPLEX32), short and
 * long (Reduce to every root); user operations, commutative and not (2x2 matrix
 * products, which must come in rank order), on contiguous types and not;
 * MPI_Reduce_local; every MPI_IN_PLACE form; Gather(v), Scatter(v), Allgather(v),
 * Alltoall(v,w), Reduce_scatter(_block), Scan, Exscan; types that are not contiguous
 * on either side; sub-communicators (a split by parity, the world reversed); and the
 * nonblocking forms, many in flight on one communicator, completed in several orders;
 * an MPI_Allreduce, an MPI_Bcast, an MPI_Alltoall, an MPI_Allgather, an MPI_Gather, an
 * MPI_Scatter, an MPI_Reduce and an MPI_Reduce_scatter_block while one rank alone has
 * a nonblocking collective in flight; members whose counts differ, where the
 * collectives run without a schedule (MPI_ERR_TRUNCATE); blocking and nonblocking ones
 * called in other orders on the members; persistent collectives started three times,
 * their buffers read at each start. */
#include "check.h"
#include <complex.h>
#include <math.h>
#include <time.h>

/* --- Reference inputs: what rank r holds at element i. --- */

static int ival(int r, int i) { return (r * 7 + i * 3) % 11 - 5; }
static int pval(int r, int i) { return (r + i) % 3 == 0 ? -1 : (r + i) % 3 == 1 ? 1 : 2; }
static int lval(int r, int i) { return (r + i) % 3 == 0; }
static int bval(int r, int i) { return (1 << ((r + i) % 8)) | ((r * i) & 0x70); }

/* --- 2x2 matrices modulo 1009: an associative operation that does not commute. */

typedef struct {
  int a, b, c, d;
} mat;

static mat mat_of(int r, int k) {
  mat m = {(r + k) % 5 + 1, r + 1, k + 1, (r * k) % 3};
  return m;
}

static mat mat_mul(mat x, mat y) {
  mat m = {(x.a * y.a + x.b * y.c) % 1009, (x.a * y.b + x.b * y.d) % 1009,
           (x.c * y.a + x.d * y.c) % 1009, (x.c * y.b + x.d * y.d) % 1009};
  return m;
}

static int mat_eq(mat x, mat y) {
  return x.a == y.a && x.b == y.b && x.c == y.c && x.d == y.d;
}

/* The product of the matrices of ranks lo..hi-1 at element k, in rank order. */
static mat mat_prod(int lo, int hi, int k) {
  mat p = {1, 0, 0, 1};
  for (int r = lo; r < hi; r++)
    p = mat_mul(p, mat_of(r, k));
  return p;
}

static MPI_Datatype t_mat, t_mat_gap; /* 4 ints; 4 ints with a 1-int gap after */

/* The user function: inout = in x inout, element by element, each element a
 * matrix at the type's extent (so that it also serves types with gaps). */
static void mat_op(void *in, void *inout, int *len, MPI_Datatype *type) {
  MPI_Aint extent = *type == t_mat_gap ? 5 * sizeof(int) : sizeof(mat);
  for (int j = 0; j < *len; j++) {
    mat *x = (mat *)((char *)in + j * extent);
    mat *y = (mat *)((char *)inout + j * extent);
    *y = mat_mul(*x, *y);
  }
}

/* The same as a large-count function (MPI_Op_create_c). */
static void mat_op_c(void *in, void *inout, MPI_Count *len, MPI_Datatype *type) {
  int n = (int)*len;
  mat_op(in, inout, &n, type);
}

/* A commutative user operation: the larger absolute value, ties to the larger. */
static void absmax_op(void *in, void *inout, int *len, MPI_Datatype *type) {
  (void)type;
  int *x = in, *y = inout;
  for (int j = 0; j < *len; j++) {
    int ax = abs(x[j]), ay = abs(y[j]);
    if (ax > ay || (ax == ay && x[j] > y[j]))
      y[j] = x[j];
  }
}

static int absmax(int x, int y) {
  int ax = abs(x), ay = abs(y);
  return ax > ay || (ax == ay && x > y) ? x : y;
}

static MPI_Op op_mat, op_absmax;

static void setup(void) {
  OK(MPI_Op_create(mat_op, 0, &op_mat));
  OK(MPI_Op_create(absmax_op, 1, &op_absmax));
  int commute = -1;
  OK(MPI_Op_commutative(op_mat, &commute));
  CHECK(commute == 0, "MPI_Op_commutative of a non-commutative op: %d", commute);
  OK(MPI_Op_commutative(op_absmax, &commute));
  CHECK(commute == 1, "MPI_Op_commutative of a commutative op: %d", commute);
  OK(MPI_Op_commutative(MPI_SUM, &commute));
  CHECK(commute == 1, "MPI_Op_commutative(MPI_SUM): %d", commute);
  OK(MPI_Type_contiguous(4, MPI_INT, &t_mat));
  OK(MPI_Type_commit(&t_mat));
  MPI_Datatype four;
  OK(MPI_Type_contiguous(4, MPI_INT, &four));
  OK(MPI_Type_create_resized(four, 0, 5 * sizeof(int), &t_mat_gap));
  OK(MPI_Type_commit(&t_mat_gap));
  OK(MPI_Type_free(&four));
}

/* --- Barrier and broadcast --- */

/* Seconds on the node's monotonic clock, which every rank of a node shares. */
static double node_clock(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void test_bcast(void) {
  int roots[3] = {0, size - 1, size / 2};
  /* No rank leaves a barrier before the last has entered: one rank comes late. */
  for (int k = 0; k < 3; k++) {
    if (rank == roots[k]) {
      struct timespec late = {0, 20 * 1000 * 1000};
      nanosleep(&late, NULL);
    }
    double in = node_clock(), last_in;
    OK(MPI_Barrier(MPI_COMM_WORLD));
    double out = node_clock();
    OK(MPI_Allreduce(&in, &last_in, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
    CHECK(out >= last_in, "MPI_Barrier (rank %d late): rank %d left %.6f s before the last entered",
          roots[k], rank, last_in - out);
  }
  /* Whole from the root to each at once (three ranks or more on one node; below 32
   * KiB), then from 32 KiB: from the root to each at once or, on a node with more
   * ranks than processors, down the in-order tree in pieces of 8 KiB, of an eighth
   * of an odd size, and of 16 KiB. */
  enum { BIG = 300000 };
  static const int lens[] = {20000, 40000, 100003, BIG};
  unsigned char *big = malloc(BIG);
  for (int k = 0; k < 3; k++) {
    int root = roots[k];
    int small[1000];
    for (int i = 0; i < 1000; i++)
      small[i] = rank == root ? root * 1000 + i : -1;
    OK(MPI_Bcast(small, 1, MPI_INT, root, MPI_COMM_WORLD));
    CHECK(small[0] == root * 1000, "MPI_Bcast of one int from %d: %d", root, small[0]);
    OK(MPI_Bcast(small, 1000, MPI_INT, root, MPI_COMM_WORLD));
    for (int i = 0; i < 1000; i++)
      CHECK(small[i] == root * 1000 + i, "MPI_Bcast of 1000 ints from %d: element %d is %d",
            root, i, small[i]);
    for (int j = 0; j < (int)(sizeof lens / sizeof lens[0]); j++) {
      int len = lens[j];
      for (int i = 0; i < len; i++)
        big[i] = rank == root ? (unsigned char)(i * 7 + root + len) : 0;
      OK(MPI_Bcast(big, len, MPI_BYTE, root, MPI_COMM_WORLD));
      for (int i = 0; i < len; i++)
        CHECK(big[i] == (unsigned char)(i * 7 + root + len),
              "MPI_Bcast of %d bytes from %d: byte %d is %d", len, root, i, big[i]);
    }
    /* Every other double. */
    double v[1000];
    MPI_Datatype every_other;
    OK(MPI_Type_vector(500, 1, 2, MPI_DOUBLE, &every_other));
    OK(MPI_Type_commit(&every_other));
    for (int i = 0; i < 1000; i++)
      v[i] = rank == root ? i + 0.5 : -1;
    OK(MPI_Bcast(v, 1, every_other, root, MPI_COMM_WORLD));
    for (int i = 0; i < 1000; i++) {
      double want = i % 2 == 0 || rank == root ? i + 0.5 : -1;
      CHECK(v[i] == want, "MPI_Bcast of a vector from %d: element %d is %g", root, i, v[i]);
    }
    OK(MPI_Type_free(&every_other));
  }
  free(big);
}

/* --- Reductions with predefined operations --- */

typedef struct {
  MPI_Op op;
  const char *name;
} named_op;

static int int_ref(MPI_Op op, int i) {
  int acc = 0;
  for (int r = 0; r < size; r++) {
    int x = op == MPI_PROD ? pval(r, i)
            : (op == MPI_LAND || op == MPI_LOR || op == MPI_LXOR) ? lval(r, i)
            : (op == MPI_BAND || op == MPI_BOR || op == MPI_BXOR) ? bval(r, i)
                                                                  : ival(r, i);
    if (r == 0) {
      acc = op == MPI_LAND || op == MPI_LOR ? x != 0 : x;
      continue;
    }
    if (op == MPI_SUM) acc += x;
    else if (op == MPI_PROD) acc *= x;
    else if (op == MPI_MIN) acc = x < acc ? x : acc;
    else if (op == MPI_MAX) acc = x > acc ? x : acc;
    else if (op == MPI_LAND) acc = acc && x;
    else if (op == MPI_LOR) acc = acc || x;
    else if (op == MPI_LXOR) acc = (acc != 0) != (x != 0);
    else if (op == MPI_BAND) acc &= x;
    else if (op == MPI_BOR) acc |= x;
    else if (op == MPI_BXOR) acc ^= x;
  }
  return acc;
}

static int int_in(MPI_Op op, int r, int i) {
  if (op == MPI_PROD) return pval(r, i);
  if (op == MPI_LAND || op == MPI_LOR || op == MPI_LXOR) return lval(r, i);
  if (op == MPI_BAND || op == MPI_BOR || op == MPI_BXOR) return bval(r, i);
  return ival(r, i);
}

static void test_reduce_int(void) {
  named_op ops[] = {{MPI_SUM, "MPI_SUM"},   {MPI_PROD, "MPI_PROD"}, {MPI_MIN, "MPI_MIN"},
                    {MPI_MAX, "MPI_MAX"},   {MPI_LAND, "MPI_LAND"}, {MPI_LOR, "MPI_LOR"},
                    {MPI_LXOR, "MPI_LXOR"}, {MPI_BAND, "MPI_BAND"}, {MPI_BOR, "MPI_BOR"},
                    {MPI_BXOR, "MPI_BXOR"}};
  enum { N = 9 };
  for (unsigned k = 0; k < sizeof ops / sizeof ops[0]; k++) {
    MPI_Op op = ops[k].op;
    int in[N], out[N], root = k % size;
    for (int i = 0; i < N; i++) {
      in[i] = int_in(op, rank, i);
      out[i] = -99;
    }
    OK(MPI_Allreduce(in, out, N, MPI_INT, op, MPI_COMM_WORLD));
    for (int i = 0; i < N; i++)
      CHECK(out[i] == int_ref(op, i), "MPI_Allreduce(%s) on MPI_INT: element %d is %d, expected %d",
            ops[k].name, i, out[i], int_ref(op, i));
    for (int i = 0; i < N; i++)
      out[i] = -99;
    OK(MPI_Reduce(in, out, N, MPI_INT, op, root, MPI_COMM_WORLD));
    for (int i = 0; i < N; i++)
      CHECK(rank == root ? out[i] == int_ref(op, i) : out[i] == -99,
            "MPI_Reduce(%s) to %d on MPI_INT: element %d is %d, expected %d", ops[k].name,
            root, i, out[i], rank == root ? int_ref(op, i) : -99);
    /* In place. */
    for (int i = 0; i < N; i++)
      out[i] = in[i];
    OK(MPI_Allreduce(MPI_IN_PLACE, out, N, MPI_INT, op, MPI_COMM_WORLD));
    for (int i = 0; i < N; i++)
      CHECK(out[i] == int_ref(op, i), "MPI_Allreduce(%s) in place: element %d is %d", ops[k].name,
            i, out[i]);
    for (int i = 0; i < N; i++)
      out[i] = in[i];
    if (rank == root)
      OK(MPI_Reduce(MPI_IN_PLACE, out, N, MPI_INT, op, root, MPI_COMM_WORLD));
    else
      OK(MPI_Reduce(out, NULL, N, MPI_INT, op, root, MPI_COMM_WORLD));
    if (rank == root)
      for (int i = 0; i < N; i++)
        CHECK(out[i] == int_ref(op, i), "MPI_Reduce(%s) in place: element %d is %d",
              ops[k].name, i, out[i]);
  }
}

static void test_reduce_other_types(void) {
  enum { N = 6 };
  /* MPI_DOUBLE: integer values, so that every order sums exactly. */
  double din[N], dout[N];
  for (int i = 0; i < N; i++)
    din[i] = ival(rank, i) * 0.5;
  named_op dops[] = {{MPI_SUM, "MPI_SUM"}, {MPI_MIN, "MPI_MIN"}, {MPI_MAX, "MPI_MAX"}};
  for (int k = 0; k < 3; k++) {
    OK(MPI_Allreduce(din, dout, N, MPI_DOUBLE, dops[k].op, MPI_COMM_WORLD));
    for (int i = 0; i < N; i++) {
      double want = ival(0, i) * 0.5;
      for (int r = 1; r < size; r++) {
        double x = ival(r, i) * 0.5;
        want = dops[k].op == MPI_SUM ? want + x
               : dops[k].op == MPI_MIN ? (x < want ? x : want)
                                       : (x > want ? x : want);
      }
      CHECK(dout[i] == want, "MPI_Allreduce(%s) on MPI_DOUBLE: element %d is %g, expected %g",
            dops[k].name, i, dout[i], want);
    }
  }
  for (int i = 0; i < N; i++)
    din[i] = pval(rank, i);
  OK(MPI_Allreduce(din, dout, N, MPI_DOUBLE, MPI_PROD, MPI_COMM_WORLD));
  for (int i = 0; i < N; i++) {
    double want = 1;
    for (int r = 0; r < size; r++)
      want *= pval(r, i);
    CHECK(dout[i] == want, "MPI_Allreduce(MPI_PROD) on MPI_DOUBLE: %g, expected %g", dout[i], want);
  }
  /* MPI_LONG_LONG: values past 32 bits. */
  long long lin[N], lout[N];
  for (int i = 0; i < N; i++)
    lin[i] = (long long)(rank + 1) << (20 + i);
  OK(MPI_Allreduce(lin, lout, N, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD));
  for (int i = 0; i < N; i++) {
    long long want = (long long)size * (size + 1) / 2 << (20 + i);
    CHECK(lout[i] == want, "MPI_Allreduce(MPI_SUM) on MPI_LONG_LONG: %lld, expected %lld",
          lout[i], want);
  }
  /* MPI_UNSIGNED_CHAR: sums wrap. */
  unsigned char cin[N], cout[N];
  for (int i = 0; i < N; i++)
    cin[i] = (unsigned char)(200 + rank * 13 + i);
  OK(MPI_Allreduce(cin, cout, N, MPI_UNSIGNED_CHAR, MPI_SUM, MPI_COMM_WORLD));
  for (int i = 0; i < N; i++) {
    unsigned char want = 0;
    for (int r = 0; r < size; r++)
      want = (unsigned char)(want + 200 + r * 13 + i);
    CHECK(cout[i] == want, "MPI_Allreduce(MPI_SUM) on MPI_UNSIGNED_CHAR: %d, expected %d",
          cout[i], want);
  }
  OK(MPI_Allreduce(cin, cout, N, MPI_UNSIGNED_CHAR, MPI_BXOR, MPI_COMM_WORLD));
  for (int i = 0; i < N; i++) {
    unsigned char want = 0;
    for (int r = 0; r < size; r++)
      want ^= (unsigned char)(200 + r * 13 + i);
    CHECK(cout[i] == want, "MPI_Allreduce(MPI_BXOR) on MPI_UNSIGNED_CHAR: %d", cout[i]);
  }
  /* MPI_C_BOOL. */
  _Bool bin[N], bout[N];
  for (int i = 0; i < N; i++)
    bin[i] = lval(rank, i);
  OK(MPI_Allreduce(bin, bout, N, MPI_C_BOOL, MPI_LOR, MPI_COMM_WORLD));
  for (int i = 0; i < N; i++) {
    _Bool want = 0;
    for (int r = 0; r < size; r++)
      want = want || lval(r, i);
    CHECK(bout[i] == want, "MPI_Allreduce(MPI_LOR) on MPI_C_BOOL: %d", bout[i]);
  }

  /* MINLOC and MAXLOC: ties go to the smaller index. */
  struct {
    int v, i;
  } pin[N], pout[N];
  struct {
    double v;
    int i;
  } qin[N], qout[N];
  for (int i = 0; i < N; i++) {
    pin[i].v = (rank * 5 + i) % 4;
    pin[i].i = rank;
    qin[i].v = ((rank * 3 + i) % 5) * 0.5;
    qin[i].i = 100 + rank;
  }
  for (int k = 0; k < 2; k++) {
    MPI_Op op = k ? MPI_MAXLOC : MPI_MINLOC;
    OK(MPI_Allreduce(pin, pout, N, MPI_2INT, op, MPI_COMM_WORLD));
    OK(MPI_Reduce(qin, qout, N, MPI_DOUBLE_INT, op, size - 1, MPI_COMM_WORLD));
    for (int i = 0; i < N; i++) {
      int bv = (0 * 5 + i) % 4, bi = 0;
      double qv = ((0 * 3 + i) % 5) * 0.5;
      int qi = 100;
      for (int r = 1; r < size; r++) {
        int v = (r * 5 + i) % 4;
        if (k ? v > bv : v < bv) {
          bv = v;
          bi = r;
        }
        double w = ((r * 3 + i) % 5) * 0.5;
        if (k ? w > qv : w < qv) {
          qv = w;
          qi = 100 + r;
        }
      }
      CHECK(pout[i].v == bv && pout[i].i == bi, "%s on MPI_2INT: (%d, %d), expected (%d, %d)",
            k ? "MPI_MAXLOC" : "MPI_MINLOC", pout[i].v, pout[i].i, bv, bi);
      if (rank == size - 1)
        CHECK(qout[i].v == qv && qout[i].i == qi,
              "%s on MPI_DOUBLE_INT: (%g, %d), expected (%g, %d)",
              k ? "MPI_MAXLOC" : "MPI_MINLOC", qout[i].v, qout[i].i, qv, qi);
    }
  }

  /* Long vectors, counts not divisible by the size: past eager messages (recursive
     doubling at two ranks, each round's result in a place of its own; the ring at
     more) and past 1 MiB (the ring at every size); from a send buffer and in place. */
  const int lengths[] = {5003, 131101};
  for (int k = 0; k < 2; k++) {
    int L = lengths[k];
    double *a = malloc(sizeof(double) * L), *b = malloc(sizeof(double) * L);
    for (int i = 0; i < L; i++)
      a[i] = (rank + 1) * (i % 7);
    OK(MPI_Allreduce(a, b, L, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
    for (int i = 0; i < L; i++)
      CHECK(b[i] == size * (size + 1) / 2 * (i % 7),
            "a long MPI_Allreduce of %d: element %d is %g", L, i, b[i]);
    for (int i = 0; i < L; i++)
      CHECK(a[i] == (rank + 1) * (i % 7), "a long MPI_Allreduce of %d wrote its send buffer",
            L);
    OK(MPI_Allreduce(MPI_IN_PLACE, a, L, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
    for (int i = 0; i < L; i++)
      CHECK(a[i] == size * (i % 7), "a long MPI_Allreduce(MPI_MAX) of %d in place: element %d is %g",
            L, i, a[i]);
    free(a);
    free(b);
  }

  /* A vector type: every other double of 2 x 100. */
  double v[200], w[200];
  MPI_Datatype every_other, vec;
  OK(MPI_Type_vector(50, 1, 2, MPI_DOUBLE, &vec));
  OK(MPI_Type_create_resized(vec, 0, 100 * sizeof(double), &every_other));
  OK(MPI_Type_commit(&every_other));
  OK(MPI_Type_free(&vec));
  for (int i = 0; i < 200; i++) {
    v[i] = i % 2 ? -1 : rank + i;
    w[i] = -7;
  }
  OK(MPI_Allreduce(v, w, 2, every_other, MPI_SUM, MPI_COMM_WORLD));
  for (int i = 0; i < 200; i++) {
    double want = i % 2 ? -7 : size * (size - 1) / 2 + size * i;
    CHECK(w[i] == want, "MPI_Allreduce on a vector type: element %d is %g, expected %g", i,
          w[i], want);
  }
  OK(MPI_Type_free(&every_other));
}

/* MPI_Reduce past eager messages (by its schedule) to every root: from a send buffer
 * (the root combines into its receive buffer, the members inside the tree into a place
 * of their own, the leaves send their operand as it is) and in place; and on a type
 * that is not contiguous (packed, combined apart, unpacked at the root).
 * MPI_Reduce_scatter_block, MPI_Scan and MPI_Exscan alike. */
static void test_reduce_long(void) {
  enum { L = 40009 };
  double *a = malloc(sizeof(double) * 2 * L), *b = malloc(sizeof(double) * 2 * L);
  for (int root = 0; root < size; root++) {
    for (int i = 0; i < L; i++) {
      a[i] = (rank + 1) * (i % 7);
      b[i] = -7;
    }
    OK(MPI_Reduce(a, b, L, MPI_DOUBLE, MPI_SUM, root, MPI_COMM_WORLD));
    for (int i = 0; i < L; i++) {
      double want = rank == root ? size * (size + 1) / 2 * (i % 7) : -7;
      CHECK(b[i] == want, "a long MPI_Reduce to %d: element %d is %g, expected %g", root, i,
            b[i], want);
      CHECK(a[i] == (rank + 1) * (i % 7), "a long MPI_Reduce to %d wrote its send buffer",
            root);
    }
    if (rank == root)
      OK(MPI_Reduce(MPI_IN_PLACE, a, L, MPI_DOUBLE, MPI_MAX, root, MPI_COMM_WORLD));
    else
      OK(MPI_Reduce(a, NULL, L, MPI_DOUBLE, MPI_MAX, root, MPI_COMM_WORLD));
    for (int i = 0; i < L; i++) {
      double want = rank == root ? size * (i % 7) : (rank + 1) * (i % 7);
      CHECK(a[i] == want, "a long MPI_Reduce(MPI_MAX) to %d in place: element %d is %g", root,
            i, a[i]);
    }
  }
  /* Every other double of 2 x L. */
  MPI_Datatype every_other;
  OK(MPI_Type_vector(L, 1, 2, MPI_DOUBLE, &every_other));
  OK(MPI_Type_commit(&every_other));
  int root = size - 1;
  for (int i = 0; i < 2 * L; i++) {
    a[i] = i % 2 ? -1 : rank + i;
    b[i] = -7;
  }
  OK(MPI_Reduce(a, b, 1, every_other, MPI_SUM, root, MPI_COMM_WORLD));
  for (int i = 0; rank == root && i < 2 * L; i++) {
    double want = i % 2 ? -7 : size * (size - 1) / 2 + size * i;
    CHECK(b[i] == want, "a long MPI_Reduce on a vector type: element %d is %g, expected %g", i,
          b[i], want);
  }
  OK(MPI_Type_free(&every_other));
  free(a);
  free(b);

  /* MPI_Reduce_scatter_block past eager messages (pairwise): from a send buffer, the
   * operand only read, and in place, on a copy. */
  enum { B = 9001 };
  double *in = malloc(sizeof(double) * B * size), *mine = malloc(sizeof(double) * B);
  for (int i = 0; i < B * size; i++)
    in[i] = (rank + 1) * (i % 5);
  OK(MPI_Reduce_scatter_block(in, mine, B, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
  for (int i = 0; i < B; i++)
    CHECK(mine[i] == size * (size + 1) / 2 * ((rank * B + i) % 5),
          "a long MPI_Reduce_scatter_block: element %d is %g", i, mine[i]);
  for (int i = 0; i < B * size; i++)
    CHECK(in[i] == (rank + 1) * (i % 5), "a long MPI_Reduce_scatter_block wrote its send buffer");
  OK(MPI_Reduce_scatter_block(MPI_IN_PLACE, in, B, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
  for (int i = 0; i < B; i++)
    CHECK(in[i] == size * ((rank * B + i) % 5),
          "a long MPI_Reduce_scatter_block in place: element %d is %g", i, in[i]);
  free(in);
  free(mine);

  /* MPI_Scan and MPI_Exscan past eager messages (along the ranks): from a send
   * buffer, the operand only read, and in place. */
  enum { S = 20011 };
  double *x = malloc(sizeof(double) * S), *y = malloc(sizeof(double) * S);
  for (int i = 0; i < S; i++) {
    x[i] = (rank + 1) * (i % 3);
    y[i] = -7;
  }
  OK(MPI_Scan(x, y, S, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
  for (int i = 0; i < S; i++) {
    CHECK(y[i] == (rank + 1) * (rank + 2) / 2 * (i % 3), "a long MPI_Scan: element %d is %g",
          i, y[i]);
    CHECK(x[i] == (rank + 1) * (i % 3), "a long MPI_Scan wrote its send buffer");
  }
  OK(MPI_Exscan(x, y, S, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
  for (int i = 0; rank > 0 && i < S; i++)
    CHECK(y[i] == rank * (rank + 1) / 2 * (i % 3), "a long MPI_Exscan: element %d is %g", i,
          y[i]);
  OK(MPI_Scan(MPI_IN_PLACE, x, S, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
  for (int i = 0; i < S; i++)
    CHECK(x[i] == (rank + 1) * (rank + 2) / 2 * (i % 3),
          "a long MPI_Scan in place: element %d is %g", i, x[i]);
  for (int i = 0; i < S; i++)
    x[i] = (rank + 1) * (i % 3);
  OK(MPI_Exscan(MPI_IN_PLACE, x, S, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
  for (int i = 0; rank > 0 && i < S; i++)
    CHECK(x[i] == rank * (rank + 1) / 2 * (i % 3), "a long MPI_Exscan in place: element %d is %g",
          i, x[i]);
  free(x);
  free(y);
}

/* Half floats (MPI_REAL2, MPI_COMPLEX4: IEEE binary16), values whose sums, products
 * and extremes are exact in any order, against C's _Float16 here. */
static void test_reduce_half(void) {
  enum { N = 3 };
  _Float16 in[N], out[N];
  for (int i = 0; i < N; i++)
    in[i] = (_Float16)((rank + 1 + i) * 0.25);
  OK(MPI_Allreduce(in, out, N, MPI_REAL2, MPI_SUM, MPI_COMM_WORLD));
  for (int i = 0; i < N; i++) {
    _Float16 want = 0;
    for (int r = 0; r < size; r++)
      want += (_Float16)((r + 1 + i) * 0.25);
    CHECK(out[i] == want, "MPI_SUM on MPI_REAL2: element %d is %g, expected %g", i,
          (double)out[i], (double)want);
  }
  const double step = ldexp(1.0, -10); /* the next half float after 1 is 1 + step */
  for (int i = 0; i < N; i++)
    in[i] = (_Float16)(rank ? 2.0 : 1.0 + (i + 1) * step);
  OK(MPI_Allreduce(in, out, N, MPI_REAL2, MPI_PROD, MPI_COMM_WORLD));
  for (int i = 0; i < N; i++) {
    _Float16 want = (_Float16)ldexp(1.0 + (i + 1) * step, size - 1);
    CHECK(out[i] == want, "MPI_PROD on MPI_REAL2: element %d is %g, expected %g", i,
          (double)out[i], (double)want);
  }
  for (int k = 0; k < 2; k++) {
    MPI_Op op = k ? MPI_MAX : MPI_MIN;
    for (int i = 0; i < N; i++)
      in[i] = (_Float16)(1.0 + ((rank * 5 + i) % 7) * step);
    OK(MPI_Allreduce(in, out, N, MPI_REAL2, op, MPI_COMM_WORLD));
    for (int i = 0; i < N; i++) {
      _Float16 want = (_Float16)(1.0 + (i % 7) * step);
      for (int r = 1; r < size; r++) {
        _Float16 x = (_Float16)(1.0 + ((r * 5 + i) % 7) * step);
        want = k ? (x > want ? x : want) : (x < want ? x : want);
      }
      CHECK(out[i] == want, "%s on MPI_REAL2: element %d is %g, expected %g",
            k ? "MPI_MAX" : "MPI_MIN", i, (double)out[i], (double)want);
    }
  }
  /* Complex: (re, im) pairs. The product of 1 + i by itself size times. */
  _Float16 z[2] = {(_Float16)(rank + 1), (_Float16)(-rank)}, zout[2];
  OK(MPI_Allreduce(z, zout, 1, MPI_COMPLEX4, MPI_SUM, MPI_COMM_WORLD));
  CHECK(zout[0] == (_Float16)(size * (size + 1) / 2) &&
            zout[1] == (_Float16)(-size * (size - 1) / 2),
        "MPI_SUM on MPI_COMPLEX4: %g%+gi", (double)zout[0], (double)zout[1]);
  z[0] = z[1] = 1;
  OK(MPI_Allreduce(z, zout, 1, MPI_COMPLEX4, MPI_PROD, MPI_COMM_WORLD));
  _Float16 re = 1, im = 1;
  for (int r = 1; r < size; r++) {
    _Float16 t = re - im;
    im = re + im;
    re = t;
  }
  CHECK(zout[0] == re && zout[1] == im, "MPI_PROD on MPI_COMPLEX4: %g%+gi, expected %g%+gi",
        (double)zout[0], (double)zout[1], (double)re, (double)im);
}

/* Quadruple floats (MPI_REAL16, MPI_COMPLEX32: IEEE binary128), values 1 + k 2^-100,
 * beyond a long double's precision, whose sums, products and extremes are exact in
 * any order, against GCC's __float128 here. */
static void test_reduce_quad(void) {
  enum { N = 3 };
  const __float128 step = (__float128)1 / ((__float128)(1ULL << 50) * (__float128)(1ULL << 50));
  __float128 in[N], out[N];
  for (int i = 0; i < N; i++)
    in[i] = 1 + (rank + 1 + i) * step;
  OK(MPI_Allreduce(in, out, N, MPI_REAL16, MPI_SUM, MPI_COMM_WORLD));
  for (int i = 0; i < N; i++) {
    __float128 want = size;
    for (int r = 0; r < size; r++)
      want += (r + 1 + i) * step;
    CHECK(out[i] == want, "MPI_SUM on MPI_REAL16: element %d is off by %g", i,
          (double)((out[i] - want) / step));
  }
  for (int i = 0; i < N; i++)
    in[i] = rank ? 2 : 1 + (i + 1) * step;
  OK(MPI_Allreduce(in, out, N, MPI_REAL16, MPI_PROD, MPI_COMM_WORLD));
  for (int i = 0; i < N; i++) {
    __float128 want = (1 + (i + 1) * step) * (__float128)(1 << (size - 1));
    CHECK(out[i] == want, "MPI_PROD on MPI_REAL16: element %d is off by %g", i,
          (double)((out[i] - want) / step));
  }
  for (int k = 0; k < 2; k++) {
    MPI_Op op = k ? MPI_MAX : MPI_MIN;
    for (int i = 0; i < N; i++)
      in[i] = 1 + ((rank * 5 + i) % 7) * step;
    OK(MPI_Allreduce(in, out, N, MPI_REAL16, op, MPI_COMM_WORLD));
    for (int i = 0; i < N; i++) {
      __float128 want = 1 + (i % 7) * step;
      for (int r = 1; r < size; r++) {
        __float128 x = 1 + ((r * 5 + i) % 7) * step;
        want = k ? (x > want ? x : want) : (x < want ? x : want);
      }
      CHECK(out[i] == want, "%s on MPI_REAL16: element %d is off by %g",
            k ? "MPI_MAX" : "MPI_MIN", i, (double)((out[i] - want) / step));
    }
  }
  /* Complex: (re, im) pairs. The product of 1 + step by i, size - 1 times (exact). */
  __float128 z[2] = {rank + 1 + step, -rank}, zout[2];
  OK(MPI_Allreduce(z, zout, 1, MPI_COMPLEX32, MPI_SUM, MPI_COMM_WORLD));
  CHECK(zout[0] == size * (size + 1) / 2 + size * step && zout[1] == -size * (size - 1) / 2,
        "MPI_SUM on MPI_COMPLEX32: %g%+gi", (double)zout[0], (double)zout[1]);
  z[0] = rank ? 0 : 1 + step;
  z[1] = rank ? 1 : 0;
  OK(MPI_Allreduce(z, zout, 1, MPI_COMPLEX32, MPI_PROD, MPI_COMM_WORLD));
  __float128 re = 1 + step, im = 0;
  for (int r = 1; r < size; r++) {
    __float128 t = -im;
    im = re;
    re = t;
  }
  CHECK(zout[0] == re && zout[1] == im, "MPI_PROD on MPI_COMPLEX32: off by %g%+gi",
        (double)((zout[0] - re) / step), (double)((zout[1] - im) / step));
}

/* long double (x86-64's 80-bit format): values that differ from 1 beyond a double's
 * precision, whose sums, products, extremes and locations are exact in any order. */
static void test_reduce_long_double(void) {
  enum { N = 3 };
  const long double step = ldexpl(1.0L, -60);
  long double in[N], out[N];
  for (int i = 0; i < N; i++)
    in[i] = 1.0L + (rank + 1 + i) * step;
  OK(MPI_Allreduce(in, out, N, MPI_LONG_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
  for (int i = 0; i < N; i++) {
    long double want = size;
    for (int r = 0; r < size; r++)
      want += (r + 1 + i) * step;
    CHECK(out[i] == want, "MPI_SUM on MPI_LONG_DOUBLE: element %d is off by %Lg", i,
          out[i] - want);
  }
  for (int i = 0; i < N; i++)
    in[i] = rank ? 2.0L : 1.0L + (i + 1) * step;
  OK(MPI_Allreduce(in, out, N, MPI_LONG_DOUBLE, MPI_PROD, MPI_COMM_WORLD));
  for (int i = 0; i < N; i++) {
    long double want = ldexpl(1.0L + (i + 1) * step, size - 1);
    CHECK(out[i] == want, "MPI_PROD on MPI_LONG_DOUBLE: element %d is off by %Lg", i,
          out[i] - want);
  }
  for (int k = 0; k < 2; k++) {
    MPI_Op op = k ? MPI_MAX : MPI_MIN;
    for (int i = 0; i < N; i++)
      in[i] = 1.0L + ((rank * 5 + i) % 7) * step;
    OK(MPI_Allreduce(in, out, N, MPI_LONG_DOUBLE, op, MPI_COMM_WORLD));
    for (int i = 0; i < N; i++) {
      long double want = 1.0L + ((0 * 5 + i) % 7) * step;
      for (int r = 1; r < size; r++) {
        long double x = 1.0L + ((r * 5 + i) % 7) * step;
        want = k ? (x > want ? x : want) : (x < want ? x : want);
      }
      CHECK(out[i] == want, "%s on MPI_LONG_DOUBLE: element %d is off by %Lg",
            k ? "MPI_MAX" : "MPI_MIN", i, out[i] - want);
    }
  }
  long double _Complex zin = (1.0L + (rank + 1) * step) - rank * 1.0iL, zout;
  OK(MPI_Allreduce(&zin, &zout, 1, MPI_C_LONG_DOUBLE_COMPLEX, MPI_SUM, MPI_COMM_WORLD));
  long double re = size, im = 0;
  for (int r = 0; r < size; r++) {
    re += (r + 1) * step;
    im -= r;
  }
  CHECK(creall(zout) == re && cimagl(zout) == im,
        "MPI_SUM on MPI_C_LONG_DOUBLE_COMPLEX: off by %Lg%+Lgi", creall(zout) - re,
        cimagl(zout) - im);
  zin = rank ? 1.0iL : 1.0L + step;
  OK(MPI_Allreduce(&zin, &zout, 1, MPI_C_LONG_DOUBLE_COMPLEX, MPI_PROD, MPI_COMM_WORLD));
  /* (1 + step) i^(size - 1) */
  long double a = (size - 1) % 2 ? 0 : 1.0L + step, b = (size - 1) % 2 ? 1.0L + step : 0;
  if ((size - 1) % 4 >= 2) {
    a = -a;
    b = -b;
  }
  CHECK(creall(zout) == a && cimagl(zout) == b,
        "MPI_PROD on MPI_C_LONG_DOUBLE_COMPLEX: %Lg%+Lgi, expected %Lg%+Lgi", creall(zout),
        cimagl(zout), a, b);
  struct {
    long double v;
    int i;
  } pin, pout;
  pin.v = 1.0L + ((rank * 3) % 4) * step;
  pin.i = rank;
  for (int k = 0; k < 2; k++) {
    MPI_Op op = k ? MPI_MAXLOC : MPI_MINLOC;
    OK(MPI_Allreduce(&pin, &pout, 1, MPI_LONG_DOUBLE_INT, op, MPI_COMM_WORLD));
    long double bv = 1.0L;
    int bi = 0;
    for (int r = 1; r < size; r++) {
      long double v = 1.0L + ((r * 3) % 4) * step;
      if (k ? v > bv : v < bv) {
        bv = v;
        bi = r;
      }
    }
    CHECK(pout.v == bv && pout.i == bi, "%s on MPI_LONG_DOUBLE_INT: index %d, expected %d",
          k ? "MPI_MAXLOC" : "MPI_MINLOC", pout.i, bi);
  }
}

/* --- User operations --- */

static void test_user_ops(void) {
  enum { K = 3 };
  mat in[K], out[K];
  for (int k = 0; k < K; k++)
    in[k] = mat_of(rank, k);
  /* Not commutative: the result is M_0 x M_1 x ... in rank order. */
  for (int root = 0; root < size; root += size > 2 ? size - 1 : 1) {
    memset(out, 0, sizeof out);
    OK(MPI_Reduce(in, out, K, t_mat, op_mat, root, MPI_COMM_WORLD));
    if (rank == root)
      for (int k = 0; k < K; k++)
        CHECK(mat_eq(out[k], mat_prod(0, size, k)),
              "MPI_Reduce of a non-commutative op to %d: element %d is out of rank order",
              root, k);
  }
  memset(out, 0, sizeof out);
  OK(MPI_Allreduce(in, out, K, t_mat, op_mat, MPI_COMM_WORLD));
  for (int k = 0; k < K; k++)
    CHECK(mat_eq(out[k], mat_prod(0, size, k)),
          "MPI_Allreduce of a non-commutative op: element %d is out of rank order", k);
  memset(out, 0, sizeof out);
  OK(MPI_Scan(in, out, K, t_mat, op_mat, MPI_COMM_WORLD));
  for (int k = 0; k < K; k++)
    CHECK(mat_eq(out[k], mat_prod(0, rank + 1, k)),
          "MPI_Scan of a non-commutative op: element %d is out of rank order", k);
  memset(out, 0, sizeof out);
  OK(MPI_Exscan(in, out, K, t_mat, op_mat, MPI_COMM_WORLD));
  if (rank > 0)
    for (int k = 0; k < K; k++)
      CHECK(mat_eq(out[k], mat_prod(0, rank, k)),
            "MPI_Exscan of a non-commutative op: element %d is out of rank order", k);
  /* The same with a gap after each matrix: the function sees the elements as
   * they lie in memory. */
  int gin[K * 5], gout[K * 5];
  for (int k = 0; k < K; k++) {
    memcpy(&gin[k * 5], &in[k], sizeof(mat));
    gin[k * 5 + 4] = -3;
  }
  for (int i = 0; i < K * 5; i++)
    gout[i] = -5;
  OK(MPI_Allreduce(gin, gout, K, t_mat_gap, op_mat, MPI_COMM_WORLD));
  for (int k = 0; k < K; k++) {
    mat got;
    memcpy(&got, &gout[k * 5], sizeof got);
    CHECK(mat_eq(got, mat_prod(0, size, k)) && gout[k * 5 + 4] == -5,
          "MPI_Allreduce of a non-commutative op on a type with gaps: element %d", k);
  }
  /* Through MPI_Op_create_c. */
  MPI_Op op_c;
  OK(MPI_Op_create_c(mat_op_c, 0, &op_c));
  memset(out, 0, sizeof out);
  OK(MPI_Allreduce(in, out, K, t_mat, op_c, MPI_COMM_WORLD));
  for (int k = 0; k < K; k++)
    CHECK(mat_eq(out[k], mat_prod(0, size, k)),
          "MPI_Allreduce of an MPI_Op_create_c op: element %d is out of rank order", k);
  CHECK(MPI_Op_f2c(MPI_Op_c2f(op_c)) == op_c, "a user op's Fortran handle");
  OK(MPI_Op_free(&op_c));
  /* Commutative. */
  enum { N = 7 };
  int ain[N], aout[N];
  for (int i = 0; i < N; i++)
    ain[i] = ival(rank, i) * (rank % 2 ? -1 : 1);
  OK(MPI_Allreduce(ain, aout, N, MPI_INT, op_absmax, MPI_COMM_WORLD));
  for (int i = 0; i < N; i++) {
    int want = ival(0, i);
    for (int r = 1; r < size; r++)
      want = absmax(ival(r, i) * (r % 2 ? -1 : 1), want);
    CHECK(aout[i] == want, "MPI_Allreduce of a commutative user op: element %d is %d, expected %d",
          i, aout[i], want);
  }
  /* MPI_Reduce_local: inout = in op inout. */
  mat x = mat_of(3, 1), y = mat_of(5, 2);
  mat xy = mat_mul(x, y);
  OK(MPI_Reduce_local(&x, &y, 1, t_mat, op_mat));
  CHECK(mat_eq(y, xy), "MPI_Reduce_local with a user op is not in x op y order");
  int p[3] = {1, 2, 3}, q[3] = {10, 20, 30};
  OK(MPI_Reduce_local(p, q, 3, MPI_INT, MPI_SUM));
  CHECK(q[0] == 11 && q[2] == 33, "MPI_Reduce_local(MPI_SUM): %d %d", q[0], q[2]);
  /* A type whose one block of 3 ints lies 2 ints in (not contiguous: packed first). */
  int three = 3;
  MPI_Aint two_in = 2 * sizeof(int);
  MPI_Datatype shifted;
  OK(MPI_Type_create_hindexed(1, &three, &two_in, MPI_INT, &shifted));
  OK(MPI_Type_commit(&shifted));
  int sp[5] = {7, 7, 1, 2, 3}, sq[5] = {-1, -2, 10, 20, 30};
  OK(MPI_Reduce_local(sp, sq, 1, shifted, MPI_SUM));
  CHECK(sq[0] == -1 && sq[1] == -2 && sq[2] == 11 && sq[3] == 22 && sq[4] == 33,
        "MPI_Reduce_local(MPI_SUM) on a type 2 ints in: %d %d %d %d %d", sq[0], sq[1], sq[2],
        sq[3], sq[4]);
  OK(MPI_Type_free(&shifted));
}

/* --- Data movement --- */

static void test_gather_scatter(void) {
  enum { C = 3 };
  int *all = malloc(sizeof(int) * C * size * 4 + 64);
  int mine[C], back[C];
  for (int root = 0; root < size; root += (size + 1) / 2) {
    for (int i = 0; i < C; i++)
      mine[i] = rank * 100 + i;
    for (int i = 0; i < C * size; i++)
      all[i] = -1;
    OK(MPI_Gather(mine, C, MPI_INT, all, C, MPI_INT, root, MPI_COMM_WORLD));
    if (rank == root)
      for (int i = 0; i < C * size; i++)
        CHECK(all[i] == (i / C) * 100 + i % C, "MPI_Gather to %d: element %d is %d", root, i,
              all[i]);
    /* In place at the root: its block is where it belongs already. */
    if (rank == root) {
      for (int i = 0; i < C * size; i++)
        all[i] = i / C == root ? root * 100 + i % C : -1;
      OK(MPI_Gather(MPI_IN_PLACE, C, MPI_INT, all, C, MPI_INT, root, MPI_COMM_WORLD));
      for (int i = 0; i < C * size; i++)
        CHECK(all[i] == (i / C) * 100 + i % C, "MPI_Gather in place: element %d is %d", i,
              all[i]);
    } else {
      OK(MPI_Gather(mine, C, MPI_INT, NULL, 0, MPI_DATATYPE_NULL, root, MPI_COMM_WORLD));
    }
    /* Scatter back what was gathered, with each block doubled. */
    if (rank == root)
      for (int i = 0; i < C * size; i++)
        all[i] *= 2;
    for (int i = 0; i < C; i++)
      back[i] = -1;
    OK(MPI_Scatter(all, C, MPI_INT, back, C, MPI_INT, root, MPI_COMM_WORLD));
    for (int i = 0; i < C; i++)
      CHECK(back[i] == 2 * (rank * 100 + i), "MPI_Scatter from %d: element %d is %d", root,
            i, back[i]);
    if (rank == root) {
      OK(MPI_Scatter(all, C, MPI_INT, MPI_IN_PLACE, C, MPI_INT, root, MPI_COMM_WORLD));
      CHECK(all[root * C] == 2 * root * 100, "MPI_Scatter in place changed the root's block");
    } else {
      for (int i = 0; i < C; i++)
        back[i] = -1;
      OK(MPI_Scatter(NULL, 0, MPI_DATATYPE_NULL, back, C, MPI_INT, root, MPI_COMM_WORLD));
      CHECK(back[C - 1] == 2 * (rank * 100 + C - 1), "MPI_Scatter (root in place): %d",
            back[C - 1]);
    }

    /* The v forms: rank r has r + 1 ints, placed with gaps of 2. */
    int counts[64], displs[64], at = 0;
    for (int r = 0; r < size; r++) {
      counts[r] = r + 1;
      displs[r] = at;
      at += r + 1 + 2;
    }
    int vin[64], vout[64];
    for (int i = 0; i <= rank; i++)
      vin[i] = rank * 1000 + i;
    for (int i = 0; i < at; i++)
      all[i] = -1;
    OK(MPI_Gatherv(vin, rank + 1, MPI_INT, all, counts, displs, MPI_INT, root, MPI_COMM_WORLD));
    if (rank == root)
      for (int r = 0; r < size; r++) {
        for (int i = 0; i <= r; i++)
          CHECK(all[displs[r] + i] == r * 1000 + i, "MPI_Gatherv to %d: rank %d's element %d is %d",
                root, r, i, all[displs[r] + i]);
        CHECK(all[displs[r] + r + 1] == -1, "MPI_Gatherv wrote into a gap");
      }
    for (int i = 0; i < 64; i++)
      vout[i] = -1;
    OK(MPI_Scatterv(all, counts, displs, MPI_INT, vout, rank + 1, MPI_INT, root, MPI_COMM_WORLD));
    for (int i = 0; i <= rank; i++)
      CHECK(vout[i] == rank * 1000 + i, "MPI_Scatterv from %d: element %d is %d", root, i,
            vout[i]);
    CHECK(vout[rank + 1] == -1, "MPI_Scatterv wrote past the count");
  }
  free(all);

  /* Gather into a type with gaps: each int lands two ints apart. */
  MPI_Datatype spaced;
  OK(MPI_Type_create_resized(MPI_INT, 0, 2 * sizeof(int), &spaced));
  OK(MPI_Type_commit(&spaced));
  int g[128];
  for (int i = 0; i < 2 * size; i++)
    g[i] = -1;
  OK(MPI_Gather(&rank, 1, MPI_INT, g, 1, spaced, 0, MPI_COMM_WORLD));
  if (rank == 0)
    for (int i = 0; i < 2 * size; i++)
      CHECK(g[i] == (i % 2 ? -1 : i / 2), "MPI_Gather into a resized type: element %d is %d",
            i, g[i]);
  OK(MPI_Type_free(&spaced));
}

static void test_allgather(void) {
  enum { C = 4 };
  int mine[C], *all = malloc(sizeof(int) * C * size);
  for (int i = 0; i < C; i++)
    mine[i] = rank * 10 + i;
  OK(MPI_Allgather(mine, C, MPI_INT, all, C, MPI_INT, MPI_COMM_WORLD));
  for (int i = 0; i < C * size; i++)
    CHECK(all[i] == (i / C) * 10 + i % C, "MPI_Allgather: element %d is %d", i, all[i]);
  for (int i = 0; i < C * size; i++)
    all[i] = i / C == rank ? rank * 10 + i % C : -1;
  OK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, all, C, MPI_INT, MPI_COMM_WORLD));
  for (int i = 0; i < C * size; i++)
    CHECK(all[i] == (i / C) * 10 + i % C, "MPI_Allgather in place: element %d is %d", i, all[i]);
  free(all);

  /* Over 64 KiB in all. */
  enum { B = 20000 };
  unsigned char *mb = malloc(B), *ab = malloc((size_t)B * size);
  for (int i = 0; i < B; i++)
    mb[i] = (unsigned char)(rank * 31 + i);
  OK(MPI_Allgather(mb, B, MPI_BYTE, ab, B, MPI_BYTE, MPI_COMM_WORLD));
  for (int i = 0; i < B * size; i++)
    CHECK(ab[i] == (unsigned char)((i / B) * 31 + i % B), "a large MPI_Allgather: byte %d", i);
  free(mb);
  free(ab);

  /* v: rank r has 2r + 1 ints, in reverse order of ranks, with gaps. */
  int counts[64], displs[64], at = 0, vin[64], vout[512];
  for (int r = size - 1; r >= 0; r--) {
    counts[r] = 2 * r + 1;
    displs[r] = at;
    at += 2 * r + 1 + 1;
  }
  for (int i = 0; i < 2 * rank + 1; i++)
    vin[i] = rank * 100 + i;
  for (int i = 0; i < at; i++)
    vout[i] = -1;
  OK(MPI_Allgatherv(vin, 2 * rank + 1, MPI_INT, vout, counts, displs, MPI_INT, MPI_COMM_WORLD));
  for (int r = 0; r < size; r++) {
    for (int i = 0; i < counts[r]; i++)
      CHECK(vout[displs[r] + i] == r * 100 + i, "MPI_Allgatherv: rank %d's element %d is %d", r,
            i, vout[displs[r] + i]);
    CHECK(vout[displs[r] + counts[r]] == -1, "MPI_Allgatherv wrote into a gap");
  }
  for (int i = 0; i < at; i++)
    vout[i] = -1;
  for (int i = 0; i < counts[rank]; i++)
    vout[displs[rank] + i] = rank * 100 + i;
  OK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, vout, counts, displs, MPI_INT,
                    MPI_COMM_WORLD));
  for (int r = 0; r < size; r++)
    for (int i = 0; i < counts[r]; i++)
      CHECK(vout[displs[r] + i] == r * 100 + i, "MPI_Allgatherv in place: rank %d's element %d",
            r, i);

  /* Received into a vector type: every other int. */
  MPI_Datatype two_spaced;
  OK(MPI_Type_vector(2, 1, 2, MPI_INT, &two_spaced));
  MPI_Datatype block;
  OK(MPI_Type_create_resized(two_spaced, 0, 4 * sizeof(int), &block));
  OK(MPI_Type_commit(&block));
  int pair[2] = {rank, -rank}, wide[256];
  for (int i = 0; i < 4 * size; i++)
    wide[i] = 77;
  OK(MPI_Allgather(pair, 2, MPI_INT, wide, 1, block, MPI_COMM_WORLD));
  for (int r = 0; r < size; r++)
    CHECK(wide[4 * r] == r && wide[4 * r + 2] == -r && wide[4 * r + 1] == 77 &&
              wide[4 * r + 3] == 77,
          "MPI_Allgather into a vector type: rank %d's block is %d %d %d %d", r, wide[4 * r],
          wide[4 * r + 1], wide[4 * r + 2], wide[4 * r + 3]);
  OK(MPI_Type_free(&block));
  OK(MPI_Type_free(&two_spaced));

  /* Equal blocks that lie in rank order on even ranks and in reverse on odd ones:
   * every rank must take the same algorithm all the same. */
  enum { E = 3 };
  int eq_counts[64], eq_displs[64], eq_in[E], eq_out[64 * E];
  for (int r = 0; r < size; r++) {
    eq_counts[r] = E;
    eq_displs[r] = E * (rank % 2 ? size - 1 - r : r);
  }
  for (int i = 0; i < E; i++)
    eq_in[i] = rank * 10 + i;
  OK(MPI_Allgatherv(eq_in, E, MPI_INT, eq_out, eq_counts, eq_displs, MPI_INT, MPI_COMM_WORLD));
  for (int r = 0; r < size; r++)
    for (int i = 0; i < E; i++)
      CHECK(eq_out[eq_displs[r] + i] == r * 10 + i,
            "MPI_Allgatherv, blocks in another order here than on other ranks: rank %d's "
            "element %d is %d",
            r, i, eq_out[eq_displs[r] + i]);
}

static void test_alltoall(void) {
  enum { C = 2 };
  int *s = malloc(sizeof(int) * C * size), *r = malloc(sizeof(int) * C * size);
  for (int j = 0; j < size; j++)
    for (int k = 0; k < C; k++)
      s[j * C + k] = rank * 100 + j * 10 + k;
  OK(MPI_Alltoall(s, C, MPI_INT, r, C, MPI_INT, MPI_COMM_WORLD));
  for (int i = 0; i < size; i++)
    for (int k = 0; k < C; k++)
      CHECK(r[i * C + k] == i * 100 + rank * 10 + k, "MPI_Alltoall: from %d element %d is %d", i,
            k, r[i * C + k]);
  OK(MPI_Alltoall(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, s, C, MPI_INT, MPI_COMM_WORLD));
  for (int i = 0; i < size; i++)
    for (int k = 0; k < C; k++)
      CHECK(s[i * C + k] == i * 100 + rank * 10 + k, "MPI_Alltoall in place: from %d element %d",
            i, k);
  free(s);
  free(r);

  /* Large: 40000 bytes to each. */
  enum { B = 40000 };
  unsigned char *bs = malloc((size_t)B * size), *br = malloc((size_t)B * size);
  for (int j = 0; j < size; j++)
    for (int k = 0; k < B; k++)
      bs[(size_t)j * B + k] = (unsigned char)(rank * 17 + j * 5 + k);
  OK(MPI_Alltoall(bs, B, MPI_BYTE, br, B, MPI_BYTE, MPI_COMM_WORLD));
  for (int i = 0; i < size; i++)
    for (int k = 0; k < B; k++)
      CHECK(br[(size_t)i * B + k] == (unsigned char)(i * 17 + rank * 5 + k),
            "a large MPI_Alltoall: from %d byte %d", i, k);
  free(bs);
  free(br);

  /* v: j + 1 ints to rank j, with gaps on both sides. */
  int sc[64], sd[64], rc[64], rd[64], sat = 0, rat = 0;
  for (int j = 0; j < size; j++) {
    sc[j] = j + 1;
    sd[j] = sat;
    sat += j + 2;
    rc[j] = rank + 1;
    rd[j] = rat;
    rat += rank + 3;
  }
  int *vs = malloc(sizeof(int) * (sat + 1)), *vr = malloc(sizeof(int) * (rat + 1));
  for (int j = 0; j < size; j++)
    for (int k = 0; k <= j; k++)
      vs[sd[j] + k] = rank * 1000 + j * 10 + k;
  for (int i = 0; i < rat; i++)
    vr[i] = -1;
  OK(MPI_Alltoallv(vs, sc, sd, MPI_INT, vr, rc, rd, MPI_INT, MPI_COMM_WORLD));
  for (int i = 0; i < size; i++) {
    for (int k = 0; k <= rank; k++)
      CHECK(vr[rd[i] + k] == i * 1000 + rank * 10 + k, "MPI_Alltoallv: from %d element %d is %d",
            i, k, vr[rd[i] + k]);
    CHECK(vr[rd[i] + rank + 1] == -1, "MPI_Alltoallv wrote into a gap");
  }
  free(vs);
  free(vr);
  /* In place: the receive side's layout serves both (so the counts between two
   * ranks are the same each way). */
  int ic[64], id[64], iat = 0, ip[512];
  for (int j = 0; j < size; j++) {
    ic[j] = (rank + j) % 3 + 1;
    id[j] = iat;
    iat += ic[j] + 1;
  }
  for (int i = 0; i < size; i++)
    for (int k = 0; k < ic[i]; k++)
      ip[id[i] + k] = rank * 1000 + i * 10 + k;
  OK(MPI_Alltoallv(MPI_IN_PLACE, NULL, NULL, MPI_DATATYPE_NULL, ip, ic, id, MPI_INT,
                   MPI_COMM_WORLD));
  for (int i = 0; i < size; i++)
    for (int k = 0; k < ic[i]; k++)
      CHECK(ip[id[i] + k] == i * 1000 + rank * 10 + k,
            "MPI_Alltoallv in place: from %d element %d is %d", i, k, ip[id[i] + k]);

  /* w: to rank j, j + 1 ints; from rank i, as MPI_INT (i even) or as one
   * contiguous type of rank + 1 ints (i odd), displacements in bytes. */
  MPI_Datatype mine_as_one;
  OK(MPI_Type_contiguous(rank + 1, MPI_INT, &mine_as_one));
  OK(MPI_Type_commit(&mine_as_one));
  MPI_Datatype st[64], rt[64];
  int wsc[64], wsd[64], wrc[64], wrd[64], ws[512], wr[512];
  sat = rat = 0;
  for (int j = 0; j < size; j++) {
    st[j] = MPI_INT;
    wsc[j] = j + 1;
    wsd[j] = sat * (int)sizeof(int);
    for (int k = 0; k <= j; k++)
      ws[sat + k] = rank * 1000 + j * 10 + k;
    sat += j + 1;
    rt[j] = j % 2 ? mine_as_one : MPI_INT;
    wrc[j] = j % 2 ? 1 : rank + 1;
    wrd[j] = rat * (int)sizeof(int);
    rat += rank + 2;
  }
  for (int i = 0; i < rat; i++)
    wr[i] = -1;
  OK(MPI_Alltoallw(ws, wsc, wsd, st, wr, wrc, wrd, rt, MPI_COMM_WORLD));
  for (int i = 0; i < size; i++) {
    int at = wrd[i] / (int)sizeof(int);
    for (int k = 0; k <= rank; k++)
      CHECK(wr[at + k] == i * 1000 + rank * 10 + k, "MPI_Alltoallw: from %d element %d is %d", i,
            k, wr[at + k]);
    CHECK(wr[at + rank + 1] == -1, "MPI_Alltoallw wrote into a gap");
  }
  OK(MPI_Type_free(&mine_as_one));

  /* Sent contiguous, received into a vector type. */
  MPI_Datatype spaced;
  OK(MPI_Type_create_resized(MPI_INT, 0, 3 * sizeof(int), &spaced));
  OK(MPI_Type_commit(&spaced));
  int cs[64], cr[192];
  for (int j = 0; j < size; j++)
    cs[j] = rank * 10 + j;
  for (int i = 0; i < 3 * size; i++)
    cr[i] = -1;
  OK(MPI_Alltoall(cs, 1, MPI_INT, cr, 1, spaced, MPI_COMM_WORLD));
  for (int i = 0; i < 3 * size; i++)
    CHECK(cr[i] == (i % 3 ? -1 : (i / 3) * 10 + rank),
          "MPI_Alltoall into a resized type: element %d is %d", i, cr[i]);
  OK(MPI_Type_free(&spaced));
}

static void test_reduce_scatter_scan(void) {
  /* Reduce_scatter_block: 2 ints each. */
  int *in = malloc(sizeof(int) * 2 * size * 2), out[64];
  for (int i = 0; i < 2 * size; i++)
    in[i] = ival(rank, i);
  OK(MPI_Reduce_scatter_block(in, out, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
  for (int k = 0; k < 2; k++) {
    int want = 0;
    for (int r = 0; r < size; r++)
      want += ival(r, 2 * rank + k);
    CHECK(out[k] == want, "MPI_Reduce_scatter_block: element %d is %d, expected %d", k, out[k],
          want);
  }
  OK(MPI_Reduce_scatter_block(MPI_IN_PLACE, in, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
  for (int k = 0; k < 2; k++) {
    int want = ival(0, 2 * rank + k);
    for (int r = 1; r < size; r++)
      want = ival(r, 2 * rank + k) > want ? ival(r, 2 * rank + k) : want;
    CHECK(in[k] == want, "MPI_Reduce_scatter_block in place: element %d is %d, expected %d", k,
          in[k], want);
  }
  /* Reduce_scatter: rank r gets r + 1 elements. */
  int counts[64], total = 0, off = 0;
  for (int r = 0; r < size; r++) {
    counts[r] = r + 1;
    total += r + 1;
  }
  for (int r = 0; r < rank; r++)
    off += r + 1;
  free(in);
  in = malloc(sizeof(int) * total);
  for (int i = 0; i < total; i++)
    in[i] = bval(rank, i);
  OK(MPI_Reduce_scatter(in, out, counts, MPI_INT, MPI_BOR, MPI_COMM_WORLD));
  for (int k = 0; k <= rank; k++) {
    int want = 0;
    for (int r = 0; r < size; r++)
      want |= bval(r, off + k);
    CHECK(out[k] == want, "MPI_Reduce_scatter: element %d is %d, expected %d", k, out[k], want);
  }
  OK(MPI_Reduce_scatter(MPI_IN_PLACE, in, counts, MPI_INT, MPI_BOR, MPI_COMM_WORLD));
  for (int k = 0; k <= rank; k++) {
    int want = 0;
    for (int r = 0; r < size; r++)
      want |= bval(r, off + k);
    CHECK(in[k] == want, "MPI_Reduce_scatter in place: element %d is %d", k, in[k]);
  }
  free(in);
  /* Scan and Exscan with MPI_SUM. */
  int x[3], y[3];
  for (int i = 0; i < 3; i++) {
    x[i] = ival(rank, i);
    y[i] = -99;
  }
  OK(MPI_Scan(x, y, 3, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
  for (int i = 0; i < 3; i++) {
    int want = 0;
    for (int r = 0; r <= rank; r++)
      want += ival(r, i);
    CHECK(y[i] == want, "MPI_Scan: element %d is %d, expected %d", i, y[i], want);
  }
  OK(MPI_Scan(MPI_IN_PLACE, x, 3, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
  CHECK(x[2] == y[2], "MPI_Scan in place: %d, expected %d", x[2], y[2]);
  for (int i = 0; i < 3; i++) {
    x[i] = ival(rank, i);
    y[i] = -99;
  }
  OK(MPI_Exscan(x, y, 3, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
  if (rank > 0)
    for (int i = 0; i < 3; i++) {
      int want = 0;
      for (int r = 0; r < rank; r++)
        want += ival(r, i);
      CHECK(y[i] == want, "MPI_Exscan: element %d is %d, expected %d", i, y[i], want);
    }
  OK(MPI_Exscan(MPI_IN_PLACE, x, 3, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
  if (rank > 0)
    CHECK(x[1] == y[1], "MPI_Exscan in place: %d, expected %d", x[1], y[1]);
}

/* --- Zero counts, MPI_COMM_SELF, in-place v forms, odd types in place --- */

static void test_corners(void) {
  int x = 5, y = 6, *all = malloc(sizeof(int) * 4 * size), zeros[64], displs[64];
  for (int r = 0; r < size; r++) {
    zeros[r] = 0;
    displs[r] = 0;
  }
  OK(MPI_Bcast(&x, 0, MPI_INT, 0, MPI_COMM_WORLD));
  OK(MPI_Allreduce(&x, &y, 0, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
  OK(MPI_Reduce(&x, &y, 0, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD));
  OK(MPI_Gather(&x, 0, MPI_INT, all, 0, MPI_INT, 0, MPI_COMM_WORLD));
  OK(MPI_Allgather(&x, 0, MPI_INT, all, 0, MPI_INT, MPI_COMM_WORLD));
  OK(MPI_Alltoall(&x, 0, MPI_INT, all, 0, MPI_INT, MPI_COMM_WORLD));
  OK(MPI_Alltoallv(&x, zeros, displs, MPI_INT, all, zeros, displs, MPI_INT, MPI_COMM_WORLD));
  OK(MPI_Scan(&x, &y, 0, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
  OK(MPI_Reduce_scatter_block(&x, &y, 0, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
  CHECK(x == 5 && y == 6, "a collective of no elements changed a buffer: %d %d", x, y);

  /* MPI_COMM_SELF. */
  OK(MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_SUM, MPI_COMM_SELF));
  CHECK(y == 5, "MPI_Allreduce on MPI_COMM_SELF: %d", y);
  OK(MPI_Bcast(&x, 1, MPI_INT, 0, MPI_COMM_SELF));
  OK(MPI_Gather(&x, 1, MPI_INT, all, 1, MPI_INT, 0, MPI_COMM_SELF));
  CHECK(all[0] == 5, "MPI_Gather on MPI_COMM_SELF: %d", all[0]);
  OK(MPI_Barrier(MPI_COMM_SELF));

  /* Gatherv and Scatterv in place at the root. */
  int counts[64], at = 0;
  for (int r = 0; r < size; r++) {
    counts[r] = r % 2 + 1;
    displs[r] = at;
    at += counts[r];
  }
  int root = size - 1, mine[2] = {rank * 10, rank * 10 + 1};
  if (rank == root) {
    for (int i = 0; i < at; i++)
      all[i] = -1;
    for (int k = 0; k < counts[root]; k++)
      all[displs[root] + k] = root * 10 + k;
    OK(MPI_Gatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, all, counts, displs, MPI_INT, root,
                   MPI_COMM_WORLD));
    for (int r = 0; r < size; r++)
      for (int k = 0; k < counts[r]; k++)
        CHECK(all[displs[r] + k] == r * 10 + k, "MPI_Gatherv in place: rank %d's element %d is %d",
              r, k, all[displs[r] + k]);
    for (int i = 0; i < at; i++)
      all[i] += 1000;
    OK(MPI_Scatterv(all, counts, displs, MPI_INT, MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, root,
                    MPI_COMM_WORLD));
    CHECK(all[displs[root]] == 1000 + root * 10, "MPI_Scatterv in place changed the root's block");
  } else {
    OK(MPI_Gatherv(mine, counts[rank], MPI_INT, NULL, NULL, NULL, MPI_DATATYPE_NULL, root,
                   MPI_COMM_WORLD));
    int got[2] = {-1, -1};
    OK(MPI_Scatterv(NULL, NULL, NULL, MPI_DATATYPE_NULL, got, counts[rank], MPI_INT, root,
                    MPI_COMM_WORLD));
    for (int k = 0; k < counts[rank]; k++)
      CHECK(got[k] == 1000 + rank * 10 + k, "MPI_Scatterv with the root in place: element %d is %d",
            k, got[k]);
  }
  free(all);

  /* In place, and a scan, with a type that is not contiguous: 3 ints out of 6. */
  MPI_Datatype alt;
  OK(MPI_Type_vector(3, 1, 2, MPI_INT, &alt));
  OK(MPI_Type_commit(&alt));
  int v[6], w[6];
  for (int i = 0; i < 6; i++)
    v[i] = i % 2 ? -4 : rank + i;
  OK(MPI_Allreduce(MPI_IN_PLACE, v, 1, alt, MPI_SUM, MPI_COMM_WORLD));
  for (int i = 0; i < 6; i++) {
    int want = i % 2 ? -4 : size * (size - 1) / 2 + size * i;
    CHECK(v[i] == want, "MPI_Allreduce in place on a vector type: element %d is %d, expected %d",
          i, v[i], want);
  }
  for (int i = 0; i < 6; i++) {
    v[i] = i % 2 ? -4 : rank + i;
    w[i] = -9;
  }
  OK(MPI_Scan(v, w, 1, alt, MPI_SUM, MPI_COMM_WORLD));
  for (int i = 0; i < 6; i++) {
    int want = i % 2 ? -9 : rank * (rank + 1) / 2 + (rank + 1) * i;
    CHECK(w[i] == want, "MPI_Scan on a vector type: element %d is %d, expected %d", i, w[i], want);
  }
  OK(MPI_Type_free(&alt));

  /* A communicator freed while its collective is under way: it completes. */
  MPI_Comm dup;
  MPI_Request r;
  int in = rank, sum = -1;
  OK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
  OK(MPI_Iallreduce(&in, &sum, 1, MPI_INT, MPI_SUM, dup, &r));
  OK(MPI_Comm_free(&dup));
  OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
  CHECK(sum == size * (size - 1) / 2, "a collective on a freed communicator: %d", sum);

  /* An MPI_Allreduce while rank 0 alone has a nonblocking collective in flight (it
     takes another way than the others there: they still meet), of doubles, the
     ranks' results equal to the last bit. */
  OK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
  if (rank == 0)
    OK(MPI_Ibarrier(dup, &r));
  double d[3] = {0.1 * rank, 1.0 / (rank + 3), -1e-9 * rank}, ds[3], d0[3];
  OK(MPI_Allreduce(d, ds, 3, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
  for (int i = 0; i < 3; i++) {
    double want = 0;
    for (int q = 0; q < size; q++)
      want += i == 0 ? 0.1 * q : i == 1 ? 1.0 / (q + 3) : -1e-9 * q;
    CHECK(ds[i] > want - 1e-12 && ds[i] < want + 1e-12, "MPI_Allreduce beside an Ibarrier: %g, expected %g", ds[i], want);
  }
  memcpy(d0, ds, sizeof ds);
  OK(MPI_Bcast(d0, 3, MPI_DOUBLE, 0, MPI_COMM_WORLD));
  CHECK(memcmp(d0, ds, sizeof ds) == 0, "MPI_Allreduce gave rank %d other bits than rank 0", rank);
  if (rank != 0)
    OK(MPI_Ibarrier(dup, &r));
  OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
  OK(MPI_Comm_free(&dup));

  /* An MPI_Bcast from the last rank while rank 1 alone has a nonblocking collective
     in flight: from 4 ranks a member inside the tree takes the other way. */
  OK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
  if (rank == 1)
    OK(MPI_Ibarrier(dup, &r));
  int b[4];
  for (int i = 0; i < 4; i++)
    b[i] = rank == size - 1 ? 500 + i : -1;
  OK(MPI_Bcast(b, 4, MPI_INT, size - 1, MPI_COMM_WORLD));
  for (int i = 0; i < 4; i++)
    CHECK(b[i] == 500 + i, "MPI_Bcast beside an Ibarrier on rank 1: element %d is %d", i, b[i]);
  if (rank != 1)
    OK(MPI_Ibarrier(dup, &r));
  OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
  OK(MPI_Comm_free(&dup));

  /* An all-to-all, an all-gather, a gather, a scatter, a reduce and a
     reduce-scatter while rank 0 alone has a nonblocking collective in flight: it
     runs their schedules, the others not. */
  OK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
  if (rank == 0)
    OK(MPI_Ibarrier(dup, &r));
  int sa[64], ra[64], ag[64], g[64], one[2] = {rank, -rank}, sc[2] = {-1, -1};
  int last = size - 1;
  if (size > 32)
    MPI_Abort(MPI_COMM_WORLD, 2); /* (the arrays hold two ints for each of 32 ranks) */
  for (int i = 0; i < 2 * size; i++)
    sa[i] = 100 * rank + i, ra[i] = ag[i] = g[i] = -1;
  OK(MPI_Alltoall(sa, 2, MPI_INT, ra, 2, MPI_INT, MPI_COMM_WORLD));
  OK(MPI_Allgather(one, 2, MPI_INT, ag, 2, MPI_INT, MPI_COMM_WORLD));
  OK(MPI_Gather(one, 2, MPI_INT, g, 2, MPI_INT, last, MPI_COMM_WORLD));
  OK(MPI_Scatter(sa, 2, MPI_INT, sc, 2, MPI_INT, last, MPI_COMM_WORLD));
  int rd[2] = {-1, -1}, tri = size * (size - 1) / 2;
  OK(MPI_Reduce(one, rd, 2, MPI_INT, MPI_SUM, last, MPI_COMM_WORLD));
  CHECK(rank != last || (rd[0] == tri && rd[1] == -tri),
        "MPI_Reduce beside an Ibarrier on rank 0: %d %d", rd[0], rd[1]);
  int rs[2] = {-1, -1};
  OK(MPI_Reduce_scatter_block(sa, rs, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
  for (int j = 0; j < 2; j++)
    CHECK(rs[j] == 100 * tri + size * (2 * rank + j),
          "MPI_Reduce_scatter_block beside an Ibarrier on rank 0: element %d is %d", j, rs[j]);
  for (int q = 0; q < size; q++) {
    CHECK(ra[2 * q] == 100 * q + 2 * rank && ra[2 * q + 1] == 100 * q + 2 * rank + 1,
          "MPI_Alltoall beside an Ibarrier on rank 0: from %d %d %d", q, ra[2 * q],
          ra[2 * q + 1]);
    CHECK(ag[2 * q] == q && ag[2 * q + 1] == -q,
          "MPI_Allgather beside an Ibarrier on rank 0: from %d %d %d", q, ag[2 * q],
          ag[2 * q + 1]);
    CHECK(rank != last || (g[2 * q] == q && g[2 * q + 1] == -q),
          "MPI_Gather beside an Ibarrier on rank 0: from %d %d %d", q, g[2 * q], g[2 * q + 1]);
  }
  CHECK(sc[0] == 100 * last + 2 * rank && sc[1] == 100 * last + 2 * rank + 1,
        "MPI_Scatter beside an Ibarrier on rank 0: %d %d", sc[0], sc[1]);
  if (rank != 0)
    OK(MPI_Ibarrier(dup, &r));
  OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
  OK(MPI_Comm_free(&dup));
}

/* --- Members whose counts differ (an erroneous program), where the collectives
 * run without a schedule (errors.c runs under MPI_THREAD_MULTIPLE, where they run
 * by theirs): rank 0 gives other counts; every member whose messages or own block
 * disagree fails with MPI_ERR_TRUNCATE after doing its part, and the next
 * collectives meet. --- */

static void test_mismatched_counts(void) {
  if (size < 2)
    return;
  int *v = calloc(4 * (size_t)size, sizeof(int)), *w = calloc(4 * (size_t)size, sizeof(int));
  for (int i = 0; i < 4 * size; i++)
    v[i] = i;
  errors_return(MPI_COMM_WORLD, 1);
  int k = rank == 0 ? 1 : 4;
  EXPECT_ERR(MPI_Alltoall(v, k, MPI_INT, w, k, MPI_INT, MPI_COMM_WORLD), MPI_ERR_TRUNCATE,
             NULL);
  EXPECT_ERR(MPI_Allgather(v, k, MPI_INT, w, k, MPI_INT, MPI_COMM_WORLD), MPI_ERR_TRUNCATE,
             NULL);
  /* Root 0 expects 4 from each member, which send 1: only it learns. */
  int rc = MPI_Gather(v, 5 - k, MPI_INT, w, 4, MPI_INT, 0, MPI_COMM_WORLD);
  if (rank == 0)
    EXPECT_ERR(rc, MPI_ERR_TRUNCATE, NULL);
  else
    OK(rc);
  /* Root 0 sends 4 to each member, which expect 1: each of them learns. */
  rc = MPI_Scatter(v, 4, MPI_INT, w, 5 - k, MPI_INT, 0, MPI_COMM_WORLD);
  if (rank == 0)
    OK(rc);
  else
    EXPECT_ERR(rc, MPI_ERR_TRUNCATE, NULL);
  /* Only the root receives rank 0's count against its children's. */
  rc = MPI_Reduce(v, w, 5 - k, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank == 0)
    EXPECT_ERR(rc, MPI_ERR_TRUNCATE, NULL);
  else
    OK(rc);
  /* Every member exchanges a block with rank 0. */
  EXPECT_ERR(MPI_Reduce_scatter_block(v, w, k, MPI_INT, MPI_SUM, MPI_COMM_WORLD),
             MPI_ERR_TRUNCATE, NULL);
  errors_return(MPI_COMM_WORLD, 0);
  int one = 1, n = 0;
  OK(MPI_Allreduce(&one, &n, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
  CHECK(n == size, "MPI_Allreduce after mismatched counts: %d", n);
  free(v);
  free(w);
}

/* --- Sub-communicators --- */

static void test_subcomms(void) {
  MPI_Comm parity, reversed;
  OK(MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &parity));
  OK(MPI_Comm_split(MPI_COMM_WORLD, 0, size - rank, &reversed));
  int n, me;
  OK(MPI_Comm_size(parity, &n));
  OK(MPI_Comm_rank(parity, &me));
  /* The members of parity p, in order: p, p + 2, ... */
  int sum = -1, want = 0;
  for (int r = rank % 2; r < size; r += 2)
    want += r;
  OK(MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, parity));
  CHECK(sum == want, "MPI_Allreduce on a split: %d, expected %d", sum, want);
  int root_world = rank % 2 + 2 * (n - 1), v = rank;
  OK(MPI_Bcast(&v, 1, MPI_INT, n - 1, parity));
  CHECK(v == root_world, "MPI_Bcast on a split from its last rank: %d, expected %d", v,
        root_world);
  int *g = malloc(sizeof(int) * n);
  OK(MPI_Allgather(&rank, 1, MPI_INT, g, 1, MPI_INT, parity));
  for (int i = 0; i < n; i++)
    CHECK(g[i] == rank % 2 + 2 * i, "MPI_Allgather on a split: member %d is %d", i, g[i]);
  free(g);
  /* The world reversed: rank i here is world rank size - 1 - i. */
  OK(MPI_Comm_rank(reversed, &me));
  CHECK(me == size - 1 - rank, "the reversed world: rank %d", me);
  mat in = mat_of(rank, 0), out;
  OK(MPI_Allreduce(&in, &out, 1, t_mat, op_mat, reversed));
  mat p = {1, 0, 0, 1};
  for (int r = size - 1; r >= 0; r--)
    p = mat_mul(p, mat_of(r, 0));
  CHECK(mat_eq(out, p), "a non-commutative MPI_Allreduce on the reversed world is not in its "
                        "rank order");
  int *all = malloc(sizeof(int) * size);
  OK(MPI_Gather(&rank, 1, MPI_INT, all, 1, MPI_INT, 0, reversed));
  if (me == 0)
    for (int i = 0; i < size; i++)
      CHECK(all[i] == size - 1 - i, "MPI_Gather on the reversed world: member %d is %d", i,
            all[i]);
  free(all);
  OK(MPI_Comm_free(&parity));
  OK(MPI_Comm_free(&reversed));
}

/* --- Nonblocking --- */

/* A nonblocking broadcast advances while ranks sit in blocking calls: every rank
 * but the last waits in MPI_Recv for the one after it (active request), then in
 * MPI_Barrier with its request freed, while only the last waits for the broadcast;
 * whichever ranks pass it on must do so from inside those calls. */
static void test_progress_in_blocking_calls(void) {
  static int data[64];
  for (int round = 0; round < 2; round++) {
    int freed = round == 1;
    for (int i = 0; i < 64; i++)
      data[i] = rank == 0 ? 7000 + i + round : -1;
    MPI_Request req;
    OK(MPI_Ibcast(data, 64, MPI_INT, 0, MPI_COMM_WORLD, &req));
    if (freed && rank != size - 1)
      OK(MPI_Request_free(&req));
    int token = 0;
    if (rank == size - 1) {
      OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
      for (int i = 0; i < 64; i++)
        CHECK(data[i] == 7000 + i + round, "Ibcast (%s) to the last rank: element %d is %d",
              freed ? "freed" : "active", i, data[i]);
    }
    if (!freed) {
      if (rank + 1 < size)
        OK(MPI_Recv(&token, 1, MPI_INT, rank + 1, 77, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
      if (rank > 0)
        OK(MPI_Send(&token, 1, MPI_INT, rank - 1, 77, MPI_COMM_WORLD));
      if (rank != size - 1)
        OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    }
    /* Freed: the barrier's waits drive the broadcast, which ends before it. */
    OK(MPI_Barrier(MPI_COMM_WORLD));
  }
}

static void test_nonblocking(void) {
  enum { NREQ = 16 };
  MPI_Request req[NREQ];
  int nreq = 0;
  int bc[4], ar_in[3], ar_out[3], rd_out[3], g_out[256], sc_in[256], sc_out[2], ag_out[256];
  int a2a_in[256], a2a_out[256], scan_out[2], exscan_out[2], rsb_in[256], rsb_out[1];
  int agv_out[256], agv_counts[64], agv_displs[64];
  int one = rank + 1;
  for (int i = 0; i < 4; i++)
    bc[i] = rank == size - 1 ? 40 + i : -1;
  for (int i = 0; i < 3; i++)
    ar_in[i] = ival(rank, i);
  for (int i = 0; i < 2 * size; i++) {
    sc_in[i] = 500 + i;
    a2a_in[i] = rank * 100 + i;
    rsb_in[i] = ival(rank, i);
  }
  for (int r = 0, at = 0; r < size; r++) {
    agv_counts[r] = r % 2 + 1;
    agv_displs[r] = at;
    at += r % 2 + 1;
  }
  int agv_in[2] = {rank * 10, rank * 10 + 1};
  OK(MPI_Ibarrier(MPI_COMM_WORLD, &req[nreq++]));
  OK(MPI_Ibcast(bc, 4, MPI_INT, size - 1, MPI_COMM_WORLD, &req[nreq++]));
  OK(MPI_Iallreduce(ar_in, ar_out, 3, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &req[nreq++]));
  OK(MPI_Ireduce(ar_in, rd_out, 3, MPI_INT, MPI_MAX, 0, MPI_COMM_WORLD, &req[nreq++]));
  OK(MPI_Igather(&one, 1, MPI_INT, g_out, 1, MPI_INT, size - 1, MPI_COMM_WORLD, &req[nreq++]));
  OK(MPI_Iscatter(sc_in, 2, MPI_INT, sc_out, 2, MPI_INT, 0, MPI_COMM_WORLD, &req[nreq++]));
  OK(MPI_Iallgather(&one, 1, MPI_INT, ag_out, 1, MPI_INT, MPI_COMM_WORLD, &req[nreq++]));
  OK(MPI_Ialltoall(a2a_in, 2, MPI_INT, a2a_out, 2, MPI_INT, MPI_COMM_WORLD, &req[nreq++]));
  OK(MPI_Iscan(&one, scan_out, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &req[nreq++]));
  OK(MPI_Iexscan(&one, exscan_out, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &req[nreq++]));
  OK(MPI_Ireduce_scatter_block(rsb_in, rsb_out, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD,
                               &req[nreq++]));
  int rs_counts[64], rs_out[2];
  for (int r = 0; r < size; r++)
    rs_counts[r] = r % 2 + 1;
  OK(MPI_Ireduce_scatter(rsb_in, rs_out, rs_counts, MPI_INT, MPI_MAX, MPI_COMM_WORLD,
                         &req[nreq++]));
  OK(MPI_Iallgatherv(agv_in, rank % 2 + 1, MPI_INT, agv_out, agv_counts, agv_displs, MPI_INT,
                     MPI_COMM_WORLD, &req[nreq++]));
  /* Complete them in reverse order, one by one. */
  for (int k = nreq - 1; k >= 0; k--) {
    OK(MPI_Wait(&req[k], MPI_STATUS_IGNORE));
    CHECK(req[k] == MPI_REQUEST_NULL, "MPI_Wait left a collective's request");
  }
  for (int i = 0; i < 4; i++)
    CHECK(bc[i] == 40 + i, "MPI_Ibcast: element %d is %d", i, bc[i]);
  for (int i = 0; i < 3; i++) {
    int s = 0, m = ival(0, i);
    for (int r = 0; r < size; r++) {
      s += ival(r, i);
      m = ival(r, i) > m ? ival(r, i) : m;
    }
    CHECK(ar_out[i] == s, "MPI_Iallreduce: element %d is %d, expected %d", i, ar_out[i], s);
    if (rank == 0)
      CHECK(rd_out[i] == m, "MPI_Ireduce: element %d is %d, expected %d", i, rd_out[i], m);
  }
  for (int r = 0; r < size; r++) {
    if (rank == size - 1)
      CHECK(g_out[r] == r + 1, "MPI_Igather: member %d is %d", r, g_out[r]);
    CHECK(ag_out[r] == r + 1, "MPI_Iallgather: member %d is %d", r, ag_out[r]);
    for (int k = 0; k < 2; k++)
      CHECK(a2a_out[2 * r + k] == r * 100 + 2 * rank + k, "MPI_Ialltoall: from %d element %d", r,
            k);
    for (int k = 0; k < agv_counts[r]; k++)
      CHECK(agv_out[agv_displs[r] + k] == r * 10 + k, "MPI_Iallgatherv: rank %d's element %d",
            r, k);
  }
  CHECK(sc_out[0] == 500 + 2 * rank && sc_out[1] == 501 + 2 * rank, "MPI_Iscatter: %d %d",
        sc_out[0], sc_out[1]);
  CHECK(scan_out[0] == (rank + 1) * (rank + 2) / 2, "MPI_Iscan: %d", scan_out[0]);
  if (rank > 0)
    CHECK(exscan_out[0] == rank * (rank + 1) / 2, "MPI_Iexscan: %d", exscan_out[0]);
  {
    int want = 0;
    for (int r = 0; r < size; r++)
      want += ival(r, rank);
    CHECK(rsb_out[0] == want, "MPI_Ireduce_scatter_block: %d, expected %d", rsb_out[0], want);
    int off = 0;
    for (int r = 0; r < rank; r++)
      off += rs_counts[r];
    for (int k = 0; k < rs_counts[rank]; k++) {
      int m = ival(0, off + k);
      for (int r = 1; r < size; r++)
        m = ival(r, off + k) > m ? ival(r, off + k) : m;
      CHECK(rs_out[k] == m, "MPI_Ireduce_scatter: element %d is %d, expected %d", k, rs_out[k], m);
    }
  }

  /* Several of one kind in flight, completed with Waitall, Waitany, Testany. */
  int x[3][5], y[3][5];
  for (int round = 0; round < 3; round++) {
    for (int j = 0; j < 3; j++)
      for (int i = 0; i < 5; i++) {
        x[j][i] = (rank + 1) * (j + 1) + i;
        y[j][i] = -1;
      }
    for (int j = 0; j < 3; j++)
      OK(MPI_Iallreduce(x[j], y[j], 5, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &req[j]));
    OK(MPI_Ibarrier(MPI_COMM_WORLD, &req[3]));
    if (round == 0) {
      OK(MPI_Waitall(4, req, MPI_STATUSES_IGNORE));
    } else if (round == 1) {
      int done = 0, index;
      while (done < 4) {
        OK(MPI_Waitany(4, req, &index, MPI_STATUS_IGNORE));
        CHECK(index >= 0 && index < 4, "MPI_Waitany over collectives: index %d", index);
        done++;
      }
    } else {
      int done = 0, index, flag;
      while (done < 4) {
        OK(MPI_Testany(4, req, &index, &flag, MPI_STATUS_IGNORE));
        if (flag) {
          CHECK(index >= 0 && index < 4, "MPI_Testany over collectives: index %d", index);
          done++;
        }
      }
    }
    for (int j = 0; j < 3; j++)
      for (int i = 0; i < 5; i++) {
        int want = size * (size + 1) / 2 * (j + 1) + size * i;
        CHECK(y[j][i] == want, "round %d: Iallreduce %d element %d is %d, expected %d", round, j,
              i, y[j][i], want);
      }
  }

  /* The v and w forms, and a user operation, nonblocking. */
  int counts[64], displs[64], vin[64], vout[512], vsc[64];
  for (int r = 0, at = 0; r < size; r++) {
    counts[r] = r + 1;
    displs[r] = at;
    at += r + 1;
  }
  for (int i = 0; i <= rank; i++)
    vin[i] = rank * 10 + i;
  MPI_Request more[5];
  OK(MPI_Igatherv(vin, rank + 1, MPI_INT, vout, counts, displs, MPI_INT, 0, MPI_COMM_WORLD,
                  &more[0]));
  int sv_in[512];
  for (int r = 0; r < size; r++)
    for (int i = 0; i <= r; i++)
      sv_in[displs[r] + i] = r * 7 + i;
  OK(MPI_Iscatterv(sv_in, counts, displs, MPI_INT, vsc, rank + 1, MPI_INT, 0, MPI_COMM_WORLD,
                   &more[1]));
  int a2s[64], a2r[64], ones[64], zeros[64], bytes_displs[64];
  MPI_Datatype types[64];
  for (int j = 0; j < size; j++) {
    a2s[j] = rank * 100 + j;
    ones[j] = 1;
    zeros[j] = j;
    bytes_displs[j] = j * (int)sizeof(int);
    types[j] = MPI_INT;
  }
  OK(MPI_Ialltoallv(a2s, ones, zeros, MPI_INT, a2r, ones, zeros, MPI_INT, MPI_COMM_WORLD,
                    &more[2]));
  int w_out[64];
  OK(MPI_Ialltoallw(a2s, ones, bytes_displs, types, w_out, ones, bytes_displs, types,
                    MPI_COMM_WORLD, &more[3]));
  mat in = mat_of(rank, 2), out;
  OK(MPI_Iallreduce(&in, &out, 1, t_mat, op_mat, MPI_COMM_WORLD, &more[4]));
  int flag = 0;
  while (!flag)
    OK(MPI_Testall(5, more, &flag, MPI_STATUSES_IGNORE));
  if (rank == 0)
    for (int r = 0; r < size; r++)
      for (int i = 0; i <= r; i++)
        CHECK(vout[displs[r] + i] == r * 10 + i, "MPI_Igatherv: rank %d's element %d", r, i);
  for (int i = 0; i <= rank; i++)
    CHECK(vsc[i] == rank * 7 + i, "MPI_Iscatterv: element %d is %d", i, vsc[i]);
  for (int r = 0; r < size; r++) {
    CHECK(a2r[r] == r * 100 + rank, "MPI_Ialltoallv: from %d is %d", r, a2r[r]);
    CHECK(w_out[r] == r * 100 + rank, "MPI_Ialltoallw: from %d is %d", r, w_out[r]);
  }
  CHECK(mat_eq(out, mat_prod(0, size, 2)), "MPI_Iallreduce of a non-commutative op is not in "
                                           "rank order");
  /* On two communicators, started in one order on even ranks and the other on
   * odd ones (the order is per communicator). */
  MPI_Comm c1, c2;
  OK(MPI_Comm_dup(MPI_COMM_WORLD, &c1));
  OK(MPI_Comm_dup(MPI_COMM_WORLD, &c2));
  int s1 = -1, s2 = -1, two_in = 2 * rank;
  MPI_Request pair[2];
  if (rank % 2) {
    OK(MPI_Iallreduce(&two_in, &s2, 1, MPI_INT, MPI_SUM, c2, &pair[1]));
    OK(MPI_Iallreduce(&rank, &s1, 1, MPI_INT, MPI_SUM, c1, &pair[0]));
  } else {
    OK(MPI_Iallreduce(&rank, &s1, 1, MPI_INT, MPI_SUM, c1, &pair[0]));
    OK(MPI_Iallreduce(&two_in, &s2, 1, MPI_INT, MPI_SUM, c2, &pair[1]));
  }
  OK(MPI_Waitall(2, pair, MPI_STATUSES_IGNORE));
  CHECK(s1 == size * (size - 1) / 2 && s2 == size * (size - 1),
        "collectives on two communicators in different orders: %d %d", s1, s2);
  OK(MPI_Comm_free(&c1));
  OK(MPI_Comm_free(&c2));
  /* A nonblocking collective interleaved with blocking ones. */
  MPI_Request r;
  int ib = rank, sum = -1;
  OK(MPI_Iallreduce(MPI_IN_PLACE, &ib, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &r));
  OK(MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
  OK(MPI_Barrier(MPI_COMM_WORLD));
  OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
  CHECK(ib == size * (size - 1) / 2 && sum == size * (size + 1) / 2,
        "interleaved: nonblocking %d, blocking %d", ib, sum);
  /* Two broadcasts in pieces at once (from 32 KiB, down the in-order tree where ranks
   * outnumber processors), from two roots, completed last first. */
  enum { LONG = 70001 };
  unsigned char *b1 = malloc(LONG), *b2 = malloc(LONG);
  CHECK(b1 && b2, "no memory for two broadcasts");
  int root2 = size - 1;
  for (int i = 0; i < LONG; i++) {
    b1[i] = rank == 0 ? (unsigned char)(i * 3) : 0;
    b2[i] = rank == root2 ? (unsigned char)(i * 5 + 1) : 0;
  }
  MPI_Request two[2];
  OK(MPI_Ibcast(b1, LONG, MPI_BYTE, 0, MPI_COMM_WORLD, &two[0]));
  OK(MPI_Ibcast(b2, LONG, MPI_BYTE, root2, MPI_COMM_WORLD, &two[1]));
  OK(MPI_Wait(&two[1], MPI_STATUS_IGNORE));
  OK(MPI_Wait(&two[0], MPI_STATUS_IGNORE));
  for (int i = 0; i < LONG; i++) {
    CHECK(b1[i] == (unsigned char)(i * 3), "MPI_Ibcast of %d bytes from 0: byte %d is %d", LONG,
          i, b1[i]);
    CHECK(b2[i] == (unsigned char)(i * 5 + 1), "MPI_Ibcast of %d bytes from %d: byte %d is %d",
          LONG, root2, i, b2[i]);
  }
  free(b1);
  free(b2);
}

/* --- Persistent collectives (MPI_*_init, MPI_Start). --- */

static void test_persistent(void) {
  int in[3], out[3], bc[2], ag[64], one;
  mat m, prod;
  MPI_Request ar, b, g, red, bar;
  OK(MPI_Allreduce_init(in, out, 3, MPI_INT, MPI_SUM, MPI_COMM_WORLD, MPI_INFO_NULL, &ar));
  OK(MPI_Bcast_init(bc, 2, MPI_INT, size - 1, MPI_COMM_WORLD, MPI_INFO_NULL, &b));
  OK(MPI_Allgather_init(&one, 1, MPI_INT, ag, 1, MPI_INT, MPI_COMM_WORLD, MPI_INFO_NULL, &g));
  OK(MPI_Reduce_init(&m, &prod, 1, t_mat, op_mat, 0, MPI_COMM_WORLD, MPI_INFO_NULL, &red));
  OK(MPI_Barrier_init(MPI_COMM_WORLD, MPI_INFO_NULL, &bar));
  /* Inactive: complete at once, and kept. */
  int flag = 0;
  OK(MPI_Test(&ar, &flag, MPI_STATUS_IGNORE));
  CHECK(flag && ar != MPI_REQUEST_NULL, "an inactive persistent collective: flag %d", flag);
  for (int round = 0; round < 3; round++) {
    /* The buffers are read at each start, not at the init. */
    for (int i = 0; i < 3; i++)
      in[i] = ival(rank, i) * (round + 1);
    bc[0] = rank == size - 1 ? 70 + round : -1;
    bc[1] = rank == size - 1 ? 80 + round : -1;
    one = rank * 10 + round;
    m = mat_of(rank, round);
    MPI_Request all[5] = {ar, b, g, red, bar};
    /* The starts may come in any order (the inits may not): odd ranks reverse it. */
    if (rank % 2 == 0)
      OK(MPI_Startall(5, all));
    else
      for (int k = 4; k >= 0; k--)
        OK(MPI_Start(&all[k]));
    errors_return(MPI_COMM_SELF, 1);
    EXPECT_ERR(MPI_Start(&all[0]), MPI_ERR_REQUEST, "active");
    errors_return(MPI_COMM_SELF, 0);
    OK(MPI_Waitall(5, all, MPI_STATUSES_IGNORE));
    CHECK(all[0] == ar && all[4] == bar, "MPI_Waitall freed a persistent collective");
    for (int i = 0; i < 3; i++) {
      int want = 0;
      for (int r = 0; r < size; r++)
        want += ival(r, i) * (round + 1);
      CHECK(out[i] == want, "round %d: Allreduce_init element %d is %d, not %d", round, i,
            out[i], want);
    }
    CHECK(bc[0] == 70 + round && bc[1] == 80 + round, "round %d: Bcast_init gave %d %d",
          round, bc[0], bc[1]);
    for (int r = 0; r < size; r++)
      CHECK(ag[r] == r * 10 + round, "round %d: Allgather_init from %d is %d", round, r,
            ag[r]);
    if (rank == 0)
      CHECK(mat_eq(prod, mat_prod(0, size, round)),
            "round %d: Reduce_init of a user operation that does not commute", round);
  }
  OK(MPI_Start(&ar));
  do
    OK(MPI_Test(&ar, &flag, MPI_STATUS_IGNORE));
  while (!flag);
  CHECK(ar != MPI_REQUEST_NULL, "MPI_Test freed a persistent collective");
  MPI_Request *reqs[5] = {&ar, &b, &g, &red, &bar};
  for (int k = 0; k < 5; k++) {
    OK(MPI_Request_free(reqs[k]));
    CHECK(*reqs[k] == MPI_REQUEST_NULL, "MPI_Request_free left request %d", k);
  }
}

/* A persistent collective whose datatype and operation the program frees after the
 * init: they live on, under the same handles, until the request is freed. */
static MPI_Datatype pair_seen;
static void pair_sum(void *in, void *inout, int *len, MPI_Datatype *type) {
  pair_seen = *type;
  int *x = in, *y = inout;
  for (int j = 0; j < 2 * *len; j++)
    y[j] += x[j];
}

static void test_persistent_freed_args(void) {
  MPI_Datatype pair, pair_handle;
  MPI_Op sum;
  MPI_Request r;
  OK(MPI_Type_contiguous(2, MPI_INT, &pair));
  OK(MPI_Type_commit(&pair));
  pair_handle = pair;
  OK(MPI_Op_create(pair_sum, 1, &sum));
  int in[4], out[4];
  OK(MPI_Allreduce_init(in, out, 2, pair, sum, MPI_COMM_WORLD, MPI_INFO_NULL, &r));
  OK(MPI_Type_free(&pair));
  OK(MPI_Op_free(&sum));
  for (int round = 0; round < 2; round++) {
    for (int i = 0; i < 4; i++)
      in[i] = rank + i + round;
    pair_seen = MPI_DATATYPE_NULL;
    OK(MPI_Start(&r));
    OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    for (int i = 0; i < 4; i++) {
      int want = 0;
      for (int k = 0; k < size; k++)
        want += k + i + round;
      CHECK(out[i] == want, "round %d: element %d is %d, not %d (type and op freed)", round,
            i, out[i], want);
    }
    /* (A rank whose part another combines does not call it.) */
    CHECK(pair_seen == MPI_DATATYPE_NULL || pair_seen == pair_handle,
          "the operation was given handle %#lx for the freed type %#lx", (long)pair_seen,
          (long)pair_handle);
  }
  OK(MPI_Request_free(&r));

  /* MPI_Alltoallw_init holds the types of its arrays (each peer's its own, freed
   * after the init through copies of the handles: the arrays themselves must stay
   * as they were), in place too (its send types not read: null). */
  for (int place = 0; place < 2; place++) {
    MPI_Datatype sends[64], recvs[64];
    int counts[64], displs[64], sent[128], got[128];
    for (int k = 0; k < size; k++) {
      OK(MPI_Type_contiguous(2, MPI_INT, &sends[k]));
      OK(MPI_Type_commit(&sends[k]));
      OK(MPI_Type_contiguous(2, MPI_INT, &recvs[k]));
      OK(MPI_Type_commit(&recvs[k]));
      counts[k] = 1;
      displs[k] = k * 2 * (int)sizeof(int);
    }
    if (place)
      OK(MPI_Alltoallw_init(MPI_IN_PLACE, NULL, NULL, NULL, got, counts, displs, recvs,
                            MPI_COMM_WORLD, MPI_INFO_NULL, &r));
    else
      OK(MPI_Alltoallw_init(sent, counts, displs, sends, got, counts, displs, recvs,
                            MPI_COMM_WORLD, MPI_INFO_NULL, &r));
    for (int k = 0; k < size; k++) { /* (copies: the arrays stay as they were) */
      MPI_Datatype s = sends[k], t = recvs[k];
      OK(MPI_Type_free(&s));
      OK(MPI_Type_free(&t));
    }
    for (int round = 0; round < 2; round++) {
      for (int k = 0; k < size; k++)
        for (int j = 0; j < 2; j++) {
          int v = 1000 * rank + 10 * k + j + round;
          sent[2 * k + j] = v;
          got[2 * k + j] = place ? v : -1;
        }
      OK(MPI_Start(&r));
      OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
      for (int k = 0; k < size; k++)
        for (int j = 0; j < 2; j++) {
          int want = 1000 * k + 10 * rank + j + round;
          CHECK(got[2 * k + j] == want,
                "alltoallw_init (in place: %d) round %d: from %d element %d is %d, not %d",
                place, round, k, j, got[2 * k + j], want);
        }
    }
    OK(MPI_Request_free(&r));
  }
}

/* Blocking and nonblocking collectives called in other orders on the members (MPI
 * forbids it; MPICH's and Open MPI's tags let it pass, and mpi4py's emulation of
 * MPI_Comm_iagree relies on it): each root starts an MPI_Iallreduce before a
 * barrier, which the others enter first; the allreduce is not done before the others
 * begin it, and gives the right result. */
static void test_kinds_ordered_apart(void) {
  for (int root = 0; root < size; root++) {
    int in = rank == root ? 11 : 13, out = -1, flag = 0;
    MPI_Request r;
    OK(MPI_Barrier(MPI_COMM_WORLD));
    if (rank == root) {
      OK(MPI_Iallreduce(&in, &out, 1, MPI_INT, MPI_BAND, MPI_COMM_WORLD, &r));
      OK(MPI_Test(&r, &flag, MPI_STATUS_IGNORE));
      CHECK(!flag || size == 1, "root %d's MPI_Iallreduce done before the others began", root);
      OK(MPI_Barrier(MPI_COMM_WORLD));
    } else {
      OK(MPI_Barrier(MPI_COMM_WORLD));
      OK(MPI_Iallreduce(&in, &out, 1, MPI_INT, MPI_BAND, MPI_COMM_WORLD, &r));
    }
    OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    CHECK(out == (size == 1 ? 11 : (11 & 13)), "root %d: the allreduce gave %d", root, out);
  }
}

int main(int argc, char **argv) {
  start("coll", &argc, &argv);
  CHECK(size <= 64, "coll runs at 64 ranks at most, not %d", size);
  setup();
  test_bcast();
  test_reduce_int();
  test_reduce_other_types();
  test_reduce_long();
  test_reduce_long_double();
  test_reduce_half();
  test_reduce_quad();
  test_user_ops();
  test_gather_scatter();
  test_allgather();
  test_alltoall();
  test_reduce_scatter_scan();
  test_corners();
  test_mismatched_counts();
  test_subcomms();
  test_progress_in_blocking_calls();
  test_nonblocking();
  test_kinds_ordered_apart();
  test_persistent();
  test_persistent_freed_args();
  OK(MPI_Op_free(&op_mat));
  OK(MPI_Op_free(&op_absmax));
  CHECK(op_mat == MPI_OP_NULL, "MPI_Op_free left the handle");
  OK(MPI_Type_free(&t_mat));
  OK(MPI_Type_free(&t_mat_gap));
  OK(MPI_Barrier(MPI_COMM_WORLD));
  return finish();
}
