/* What one core copies per second between two buffers of SIZE bytes, by three kinds
 * of copy: libc's memcpy (KIND 0), 32-byte non-temporal stores (KIND 1, needs AVX2:
 * the destination is not read into the cache first) and `rep movsb` (KIND 2, what
 * the kernel's copies use); the buffers backed by huge pages (HUGE 1:
 * MADV_HUGEPAGE before they are touched) or not (0); with THREADS 2, on cores 0 and
 * 1 at the same time, each with buffers of its own (as in `osu bibw`, where both
 * processes copy). Each thread prints its rate, and, on core 0, the huge-page-backed
 * memory of the process (to show the pages were given).
 *
 *   gcc -O2 -mavx2 -pthread -o /tmp/copy_kinds benches/compare/copy_kinds.c
 *   /tmp/copy_kinds SIZE HUGE KIND [THREADS]
 */
#define _GNU_SOURCE
#include <immintrin.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define ROUNDS 200
#define HUGE_PAGE (2u << 20)

static size_t size;
static int huge, kind;
static const char *kinds[] = {"memcpy", "non-temporal", "rep movsb"};

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

/* A buffer of `size` bytes aligned to a huge page, touched. */
static char *buffer(void) {
  char *p = mmap(NULL, size + HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    perror("mmap");
    exit(1);
  }
  p = (char *)(((size_t)p + HUGE_PAGE - 1) & ~(size_t)(HUGE_PAGE - 1));
  madvise(p, size, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
  memset(p, 1, size);
  return p;
}

static void copy_nt(char *d, const char *s, size_t n) {
  for (size_t i = 0; i + 64 <= n; i += 64) {
    __m256i a = _mm256_loadu_si256((const __m256i *)(s + i));
    __m256i b = _mm256_loadu_si256((const __m256i *)(s + i + 32));
    _mm256_stream_si256((__m256i *)(d + i), a);
    _mm256_stream_si256((__m256i *)(d + i + 32), b);
  }
  _mm_sfence();
}

static void copy_movsb(char *d, const char *s, size_t n) {
  __asm__ volatile("rep movsb" : "+D"(d), "+S"(s), "+c"(n) : : "memory");
}

static void copy(char *d, const char *s) {
  if (kind == 0)
    memcpy(d, s, size);
  else if (kind == 1)
    copy_nt(d, s, size);
  else
    copy_movsb(d, s, size);
}

static void *run(void *arg) {
  long cpu = (long)arg;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  sched_setaffinity(0, sizeof set, &set);
  char *s = buffer(), *d = buffer();
  for (int i = 0; i < ROUNDS / 10; i++)
    copy(d, s);
  double t = now();
  for (int i = 0; i < ROUNDS; i++)
    copy(d, s);
  double rate = size * (double)ROUNDS / (now() - t) / 1e9;
  printf("core %ld, %s, %s pages, %zu KiB: %.1f GB/s\n", cpu, kinds[kind], huge ? "huge" : "4 KiB",
         size >> 10, rate);
  if (cpu == 0) {
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    char line[256];
    while (f && fgets(line, sizeof line, f))
      if (strstr(line, "AnonHugePages"))
        fputs(line, stdout);
    if (f)
      fclose(f);
  }
  return NULL;
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s SIZE HUGE KIND [THREADS]\n", argv[0]);
    return 2;
  }
  size = strtoul(argv[1], NULL, 0) & ~(size_t)63;
  huge = atoi(argv[2]);
  kind = atoi(argv[3]);
  int threads = argc > 4 ? atoi(argv[4]) : 1;
  if (size == 0 || kind < 0 || kind > 2 || threads < 1 || threads > 2) {
    fprintf(stderr, "SIZE > 0, KIND 0-2, THREADS 1 or 2\n");
    return 2;
  }
  pthread_t t[2];
  for (long i = 0; i < threads; i++)
    pthread_create(&t[i], NULL, run, (void *)i);
  for (int i = 0; i < threads; i++)
    pthread_join(t[i], NULL);
  return 0;
}
