/* arrays.c: the array datatypes at any number of ranks (run at 1 to 3).
 * MPI_Type_create_subarray in C and Fortran order (the same elements of the same
 * memory either way): size, bounds, true bounds, envelope, the elements it packs,
 * a send of it received contiguous, and its errors; MPI_Type_create_darray of
 * block, cyclic(2) and undistributed dimensions over a grid of 6 processes (as
 * each of them would make it): every element of the array in exactly one process's
 * share, each share's elements against a reference computed here; their
 * large-count forms (`_c`) picking the same elements; and the MPI-3 `_x` queries. */
#include "check.h"

#define ROWS 4
#define COLS 6

/* Pack one element of `t` from the array a[i] = i (ROWS x COLS ints): the ints it
 * holds, into `out` (room for ROWS * COLS); their count. */
static int picked(MPI_Datatype t, int *out) {
  int a[ROWS * COLS], pos = 0, size = 0;
  for (int i = 0; i < ROWS * COLS; i++)
    a[i] = i;
  OK(MPI_Type_size(t, &size));
  OK(MPI_Pack(a, 1, t, out, (int)sizeof(int) * ROWS * COLS, &pos, MPI_COMM_SELF));
  CHECK(pos == size, "packed %d bytes of a type of %d", pos, size);
  return size / (int)sizeof(int);
}

static void test_subarray(void) {
  int sizes[2] = {ROWS, COLS}, subsizes[2] = {2, 3}, starts[2] = {1, 2};
  MPI_Datatype c, f;
  OK(MPI_Type_create_subarray(2, sizes, subsizes, starts, MPI_ORDER_C, MPI_INT, &c));
  OK(MPI_Type_commit(&c));
  /* The same box, the dimensions named fastest first. */
  int fsizes[2] = {COLS, ROWS}, fsubsizes[2] = {3, 2}, fstarts[2] = {2, 1};
  OK(MPI_Type_create_subarray(2, fsizes, fsubsizes, fstarts, MPI_ORDER_FORTRAN, MPI_INT, &f));
  OK(MPI_Type_commit(&f));
  int want[6] = {8, 9, 10, 14, 15, 16}, got[ROWS * COLS];
  MPI_Datatype both[2] = {c, f};
  for (int k = 0; k < 2; k++) {
    int n = picked(both[k], got);
    CHECK(n == 6, "%s order: %d ints", k ? "Fortran" : "C", n);
    for (int i = 0; i < 6; i++)
      CHECK(got[i] == want[i], "%s order: element %d is %d", k ? "Fortran" : "C", i, got[i]);
    MPI_Aint lb, extent, tlb, textent;
    OK(MPI_Type_get_extent(both[k], &lb, &extent));
    OK(MPI_Type_get_true_extent(both[k], &tlb, &textent));
    CHECK(lb == 0 && extent == ROWS * COLS * 4, "extent %ld", (long)extent);
    CHECK(tlb == 8 * 4 && textent == (17 - 8) * 4, "true lb %ld extent %ld", (long)tlb,
          (long)textent);
  }
  int ni, na, nt, comb;
  OK(MPI_Type_get_envelope(c, &ni, &na, &nt, &comb));
  CHECK(comb == MPI_COMBINER_SUBARRAY && ni == 8 && na == 0 && nt == 1, "envelope %d %d", comb,
        ni);
  int ints[8];
  MPI_Aint none[1];
  MPI_Datatype old;
  OK(MPI_Type_get_contents(c, 8, 0, 1, ints, none, &old));
  int expect[8] = {2, ROWS, COLS, 2, 3, 1, 2, MPI_ORDER_C};
  for (int i = 0; i < 8; i++)
    CHECK(ints[i] == expect[i], "contents int %d: %d", i, ints[i]);
  CHECK(old == MPI_INT, "contents type");
  /* Sent as the box, received as 6 ints. */
  if (size > 1 && rank < 2) {
    int a[ROWS * COLS], in[6];
    for (int i = 0; i < ROWS * COLS; i++)
      a[i] = 100 + i;
    if (rank == 0)
      OK(MPI_Send(a, 1, c, 1, 3, MPI_COMM_WORLD));
    else {
      OK(MPI_Recv(in, 6, MPI_INT, 0, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
      for (int i = 0; i < 6; i++)
        CHECK(in[i] == 100 + want[i], "received element %d: %d", i, in[i]);
    }
  }
  /* Errors. */
  errors_return(MPI_COMM_SELF, 1);
  MPI_Datatype bad;
  int too_big[2] = {2, 7};
  EXPECT_ERR(MPI_Type_create_subarray(2, sizes, too_big, starts, MPI_ORDER_C, MPI_INT, &bad),
             MPI_ERR_ARG, "dimension 1");
  EXPECT_ERR(MPI_Type_create_subarray(2, sizes, subsizes, starts, 99, MPI_INT, &bad),
             MPI_ERR_ARG, "order");
  EXPECT_ERR(MPI_Type_create_subarray(0, sizes, subsizes, starts, MPI_ORDER_C, MPI_INT, &bad),
             MPI_ERR_ARG, NULL);
  errors_return(MPI_COMM_SELF, 0);
  OK(MPI_Type_free(&c));
  OK(MPI_Type_free(&f));
}

/* Whether process (pr, pc) of a 2 x 3 grid holds element (i, j): rows in blocks of
 * 2, columns cyclic in pairs. */
static int holds(int pr, int pc, int i, int j) { return i / 2 == pr && (j / 2) % 3 == pc; }

static void test_darray(void) {
  int gsizes[2] = {ROWS, COLS}, psizes[2] = {2, 3};
  int distribs[2] = {MPI_DISTRIBUTE_BLOCK, MPI_DISTRIBUTE_CYCLIC};
  int dargs[2] = {MPI_DISTRIBUTE_DFLT_DARG, 2};
  int seen[ROWS * COLS] = {0}, got[ROWS * COLS];
  for (int r = 0; r < 6; r++) {
    MPI_Datatype t;
    OK(MPI_Type_create_darray(6, r, 2, gsizes, distribs, dargs, psizes, MPI_ORDER_C, MPI_INT,
                              &t));
    OK(MPI_Type_commit(&t));
    int n = picked(t, got), k = 0;
    for (int i = 0; i < ROWS; i++)
      for (int j = 0; j < COLS; j++)
        if (holds(r / 3, r % 3, i, j)) {
          CHECK(k < n && got[k] == i * COLS + j, "process %d's element %d: %d, expected %d", r,
                k, k < n ? got[k] : -1, i * COLS + j);
          k++;
        }
    CHECK(k == n, "process %d holds %d elements, expected %d", r, n, k);
    for (int i = 0; i < n; i++)
      seen[got[i]]++;
    MPI_Aint lb, extent;
    OK(MPI_Type_get_extent(t, &lb, &extent));
    CHECK(lb == 0 && extent == ROWS * COLS * 4, "darray extent %ld", (long)extent);
    OK(MPI_Type_free(&t));
  }
  for (int i = 0; i < ROWS * COLS; i++)
    CHECK(seen[i] == 1, "element %d is in %d shares", i, seen[i]);
  /* One process over a dimension it does not split. */
  int one[2] = {1, 6}, none[2] = {MPI_DISTRIBUTE_NONE, MPI_DISTRIBUTE_BLOCK};
  int dflt[2] = {MPI_DISTRIBUTE_DFLT_DARG, MPI_DISTRIBUTE_DFLT_DARG};
  MPI_Datatype t;
  OK(MPI_Type_create_darray(6, 4, 2, gsizes, none, dflt, one, MPI_ORDER_C, MPI_INT, &t));
  OK(MPI_Type_commit(&t));
  int n = picked(t, got);
  CHECK(n == ROWS && got[0] == 4 && got[3] == 3 * COLS + 4, "column 4: %d ints from %d", n,
        got[0]);
  OK(MPI_Type_free(&t));
  errors_return(MPI_COMM_SELF, 1);
  EXPECT_ERR(MPI_Type_create_darray(5, 0, 2, gsizes, distribs, dargs, psizes, MPI_ORDER_C,
                                    MPI_INT, &t),
             MPI_ERR_ARG, "grid");
  errors_return(MPI_COMM_SELF, 0);
}

static void test_x_queries(void) {
  MPI_Datatype v;
  OK(MPI_Type_vector(3, 2, 4, MPI_INT, &v));
  OK(MPI_Type_commit(&v));
  MPI_Count size = -1, lb = -1, extent = -1, tlb = -1, textent = -1, elements = -1;
  OK(MPI_Type_size_x(v, &size));
  OK(MPI_Type_get_extent_x(v, &lb, &extent));
  OK(MPI_Type_get_true_extent_x(v, &tlb, &textent));
  CHECK(size == 24 && lb == 0 && extent == 40 && tlb == 0 && textent == 40,
        "_x queries: %lld %lld %lld", (long long)size, (long long)lb, (long long)extent);
  MPI_Status st;
  OK(MPI_Status_set_elements_x(&st, MPI_INT, 12));
  OK(MPI_Get_elements_x(&st, v, &elements));
  CHECK(elements == 12, "MPI_Get_elements_x: %lld", (long long)elements);
  OK(MPI_Type_free(&v));
}

/* The `_c` forms, their extents given as MPI_Count, against the `int` forms. */
static void test_large_forms(void) {
  int sizes[2] = {ROWS, COLS}, subsizes[2] = {2, 3}, starts[2] = {1, 2};
  MPI_Count csizes[2] = {ROWS, COLS}, csubsizes[2] = {2, 3}, cstarts[2] = {1, 2};
  int distribs[2] = {MPI_DISTRIBUTE_BLOCK, MPI_DISTRIBUTE_CYCLIC};
  int dargs[2] = {MPI_DISTRIBUTE_DFLT_DARG, 2}, psizes[2] = {2, 3};
  MPI_Datatype t[4];
  OK(MPI_Type_create_subarray(2, sizes, subsizes, starts, MPI_ORDER_C, MPI_INT, &t[0]));
  OK(MPI_Type_create_subarray_c(2, csizes, csubsizes, cstarts, MPI_ORDER_C, MPI_INT, &t[1]));
  OK(MPI_Type_create_darray(6, 4, 2, sizes, distribs, dargs, psizes, MPI_ORDER_C, MPI_INT,
                            &t[2]));
  OK(MPI_Type_create_darray_c(6, 4, 2, csizes, distribs, dargs, psizes, MPI_ORDER_C, MPI_INT,
                              &t[3]));
  for (int k = 0; k < 4; k += 2) {
    int a[ROWS * COLS], b[ROWS * COLS];
    OK(MPI_Type_commit(&t[k]));
    OK(MPI_Type_commit(&t[k + 1]));
    int n = picked(t[k], a), m = picked(t[k + 1], b);
    CHECK(n == m && n > 0, "%s: the large form picks %d ints, the int form %d",
          k ? "darray" : "subarray", m, n);
    for (int i = 0; i < n; i++)
      CHECK(a[i] == b[i], "%s: element %d differs", k ? "darray" : "subarray", i);
  }
  for (int k = 0; k < 4; k++)
    OK(MPI_Type_free(&t[k]));
}

int main(int argc, char **argv) {
  start("arrays", &argc, &argv);
  test_subarray();
  test_darray();
  test_large_forms();
  test_x_queries();
  return finish();
}
