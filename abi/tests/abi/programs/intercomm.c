/* intercomm.c: intercommunicators made by MPI_Intercomm_create between the even
 * and the odd ranks of the world (run at 2 to 5 ranks: equal groups and not), and
 * their duplicate (its own traffic), split and created from subgroups; every
 * collective on them, each result checked against what the other group sent:
 * Barrier (no rank of one group leaves before the last of the other enters), Bcast
 * (MPI_ROOT, MPI_PROC_NULL, small, large, a type that is not contiguous), Reduce and
 * Allreduce (a sum, and 2x2 matrix products that must come in rank order),
 * Gather(v), Scatter(v), Allgather(v), Alltoall(v,w), Reduce_scatter(_block); the
 * nonblocking and persistent forms; point-to-point across; the errors (scans,
 * MPI_IN_PLACE, a bad root, topologies, spawns, a bad leader); then
 * MPI_Intercomm_merge of it. */
#include "check.h"
#include <time.h>

/* Group of world rank w (0: even, 1: odd), its size, and world rank of member i. */
static int group_of(int w) { return w % 2; }
static int group_size(int g) { return g == 0 ? (size + 1) / 2 : size / 2; }
static int world_of(int g, int i) { return 2 * i + g; }

/* 2x2 matrices modulo 1009: products do not commute. */
typedef struct {
  int a, b, c, d;
} mat;

static mat mat_of(int w) {
  mat m = {w % 5 + 1, w + 1, 2, (w * 3) % 4};
  return m;
}

static mat mat_mul(mat x, mat y) {
  mat m = {(x.a * y.a + x.b * y.c) % 1009, (x.a * y.b + x.b * y.d) % 1009,
           (x.c * y.a + x.d * y.c) % 1009, (x.c * y.b + x.d * y.d) % 1009};
  return m;
}

static void mat_op(void *in, void *inout, int *len, MPI_Datatype *ty) {
  (void)ty;
  mat *a = in, *b = inout;
  for (int i = 0; i < *len; i++)
    b[i] = mat_mul(a[i], b[i]);
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
  start("intercomm", &argc, &argv);
  if (size < 2)
    return finish();
  int g = group_of(rank), other = 1 - g;
  int n = group_size(g), m = group_size(other);
  MPI_Comm local, inter;
  OK(MPI_Comm_split(MPI_COMM_WORLD, g, rank, &local));
  int lrank;
  OK(MPI_Comm_rank(local, &lrank));
  CHECK(lrank == rank / 2, "local rank %d", lrank);

  /* A leader out of range is refused on every member, before any exchange. */
  errors_return(local, 1);
  EXPECT_ERR(MPI_Intercomm_create(local, n, MPI_COMM_WORLD, other, 7, &inter),
             MPI_ERR_RANK, "leader");
  OK(MPI_Intercomm_create(local, 0, MPI_COMM_WORLD, other, 7, &inter));
  int flag = 0, rs = -1, ls = -1, ir = -1;
  OK(MPI_Comm_test_inter(inter, &flag));
  OK(MPI_Comm_remote_size(inter, &rs));
  OK(MPI_Comm_size(inter, &ls));
  OK(MPI_Comm_rank(inter, &ir));
  CHECK(flag && rs == m && ls == n && ir == lrank, "inter %d remote %d size %d rank %d",
        flag, rs, ls, ir);
  MPI_Group rg;
  OK(MPI_Comm_remote_group(inter, &rg));
  for (int i = 0; i < m; i++) {
    int w = -1, r = i;
    MPI_Group wg;
    OK(MPI_Comm_group(MPI_COMM_WORLD, &wg));
    OK(MPI_Group_translate_ranks(rg, 1, &r, wg, &w));
    CHECK(w == world_of(other, i), "remote member %d is world rank %d", i, w);
    OK(MPI_Group_free(&wg));
  }
  OK(MPI_Group_free(&rg));

  /* Point-to-point across: each member to the other group's member of its rank. */
  if (lrank < m) {
    int out = rank, in = -1;
    MPI_Status st;
    OK(MPI_Sendrecv(&out, 1, MPI_INT, lrank, 3, &in, 1, MPI_INT, lrank, 3, inter, &st));
    CHECK(in == world_of(other, lrank) && st.MPI_SOURCE == lrank, "p2p across: %d from %d",
          in, st.MPI_SOURCE);
  }

  /* A duplicate: the same groups, its own traffic. Each member sends on the
   * duplicate then on the original with one tag; received the other way round. */
  MPI_Comm dup;
  OK(MPI_Comm_dup(inter, &dup));
  OK(MPI_Comm_test_inter(dup, &flag));
  OK(MPI_Comm_remote_size(dup, &rs));
  CHECK(flag && rs == m, "the duplicate: inter %d, remote size %d", flag, rs);
  if (lrank < m) {
    int on_dup = 1, on_inter = 2, a = -1, b = -1;
    MPI_Request r[2];
    OK(MPI_Isend(&on_dup, 1, MPI_INT, lrank, 4, dup, &r[0]));
    OK(MPI_Isend(&on_inter, 1, MPI_INT, lrank, 4, inter, &r[1]));
    OK(MPI_Recv(&a, 1, MPI_INT, lrank, 4, inter, MPI_STATUS_IGNORE));
    OK(MPI_Recv(&b, 1, MPI_INT, lrank, 4, dup, MPI_STATUS_IGNORE));
    OK(MPI_Waitall(2, r, MPI_STATUSES_IGNORE));
    CHECK(a == 2 && b == 1, "traffic of the duplicate and the original met: %d %d", a, b);
  }
  {
    int in[2] = {rank, 1}, out[2] = {-1, -1};
    OK(MPI_Allreduce(in, out, 2, MPI_INT, MPI_SUM, dup));
    int want = 0;
    for (int i = 0; i < m; i++)
      want += world_of(other, i);
    CHECK(out[0] == want && out[1] == m, "allreduce on the duplicate: %d %d", out[0], out[1]);
  }
  OK(MPI_Comm_free(&dup));

  /* Split by the parity of the local rank, keys reversed: an intercommunicator
   * between the members of each parity in the two groups (none for a parity the
   * other group lacks). */
  {
    MPI_Comm part;
    int parity = lrank % 2;
    OK(MPI_Comm_split(inter, parity, -lrank, &part));
    int mine_n = (n - parity + 1) / 2, theirs_n = (m - parity + 1) / 2;
    if (theirs_n == 0) {
      CHECK(part == MPI_COMM_NULL, "a parity the other group lacks got a communicator");
    } else {
      int pr = -1, ps = -1, prs = -1;
      OK(MPI_Comm_rank(part, &pr));
      OK(MPI_Comm_size(part, &ps));
      OK(MPI_Comm_remote_size(part, &prs));
      CHECK(ps == mine_n && prs == theirs_n && pr == mine_n - 1 - lrank / 2,
            "split: rank %d of %d, remote %d", pr, ps, prs);
      int in = rank, out = -1, want = 0;
      for (int i = parity; i < m; i += 2)
        want += world_of(other, i);
      OK(MPI_Allreduce(&in, &out, 1, MPI_INT, MPI_SUM, part));
      CHECK(out == want, "allreduce on the split: %d, expected %d", out, want);
      OK(MPI_Comm_free(&part));
    }
    /* Created from each group's member 0 alone. */
    MPI_Group lg, first;
    int zero = 0;
    OK(MPI_Comm_group(inter, &lg));
    OK(MPI_Group_incl(lg, 1, &zero, &first));
    OK(MPI_Comm_create(inter, first, &part));
    if (lrank == 0) {
      int prs = -1, v = rank, got = -1;
      OK(MPI_Comm_remote_size(part, &prs));
      CHECK(prs == 1, "created: remote size %d", prs);
      OK(MPI_Sendrecv(&v, 1, MPI_INT, 0, 5, &got, 1, MPI_INT, 0, 5, part, MPI_STATUS_IGNORE));
      CHECK(got == other, "created: the other member 0 is world rank %d", got);
      OK(MPI_Comm_free(&part));
    } else {
      CHECK(part == MPI_COMM_NULL, "a member outside the group got a communicator");
    }
    OK(MPI_Group_free(&first));
    OK(MPI_Group_free(&lg));
  }

  /* Barrier: the even group's last member comes late; no member of either group
   * leaves before it enters (the ranks share one node's clock). */
  {
    int late = world_of(0, group_size(0) - 1);
    double entered = 0, t0 = now();
    if (rank == late) {
      while (now() - t0 < 0.2) {
      }
      entered = now();
    }
    OK(MPI_Barrier(inter));
    double left = now();
    OK(MPI_Bcast(&entered, 1, MPI_DOUBLE, late, MPI_COMM_WORLD));
    CHECK(left >= entered, "left the barrier %.3f s before the late rank entered",
          entered - left);
  }

  /* Bcast: from each group's last member to the other group. */
  for (int from = 0; from < 2; from++) {
    int root_rank = group_size(from) - 1, v[3] = {-1, -1, -1};
    int root = g == from ? (lrank == root_rank ? MPI_ROOT : MPI_PROC_NULL) : root_rank;
    if (root == MPI_ROOT)
      v[0] = 11, v[1] = 22, v[2] = from;
    /* MPI_PROC_NULL: only the root argument counts (its type is not even one). */
    if (root == MPI_PROC_NULL)
      OK(MPI_Bcast(NULL, 0, MPI_DATATYPE_NULL, root, inter));
    else
      OK(MPI_Bcast(v, 3, MPI_INT, root, inter));
    if (g != from)
      CHECK(v[0] == 11 && v[1] == 22 && v[2] == from, "bcast from group %d: %d %d %d", from,
            v[0], v[1], v[2]);
    else if (root == MPI_PROC_NULL)
      CHECK(v[0] == -1, "MPI_PROC_NULL's buffer was written");
  }
  /* Large (rendezvous, pieces in the receiving group), from the odd group's 0. */
  {
    int len = 300000, *big = malloc(sizeof(int) * len);
    for (int i = 0; i < len; i++)
      big[i] = g == 1 ? i * 3 : -1;
    int root = g == 1 ? (lrank == 0 ? MPI_ROOT : MPI_PROC_NULL) : 0;
    OK(MPI_Bcast(big, len, MPI_INT, root, inter));
    if (g == 0)
      for (int i = 0; i < len; i++)
        CHECK(big[i] == i * 3, "large bcast element %d: %d", i, big[i]);
    free(big);
  }
  /* A vector type: every other int of 8. */
  {
    MPI_Datatype every_other;
    OK(MPI_Type_vector(4, 1, 2, MPI_INT, &every_other));
    OK(MPI_Type_commit(&every_other));
    int v[8];
    for (int i = 0; i < 8; i++)
      v[i] = g == 0 ? 100 + i : -1;
    int root = g == 0 ? (lrank == 0 ? MPI_ROOT : MPI_PROC_NULL) : 0;
    OK(MPI_Bcast(v, 1, every_other, root, inter));
    if (g == 1)
      for (int i = 0; i < 8; i++)
        CHECK(v[i] == (i % 2 == 0 ? 100 + i : -1), "vector bcast element %d: %d", i, v[i]);
    OK(MPI_Type_free(&every_other));
  }

  /* Allreduce: the sum of the other group's world ranks, and its size. */
  int sum_other = 0;
  for (int i = 0; i < m; i++)
    sum_other += world_of(other, i);
  {
    int in[2] = {rank, 1}, out[2] = {-1, -1};
    OK(MPI_Allreduce(in, out, 2, MPI_INT, MPI_SUM, inter));
    CHECK(out[0] == sum_other && out[1] == m, "allreduce: %d %d, expected %d %d", out[0],
          out[1], sum_other, m);
  }
  /* Matrix products, in the other group's rank order. */
  MPI_Datatype mat_type;
  OK(MPI_Type_contiguous(4, MPI_INT, &mat_type));
  OK(MPI_Type_commit(&mat_type));
  MPI_Op mat_prod;
  OK(MPI_Op_create(mat_op, 0, &mat_prod));
  mat expect = mat_of(world_of(other, 0));
  for (int i = 1; i < m; i++)
    expect = mat_mul(expect, mat_of(world_of(other, i)));
  {
    mat mine = mat_of(rank), got = {0, 0, 0, 0};
    OK(MPI_Allreduce(&mine, &got, 1, mat_type, mat_prod, inter));
    CHECK(got.a == expect.a && got.b == expect.b && got.c == expect.c && got.d == expect.d,
          "allreduce of matrices out of order");
    /* Reduce to the even group's last member. */
    int root_rank = group_size(0) - 1;
    int root = g == 0 ? (lrank == root_rank ? MPI_ROOT : MPI_PROC_NULL) : root_rank;
    mat r = {-1, -1, -1, -1};
    if (root == MPI_PROC_NULL) /* as mpi4py passes it: no data, an operation of none */
      OK(MPI_Reduce(NULL, NULL, 0, MPI_BYTE, MPI_SUM, root, inter));
    else
      OK(MPI_Reduce(&mine, &r, 1, mat_type, mat_prod, root, inter));
    if (root == MPI_ROOT)
      CHECK(r.a == expect.a && r.b == expect.b && r.c == expect.c && r.d == expect.d,
            "reduce of matrices out of order");
    else
      CHECK(r.a == -1, "a non-root's receive buffer was written");
  }

  /* Gather to the even group's 0, Gatherv to the odd group's 0 (i + 1 ints from
   * member i, in reverse order). */
  {
    int root = g == 0 ? (lrank == 0 ? MPI_ROOT : MPI_PROC_NULL) : 0;
    int *all = malloc(sizeof(int) * (m + 1)), mine = rank;
    OK(MPI_Gather(&mine, 1, MPI_INT, all, 1, MPI_INT, root, inter));
    if (root == MPI_ROOT)
      for (int i = 0; i < m; i++)
        CHECK(all[i] == world_of(other, i), "gather block %d: %d", i, all[i]);
    free(all);
    root = g == 1 ? (lrank == 0 ? MPI_ROOT : MPI_PROC_NULL) : 0;
    int counts[8], displs[8], total = 0, buf[64], send[8];
    for (int i = 0; i < m; i++)
      counts[i] = i + 1, total += i + 1;
    for (int i = 0, at = total; i < m; i++)
      at -= counts[i], displs[i] = at;
    for (int k = 0; k <= lrank; k++)
      send[k] = rank * 10 + k;
    OK(MPI_Gatherv(send, lrank + 1, MPI_INT, buf, counts, displs, MPI_INT, root, inter));
    if (root == MPI_ROOT)
      for (int i = 0; i < m; i++)
        for (int k = 0; k < counts[i]; k++)
          CHECK(buf[displs[i] + k] == world_of(other, i) * 10 + k, "gatherv %d.%d: %d", i, k,
                buf[displs[i] + k]);
  }

  /* Scatter from the odd group's last member, Scatterv from the even group's 0. */
  {
    int root_rank = group_size(1) - 1;
    int root = g == 1 ? (lrank == root_rank ? MPI_ROOT : MPI_PROC_NULL) : root_rank;
    int blocks[16], got[2] = {-1, -1};
    for (int i = 0; i < 2 * m; i++)
      blocks[i] = 500 + i;
    OK(MPI_Scatter(blocks, 2, MPI_INT, got, 2, MPI_INT, root, inter));
    if (g == 0)
      CHECK(got[0] == 500 + 2 * lrank && got[1] == 501 + 2 * lrank, "scatter: %d %d", got[0],
            got[1]);
    root = g == 0 ? (lrank == 0 ? MPI_ROOT : MPI_PROC_NULL) : 0;
    int counts[8], displs[8], v[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
    for (int i = 0; i < m; i++)
      counts[i] = 1, displs[i] = m - 1 - i;
    OK(MPI_Scatterv(blocks, counts, displs, MPI_INT, v, 1, MPI_INT, root, inter));
    if (g == 1)
      CHECK(v[0] == 500 + n - 1 - lrank, "scatterv: %d", v[0]);
  }

  /* Allgather and Allgatherv: the other group's world ranks. */
  {
    int all[8], counts[8], displs[8], two[2] = {rank, -rank};
    OK(MPI_Allgather(&rank, 1, MPI_INT, all, 1, MPI_INT, inter));
    for (int i = 0; i < m; i++)
      CHECK(all[i] == world_of(other, i), "allgather block %d: %d", i, all[i]);
    int big[16];
    for (int i = 0; i < m; i++)
      counts[i] = 2, displs[i] = 2 * (m - 1 - i);
    OK(MPI_Allgatherv(two, 2, MPI_INT, big, counts, displs, MPI_INT, inter));
    for (int i = 0; i < m; i++)
      CHECK(big[displs[i]] == world_of(other, i) && big[displs[i] + 1] == -world_of(other, i),
            "allgatherv block %d", i);
  }

  /* Alltoall(v, w): block j to the other group's member j. */
  {
    int out[8], in[8], counts[8], displs[8];
    for (int j = 0; j < m; j++)
      out[j] = rank * 100 + j;
    OK(MPI_Alltoall(out, 1, MPI_INT, in, 1, MPI_INT, inter));
    for (int i = 0; i < m; i++)
      CHECK(in[i] == world_of(other, i) * 100 + lrank, "alltoall block %d: %d", i, in[i]);
    for (int i = 0; i < m; i++)
      counts[i] = 1, displs[i] = m - 1 - i;
    int rev[8];
    for (int j = 0; j < m; j++)
      rev[m - 1 - j] = rank * 100 + j;
    OK(MPI_Alltoallv(rev, counts, displs, MPI_INT, in, counts, displs, MPI_INT, inter));
    for (int i = 0; i < m; i++)
      CHECK(in[m - 1 - i] == world_of(other, i) * 100 + lrank, "alltoallv block %d", i);
    MPI_Datatype types[8];
    int bdispls[8];
    for (int i = 0; i < m; i++)
      types[i] = MPI_INT, bdispls[i] = (int)sizeof(int) * i;
    OK(MPI_Alltoallw(out, counts, bdispls, types, in, counts, bdispls, types, inter));
    for (int i = 0; i < m; i++)
      CHECK(in[i] == world_of(other, i) * 100 + lrank, "alltoallw block %d: %d", i, in[i]);
  }

  /* Reduce_scatter_block: vectors of n * m elements in both groups (each member
   * takes as many elements as the other group has members), element k of world rank w
   * being w + k; the other group's sum, scattered. Reduce_scatter: the same
   * vectors in blocks of 1 but the last. */
  {
    int total = n * m, rc = m;
    int *in = malloc(sizeof(int) * total), *got = malloc(sizeof(int) * total);
    for (int k = 0; k < total; k++)
      in[k] = rank + k;
    OK(MPI_Reduce_scatter_block(in, got, rc, MPI_INT, MPI_SUM, inter));
    for (int k = 0; k < rc; k++) {
      int e = lrank * rc + k;
      CHECK(got[k] == sum_other + m * e, "reduce_scatter_block element %d: %d", k, got[k]);
    }
    int counts[8];
    for (int r = 0; r < n; r++)
      counts[r] = r < n - 1 ? 1 : total - (n - 1);
    OK(MPI_Reduce_scatter(in, got, counts, MPI_INT, MPI_SUM, inter));
    for (int k = 0; k < counts[lrank]; k++) {
      int e = lrank + k;
      CHECK(got[k] == sum_other + m * e, "reduce_scatter element %d: %d", k, got[k]);
    }
    free(in);
    free(got);
  }

  /* Nonblocking and persistent forms. */
  {
    MPI_Request req[3];
    int in[2] = {rank, 1}, out[2], v = g == 0 && lrank == 0 ? 77 : -1, all[8];
    int root = g == 0 ? (lrank == 0 ? MPI_ROOT : MPI_PROC_NULL) : 0;
    OK(MPI_Iallreduce(in, out, 2, MPI_INT, MPI_SUM, inter, &req[0]));
    OK(MPI_Ibcast(&v, 1, MPI_INT, root, inter, &req[1]));
    OK(MPI_Iallgather(&rank, 1, MPI_INT, all, 1, MPI_INT, inter, &req[2]));
    OK(MPI_Waitall(3, req, MPI_STATUSES_IGNORE));
    CHECK(out[0] == sum_other && out[1] == m, "iallreduce");
    if (g == 1)
      CHECK(v == 77, "ibcast: %d", v);
    for (int i = 0; i < m; i++)
      CHECK(all[i] == world_of(other, i), "iallgather block %d", i);
    OK(MPI_Ibarrier(inter, &req[0]));
    OK(MPI_Wait(&req[0], MPI_STATUS_IGNORE));
    MPI_Request p;
    OK(MPI_Allreduce_init(in, out, 2, MPI_INT, MPI_SUM, inter, MPI_INFO_NULL, &p));
    for (int round = 0; round < 3; round++) {
      in[1] = round;
      OK(MPI_Start(&p));
      OK(MPI_Wait(&p, MPI_STATUS_IGNORE));
      CHECK(out[0] == sum_other && out[1] == m * round, "persistent allreduce, start %d",
            round);
    }
    OK(MPI_Request_free(&p));
  }

  /* What the standard does not define on intercommunicators, and bad roots. */
  errors_return(inter, 1);
  {
    int a = 1, b = 0;
    EXPECT_ERR(MPI_Scan(&a, &b, 1, MPI_INT, MPI_SUM, inter), MPI_ERR_COMM, "intercommunicators");
    EXPECT_ERR(MPI_Exscan(&a, &b, 1, MPI_INT, MPI_SUM, inter), MPI_ERR_COMM, NULL);
    EXPECT_ERR(MPI_Allreduce(MPI_IN_PLACE, &b, 1, MPI_INT, MPI_SUM, inter), MPI_ERR_ARG,
               "MPI_IN_PLACE");
    EXPECT_ERR(MPI_Bcast(&a, 1, MPI_INT, m, inter), MPI_ERR_ROOT, "other group");
    EXPECT_ERR(MPI_Bcast(&a, 1, MPI_INT, -7, inter), MPI_ERR_ROOT, NULL);
    /* Topologies are made over intracommunicators (MPI 4.1, 8.1). */
    int one[1] = {1}, none[1] = {0};
    MPI_Comm made = MPI_COMM_NULL;
    EXPECT_ERR(MPI_Cart_create(inter, 1, one, none, 0, &made), MPI_ERR_COMM, "intracommunicator");
    EXPECT_ERR(MPI_Graph_create(inter, 1, one, none, 0, &made), MPI_ERR_COMM, NULL);
    EXPECT_ERR(MPI_Dist_graph_create_adjacent(inter, 0, none, MPI_UNWEIGHTED, 0, none,
                                              MPI_UNWEIGHTED, MPI_INFO_NULL, 0, &made),
               MPI_ERR_COMM, NULL);
    CHECK(made == MPI_COMM_NULL, "a topology over an intercommunicator was made");
    /* As are spawns. */
    EXPECT_ERR(MPI_Comm_spawn("true", MPI_ARGV_NULL, 1, MPI_INFO_NULL, 0, inter, &made,
                              MPI_ERRCODES_IGNORE),
               MPI_ERR_COMM, "intracommunicator");
  }
  /* Still in step after the errors. */
  {
    int in[2] = {rank, 1}, out[2];
    OK(MPI_Allreduce(in, out, 2, MPI_INT, MPI_SUM, inter));
    CHECK(out[0] == sum_other && out[1] == m, "allreduce after the errors");
  }

  /* Merged, the even group first: the world's ranks sorted by group. */
  MPI_Comm merged;
  OK(MPI_Intercomm_merge(inter, g, &merged));
  int mr = -1, ms = -1, total = -1;
  OK(MPI_Comm_rank(merged, &mr));
  OK(MPI_Comm_size(merged, &ms));
  CHECK(ms == size && mr == (g == 0 ? lrank : group_size(0) + lrank), "merged rank %d of %d",
        mr, ms);
  OK(MPI_Allreduce(&rank, &total, 1, MPI_INT, MPI_SUM, merged));
  CHECK(total == size * (size - 1) / 2, "allreduce on the merged communicator: %d", total);

  OK(MPI_Comm_free(&merged));
  OK(MPI_Op_free(&mat_prod));
  OK(MPI_Type_free(&mat_type));
  OK(MPI_Comm_free(&inter));
  OK(MPI_Comm_free(&local));
  return finish();
}
