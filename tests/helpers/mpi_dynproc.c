/* mpi_dynproc: MPI's dynamic-process calls, one per mode, as a plain Open MPI
 * program (tests/integration/mpi_dynproc_test.cpp). Every rank prints one
 * line that says what it saw, and exits 0 only when it saw what MPI promises.
 *
 *   publish   rank 0 publishes a service name, every other rank looks it up,
 *             then rank 0 unpublishes it and every rank's lookup fails
 *   connect   the world splits in two halves; the first accepts, the second
 *             connects (both through a published port name), and the ranks
 *             of the new intercommunicator exchange their world ranks
 *   spawn     MPI_Comm_spawn of one child of this program from COMM_WORLD;
 *             prints how the call ended */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

static int rank = -1, size = -1;

static const char* error_text(int rc) {
  static char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  return text;
}

static int publish(void) {
  const char* service = "dlaunch-test-service";
  char port[MPI_MAX_PORT_NAME] = {0};
  int ok = 1;
  if (rank == 0) {
    snprintf(port, sizeof port, "port-of-rank-%d", rank);
    int rc = MPI_Publish_name(service, MPI_INFO_NULL, port);
    if (rc != MPI_SUCCESS) {
      printf("publish failed: %s\n", error_text(rc));
      ok = 0;
    }
  }
  /* Open MPI's lookup does not wait for a name: publish first. */
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank != 0) {
    int rc = MPI_Lookup_name(service, MPI_INFO_NULL, port);
    if (rc != MPI_SUCCESS) {
      printf("lookup failed: %s\n", error_text(rc));
      ok = 0;
    }
  } else {
    snprintf(port, sizeof port, "port-of-rank-%d", rank);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    int rc = MPI_Unpublish_name(service, MPI_INFO_NULL, port);
    if (rc != MPI_SUCCESS) {
      printf("unpublish failed: %s\n", error_text(rc));
      ok = 0;
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  /* Gone now: a lookup fails (Open MPI does not wait for a name by default). */
  char again[MPI_MAX_PORT_NAME] = {0};
  int rc = MPI_Lookup_name(service, MPI_INFO_NULL, again);
  printf("published %s: looked up '%s', after unpublish: %s\n", rank == 0 ? "it" : "-", port,
         rc == MPI_SUCCESS ? again : "not found");
  if (strcmp(port, "port-of-rank-0") != 0 || rc == MPI_SUCCESS) ok = 0;
  return ok;
}

static int connect_accept(void) {
  const int half = size / 2;
  const int acceptor = rank < half;
  MPI_Comm side, inter;
  MPI_Comm_split(MPI_COMM_WORLD, acceptor, rank, &side);
  char port[MPI_MAX_PORT_NAME] = {0};
  int rc = MPI_SUCCESS;
  if (rank == 0) {
    MPI_Open_port(MPI_INFO_NULL, port);
    rc = MPI_Publish_name("dlaunch-test-accept", MPI_INFO_NULL, port);
    if (rc != MPI_SUCCESS) printf("publish failed: %s\n", error_text(rc));
  }
  /* Published before anyone looks (Open MPI's lookup does not wait). */
  MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (rc != MPI_SUCCESS) return 0;
  if (acceptor) {
    rc = MPI_Comm_accept(port, MPI_INFO_NULL, 0, side, &inter);
  } else {
    if (rank == half) {
      rc = MPI_Lookup_name("dlaunch-test-accept", MPI_INFO_NULL, port);
      if (rc != MPI_SUCCESS) {
        printf("lookup failed: %s\n", error_text(rc));
        return 0;
      }
    }
    rc = MPI_Comm_connect(port, MPI_INFO_NULL, 0, side, &inter);
  }
  if (rc != MPI_SUCCESS) {
    printf("%s failed: %s\n", acceptor ? "accept" : "connect", error_text(rc));
    return 0;
  }
  int remote = 0;
  MPI_Comm_remote_size(inter, &remote);
  /* Each side's ranks sum their world ranks; the other side must see it. */
  int mine = rank, sum_here = 0, sum_there = -1;
  MPI_Allreduce(&mine, &sum_here, 1, MPI_INT, MPI_SUM, side);
  MPI_Allreduce(&mine, &sum_there, 1, MPI_INT, MPI_SUM, inter);
  int expect_there =
      acceptor ? (size * (size - 1) / 2 - half * (half - 1) / 2) : half * (half - 1) / 2;
  printf("%s: remote size %d, remote ranks sum %d\n", acceptor ? "accepted" : "connected", remote,
         sum_there);
  int ok = remote == (acceptor ? size - half : half) && sum_there == expect_there;
  if (rank == 0) MPI_Unpublish_name("dlaunch-test-accept", MPI_INFO_NULL, port);
  MPI_Comm_disconnect(&inter);
  MPI_Comm_free(&side);
  if (rank == 0) MPI_Close_port(port);
  return ok;
}

static int spawn(char* self) {
  MPI_Comm parent;
  MPI_Comm_get_parent(&parent);
  if (parent != MPI_COMM_NULL) {
    printf("child of a spawn\n");
    MPI_Comm_disconnect(&parent);
    return 1;
  }
  MPI_Comm children;
  int errcode = 0;
  char* args[] = {"spawn", NULL};
  int rc = MPI_Comm_spawn(self, args, 1, MPI_INFO_NULL, 0, MPI_COMM_SELF, &children, &errcode);
  if (rc != MPI_SUCCESS) {
    printf("spawn failed: %s\n", error_text(rc));
    return 0;
  }
  printf("spawned\n");
  MPI_Comm_disconnect(&children);
  return 1;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  /* Errors come back as codes (as mpi4py has them), not as an abort. */
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
  const char* mode = argc > 1 ? argv[1] : "";
  int ok = 0;
  if (strcmp(mode, "publish") == 0) {
    ok = publish();
  } else if (strcmp(mode, "connect") == 0) {
    ok = connect_accept();
  } else if (strcmp(mode, "spawn") == 0) {
    ok = spawn(argv[0]);
  } else {
    fprintf(stderr, "usage: mpi_dynproc publish|connect|spawn\n");
  }
  fflush(stdout);
  MPI_Finalize();
  return ok ? 0 : 1;
}
