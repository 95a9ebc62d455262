// The job's cgroup on a node (issue 15 item 3): workers start in it, the
// guard knows it, what escaped into it is swept, and its absence is said.
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "agent_test_support.h"
#include "dlaunch/proc_stat.h"
#include "dlaunch/process.h"

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

// A job cgroup whose agent and guard were both killed stays behind, empty:
// the next agent to make one beside it removes it, and nothing else (ordinary
// folders stand in for cgroups: rmdir refuses a non-empty one as it refuses a
// cgroup with a process or child in it).
TEST(AgentCgroupSweep, EmptyCgroupsOfAgentsThatAreGoneAreRemovedAndNothingElse) {
  namespace fs = std::filesystem;
  const fs::path parent =
      fs::path(::testing::TempDir()) / ("dlaunch-sweep-" + std::to_string(::getpid()));
  fs::remove_all(parent);
  fs::create_directories(parent);
  const std::string mine = "dlaunch-j-node0-ab12" + dlaunch::agent::cgroup_owner_suffix();
  EXPECT_NE(mine.find("-ab12-a" + std::to_string(::getpid()) + "."), std::string::npos) << mine;
  // A pid that is not running (pid_max is at most 2^22), and a running
  // process (this one) with another start time: neither is the owner.
  const std::string gone = "dlaunch-j-node1-cd34-a4194304999.12345";
  const std::string reused = "dlaunch-j-node2-ef56-a" + std::to_string(::getpid()) + ".1";
  const std::string held = "dlaunch-j-node3-0a0b-a4194304999.12345";  // not empty
  for (const auto& d :
       {mine, gone, reused, held, std::string("dlaunch-j-node4-ffff"),
        std::string("other-a4194304999.1"), std::string("dlaunch-j-node5-1111-a4194304999.1x")}) {
    fs::create_directory(parent / d);
  }
  std::ofstream(parent / held / "cgroup.procs") << "123\n";
  // An agent killed and not yet reaped (a zombie) is gone too.
  const pid_t zombie = ::fork();
  if (zombie == 0) ::_exit(0);
  ASSERT_GT(zombie, 0);
  while (dlaunch::process_state(zombie) != 'Z') ::usleep(1000);
  const std::string of_zombie = "dlaunch-j-node6-2222-a" + std::to_string(zombie) + "." +
                                std::to_string(dlaunch::process_start_ticks(zombie));
  fs::create_directory(parent / of_zombie);
  EXPECT_EQ(dlaunch::agent::sweep_orphan_cgroups(parent.string()), 3);
  EXPECT_FALSE(fs::exists(parent / of_zombie));
  ::waitpid(zombie, nullptr, 0);
  EXPECT_TRUE(fs::exists(parent / mine));  // this agent runs
  EXPECT_FALSE(fs::exists(parent / gone));
  EXPECT_FALSE(fs::exists(parent / reused));
  EXPECT_TRUE(fs::exists(parent / held));
  EXPECT_TRUE(fs::exists(parent / "dlaunch-j-node4-ffff"));  // no owner in its name
  EXPECT_TRUE(fs::exists(parent / "other-a4194304999.1"));
  EXPECT_TRUE(fs::exists(parent / "dlaunch-j-node5-1111-a4194304999.1x"));
  EXPECT_EQ(dlaunch::agent::sweep_orphan_cgroups((parent / "none").string()), 0);
  fs::remove_all(parent);
}
