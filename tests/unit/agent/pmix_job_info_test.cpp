// The job-info values the agents register in mpirun's words
// (agent/pmix/pmix_job_info.h); MpiDynproc.JobInfoKeysAreMpirunsOnes compares
// them with a real mpirun's on this machine.
#include "pmix/pmix_job_info.h"

#include <unistd.h>

#include <gtest/gtest.h>

using dlaunch::agent::mpirun_bind_to;
using dlaunch::agent::mpirun_map_by;
using dlaunch::agent::physical_memory;
using dlaunch::placement::BindTo;
using dlaunch::placement::MapBy;
using dlaunch::placement::Policy;

TEST(PmixJobInfo, MpisDefaultAtTwoRanksReadsAsMpirunsOwn) {
  // --mpi's default for <= 2 ranks a machine: one core each, in slot order.
  const Policy p{.bind_to = BindTo::kCore, .map_by = MapBy::kSlot, .defaulted = true};
  EXPECT_EQ(mpirun_map_by(p), "BYCORE:NOOVERSUBSCRIBE");
  EXPECT_EQ(mpirun_bind_to(p, true), "CORE:IF-SUPPORTED");
}

TEST(PmixJobInfo, OversubscribingAllowsOverload) {
  const Policy p{
      .bind_to = BindTo::kCore, .map_by = MapBy::kSlot, .oversubscribe = true, .defaulted = true};
  EXPECT_EQ(mpirun_map_by(p), "BYCORE:OVERSUBSCRIBE");
  EXPECT_EQ(mpirun_bind_to(p, true), "CORE:IF-SUPPORTED:OVERLOAD-ALLOWED");
  // A default binding dropped on an oversubscribed node binds nothing.
  EXPECT_EQ(mpirun_bind_to(p, false), "NONE:IF-SUPPORTED:OVERLOAD-ALLOWED");
}

TEST(PmixJobInfo, AskedForPoliciesKeepTheirNamesInMpirunsWords) {
  EXPECT_EQ(mpirun_map_by({.bind_to = BindTo::kPackage, .map_by = MapBy::kPackage}),
            "BYSOCKET:NOOVERSUBSCRIBE");
  EXPECT_EQ(mpirun_map_by({.bind_to = BindTo::kCore, .map_by = MapBy::kSlot}),
            "BYSLOT:NOOVERSUBSCRIBE");
  EXPECT_EQ(mpirun_map_by({.map_by = MapBy::kNuma}), "BYNUMA:NOOVERSUBSCRIBE");
  EXPECT_EQ(mpirun_bind_to({.bind_to = BindTo::kNone}, false), "NONE");
  EXPECT_EQ(mpirun_bind_to({.bind_to = BindTo::kL3cache}, true), "L3CACHE");
  EXPECT_EQ(mpirun_bind_to({.bind_to = BindTo::kPackage}, true), "SOCKET");
  EXPECT_EQ(mpirun_bind_to({.bind_to = BindTo::kGpu}, true), "CPUSET");
}

TEST(PmixJobInfo, PhysicalMemoryIsTheMachinesAndNoMore) {
  const auto bytes = physical_memory();
  EXPECT_GT(bytes, 64ull << 20);
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  ASSERT_GT(pages, 0);
  EXPECT_LE(bytes, static_cast<unsigned long long>(pages) * static_cast<unsigned long long>(page) +
                       (1ull << 30));
}
