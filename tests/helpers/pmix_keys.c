/* pmix_keys: prints the PMIx keys Open MPI can ask its runtime for, as this
 * process's PMIx server (mpirun's, or a dlaunch agent) registered them, one
 * line per key: "<who> <key>: <type> <value>", who being "job" (the
 * namespace), "self" or "peer" (rank 1 for rank 0, rank 0 for the others).
 * tests/integration/mpi_dynproc_test.cpp compares the lines of mpirun and of
 * dlaunch --mpi. */
#include <inttypes.h>
#include <stdio.h>

#include <pmix.h>

static void show(const pmix_proc_t* me, const char* who, pmix_rank_t rank, const char* key) {
  pmix_proc_t p;
  PMIX_PROC_LOAD(&p, me->nspace, rank);
  pmix_value_t* v = NULL;
  pmix_info_t optional;
  PMIX_INFO_LOAD(&optional, PMIX_OPTIONAL, NULL, PMIX_BOOL);
  pmix_status_t rc = PMIx_Get(&p, key, &optional, 1, &v);
  if (rc != PMIX_SUCCESS) {
    printf("%s %s: %s\n", who, key, PMIx_Error_string(rc));
    return;
  }
  switch (v->type) {
    case PMIX_UINT16:
      printf("%s %s: uint16 %u\n", who, key, v->data.uint16);
      break;
    case PMIX_UINT32:
      printf("%s %s: uint32 %u\n", who, key, v->data.uint32);
      break;
    case PMIX_UINT64:
      printf("%s %s: uint64 %" PRIu64 "\n", who, key, v->data.uint64);
      break;
    case PMIX_PROC_RANK:
      printf("%s %s: rank %u\n", who, key, v->data.rank);
      break;
    case PMIX_STRING:
      printf("%s %s: string %s\n", who, key, v->data.string);
      break;
    default:
      printf("%s %s: %s\n", who, key, PMIx_Data_type_string(v->type));
  }
  PMIX_VALUE_RELEASE(v);
}

int main(void) {
  pmix_proc_t me;
  if (PMIx_Init(&me, NULL, 0) != PMIX_SUCCESS) {
    fprintf(stderr, "pmix_keys: PMIx_Init failed\n");
    return 1;
  }
  const char* job[] = {PMIX_JOB_NUM_APPS,
                       PMIX_NODE_SIZE,
                       PMIX_NPROC_OFFSET,
                       PMIX_MAPBY,
                       PMIX_BINDTO,
                       PMIX_RANKBY,
                       PMIX_AVAIL_PHYS_MEMORY,
                       PMIX_JOB_SIZE,
                       PMIX_LOCAL_SIZE,
                       PMIX_LOCAL_PEERS,
                       NULL};
  const char* proc[] = {PMIX_APPNUM,
                        PMIX_GLOBAL_RANK,
                        PMIX_LOCAL_RANK,
                        PMIX_NODE_RANK,
                        PMIX_CPUSET,
                        PMIX_LOCALITY_STRING,
                        NULL};
  for (int i = 0; job[i] != NULL; ++i) show(&me, "job", PMIX_RANK_WILDCARD, job[i]);
  for (int i = 0; proc[i] != NULL; ++i) show(&me, "self", me.rank, proc[i]);
  for (int i = 0; proc[i] != NULL; ++i) show(&me, "peer", me.rank == 0 ? 1 : 0, proc[i]);
  fflush(stdout);
  PMIx_Finalize(NULL, 0);
  return 0;
}
