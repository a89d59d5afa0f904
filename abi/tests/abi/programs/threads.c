/* MPI_THREAD_MULTIPLE: calls from several threads of a rank at once, among them
 * blocking calls that can only end after another thread of the same rank has made
 * its call (so a blocking call must let the others in while it waits).
 *
 * - a blocking receive from this very rank, whose send another thread makes later;
 * - a barrier (and an MPI_Comm_disconnect) that one rank can only reach after a
 *   message that another thread of its partner sends while the partner's own
 *   barrier waits;
 * - the same of a fence (MPI_Win_fence), and of a post/start/complete/wait epoch
 *   whose MPI_Win_start and MPI_Win_wait each wait for a message that another
 *   thread of their own rank sends meanwhile; and of MPI_Win_lock and
 *   MPI_Win_lock_all, whose lock rank 0 holds until another thread of the
 *   locking rank has sent it a message; and of MPI_Intercomm_create, the
 *   duplicate of an intercommunicator and MPI_Intercomm_merge, which rank 1 calls
 *   only after a message from another thread of rank 0; and of MPI_Comm_accept,
 *   to which rank 1 connects only after rank 0's main thread has called;
 * - two threads of each rank spawning a child each, in opposite orders on even
 *   and odd ranks;
 * - two threads of each rank making communicators (dup, split, create_group,
 *   Cartesian, distributed graph, from a group; intercommunicators made, duplicated
 *   and merged) and windows (create, allocate,
 *   allocate_shared) from two different parents, in opposite orders on even and
 *   odd ranks (so each creation and each window's free must let the other thread
 *   in), the new communicators' traffic kept apart, the windows reached with puts
 *   between fences; files opened, written in rank order, synced and closed the
 *   same way;
 * - ping-pongs between partner ranks, one per thread on its own tag, in blocking
 *   and nonblocking forms; all-reductions, one communicator per thread;
 * - MPI_Finalize refused while another thread's receive waits, and the library
 *   still whole after it.
 * With the argument "between": a level asked for between MPI_THREAD_SERIALIZED
 * and MPI_THREAD_MULTIPLE (no level) gets MPI_THREAD_SERIALIZED.
 */
#include "check.h"
#include <pthread.h>
#include <unistd.h>

enum { THREADS = 4, ROUNDS = 200, REDUCTIONS = 50, CREATIONS = 10, BIG = 1 << 20 };

static MPI_Comm comms[THREADS];
static int partner; /* the rank this one pairs with (itself when it has none) */

/* A receive from this rank, posted before its send (which another thread makes). */
static void *receive_from_self(void *buf) {
  MPI_Status st;
  OK(MPI_Recv(buf, BIG, MPI_BYTE, rank, 7, MPI_COMM_WORLD, &st));
  CHECK(st.MPI_SOURCE == rank && st.MPI_TAG == 7, "self receive: source %d tag %d",
        st.MPI_SOURCE, st.MPI_TAG);
  return NULL;
}

static void blocked_by_own_thread(void) {
  unsigned char *in = calloc(BIG, 1), *out = malloc(BIG);
  CHECK(in && out, "out of memory");
  for (int i = 0; i < BIG; i++)
    out[i] = (unsigned char)(i * 7 + rank);
  pthread_t t;
  CHECK(pthread_create(&t, NULL, receive_from_self, in) == 0, "pthread_create");
  usleep(50 * 1000); /* the receive is waiting inside MPI_Recv by now */
  OK(MPI_Send(out, BIG, MPI_BYTE, rank, 7, MPI_COMM_WORLD));
  CHECK(pthread_join(t, NULL) == 0, "pthread_join");
  CHECK(memcmp(in, out, BIG) == 0, "the self message arrived changed");
  free(in);
  free(out);
}

/* Rank 0's barrier on comms[0] (or disconnect of `dup`, a duplicate of it, when
 * given) waits for rank 1, whose own comes only after the message rank 0's
 * second thread sends on comms[1]. */
static void *barrier_thread(void *dup) {
  if (rank == 1) {
    int got = -1;
    OK(MPI_Recv(&got, 1, MPI_INT, 0, 3, comms[1], MPI_STATUS_IGNORE));
    CHECK(got == 42, "the message before the barrier: %d", got);
  }
  if (dup)
    OK(MPI_Comm_disconnect(dup));
  else
    OK(MPI_Barrier(comms[0]));
  return NULL;
}

static void barrier_after_other_thread(void) {
  for (int disconnect = 0; disconnect < 2; disconnect++) {
    MPI_Comm dup = MPI_COMM_NULL;
    if (disconnect)
      OK(MPI_Comm_dup(comms[0], &dup));
    pthread_t t;
    CHECK(pthread_create(&t, NULL, barrier_thread, disconnect ? &dup : NULL) == 0,
          "pthread_create");
    if (rank == 0 && size > 1) {
      usleep(50 * 1000); /* the barrier (or disconnect) is waiting by now */
      int v = 42;
      OK(MPI_Send(&v, 1, MPI_INT, 1, 3, comms[1]));
    }
    CHECK(pthread_join(t, NULL) == 0, "pthread_join");
    CHECK(dup == MPI_COMM_NULL, "MPI_Comm_disconnect left its handle");
  }
}

static MPI_Win win;

/* Rank 0's fence waits for rank 1, whose fence comes only after the message rank
 * 0's second thread sends on comms[1]. */
static void *fence_thread(void *arg) {
  (void)arg;
  if (rank == 1) {
    int got = -1;
    OK(MPI_Recv(&got, 1, MPI_INT, 0, 3, comms[1], MPI_STATUS_IGNORE));
    CHECK(got == 43, "the message before the fence: %d", got);
  }
  OK(MPI_Win_fence(0, win));
  return NULL;
}

/* A post/start/complete/wait epoch between ranks 0 (target) and 1 (origin):
 * rank 1's MPI_Win_start waits for rank 0's post, which comes after the message
 * rank 1's main thread sends meanwhile; rank 0's MPI_Win_wait waits for rank 1's
 * complete, which comes after the message rank 0's main thread sends meanwhile. */
static void *epoch_thread(void *arg) {
  MPI_Group world, peer;
  int other = 1 - rank, got = -1;
  OK(MPI_Comm_group(comms[0], &world));
  OK(MPI_Group_incl(world, 1, &other, &peer));
  if (rank == 0) {
    OK(MPI_Recv(&got, 1, MPI_INT, 1, 4, comms[1], MPI_STATUS_IGNORE));
    OK(MPI_Win_post(peer, 0, win));
    OK(MPI_Win_wait(win));
    CHECK(*(int *)arg == 77, "the put of the epoch: %d", *(int *)arg);
  } else {
    OK(MPI_Win_start(peer, 0, win));
    OK(MPI_Recv(&got, 1, MPI_INT, 0, 5, comms[1], MPI_STATUS_IGNORE));
    int v = 77;
    OK(MPI_Put(&v, 1, MPI_INT, 0, 0, 1, MPI_INT, win));
    OK(MPI_Win_complete(win));
  }
  OK(MPI_Group_free(&peer));
  OK(MPI_Group_free(&world));
  return NULL;
}

/* Rank 1's lock of rank 0's window memory, taken once rank 0 has put `value`
 * there under its exclusive lock (which it keeps until rank 1's main thread has
 * sent it a message): MPI_Win_lock in round 0, MPI_Win_lock_all in round 1. */
struct locked {
  int round, value;
};

static void *lock_thread(void *arg) {
  struct locked *l = arg;
  int seen = -1, got = -1;
  OK(MPI_Recv(&seen, 1, MPI_INT, 0, 6, comms[1], MPI_STATUS_IGNORE));
  if (l->round == 0)
    OK(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win));
  else
    OK(MPI_Win_lock_all(0, win));
  OK(MPI_Get(&got, 1, MPI_INT, 0, 0, 1, MPI_INT, win));
  OK(l->round == 0 ? MPI_Win_unlock(0, win) : MPI_Win_unlock_all(win));
  CHECK(got == l->value && seen == l->value, "round %d: read %d under the lock, %d put", l->round,
        got, l->value);
  return NULL;
}

static void locks_after_other_thread(void) {
  for (int round = 0; round < 2; round++) {
    struct locked l = {round, 88 + round};
    int got = -1;
    if (rank == 0) {
      OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win));
      OK(MPI_Put(&l.value, 1, MPI_INT, 0, 0, 1, MPI_INT, win));
      OK(MPI_Win_flush(0, win));
      OK(MPI_Send(&l.value, 1, MPI_INT, 1, 6, comms[1]));
      OK(MPI_Recv(&got, 1, MPI_INT, 1, 7, comms[1], MPI_STATUS_IGNORE));
      OK(MPI_Win_unlock(0, win));
      /* (the next round's lock only once rank 1 has had this one) */
      OK(MPI_Recv(&got, 1, MPI_INT, 1, 8, comms[1], MPI_STATUS_IGNORE));
    } else {
      pthread_t t;
      CHECK(pthread_create(&t, NULL, lock_thread, &l) == 0, "pthread_create");
      usleep(100 * 1000); /* the other thread's lock waits by now */
      OK(MPI_Send(&round, 1, MPI_INT, 0, 7, comms[1]));
      CHECK(pthread_join(t, NULL) == 0, "pthread_join");
      OK(MPI_Send(&round, 1, MPI_INT, 0, 8, comms[1]));
    }
  }
}

static void synchronization_after_other_thread(void) {
  int cell = -1;
  OK(MPI_Win_create(&cell, sizeof cell, sizeof cell, MPI_INFO_NULL, comms[0], &win));
  pthread_t t;
  CHECK(pthread_create(&t, NULL, fence_thread, NULL) == 0, "pthread_create");
  if (rank == 0 && size > 1) {
    usleep(50 * 1000); /* the fence is waiting by now */
    int v = 43;
    OK(MPI_Send(&v, 1, MPI_INT, 1, 3, comms[1]));
  }
  CHECK(pthread_join(t, NULL) == 0, "pthread_join");
  OK(MPI_Win_fence(MPI_MODE_NOSUCCEED, win));
  if (rank < 2 && size > 1) {
    CHECK(pthread_create(&t, NULL, epoch_thread, &cell) == 0, "pthread_create");
    usleep((rank == 0 ? 150 : 50) * 1000); /* rank 1's start, then rank 0's wait, waits */
    int v = 44;
    OK(MPI_Send(&v, 1, MPI_INT, 1 - rank, rank == 1 ? 4 : 5, comms[1]));
    CHECK(pthread_join(t, NULL) == 0, "pthread_join");
    locks_after_other_thread();
  }
  OK(MPI_Win_free(&win));
}

/* Rank 1's calls that make and merge an intercommunicator (of comms[0]'s even and
 * odd ranks), each made only after a message that rank 0's main thread sends while
 * rank 0's own call of it waits. */
static void *intercomm_thread(void *arg) {
  (void)arg;
  MPI_Comm half, inter, twin, all;
  int go = -1;
  OK(MPI_Comm_split(comms[0], rank % 2, rank, &half));
  if (rank == 1)
    OK(MPI_Recv(&go, 1, MPI_INT, 0, 11, comms[1], MPI_STATUS_IGNORE));
  OK(MPI_Intercomm_create(half, 0, comms[0], 1 - rank % 2, 12, &inter));
  if (rank == 1)
    OK(MPI_Recv(&go, 1, MPI_INT, 0, 11, comms[1], MPI_STATUS_IGNORE));
  OK(MPI_Comm_dup(inter, &twin));
  if (rank == 1)
    OK(MPI_Recv(&go, 1, MPI_INT, 0, 11, comms[1], MPI_STATUS_IGNORE));
  OK(MPI_Intercomm_merge(twin, rank % 2, &all));
  int me = -1, remote = -1;
  OK(MPI_Comm_rank(all, &me));
  OK(MPI_Comm_remote_size(twin, &remote));
  CHECK(me == rank / 2 + rank % 2 * (size + 1) / 2, "rank %d in the merged communicator", me);
  CHECK(remote == (rank % 2 ? (size + 1) / 2 : size / 2), "%d in the other group", remote);
  OK(MPI_Comm_free(&all));
  OK(MPI_Comm_free(&twin));
  OK(MPI_Comm_free(&inter));
  OK(MPI_Comm_free(&half));
  return NULL;
}

static void intercomms_after_other_thread(void) {
  if (size < 2)
    return;
  pthread_t t;
  CHECK(pthread_create(&t, NULL, intercomm_thread, NULL) == 0, "pthread_create");
  if (rank == 0)
    for (int i = 0; i < 3; i++) {
      usleep(100 * 1000); /* the other thread's call waits by now */
      OK(MPI_Send(&i, 1, MPI_INT, 1, 11, comms[1]));
    }
  CHECK(pthread_join(t, NULL) == 0, "pthread_join");
}

/* Rank 0's accept on a port over MPI_COMM_SELF, in a thread of its own, waits for
 * rank 1's connection, which rank 1 makes only after rank 0's main thread has
 * exchanged a message with it and sent it the port's name; then the two talk over
 * the connection. */
static char port[MPI_MAX_PORT_NAME];

static void *accepting_thread(void *arg) {
  (void)arg;
  MPI_Comm inter;
  int got = -1;
  OK(MPI_Comm_accept(port, MPI_INFO_NULL, 0, MPI_COMM_SELF, &inter));
  OK(MPI_Sendrecv(&rank, 1, MPI_INT, 0, 3, &got, 1, MPI_INT, 0, 3, inter, MPI_STATUS_IGNORE));
  CHECK(got == 1, "over the accepted connection: %d", got);
  OK(MPI_Comm_disconnect(&inter));
  return NULL;
}

static void accept_while_other_threads_call(void) {
  if (size < 2 || rank > 1)
    return;
  int token = -1;
  if (rank == 0) {
    OK(MPI_Open_port(MPI_INFO_NULL, port));
    pthread_t t;
    CHECK(pthread_create(&t, NULL, accepting_thread, NULL) == 0, "pthread_create");
    usleep(100 * 1000); /* the other thread's accept waits by now */
    OK(MPI_Sendrecv(&rank, 1, MPI_INT, 1, 13, &token, 1, MPI_INT, 1, 13, comms[1],
                    MPI_STATUS_IGNORE));
    OK(MPI_Send(port, MPI_MAX_PORT_NAME, MPI_CHAR, 1, 14, comms[1]));
    CHECK(pthread_join(t, NULL) == 0, "pthread_join");
    OK(MPI_Close_port(port));
  } else {
    MPI_Comm inter;
    int got = -1;
    OK(MPI_Sendrecv(&rank, 1, MPI_INT, 0, 13, &token, 1, MPI_INT, 0, 13, comms[1],
                    MPI_STATUS_IGNORE));
    OK(MPI_Recv(port, MPI_MAX_PORT_NAME, MPI_CHAR, 0, 14, comms[1], MPI_STATUS_IGNORE));
    OK(MPI_Comm_connect(port, MPI_INFO_NULL, 0, MPI_COMM_SELF, &inter));
    OK(MPI_Sendrecv(&rank, 1, MPI_INT, 0, 3, &got, 1, MPI_INT, 0, 3, inter, MPI_STATUS_IGNORE));
    CHECK(got == 0, "over the connection: %d", got);
    OK(MPI_Comm_disconnect(&inter));
  }
  CHECK(token == 1 - rank, "the token: %d", token);
}

/* Two threads of each rank spawn a child each, over comms[0] and comms[1], in
 * opposite orders on even and odd ranks (so each spawn must let the other thread's
 * in); every child sends its word to the parents' rank 0 and leaves. */
static char *program;

static void *spawning_thread(void *arg) {
  int t = (int)(intptr_t)arg;
  MPI_Comm child;
  char *args[] = {"child", NULL};
  OK(MPI_Comm_spawn(program, args, 1, MPI_INFO_NULL, 0, comms[t], &child, MPI_ERRCODES_IGNORE));
  if (rank == 0) {
    int word = -1;
    OK(MPI_Recv(&word, 1, MPI_INT, 0, 15, child, MPI_STATUS_IGNORE));
    CHECK(word == 1515, "the child's word: %d", word);
  }
  OK(MPI_Comm_disconnect(&child));
  return NULL;
}

static void spawns_from_two_threads(void) {
  pthread_t t[2];
  for (int i = 0; i < 2; i++)
    CHECK(pthread_create(&t[i], NULL, spawning_thread, (void *)(intptr_t)(rank % 2 ? 1 - i : i)) == 0,
          "pthread_create");
  for (int i = 0; i < 2; i++)
    CHECK(pthread_join(t[i], NULL) == 0, "pthread_join");
}

static void *receive_one(void *arg) {
  OK(MPI_Recv(arg, 1, MPI_INT, rank, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
  return NULL;
}

static void finalize_while_a_thread_waits(void) {
  int got = -1, v = 5;
  pthread_t t;
  CHECK(pthread_create(&t, NULL, receive_one, &got) == 0, "pthread_create");
  usleep(50 * 1000); /* the receive is waiting inside MPI_Recv by now */
  errors_return(MPI_COMM_SELF, 1);
  EXPECT_ERR(MPI_Finalize(), MPI_ERR_OTHER, "another thread");
  errors_return(MPI_COMM_SELF, 0);
  OK(MPI_Send(&v, 1, MPI_INT, rank, 9, MPI_COMM_WORLD));
  CHECK(pthread_join(t, NULL) == 0, "pthread_join");
  CHECK(got == 5, "the receive after the refused MPI_Finalize got %d", got);
}

/* The kinds of communicator the creators make: the last two need two ranks. */
static int kinds(void) { return size > 1 ? 8 : 6; }

/* The intercommunicator between the even and the odd ranks of comms[k] (its peer
 * communicator, with tag 10 + k), merged: itself (`dup` 0) or its duplicate. */
static MPI_Comm merged(int k, int dup) {
  MPI_Comm half, inter, twin, c;
  OK(MPI_Comm_split(comms[k], rank % 2, rank, &half));
  OK(MPI_Intercomm_create(half, 0, comms[k], 1 - rank % 2, 10 + k, &inter));
  if (dup) {
    OK(MPI_Comm_dup(inter, &twin));
    OK(MPI_Comm_free(&inter));
    inter = twin;
  }
  OK(MPI_Intercomm_merge(inter, dup ? 0 : rank % 2, &c));
  OK(MPI_Comm_free(&inter));
  OK(MPI_Comm_free(&half));
  return c;
}

/* A communicator of kind `kind` made by thread `k` from comms[k] (of group `all`):
 * a duplicate, a split reversing the ranks, a group's, a ring (Cartesian), a
 * distributed graph, one from the group alone; the even and the odd ranks'
 * intercommunicator merged (the even ranks first), the same through its
 * duplicate. */
static MPI_Comm make(int kind, int k, MPI_Group all) {
  MPI_Comm c = MPI_COMM_NULL;
  int dims[1] = {size}, periods[1] = {1}, next = (rank + 1) % size;
  char tag[32];
  switch (kind) {
  case 0: OK(MPI_Comm_dup(comms[k], &c)); break;
  case 1: OK(MPI_Comm_split(comms[k], 0, size - rank, &c)); break;
  case 2: OK(MPI_Comm_create_group(comms[k], all, k, &c)); break;
  case 3: OK(MPI_Cart_create(comms[k], 1, dims, periods, 0, &c)); break;
  case 4:
    OK(MPI_Dist_graph_create_adjacent(comms[k], 1, &next, MPI_UNWEIGHTED, 1, &next,
                                      MPI_UNWEIGHTED, MPI_INFO_NULL, 0, &c));
    break;
  case 5:
    snprintf(tag, sizeof tag, "threads-%d", k);
    OK(MPI_Comm_create_from_group(all, tag, MPI_INFO_NULL, MPI_ERRORS_ARE_FATAL, &c));
    break;
  default: c = merged(k, kind == 7);
  }
  return c;
}

/* Thread `k` makes communicators from comms[k] while the other thread makes them
 * from comms[1 - k]: at the start of each round, even ranks start with comms[0],
 * odd ones with comms[1], each round with the next kind. */
static void *creator(void *arg) {
  int k = (int)(intptr_t)arg;
  MPI_Group all;
  OK(MPI_Comm_group(comms[k], &all));
  for (int r = 0; r < CREATIONS; r++) {
    if ((rank + k) % 2 == 1)
      usleep(20 * 1000); /* the other thread's first creation is waiting by now */
    for (int i = 0; i < kinds(); i++) {
      int m = (r + i) % kinds();
      MPI_Comm made = make(m, k, all);
      int me = -1;
      OK(MPI_Comm_rank(made, &me));
      int want = m == 1 ? size - 1 - rank : m >= 6 ? rank / 2 + rank % 2 * (size + 1) / 2 : rank;
      CHECK(me == want, "thread %d round %d: rank %d in communicator %d, not %d", k, r, me,
            m, want);
      /* The same tag on both threads' communicators: a message meeting the other
       * thread's receive would carry the wrong thread. */
      int to = (me ^ 1) < size ? (me ^ 1) : me;
      int mine[3] = {k, m, r}, theirs[3] = {-1, -1, -1};
      OK(MPI_Sendrecv(mine, 3, MPI_INT, to, 5, theirs, 3, MPI_INT, to, 5, made,
                      MPI_STATUS_IGNORE));
      CHECK(theirs[0] == k && theirs[1] == m && theirs[2] == r,
            "thread %d round %d communicator %d got (%d, %d, %d)", k, r, m, theirs[0],
            theirs[1], theirs[2]);
      int sum = -1;
      OK(MPI_Allreduce(&me, &sum, 1, MPI_INT, MPI_SUM, made));
      CHECK(sum == size * (size - 1) / 2, "thread %d round %d: sum %d", k, r, sum);
      OK(MPI_Comm_free(&made));
    }
  }
  OK(MPI_Group_free(&all));
  return NULL;
}

/* Thread `k` makes windows over comms[k] (used with fences, freed), each with a
 * word that the next rank puts there, while the other thread makes them over
 * comms[1 - k], the first in opposite orders as above. */
static void *window_maker(void *arg) {
  int k = (int)(intptr_t)arg;
  if ((rank + k) % 2 == 1)
    usleep(50 * 1000);
  for (int r = 0; r < CREATIONS; r++) {
    int mine[1] = {-1}, *allocated = NULL, *shared = NULL;
    MPI_Win w[3];
    OK(MPI_Win_create(mine, sizeof mine, sizeof(int), MPI_INFO_NULL, comms[k], &w[0]));
    OK(MPI_Win_allocate(sizeof(int), sizeof(int), MPI_INFO_NULL, comms[k], &allocated, &w[1]));
    OK(MPI_Win_allocate_shared(sizeof(int), sizeof(int), MPI_INFO_NULL, comms[k], &shared,
                               &w[2]));
    int *words[3] = {mine, allocated, shared};
    for (int m = 0; m < 3; m++) {
      int v = 100 * k + 10 * m + r;
      OK(MPI_Win_fence(0, w[m]));
      OK(MPI_Put(&v, 1, MPI_INT, (rank + 1) % size, 0, 1, MPI_INT, w[m]));
      OK(MPI_Win_fence(0, w[m]));
      CHECK(words[m][0] == v, "thread %d round %d window %d holds %d, not %d", k, r, m,
            words[m][0], v);
    }
    for (int m = 0; m < 3; m++)
      OK(MPI_Win_free(&w[m]));
  }
  return NULL;
}

static char dir[400]; /* the files' folder (made by rank 0) */

/* Thread `k` opens a file of its own over comms[k], writes each rank's number in
 * rank order, reads them back and closes it (deleted on close), while the other
 * thread does the same over comms[1 - k], the first in opposite orders as above. */
static void *file_user(void *arg) {
  int k = (int)(intptr_t)arg;
  char path[480];
  snprintf(path, sizeof path, "%s/%d", dir, k);
  for (int r = 0; r < CREATIONS / 2; r++) {
    if ((rank + k) % 2 == 1)
      usleep(20 * 1000);
    MPI_File fh;
    OK(MPI_File_open(comms[k], path,
                     MPI_MODE_CREATE | MPI_MODE_RDWR | MPI_MODE_DELETE_ON_CLOSE, MPI_INFO_NULL,
                     &fh));
    OK(MPI_File_set_view(fh, 0, MPI_INT, MPI_INT, "native", MPI_INFO_NULL));
    int mine = 100 * k + rank, got = -1;
    OK(MPI_File_write_ordered(fh, &mine, 1, MPI_INT, MPI_STATUS_IGNORE));
    OK(MPI_File_sync(fh));
    int peer = (rank + 1) % size;
    OK(MPI_File_read_at(fh, peer, &got, 1, MPI_INT, MPI_STATUS_IGNORE));
    CHECK(got == 100 * k + peer, "thread %d round %d: file holds %d for rank %d", k, r, got,
          peer);
    OK(MPI_File_close(&fh));
  }
  return NULL;
}

static void creations_in_opposite_orders(void) {
  if (rank == 0) {
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/rbtl-threads-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    CHECK(mkdtemp(dir) != NULL, "mkdtemp %s", dir);
  }
  OK(MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD));
  void *(*makers[3])(void *) = {creator, window_maker, file_user};
  for (int phase = 0; phase < 3; phase++) {
    pthread_t t[2];
    for (int k = 0; k < 2; k++)
      CHECK(pthread_create(&t[k], NULL, makers[phase], (void *)(intptr_t)k) == 0,
            "pthread_create");
    for (int k = 0; k < 2; k++)
      CHECK(pthread_join(t[k], NULL) == 0, "pthread_join");
  }
  OK(MPI_Barrier(MPI_COMM_WORLD));
  if (rank == 0)
    CHECK(rmdir(dir) == 0, "removing %s", dir);
}

/* Thread `t`'s ping-pongs with the partner on tag `t`, then its reductions. */
static void *worker(void *arg) {
  int t = (int)(intptr_t)arg;
  for (int r = 0; r < ROUNDS; r++) {
    int mine[2] = {t, r * 1000 + rank}, theirs[2] = {-1, -1};
    if (r % 2 == 0) {
      if (rank <= partner) {
        OK(MPI_Send(mine, 2, MPI_INT, partner, t, MPI_COMM_WORLD));
        OK(MPI_Recv(theirs, 2, MPI_INT, partner, t, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
      } else {
        OK(MPI_Recv(theirs, 2, MPI_INT, partner, t, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        OK(MPI_Send(mine, 2, MPI_INT, partner, t, MPI_COMM_WORLD));
      }
    } else {
      MPI_Request q[2];
      OK(MPI_Irecv(theirs, 2, MPI_INT, partner, t, MPI_COMM_WORLD, &q[0]));
      OK(MPI_Isend(mine, 2, MPI_INT, partner, t, MPI_COMM_WORLD, &q[1]));
      OK(MPI_Waitall(2, q, MPI_STATUSES_IGNORE));
    }
    CHECK(theirs[0] == t && theirs[1] == r * 1000 + partner,
          "thread %d round %d got (%d, %d) from rank %d", t, r, theirs[0], theirs[1],
          partner);
  }
  for (int r = 0; r < REDUCTIONS; r++) {
    long v = rank + t * 100 + r, sum = -1;
    OK(MPI_Allreduce(&v, &sum, 1, MPI_LONG, MPI_SUM, comms[t]));
    long want = (long)size * (size - 1) / 2 + (long)size * (t * 100 + r);
    CHECK(sum == want, "thread %d reduction %d: %ld, not %ld", t, r, sum, want);
  }
  return NULL;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  check_program = "threads";
  int provided = -1, level = -1;
  if (argc > 1 && strcmp(argv[1], "between") == 0) {
    OK(MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED + 1, &provided));
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    CHECK(provided == MPI_THREAD_SERIALIZED, "asked for %d, provided %d",
          MPI_THREAD_SERIALIZED + 1, provided);
    return finish();
  }
  OK(MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided));
  OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  OK(MPI_Comm_size(MPI_COMM_WORLD, &size));
  CHECK(provided == MPI_THREAD_MULTIPLE, "provided %d, not MPI_THREAD_MULTIPLE", provided);
  OK(MPI_Query_thread(&level));
  CHECK(level == MPI_THREAD_MULTIPLE, "MPI_Query_thread: %d", level);
  MPI_Comm parent;
  OK(MPI_Comm_get_parent(&parent));
  if (parent != MPI_COMM_NULL) {
    int word = 1515;
    OK(MPI_Send(&word, 1, MPI_INT, 0, 15, parent));
    OK(MPI_Comm_disconnect(&parent));
    OK(MPI_Finalize());
    return 0;
  }
  program = argv[0];
  partner = (rank ^ 1) < size ? (rank ^ 1) : rank;
  for (int t = 0; t < THREADS; t++)
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &comms[t]));

  blocked_by_own_thread();
  barrier_after_other_thread();
  synchronization_after_other_thread();
  intercomms_after_other_thread();
  accept_while_other_threads_call();
  spawns_from_two_threads();
  creations_in_opposite_orders();
  pthread_t workers[THREADS];
  for (int t = 0; t < THREADS; t++)
    CHECK(pthread_create(&workers[t], NULL, worker, (void *)(intptr_t)t) == 0,
          "pthread_create");
  for (int t = 0; t < THREADS; t++)
    CHECK(pthread_join(workers[t], NULL) == 0, "pthread_join");

  for (int t = 0; t < THREADS; t++)
    OK(MPI_Comm_free(&comms[t]));
  finalize_while_a_thread_waits();
  return finish();
}
