/* datatype.c: datatypes at 2 or more ranks. The predefined types' sizes, extents
 * and names (the pair types laid out as C structs); every constructor
 * (contiguous, vector, hvector, indexed, hindexed, indexed_block, hindexed_block,
 * struct with C padding, resized, dup, negative strides, empty types, nesting)
 * with its size, bounds, true bounds, envelope and contents (the types in the
 * contents are new handles the caller frees); names; sending with one type and
 * receiving with another of the same signature (also MPI_PACKED); MPI_Pack,
 * MPI_Unpack and MPI_Pack_size round trips; MPI_Get_address, MPI_Aint_add and
 * MPI_Aint_diff; absolute addresses with MPI_BOTTOM; MPI_Get_elements of derived
 * types. */
#include "check.h"
#include <stddef.h>

static void expect_layout(MPI_Datatype t, int tsize, MPI_Aint lb, MPI_Aint extent,
                          MPI_Aint true_lb, MPI_Aint true_extent, const char *what) {
  int s = -1;
  MPI_Count sc = -1;
  MPI_Aint l = -1, e = -1, tl = -1, te = -1;
  OK(MPI_Type_size(t, &s));
  OK(MPI_Type_size_c(t, &sc));
  OK(MPI_Type_get_extent(t, &l, &e));
  OK(MPI_Type_get_true_extent(t, &tl, &te));
  CHECK(s == tsize && sc == tsize, "%s: size %d (size_c %lld), expected %d", what,
        s, (long long)sc, tsize);
  CHECK(l == lb && e == extent, "%s: lb %ld extent %ld, expected %ld %ld", what,
        (long)l, (long)e, (long)lb, (long)extent);
  CHECK(tl == true_lb && te == true_extent,
        "%s: true lb %ld true extent %ld, expected %ld %ld", what, (long)tl,
        (long)te, (long)true_lb, (long)true_extent);
}

static void expect_name(MPI_Datatype t, const char *name) {
  char got[MPI_MAX_OBJECT_NAME];
  int len = -1;
  OK(MPI_Type_get_name(t, got, &len));
  CHECK(strcmp(got, name) == 0 && len == (int)strlen(name),
        "type name \"%s\" (length %d), expected \"%s\"", got, len, name);
}

/* The envelope of `t`, and its contents compared with what is expected. The
 * derived types among the contents are freed, as the standard asks. */
static void expect_contents(MPI_Datatype t, int combiner, int ni, const int *ints,
                            int na, const MPI_Aint *addrs, int nd,
                            const MPI_Datatype *types, const char *what) {
  int gi = -1, ga = -1, gd = -1, gc = -1;
  OK(MPI_Type_get_envelope(t, &gi, &ga, &gd, &gc));
  CHECK(gc == combiner && gi == ni && ga == na && gd == nd,
        "%s: envelope combiner %d (%d ints, %d addresses, %d types), expected %d "
        "(%d, %d, %d)",
        what, gc, gi, ga, gd, combiner, ni, na, nd);
  int gints[32];
  MPI_Aint gaddrs[32];
  MPI_Datatype gtypes[32];
  OK(MPI_Type_get_contents(t, ni, na, nd, gints, gaddrs, gtypes));
  for (int i = 0; i < ni; i++)
    CHECK(gints[i] == ints[i], "%s: integer %d of the contents is %d, expected %d",
          what, i, gints[i], ints[i]);
  for (int i = 0; i < na; i++)
    CHECK(gaddrs[i] == addrs[i], "%s: address %d of the contents is %ld, expected %ld",
          what, i, (long)gaddrs[i], (long)addrs[i]);
  for (int i = 0; i < nd; i++) {
    int e_ni, e_na, e_nd, e_comb, want_ni, want_na, want_nd, want_comb;
    OK(MPI_Type_get_envelope(gtypes[i], &e_ni, &e_na, &e_nd, &e_comb));
    OK(MPI_Type_get_envelope(types[i], &want_ni, &want_na, &want_nd, &want_comb));
    CHECK(e_comb == want_comb && e_ni == want_ni && e_na == want_na && e_nd == want_nd,
          "%s: type %d of the contents is not the one it was made from", what, i);
    int s1, s2;
    OK(MPI_Type_size(gtypes[i], &s1));
    OK(MPI_Type_size(types[i], &s2));
    CHECK(s1 == s2, "%s: type %d of the contents has size %d, not %d", what, i, s1, s2);
    if (e_comb == MPI_COMBINER_NAMED)
      CHECK(gtypes[i] == types[i], "%s: the predefined type %d is another handle",
            what, i);
    else
      OK(MPI_Type_free(&gtypes[i]));
  }
}

/* The contents of `t`, made of integers and one older type `old`. */
static void expect_int_contents(MPI_Datatype t, int combiner, int ni, const int *ints,
                                MPI_Datatype old, const char *what) {
  expect_contents(t, combiner, ni, ints, 0, NULL, 1, &old, what);
}

static void test_predefined(void) {
  struct di { double d; int i; };
  struct si { short s; int i; };
  struct li { long l; int i; };
  struct fi { float f; int i; };
  expect_layout(MPI_INT, 4, 0, 4, 0, 4, "MPI_INT");
  expect_layout(MPI_DOUBLE, 8, 0, 8, 0, 8, "MPI_DOUBLE");
  expect_layout(MPI_CHAR, 1, 0, 1, 0, 1, "MPI_CHAR");
  expect_layout(MPI_2INT, 8, 0, 8, 0, 8, "MPI_2INT");
  expect_layout(MPI_DOUBLE_INT, 12, 0, sizeof(struct di), 0, 12, "MPI_DOUBLE_INT");
  expect_layout(MPI_SHORT_INT, 6, 0, sizeof(struct si), 0, 8, "MPI_SHORT_INT");
  expect_layout(MPI_LONG_INT, 12, 0, sizeof(struct li), 0, 12, "MPI_LONG_INT");
  expect_layout(MPI_FLOAT_INT, 8, 0, sizeof(struct fi), 0, 8, "MPI_FLOAT_INT");
  expect_layout(MPI_INT64_T, 8, 0, 8, 0, 8, "MPI_INT64_T");
  expect_layout(MPI_C_DOUBLE_COMPLEX, 16, 0, 16, 0, 16, "MPI_C_DOUBLE_COMPLEX");
  expect_layout(MPI_AINT, sizeof(MPI_Aint), 0, sizeof(MPI_Aint), 0, sizeof(MPI_Aint),
                "MPI_AINT");
  expect_name(MPI_INT, "MPI_INT");
  expect_name(MPI_DOUBLE_INT, "MPI_DOUBLE_INT");
  expect_name(MPI_UNSIGNED_LONG, "MPI_UNSIGNED_LONG");
  /* One handle, two names: the standard's first. */
  expect_name(MPI_LONG_LONG, "MPI_LONG_LONG_INT");
  expect_name(MPI_C_FLOAT_COMPLEX, "MPI_C_COMPLEX");
  int ni, na, nd, comb;
  OK(MPI_Type_get_envelope(MPI_FLOAT, &ni, &na, &nd, &comb));
  CHECK(comb == MPI_COMBINER_NAMED && ni == 0 && na == 0 && nd == 0,
        "MPI_FLOAT's envelope: combiner %d", comb);
  MPI_Datatype t = MPI_INT;
  OK(MPI_Type_commit(&t));
  CHECK(t == MPI_INT, "committing MPI_INT changed its handle");
}

static void test_constructors(void) {
  MPI_Datatype t, u;
  /* contiguous */
  OK(MPI_Type_contiguous(5, MPI_INT, &t));
  expect_layout(t, 20, 0, 20, 0, 20, "contiguous(5, MPI_INT)");
  expect_int_contents(t, MPI_COMBINER_CONTIGUOUS, 1, (int[]){5}, MPI_INT, "contiguous");
  OK(MPI_Type_free(&t));
  /* vector: 3 blocks of 2 ints, 4 ints apart */
  OK(MPI_Type_vector(3, 2, 4, MPI_INT, &t));
  expect_layout(t, 24, 0, 40, 0, 40, "vector(3, 2, 4, MPI_INT)");
  expect_int_contents(t, MPI_COMBINER_VECTOR, 3, (int[]){3, 2, 4}, MPI_INT, "vector");
  /* A vector of vectors: the contents name the inner vector. */
  OK(MPI_Type_contiguous(2, t, &u));
  expect_layout(u, 48, 0, 80, 0, 80, "contiguous(2, vector)");
  {
    expect_int_contents(u, MPI_COMBINER_CONTIGUOUS, 1, (int[]){2}, t,
                        "contiguous(2, vector)");
    /* The inner type may be freed: the outer stays whole, and its contents still
     * give a type of the inner's layout. */
    MPI_Datatype inner = t;
    int ni, na, nd, comb;
    OK(MPI_Type_free(&t));
    MPI_Datatype got;
    int gi[1];
    OK(MPI_Type_get_envelope(u, &ni, &na, &nd, &comb));
    OK(MPI_Type_get_contents(u, 1, 0, 1, gi, NULL, &got));
    expect_layout(got, 24, 0, 40, 0, 40, "the contents of a type whose inner type was freed");
    OK(MPI_Type_free(&got));
    (void)inner;
  }
  expect_layout(u, 48, 0, 80, 0, 80, "contiguous(2, vector) once the vector is freed");
  OK(MPI_Type_free(&u));
  /* negative stride: from the start, back two ints at a time */
  OK(MPI_Type_vector(3, 1, -2, MPI_INT, &t));
  expect_layout(t, 12, -16, 20, -16, 20, "vector(3, 1, -2, MPI_INT)");
  OK(MPI_Type_free(&t));
  /* hvector: 3 blocks of 2 ints, 20 bytes apart */
  OK(MPI_Type_create_hvector(3, 2, 20, MPI_INT, &t));
  expect_layout(t, 24, 0, 48, 0, 48, "hvector(3, 2, 20, MPI_INT)");
  {
    int ints[] = {3, 2};
    MPI_Aint addrs[] = {20};
    MPI_Datatype types[] = {MPI_INT};
    expect_contents(t, MPI_COMBINER_HVECTOR, 2, ints, 1, addrs, 1, types, "hvector");
  }
  OK(MPI_Type_free(&t));
  /* indexed */
  {
    int lens[] = {2, 1, 3}, displs[] = {0, 4, 7};
    OK(MPI_Type_indexed(3, lens, displs, MPI_INT, &t));
    expect_layout(t, 24, 0, 40, 0, 40, "indexed");
    int ints[] = {3, 2, 1, 3, 0, 4, 7};
    expect_int_contents(t, MPI_COMBINER_INDEXED, 7, ints, MPI_INT, "indexed");
    OK(MPI_Type_free(&t));
  }
  /* hindexed */
  {
    int lens[] = {1, 2};
    MPI_Aint displs[] = {4, 16};
    OK(MPI_Type_create_hindexed(2, lens, displs, MPI_INT, &t));
    expect_layout(t, 12, 4, 20, 4, 20, "hindexed");
    int ints[] = {2, 1, 2};
    MPI_Datatype types[] = {MPI_INT};
    expect_contents(t, MPI_COMBINER_HINDEXED, 3, ints, 2, displs, 1, types, "hindexed");
    OK(MPI_Type_free(&t));
  }
  /* indexed_block */
  {
    int displs[] = {1, 5, 8};
    OK(MPI_Type_create_indexed_block(3, 1, displs, MPI_INT, &t));
    expect_layout(t, 12, 4, 32, 4, 32, "indexed_block");
    int ints[] = {3, 1, 1, 5, 8};
    expect_int_contents(t, MPI_COMBINER_INDEXED_BLOCK, 5, ints, MPI_INT, "indexed_block");
    OK(MPI_Type_free(&t));
  }
  /* hindexed_block, its blocks out of address order: packed in type-map order */
  {
    MPI_Aint displs[] = {8, 0};
    OK(MPI_Type_create_hindexed_block(2, 1, displs, MPI_DOUBLE, &t));
    OK(MPI_Type_commit(&t));
    expect_layout(t, 16, 0, 16, 0, 16, "hindexed_block");
    int ints[] = {2, 1};
    MPI_Datatype types[] = {MPI_DOUBLE};
    expect_contents(t, MPI_COMBINER_HINDEXED_BLOCK, 2, ints, 2, displs, 1, types,
                    "hindexed_block");
    double in[2] = {1.5, 2.5}, out[2];
    char packed[64];
    int pos = 0;
    OK(MPI_Pack(in, 1, t, packed, sizeof packed, &pos, MPI_COMM_SELF));
    CHECK(pos == 16, "packing an hindexed_block: position %d", pos);
    memcpy(out, packed, 16);
    CHECK(out[0] == 2.5 && out[1] == 1.5,
          "hindexed_block packed as %g %g, expected the type map's order 2.5 1.5",
          out[0], out[1]);
    OK(MPI_Type_free(&t));
  }
  /* An empty block leaves the bounds alone; a negative displacement moves them. */
  {
    int lens[] = {0, 2}, displs[] = {5, -2};
    OK(MPI_Type_indexed(2, lens, displs, MPI_INT, &t));
    expect_layout(t, 8, -8, 8, -8, 8, "indexed with an empty block");
    OK(MPI_Type_free(&t));
  }
  /* empty */
  OK(MPI_Type_contiguous(0, MPI_INT, &t));
  expect_layout(t, 0, 0, 0, 0, 0, "contiguous(0, MPI_INT)");
  OK(MPI_Type_free(&t));
  OK(MPI_Type_vector(3, 0, 5, MPI_INT, &t));
  expect_layout(t, 0, 0, 0, 0, 0, "vector(3, 0, 5, MPI_INT)");
  OK(MPI_Type_free(&t));
  /* resized */
  OK(MPI_Type_create_resized(MPI_INT, -4, 12, &t));
  expect_layout(t, 4, -4, 12, 0, 4, "resized(MPI_INT, -4, 12)");
  {
    MPI_Aint addrs[] = {-4, 12};
    MPI_Datatype types[] = {MPI_INT};
    expect_contents(t, MPI_COMBINER_RESIZED, 0, NULL, 2, addrs, 1, types, "resized");
  }
  OK(MPI_Type_free(&t));
  /* dup */
  OK(MPI_Type_vector(2, 1, 3, MPI_DOUBLE, &u));
  OK(MPI_Type_dup(u, &t));
  expect_layout(t, 16, 0, 32, 0, 32, "dup of a vector");
  {
    MPI_Datatype types[] = {u};
    expect_contents(t, MPI_COMBINER_DUP, 0, NULL, 0, NULL, 1, types, "dup");
  }
  expect_layout(u, 16, 0, 32, 0, 32, "a vector after its dup's contents were freed");
  OK(MPI_Type_free(&t));
  OK(MPI_Type_free(&u));
  OK(MPI_Type_dup(MPI_INT, &t));
  expect_layout(t, 4, 0, 4, 0, 4, "dup of MPI_INT");
  {
    MPI_Datatype types[] = {MPI_INT};
    expect_contents(t, MPI_COMBINER_DUP, 0, NULL, 0, NULL, 1, types, "dup of MPI_INT");
  }
  OK(MPI_Type_free(&t));
}

struct cdi {
  char c;
  double d;
  int i;
};

/* The MPI type of struct cdi. */
static MPI_Datatype cdi_type(void) {
  MPI_Datatype t;
  int lens[] = {1, 1, 1};
  MPI_Aint displs[] = {offsetof(struct cdi, c), offsetof(struct cdi, d),
                       offsetof(struct cdi, i)};
  MPI_Datatype types[] = {MPI_CHAR, MPI_DOUBLE, MPI_INT};
  OK(MPI_Type_create_struct(3, lens, displs, types, &t));
  OK(MPI_Type_commit(&t));
  return t;
}

static void test_struct(void) {
  MPI_Datatype t = cdi_type();
  expect_layout(t, 13, 0, sizeof(struct cdi), 0, offsetof(struct cdi, i) + 4,
                "struct {char; double; int}");
  {
    int ints[] = {3, 1, 1, 1};
    MPI_Aint addrs[] = {offsetof(struct cdi, c), offsetof(struct cdi, d),
                        offsetof(struct cdi, i)};
    MPI_Datatype types[] = {MPI_CHAR, MPI_DOUBLE, MPI_INT};
    expect_contents(t, MPI_COMBINER_STRUCT, 4, ints, 3, addrs, 3, types, "struct");
  }
  struct ic {
    int a;
    char b;
  };
  MPI_Datatype u;
  int lens[] = {1, 1};
  MPI_Aint displs[] = {0, 4};
  MPI_Datatype types[] = {MPI_INT, MPI_CHAR};
  OK(MPI_Type_create_struct(2, lens, displs, types, &u));
  expect_layout(u, 5, 0, sizeof(struct ic), 0, 5, "struct {int; char}");
  OK(MPI_Type_free(&u));

  /* An array of structs, and a vector of them, between two ranks. */
  MPI_Status st;
  struct cdi a[4];
  if (rank == 0) {
    for (int k = 0; k < 4; k++) {
      memset(&a[k], 0x55, sizeof a[k]);
      a[k].c = 'a' + k;
      a[k].d = k + 0.25;
      a[k].i = -k;
    }
    OK(MPI_Send(a, 4, t, 1, 1, MPI_COMM_WORLD));
    MPI_Datatype every_other;
    OK(MPI_Type_create_hvector(2, 1, 2 * sizeof(struct cdi), t, &every_other));
    OK(MPI_Type_commit(&every_other));
    OK(MPI_Send(a, 1, every_other, 1, 2, MPI_COMM_WORLD));
    OK(MPI_Type_free(&every_other));
  } else if (rank == 1) {
    memset(a, 0, sizeof a);
    OK(MPI_Recv(a, 4, t, 0, 1, MPI_COMM_WORLD, &st));
    for (int k = 0; k < 4; k++)
      CHECK(a[k].c == 'a' + k && a[k].d == k + 0.25 && a[k].i == -k,
            "struct %d arrived as {%c, %g, %d}", k, a[k].c, a[k].d, a[k].i);
    int n = -1;
    OK(MPI_Get_elements(&st, t, &n));
    CHECK(n == 12, "MPI_Get_elements of 4 structs of 3: %d", n);
    /* A message that ends inside a struct: its basic elements to there, or
     * MPI_UNDEFINED where it ends inside one of them (char, double, int: 13 bytes). */
    MPI_Status part = st;
    int ends[][2] = {{13 + 1, 4}, {13 + 9, 5}, {13 + 5, MPI_UNDEFINED}, {2 * 13, 6},
                     {13 + 10, MPI_UNDEFINED}};
    for (int k = 0; k < 5; k++) {
      OK(MPI_Status_set_elements(&part, MPI_BYTE, ends[k][0]));
      OK(MPI_Get_elements(&part, t, &n));
      CHECK(n == ends[k][1], "MPI_Get_elements of %d bytes of structs: %d, not %d", ends[k][0],
            n, ends[k][1]);
    }
    memset(a, 0, sizeof a);
    OK(MPI_Recv(a, 2, t, 0, 2, MPI_COMM_WORLD, &st));
    CHECK(a[0].c == 'a' && a[1].c == 'c' && a[1].d == 2.25 && a[1].i == -2,
          "a vector of structs arrived as {%c}, {%c, %g, %d}", a[0].c, a[1].c,
          a[1].d, a[1].i);
  }
  OK(MPI_Type_free(&t));
}

/* One type at the sender, another of the same signature at the receiver. */
static void test_signatures(void) {
  MPI_Status st;
  MPI_Datatype vec, idx, cdi = cdi_type(), packed13;
  OK(MPI_Type_vector(3, 2, 4, MPI_INT, &vec));
  OK(MPI_Type_commit(&vec));
  int lens[] = {2, 1, 3}, displs[] = {0, 4, 7};
  OK(MPI_Type_indexed(3, lens, displs, MPI_INT, &idx));
  OK(MPI_Type_commit(&idx));
  {
    /* char, double, int at 0, 1, 9: the struct's signature, without padding. */
    int blens[] = {1, 1, 1};
    MPI_Aint bdispls[] = {0, 1, 9};
    MPI_Datatype btypes[] = {MPI_CHAR, MPI_DOUBLE, MPI_INT}, tight;
    OK(MPI_Type_create_struct(3, blens, bdispls, btypes, &tight));
    OK(MPI_Type_create_resized(tight, 0, 13, &packed13));
    OK(MPI_Type_commit(&packed13));
    OK(MPI_Type_free(&tight));
    expect_layout(packed13, 13, 0, 13, 0, 13, "a struct without padding");
  }
  if (rank == 0) {
    int src[12];
    for (int i = 0; i < 12; i++)
      src[i] = i;
    OK(MPI_Send(src, 1, vec, 1, 10, MPI_COMM_WORLD));
    OK(MPI_Send(src, 6, MPI_INT, 1, 11, MPI_COMM_WORLD));
    struct cdi s[2] = {{'x', 1.5, 7}, {'y', -2.5, 8}};
    OK(MPI_Send(s, 2, cdi, 1, 12, MPI_COMM_WORLD));
    /* Packed at the sender, typed at the receiver, and the other way. */
    char buf[256];
    int pos = 0;
    OK(MPI_Pack(s, 2, cdi, buf, sizeof buf, &pos, MPI_COMM_WORLD));
    OK(MPI_Send(buf, pos, MPI_PACKED, 1, 13, MPI_COMM_WORLD));
    OK(MPI_Send(s, 2, cdi, 1, 14, MPI_COMM_WORLD));
  } else if (rank == 1) {
    int got[12];
    OK(MPI_Recv(got, 6, MPI_INT, 0, 10, MPI_COMM_WORLD, &st));
    int want[] = {0, 1, 4, 5, 8, 9};
    for (int i = 0; i < 6; i++)
      CHECK(got[i] == want[i], "vector to contiguous: int %d is %d, expected %d", i,
            got[i], want[i]);
    for (int i = 0; i < 12; i++)
      got[i] = -1;
    OK(MPI_Recv(got, 1, idx, 0, 11, MPI_COMM_WORLD, &st));
    int placed[] = {0, 1, -1, -1, 2, -1, -1, 3, 4, 5};
    for (int i = 0; i < 10; i++)
      CHECK(got[i] == placed[i], "contiguous to indexed: int %d is %d, expected %d",
            i, got[i], placed[i]);
    unsigned char tight[26];
    OK(MPI_Recv(tight, 2, packed13, 0, 12, MPI_COMM_WORLD, &st));
    for (int k = 0; k < 2; k++) {
      char c;
      double d;
      int i;
      memcpy(&c, tight + 13 * k, 1);
      memcpy(&d, tight + 13 * k + 1, 8);
      memcpy(&i, tight + 13 * k + 9, 4);
      CHECK(c == "xy"[k] && d == (k ? -2.5 : 1.5) && i == 7 + k,
            "padded struct to unpadded: element %d is {%c, %g, %d}", k, c, d, i);
    }
    struct cdi s[2];
    memset(s, 0, sizeof s);
    OK(MPI_Recv(s, 2, cdi, 0, 13, MPI_COMM_WORLD, &st));
    CHECK(s[0].c == 'x' && s[1].d == -2.5 && s[1].i == 8,
          "MPI_PACKED to typed: {%c}, {%g, %d}", s[0].c, s[1].d, s[1].i);
    char buf[256];
    OK(MPI_Recv(buf, sizeof buf, MPI_PACKED, 0, 14, MPI_COMM_WORLD, &st));
    int n = -1, pos = 0;
    OK(MPI_Get_count(&st, MPI_PACKED, &n));
    CHECK(n == 26, "typed to MPI_PACKED: %d bytes", n);
    memset(s, 0, sizeof s);
    OK(MPI_Unpack(buf, n, &pos, s, 2, cdi, MPI_COMM_WORLD));
    CHECK(pos == 26 && s[1].c == 'y' && s[0].d == 1.5 && s[0].i == 7,
          "typed to MPI_PACKED, unpacked: position %d, {%c}, {%g, %d}", pos,
          s[1].c, s[0].d, s[0].i);
  }
  OK(MPI_Type_free(&vec));
  OK(MPI_Type_free(&idx));
  OK(MPI_Type_free(&cdi));
  OK(MPI_Type_free(&packed13));
}

static void test_pack(void) {
  MPI_Datatype cdi = cdi_type(), vec;
  OK(MPI_Type_vector(4, 1, 3, MPI_DOUBLE, &vec));
  OK(MPI_Type_commit(&vec));
  int n3 = -1, s1 = -1, s2 = -1, s3 = -1;
  OK(MPI_Pack_size(1, MPI_INT, MPI_COMM_WORLD, &s1));
  OK(MPI_Pack_size(1, vec, MPI_COMM_WORLD, &s2));
  OK(MPI_Pack_size(3, cdi, MPI_COMM_WORLD, &s3));
  CHECK(s1 >= 4 && s2 >= 32 && s3 >= 39, "MPI_Pack_size: %d %d %d", s1, s2, s3);
  int total = s1 + s2 + s3;
  char *buf = malloc(total);
  int count = 3, pos = 0;
  double grid[12];
  for (int i = 0; i < 12; i++)
    grid[i] = i * 1.5;
  struct cdi s[3] = {{'p', 0.5, 1}, {'q', 1.5, 2}, {'r', 2.5, 3}};
  OK(MPI_Pack(&count, 1, MPI_INT, buf, total, &pos, MPI_COMM_WORLD));
  OK(MPI_Pack(grid, 1, vec, buf, total, &pos, MPI_COMM_WORLD));
  OK(MPI_Pack(s, 3, cdi, buf, total, &pos, MPI_COMM_WORLD));
  CHECK(pos <= total, "packed %d bytes, more than MPI_Pack_size's %d", pos, total);
  int end = pos;
  double back[12];
  struct cdi t[3];
  for (int i = 0; i < 12; i++)
    back[i] = -1;
  memset(t, 0, sizeof t);
  pos = 0;
  n3 = 0;
  OK(MPI_Unpack(buf, end, &pos, &n3, 1, MPI_INT, MPI_COMM_WORLD));
  OK(MPI_Unpack(buf, end, &pos, back, 1, vec, MPI_COMM_WORLD));
  OK(MPI_Unpack(buf, end, &pos, t, n3, cdi, MPI_COMM_WORLD));
  CHECK(pos == end && n3 == 3, "unpacked to %d of %d, count %d", pos, end, n3);
  for (int i = 0; i < 12; i++)
    CHECK(back[i] == (i % 3 ? -1 : i * 1.5), "unpacked vector: element %d is %g",
          i, back[i]);
  for (int k = 0; k < 3; k++)
    CHECK(t[k].c == s[k].c && t[k].d == s[k].d && t[k].i == s[k].i,
          "unpacked struct %d: {%c, %g, %d}", k, t[k].c, t[k].d, t[k].i);
  free(buf);
  OK(MPI_Type_free(&cdi));
  OK(MPI_Type_free(&vec));
}

static void test_addresses(void) {
  double a[10];
  MPI_Aint a0, a3, a9;
  OK(MPI_Get_address(&a[0], &a0));
  OK(MPI_Get_address(&a[3], &a3));
  OK(MPI_Get_address(&a[9], &a9));
  CHECK(MPI_Aint_diff(a3, a0) == 3 * (MPI_Aint)sizeof(double),
        "MPI_Aint_diff: %ld", (long)MPI_Aint_diff(a3, a0));
  CHECK(MPI_Aint_add(a0, 9 * sizeof(double)) == a9, "MPI_Aint_add");
  CHECK(MPI_Aint_add(a9, MPI_Aint_diff(a0, a9)) == a0, "MPI_Aint_add of a negative");

  /* Absolute addresses with MPI_BOTTOM: three separate variables. */
  int x;
  double y[3];
  char z;
  MPI_Aint addrs[3];
  OK(MPI_Get_address(&x, &addrs[0]));
  OK(MPI_Get_address(y, &addrs[1]));
  OK(MPI_Get_address(&z, &addrs[2]));
  int lens[] = {1, 3, 1};
  MPI_Datatype types[] = {MPI_INT, MPI_DOUBLE, MPI_CHAR}, abs;
  OK(MPI_Type_create_struct(3, lens, addrs, types, &abs));
  OK(MPI_Type_commit(&abs));
  MPI_Status st;
  if (rank == 0) {
    x = 17;
    y[0] = 0.5;
    y[1] = 1.5;
    y[2] = 2.5;
    z = 'z';
    OK(MPI_Send(MPI_BOTTOM, 1, abs, 1, 20, MPI_COMM_WORLD));
    MPI_Request r;
    OK(MPI_Isend(MPI_BOTTOM, 1, abs, 1, 21, MPI_COMM_WORLD, &r));
    OK(MPI_Wait(&r, &st));
  } else if (rank == 1) {
    x = 0;
    y[0] = y[1] = y[2] = 0;
    z = 0;
    OK(MPI_Recv(MPI_BOTTOM, 1, abs, 0, 20, MPI_COMM_WORLD, &st));
    CHECK(x == 17 && y[0] == 0.5 && y[2] == 2.5 && z == 'z',
          "MPI_BOTTOM: got %d %g %g %c", x, y[0], y[2], z);
    x = 0;
    z = 0;
    MPI_Request r;
    OK(MPI_Irecv(MPI_BOTTOM, 1, abs, 0, 21, MPI_COMM_WORLD, &r));
    OK(MPI_Wait(&r, &st));
    CHECK(x == 17 && y[1] == 1.5 && z == 'z', "MPI_BOTTOM, nonblocking: got %d %g %c",
          x, y[1], z);
  }
  OK(MPI_Type_free(&abs));
}

static void test_names(void) {
  MPI_Datatype t;
  OK(MPI_Type_contiguous(2, MPI_INT, &t));
  expect_name(t, "");
  OK(MPI_Type_set_name(t, "pair of ints"));
  expect_name(t, "pair of ints");
  OK(MPI_Type_set_name(t, "renamed"));
  expect_name(t, "renamed");
  OK(MPI_Type_free(&t));
}

/* Odd layouts through the message layer: negative strides, resized types. */
static void test_transfers(void) {
  MPI_Status st;
  MPI_Datatype back, spaced, empty;
  OK(MPI_Type_vector(3, 1, -2, MPI_INT, &back));
  OK(MPI_Type_commit(&back));
  OK(MPI_Type_create_resized(MPI_INT, 0, 8, &spaced));
  OK(MPI_Type_commit(&spaced));
  OK(MPI_Type_contiguous(0, MPI_INT, &empty));
  OK(MPI_Type_commit(&empty));
  if (rank == 0) {
    int b[5] = {10, 11, 12, 13, 14};
    /* From b[4] backwards: 14, 12, 10. */
    OK(MPI_Send(&b[4], 1, back, 1, 30, MPI_COMM_WORLD));
    OK(MPI_Send(b, 3, MPI_INT, 1, 31, MPI_COMM_WORLD));
    OK(MPI_Send(b, 4, empty, 1, 32, MPI_COMM_WORLD));
  } else if (rank == 1) {
    int got[6] = {-1, -1, -1, -1, -1, -1};
    OK(MPI_Recv(got, 3, MPI_INT, 0, 30, MPI_COMM_WORLD, &st));
    CHECK(got[0] == 14 && got[1] == 12 && got[2] == 10,
          "a negative stride: %d %d %d", got[0], got[1], got[2]);
    for (int i = 0; i < 6; i++)
      got[i] = -1;
    OK(MPI_Recv(got, 3, spaced, 0, 31, MPI_COMM_WORLD, &st));
    CHECK(got[0] == 10 && got[1] == -1 && got[2] == 11 && got[4] == 12 && got[5] == -1,
          "a resized int: %d %d %d %d %d", got[0], got[1], got[2], got[4], got[5]);
    int n = -1;
    OK(MPI_Get_count(&st, spaced, &n));
    CHECK(n == 3, "MPI_Get_count of resized ints: %d", n);
    OK(MPI_Recv(got, 1, MPI_INT, 0, 32, MPI_COMM_WORLD, &st));
    OK(MPI_Get_count(&st, MPI_INT, &n));
    CHECK(n == 0, "a message of empty elements holds %d ints", n);
  }
  OK(MPI_Type_free(&back));
  OK(MPI_Type_free(&spaced));
  OK(MPI_Type_free(&empty));
}

int main(int argc, char **argv) {
  start("datatype", &argc, &argv);
  CHECK(size >= 2, "datatype needs 2 ranks or more, not %d", size);
  test_predefined();
  test_constructors();
  test_struct();
  test_signatures();
  test_pack();
  test_addresses();
  test_names();
  test_transfers();
  OK(MPI_Barrier(MPI_COMM_WORLD));
  return finish();
}
