/* mpi_hello: a plain MPI program that knows nothing of dlaunch. Under
 * `dlaunch --mpi` its MPI_COMM_WORLD must be the dlaunch world: it prints its
 * MPI rank and size beside RANK and WORLD_SIZE, and exits 1 if they differ. */
#include <stdio.h>
#include <stdlib.h>

#include <mpi.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = -1, size = -1, sum = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  /* A collective proves the ranks really talk to each other. */
  MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  const char* env_rank = getenv("RANK");
  const char* env_size = getenv("WORLD_SIZE");
  printf("mpi rank %d/%d, RANK=%s WORLD_SIZE=%s, allreduce(rank)=%d\n", rank, size,
         env_rank ? env_rank : "-", env_size ? env_size : "-", sum);
  int ok = sum == size * (size - 1) / 2;
  if (env_rank && atoi(env_rank) != rank) ok = 0;
  if (env_size && atoi(env_size) != size) ok = 0;
  if (argc > 1 && rank == atoi(argv[1]))
    MPI_Abort(MPI_COMM_WORLD, 7); /* mpi_hello R: rank R aborts */
  MPI_Finalize();
  return ok ? 0 : 1;
}
