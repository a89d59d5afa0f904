/* What a message through shared memory costs when its bytes were just written on
 * another core: one thread on core 0 copies SIZE bytes into the next place of a
 * 1 MiB ring (as `sm`'s eager sends do), one on core 1 copies them out, in turns.
 * Prints the time of one turn and the writer's part of it; the rest is the reader
 * fetching lines the other core holds. STORES "nt": the writer uses non-temporal
 * stores instead of memcpy (the lines go to memory rather than stay in its cache).
 *
 *   gcc -O2 -pthread -o /tmp/cross_core_copy benches/compare/cross_core_copy.c
 *   /tmp/cross_core_copy SIZE [nt]
 */
#define _GNU_SOURCE
#include <emmintrin.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { RING = 1 << 20, ROUNDS = 20000, WARM = ROUNDS / 10 };
static size_t size;
static char *ring, *src, *dst;
static _Atomic long turn;

static int pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}

static char *place(long i) { return ring + (size_t)i * size % RING; }

static void *reader(void *arg) {
  (void)arg;
  if (pin(1))
    exit(1);
  for (long i = 0; i < ROUNDS; i++) {
    while (atomic_load_explicit(&turn, memory_order_acquire) != 2 * i + 1)
      ;
    memcpy(dst, place(i), size);
    atomic_store_explicit(&turn, 2 * i + 2, memory_order_release);
  }
  return NULL;
}

int main(int argc, char **argv) {
  size = argc > 1 ? strtoul(argv[1], NULL, 0) : 0;
  int nt = argc > 2 && strcmp(argv[2], "nt") == 0;
  if (size < 16 || size % 16 || size > RING) {
    fprintf(stderr, "usage: cross_core_copy SIZE [nt]  (SIZE a multiple of 16, at most %d)\n",
            RING);
    return 2;
  }
  ring = aligned_alloc(4096, RING + size);
  src = aligned_alloc(4096, size);
  dst = aligned_alloc(4096, size);
  if (!ring || !src || !dst)
    return 1;
  memset(ring, 1, RING + size);
  memset(src, 2, size);
  memset(dst, 3, size);
  pthread_t t;
  if (pthread_create(&t, NULL, reader, NULL) || pin(0)) {
    fprintf(stderr, "cross_core_copy: needs cores 0 and 1\n");
    return 1;
  }
  double start = 0, writing = 0;
  for (long i = 0; i < ROUNDS; i++) {
    while (atomic_load_explicit(&turn, memory_order_acquire) != 2 * i)
      ;
    if (i == WARM)
      start = now_ns();
    double w = now_ns();
    char *p = place(i);
    if (nt) {
      for (size_t o = 0; o < size; o += 16)
        _mm_stream_si128((__m128i *)(p + o), _mm_load_si128((__m128i *)(src + o)));
      _mm_sfence();
    } else {
      memcpy(p, src, size);
    }
    if (i >= WARM)
      writing += now_ns() - w;
    atomic_store_explicit(&turn, 2 * i + 1, memory_order_release);
  }
  while (atomic_load_explicit(&turn, memory_order_acquire) != 2 * ROUNDS)
    ;
  double all = now_ns() - start;
  pthread_join(t, NULL);
  printf("%zu bytes%s: a turn %.0f ns, writing %.0f ns\n", size, nt ? " (nt)" : "",
         all / (ROUNDS - WARM), writing / (ROUNDS - WARM));
  return 0;
}
