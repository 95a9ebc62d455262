// The head's descriptor count for a job, and the refusal when it does not fit.
#include "check/descriptors.h"

#include <gtest/gtest.h>

namespace dl = dlaunch;

namespace {

dl::JobPlan descriptor_plan(int ssh, int local, int slurm, int ranks_per_node) {
  dl::JobPlan p;
  auto add = [&](int count, dl::Transport t) {
    for (int i = 0; i < count; ++i) {
      dl::NodePlan n;
      n.node_rank = static_cast<int>(p.nodes.size());
      n.host.transport = t;
      n.host.name = "n" + std::to_string(n.node_rank);
      for (int r = 0; r < ranks_per_node; ++r) {
        n.ranks.push_back({});
        n.ranks.back().rank = p.world_size++;
      }
      p.nodes.push_back(n);
    }
  };
  add(ssh, dl::Transport::kSsh);
  add(local, dl::Transport::kLocal);
  add(slurm, dl::Transport::kSlurm);
  return p;
}

TEST(Descriptors, OnePerSshNodeTwoPerProcessNode) {
  const auto need = dl::descriptors_needed(descriptor_plan(1024, 3, 2, 4), false, 10);
  EXPECT_EQ(need.ssh_nodes, 1024);
  EXPECT_EQ(need.process_nodes, 5);
  EXPECT_EQ(need.output_files, 0);
  EXPECT_EQ(need.base, 10 + dl::DescriptorNeed::kReserve);
  EXPECT_EQ(need.total(), 1024 + 2 * 5 + 10 + dl::DescriptorNeed::kReserve);
}

TEST(Descriptors, OutputDirCountsTwoFilesPerRankAndTheFolder) {
  const auto need = dl::descriptors_needed(descriptor_plan(4, 0, 0, 8), true, 0);
  EXPECT_EQ(need.output_files, 2 * 32 + 1);
  EXPECT_EQ(need.total(), 4 + 65 + dl::DescriptorNeed::kReserve);
}

TEST(Descriptors, FitsUpToTheLimitExactly) {
  const auto need = dl::descriptors_needed(descriptor_plan(100, 0, 0, 1), false, 8);
  const auto total = static_cast<unsigned long long>(need.total());
  EXPECT_FALSE(dl::descriptor_shortfall(need, total, total).has_value());
  EXPECT_FALSE(dl::descriptor_shortfall(need, 1u << 20, 1u << 20).has_value());
  EXPECT_TRUE(dl::descriptor_shortfall(need, total - 1, total - 1).has_value());
}

TEST(Descriptors, TheRefusalSaysWhatIsNeededTheLimitAndHowToRaiseIt) {
  // The reported case: 1024 SSH nodes under a hard limit of 1024.
  const auto need = dl::descriptors_needed(descriptor_plan(1024, 0, 0, 1), false, 9);
  const auto why = dl::descriptor_shortfall(need, 1024, 1024);
  ASSERT_TRUE(why.has_value());
  const std::string total = std::to_string(need.total());
  EXPECT_NE(why->find("needs about " + total + " open files"), std::string::npos) << *why;
  EXPECT_NE(why->find("1024 SSH node(s) x 1"), std::string::npos) << *why;
  EXPECT_NE(why->find("limit of 1024 open files"), std::string::npos) << *why;
  EXPECT_NE(why->find("the hard limit"), std::string::npos) << *why;
  EXPECT_NE(why->find("`ulimit -n 2048`"), std::string::npos) << *why;
  EXPECT_NE(why->find("/etc/security/limits.conf"), std::string::npos) << *why;
  EXPECT_NE(why->find("nothing was started"), std::string::npos) << *why;
  EXPECT_EQ(why->find('\n'), std::string::npos) << "one line";
}

TEST(Descriptors, ASoftLimitBelowTheHardOneIsNamedAsSuch) {
  const auto need = dl::descriptors_needed(descriptor_plan(0, 600, 0, 1), false, 9);
  const auto why = dl::descriptor_shortfall(need, 1024, 4096);
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find("600 local or Slurm node(s) x 2"), std::string::npos) << *why;
  EXPECT_NE(why->find("could not raise to the hard limit of 4096"), std::string::npos) << *why;
}

TEST(Descriptors, ThisProcessCountsItsOpenDescriptors) {
  EXPECT_GE(dl::open_descriptors(), 3);  // stdin, stdout, stderr at least
}

}  // namespace
