/* Long on purpose: one program holds every MPI-IO check, so that each rank count
 * is one launch. */
/* io.c: MPI-IO at any number of ranks (run at 1 to 4), in a fresh folder under
 * TMPDIR (or /tmp) that rank 0 removes at the end. Opening's errors (no such file,
 * bad access modes, MPI_MODE_EXCL on a file that exists, writing a read-only one);
 * explicit offsets, collective and not, each rank's block read back by every rank;
 * the file's size; a strided view (each rank every size-th int) written at the
 * individual pointer and read back through the view and as bytes; a subarray view
 * written collectively (a distributed array); a memory type that is not
 * contiguous; seeks and positions; rank-ordered and independent accesses at the
 * shared pointer; nonblocking and split collective forms; reading past the end;
 * the view, group, access mode, byte offsets, atomicity, info, error handlers and
 * Fortran handles of an open file; external32 views; a representation of the
 * program's (MPI_Register_datarep); MPI_MODE_DELETE_ON_CLOSE and MPI_File_delete. */
#include "check.h"
#include <stddef.h>
#include <sys/stat.h>
#include <unistd.h>

#define N 64

static char path[512], other[512];

static int exists(const char *p) { return access(p, F_OK) == 0; }

/* The ints read or written, from a status. */
static int ints_of(MPI_Status *st) {
  int n = -1;
  OK(MPI_Get_count(st, MPI_INT, &n));
  return n;
}

/* The representation of fh's view is `want`. */
static void view_rep_is(MPI_File fh, const char *want) {
  char rep[MPI_MAX_DATAREP_STRING];
  MPI_Offset d;
  MPI_Datatype e, f;
  OK(MPI_File_get_view(fh, &d, &e, &f, rep));
  CHECK(strcmp(rep, want) == 0, "the view's representation: %s, not %s", rep, want);
}

/* File `leaf` in folder `dir`, opened by every rank to read and write, deleted
 * when closed. */
static MPI_File open_scratch(const char *dir, const char *leaf) {
  char name[512];
  snprintf(name, sizeof name, "%s/%s", dir, leaf);
  MPI_File fh;
  OK(MPI_File_open(MPI_COMM_WORLD, name, MPI_MODE_CREATE | MPI_MODE_RDWR | MPI_MODE_DELETE_ON_CLOSE,
                   MPI_INFO_NULL, &fh));
  return fh;
}

/* Once every rank has written its 12 bytes at 12 rank, rank r's, read through a
 * native view of bytes. */
static void raw_of(MPI_File fh, int r, unsigned char raw[12]) {
  MPI_Status st;
  OK(MPI_File_sync(fh));
  OK(MPI_Barrier(MPI_COMM_WORLD));
  OK(MPI_File_sync(fh));
  OK(MPI_File_set_view(fh, 0, MPI_BYTE, MPI_BYTE, "native", MPI_INFO_NULL));
  OK(MPI_File_read_at(fh, 12 * r, raw, 12, MPI_BYTE, &st));
}

/* The big-endian value of the 4 bytes at p. */
static unsigned be32(const unsigned char *p) {
  return (unsigned)p[0] << 24 | (unsigned)p[1] << 16 | (unsigned)p[2] << 8 | p[3];
}

/* external32 views: each rank writes a record {int, double} (a memory type with a
 * gap) collectively at 12 rank; the file's bytes, read through a native view, are
 * big-endian; read back through an external32 view into the record and into a
 * contiguous array; a read that ends inside an int at the end of the file converts
 * the whole ints only; types whose elements change size there are refused. */
static void test_external32(const char *dir) {
  MPI_File fh = open_scratch(dir, "ext32");
  MPI_Status st;
  OK(MPI_File_set_view(fh, 0, MPI_BYTE, MPI_BYTE, "external32", MPI_INFO_NULL));
  view_rep_is(fh, "external32");
  struct rec {
    int i;
    double x;
  } mine = {0x01020304 + rank, -1.5 - rank}, back = {0, 0};
  int lens[2] = {1, 1};
  MPI_Aint at[2] = {offsetof(struct rec, i), offsetof(struct rec, x)};
  MPI_Datatype parts[2] = {MPI_INT, MPI_DOUBLE}, rec;
  OK(MPI_Type_create_struct(2, lens, at, parts, &rec));
  OK(MPI_Type_commit(&rec));
  OK(MPI_File_write_at_all(fh, 12 * rank, &mine, 1, rec, &st));
  int n = -1;
  OK(MPI_Get_count(&st, rec, &n));
  CHECK(n == 1, "records written: %d", n);
  int r = (rank + 1) % size;
  unsigned char raw[12];
  raw_of(fh, r, raw);
  CHECK(be32(raw) == (unsigned)(0x01020304 + r), "rank %d's int in the file: %#x", r, be32(raw));
  double x = -1.5 - r;
  unsigned long long bits;
  memcpy(&bits, &x, 8);
  for (int k = 0; k < 8; k++)
    CHECK(raw[4 + k] == ((bits >> (56 - 8 * k)) & 0xff), "rank %d's double, byte %d: %#x", r, k,
          raw[4 + k]);
  unsigned char tail[4];
  MPI_Offset end = 12 * (MPI_Offset)size;
  OK(MPI_File_read_at(fh, end - 6, tail, 4, MPI_BYTE, &st));

  OK(MPI_File_set_view(fh, 0, MPI_BYTE, MPI_BYTE, "external32", MPI_INFO_NULL));
  OK(MPI_File_read_at(fh, 12 * r, &back, 1, rec, &st));
  CHECK(back.i == 0x01020304 + r && back.x == -1.5 - r, "rank %d's record read back: %#x %g", r,
        back.i, back.x);
  int three[3] = {0, 0, 0};
  OK(MPI_File_read_at(fh, 12 * r, three, 1, MPI_INT, &st));
  CHECK(three[0] == 0x01020304 + r, "rank %d's int read back: %#x", r, three[0]);
  three[0] = three[1] = -7;
  OK(MPI_File_read_at(fh, end - 6, three, 2, MPI_INT, &st));
  OK(MPI_Get_count(&st, MPI_INT, &n));
  CHECK(n == 1 && (unsigned)three[0] == be32(tail) && three[1] == -7,
        "the read ending inside an int: %d ints, %#x (expected %#x), then %d", n, three[0],
        be32(tail), three[1]);

  /* An etype of longs (4 bytes in external32, 8 here); a buffer of them. */
  EXPECT_ERR(MPI_File_set_view(fh, 0, MPI_LONG, MPI_LONG, "external32", MPI_INFO_NULL),
             MPI_ERR_UNSUPPORTED_DATAREP, "long");
  long l = 1;
  EXPECT_ERR(MPI_File_write_at(fh, 0, &l, 1, MPI_LONG, &st), MPI_ERR_UNSUPPORTED_DATAREP, "long");
  MPI_Aint x_ext = 0;
  OK(MPI_File_get_type_extent(fh, rec, &x_ext));
  CHECK(x_ext == sizeof(struct rec), "the record's extent in the file: %ld", (long)x_ext);
  OK(MPI_Type_free(&rec));
  OK(MPI_File_close(&fh));
}

/* A representation of this program's: ints with their bytes reversed (big-endian
 * here), each data item where the (tiled) datatype puts it, the type's extent
 * apart (the types given are ints or one int resized), asked of the library from
 * inside the function. `calls` counts the calls. */
static unsigned swap32(unsigned v) {
  return v >> 24 | (v >> 8 & 0xff00) | (v << 8 & 0xff0000) | v << 24;
}
static int calls;
static int reversed(char *user, MPI_Datatype t, MPI_Count count, char *file, MPI_Offset position,
                    int to_file) {
  MPI_Aint lb, extent;
  int rc = MPI_Type_get_extent(t, &lb, &extent);
  if (rc != MPI_SUCCESS)
    return rc;
  calls++;
  for (MPI_Count i = 0; i < count; i++) {
    char *mem = user + lb + (position + i) * extent;
    unsigned v;
    memcpy(&v, to_file ? mem : file + 4 * i, 4);
    v = swap32(v);
    memcpy(to_file ? file + 4 * i : mem, &v, 4);
  }
  return MPI_SUCCESS;
}
#define CONVERSION(name, count_type, to_file)                                                   \
  static int name(void *user, MPI_Datatype t, count_type n, void *file, MPI_Offset pos, void *s) { \
    CHECK(s == &calls, "a conversion function's extra state: %p", s);                           \
    return reversed(user, t, n, file, pos, to_file);                                             \
  }
CONVERSION(rev_read, int, 0)
CONVERSION(rev_write, int, 1)
CONVERSION(rev_read_c, MPI_Count, 0)
CONVERSION(rev_write_c, MPI_Count, 1)
/* Ints and bytes keep their size; shorts take 4 bytes; other types are refused. */
static int rev_extent(MPI_Datatype t, MPI_Aint *extent, void *state) {
  CHECK(state == &calls, "the extent function's extra state: %p", state);
  if (t != MPI_INT && t != MPI_BYTE && t != MPI_SHORT)
    return MPI_ERR_TYPE;
  *extent = t == MPI_BYTE ? 1 : 4;
  return MPI_SUCCESS;
}
static int refuse(void *user, MPI_Datatype t, int count, void *file, MPI_Offset pos, void *s) {
  (void)user, (void)t, (void)count, (void)file, (void)pos, (void)s;
  return MPI_ERR_OTHER;
}

/* MPI_Register_datarep: its errors; each rank writes three ints of a memory type
 * with gaps collectively at 3 rank through the reversed representation; the file's
 * bytes (big-endian) through a native view; read back through the representation's
 * _c form into a contiguous array, and at the end of the file a read ending inside
 * an int; a representation without conversions moves the bytes as they are; one
 * whose functions fail, and types whose size changes or that the extent function
 * refuses, are errors. */
static void test_datarep(const char *dir) {
  const char *rev = "rbtl-reversed", *rev_c = "rbtl-reversed-c";
  OK(MPI_Register_datarep(rev, rev_read, rev_write, rev_extent, &calls));
  OK(MPI_Register_datarep_c(rev_c, rev_read_c, rev_write_c, rev_extent, &calls));
  OK(MPI_Register_datarep("rbtl-as-is", MPI_CONVERSION_FN_NULL, MPI_CONVERSION_FN_NULL, rev_extent,
                          &calls));
  OK(MPI_Register_datarep("rbtl-refusing", refuse, refuse, rev_extent, &calls));
  EXPECT_ERR(MPI_Register_datarep(rev, rev_read, rev_write, rev_extent, NULL),
             MPI_ERR_DUP_DATAREP, "defined already");
  EXPECT_ERR(MPI_Register_datarep("external32", rev_read, rev_write, rev_extent, NULL),
             MPI_ERR_DUP_DATAREP, "defined already");
  EXPECT_ERR(MPI_Register_datarep("", rev_read, rev_write, rev_extent, NULL), MPI_ERR_ARG, "name");
  EXPECT_ERR(MPI_Register_datarep("rbtl-none", rev_read, rev_write, NULL, NULL), MPI_ERR_ARG,
             "extent function");
  char long_name[MPI_MAX_DATAREP_STRING + 1];
  memset(long_name, 'x', MPI_MAX_DATAREP_STRING);
  long_name[MPI_MAX_DATAREP_STRING] = 0;
  EXPECT_ERR(MPI_Register_datarep(long_name, rev_read, rev_write, rev_extent, NULL), MPI_ERR_ARG,
             "name");

  MPI_File fh = open_scratch(dir, "datarep");
  MPI_Status st;
  OK(MPI_File_set_view(fh, 0, MPI_INT, MPI_INT, rev, MPI_INFO_NULL));
  view_rep_is(fh, rev);
  MPI_Datatype spaced;
  OK(MPI_Type_create_resized(MPI_INT, 0, 2 * sizeof(int), &spaced));
  OK(MPI_Type_commit(&spaced));
  int mine[6] = {0}, n = -1;
  for (int k = 0; k < 3; k++)
    mine[2 * k] = 0x01020304 + 16 * rank + k;
  calls = 0;
  OK(MPI_File_write_at_all(fh, 3 * rank, mine, 3, spaced, &st));
  OK(MPI_Get_count(&st, spaced, &n));
  CHECK(n == 3 && calls == 1, "the write through the representation: %d ints, %d calls", n, calls);
  int r = (rank + 1) % size;
  unsigned char raw[12];
  raw_of(fh, r, raw);
  for (int k = 0; k < 3; k++)
    CHECK(be32(raw + 4 * k) == (unsigned)(0x01020304 + 16 * r + k), "rank %d's int %d in the file: %#x",
          r, k, be32(raw + 4 * k));

  OK(MPI_File_set_view(fh, 0, MPI_INT, MPI_INT, rev_c, MPI_INFO_NULL));
  int back[4] = {-7, -7, -7, -7};
  OK(MPI_File_read_at(fh, 3 * r, back, 3, MPI_INT, &st));
  for (int k = 0; k < 3; k++)
    CHECK(back[k] == 0x01020304 + 16 * r + k, "rank %d's int %d read back: %#x", r, k, back[k]);
  MPI_Aint x_ext = 0;
  OK(MPI_File_get_type_extent(fh, spaced, &x_ext));
  CHECK(x_ext == 2 * sizeof(int), "the spaced int's extent in the file: %ld", (long)x_ext);
  /* Bytes: the end of the file is 6 bytes after the start of the read. */
  OK(MPI_File_set_view(fh, 0, MPI_BYTE, MPI_BYTE, rev, MPI_INFO_NULL));
  MPI_Offset end = 12 * (MPI_Offset)size;
  back[0] = back[1] = -7;
  OK(MPI_File_read_at(fh, end - 6, back, 2, MPI_INT, &st));
  CHECK(ints_of(&st) == 1 && back[1] == -7, "the read ending inside an int: %d ints, then %d",
        ints_of(&st), back[1]);
  unsigned char tail[4];
  OK(MPI_File_set_view(fh, 0, MPI_BYTE, MPI_BYTE, "rbtl-as-is", MPI_INFO_NULL));
  OK(MPI_File_read_at(fh, end - 6, tail, 4, MPI_BYTE, &st));
  CHECK((unsigned)back[0] == be32(tail), "the whole int read at the end: %#x, not %#x", back[0],
        be32(tail));
  int as_is = 0;
  OK(MPI_File_read_at(fh, 12 * r, &as_is, 1, MPI_INT, &st));
  CHECK((unsigned)as_is == swap32(0x01020304 + 16 * r), "an int read without conversion: %#x",
        as_is);

  EXPECT_ERR(MPI_File_set_view(fh, 0, MPI_SHORT, MPI_SHORT, rev, MPI_INFO_NULL),
             MPI_ERR_UNSUPPORTED_DATAREP, "MPI_SHORT");
  EXPECT_ERR(MPI_File_set_view(fh, 0, MPI_DOUBLE, MPI_DOUBLE, rev, MPI_INFO_NULL),
             MPI_ERR_CONVERSION, "extent function");
  EXPECT_ERR(MPI_File_set_view(fh, 0, MPI_INT, MPI_INT, "rbtl-unknown", MPI_INFO_NULL),
             MPI_ERR_UNSUPPORTED_DATAREP, "rbtl-unknown");
  OK(MPI_File_set_view(fh, 0, MPI_INT, MPI_INT, "rbtl-refusing", MPI_INFO_NULL));
  EXPECT_ERR(MPI_File_read_at(fh, 0, back, 1, MPI_INT, &st), MPI_ERR_CONVERSION, "read conversion");
  EXPECT_ERR(MPI_File_write_at(fh, 0, back, 1, MPI_INT, &st), MPI_ERR_CONVERSION,
             "write conversion");
  OK(MPI_Type_free(&spaced));
  OK(MPI_File_close(&fh));
}

int main(int argc, char **argv) {
  start("io", &argc, &argv);
  /* Rank 0 makes the folder; every rank learns its name. */
  char dir[400] = {0};
  if (rank == 0) {
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/rbtl-io-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    CHECK(mkdtemp(dir) != NULL, "mkdtemp %s", dir);
  }
  OK(MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD));
  snprintf(path, sizeof path, "%s/data", dir);
  snprintf(other, sizeof other, "%s/gone", dir);
  MPI_File fh;
  MPI_Status st;
  MPI_Request req0;

  /* Opening's errors: files return errors by default. */
  EXPECT_ERR(MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_RDONLY, MPI_INFO_NULL, &fh),
             MPI_ERR_NO_SUCH_FILE, NULL);
  EXPECT_ERR(MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_RDONLY | MPI_MODE_RDWR,
                           MPI_INFO_NULL, &fh),
             MPI_ERR_AMODE, "exactly one");
  EXPECT_ERR(MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_RDONLY | MPI_MODE_CREATE,
                           MPI_INFO_NULL, &fh),
             MPI_ERR_AMODE, NULL);
  CHECK(!exists(path), "a refused open created the file");
  OK(MPI_Barrier(MPI_COMM_WORLD));

  /* Each rank's block at an explicit offset; everyone reads all back. */
  OK(MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &fh));
  int amode = 0;
  OK(MPI_File_get_amode(fh, &amode));
  CHECK(amode == (MPI_MODE_CREATE | MPI_MODE_RDWR), "amode %#x", amode);
  int mine[N], all[N * 8];
  for (int k = 0; k < N; k++)
    mine[k] = rank * 1000 + k;
  OK(MPI_File_write_at_all(fh, (MPI_Offset)rank * N * sizeof(int), mine, N, MPI_INT, &st));
  CHECK(ints_of(&st) == N, "write_at_all moved %d ints", ints_of(&st));
  OK(MPI_File_sync(fh));
  OK(MPI_File_read_at(fh, 0, all, N * size, MPI_INT, &st));
  CHECK(ints_of(&st) == N * size, "read_at got %d ints", ints_of(&st));
  for (int i = 0; i < N * size; i++)
    CHECK(all[i] == (i / N) * 1000 + i % N, "int %d read back: %d", i, all[i]);
  MPI_Offset fsize = -1;
  OK(MPI_File_get_size(fh, &fsize));
  CHECK(fsize == (MPI_Offset)(N * size * sizeof(int)), "size %lld", (long long)fsize);
  /* Past the end: nothing, and no error. */
  OK(MPI_File_read_at(fh, fsize + 100, all, 4, MPI_INT, &st));
  CHECK(ints_of(&st) == 0, "read past the end got %d ints", ints_of(&st));
  EXPECT_ERR(MPI_File_read_at(fh, -1, all, 1, MPI_INT, &st), MPI_ERR_ARG, "negative");

  /* A strided view: rank r sees ints r, r + size, ...; written at the individual
   * pointer, read back through the view and, by rank 0, as bytes. */
  OK(MPI_Barrier(MPI_COMM_WORLD));
  MPI_Datatype one, strided;
  OK(MPI_Type_contiguous(1, MPI_INT, &one));
  OK(MPI_Type_create_resized(one, 0, (MPI_Aint)(size * sizeof(int)), &strided));
  OK(MPI_Type_commit(&strided));
  OK(MPI_File_set_view(fh, (MPI_Offset)rank * sizeof(int), MPI_INT, strided, "native",
                       MPI_INFO_NULL));
  MPI_Offset pos = -1, byte = -1;
  OK(MPI_File_get_position(fh, &pos));
  CHECK(pos == 0, "the position after set_view: %lld", (long long)pos);
  OK(MPI_File_get_byte_offset(fh, 3, &byte));
  CHECK(byte == (MPI_Offset)((3 * size + rank) * sizeof(int)), "byte offset of etype 3: %lld",
        (long long)byte);
  for (int k = 0; k < N; k++)
    mine[k] = 50000 + rank * 100 + k;
  OK(MPI_File_write_all(fh, mine, N / 2, MPI_INT, &st));
  OK(MPI_File_write(fh, mine + N / 2, N / 2, MPI_INT, &st));
  OK(MPI_File_get_position(fh, &pos));
  CHECK(pos == N, "the position after %d ints: %lld", N, (long long)pos);
  OK(MPI_File_seek(fh, -N, MPI_SEEK_CUR));
  int back[N];
  OK(MPI_File_read_all(fh, back, N, MPI_INT, &st));
  for (int k = 0; k < N; k++)
    CHECK(back[k] == mine[k], "through the view, int %d: %d", k, back[k]);
  OK(MPI_File_seek(fh, 0, MPI_SEEK_END));
  OK(MPI_File_get_position(fh, &pos));
  CHECK(pos == N, "the end through the view: %lld", (long long)pos);
  EXPECT_ERR(MPI_File_seek(fh, -N - 1, MPI_SEEK_END), MPI_ERR_ARG, NULL);
  MPI_Offset disp = -1;
  MPI_Datatype et, ft;
  char rep[MPI_MAX_DATAREP_STRING];
  OK(MPI_File_get_view(fh, &disp, &et, &ft, rep));
  CHECK(disp == (MPI_Offset)(rank * sizeof(int)) && et == MPI_INT && !strcmp(rep, "native"),
        "get_view: %lld %s", (long long)disp, rep);
  MPI_Aint lb, extent;
  OK(MPI_Type_get_extent(ft, &lb, &extent));
  CHECK(extent == (MPI_Aint)(size * sizeof(int)), "the view's filetype extent %ld", (long)extent);
  OK(MPI_Type_free(&ft));
  OK(MPI_File_sync(fh));
  /* "internal" is this library's own representation: native. */
  OK(MPI_File_set_view(fh, 0, MPI_BYTE, MPI_BYTE, "internal", MPI_INFO_NULL));
  view_rep_is(fh, "internal");
  if (rank == 0) {
    OK(MPI_File_read_at(fh, 0, all, N * size, MPI_INT, &st));
    for (int i = 0; i < N * size; i++)
      CHECK(all[i] == 50000 + (i % size) * 100 + i / size, "interleaved int %d: %d", i, all[i]);
  }
  EXPECT_ERR(MPI_File_set_view(fh, 0, MPI_INT, MPI_INT, "xdr", MPI_INFO_NULL),
             MPI_ERR_UNSUPPORTED_DATAREP, NULL);

  /* A subarray view, as programs write a distributed array: a 4 x (2 size) array
   * of ints after the strided region, each rank the block of columns 2r and
   * 2r + 1, written collectively; rank 0 reads it back in row-major order. */
  {
    int gsizes[2] = {4, 2 * size}, subsizes[2] = {4, 2}, starts[2] = {0, 2 * rank};
    MPI_Datatype block;
    OK(MPI_Type_create_subarray(2, gsizes, subsizes, starts, MPI_ORDER_C, MPI_INT, &block));
    OK(MPI_Type_commit(&block));
    MPI_Offset at = (MPI_Offset)(8 * N * size) * sizeof(int);
    OK(MPI_File_set_view(fh, at, MPI_INT, block, "native", MPI_INFO_NULL));
    int mine8[8];
    for (int k = 0; k < 8; k++)
      mine8[k] = rank * 100 + k;
    OK(MPI_File_write_all(fh, mine8, 8, MPI_INT, &st));
    OK(MPI_File_sync(fh));
    OK(MPI_File_set_view(fh, 0, MPI_BYTE, MPI_BYTE, "native", MPI_INFO_NULL));
    if (rank == 0) {
      OK(MPI_File_read_at(fh, at, all, 8 * size, MPI_INT, &st));
      for (int i = 0; i < 4; i++)
        for (int j = 0; j < 2 * size; j++)
          CHECK(all[i * 2 * size + j] == (j / 2) * 100 + i * 2 + j % 2,
                "distributed array (%d, %d): %d", i, j, all[i * 2 * size + j]);
    }
    OK(MPI_Type_free(&block));
  }

  /* A memory type that is not contiguous: every other int. */
  MPI_Datatype every_other;
  OK(MPI_Type_vector(N, 1, 2, MPI_INT, &every_other));
  OK(MPI_Type_commit(&every_other));
  int spread[2 * N], packed[N];
  for (int k = 0; k < 2 * N; k++)
    spread[k] = k % 2 ? -1 : rank * 7 + k;
  MPI_Offset base = (MPI_Offset)(N * size + rank * N) * sizeof(int);
  OK(MPI_File_write_at(fh, base, spread, 1, every_other, &st));
  CHECK(ints_of(&st) == N, "a vector type wrote %d ints", ints_of(&st));
  OK(MPI_File_read_at(fh, base, packed, N, MPI_INT, &st));
  for (int k = 0; k < N; k++)
    CHECK(packed[k] == rank * 7 + 2 * k, "from the vector type, int %d: %d", k, packed[k]);
  for (int k = 0; k < 2 * N; k++)
    spread[k] = -5;
  OK(MPI_File_read_at(fh, base, spread, 1, every_other, &st));
  for (int k = 0; k < 2 * N; k++)
    CHECK(spread[k] == (k % 2 ? -5 : rank * 7 + k), "into the vector type, int %d: %d", k,
          spread[k]);

  /* Rank order at the shared pointer: rank r writes r + 1 ints of r. */
  OK(MPI_File_seek_shared(fh, 0, MPI_SEEK_SET));
  int ord[16];
  for (int k = 0; k <= rank; k++)
    ord[k] = rank;
  OK(MPI_File_write_ordered(fh, ord, rank + 1, MPI_INT, &st));
  OK(MPI_File_get_position_shared(fh, &pos));
  int total = size * (size + 1) / 2;
  CHECK(pos == (MPI_Offset)(total * sizeof(int)), "shared pointer after ordered writes: %lld",
        (long long)pos);
  OK(MPI_File_sync(fh));
  OK(MPI_File_read_at(fh, 0, all, total, MPI_INT, &st));
  for (int r = 0, at = 0; r < size; r++)
    for (int k = 0; k <= r; k++, at++)
      CHECK(all[at] == r, "ordered int %d: %d, expected %d", at, all[at], r);
  OK(MPI_File_seek_shared(fh, 0, MPI_SEEK_SET));
  for (int k = 0; k <= rank; k++)
    ord[k] = -1;
  OK(MPI_File_read_ordered(fh, ord, rank + 1, MPI_INT, &st));
  for (int k = 0; k <= rank; k++)
    CHECK(ord[k] == rank, "read in order, int %d: %d", k, ord[k]);

  /* Independent accesses at the shared pointer (in bytes: the view's etype):
   * each rank's pair of ints lands
   * where the pointer was, none over another; then the last rank alone moves it,
   * the others in a barrier. */
  OK(MPI_File_seek_shared(fh, 0, MPI_SEEK_SET));
  int pair[2] = {rank, rank};
  OK(MPI_File_write_shared(fh, pair, 2, MPI_INT, &st));
  CHECK(ints_of(&st) == 2, "write_shared moved %d ints", ints_of(&st));
  OK(MPI_Barrier(MPI_COMM_WORLD));
  OK(MPI_File_get_position_shared(fh, &pos));
  CHECK(pos == (MPI_Offset)(2 * size * sizeof(int)), "shared pointer after every rank's pair: %lld",
        (long long)pos);
  OK(MPI_File_read_at(fh, 0, all, 2 * size, MPI_INT, &st));
  int seen[8] = {0};
  for (int i = 0; i < size; i++) {
    CHECK(all[2 * i] == all[2 * i + 1] && all[2 * i] >= 0 && all[2 * i] < size,
          "pair %d: %d %d", i, all[2 * i], all[2 * i + 1]);
    seen[all[2 * i]]++;
  }
  for (int r = 0; r < size; r++)
    CHECK(seen[r] == 1, "rank %d's pair landed %d times", r, seen[r]);
  OK(MPI_Barrier(MPI_COMM_WORLD));
  if (rank == size - 1) {
    int one = 77;
    OK(MPI_File_iwrite_shared(fh, &one, 1, MPI_INT, &req0));
    OK(MPI_Wait(&req0, &st));
  }
  OK(MPI_Barrier(MPI_COMM_WORLD));
  OK(MPI_File_get_position_shared(fh, &pos));
  CHECK(pos == (MPI_Offset)((2 * size + 1) * sizeof(int)),
        "shared pointer after one rank's write: %lld", (long long)pos);
  OK(MPI_File_seek_shared(fh, (MPI_Offset)(2 * size * sizeof(int)), MPI_SEEK_SET));
  if (rank == 0) {
    int one = -1;
    OK(MPI_File_read_shared(fh, &one, 1, MPI_INT, &st));
    CHECK(one == 77, "read_shared of the last rank's int: %d", one);
  }

  /* Nonblocking and split collectives. */
  MPI_Request req;
  int first_int = -1;
  int v = 4242 + rank, w = 0;
  MPI_Offset spot = (MPI_Offset)(4 * N * size + rank) * sizeof(int);
  OK(MPI_File_iwrite_at(fh, spot, &v, 1, MPI_INT, &req));
  OK(MPI_Wait(&req, &st));
  CHECK(ints_of(&st) == 1, "iwrite_at moved %d", ints_of(&st));
  OK(MPI_File_iread_at_all(fh, spot, &w, 1, MPI_INT, &req));
  OK(MPI_Wait(&req, &st));
  CHECK(w == v && ints_of(&st) == 1, "iread_at_all: %d", w);
  v += 100;
  OK(MPI_File_write_at_all_begin(fh, spot, &v, 1, MPI_INT));
  EXPECT_ERR(MPI_File_write_at_all_begin(fh, spot, &v, 1, MPI_INT), MPI_ERR_OTHER, "split");
  OK(MPI_File_write_at_all_end(fh, &v, &st));
  OK(MPI_File_read_at_all_begin(fh, spot, &w, 1, MPI_INT));
  OK(MPI_File_read_at_all_end(fh, &w, &st));
  CHECK(w == v, "split collective read: %d", w);
  EXPECT_ERR(MPI_File_read_all_end(fh, &w, &st), MPI_ERR_OTHER, "no split collective");

  /* What an open file tells. */
  MPI_Group g, wg;
  int same = -1, flag = -1;
  OK(MPI_File_get_group(fh, &g));
  OK(MPI_Comm_group(MPI_COMM_WORLD, &wg));
  OK(MPI_Group_compare(g, wg, &same));
  CHECK(same == MPI_IDENT, "the file's group is not the world's");
  OK(MPI_Group_free(&g));
  OK(MPI_Group_free(&wg));
  OK(MPI_File_set_atomicity(fh, 1));
  OK(MPI_File_get_atomicity(fh, &flag));
  CHECK(flag == 1, "atomicity %d", flag);
  OK(MPI_File_write_at(fh, spot, &v, 1, MPI_INT, &st));
  OK(MPI_File_set_atomicity(fh, 0));
  MPI_Info info;
  OK(MPI_File_get_info(fh, &info));
  OK(MPI_Info_free(&info));
  MPI_Errhandler eh;
  OK(MPI_File_get_errhandler(fh, &eh));
  CHECK(eh == MPI_ERRORS_RETURN, "a file's default error handler");
  OK(MPI_File_call_errhandler(fh, MPI_ERR_IO));
  CHECK(MPI_File_f2c(MPI_File_c2f(fh)) == fh, "the Fortran handle round trip");
  MPI_Aint x = 0;
  OK(MPI_File_get_type_extent(fh, every_other, &x));
  CHECK(x == (MPI_Aint)((2 * N - 1) * sizeof(int)), "type extent %ld", (long)x);
  OK(MPI_File_read_at(fh, 0, &first_int, 1, MPI_INT, &st));
  OK(MPI_File_close(&fh));
  CHECK(fh == MPI_FILE_NULL, "close left the handle");

  /* It exists now: MPI_MODE_EXCL refuses it; read-only refuses writes. */
  EXPECT_ERR(MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_EXCL | MPI_MODE_WRONLY,
                           MPI_INFO_NULL, &fh),
             MPI_ERR_FILE_EXISTS, NULL);
  OK(MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_RDONLY, MPI_INFO_NULL, &fh));
  EXPECT_ERR(MPI_File_write_at(fh, 0, &v, 1, MPI_INT, &st), MPI_ERR_READ_ONLY, NULL);
  EXPECT_ERR(MPI_File_set_size(fh, 0), MPI_ERR_READ_ONLY, NULL);
  OK(MPI_File_read_at(fh, 0, &w, 1, MPI_INT, &st));
  CHECK(w == first_int, "the first int read only: %d, before %d", w, first_int);
  int next_int = -1;
  OK(MPI_File_read_at(fh, (MPI_Offset)((1 + rank) * sizeof(int)), &next_int, 1, MPI_INT, &st));
  EXPECT_ERR(MPI_File_set_view(fh, MPI_DISPLACEMENT_CURRENT, MPI_INT, MPI_INT, "native",
                               MPI_INFO_NULL),
             MPI_ERR_ARG, "MPI_MODE_SEQUENTIAL");
  /* A filetype's displacements are non-negative and never go back. */
  int lens[2] = {1, 1}, backwards[2][2] = {{-2, 2}, {3, 0}};
  for (int k = 0; k < 2; k++) {
    MPI_Datatype bad_view;
    OK(MPI_Type_indexed(2, lens, backwards[k], MPI_INT, &bad_view));
    OK(MPI_Type_commit(&bad_view));
    EXPECT_ERR(MPI_File_set_view(fh, 0, MPI_INT, bad_view, "native", MPI_INFO_NULL),
               MPI_ERR_IO, "non-decreasing");
    OK(MPI_Type_free(&bad_view));
  }
  /* A filetype whose runs overlap: a view of a file opened for reading only, not of
   * one opened for writing. */
  int olens[2] = {2, 1}, oat[2] = {0, 1};
  MPI_Datatype overlap;
  OK(MPI_Type_indexed(2, olens, oat, MPI_INT, &overlap));
  OK(MPI_Type_commit(&overlap));
  OK(MPI_File_set_view(fh, 0, MPI_INT, overlap, "native", MPI_INFO_NULL));
  OK(MPI_File_close(&fh));
  OK(MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_RDWR, MPI_INFO_NULL, &fh));
  EXPECT_ERR(MPI_File_set_view(fh, 0, MPI_INT, overlap, "native", MPI_INFO_NULL), MPI_ERR_IO,
             "overlaps");
  OK(MPI_Type_free(&overlap));
  OK(MPI_File_close(&fh));

  /* Sequential access: a view may start where the shared pointer is. */
  OK(MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_RDONLY | MPI_MODE_SEQUENTIAL, MPI_INFO_NULL,
                   &fh));
  if (rank == 0)
    OK(MPI_File_read_shared(fh, &w, 1, MPI_INT, &st));
  OK(MPI_Barrier(MPI_COMM_WORLD));
  OK(MPI_File_set_view(fh, MPI_DISPLACEMENT_CURRENT, MPI_INT, MPI_INT, "native", MPI_INFO_NULL));
  MPI_Offset view_disp = -1;
  MPI_Datatype view_etype, view_filetype;
  char view_rep[MPI_MAX_DATAREP_STRING];
  OK(MPI_File_get_view(fh, &view_disp, &view_etype, &view_filetype, view_rep));
  CHECK(view_disp == (MPI_Offset)sizeof(int), "MPI_DISPLACEMENT_CURRENT: displacement %lld",
        (long long)view_disp);
  w = -1;
  OK(MPI_File_read_ordered(fh, &w, 1, MPI_INT, &st));
  CHECK(w == next_int, "read in order after MPI_DISPLACEMENT_CURRENT: %d, expected %d", w,
        next_int);
  OK(MPI_File_close(&fh));

  test_external32(dir);
  test_datarep(dir);

  /* Deleted on close, by size and by MPI_File_delete. */
  OK(MPI_File_open(MPI_COMM_WORLD, other,
                   MPI_MODE_CREATE | MPI_MODE_WRONLY | MPI_MODE_DELETE_ON_CLOSE, MPI_INFO_NULL,
                   &fh));
  OK(MPI_File_preallocate(fh, 4096));
  OK(MPI_File_get_size(fh, &fsize));
  CHECK(fsize == 4096, "preallocated size %lld", (long long)fsize);
  OK(MPI_File_set_size(fh, 100));
  OK(MPI_File_get_size(fh, &fsize));
  CHECK(fsize == 100, "set size %lld", (long long)fsize);
  EXPECT_ERR(MPI_File_read_at(fh, 0, &w, 1, MPI_INT, &st), MPI_ERR_ACCESS, "write-only");
  OK(MPI_File_close(&fh));
  CHECK(!exists(other), "MPI_MODE_DELETE_ON_CLOSE left the file");
  OK(MPI_Barrier(MPI_COMM_WORLD));
  if (rank == 0) {
    OK(MPI_File_delete(path, MPI_INFO_NULL));
    EXPECT_ERR(MPI_File_delete(path, MPI_INFO_NULL), MPI_ERR_NO_SUCH_FILE, NULL);
    CHECK(rmdir(dir) == 0, "removing %s", dir);
  }
  OK(MPI_Type_free(&every_other));
  OK(MPI_Type_free(&strided));
  OK(MPI_Type_free(&one));
  return finish();
}
