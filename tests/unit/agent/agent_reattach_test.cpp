// A job that survives its head, on the node (agent/reattach.h): an agent
// with --head-grace keeps its workers when its channel closes, holds what it
// would have sent, and hands the job to a new head's relay that proves the
// job's secret at its door; without one it stops them at the end of the
// grace. The agent runs on the fake OS and the manual clock; the door and the
// relay are real Unix sockets, the relay on a thread of its own (it blocks,
// as in a relay agent) while the test runs the agent's loop.
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include "agent_test_support.h"
#include "reattach.h"

namespace dltest {
namespace {

using std::chrono::milliseconds;
namespace agent = dlaunch::agent;

class AgentReattachTest : public AgentTest {
 protected:
  void SetUp() override {
    base_ = std::filesystem::temp_directory_path() / "dlaunch-reattach-XXXXXX";
    ASSERT_NE(::mkdtemp(base_.data()), nullptr);
    os_.private_base = base_;
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, new_head_), 0);
    AgentTest::SetUp();
  }
  void TearDown() override {
    AgentTest::TearDown();
    for (int fd : new_head_) {
      if (fd >= 0) ::close(fd);
    }
    std::filesystem::remove_all(base_);
  }

  proto::Setup graced(int ranks) {
    proto::Setup s = setup_for(ranks);
    s.head_grace_ms = 10000;
    s.reattach_secret = "the-jobs-secret";
    return s;
  }
  // The head goes away: its end of the channel closes.
  void lose_head() {
    ::close(head_);
    head_ = -1;
    pump();
  }
  // A new head's relay on a thread (it blocks, as a relay agent does); the
  // agent's loop runs here meanwhile. Its channel is a socketpair whose other
  // end (new_head_[0]) the test reads as the new head.
  agent::RelayOutcome relay(proto::Reattach r) {
    std::atomic<bool> done{false};
    agent::RelayOutcome out;
    const int in = new_head_[1];
    const int dup_out = ::dup(in);
    std::thread t([&] {
      out = agent::reattach_to_job(base_, r, in, dup_out, "");
      done = true;
    });
    while (!done) {
      io_.restart();
      io_.poll();
      std::this_thread::sleep_for(milliseconds(1));
    }
    t.join();
    ::close(dup_out);
    pump_new_head();
    return out;
  }
  proto::Reattach reattach(std::string secret = "the-jobs-secret", std::string job = "t") {
    return proto::Reattach{
        .job_id = std::move(job), .node_rank = 1, .secret = std::move(secret), .head_pid = 4321};
  }
  // What reached the new head.
  void pump_new_head() {
    for (int i = 0; i < 20; ++i) {
      io_.restart();
      if (io_.poll() == 0) break;
    }
    char buf[65536];
    for (;;) {
      const ssize_t n = ::recv(new_head_[0], buf, sizeof buf, MSG_DONTWAIT);
      if (n <= 0) break;
      new_decoder_.feed(std::string_view(buf, static_cast<std::size_t>(n)));
    }
    while (auto m = new_decoder_.next()) new_received_.push_back(std::move(*m));
  }
  std::string door() const {
    const auto dirs = agent::job_node_dirs(base_, "t", 1);
    return dirs.empty() ? std::string() : dirs.front() + "/" + agent::kDoorName;
  }
  void write_output(std::size_t worker, const std::string& text) {
    ASSERT_EQ(::write(os_.proc(worker).out, text.data(), text.size()),
              static_cast<ssize_t>(text.size()));
  }

  std::string base_;
  int new_head_[2] = {-1, -1};
  proto::Decoder new_decoder_;
  std::vector<proto::Message> new_received_;
};

TEST_F(AgentReattachTest, WithoutAHeadTheWorkersRunForTheGraceThenStop) {
  start_workers(2, graced(2));
  lose_head();
  EXPECT_EQ(os_.count(SIGTERM, true), 0) << "the ranks stopped with their head";
  struct stat st {};
  ASSERT_EQ(::lstat(door().c_str(), &st), 0) << door();
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  advance(milliseconds(9900));
  EXPECT_EQ(os_.count(SIGTERM, true), 0);
  advance(milliseconds(200));
  EXPECT_EQ(os_.count(SIGTERM, true), 2);
  // The door is gone with the grace.
  EXPECT_NE(::lstat(door().c_str(), &st), 0);
  sigchld();
  EXPECT_TRUE(agent_->done());
}

TEST_F(AgentReattachTest, WithoutAGraceTheWorkersStopWithTheHeadAsEver) {
  start_workers(2);
  lose_head();
  EXPECT_EQ(os_.count(SIGTERM, true), 2);
  EXPECT_TRUE(door().empty() || ::access(door().c_str(), F_OK) != 0);
}

TEST_F(AgentReattachTest, ANewHeadHearsTheRanksAndWhatWasHeldInOrder) {
  start_workers(3, graced(3));
  os_.exit(os_.proc(2).pid, 0, false);  // rank 2 ended while the old head listened
  sigchld();
  ASSERT_EQ(got<proto::Exited>().size(), 1u);
  lose_head();
  // While headless: rank 0 writes and ends with 5; rank 1 writes.
  write_output(0, "last words of rank 0\n");
  write_output(1, "rank 1 runs on\n");
  advance(milliseconds(200));
  os_.exit(os_.proc(0).pid, 5, false);
  sigchld();
  EXPECT_EQ(os_.count(SIGTERM, true), 0);

  const auto outcome = relay(reattach());
  ASSERT_TRUE(outcome.connection) << outcome.error;
  ASSERT_FALSE(new_received_.empty());
  const auto* resumed = std::get_if<proto::Resumed>(&new_received_.front());
  ASSERT_NE(resumed, nullptr) << proto::message_name(new_received_.front());
  EXPECT_GE(resumed->headless_ms, 200u);
  EXPECT_EQ(resumed->held_bytes, std::string("last words of rank 0\nrank 1 runs on\n").size());
  // Every rank's Started, then rank 2's Exited (said before the loss), then
  // the held messages: rank 0's output before its Exited.
  std::vector<std::string> order;
  for (const auto& m : new_received_) {
    if (const auto* s = std::get_if<proto::Started>(&m))
      order.push_back("started " + std::to_string(s->rank));
    if (const auto* e = std::get_if<proto::Exited>(&m))
      order.push_back("exited " + std::to_string(e->rank) + " " + std::to_string(e->code));
    if (const auto* o = std::get_if<proto::Output>(&m))
      order.push_back("output " + std::to_string(o->rank));
  }
  const std::vector<std::string> want = {"started 0", "started 1", "started 2", "exited 2 0",
                                         "output 0",  "output 1",  "exited 0 5"};
  // (the two outputs may come in either order: they are two ranks' pipes)
  ASSERT_EQ(order.size(), want.size()) << ::testing::PrintToString(order);
  EXPECT_EQ(std::vector<std::string>(order.begin(), order.begin() + 4),
            std::vector<std::string>(want.begin(), want.begin() + 4));
  EXPECT_EQ(order.back(), "exited 0 5");
  // The job goes on through the new channel: the head stops it as ever.
  new_received_.clear();
  const std::string shutdown = proto::encode(proto::Shutdown{});
  ASSERT_EQ(::write(new_head_[0], shutdown.data(), shutdown.size()),
            static_cast<ssize_t>(shutdown.size()));
  pump_new_head();
  EXPECT_EQ(os_.count(SIGTERM, true), 1);  // rank 1, the one still running
  sigchld();
  pump_new_head();
  EXPECT_EQ(messages_of<proto::Done>(new_received_).size(), 1u);
}

TEST_F(AgentReattachTest, ARelayThatCannotProveTheSecretIsTurnedAwayAndTheJobWaitsOn) {
  start_workers(1, graced(1));
  lose_head();
  auto wrong = relay(reattach("not-the-secret"));
  EXPECT_FALSE(wrong.connection);
  EXPECT_NE(wrong.error.find("could not prove the job's secret"), std::string::npos) << wrong.error;
  auto other_job = relay(reattach("the-jobs-secret", "u"));
  EXPECT_FALSE(other_job.connection);
  EXPECT_NE(other_job.error.find("no agent of job u"), std::string::npos) << other_job.error;
  EXPECT_TRUE(new_received_.empty());
  EXPECT_EQ(os_.count(SIGTERM, true), 0);
  // The right one still can.
  auto right = relay(reattach());
  ASSERT_TRUE(right.connection) << right.error;
  ASSERT_FALSE(new_received_.empty());
  EXPECT_TRUE(std::holds_alternative<proto::Resumed>(new_received_.front()));
}

// A loss before the ranks run is not kept: nothing would be lost by stopping.
TEST_F(AgentReattachTest, ALossBeforeStartEndsTheNodeAtOnce) {
  send(graced(1));
  ASSERT_EQ(got<proto::Ready>().size(), 1u);
  lose_head();
  EXPECT_TRUE(agent_->done());
}

// The relay's side alone: no folder of the job, or one that is not this
// user's private one, is no door.
TEST(ReattachRelay, OnlyPrivateFoldersOfTheJobsNodeAreLookedIn) {
  std::string base = std::filesystem::temp_directory_path() / "dlaunch-relay-XXXXXX";
  ASSERT_NE(::mkdtemp(base.data()), nullptr);
  const std::string good = base + "/dlaunch-j-node3-abcdef";
  const std::string open = base + "/dlaunch-j-node3-ghijkl";
  const std::string other_node = base + "/dlaunch-j-node4-abcdef";
  const std::string longer = base + "/dlaunch-j-node3-abcdefg";
  for (const auto& d : {good, open, other_node, longer}) ASSERT_EQ(::mkdir(d.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(open.c_str(), 0755), 0);
  ASSERT_EQ(::symlink(good.c_str(), (base + "/dlaunch-j-node3-linkxx").c_str()), 0);
  EXPECT_EQ(dlaunch::agent::job_node_dirs(base, "j", 3), std::vector<std::string>{good});
  const auto none = dlaunch::agent::reattach_to_job(
      base, proto::Reattach{.job_id = "j", .node_rank = 3, .secret = "s"}, 0, 1, "");
  EXPECT_FALSE(none.connection);
  EXPECT_NE(none.error.find("no agent of job j runs node 3 here"), std::string::npos) << none.error;
  std::filesystem::remove_all(base);
}

}  // namespace
}  // namespace dltest
