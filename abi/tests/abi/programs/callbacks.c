/* callbacks.c: MPI calls made from inside the library's callbacks, at 1 or more
 * ranks. A user reduction function may call MPI functions other than
 * communication (here it asks the datatype's extent and size, as functions that
 * serve several types do; inside a nonblocking or persistent collective, whose
 * progress runs it within other calls, those two questions still); attribute copy and delete callbacks may call MPI (here
 * they read the communicator, and free a datatype kept as an attribute's value);
 * the delete callbacks of MPI_COMM_SELF's attributes run at the start of
 * MPI_Finalize, when MPI still works, in the reverse order of their setting (the
 * later key set first, so that key order would be wrong). */
#include "check.h"

static int op_calls, op_failures;
static int copy_ok, delete_ok, self_ok;

/* Sums ints, whatever the element type, by asking the type its shape. */
static void sum_any(void *in, void *inout, int *len, MPI_Datatype *type) {
  MPI_Aint lb, extent;
  int bytes;
  if (MPI_Type_get_extent(*type, &lb, &extent) != MPI_SUCCESS ||
      MPI_Type_size(*type, &bytes) != MPI_SUCCESS) {
    op_failures++;
    return;
  }
  op_calls++;
  int per = bytes / (int)sizeof(int);
  for (int j = 0; j < *len; j++)
    for (int k = 0; k < per; k++)
      ((int *)((char *)inout + j * extent))[k] += ((int *)((char *)in + j * extent))[k];
}

static int copy_reads(MPI_Comm old, int key, void *extra, void *in, void *out, int *flag) {
  (void)key;
  (void)extra;
  int r = -1;
  if (MPI_Comm_rank(old, &r) == MPI_SUCCESS && r == rank)
    copy_ok++;
  *(void **)out = in;
  *flag = 1;
  return MPI_SUCCESS;
}

static int delete_frees(MPI_Comm c, int key, void *value, void *extra) {
  (void)extra;
  MPI_Datatype t = (MPI_Datatype)value;
  void *v = NULL;
  int flag = 0, n = -1;
  /* The attribute is still readable while it is being deleted. */
  if (MPI_Comm_get_attr(c, key, &v, &flag) == MPI_SUCCESS &&
      MPI_Type_size(t, &n) == MPI_SUCCESS && n == 8 && MPI_Type_free(&t) == MPI_SUCCESS)
    delete_ok++;
  return MPI_SUCCESS;
}

static int self_delete(MPI_Comm c, int key, void *value, void *extra) {
  (void)c;
  (void)key;
  (void)value;
  (void)extra;
  int n = -1;
  if (MPI_Comm_size(MPI_COMM_WORLD, &n) == MPI_SUCCESS && n == size)
    self_ok++;
  return MPI_SUCCESS;
}

/* The order MPI_COMM_SELF's deletions ran in: each records its extra state. */
static int deleted[2], ndeleted;

static int record_delete(MPI_Comm c, int key, void *value, void *extra) {
  (void)c, (void)key, (void)value;
  if (ndeleted < 2)
    deleted[ndeleted] = (int)(intptr_t)extra;
  ndeleted++;
  return MPI_SUCCESS;
}

int main(int argc, char **argv) {
  start("callbacks", &argc, &argv);
  /* A failed call inside a callback is reported here, not fatal there. */
  errors_return(MPI_COMM_WORLD, 1);
  errors_return(MPI_COMM_SELF, 1);

  MPI_Op op;
  OK(MPI_Op_create(sum_any, 1, &op));
  int in[4] = {rank, 1, 2 * rank, 3}, out[4];
  MPI_Datatype two;
  OK(MPI_Type_contiguous(2, MPI_INT, &two));
  OK(MPI_Type_commit(&two));
  OK(MPI_Allreduce(in, out, 2, two, op, MPI_COMM_WORLD));
  CHECK(op_failures == 0, "MPI calls inside a reduction function failed %d times", op_failures);
  CHECK(out[0] == size * (size - 1) / 2 && out[1] == size && out[3] == 3 * size,
        "a reduction function asking its type: %d %d %d", out[0], out[1], out[3]);
  OK(MPI_Reduce_local(in, out, 2, two, op));
  CHECK(op_failures == 0, "MPI calls inside MPI_Reduce_local's function failed");
  /* Run inside the calls that progress a nonblocking or persistent collective, the
   * function's other calls cannot enter the library: its type's size and bounds
   * are still answered. */
  MPI_Request r;
  for (int persistent = 0; persistent < 2; persistent++) {
    memset(out, 0, sizeof out);
    if (persistent) {
      OK(MPI_Allreduce_init(in, out, 2, two, op, MPI_COMM_WORLD, MPI_INFO_NULL, &r));
      OK(MPI_Start(&r));
    } else {
      OK(MPI_Iallreduce(in, out, 2, two, op, MPI_COMM_WORLD, &r));
    }
    OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    if (persistent)
      OK(MPI_Request_free(&r));
    CHECK(op_failures == 0, "a reduction function inside a nonblocking collective: %d failed",
          op_failures);
    CHECK(out[0] == size * (size - 1) / 2 && out[1] == size && out[3] == 3 * size,
          "a nonblocking reduction function asking its type: %d %d %d", out[0], out[1],
          out[3]);
  }
  OK(MPI_Op_free(&op));

  int key;
  OK(MPI_Comm_create_keyval(copy_reads, delete_frees, &key, NULL));
  MPI_Comm a, b;
  OK(MPI_Comm_dup(MPI_COMM_WORLD, &a));
  MPI_Datatype kept;
  OK(MPI_Type_dup(two, &kept));
  OK(MPI_Comm_set_attr(a, key, (void *)kept));
  OK(MPI_Comm_dup(a, &b));
  CHECK(copy_ok == 1, "MPI calls inside a copy callback: %d of 1 worked", copy_ok);
  /* b's copy names the same datatype: deleted once, on b; a's value replaced. */
  OK(MPI_Comm_set_attr(b, key, NULL));
  CHECK(delete_ok == 1, "MPI calls inside a delete callback: %d of 1 worked", delete_ok);
  OK(MPI_Comm_free(&b));
  OK(MPI_Comm_free(&a));
  OK(MPI_Comm_free_keyval(&key));
  OK(MPI_Type_free(&two));

  int self_key;
  OK(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, self_delete, &self_key, NULL));
  OK(MPI_Comm_set_attr(MPI_COMM_SELF, self_key, NULL));
  int first_key, second_key;
  OK(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, record_delete, &first_key, (void *)1));
  OK(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, record_delete, &second_key, (void *)2));
  OK(MPI_Comm_set_attr(MPI_COMM_SELF, second_key, NULL));
  OK(MPI_Comm_set_attr(MPI_COMM_SELF, first_key, NULL));
  OK(MPI_Finalize());
  CHECK(ndeleted == 2 && deleted[0] == 1 && deleted[1] == 2,
        "MPI_COMM_SELF's deletions ran in the order %d %d (%d of them), not 1 2", deleted[0],
        deleted[1], ndeleted);
  CHECK(self_ok == 1, "MPI calls inside MPI_COMM_SELF's delete callback at MPI_Finalize: %d "
                      "of 1 worked",
        self_ok);
  printf("PASS callbacks rank %d/%d\n", rank, size);
  return 0;
}
