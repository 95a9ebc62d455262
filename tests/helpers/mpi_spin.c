/* An MPI rank that keeps a CPU busy: MPI_Init (the PMIx fences through the
 * agents and the head), then a busy loop that never sleeps, for SECONDS
 * (argv[1], default 600), then MPI_Finalize. Saturation tests
 * (tests/integration/saturation_test.cpp) start many more of them than there
 * are cores and check that the head and the agents still hear each other and
 * still stop the job on time. Prints "spinning R/N" once MPI_Init returned.
 * With "ignore-term" as argv[2] it ignores SIGTERM (the kill grace's SIGKILL
 * must end it). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <mpi.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char** argv) {
  const double seconds = argc > 1 ? atof(argv[1]) : 600.0;
  int rank = 0;
  int size = 0;
  if (argc > 2 && strcmp(argv[2], "ignore-term") == 0) signal(SIGTERM, SIG_IGN);
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  printf("spinning %d/%d\n", rank, size);
  fflush(stdout);
  const double end = now() + seconds;
  volatile unsigned long spins = 0;
  while (now() < end) {
    for (int k = 0; k < 100000; ++k) spins = spins + 1;
  }
  MPI_Finalize();
  return 0;
}
