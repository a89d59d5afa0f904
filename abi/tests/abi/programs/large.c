/* large.c: the large-count bindings (MPI_X_c) at any number of ranks (run at 1 to
 * 3), each checked against what its int twin gives: point-to-point (blocking,
 * nonblocking, probed and received), MPI_Get_count_c, collectives (MPI_Bcast_c,
 * MPI_Allreduce_c, MPI_Allgather_c and its persistent form), datatypes
 * (MPI_Type_contiguous_c, MPI_Type_vector_c, MPI_Type_create_resized_c,
 * MPI_Type_get_extent_c), packing (MPI_Pack_c and MPI_Unpack_c moving the position
 * both ways, MPI_Pack_size_c), one-sided (MPI_Win_allocate_c, MPI_Put_c, MPI_Get_c,
 * MPI_Accumulate_c, MPI_Win_shared_query_c). A count beyond int is refused with
 * MPI_ERR_COUNT, naming the limit. */
#include "check.h"

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
  /* Beyond int: refused, naming the limit. */
  errors_return(MPI_COMM_WORLD, 1);
  EXPECT_ERR(MPI_Send_c(out, (MPI_Count)1 << 31, MPI_INT, right, 6, MPI_COMM_WORLD),
             MPI_ERR_COUNT, "2,147,483,647");
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

int main(int argc, char **argv) {
  start("large", &argc, &argv);
  test_p2p();
  test_coll();
  test_types_and_packing();
  test_rma();
  OK(MPI_Barrier(MPI_COMM_WORLD));
  return finish();
}
