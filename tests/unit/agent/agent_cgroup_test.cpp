// The job's cgroup on a node (issue 15 item 3): workers start in it, the
// guard knows it, what escaped into it is swept, and its absence is said.
#include "agent_test_support.h"

using namespace dltest;
using std::chrono::milliseconds;

TEST_F(AgentTest, WorkersStartInTheJobsCgroupAndTheGuardKnowsIt) {
  os_.cgroups_work = true;
  start_workers(2);
  ASSERT_EQ(os_.spawned_in.size(), 2u);
  EXPECT_EQ(os_.spawned_in[0].rfind("/fake/cgroup/dlaunch-t-node1-", 0), 0u) << os_.spawned_in[0];
  EXPECT_EQ(os_.spawned_in[0], os_.spawned_in[1]);
  EXPECT_EQ(os_.guard->cgroups, std::vector<std::string>{os_.spawned_in[0]});
  EXPECT_EQ(got<proto::Ready>().at(0).no_cgroup, "");
}

TEST_F(AgentTest, WithoutACgroupReadySaysWhy) {
  start_workers(1);
  EXPECT_EQ(got<proto::Ready>().at(0).no_cgroup, "no cgroups in this test");
  EXPECT_EQ(os_.spawned_in, std::vector<std::string>{""});
  EXPECT_TRUE(os_.guard->cgroups.empty());
}

TEST_F(AgentTest, WhatEscapedIntoTheCgroupIsSweptThenTheCgroupRemoved) {
  os_.cgroups_work = true;
  start_workers(1);
  os_.in_cgroup = {8001};  // left group, tree and token: only the cgroup knows it
  os_.exit(5000, 0, false);
  sigchld();
  send(proto::Shutdown{});
  EXPECT_EQ(os_.signals.back().target, 8001);
  EXPECT_EQ(os_.signals.back().sig, SIGTERM);
  advance(dlaunch::timing::kLeftoverPoll);
  ASSERT_EQ(got<proto::Done>().size(), 1u);
  EXPECT_EQ(got<proto::Done>()[0].leftovers_killed, 1u);
  EXPECT_EQ(os_.cgroup_removed, os_.spawned_in);
}

TEST_F(AgentTest, ACgroupThatWillNotEmptyIsKilledWhole) {
  os_.cgroups_work = true;
  os_.leftovers_ignore_sigterm = true;
  start_workers(1);
  os_.in_cgroup = {8001};
  os_.exit(5000, 0, false);
  sigchld();
  send(proto::Shutdown{});
  // SIGTERM ignored: SIGKILL at the grace, the cgroup killed, then removed.
  advance(milliseconds(2000) + dlaunch::timing::kLeftoverPoll);
  EXPECT_EQ(os_.count(SIGKILL, false), 1);
  advance(dlaunch::timing::kLeftoverPoll);
  ASSERT_EQ(got<proto::Done>().size(), 1u);
  EXPECT_EQ(os_.cgroup_removed.size(), 1u);
}
