/* mpi_role: the second program of an MPMD job under dlaunch --mpi
 * (tests/integration/mpmd_test.cpp). It prints its program name, its MPI rank
 * and size, ROLE_NAME/ROLE_RANK/ROLE_WORLD_SIZE and an allreduce of the MPI
 * ranks over MPI_COMM_WORLD: with mpi_hello beside it in one world, the sum
 * covers both programs' ranks. Exits 1 if RANK differs from the MPI rank. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = -1, size = -1, sum = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  const char* name = strrchr(argv[0], '/');
  name = name ? name + 1 : argv[0];
  const char* role = getenv("ROLE_NAME");
  const char* role_rank = getenv("ROLE_RANK");
  const char* role_size = getenv("ROLE_WORLD_SIZE");
  const char* env_rank = getenv("RANK");
  printf("%s: mpi rank %d/%d, ROLE_NAME=%s ROLE_RANK=%s ROLE_WORLD_SIZE=%s, allreduce(rank)=%d\n",
         name, rank, size, role ? role : "-", role_rank ? role_rank : "-",
         role_size ? role_size : "-", sum);
  const int ok = env_rank != NULL && atoi(env_rank) == rank && sum == size * (size - 1) / 2;
  MPI_Finalize();
  return ok ? 0 : 1;
}
