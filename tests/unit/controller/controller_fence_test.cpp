// MPI fences across nodes go through the head: every node's blob, joined in
// node order, back to every node; more than one frame can carry fails the job.
#include "controller_test_support.h"

using namespace dltest;
namespace proto = dlaunch::proto;

TEST_F(ControllerTest, AFenceIsAnsweredOnceEveryNodeSentItsPartInNodeOrder) {
  make(3, 1, {.mpi = true});
  start_job();
  link(2).deliver(proto::FenceUp{.seq = 0, .data = "c"});
  link(0).deliver(proto::FenceUp{.seq = 0, .data = "a"});
  EXPECT_TRUE(link(0).sent_of<proto::FenceDown>().empty());
  link(1).deliver(proto::FenceUp{.seq = 0, .data = "b"});
  for (std::size_t i = 0; i < nodes(); ++i) {
    ASSERT_EQ(link(i).sent_of<proto::FenceDown>().size(), 1u);
    EXPECT_EQ(link(i).sent_of<proto::FenceDown>()[0].data, "abc");
    EXPECT_EQ(link(i).sent_of<proto::FenceDown>()[0].seq, 0u);
  }
}

TEST_F(ControllerTest, FenceDataOverTheFrameLimitFailsTheJobSayingSo) {
  make(2, 1, {.mpi = true});
  start_job();
  const std::string half(proto::kMaxFrameBytes / 2, 'x');
  link(0).deliver(proto::FenceUp{.seq = 3, .data = half});
  link(1).deliver(proto::FenceUp{.seq = 3, .data = half});
  EXPECT_TRUE(link(0).sent_of<proto::FenceDown>().empty());
  ASSERT_EQ(controller_->cause().kind, dlaunch::CauseKind::kNode);
  EXPECT_NE(controller_->cause().message.find("over the control protocol's frame limit"),
            std::string::npos)
      << controller_->cause().message;
  EXPECT_EQ(link(0).sent_of<proto::Abort>().size(), 1u);
}
