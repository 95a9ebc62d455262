/* mpi_segments: an Open MPI program that prints, while MPI is initialised,
 * the names of the files Open MPI made in its shared-memory backing directory
 * (OMPI_MCA_btl_vader_backing_directory), one per line, then finalises.
 * tests/integration/security_test.cpp learns from it which names an
 * attacker would plant. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Barrier(MPI_COMM_WORLD);
  const char* dir = getenv("OMPI_MCA_btl_vader_backing_directory");
  DIR* d = dir != NULL ? opendir(dir) : NULL;
  if (d == NULL) {
    fprintf(stderr, "mpi_segments: cannot list the backing directory %s\n", dir ? dir : "(unset)");
    MPI_Abort(MPI_COMM_WORLD, 3);
  }
  struct dirent* e;
  while ((e = readdir(d)) != NULL) {
    if (strncmp(e->d_name, "vader_segment.", 14) == 0) printf("%s\n", e->d_name);
  }
  closedir(d);
  fflush(stdout);
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Finalize();
  return 0;
}
