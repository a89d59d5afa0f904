/* neighbor.c: neighbourhood collectives at any number of ranks (run at 1 to 6),
 * every block checked against what its source sent, computed here.
 *
 * A Cartesian grid (MPI_Dims_create, two dimensions, the first periodic, the
 * second not): beyond the second's edges the neighbour is MPI_PROC_NULL and the
 * block stays as it was; at 1 and 2 ranks the same process is the neighbour on
 * both sides of the first dimension (itself at 1), where what a rank sends toward
 * +1 must land in the receiver's block from -1. A distributed graph with every
 * rank sending to the next, to the one after twice, and to itself, the sources
 * listed in the order of the ranks that send: messages between two processes
 * match in order. The same graph made by MPI_Dist_graph_create, each rank
 * describing the edges of the next one, weighted: each rank's edges and weights
 * read back, the order of repeated edges between two ranks taken from what the
 * library answers at both ends. An MPI-1 graph (MPI_Graph_create), a ring of all
 * ranks but the last (from 3 ranks), which gets MPI_COMM_NULL: at 1 and 2 ranks the
 * same neighbour twice. On each: MPI_Neighbor_allgather (into a strided type too),
 * _allgatherv (gaps between the blocks), _alltoall, _alltoallv,
 * _alltoallw (byte displacements, in reverse order), the nonblocking forms, and
 * MPI_Neighbor_alltoall_init and _alltoallw_init (its types freed after the init)
 * started twice.
 * Errors: no topology, MPI_IN_PLACE; the graphs' bad arguments, one rank's bad
 * degree or edge failing every rank. */
#include "check.h"

/* What rank r sends in its block j. */
static int sent(int r, int j) { return 1000 * r + j + 1; }

/* A communicator's neighbours, and for each source block, the block index the
 * source sent it from (-1 for MPI_PROC_NULL). */
struct hood {
  MPI_Comm comm;
  int in, out;
  int src[16], dst[16], from_block[16];
};

static void cart_hood(struct hood *h) {
  int dims[2] = {0, 0}, periods[2] = {1, 0};
  OK(MPI_Dims_create(size, 2, dims));
  OK(MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 0, &h->comm));
  h->in = h->out = 4;
  for (int d = 0; d < 2; d++) {
    OK(MPI_Cart_shift(h->comm, d, 1, &h->src[2 * d], &h->src[2 * d + 1]));
    h->dst[2 * d] = h->src[2 * d];
    h->dst[2 * d + 1] = h->src[2 * d + 1];
    /* From -1: the source sent toward its +1 (its block 2d+1), and so on. */
    h->from_block[2 * d] = h->src[2 * d] == MPI_PROC_NULL ? -1 : 2 * d + 1;
    h->from_block[2 * d + 1] = h->src[2 * d + 1] == MPI_PROC_NULL ? -1 : 2 * d;
  }
}

/* Rank r's destinations: r+1, r+2 twice, r itself. */
static int dests_of(int r, int *out) {
  out[0] = (r + 1) % size;
  out[1] = (r + 2) % size;
  out[2] = (r + 2) % size;
  out[3] = r;
  return 4;
}

static void graph_hood(struct hood *h) {
  h->out = dests_of(rank, h->dst);
  h->in = 0;
  for (int q = 0; q < size; q++) {
    int d[4], n = dests_of(q, d);
    for (int j = 0; j < n; j++)
      if (d[j] == rank) {
        h->src[h->in] = q;
        h->from_block[h->in++] = j;
      }
  }
  OK(MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, h->in, h->src, MPI_UNWEIGHTED, h->out,
                                    h->dst, MPI_UNWEIGHTED, MPI_INFO_NULL, 0, &h->comm));
  int in = -1, out = -1, weighted = -1;
  OK(MPI_Dist_graph_neighbors_count(h->comm, &in, &out, &weighted));
  CHECK(in == h->in && out == h->out, "neighbour counts %d %d, not %d %d", in, out, h->in,
        h->out);
}

/* The weight rank s gives its j-th edge in the distributed graph. */
static int weight(int s, int j) { return 100 * s + j; }

/* from_block of every source: the k-th time a source q is listed here pairs with
 * the k-th time this rank is in q's destinations (dsts[q], nd[q] of them). */
static void pair_blocks(struct hood *h, int dsts[][16], const int *nd) {
  for (int i = 0; i < h->in; i++) {
    int q = h->src[i], k = 0;
    for (int e = 0; e < i; e++)
      k += h->src[e] == q;
    h->from_block[i] = -1;
    for (int j = 0; j < nd[q] && h->from_block[i] < 0; j++)
      if (dsts[q][j] == rank && k-- == 0)
        h->from_block[i] = j;
    CHECK(h->from_block[i] >= 0, "source %d listed once too often", q);
  }
}

/* The graph of graph_hood, made by MPI_Dist_graph_create: rank r describes the
 * edges of rank r + 1, with weights. */
static void dist_hood(struct hood *h) {
  int owner = (rank + 1) % size, d[4], w[4];
  int n = dests_of(owner, d);
  for (int j = 0; j < n; j++)
    w[j] = weight(owner, j);
  OK(MPI_Dist_graph_create(MPI_COMM_WORLD, 1, &owner, &n, d, w, MPI_INFO_NULL, 0, &h->comm));
  int topo = -1, weighted = -1;
  OK(MPI_Topo_test(h->comm, &topo));
  CHECK(topo == MPI_DIST_GRAPH, "topology %d, not MPI_DIST_GRAPH", topo);
  OK(MPI_Dist_graph_neighbors_count(h->comm, &h->in, &h->out, &weighted));
  CHECK(h->in == 4 * 1 && h->out == 4 && weighted == 1, "counts %d %d %d, not 4 4 1", h->in,
        h->out, weighted);
  int sw[16], dw[16];
  OK(MPI_Dist_graph_neighbors(h->comm, 16, h->src, sw, 16, h->dst, dw));
  /* My edges, each once, with its weight, in whatever order the library keeps. */
  int mine[4], used[4] = {0, 0, 0, 0};
  dests_of(rank, mine);
  for (int j = 0; j < 4; j++) {
    int found = -1;
    for (int e = 0; e < 4 && found < 0; e++)
      if (!used[e] && mine[e] == h->dst[j] && weight(rank, e) == dw[j])
        found = e;
    CHECK(found >= 0, "destination %d (weight %d) is not one of my edges", h->dst[j], dw[j]);
    used[found] = 1;
  }
  /* Every rank's destinations as the library lists them: the pairing of sources. */
  int dsts[8][16], nd[8];
  OK(MPI_Allgather(h->dst, 16, MPI_INT, dsts, 16, MPI_INT, MPI_COMM_WORLD));
  for (int q = 0; q < size; q++)
    nd[q] = 4;
  pair_blocks(h, dsts, nd);
  int dws[8][16];
  OK(MPI_Allgather(dw, 16, MPI_INT, dws, 16, MPI_INT, MPI_COMM_WORLD));
  for (int i = 0; i < h->in; i++)
    CHECK(sw[i] == dws[h->src[i]][h->from_block[i]], "source %d's weight %d, not %d",
          h->src[i], sw[i], dws[h->src[i]][h->from_block[i]]);
}

/* An MPI-1 graph: a ring of the first n = size - 1 ranks (all at 1 and 2 ranks),
 * each node's neighbours the next, then the one before. */
static int ring_nodes(void) { return size > 2 ? size - 1 : size; }

static void ring_graph(int *index, int *edges) {
  int n = ring_nodes();
  for (int i = 0; i < n; i++) {
    edges[2 * i] = (i + 1) % n;
    edges[2 * i + 1] = (i + n - 1) % n;
    index[i] = 2 * i + 2;
  }
}

/* Returns 0 on the rank outside the graph. */
static int ring_hood(struct hood *h) {
  int index[8], edges[16], n = ring_nodes();
  ring_graph(index, edges);
  int newrank = -2;
  OK(MPI_Graph_map(MPI_COMM_WORLD, n, index, edges, &newrank));
  CHECK(newrank == (rank < n ? rank : MPI_UNDEFINED), "Graph_map gave %d", newrank);
  OK(MPI_Graph_create(MPI_COMM_WORLD, n, index, edges, 0, &h->comm));
  if (rank >= n) {
    CHECK(h->comm == MPI_COMM_NULL, "rank %d outside the graph got a communicator", rank);
    return 0;
  }
  int topo = -1, nnodes = -1, nedges = -1, gi[8], ge[16], k = -1;
  OK(MPI_Topo_test(h->comm, &topo));
  CHECK(topo == MPI_GRAPH, "topology %d, not MPI_GRAPH", topo);
  OK(MPI_Graphdims_get(h->comm, &nnodes, &nedges));
  CHECK(nnodes == n && nedges == 2 * n, "graph of %d nodes %d edges", nnodes, nedges);
  OK(MPI_Graph_get(h->comm, 8, 16, gi, ge));
  for (int i = 0; i < n; i++)
    CHECK(gi[i] == index[i] && ge[2 * i] == edges[2 * i] && ge[2 * i + 1] == edges[2 * i + 1],
          "Graph_get differs at node %d", i);
  OK(MPI_Graph_neighbors_count(h->comm, rank, &k));
  CHECK(k == 2, "%d neighbours, not 2", k);
  OK(MPI_Graph_neighbors(h->comm, rank, 16, h->src));
  h->in = h->out = 2;
  int dsts[8][16], nd[8];
  for (int q = 0; q < n; q++) {
    nd[q] = 2;
    OK(MPI_Graph_neighbors(h->comm, q, 16, dsts[q]));
  }
  for (int i = 0; i < 2; i++) {
    CHECK(h->src[i] == edges[2 * rank + i], "neighbour %d is %d", i, h->src[i]);
    h->dst[i] = h->src[i];
  }
  pair_blocks(h, dsts, nd);
  return 1;
}

/* Block i of a receive (k ints at `at`) holds what its source sent from
 * `from_block` (all blocks: -1 when `same`), or -7 beyond an edge. */
static void check_block(const struct hood *h, int i, const int *at, int k, int same,
                        const char *what) {
  for (int e = 0; e < k; e++) {
    int want = h->src[i] == MPI_PROC_NULL ? -7
               : same                     ? sent(h->src[i], 99) + e
                                          : sent(h->src[i], h->from_block[i]) + e;
    CHECK(at[e] == want, "%s: block %d element %d is %d, not %d (source %d)", what, i, e,
          at[e], want, h->src[i]);
  }
}

/* Every block of a receive, block i at buf + i * stride ints. */
static void check_blocks(const struct hood *h, const int *buf, int stride, int k, int same,
                         const char *what) {
  for (int i = 0; i < h->in; i++)
    check_block(h, i, buf + i * stride, k, same, what);
}

static void fill(int *p, int n) {
  for (int i = 0; i < n; i++)
    p[i] = -7;
}

static void test_hood(const struct hood *h, const char *name) {
  enum { K = 3 };
  int sbuf[16 * K], rbuf[16 * 2 * K], one[K];
  char what[64];
  for (int e = 0; e < K; e++)
    one[e] = sent(rank, 99) + e;
  for (int j = 0; j < h->out; j++)
    for (int e = 0; e < K; e++)
      sbuf[j * K + e] = sent(rank, j) + e;

  snprintf(what, sizeof what, "%s allgather", name);
  fill(rbuf, 16 * 2 * K);
  OK(MPI_Neighbor_allgather(one, K, MPI_INT, rbuf, K, MPI_INT, h->comm));
  check_blocks(h, rbuf, K, K, 1, what);

  /* Into every other int: a strided receive type. */
  snprintf(what, sizeof what, "%s allgather, strided", name);
  MPI_Datatype strided;
  OK(MPI_Type_vector(K, 1, 2, MPI_INT, &strided));
  MPI_Datatype block;
  OK(MPI_Type_create_resized(strided, 0, 2 * K * sizeof(int), &block));
  OK(MPI_Type_commit(&block));
  fill(rbuf, 16 * 2 * K);
  OK(MPI_Neighbor_allgather(one, K, MPI_INT, rbuf, 1, block, h->comm));
  for (int i = 0; i < h->in; i++) {
    int got[K];
    for (int e = 0; e < K; e++) {
      got[e] = rbuf[i * 2 * K + 2 * e];
      CHECK(rbuf[i * 2 * K + 2 * e + 1] == -7, "%s: a gap was written", what);
    }
    check_block(h, i, got, K, 1, what);
  }
  OK(MPI_Type_free(&block));
  OK(MPI_Type_free(&strided));

  /* Block i: K ints at 4 * i (a gap after each). */
  snprintf(what, sizeof what, "%s allgatherv", name);
  int counts[16], displs[16];
  for (int i = 0; i < h->in; i++) {
    counts[i] = K;
    displs[i] = 4 * i;
  }
  fill(rbuf, 16 * 2 * K);
  OK(MPI_Neighbor_allgatherv(one, K, MPI_INT, rbuf, counts, displs, MPI_INT, h->comm));
  for (int i = 0; i < h->in; i++) {
    check_block(h, i, rbuf + displs[i], K, 1, what);
    CHECK(rbuf[displs[i] + K] == -7, "%s: past block %d was written", what, i);
  }

  snprintf(what, sizeof what, "%s alltoall", name);
  fill(rbuf, 16 * 2 * K);
  OK(MPI_Neighbor_alltoall(sbuf, K, MPI_INT, rbuf, K, MPI_INT, h->comm));
  check_blocks(h, rbuf, K, K, 0, what);

  snprintf(what, sizeof what, "%s neighbor_alltoall_init", name);
  MPI_Request per;
  OK(MPI_Neighbor_alltoall_init(sbuf, K, MPI_INT, rbuf, K, MPI_INT, h->comm, MPI_INFO_NULL,
                                &per));
  for (int round = 0; round < 2; round++) {
    fill(rbuf, 16 * 2 * K);
    OK(MPI_Start(&per));
    OK(MPI_Wait(&per, MPI_STATUS_IGNORE));
    check_blocks(h, rbuf, K, K, 0, what);
  }
  OK(MPI_Request_free(&per));

  snprintf(what, sizeof what, "%s ineighbor_alltoall", name);
  fill(rbuf, 16 * 2 * K);
  MPI_Request req;
  OK(MPI_Ineighbor_alltoall(sbuf, K, MPI_INT, rbuf, K, MPI_INT, h->comm, &req));
  OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
  check_blocks(h, rbuf, K, K, 0, what);

  /* alltoallv: K ints each, receive blocks 5 ints apart, send blocks K apart. */
  snprintf(what, sizeof what, "%s alltoallv", name);
  int scounts[16], sdispls[16];
  for (int j = 0; j < h->out; j++) {
    scounts[j] = K;
    sdispls[j] = j * K;
  }
  for (int i = 0; i < h->in; i++) {
    counts[i] = K;
    displs[i] = 5 * i;
  }
  fill(rbuf, 16 * 2 * K);
  OK(MPI_Neighbor_alltoallv(sbuf, scounts, sdispls, MPI_INT, rbuf, counts, displs, MPI_INT,
                            h->comm));
  check_blocks(h, rbuf, 5, K, 0, what);

  /* alltoallw, nonblocking: byte displacements, receive blocks in reverse order. */
  snprintf(what, sizeof what, "%s ineighbor_alltoallw", name);
  MPI_Aint sd[16], rd[16];
  MPI_Datatype st[16], rt[16];
  for (int j = 0; j < h->out; j++) {
    sd[j] = (MPI_Aint)(j * K * sizeof(int));
    st[j] = MPI_INT;
  }
  for (int i = 0; i < h->in; i++) {
    rd[i] = (MPI_Aint)((h->in - 1 - i) * K * sizeof(int));
    rt[i] = MPI_INT;
    counts[i] = K;
  }
  fill(rbuf, 16 * 2 * K);
  OK(MPI_Ineighbor_alltoallw(sbuf, scounts, sd, st, rbuf, counts, rd, rt, h->comm, &req));
  OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
  for (int i = 0; i < h->in; i++)
    check_block(h, i, rbuf + (h->in - 1 - i) * K, K, 0, what);

  /* alltoallw, persistent: a type of K ints per block, each its own, freed after
   * the init (through copies: the arrays stay as they were). */
  snprintf(what, sizeof what, "%s neighbor_alltoallw_init", name);
  int ones[16];
  for (int j = 0; j < h->out; j++) {
    OK(MPI_Type_contiguous(K, MPI_INT, &st[j]));
    OK(MPI_Type_commit(&st[j]));
    ones[j] = 1;
  }
  for (int i = 0; i < h->in; i++) {
    OK(MPI_Type_contiguous(K, MPI_INT, &rt[i]));
    OK(MPI_Type_commit(&rt[i]));
  }
  OK(MPI_Neighbor_alltoallw_init(sbuf, ones, sd, st, rbuf, ones, rd, rt, h->comm,
                                 MPI_INFO_NULL, &per));
  for (int j = 0; j < h->out || j < h->in; j++) {
    MPI_Datatype s = j < h->out ? st[j] : MPI_DATATYPE_NULL;
    MPI_Datatype t = j < h->in ? rt[j] : MPI_DATATYPE_NULL;
    if (s != MPI_DATATYPE_NULL)
      OK(MPI_Type_free(&s));
    if (t != MPI_DATATYPE_NULL)
      OK(MPI_Type_free(&t));
  }
  for (int round = 0; round < 2; round++) {
    fill(rbuf, 16 * 2 * K);
    OK(MPI_Start(&per));
    OK(MPI_Wait(&per, MPI_STATUS_IGNORE));
    for (int i = 0; i < h->in; i++)
      check_block(h, i, rbuf + (h->in - 1 - i) * K, K, 0, what);
  }
  OK(MPI_Request_free(&per));

  /* The other nonblocking forms, all in flight at once. */
  snprintf(what, sizeof what, "%s nonblocking", name);
  int r2[16 * K], r3[16 * 5], r4[16 * K], packed[16];
  for (int i = 0; i < h->in; i++)
    packed[i] = i * K;
  MPI_Request reqs[3];
  fill(r2, 16 * K);
  fill(r3, 16 * 5);
  fill(r4, 16 * K);
  OK(MPI_Ineighbor_allgather(one, K, MPI_INT, r2, K, MPI_INT, h->comm, &reqs[0]));
  OK(MPI_Ineighbor_allgatherv(one, K, MPI_INT, r3, counts, displs, MPI_INT, h->comm,
                              &reqs[1]));
  OK(MPI_Ineighbor_alltoallv(sbuf, scounts, sdispls, MPI_INT, r4, counts, packed, MPI_INT,
                             h->comm, &reqs[2]));
  OK(MPI_Waitall(3, reqs, MPI_STATUSES_IGNORE));
  check_blocks(h, r2, K, K, 1, what);
  check_blocks(h, r3, 5, K, 1, what);
  check_blocks(h, r4, K, K, 0, what);
}

static void test_errors(const struct hood *cart) {
  int x = 0, y[16];
  errors_return(MPI_COMM_WORLD, 1);
  EXPECT_ERR(MPI_Neighbor_allgather(&x, 1, MPI_INT, y, 1, MPI_INT, MPI_COMM_WORLD),
             MPI_ERR_TOPOLOGY, "topology");
  MPI_Comm bad = MPI_COMM_NULL;
  int index[1] = {1}, edges[1] = {1};
  EXPECT_ERR(MPI_Graph_create(MPI_COMM_WORLD, 1, index, edges, 0, &bad), MPI_ERR_ARG,
             "edge to 1");
  bad = MPI_COMM_WORLD;
  EXPECT_ERR(MPI_Graph_create(MPI_COMM_WORLD, size + 1, index, edges, 0, &bad), MPI_ERR_ARG,
             "needs more processes");
  CHECK(bad == MPI_COMM_NULL, "a failed MPI_Graph_create left its output");
  /* Rank 0's degree is negative: every rank fails. */
  int degree = rank == 0 ? -1 : 1, me = rank;
  EXPECT_ERR(MPI_Dist_graph_create(MPI_COMM_WORLD, 1, &me, &degree, &me, MPI_UNWEIGHTED,
                                   MPI_INFO_NULL, 0, &bad),
             MPI_ERR_ARG, rank == 0 ? "negative" : "member 0");
  /* The last rank names a destination beyond the communicator: every rank fails. */
  int to = rank == size - 1 ? size : rank;
  degree = 1;
  EXPECT_ERR(MPI_Dist_graph_create(MPI_COMM_WORLD, 1, &me, &degree, &to, MPI_UNWEIGHTED,
                                   MPI_INFO_NULL, 0, &bad),
             MPI_ERR_RANK, "not in the communicator");
  CHECK(bad == MPI_COMM_NULL, "a refused graph gave a communicator");
  errors_return(MPI_COMM_WORLD, 0);
  errors_return(cart->comm, 1);
  EXPECT_ERR(MPI_Neighbor_alltoall(MPI_IN_PLACE, 1, MPI_INT, y, 1, MPI_INT, cart->comm),
             MPI_ERR_BUFFER, "MPI_IN_PLACE");
  EXPECT_ERR(MPI_Graphdims_get(cart->comm, &x, y), MPI_ERR_TOPOLOGY, "no graph topology");
  EXPECT_ERR(MPI_Graph_neighbors_count(cart->comm, 0, &x), MPI_ERR_TOPOLOGY, "no graph");
  errors_return(cart->comm, 0);
}

int main(int argc, char **argv) {
  start("neighbor", &argc, &argv);
  CHECK(size <= 8, "neighbor runs at 8 ranks at most");
  struct hood cart, graph, dist, ring;
  cart_hood(&cart);
  graph_hood(&graph);
  dist_hood(&dist);
  int in_ring = ring_hood(&ring);
  test_hood(&cart, "grid");
  test_hood(&graph, "graph");
  test_hood(&dist, "dist_graph_create");
  if (in_ring)
    test_hood(&ring, "MPI-1 graph");
  test_errors(&cart);
  OK(MPI_Comm_free(&cart.comm));
  OK(MPI_Comm_free(&graph.comm));
  OK(MPI_Comm_free(&dist.comm));
  if (in_ring)
    OK(MPI_Comm_free(&ring.comm));
  OK(MPI_Barrier(MPI_COMM_WORLD));
  return finish();
}
