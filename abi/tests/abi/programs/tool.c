/* tool.c: the tool information interface, before MPI_Init, during and after
 * MPI_Finalize. rbtl's parameters as control variables: a count, names and
 * descriptions by the interface's length convention, an integer
 * (msg_peer_timeout, which the test sets to 77 through RBTL_MSG_PEER_TIMEOUT), a
 * size (btl_sm_eager_limit) and a string (msg_bind_to) read through handles, every
 * variable readable; writes refused; categories and their variables; the
 * performance variables (a counter of completed requests and the two matching
 * queues' lengths, read through a session's handles before MPI_Init and while
 * messages wait, reset, and their errors); no events, sources or enumerations (no
 * index or handle of theirs valid); the errors of bad names, indices and handles,
 * and of calls outside MPI_T_init_thread/MPI_T_finalize. */
#include "check.h"

/* The index of control variable `name`. */
static int cvar(const char *name) {
  int i = -1;
  int rc = MPI_T_cvar_get_index(name, &i);
  CHECK(rc == MPI_SUCCESS && i >= 0, "MPI_T_cvar_get_index(%s): %d", name, rc);
  return i;
}

/* Read variable `i` into `buf` (room for `room` bytes): its type and count. */
static void read_var(int i, void *buf, size_t room, MPI_Datatype *ty, int *count) {
  char name[256];
  int len = sizeof name, verbosity, bind, scope;
  MPI_T_enum en;
  OK(MPI_T_cvar_get_info(i, name, &len, &verbosity, ty, &en, NULL, NULL, &bind, &scope));
  CHECK(bind == MPI_T_BIND_NO_OBJECT && scope == MPI_T_SCOPE_READONLY,
        "%s: bind %d scope %d", name, bind, scope);
  MPI_T_cvar_handle h;
  OK(MPI_T_cvar_handle_alloc(i, NULL, &h, count));
  /* The interface's types (MPI_Type_size needs MPI_Init). */
  size_t size = *ty == MPI_CHAR ? 1 : *ty == MPI_INT ? sizeof(int) : 8;
  CHECK(*ty == MPI_CHAR || *ty == MPI_INT || *ty == MPI_COUNT || *ty == MPI_UNSIGNED_LONG_LONG,
        "%s: a type the interface does not use", name);
  CHECK(size * *count <= room, "%s: %d of %zu bytes", name, *count, size);
  OK(MPI_T_cvar_read(h, buf));
  OK(MPI_T_cvar_handle_free(&h));
  CHECK(h == MPI_T_CVAR_HANDLE_NULL, "handle_free left the handle");
}

/* The index of performance variable `name` of class `cls`, and its handle in
 * session `s`. */
static MPI_T_pvar_handle pvar(MPI_T_pvar_session s, const char *name, int cls) {
  int i = -1, count = 0;
  OK(MPI_T_pvar_get_index(name, cls, &i));
  char got[64], desc[256];
  int len = sizeof got, dlen = sizeof desc, verbosity, klass, bind, ro, cont, atomic;
  MPI_Datatype ty;
  MPI_T_enum en;
  OK(MPI_T_pvar_get_info(i, got, &len, &verbosity, &klass, &ty, &en, desc, &dlen, &bind, &ro,
                         &cont, &atomic));
  CHECK(!strcmp(got, name) && klass == cls && ty == MPI_UNSIGNED_LONG_LONG &&
            bind == MPI_T_BIND_NO_OBJECT && ro && cont && strlen(desc) > 10,
        "%s: class %d, bind %d, readonly %d, continuous %d", got, klass, bind, ro, cont);
  MPI_T_pvar_handle h;
  OK(MPI_T_pvar_handle_alloc(s, i, NULL, &h, &count));
  CHECK(count == 1, "%s: count %d", name, count);
  return h;
}

static unsigned long long pread(MPI_T_pvar_session s, MPI_T_pvar_handle h) {
  unsigned long long v = ~0ULL;
  OK(MPI_T_pvar_read(s, h, &v));
  return v;
}

/* Rank 0 looks at its queues while the others wait for its word (so that nothing
 * of theirs arrives meanwhile). */
static void test_pvars(MPI_T_pvar_session s, MPI_T_pvar_handle done, MPI_T_pvar_handle posted,
                       MPI_T_pvar_handle unexpected) {
  int x = 5, y = 0, flag = 0;
  if (rank != 0) {
    OK(MPI_Recv(&y, 1, MPI_INT, 0, 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    return;
  }
  unsigned long long u0 = pread(s, unexpected), p0 = pread(s, posted);
  /* A message nobody receives yet: unexpected once it has arrived. */
  OK(MPI_Send(&x, 1, MPI_INT, rank, 11, MPI_COMM_WORLD));
  for (int k = 0; k < 1000 && !flag; k++)
    OK(MPI_Iprobe(rank, 11, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE));
  CHECK(flag && pread(s, unexpected) == u0 + 1, "unexpected messages: %llu, %llu before",
        pread(s, unexpected), u0);
  OK(MPI_Recv(&y, 1, MPI_INT, rank, 11, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
  CHECK(pread(s, unexpected) == u0, "unexpected after the receive: %llu", pread(s, unexpected));
  /* A receive nobody sends to yet: posted until its message comes. */
  MPI_Request r;
  OK(MPI_Irecv(&y, 1, MPI_INT, rank, 12, MPI_COMM_WORLD, &r));
  CHECK(pread(s, posted) == p0 + 1, "posted receives: %llu, %llu before", pread(s, posted),
        p0);
  OK(MPI_Send(&x, 1, MPI_INT, rank, 12, MPI_COMM_WORLD));
  OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
  CHECK(pread(s, posted) == p0, "posted after the message: %llu", pread(s, posted));
  /* The counter counts from its handle's allocation, and from a reset. */
  unsigned long long n = 0, after = ~0ULL;
  OK(MPI_T_pvar_readreset(s, done, &n));
  CHECK(n >= 1, "%llu completed requests after two sends and two receives", n);
  OK(MPI_T_pvar_read(s, done, &after));
  CHECK(after < n, "the counter read %llu after its reset (%llu before)", after, n);
  OK(MPI_T_pvar_reset(s, MPI_T_PVAR_ALL_HANDLES));
  for (int k = 1; k < size; k++)
    OK(MPI_Send(&x, 1, MPI_INT, k, 99, MPI_COMM_WORLD));
}

/* No event, source or enumeration: no index, registration, instance or
 * enumeration is valid. */
static void test_no_events(void) {
  char name[16];
  int len = sizeof name, n, idx;
  MPI_Count ticks, max_ticks, stamp;
  MPI_T_source_order order;
  MPI_Info info;
  MPI_T_enum en;
  MPI_T_event_registration reg = NULL;
  MPI_T_event_instance inst = NULL;
  CHECK(MPI_T_event_get_info(0, name, &len, &n, NULL, NULL, &n, &en, &info, NULL, NULL, &n) ==
            MPI_T_ERR_INVALID_INDEX,
        "an event's information");
  CHECK(MPI_T_event_handle_alloc(0, NULL, MPI_INFO_NULL, &reg) == MPI_T_ERR_INVALID_INDEX,
        "a registration");
  CHECK(MPI_T_source_get_info(0, name, &len, NULL, NULL, &order, &ticks, &max_ticks, &info) ==
            MPI_T_ERR_INVALID_INDEX,
        "a source's information");
  CHECK(MPI_T_source_get_timestamp(-1, &stamp) == MPI_T_ERR_INVALID_INDEX, "a source's time");
  CHECK(MPI_T_event_handle_free(reg, NULL, NULL) == MPI_T_ERR_INVALID_HANDLE, "handle_free");
  CHECK(MPI_T_event_handle_get_info(reg, &info) == MPI_T_ERR_INVALID_HANDLE, "handle_get_info");
  CHECK(MPI_T_event_handle_set_info(reg, MPI_INFO_NULL) == MPI_T_ERR_INVALID_HANDLE,
        "handle_set_info");
  CHECK(MPI_T_event_register_callback(reg, MPI_T_CB_REQUIRE_NONE, MPI_INFO_NULL, NULL, NULL) ==
            MPI_T_ERR_INVALID_HANDLE,
        "register_callback");
  CHECK(MPI_T_event_callback_get_info(reg, MPI_T_CB_REQUIRE_NONE, &info) ==
            MPI_T_ERR_INVALID_HANDLE,
        "callback_get_info");
  CHECK(MPI_T_event_callback_set_info(reg, MPI_T_CB_REQUIRE_NONE, MPI_INFO_NULL) ==
            MPI_T_ERR_INVALID_HANDLE,
        "callback_set_info");
  CHECK(MPI_T_event_set_dropped_handler(reg, NULL) == MPI_T_ERR_INVALID_HANDLE,
        "set_dropped_handler");
  CHECK(MPI_T_event_copy(inst, name) == MPI_T_ERR_INVALID_HANDLE, "event_copy");
  CHECK(MPI_T_event_read(inst, 0, name) == MPI_T_ERR_INVALID_HANDLE, "event_read");
  CHECK(MPI_T_event_get_source(inst, &idx) == MPI_T_ERR_INVALID_HANDLE, "event_get_source");
  CHECK(MPI_T_event_get_timestamp(inst, &stamp) == MPI_T_ERR_INVALID_HANDLE,
        "event_get_timestamp");
  CHECK(MPI_T_enum_get_info(MPI_T_ENUM_NULL, &n, name, &len) == MPI_T_ERR_INVALID_HANDLE,
        "enum_get_info");
  CHECK(MPI_T_enum_get_item(MPI_T_ENUM_NULL, 0, &n, name, &len) == MPI_T_ERR_INVALID_HANDLE,
        "enum_get_item");
}

int main(int argc, char **argv) {
  int n = -1, provided = -1;
  CHECK(MPI_T_cvar_get_num(&n) == MPI_T_ERR_NOT_INITIALIZED, "a call before MPI_T_init_thread");
  OK(MPI_T_init_thread(MPI_THREAD_SINGLE, &provided));
  CHECK(provided == MPI_THREAD_SINGLE, "provided %d", provided);
  OK(MPI_T_cvar_get_num(&n));
  CHECK(n > 10, "%d control variables", n);

  /* Names by the length convention: measured with 0, then cut to the buffer. */
  int i = cvar("msg_peer_timeout"), len = 0;
  OK(MPI_T_cvar_get_info(i, NULL, &len, NULL, NULL, NULL, NULL, NULL, NULL, NULL));
  CHECK(len == (int)strlen("msg_peer_timeout") + 1, "name length %d", len);
  char cut[5];
  len = sizeof cut;
  OK(MPI_T_cvar_get_info(i, cut, &len, NULL, NULL, NULL, NULL, NULL, NULL, NULL));
  CHECK(len == 5 && !strcmp(cut, "msg_"), "cut name \"%s\", %d", cut, len);
  char desc[1024];
  len = sizeof desc;
  OK(MPI_T_cvar_get_info(i, NULL, NULL, NULL, NULL, NULL, desc, &len, NULL, NULL));
  CHECK(len > 10 && strlen(desc) == (size_t)len - 1, "description \"%s\"", desc);

  /* Values, through handles. */
  MPI_Datatype ty;
  int count = 0;
  MPI_Count secs = 0;
  read_var(i, &secs, sizeof secs, &ty, &count);
  CHECK(ty == MPI_COUNT && count == 1 && secs == 77, "msg_peer_timeout: %lld", (long long)secs);
  unsigned long long eager = 0;
  read_var(cvar("btl_sm_eager_limit"), &eager, sizeof eager, &ty, &count);
  CHECK(ty == MPI_UNSIGNED_LONG_LONG && eager > 0, "btl_sm_eager_limit: %llu", eager);
  char bind[64];
  read_var(cvar("msg_bind_to"), bind, sizeof bind, &ty, &count);
  CHECK(ty == MPI_CHAR && !strcmp(bind, "auto") && count == 5, "msg_bind_to: \"%s\" (%d)", bind,
        count);
  /* Every variable reads. */
  for (int k = 0; k < n; k++) {
    char buf[4096];
    read_var(k, buf, sizeof buf, &ty, &count);
  }
  MPI_T_cvar_handle h;
  OK(MPI_T_cvar_handle_alloc(i, NULL, &h, &count));
  CHECK(MPI_T_cvar_write(h, &secs) == MPI_T_ERR_CVAR_SET_NEVER, "a write");
  OK(MPI_T_cvar_handle_free(&h));
  CHECK(MPI_T_cvar_get_index("no_such_parameter", &i) == MPI_T_ERR_INVALID_NAME, "a bad name");
  /* A return code of the tool interface has a string and is its own class, as in
   * MPICH and Open MPI: a tool may print it as any other. */
  char text[MPI_MAX_ERROR_STRING];
  int cls = -1;
  OK(MPI_Error_string(MPI_T_ERR_INVALID_NAME, text, &len));
  CHECK(!strncmp(text, "MPI_T_ERR_INVALID_NAME: ", 24) && len == (int)strlen(text),
        "MPI_Error_string(MPI_T_ERR_INVALID_NAME): \"%s\"", text);
  OK(MPI_Error_class(MPI_T_ERR_INVALID_NAME, &cls));
  CHECK(cls == MPI_T_ERR_INVALID_NAME, "MPI_Error_class(MPI_T_ERR_INVALID_NAME): %d", cls);
  CHECK(MPI_T_cvar_get_info(n, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL) ==
            MPI_T_ERR_INVALID_INDEX,
        "a bad index");
  CHECK(MPI_T_cvar_read((MPI_T_cvar_handle)(intptr_t)(n + 5), &secs) == MPI_T_ERR_INVALID_HANDLE,
        "a bad handle");

  /* Categories: btl_sm holds btl_sm_eager_limit. */
  int cats = 0, c = -1, in_cat = 0, pv = -1, sub = -1;
  OK(MPI_T_category_get_num(&cats));
  OK(MPI_T_category_get_index("btl_sm", &c));
  CHECK(cats > 1 && c >= 0 && c < cats, "%d categories, btl_sm %d", cats, c);
  OK(MPI_T_category_get_info(c, NULL, NULL, NULL, NULL, &in_cat, &pv, &sub));
  CHECK(in_cat > 1 && pv == 0 && sub == 0, "btl_sm: %d variables", in_cat);
  int members[256];
  OK(MPI_T_category_get_cvars(c, in_cat, members));
  int found = 0;
  for (int k = 0; k < in_cat; k++)
    found += members[k] == cvar("btl_sm_eager_limit");
  CHECK(found == 1, "btl_sm_eager_limit is not in its category");
  int none = -1;
  OK(MPI_T_pvar_get_num(&none));
  CHECK(none == 5, "%d performance variables", none);
  MPI_T_pvar_session s;
  OK(MPI_T_pvar_session_create(&s));
  MPI_T_pvar_handle done = pvar(s, "msg_completed_requests", MPI_T_PVAR_CLASS_COUNTER);
  MPI_T_pvar_handle posted = pvar(s, "msg_posted_receives", MPI_T_PVAR_CLASS_SIZE);
  MPI_T_pvar_handle unexpected = pvar(s, "msg_unexpected_messages", MPI_T_PVAR_CLASS_SIZE);
  CHECK(pread(s, done) == 0 && pread(s, posted) == 0, "values before MPI_Init");
  unsigned long long v = 0;
  CHECK(MPI_T_pvar_start(s, done) == MPI_T_ERR_PVAR_NO_STARTSTOP, "start of a continuous one");
  OK(MPI_T_pvar_start(s, MPI_T_PVAR_ALL_HANDLES));
  CHECK(MPI_T_pvar_write(s, done, &v) == MPI_T_ERR_PVAR_NO_WRITE, "a write");
  CHECK(MPI_T_pvar_reset(s, posted) == MPI_T_ERR_PVAR_NO_WRITE, "a reset of a size");
  CHECK(MPI_T_pvar_read((MPI_T_pvar_session)(intptr_t)1000000, done, &v) ==
            MPI_T_ERR_INVALID_SESSION,
        "a bad session");
  CHECK(MPI_T_pvar_read(s, MPI_T_PVAR_HANDLE_NULL, &v) == MPI_T_ERR_INVALID_HANDLE,
        "a bad handle");
  int idx = -1;
  CHECK(MPI_T_pvar_get_index("msg_posted_receives", MPI_T_PVAR_CLASS_COUNTER, &idx) ==
            MPI_T_ERR_INVALID_NAME,
        "a name of another class");
  OK(MPI_T_event_get_num(&none));
  CHECK(none == 0, "%d events", none);
  CHECK(MPI_T_event_get_index("no such event", &idx) == MPI_T_ERR_INVALID_NAME,
        "an event's name");
  OK(MPI_T_source_get_num(&none));
  CHECK(none == 0, "%d sources", none);
  test_no_events();

  /* Through MPI's life and after it. */
  start("tool", &argc, &argv);
  OK(MPI_T_cvar_get_num(&n));
  test_pvars(s, done, posted, unexpected);
  OK(MPI_Finalize());
  OK(MPI_T_cvar_get_num(&n));
  CHECK(pread(s, posted) == 0, "a size after MPI_Finalize");
  OK(MPI_T_pvar_handle_free(s, &done));
  CHECK(done == MPI_T_PVAR_HANDLE_NULL, "handle_free left the handle");
  OK(MPI_T_pvar_session_free(&s));
  CHECK(s == MPI_T_PVAR_SESSION_NULL, "session_free left the session");
  OK(MPI_T_finalize());
  CHECK(MPI_T_finalize() == MPI_T_ERR_NOT_INITIALIZED, "a second MPI_T_finalize");
  CHECK(MPI_T_event_read(NULL, 0, &n) == MPI_T_ERR_NOT_INITIALIZED, "an event call after it");
  printf("PASS tool rank %d/%d\n", rank, size);
  return 0;
}
