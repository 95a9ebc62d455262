/* One rank's compute kernel for bench/binding.py (what binding buys):
 *
 *   bench_kernel triad MIB PASSES   STREAM's triad a = b + s*c over three
 *                                   arrays of MIB MiB each (memory bandwidth)
 *   bench_kernel cache KIB PASSES   sums of an array of KIB KiB that fits in
 *                                   the core's L2 (a migration costs its cache)
 *
 * Prints one line: "kernel=K seconds=S gbps=G migrations=M cpus=C" where
 * migrations counts the times sched_getcpu() changed between passes and cpus
 * the distinct CPUs seen. A rank that is not bound may move; a bound one
 * cannot. */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char** argv) {
  if (argc != 4 || (strcmp(argv[1], "triad") != 0 && strcmp(argv[1], "cache") != 0)) {
    fprintf(stderr, "usage: bench_kernel triad MIB PASSES | cache KIB PASSES\n");
    return 2;
  }
  const int triad = strcmp(argv[1], "triad") == 0;
  const size_t bytes = (size_t)atol(argv[2]) * (triad ? 1024 * 1024 : 1024);
  const long passes = atol(argv[3]);
  const size_t n = bytes / sizeof(double);
  if (n == 0 || passes <= 0) return 2;
  double* a = malloc(n * sizeof(double));
  double* b = malloc(n * sizeof(double));
  double* c = malloc(n * sizeof(double));
  if (a == NULL || b == NULL || c == NULL) return 1;
  for (size_t i = 0; i < n; ++i) { /* first touch, on the CPU the rank starts on */
    a[i] = 0;
    b[i] = (double)i;
    c[i] = 1.0;
  }
  int seen[1024] = {0};
  int cpu = sched_getcpu(), migrations = 0, distinct = 0;
  if (cpu >= 0 && cpu < 1024) seen[cpu] = 1, distinct = 1;
  double sink = 0;
  const double start = now();
  for (long p = 0; p < passes; ++p) {
    if (triad) {
      for (size_t i = 0; i < n; ++i) a[i] = b[i] + 3.0 * c[i];
      sink += a[p % (long)n];
    } else {
      double s = 0;
      for (size_t i = 0; i < n; ++i) s += b[i] * c[i];
      sink += s;
    }
    const int now_cpu = sched_getcpu();
    if (now_cpu != cpu) ++migrations;
    cpu = now_cpu;
    if (cpu >= 0 && cpu < 1024 && !seen[cpu]) seen[cpu] = 1, ++distinct;
  }
  const double secs = now() - start;
  const double moved = (double)passes * (double)bytes * (triad ? 3.0 : 2.0);
  printf("kernel=%s seconds=%.4f gbps=%.3f migrations=%d cpus=%d sink=%g\n", argv[1], secs,
         moved / secs / 1e9, migrations, distinct, sink);
  free(a);
  free(b);
  free(c);
  return 0;
}
