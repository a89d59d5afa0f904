/* utilities.c: at 1 or more ranks (run at 1 and 2). MPI_Alloc_mem and
 * MPI_Free_mem (a window over such memory, its errors); a status written by hand
 * (MPI_Status_set_elements, _cancelled, the MPI 5.0 accessors) and read back by
 * MPI_Get_count, MPI_Get_elements and MPI_Test_cancelled; MPI_Info_get and
 * MPI_Info_get_valuelen; the hints of communicators and windows; the MPI-1 names
 * of the attribute calls; attributes on datatypes (a derived one and MPI_INT) and
 * windows: copied by MPI_Type_dup as each key's copy function says, deleted by
 * MPI_Type_free, MPI_Win_free, replacement and MPI_*_delete_attr through the delete
 * function (which calls MPI on the object), a freed key's attribute still deleted,
 * a key of another kind refused; the buffers of buffered sends (MPI 4.1): a
 * communicator's taking precedence over the process's, MPI_BUFFER_AUTOMATIC, a
 * send larger than the room refused, flushing (a nonblocking flush not done while
 * its rendezvous-sized message is unreceived), detaching; MPI_Comm_idup: its
 * traffic apart from the original's, its attributes and topology, 35 of one
 * communicator under way at once with a blocking duplicate and a nonblocking
 * all-reduce among them, duplicates of duplicates in other orders on each rank
 * (each one's traffic apart, each checked by an all-reduce), an
 * intercommunicator's under way while it merges. */
#include "check.h"

static void test_alloc_mem(void) {
  int *p = NULL;
  OK(MPI_Alloc_mem(1000 * sizeof(int), MPI_INFO_NULL, &p));
  CHECK(p != NULL && ((uintptr_t)p) % 64 == 0, "MPI_Alloc_mem gave %p", (void *)p);
  for (int i = 0; i < 1000; i++)
    p[i] = i;
  /* A window over it: each rank puts its rank into the next rank's memory. */
  MPI_Win w;
  OK(MPI_Win_create(p, 1000 * sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &w));
  OK(MPI_Win_fence(0, w));
  OK(MPI_Put(&rank, 1, MPI_INT, (rank + 1) % size, 7, 1, MPI_INT, w));
  OK(MPI_Win_fence(0, w));
  CHECK(p[7] == (rank + size - 1) % size && p[6] == 6, "the window's memory: %d %d", p[6], p[7]);
  OK(MPI_Win_free(&w));
  OK(MPI_Free_mem(p));
  void *none = NULL;
  OK(MPI_Alloc_mem(0, MPI_INFO_NULL, &none));
  OK(MPI_Free_mem(none));
  errors_return(MPI_COMM_SELF, 1);
  int local = 0;
  EXPECT_ERR(MPI_Free_mem(&local), MPI_ERR_BASE, "MPI_Alloc_mem");
  EXPECT_ERR(MPI_Free_mem(none), MPI_ERR_BASE, "freed");
  EXPECT_ERR(MPI_Alloc_mem(-1, MPI_INFO_NULL, &none), MPI_ERR_SIZE, "negative");
  errors_return(MPI_COMM_SELF, 0);
}

static void test_status(void) {
  MPI_Status st;
  int n = -1, flag = -1, v = -1;
  OK(MPI_Status_set_elements(&st, MPI_INT, 5));
  OK(MPI_Get_count(&st, MPI_INT, &n));
  CHECK(n == 5, "count %d", n);
  OK(MPI_Get_count(&st, MPI_DOUBLE, &n));
  CHECK(n == MPI_UNDEFINED, "5 ints as doubles: %d", n);
  OK(MPI_Status_set_elements(&st, MPI_2INT, 4));
  OK(MPI_Get_elements(&st, MPI_2INT, &n));
  CHECK(n == 4, "elements of MPI_2INT %d", n);
  OK(MPI_Get_count(&st, MPI_2INT, &n));
  CHECK(n == 2, "count of MPI_2INT %d", n);
  errors_return(MPI_COMM_SELF, 1);
  EXPECT_ERR(MPI_Status_set_elements(&st, MPI_2INT, 3), MPI_ERR_COUNT, NULL);
  EXPECT_ERR(MPI_Status_set_elements(&st, MPI_INT, -1), MPI_ERR_COUNT, NULL);
  errors_return(MPI_COMM_SELF, 0);
  OK(MPI_Status_set_cancelled(&st, 1));
  OK(MPI_Test_cancelled(&st, &flag));
  CHECK(flag == 1, "cancelled %d", flag);
  OK(MPI_Status_set_cancelled(&st, 0));
  OK(MPI_Test_cancelled(&st, &flag));
  CHECK(flag == 0, "not cancelled %d", flag);
  OK(MPI_Status_set_source(&st, 3));
  OK(MPI_Status_set_tag(&st, 44));
  OK(MPI_Status_set_error(&st, MPI_ERR_TAG));
  OK(MPI_Status_get_source(&st, &v));
  CHECK(v == 3 && st.MPI_SOURCE == 3, "source %d", v);
  OK(MPI_Status_get_tag(&st, &v));
  CHECK(v == 44 && st.MPI_TAG == 44, "tag %d", v);
  OK(MPI_Status_get_error(&st, &v));
  CHECK(v == MPI_ERR_TAG && st.MPI_ERROR == MPI_ERR_TAG, "error %d", v);
}

static void test_info(void) {
  MPI_Info info;
  OK(MPI_Info_create(&info));
  OK(MPI_Info_set(info, "access_style", "read_once"));
  int len = -1, flag = -1;
  char value[64];
  OK(MPI_Info_get_valuelen(info, "access_style", &len, &flag));
  CHECK(flag == 1 && len == 9, "valuelen %d flag %d", len, flag);
  OK(MPI_Info_get(info, "access_style", 4, value, &flag));
  CHECK(flag == 1 && !strcmp(value, "read"), "cut to 4: \"%s\"", value);
  OK(MPI_Info_get(info, "access_style", sizeof value - 1, value, &flag));
  CHECK(!strcmp(value, "read_once"), "whole: \"%s\"", value);
  OK(MPI_Info_get(info, "nothing", sizeof value - 1, value, &flag));
  CHECK(flag == 0, "a key not set was found");
  OK(MPI_Info_get_valuelen(info, "nothing", &len, &flag));
  CHECK(flag == 0, "a key not set has a length");
  /* Hints: taken, none in use. */
  MPI_Comm dup;
  MPI_Info used;
  int nkeys = -1;
  OK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
  OK(MPI_Comm_set_info(dup, info));
  OK(MPI_Comm_get_info(dup, &used));
  OK(MPI_Info_get_nkeys(used, &nkeys));
  CHECK(nkeys == 0, "the communicator uses %d hints", nkeys);
  OK(MPI_Info_free(&used));
  MPI_Win w;
  int mem[4];
  OK(MPI_Win_create(mem, sizeof mem, sizeof(int), MPI_INFO_NULL, dup, &w));
  OK(MPI_Win_set_info(w, info));
  OK(MPI_Win_get_info(w, &used));
  OK(MPI_Info_free(&used));
  OK(MPI_Win_free(&w));
  OK(MPI_Comm_free(&dup));
  OK(MPI_Info_free(&info));
}

/* The MPI-1 names of the attribute calls. */
static void test_mpi1_attributes(void) {
  int *ub = NULL, flag = 0, key = MPI_KEYVAL_INVALID, value = 42, *got = NULL;
  OK(MPI_Attr_get(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag));
  CHECK(flag && *ub >= 32767, "MPI_TAG_UB through MPI_Attr_get");
  OK(MPI_Keyval_create(MPI_NULL_COPY_FN, MPI_NULL_DELETE_FN, &key, NULL));
  OK(MPI_Attr_put(MPI_COMM_SELF, key, &value));
  OK(MPI_Attr_get(MPI_COMM_SELF, key, &got, &flag));
  CHECK(flag && got == &value, "an attribute put with MPI_Attr_put");
  OK(MPI_Attr_delete(MPI_COMM_SELF, key));
  OK(MPI_Attr_get(MPI_COMM_SELF, key, &got, &flag));
  CHECK(!flag, "an attribute deleted with MPI_Attr_delete");
  OK(MPI_Keyval_free(&key));
  CHECK(key == MPI_KEYVAL_INVALID, "MPI_Keyval_free left the key");
}

/* Attribute callbacks: values are small integers; a copy gives ten times the value;
 * each deletion is counted, with the size of the type it was on (an MPI call on
 * the object being deleted from). */
static int deletions, deleted_value, deleted_size;

static int type_copy(MPI_Datatype t, int key, void *extra, void *in, void *out, int *flag) {
  (void)t, (void)key, (void)extra;
  *(intptr_t *)out = 10 * (intptr_t)in;
  *flag = 1;
  return MPI_SUCCESS;
}

static int type_delete(MPI_Datatype t, int key, void *value, void *extra) {
  (void)key, (void)extra;
  deletions++;
  deleted_value = (int)(intptr_t)value;
  OK(MPI_Type_size(t, &deleted_size));
  return MPI_SUCCESS;
}

static int win_delete(MPI_Win w, int key, void *value, void *extra) {
  (void)key, (void)extra;
  deletions++;
  deleted_value = (int)(intptr_t)value;
  MPI_Aint *wsize = NULL;
  int flag = 0;
  OK(MPI_Win_get_attr(w, MPI_WIN_SIZE, &wsize, &flag));
  deleted_size = flag ? (int)*wsize : -1;
  return MPI_SUCCESS;
}

static intptr_t get_type_attr(MPI_Datatype t, int key) {
  void *v = NULL;
  int flag = -1;
  OK(MPI_Type_get_attr(t, key, &v, &flag));
  return flag ? (intptr_t)v : -1;
}

static void test_type_win_attributes(void) {
  int copied, same, dropped;
  OK(MPI_Type_create_keyval(type_copy, type_delete, &copied, NULL));
  OK(MPI_Type_create_keyval(MPI_TYPE_DUP_FN, MPI_TYPE_NULL_DELETE_FN, &same, NULL));
  OK(MPI_Type_create_keyval(MPI_TYPE_NULL_COPY_FN, type_delete, &dropped, NULL));
  MPI_Datatype pair, dup;
  OK(MPI_Type_contiguous(2, MPI_INT, &pair));
  CHECK(get_type_attr(pair, copied) == -1, "an attribute never set was found");
  OK(MPI_Type_set_attr(pair, copied, (void *)3));
  OK(MPI_Type_set_attr(pair, same, (void *)4));
  OK(MPI_Type_set_attr(pair, dropped, (void *)5));
  CHECK(get_type_attr(pair, copied) == 3 && get_type_attr(pair, same) == 4,
        "the attributes set on a type");
  OK(MPI_Type_dup(pair, &dup));
  CHECK(get_type_attr(dup, copied) == 30 && get_type_attr(dup, same) == 4 &&
            get_type_attr(dup, dropped) == -1,
        "MPI_Type_dup's attributes: %ld %ld %ld", (long)get_type_attr(dup, copied),
        (long)get_type_attr(dup, same), (long)get_type_attr(dup, dropped));
  deletions = 0;
  OK(MPI_Type_free(&dup));
  CHECK(deletions == 1 && deleted_value == 30 && deleted_size == 8,
        "MPI_Type_free's deletions: %d, value %d, size %d", deletions, deleted_value,
        deleted_size);
  /* Replacing a value deletes the old one; so does MPI_Type_delete_attr. */
  OK(MPI_Type_set_attr(pair, copied, (void *)6));
  CHECK(deletions == 2 && deleted_value == 3, "replaced: %d deletions", deletions);
  OK(MPI_Type_delete_attr(pair, copied));
  CHECK(deletions == 3 && deleted_value == 6 && get_type_attr(pair, copied) == -1,
        "MPI_Type_delete_attr");
  /* A freed key's attribute is still deleted by its function. */
  OK(MPI_Type_free_keyval(&dropped));
  CHECK(dropped == MPI_KEYVAL_INVALID, "MPI_Type_free_keyval left the key");
  OK(MPI_Type_free(&pair));
  CHECK(deletions == 4 && deleted_value == 5, "a freed key's attribute: %d deletions",
        deletions);
  /* On a predefined type. */
  OK(MPI_Type_set_attr(MPI_INT, same, (void *)7));
  CHECK(get_type_attr(MPI_INT, same) == 7, "an attribute on MPI_INT");
  OK(MPI_Type_delete_attr(MPI_INT, same));
  CHECK(get_type_attr(MPI_INT, same) == -1, "MPI_INT's attribute deleted");

  /* Windows. */
  int wkey, ckey;
  OK(MPI_Win_create_keyval(MPI_WIN_NULL_COPY_FN, win_delete, &wkey, NULL));
  OK(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, MPI_COMM_NULL_DELETE_FN, &ckey, NULL));
  int mem[4];
  MPI_Win w;
  OK(MPI_Win_create(mem, sizeof mem, sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &w));
  OK(MPI_Win_set_attr(w, wkey, (void *)8));
  void *v = NULL;
  int flag = 0;
  OK(MPI_Win_get_attr(w, wkey, &v, &flag));
  CHECK(flag && (intptr_t)v == 8, "a window's attribute");
  MPI_Aint *wsize = NULL;
  OK(MPI_Win_get_attr(w, MPI_WIN_SIZE, &wsize, &flag));
  CHECK(flag && *wsize == (MPI_Aint)sizeof mem, "MPI_WIN_SIZE beside the program's");
  errors_return(MPI_COMM_SELF, 1);
  OK(MPI_Win_set_errhandler(w, MPI_ERRORS_RETURN));
  EXPECT_ERR(MPI_Win_set_attr(w, ckey, (void *)1), MPI_ERR_KEYVAL, "MPI_Win_create_keyval");
  EXPECT_ERR(MPI_Type_set_attr(MPI_INT, wkey, (void *)1), MPI_ERR_KEYVAL,
             "MPI_Type_create_keyval");
  EXPECT_ERR(MPI_Type_delete_attr(MPI_INT, copied), MPI_ERR_KEYVAL, "no attribute");
  errors_return(MPI_COMM_SELF, 0);
  deletions = 0;
  OK(MPI_Win_free(&w));
  CHECK(deletions == 1 && deleted_value == 8 && deleted_size == (int)sizeof mem,
        "MPI_Win_free's deletions: %d, value %d, size %d", deletions, deleted_value,
        deleted_size);
  OK(MPI_Win_free_keyval(&wkey));
  OK(MPI_Comm_free_keyval(&ckey));
  OK(MPI_Type_free_keyval(&copied));
  OK(MPI_Type_free_keyval(&same));
}

/* Buffered sends of `n` ints to the next rank on `comm`, received from the one
 * before: the values must arrive. */
static void bsend_ring(MPI_Comm comm, int n, int tag) {
  int *out = malloc(n * sizeof(int)), *in = malloc(n * sizeof(int));
  CHECK(out && in, "out of memory");
  for (int i = 0; i < n; i++)
    out[i] = rank * 1000 + i;
  MPI_Request r;
  OK(MPI_Irecv(in, n, MPI_INT, (rank + size - 1) % size, tag, comm, &r));
  OK(MPI_Bsend(out, n, MPI_INT, (rank + 1) % size, tag, comm));
  OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
  int from = (rank + size - 1) % size;
  for (int i = 0; i < n; i++)
    CHECK(in[i] == from * 1000 + i, "buffered send: element %d is %d", i, in[i]);
  free(out);
  free(in);
}

static void test_buffers(void) {
  enum { BIG = 1 << 18 }; /* ints: 1 MiB, above every eager limit */
  MPI_Comm dup;
  OK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
  int small_size = 64 + MPI_BSEND_OVERHEAD, big_size = BIG * 4 + MPI_BSEND_OVERHEAD;
  char *small = malloc(small_size), *big = malloc(big_size);
  CHECK(small && big, "out of memory");
  OK(MPI_Buffer_attach(small, small_size));
  OK(MPI_Comm_attach_buffer(dup, big, big_size));
  errors_return(MPI_COMM_WORLD, 1);
  errors_return(dup, 1);
  int x = 0;
  EXPECT_ERR(MPI_Comm_attach_buffer(dup, big, big_size), MPI_ERR_BUFFER, "attached already");
  /* The process's buffer is too small for 1 MiB; the communicator's is not. */
  int *data = calloc(BIG, sizeof(int));
  CHECK(data != NULL, "out of memory");
  EXPECT_ERR(MPI_Bsend(data, BIG, MPI_INT, rank, 1, MPI_COMM_WORLD), MPI_ERR_BUFFER,
             "this send needs");
  bsend_ring(dup, BIG, 2);
  bsend_ring(MPI_COMM_WORLD, 16, 3);
  OK(MPI_Buffer_flush());
  OK(MPI_Comm_flush_buffer(dup));
  /* A nonblocking flush is not done while its message has no receive. */
  OK(MPI_Bsend(data, BIG, MPI_INT, (rank + 1) % size, 4, dup));
  MPI_Request flush;
  OK(MPI_Comm_iflush_buffer(dup, &flush));
  int flag = -1;
  OK(MPI_Test(&flush, &flag, MPI_STATUS_IGNORE));
  CHECK(flag == 0, "the flush was done before its message was received");
  OK(MPI_Barrier(MPI_COMM_WORLD));
  int *in = malloc(BIG * sizeof(int));
  CHECK(in != NULL, "out of memory");
  MPI_Request reqs[2] = {flush, MPI_REQUEST_NULL};
  OK(MPI_Irecv(in, BIG, MPI_INT, (rank + size - 1) % size, 4, dup, &reqs[1]));
  OK(MPI_Waitall(2, reqs, MPI_STATUSES_IGNORE));
  OK(MPI_Buffer_iflush(&flush));
  OK(MPI_Wait(&flush, MPI_STATUS_IGNORE));
  void *addr = NULL;
  int got = -1;
  OK(MPI_Comm_detach_buffer(dup, &addr, &got));
  CHECK(addr == big && got == big_size, "the communicator's buffer handed back: %p %d", addr,
        got);
  EXPECT_ERR(MPI_Comm_detach_buffer(dup, &addr, &got), MPI_ERR_BUFFER, "no buffer");
  /* Without a buffer of its own, the communicator's sends take the process's. */
  EXPECT_ERR(MPI_Bsend(data, small_size / (int)sizeof(int), MPI_INT, rank, 5, dup),
             MPI_ERR_BUFFER, "this send needs");
  OK(MPI_Buffer_detach(&addr, &got));
  CHECK(addr == small && got == small_size, "the process's buffer handed back");
  EXPECT_ERR(MPI_Bsend(&x, 1, MPI_INT, rank, 6, MPI_COMM_WORLD), MPI_ERR_BUFFER,
             "no buffer is attached");
  /* Automatic: no limit; detached as MPI_BUFFER_AUTOMATIC, size 0. */
  OK(MPI_Buffer_attach(MPI_BUFFER_AUTOMATIC, 0));
  bsend_ring(MPI_COMM_WORLD, BIG, 7);
  OK(MPI_Buffer_detach(&addr, &got));
  CHECK(addr == MPI_BUFFER_AUTOMATIC && got == 0, "the automatic buffer handed back: %p %d",
        addr, got);
  errors_return(dup, 0);
  errors_return(MPI_COMM_WORLD, 0);
  OK(MPI_Comm_free(&dup));
  free(in);
  free(data);
  free(small);
  free(big);
}

static void test_idup(void) {
  MPI_Comm base, dup, cart;
  OK(MPI_Comm_dup(MPI_COMM_WORLD, &base));
  int key, flag = 0;
  void *v = NULL;
  OK(MPI_Comm_create_keyval(MPI_COMM_DUP_FN, MPI_COMM_NULL_DELETE_FN, &key, NULL));
  OK(MPI_Comm_set_attr(base, key, (void *)11));
  MPI_Request r;
  OK(MPI_Comm_idup(base, &dup, &r));
  OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
  OK(MPI_Comm_get_attr(dup, key, &v, &flag));
  CHECK(flag && (intptr_t)v == 11, "MPI_Comm_idup's attribute");
  /* A wildcard receive on the duplicate does not take the original's message. */
  int wild = -1, got = -1, one = 1, two = 2;
  MPI_Request w;
  OK(MPI_Irecv(&wild, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, dup, &w));
  OK(MPI_Sendrecv(&one, 1, MPI_INT, rank, 1, &got, 1, MPI_INT, rank, 1, base,
                  MPI_STATUS_IGNORE));
  OK(MPI_Send(&two, 1, MPI_INT, rank, 2, dup));
  OK(MPI_Wait(&w, MPI_STATUS_IGNORE));
  CHECK(got == 1 && wild == 2, "traffic crossed the duplicate: %d %d", got, wild);
  /* A blocking duplicate while one is under way (both propose the same context:
   * the blocking one must agree in two rounds, as the other may take it meanwhile). */
  MPI_Comm under_way, blocking;
  OK(MPI_Comm_idup(base, &under_way, &r));
  OK(MPI_Comm_dup(base, &blocking));
  OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
  OK(MPI_Irecv(&wild, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, under_way, &w));
  OK(MPI_Send(&one, 1, MPI_INT, rank, 1, blocking));
  OK(MPI_Send(&two, 1, MPI_INT, rank, 2, under_way));
  OK(MPI_Wait(&w, MPI_STATUS_IGNORE));
  OK(MPI_Recv(&got, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, blocking, MPI_STATUS_IGNORE));
  CHECK(got == 1 && wild == 2, "traffic crossed two duplicates: %d %d", got, wild);
  OK(MPI_Comm_free(&blocking));
  OK(MPI_Comm_free(&under_way));
  /* 35 more of `base`, all under way at once, a blocking duplicate and a
   * nonblocking all-reduce of `base` among them; then duplicates of two of them in
   * opposite orders on even and odd ranks. */
  enum { N = 36 };
  MPI_Comm more[N + 2], between;
  MPI_Request rs[N];
  more[0] = dup;
  for (int i = 1; i < N; i++) {
    OK(MPI_Comm_idup_with_info(base, MPI_INFO_NULL, &more[i], &rs[i]));
    if (i == 8)
      OK(MPI_Comm_dup(base, &between));
  }
  int all = -1;
  OK(MPI_Iallreduce(&rank, &all, 1, MPI_INT, MPI_SUM, base, &rs[0]));
  OK(MPI_Waitall(N, rs, MPI_STATUSES_IGNORE));
  CHECK(all == size * (size - 1) / 2, "the all-reduce among the duplicates gave %d", all);
  for (int j = 0; j < 2; j++) {
    int k = rank % 2 ? 1 - j : j;
    OK(MPI_Comm_idup(more[1 + k], &more[N + k], &rs[j]));
  }
  OK(MPI_Waitall(2, rs, MPI_STATUSES_IGNORE));
  /* Each one's traffic apart: a message to itself on each, received by wildcards
   * in the other order; then an all-reduce on each. */
  int which[N + 2];
  MPI_Request sends[N + 2];
  for (int i = 0; i < N + 2; i++) {
    which[i] = i;
    OK(MPI_Isend(&which[i], 1, MPI_INT, rank, i, more[i], &sends[i]));
  }
  OK(MPI_Send(&one, 1, MPI_INT, rank, 0, between));
  for (int i = N + 1; i >= 0; i--) {
    MPI_Status st;
    OK(MPI_Recv(&got, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, more[i], &st));
    CHECK(got == i && st.MPI_TAG == i, "duplicate %d got %d (tag %d)", i, got, st.MPI_TAG);
  }
  OK(MPI_Waitall(N + 2, sends, MPI_STATUSES_IGNORE));
  OK(MPI_Recv(&got, 1, MPI_INT, rank, 0, between, MPI_STATUS_IGNORE));
  for (int i = 0; i < N + 2; i++) {
    int sum = -1;
    OK(MPI_Allreduce(&i, &sum, 1, MPI_INT, MPI_SUM, more[i]));
    CHECK(sum == i * size, "duplicate %d's all-reduce gave %d", i, sum);
  }
  /* An intercommunicator's, under way while the intercommunicator merges. */
  if (size > 1) {
    MPI_Comm half, inter, inter_dup, merged;
    OK(MPI_Comm_split(base, rank % 2, rank, &half));
    OK(MPI_Intercomm_create(half, 0, base, 1 - rank % 2, 7, &inter));
    OK(MPI_Comm_idup(inter, &inter_dup, &rs[0]));
    OK(MPI_Intercomm_merge(inter, rank % 2, &merged));
    OK(MPI_Wait(&rs[0], MPI_STATUS_IGNORE));
    int remote = -1, ones = -1, me = 1;
    OK(MPI_Comm_remote_size(inter_dup, &remote));
    OK(MPI_Allreduce(&me, &ones, 1, MPI_INT, MPI_SUM, inter_dup));
    CHECK(ones == remote, "the intercommunicator's duplicate summed %d of %d", ones, remote);
    OK(MPI_Allreduce(&me, &ones, 1, MPI_INT, MPI_SUM, merged));
    CHECK(ones == size, "the merged communicator summed %d", ones);
    OK(MPI_Comm_free(&merged));
    OK(MPI_Comm_free(&inter_dup));
    OK(MPI_Comm_free(&inter));
    OK(MPI_Comm_free(&half));
  }
  /* A grid's duplicate keeps the grid. */
  int dims[1] = {size}, periods[1] = {1}, topo = -1;
  OK(MPI_Cart_create(MPI_COMM_WORLD, 1, dims, periods, 0, &cart));
  MPI_Comm cart_dup;
  OK(MPI_Comm_idup(cart, &cart_dup, &r));
  OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
  OK(MPI_Topo_test(cart_dup, &topo));
  CHECK(topo == MPI_CART, "MPI_Comm_idup's topology: %d", topo);
  OK(MPI_Comm_free(&cart_dup));
  OK(MPI_Comm_free(&cart));
  for (int i = 0; i < N + 2; i++)
    OK(MPI_Comm_free(&more[i]));
  OK(MPI_Comm_free(&between));
  OK(MPI_Comm_free(&base));
  OK(MPI_Comm_free_keyval(&key));
}

int main(int argc, char **argv) {
  start("utilities", &argc, &argv);
  test_alloc_mem();
  test_status();
  test_info();
  test_mpi1_attributes();
  test_type_win_attributes();
  test_buffers();
  test_idup();
  return finish();
}
