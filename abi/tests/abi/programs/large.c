/* large.c: the large-count bindings (MPI_X_c) at any number of ranks (run at 1 to
 * 3), each checked against what its int twin gives: point-to-point (blocking,
 * nonblocking, probed and received), MPI_Get_count_c, collectives (MPI_Bcast_c,
 * MPI_Allreduce_c, MPI_Allgather_c and its persistent form), datatypes
 * (MPI_Type_contiguous_c, MPI_Type_vector_c, MPI_Type_create_resized_c,
 * MPI_Type_get_extent_c), packing (MPI_Pack_c and MPI_Unpack_c moving the position
 * both ways, MPI_Pack_size_c), one-sided (MPI_Win_allocate_c, MPI_Put_c, MPI_Get_c,
 * MPI_Accumulate_c, MPI_Win_shared_query_c). The forms with arrays of counts:
 * the vector collectives (blocking, nonblocking and persistent; MPI_IN_PLACE and
 * rooted ones with the arrays that are not significant left NULL), a neighbourhood
 * one on a ring, and the type constructors, each against its int twin (with
 * MPI_Type_get_envelope_c and MPI_Type_get_contents_c, whose large counts are the
 * twin's integers and addresses; the int forms refuse such a type). A count beyond int in a
 * nonblocking reduction, or negative, is refused with MPI_ERR_COUNT, naming the
 * limit, or the array entry. Types of very many runs of bytes (up to 2^30). */
#include "check.h"
#include <limits.h>

static void test_p2p(void) {
  int right = (rank + 1) % size, left = (rank + size - 1) % size;
  int out[5] = {rank, rank + 1, rank + 2, rank + 3, rank + 4}, in[5] = {0};
  MPI_Count count = -1;
  MPI_Status st;
  MPI_Request r[2];
  int in2[5] = {0};
  OK(MPI_Irecv_c(in2, (MPI_Count)5, MPI_INT, left, 4, MPI_COMM_WORLD, &r[0]));
  OK(MPI_Isend_c(out, (MPI_Count)5, MPI_INT, right, 4, MPI_COMM_WORLD, &r[1]));
  OK(MPI_Waitall(2, r, MPI_STATUSES_IGNORE));
  for (int i = 0; i < 5; i++)
    CHECK(in2[i] == left + i, "MPI_Irecv_c: element %d is %d", i, in2[i]);
  if (size > 1 && rank == 0)
    OK(MPI_Send_c(out, (MPI_Count)3, MPI_INT, 1, 5, MPI_COMM_WORLD));
  if (size > 1 && rank == 1) {
    OK(MPI_Recv_c(in, (MPI_Count)5, MPI_INT, 0, 5, MPI_COMM_WORLD, &st));
    OK(MPI_Get_count_c(&st, MPI_INT, &count));
    CHECK(count == 3, "MPI_Get_count_c: %lld", (long long)count);
    OK(MPI_Get_elements_c(&st, MPI_INT, &count));
    CHECK(count == 3 && in[2] == 2, "MPI_Get_elements_c: %lld", (long long)count);
  }
  /* Beyond int in a nonblocking reduction (whose operation takes basic elements):
   * refused, naming the limit; a negative count below int too (bigcount.c moves
   * and reduces counts beyond int). */
  errors_return(MPI_COMM_WORLD, 1);
  MPI_Request never;
  EXPECT_ERR(MPI_Iallreduce_c(MPI_IN_PLACE, out, (MPI_Count)1 << 31, MPI_INT, MPI_SUM,
                              MPI_COMM_WORLD, &never),
             MPI_ERR_COUNT, "2,147,483,647");
  EXPECT_ERR(MPI_Send_c(out, -((MPI_Count)1 << 32), MPI_INT, right, 6, MPI_COMM_WORLD),
             MPI_ERR_COUNT, "negative");
  errors_return(MPI_COMM_WORLD, 0);
}

static void test_coll(void) {
  int v[3] = {rank, 2 * rank, 3 * rank}, sum[3], all[64];
  OK(MPI_Allreduce_c(v, sum, (MPI_Count)3, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
  int s = size * (size - 1) / 2;
  CHECK(sum[0] == s && sum[1] == 2 * s && sum[2] == 3 * s, "MPI_Allreduce_c: %d %d %d", sum[0],
        sum[1], sum[2]);
  int b[2] = {rank == 0 ? 77 : 0, rank == 0 ? 78 : 0};
  OK(MPI_Bcast_c(b, (MPI_Count)2, MPI_INT, 0, MPI_COMM_WORLD));
  CHECK(b[0] == 77 && b[1] == 78, "MPI_Bcast_c: %d %d", b[0], b[1]);
  MPI_Request r;
  OK(MPI_Allgather_init_c(&rank, (MPI_Count)1, MPI_INT, all, (MPI_Count)1, MPI_INT,
                          MPI_COMM_WORLD, MPI_INFO_NULL, &r));
  OK(MPI_Start(&r));
  OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
  OK(MPI_Request_free(&r));
  for (int i = 0; i < size; i++)
    CHECK(all[i] == i, "MPI_Allgather_init_c: element %d is %d", i, all[i]);
}

static void test_types_and_packing(void) {
  MPI_Datatype three, every_other, wide;
  OK(MPI_Type_contiguous_c((MPI_Count)3, MPI_INT, &three));
  OK(MPI_Type_vector_c((MPI_Count)2, (MPI_Count)1, (MPI_Count)2, MPI_INT, &every_other));
  OK(MPI_Type_create_resized_c(three, (MPI_Count)0, (MPI_Count)16, &wide));
  MPI_Count lb = -1, extent = -1;
  OK(MPI_Type_get_extent_c(wide, &lb, &extent));
  CHECK(lb == 0 && extent == 16, "MPI_Type_get_extent_c: lb %lld extent %lld", (long long)lb,
        (long long)extent);
  OK(MPI_Type_commit(&three));
  OK(MPI_Type_commit(&every_other));
  int in[4] = {1, 2, 3, 4}, back[4] = {0};
  char buf[64];
  MPI_Count need = -1, pos = 4;
  OK(MPI_Pack_size_c((MPI_Count)1, three, MPI_COMM_WORLD, &need));
  CHECK(need >= 12, "MPI_Pack_size_c: %lld", (long long)need);
  OK(MPI_Pack_c(in, (MPI_Count)1, three, buf, (MPI_Count)sizeof buf, &pos, MPI_COMM_WORLD));
  OK(MPI_Pack_c(in, (MPI_Count)1, every_other, buf, (MPI_Count)sizeof buf, &pos,
                MPI_COMM_WORLD));
  CHECK(pos == 4 + 12 + 8, "MPI_Pack_c moved the position to %lld", (long long)pos);
  pos = 4 + 12;
  OK(MPI_Unpack_c(buf, (MPI_Count)sizeof buf, &pos, back, (MPI_Count)1, every_other,
                  MPI_COMM_WORLD));
  CHECK(pos == 24 && back[0] == 1 && back[1] == 0 && back[2] == 3,
        "MPI_Unpack_c: position %lld, %d %d %d", (long long)pos, back[0], back[1], back[2]);
  OK(MPI_Type_free(&three));
  OK(MPI_Type_free(&every_other));
  OK(MPI_Type_free(&wide));
}

static void test_rma(void) {
  int *base = NULL;
  MPI_Win win;
  OK(MPI_Win_allocate_c((MPI_Aint)(4 * sizeof(int)), (MPI_Aint)sizeof(int), MPI_INFO_NULL,
                        MPI_COMM_WORLD, &base, &win));
  for (int i = 0; i < 4; i++)
    base[i] = 0;
  OK(MPI_Win_fence(0, win));
  int right = (rank + 1) % size, one = 1, x = 100 + rank, got = -1;
  OK(MPI_Put_c(&x, (MPI_Count)1, MPI_INT, right, 1, (MPI_Count)1, MPI_INT, win));
  OK(MPI_Accumulate_c(&one, (MPI_Count)1, MPI_INT, 0, 2, (MPI_Count)1, MPI_INT, MPI_SUM, win));
  OK(MPI_Win_fence(0, win));
  OK(MPI_Get_c(&got, (MPI_Count)1, MPI_INT, right, 1, (MPI_Count)1, MPI_INT, win));
  OK(MPI_Win_fence(MPI_MODE_NOSUCCEED, win));
  CHECK(got == 100 + rank, "MPI_Get_c read back %d", got);
  if (rank == 0)
    CHECK(base[2] == size, "MPI_Accumulate_c: %d", base[2]);
  MPI_Aint sz = -1, du = -1;
  int *at = NULL;
  OK(MPI_Win_shared_query_c(win, rank, &sz, &du, &at));
  CHECK(at == base && sz == 4 * sizeof(int) && du == sizeof(int),
        "MPI_Win_shared_query_c: %ld bytes, unit %ld", (long)sz, (long)du);
  OK(MPI_Win_free(&win));
}

/* Rank r sends r + 1 ints (r*10, r*10+1, ...); every block lands a gap of one int
 * apart. */
static void test_vector_collectives(void) {
  MPI_Count counts[8];
  MPI_Aint displs[8];
  int icounts[8], idispls[8], mine[8], got[64], want[64];
  for (int i = 0, at = 0; i < size; i++) {
    counts[i] = icounts[i] = i + 1;
    displs[i] = idispls[i] = at;
    at += i + 2;
  }
  for (int k = 0; k <= rank; k++)
    mine[k] = rank * 10 + k;
  for (int i = 0; i < 64; i++)
    got[i] = want[i] = -1;
  OK(MPI_Allgatherv(mine, rank + 1, MPI_INT, want, icounts, idispls, MPI_INT, MPI_COMM_WORLD));
  OK(MPI_Allgatherv_c(mine, (MPI_Count)rank + 1, MPI_INT, got, counts, displs, MPI_INT,
                      MPI_COMM_WORLD));
  CHECK(memcmp(got, want, sizeof got) == 0, "MPI_Allgatherv_c differs from MPI_Allgatherv");
  MPI_Request r;
  for (int i = 0; i < 64; i++)
    got[i] = -1;
  OK(MPI_Iallgatherv_c(mine, (MPI_Count)rank + 1, MPI_INT, got, counts, displs, MPI_INT,
                       MPI_COMM_WORLD, &r));
  OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
  CHECK(memcmp(got, want, sizeof got) == 0, "MPI_Iallgatherv_c differs");
  /* Rooted: the arrays are significant at the root alone (NULL elsewhere). */
  for (int i = 0; i < 64; i++)
    got[i] = -1;
  int root = size - 1, at_root = rank == root;
  OK(MPI_Gatherv_c(mine, (MPI_Count)rank + 1, MPI_INT, got, at_root ? counts : NULL,
                   at_root ? displs : NULL, MPI_INT, root, MPI_COMM_WORLD));
  if (at_root)
    CHECK(memcmp(got, want, sizeof got) == 0, "MPI_Gatherv_c differs");
  int back[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
  OK(MPI_Scatterv_c(want, at_root ? counts : NULL, at_root ? displs : NULL, MPI_INT, back,
                    (MPI_Count)rank + 1, MPI_INT, root, MPI_COMM_WORLD));
  CHECK(memcmp(back, mine, (rank + 1) * sizeof(int)) == 0 && back[rank + 1] == -1,
        "MPI_Scatterv_c: %d %d", back[0], back[rank + 1]);
  /* Alltoall by vectors: rank r sends i + 1 ints to rank i, in place too (the send
   * arrays NULL, as they are ignored). Persistent: started twice. */
  int sends[64], into[64], twin[64];
  for (int i = 0; i < 64; i++)
    sends[i] = rank * 100 + i, into[i] = twin[i] = -1;
  MPI_Count rcounts[8];
  MPI_Aint rdispls[8];
  int ircounts[8], irdispls[8];
  for (int i = 0; i < size; i++) {
    rcounts[i] = ircounts[i] = rank + 1;
    rdispls[i] = irdispls[i] = i * (rank + 2);
  }
  OK(MPI_Alltoallv(sends, icounts, idispls, MPI_INT, twin, ircounts, irdispls, MPI_INT,
                   MPI_COMM_WORLD));
  OK(MPI_Alltoallv_init_c(sends, counts, displs, MPI_INT, into, rcounts, rdispls, MPI_INT,
                          MPI_COMM_WORLD, MPI_INFO_NULL, &r));
  for (int round = 0; round < 2; round++) {
    for (int i = 0; i < 64; i++)
      into[i] = -1;
    OK(MPI_Start(&r));
    OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    CHECK(memcmp(into, twin, sizeof into) == 0, "MPI_Alltoallv_init_c, start %d", round);
  }
  OK(MPI_Request_free(&r));
  /* In place, two ints to each rank, three apart. */
  MPI_Count two[8];
  MPI_Aint apart[8];
  int itwo[8], iapart[8];
  for (int i = 0; i < size; i++) {
    two[i] = itwo[i] = 2;
    apart[i] = iapart[i] = 3 * i;
  }
  for (int i = 0; i < 64; i++)
    into[i] = twin[i] = rank * 100 + i;
  OK(MPI_Alltoallv_c(MPI_IN_PLACE, NULL, NULL, MPI_DATATYPE_NULL, into, two, apart, MPI_INT,
                     MPI_COMM_WORLD));
  OK(MPI_Alltoallv(MPI_IN_PLACE, NULL, NULL, MPI_DATATYPE_NULL, twin, itwo, iapart, MPI_INT,
                   MPI_COMM_WORLD));
  CHECK(memcmp(into, twin, sizeof into) == 0, "MPI_Alltoallv_c in place differs");
  /* By types, the displacements in bytes. */
  MPI_Datatype types[8];
  for (int i = 0; i < size; i++) {
    types[i] = MPI_INT;
    rdispls[i] *= sizeof(int);
    irdispls[i] *= sizeof(int);
    displs[i] *= sizeof(int);
    idispls[i] *= sizeof(int);
  }
  OK(MPI_Alltoallw(sends, icounts, idispls, types, twin, ircounts, irdispls, types,
                   MPI_COMM_WORLD));
  OK(MPI_Alltoallw_c(sends, counts, displs, types, into, rcounts, rdispls, types,
                     MPI_COMM_WORLD));
  CHECK(memcmp(into, twin, sizeof into) == 0, "MPI_Alltoallw_c differs");
  /* Each rank gets back rank + 1 sums. */
  int all[64], part[8] = {0};
  for (int i = 0; i < 64; i++)
    all[i] = i;
  OK(MPI_Reduce_scatter_c(all, part, counts, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
  int first = rank * (rank + 1) / 2;
  CHECK(part[0] == size * first && part[rank] == size * (first + rank),
        "MPI_Reduce_scatter_c: %d %d", part[0], part[rank]);
  /* An entry beyond int is refused, naming it. */
  errors_return(MPI_COMM_WORLD, 1);
  counts[size - 1] = (MPI_Count)1 << 31;
  EXPECT_ERR(MPI_Allgatherv_c(mine, (MPI_Count)rank + 1, MPI_INT, got, counts, displs, MPI_INT,
                              MPI_COMM_WORLD),
             MPI_ERR_COUNT, "recvcounts[");
  errors_return(MPI_COMM_WORLD, 0);
}

/* A ring: each rank gathers both neighbours' two ints, the right one's a gap of one
 * int after the left one's. */
static void test_neighbor_vector(void) {
  int dims[1] = {size}, periods[1] = {1};
  MPI_Comm ring;
  OK(MPI_Cart_create(MPI_COMM_WORLD, 1, dims, periods, 0, &ring));
  int mine[2] = {rank, rank + 100}, got[6] = {-1, -1, -1, -1, -1, -1};
  MPI_Count counts[2] = {2, 2};
  MPI_Aint displs[2] = {0, 3};
  OK(MPI_Neighbor_allgatherv_c(mine, (MPI_Count)2, MPI_INT, got, counts, displs, MPI_INT, ring));
  int left = (rank + size - 1) % size, right = (rank + 1) % size;
  CHECK(got[0] == left && got[1] == left + 100 && got[2] == -1 && got[3] == right &&
            got[4] == right + 100,
        "MPI_Neighbor_allgatherv_c: %d %d %d %d %d", got[0], got[1], got[2], got[3], got[4]);
  OK(MPI_Comm_free(&ring));
}

/* Each constructor against its int twin: the same size, extent and packed bytes. */
static void same_type(MPI_Datatype a, MPI_Datatype b, const char *what) {
  int sa, sb;
  MPI_Aint la, ea, lb, eb;
  char pa[256], pb[256];
  int data[32], pos_a = 0, pos_b = 0;
  for (int i = 0; i < 32; i++)
    data[i] = i;
  OK(MPI_Type_commit(&a));
  OK(MPI_Type_commit(&b));
  OK(MPI_Type_size(a, &sa));
  OK(MPI_Type_size(b, &sb));
  OK(MPI_Type_get_extent(a, &la, &ea));
  OK(MPI_Type_get_extent(b, &lb, &eb));
  OK(MPI_Pack(data, 1, a, pa, sizeof pa, &pos_a, MPI_COMM_SELF));
  OK(MPI_Pack(data, 1, b, pb, sizeof pb, &pos_b, MPI_COMM_SELF));
  CHECK(sa == sb && la == lb && ea == eb && pos_a == pos_b && memcmp(pa, pb, pos_a) == 0,
        "%s: size %d/%d extent %ld/%ld", what, sa, sb, (long)ea, (long)eb);
  /* The envelope and contents: the large-count form keeps the twin's integers and
   * addresses, in that order, as large counts (MPI 4.1 5.1.13), which the int forms
   * refuse to tell. */
  MPI_Count ni, na, nl, nd;
  int ini, ina, ind, comb, icomb;
  OK(MPI_Type_get_envelope_c(a, &ni, &na, &nl, &nd, &comb));
  OK(MPI_Type_get_envelope(b, &ini, &ina, &ind, &icomb));
  CHECK(ni == 0 && na == 0 && nl == ini + ina && nd == ind && comb == icomb && nl <= 12,
        "%s: MPI_Type_get_envelope_c %lld %lld %lld %lld", what, (long long)ni, (long long)na,
        (long long)nl, (long long)nd);
  int iints[8], dummy;
  MPI_Aint iaddrs[4];
  MPI_Count large[12];
  MPI_Datatype ts[4], its[4];
  OK(MPI_Type_get_contents_c(a, ni, na, nl, (MPI_Count)4, NULL, NULL, large, ts));
  OK(MPI_Type_get_contents(b, ini, ina, 4, iints, iaddrs, its));
  for (int i = 0; i < nl; i++) {
    MPI_Count want = i < ini ? iints[i] : iaddrs[i - ini];
    CHECK(large[i] == want, "%s: large count %d is %lld, not %lld", what, i,
          (long long)large[i], (long long)want);
  }
  for (int i = 0; i < nd; i++)
    CHECK(ts[i] == its[i], "%s: type %d differs", what, i);
  errors_return(MPI_COMM_SELF, 1);
  EXPECT_ERR(MPI_Type_get_envelope(a, &ini, &ina, &ind, &dummy), MPI_ERR_TYPE, "large-count");
  EXPECT_ERR(MPI_Type_get_contents(a, 8, 4, 4, iints, iaddrs, its), MPI_ERR_TYPE, "large-count");
  errors_return(MPI_COMM_SELF, 0);
  OK(MPI_Type_free(&a));
  OK(MPI_Type_free(&b));
}

static void test_type_arrays(void) {
  MPI_Datatype a, b;
  MPI_Count lens[3] = {2, 1, 3}, at[3] = {0, 4, 9}, bytes[3] = {0, 16, 36};
  int ilens[3] = {2, 1, 3}, iat[3] = {0, 4, 9};
  MPI_Aint ibytes[3] = {0, 16, 36};
  MPI_Datatype three[3] = {MPI_INT, MPI_INT, MPI_INT};
  OK(MPI_Type_indexed_c((MPI_Count)3, lens, at, MPI_INT, &a));
  OK(MPI_Type_indexed(3, ilens, iat, MPI_INT, &b));
  same_type(a, b, "MPI_Type_indexed_c");
  OK(MPI_Type_create_hindexed_c((MPI_Count)3, lens, bytes, MPI_INT, &a));
  OK(MPI_Type_create_hindexed(3, ilens, ibytes, MPI_INT, &b));
  same_type(a, b, "MPI_Type_create_hindexed_c");
  OK(MPI_Type_create_indexed_block_c((MPI_Count)3, (MPI_Count)2, at, MPI_INT, &a));
  OK(MPI_Type_create_indexed_block(3, 2, iat, MPI_INT, &b));
  same_type(a, b, "MPI_Type_create_indexed_block_c");
  OK(MPI_Type_create_hindexed_block_c((MPI_Count)3, (MPI_Count)2, bytes, MPI_INT, &a));
  OK(MPI_Type_create_hindexed_block(3, 2, ibytes, MPI_INT, &b));
  same_type(a, b, "MPI_Type_create_hindexed_block_c");
  OK(MPI_Type_create_struct_c((MPI_Count)3, lens, bytes, three, &a));
  OK(MPI_Type_create_struct(3, ilens, ibytes, three, &b));
  same_type(a, b, "MPI_Type_create_struct_c");
  OK(MPI_Type_contiguous_c((MPI_Count)5, MPI_INT, &a));
  OK(MPI_Type_contiguous(5, MPI_INT, &b));
  same_type(a, b, "MPI_Type_contiguous_c");
  OK(MPI_Type_vector_c((MPI_Count)3, (MPI_Count)2, (MPI_Count)-3, MPI_INT, &a));
  OK(MPI_Type_vector(3, 2, -3, MPI_INT, &b));
  same_type(a, b, "MPI_Type_vector_c");
  OK(MPI_Type_create_hvector_c((MPI_Count)3, (MPI_Count)2, (MPI_Count)20, MPI_INT, &a));
  OK(MPI_Type_create_hvector(3, 2, 20, MPI_INT, &b));
  same_type(a, b, "MPI_Type_create_hvector_c");
  OK(MPI_Type_create_resized_c(MPI_INT, (MPI_Count)-4, (MPI_Count)12, &a));
  OK(MPI_Type_create_resized(MPI_INT, -4, 12, &b));
  same_type(a, b, "MPI_Type_create_resized_c");
  /* A subarray keeps ndims and order as integers, its three arrays as large counts. */
  MPI_Count sizes[2] = {4, 5}, subs[2] = {2, 3}, starts[2] = {1, 2}, got[6];
  OK(MPI_Type_create_subarray_c(2, sizes, subs, starts, MPI_ORDER_C, MPI_INT, &a));
  MPI_Count ni, na, nl, nd;
  int comb, ints[2];
  OK(MPI_Type_get_envelope_c(a, &ni, &na, &nl, &nd, &comb));
  CHECK(ni == 2 && na == 0 && nl == 6 && nd == 1 && comb == MPI_COMBINER_SUBARRAY,
        "MPI_Type_create_subarray_c's envelope: %lld %lld %lld", (long long)ni, (long long)na,
        (long long)nl);
  OK(MPI_Type_get_contents_c(a, 2, 0, 6, 1, ints, NULL, got, &b));
  CHECK(ints[0] == 2 && ints[1] == MPI_ORDER_C && got[0] == 4 && got[3] == 3 && got[5] == 2,
        "MPI_Type_create_subarray_c's contents");
  OK(MPI_Type_free(&a));
  /* A dimension of 2^61 indices: more than this library can list, refused. */
  MPI_Count vast[1] = {(MPI_Count)1 << 62}, half[1] = {(MPI_Count)1 << 61}, none[1] = {0};
  errors_return(MPI_COMM_SELF, 1);
  EXPECT_ERR(MPI_Type_create_subarray_c(1, vast, half, none, MPI_ORDER_C, MPI_CHAR, &a),
             MPI_ERR_NO_MEM, "memory");
  errors_return(MPI_COMM_SELF, 0);
  /* Counts beyond int: a contiguous type of 2^32 + 5 bytes, and an indexed block type
   * of 3 blocks of 2^30 ints (described, never moved). */
  MPI_Count size_c = -1, lb_c = -1, extent_c = -1, far[3] = {0, (MPI_Count)1 << 30,
                                                              (MPI_Count)3 << 30};
  OK(MPI_Type_contiguous_c(((MPI_Count)1 << 32) + 5, MPI_CHAR, &a));
  OK(MPI_Type_size_c(a, &size_c));
  OK(MPI_Type_get_true_extent_c(a, &lb_c, &extent_c));
  CHECK(size_c == ((MPI_Count)1 << 32) + 5 && lb_c == 0 && extent_c == size_c,
        "MPI_Type_contiguous_c beyond int: size %lld, true extent %lld", (long long)size_c,
        (long long)extent_c);
  OK(MPI_Type_free(&a));
  OK(MPI_Type_create_indexed_block_c((MPI_Count)3, (MPI_Count)1 << 30, far, MPI_INT, &a));
  OK(MPI_Type_size_c(a, &size_c));
  OK(MPI_Type_get_extent_c(a, &lb_c, &extent_c));
  CHECK(size_c == ((MPI_Count)3 << 32) && lb_c == 0 && extent_c == ((MPI_Count)4 << 32),
        "MPI_Type_create_indexed_block_c beyond int: size %lld, extent %lld", (long long)size_c,
        (long long)extent_c);
  OK(MPI_Type_free(&a));
  /* (Errors of no object go to MPI_COMM_SELF's handler.) */
  errors_return(MPI_COMM_SELF, 1);
  lens[1] = -((MPI_Count)1 << 40);
  EXPECT_ERR(MPI_Type_indexed_c((MPI_Count)3, lens, at, MPI_INT, &a), MPI_ERR_COUNT,
             "array_of_blocklengths[1]");
  errors_return(MPI_COMM_SELF, 0);
}

/* Types of very many runs of bytes (kept as an older type's runs and their
 * strides): every other int of 2 * N, and three of those, every other one (nested),
 * each sent to the next rank and received as plain ints, packed and unpacked; a
 * vector of INT_MAX / 2 blocks of four ints (2^30 runs, never moved), asked its size
 * and bounds; a struct joining such a type to an int is refused (MPI_ERR_TYPE). */
static void test_many_runs(void) {
  enum { N = 300000 };
  const MPI_Aint ext = (2 * N - 1) * (MPI_Aint)sizeof(int);
  int right = (rank + 1) % size, left = (rank + size - 1) % size;
  MPI_Datatype odd, three, four, huge;
  OK(MPI_Type_vector(N, 1, 2, MPI_INT, &odd));
  OK(MPI_Type_commit(&odd));
  OK(MPI_Type_vector(3, 1, 2, odd, &three));
  OK(MPI_Type_commit(&three));
  MPI_Aint tlb = -1, text = -1;
  OK(MPI_Type_get_true_extent(three, &tlb, &text));
  CHECK(tlb == 0 && text == 5 * ext, "three vectors' true extent: %ld %ld", (long)tlb,
        (long)text);
  int *data = malloc(5 * ext), *got = malloc(3 * N * sizeof(int));
  CHECK(data && got, "no memory");
  for (MPI_Aint i = 0; i < 5 * ext / (MPI_Aint)sizeof(int); i++)
    data[i] = (int)i + rank;
  OK(MPI_Sendrecv(data, 1, odd, right, 7, got, N, MPI_INT, left, 7, MPI_COMM_WORLD,
                  MPI_STATUS_IGNORE));
  for (int k = 0; k < N; k++)
    CHECK(got[k] == 2 * k + left, "every other int: %d is %d", k, got[k]);
  OK(MPI_Sendrecv(data, 1, three, right, 8, got, 3 * N, MPI_INT, left, 8, MPI_COMM_WORLD,
                  MPI_STATUS_IGNORE));
  for (int j = 0; j < 3; j++)
    for (int k = 0; k < N; k++) {
      long want = (long)j * 2 * (ext / sizeof(int)) + 2 * k + left;
      CHECK(got[j * N + k] == want, "three vectors: %d of %d is %d, not %ld", k, j,
            got[j * N + k], want);
    }
  int packed_size = -1, pos = 0;
  OK(MPI_Pack_size(1, odd, MPI_COMM_SELF, &packed_size));
  CHECK(packed_size >= N * (int)sizeof(int), "MPI_Pack_size: %d", packed_size);
  OK(MPI_Pack(data, 1, odd, got, packed_size, &pos, MPI_COMM_SELF));
  CHECK(pos == N * (int)sizeof(int) && got[N - 1] == 2 * (N - 1) + rank,
        "MPI_Pack: %d bytes, the last %d", pos, got[N - 1]);
  memset(data, 0, 2 * N * sizeof(int));
  pos = 0;
  OK(MPI_Unpack(got, packed_size, &pos, data, 1, odd, MPI_COMM_SELF));
  for (int i = 0; i < 2 * N - 1; i++)
    CHECK(data[i] == (i % 2 ? 0 : i + rank), "MPI_Unpack: int %d is %d", i, data[i]);
  OK(MPI_Type_contiguous(4, MPI_INT, &four));
  OK(MPI_Type_vector(INT_MAX / 2, 1, 3, four, &huge));
  OK(MPI_Type_commit(&huge));
  int isize = 0;
  MPI_Count xsize = -1, lb = -1, extent = -1;
  OK(MPI_Type_size(huge, &isize));
  OK(MPI_Type_size_x(huge, &xsize));
  OK(MPI_Type_get_true_extent_x(huge, &lb, &extent));
  const MPI_Count want = ((MPI_Count)(INT_MAX / 2 - 1) * 3 + 1) * 16;
  CHECK(isize == MPI_UNDEFINED && xsize == (MPI_Count)16 * (INT_MAX / 2) && lb == 0 &&
            extent == want,
        "2^30 runs: size %d / %lld, true extent %lld from %lld", isize, (long long)xsize,
        (long long)extent, (long long)lb);
  int lens[2] = {1, 1};
  MPI_Aint at[2] = {0, 8};
  MPI_Datatype parts[2] = {huge, MPI_INT}, joined = MPI_DATATYPE_NULL;
  errors_return(MPI_COMM_SELF, 1);
  EXPECT_ERR(MPI_Type_create_struct(2, lens, at, parts, &joined), MPI_ERR_TYPE, "runs");
  errors_return(MPI_COMM_SELF, 0);
  OK(MPI_Type_free(&huge));
  OK(MPI_Type_free(&four));
  OK(MPI_Type_free(&three));
  OK(MPI_Type_free(&odd));
  free(data);
  free(got);
}

int main(int argc, char **argv) {
  start("large", &argc, &argv);
  test_p2p();
  test_coll();
  test_types_and_packing();
  test_rma();
  test_vector_collectives();
  test_neighbor_vector();
  test_type_arrays();
  test_many_runs();
  OK(MPI_Barrier(MPI_COMM_WORLD));
  return finish();
}
