// The node's PMIx server as a node service (agent/pmix_service.h), without
// an agent: nothing without --mpi; with it, a real PMIx server (Open MPI's
// libpmix, as the agent loads it) in a private folder the guard is told of
// and the container would mount, each rank's client variables at its spawn,
// the head's fence answer taken, the folder gone at the end. Its own
// process per test (one PMIx server a process).
#include "pmix_service.h"

#include <sys/stat.h>

#include <string>

#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

#include "fake_node.h"
#include "node_placement.h"
#include "os.h"

namespace {

namespace proto = dlaunch::proto;
using dlaunch::agent::fence_up;
using dlaunch::agent::NodePlacement;
using dlaunch::agent::NodeService;
using dlaunch::agent::pmix_job_of;
using dlaunch::agent::pmix_store_of;
using dlaunch::agent::PmixService;

// One node of two, running ranks 0 and 1 of a job of 3 under --mpi.
proto::Setup mpi_setup() {
  proto::Setup s;
  s.job_id = "pmixsvc" + std::to_string(::getpid());
  s.node_rank = 0;
  s.mpi = true;
  s.bind_to = "none";
  s.node_names = {"n0", "n1"};
  s.ranks_per_node = {2, 1};
  s.node_of_rank = {0, 0, 1};
  s.workers = {proto::WorkerSpec{.rank = 0, .local_rank = 0, .argv = {"/bin/true"}},
               proto::WorkerSpec{.rank = 1, .local_rank = 1, .argv = {"/bin/true"}}};
  return s;
}

std::string value_of(const proto::Env& env, const std::string& name) {
  std::string out;
  for (const auto& [k, v] : env) {
    if (k == name) out = v;
  }
  return out;
}

bool is_dir(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

class PmixServiceTest : public ::testing::Test {
 protected:
  boost::asio::io_context io_;
  dlaunch::agent::PosixOs os_;
  dltest::FakeNode node_;
  NodePlacement placement_;
};

TEST_F(PmixServiceTest, WithoutMpiThereIsNoServer) {
  PmixService service(io_, os_, node_, placement_);
  proto::Setup setup = mpi_setup();
  setup.mpi = false;
  proto::Ready ready;
  ASSERT_EQ(service.prepare(setup, ready), std::nullopt);
  EXPECT_TRUE(service.job_dirs().empty());
  EXPECT_TRUE(node_.guarded.empty());
  NodeService::WorkerGift gift;
  service.before_spawn(0, gift);
  EXPECT_TRUE(gift.env.empty());
  EXPECT_TRUE(gift.refused.empty());
  // The fence's answer is the service's message even so: nothing to pass on.
  EXPECT_TRUE(service.handle(proto::FenceDown{.seq = 1, .data = "x"}));
  EXPECT_FALSE(service.handle(proto::Heartbeat{}));
  service.stop();
  EXPECT_TRUE(node_.sent.empty());
}

TEST_F(PmixServiceTest, UnderMpiARealServerGivesEachRankItsClientVariables) {
  PmixService service(io_, os_, node_, placement_);
  const proto::Setup setup = mpi_setup();
  ASSERT_EQ(placement_.plan(setup, "n0"), std::nullopt);
  proto::Ready ready;
  const auto refused = service.prepare(setup, ready);
  if (refused && refused->find("libpmix") != std::string::npos) GTEST_SKIP() << *refused;
  ASSERT_EQ(refused, std::nullopt);
  // Its folder: private, told to the guard, mounted in a container.
  ASSERT_EQ(service.job_dirs().size(), 1u);
  const std::string dir = service.job_dirs()[0];
  EXPECT_TRUE(is_dir(dir));
  struct stat st {};
  ASSERT_EQ(::stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_EQ(node_.guarded, std::vector<std::string>{dir});

  service.on_start(proto::Start{});
  for (int rank : {0, 1}) {
    NodeService::WorkerGift gift;
    service.before_spawn(rank, gift);
    EXPECT_EQ(gift.refused, "");
    EXPECT_EQ(value_of(gift.env, "PMIX_NAMESPACE"), "dlaunch." + setup.job_id);
    EXPECT_EQ(value_of(gift.env, "PMIX_RANK"), std::to_string(rank));
    EXPECT_EQ(value_of(gift.env, "OMPI_MCA_btl_vader_backing_directory"), dir);
    EXPECT_EQ(value_of(gift.env, "OMPI_MCA_orte_tmpdir_base"), dir);
  }
  service.on_worker_exit(0);
  EXPECT_TRUE(service.handle(proto::FenceDown{.seq = 7, .data = ""}));  // no fence waits: ignored
  service.stop();
  EXPECT_FALSE(is_dir(dir));
  EXPECT_TRUE(node_.sent.empty());
}

TEST(PmixJob, SetupsMapsAndTheNodesPlacementInMpirunsWords) {
  proto::Setup setup = mpi_setup();
  setup.app_sizes = {2, 1};
  NodePlacement placement;
  ASSERT_EQ(placement.plan(setup, "n0"), std::nullopt);
  const auto job = pmix_job_of(setup, placement);
  EXPECT_EQ(job.nspace, "dlaunch." + setup.job_id);
  EXPECT_EQ(job.node_names, setup.node_names);
  EXPECT_EQ(job.ranks_per_node, (std::vector<int>{2, 1}));
  EXPECT_EQ(job.node_of_rank, (std::vector<int>{0, 0, 1}));
  EXPECT_EQ(job.app_sizes, (std::vector<int>{2, 1}));
  EXPECT_TRUE(job.cpus.empty());  // --bind-to none
  EXPECT_EQ(job.bind_to.rfind("NONE", 0), 0u) << job.bind_to;
  EXPECT_FALSE(job.map_by.empty());
}

TEST(PmixFence, ANodesDataGoesUpUnlessOneFrameCannotCarryIt) {
  const auto up = fence_up(3, "blob");
  ASSERT_TRUE(std::holds_alternative<proto::FenceUp>(up));
  EXPECT_EQ(std::get<proto::FenceUp>(up).seq, 3u);
  EXPECT_EQ(std::get<proto::FenceUp>(up).data, "blob");
  const auto fatal = fence_up(4, std::string(proto::kMaxFrameBytes, 'x'));
  ASSERT_TRUE(std::holds_alternative<proto::Fatal>(fatal));
  EXPECT_NE(std::get<proto::Fatal>(fatal).message.find("frame limit"), std::string::npos);
}

TEST(PmixStore, TheWorkersOwnStoreWinsAndAPartOfOneIsNone) {
  const proto::Env start = {{"DLAUNCH_STORE_ADDR", "10.0.0.1"},
                            {"DLAUNCH_STORE_PORT", "29400"},
                            {"DLAUNCH_STORE_SECRET", "s"}};
  auto store = pmix_store_of(start, {});
  ASSERT_TRUE(store);
  EXPECT_EQ(store->host, "10.0.0.1");
  EXPECT_EQ(store->port, 29400);
  EXPECT_EQ(store->unix_path, "");
  store = pmix_store_of(start, {{"DLAUNCH_STORE_PORT", "29500"}, {"DLAUNCH_STORE_PATH", "/p"}});
  ASSERT_TRUE(store);
  EXPECT_EQ(store->port, 29500);
  EXPECT_EQ(store->unix_path, "/p");
  EXPECT_FALSE(pmix_store_of(start, {{"DLAUNCH_STORE_PORT", "70000"}}));
  EXPECT_FALSE(pmix_store_of(start, {{"DLAUNCH_STORE_PORT", "x"}}));
  EXPECT_FALSE(pmix_store_of({{"DLAUNCH_STORE_ADDR", "a"}, {"DLAUNCH_STORE_PORT", "1"}}, {}));
}

}  // namespace
