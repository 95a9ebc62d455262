// The job's features (launcher/controller/feature.h) on their own: each is
// driven through a fake job (FakeJob: the JobAccess a controller gives), with
// no controller, no links and no processes. The controller's own tests
// (controller_stdin_test.cpp, controller_fence_test.cpp, the timeout tests of
// controller_failure_test.cpp) check the same features wired into a job.
#include "controller/feature.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

#include "../seams/manual_clock.h"
#include "controller/bandwidth_test.h"
#include "controller/hang_watch.h"
#include "controller/mpi_fences.h"
#include "controller/reach_test.h"
#include "controller/signal_relay.h"
#include "controller/stdin_relay.h"
#include "dlaunch/tunables.h"

namespace dl = dlaunch;
namespace proto = dlaunch::proto;

namespace {

// A job of `nodes` nodes x `per_node` ranks that records what its features
// do to it.
class FakeJob final : public dl::JobAccess {
 public:
  FakeJob(int nodes, int per_node) {
    plan_.world_size = nodes * per_node;
    for (int n = 0; n < nodes; ++n) {
      dl::NodePlan np;
      np.node_rank = n;
      for (int l = 0; l < per_node; ++l) {
        np.ranks.push_back({.rank = n * per_node + l, .local_rank = l});
      }
      plan_.nodes.push_back(std::move(np));
    }
    plan_.job_id = "j";
    reachable.assign(static_cast<std::size_t>(nodes), true);
    exited.assign(static_cast<std::size_t>(plan_.world_size), false);
    running.assign(static_cast<std::size_t>(plan_.world_size), false);
  }

  dl::JobPhase phase() const override { return now; }
  const dl::JobPlan& plan() const override { return plan_; }
  bool node_reachable(std::size_t node) const override { return reachable.at(node); }
  bool rank_exited(int rank) const override { return exited.at(static_cast<std::size_t>(rank)); }
  bool rank_running(int rank) const override { return running.at(static_cast<std::size_t>(rank)); }
  std::string node_label(std::size_t node) const override { return "node " + std::to_string(node); }
  const dl::RootCause& cause() const override { return cause_; }
  void send(std::size_t node, const proto::Message& msg) override { sent.emplace_back(node, msg); }
  void send_all(const proto::Message& msg) override {
    for (std::size_t i = 0; i < plan_.nodes.size(); ++i) {
      if (reachable[i]) send(i, msg);
    }
  }
  void fail(dl::RootCause cause) override {
    if (cause_.kind == dl::CauseKind::kNone) cause_ = cause;
    failures.push_back(std::move(cause));
  }
  void record_cause(dl::RootCause cause) override {
    if (cause_.kind == dl::CauseKind::kNone) cause_ = std::move(cause);
  }
  void stop(const std::string& reason) override { stops.push_back(reason); }
  bool interrupted() const override { return interrupts > 0; }
  void begin_interrupt(int sig) override {
    ++interrupts;
    cause_ = {.kind = dl::CauseKind::kInterrupted, .signal = sig};
  }
  void attach_stacks(std::string section) override { cause_.stacks = std::move(section); }
  void say(const std::string& line) override { said.push_back(line); }
  void write_console(const std::string& text) override { console += text; }

  // The messages of one kind sent to `node`, oldest first.
  template <typename T>
  std::vector<T> sent_to(std::size_t node) const {
    std::vector<T> out;
    for (const auto& [to, msg] : sent) {
      if (const auto* t = std::get_if<T>(&msg); t != nullptr && to == node) out.push_back(*t);
    }
    return out;
  }

  dl::JobPhase now = dl::JobPhase::kStarting;
  std::vector<bool> reachable;  // by node
  std::vector<bool> exited;     // by rank
  std::vector<bool> running;    // by rank
  std::vector<std::pair<std::size_t, proto::Message>> sent;
  std::vector<dl::RootCause> failures;
  std::vector<std::string> stops;
  int interrupts = 0;
  std::vector<std::string> said;
  std::string console;

 private:
  dl::JobPlan plan_;
  dl::RootCause cause_;
};

// A pipe whose write end does not block; both ends closed at the end.
struct WritablePipe {
  WritablePipe() {
    EXPECT_EQ(::pipe2(fds, O_CLOEXEC), 0);
    EXPECT_EQ(::fcntl(fds[1], F_SETFL, O_NONBLOCK), 0);
  }
  ~WritablePipe() {
    ::close(fds[0]);
    if (fds[1] >= 0) ::close(fds[1]);
  }
  WritablePipe(const WritablePipe&) = delete;
  WritablePipe& operator=(const WritablePipe&) = delete;
  void write(const std::string& s) const {
    ASSERT_EQ(::write(fds[1], s.data(), s.size()), static_cast<ssize_t>(s.size()));
  }
  void close_write() {
    ::close(fds[1]);
    fds[1] = -1;
  }
  int fds[2] = {-1, -1};
};

void settle(boost::asio::io_context& io) {
  io.restart();
  io.poll();
}

std::string joined(const std::vector<proto::StdinData>& data) {
  std::string all;
  for (const auto& d : data) all += d.data;
  return all;
}

void move(FakeJob& job, dl::JobFeature& feature, dl::JobPhase to) {
  job.now = to;
  feature.on_phase(to);
}

// A stdin relay for `rank` over a FakeJob of `nodes` nodes x `per_node`
// ranks, reading a pipe; the job runs unless told otherwise.
struct RelayBed {
  RelayBed(int nodes, int per_node, int rank, bool running = true)
      : job(nodes, per_node), relay(job, io, rank, pipe.fds[0]) {
    if (running) move(job, relay, dl::JobPhase::kRunning);
  }
  boost::asio::io_context io;
  WritablePipe pipe;
  FakeJob job;
  dl::StdinRelay relay;
};

}  // namespace

TEST(StdinRelayFeature, NothingIsReadBeforeTheJobRunsThenOnlyTheChosenRanksNodeGetsIt) {
  RelayBed bed(3, 2, /*rank=*/3, /*running=*/false);  // node 1's second rank
  bed.pipe.write("hello\n");
  settle(bed.io);
  EXPECT_TRUE(bed.job.sent.empty());
  EXPECT_FALSE(bed.relay.reading());

  move(bed.job, bed.relay, dl::JobPhase::kRunning);
  settle(bed.io);
  EXPECT_EQ(joined(bed.job.sent_to<proto::StdinData>(1)), "hello\n");
  EXPECT_TRUE(bed.job.sent_to<proto::StdinData>(0).empty());
  EXPECT_TRUE(bed.job.sent_to<proto::StdinData>(2).empty());

  bed.pipe.close_write();
  settle(bed.io);
  EXPECT_EQ(bed.job.sent_to<proto::StdinEof>(1).size(), 1u);
  EXPECT_TRUE(bed.job.sent_to<proto::StdinEof>(0).empty());
  EXPECT_FALSE(bed.relay.reading());
}

TEST(StdinRelayFeature, ReadingStopsAtAFullWindowAndAnAckOpensIt) {
  RelayBed bed(2, 1, dl::kStdinAll);
  const auto sent = [&](std::size_t node) {
    return joined(bed.job.sent_to<proto::StdinData>(node)).size();
  };
  // Writes chunks and lets the relay read them until it holds.
  const auto fill = [&] {
    const std::string chunk(proto::kStdinChunk, 'x');
    for (int i = 0; i < 1000 && bed.relay.reading(); ++i) {
      (void)!::write(bed.pipe.fds[1], chunk.data(), chunk.size());
      settle(bed.io);
    }
  };
  fill();
  ASSERT_FALSE(bed.relay.reading());
  for (std::size_t node : {0u, 1u}) {
    EXPECT_GE(sent(node), proto::kStdinWindow);
    EXPECT_LT(sent(node), proto::kStdinWindow + proto::kStdinChunk);
  }
  // One node catching up is not enough: the other's window is still full.
  bed.relay.on_ack(0, proto::StdinAck{.bytes = sent(0)});
  EXPECT_FALSE(bed.relay.reading());
  // An acknowledgement of more than was sent credits what was sent, no more:
  // another window's worth, and reading holds again.
  const std::size_t before = sent(1);
  bed.relay.on_ack(1, proto::StdinAck{.bytes = std::uint64_t{1} << 40});
  EXPECT_TRUE(bed.relay.reading());
  // What the pipe still holds comes first; then the window fills again.
  fill();
  ASSERT_FALSE(bed.relay.reading());
  EXPECT_GE(sent(1) - before, proto::kStdinWindow);
  EXPECT_LT(sent(1) - before, proto::kStdinWindow + proto::kStdinChunk);
  EXPECT_EQ(sent(0), sent(1));
}

TEST(StdinRelayFeature, NothingMoreIsReadOnceNoReaderIsLeftOrTheJobStopsRunning) {
  {
    RelayBed bed(2, 1, dl::kStdinAll);
    EXPECT_TRUE(bed.relay.reading());
    bed.job.exited[0] = true;
    bed.relay.on_rank_exited(0);
    EXPECT_TRUE(bed.relay.reading());  // rank 1 still reads
    bed.job.reachable[1] = false;
    bed.relay.on_node_gone(1);
    EXPECT_FALSE(bed.relay.reading());
    bed.pipe.write("late\n");
    settle(bed.io);
    EXPECT_TRUE(bed.job.sent_to<proto::StdinData>(0).empty());
    EXPECT_TRUE(bed.job.sent_to<proto::StdinData>(1).empty());
  }
  {
    RelayBed bed(1, 1, 0);
    move(bed.job, bed.relay, dl::JobPhase::kAborting);
    EXPECT_FALSE(bed.relay.reading());
    bed.pipe.write("after the failure\n");
    settle(bed.io);
    EXPECT_TRUE(bed.job.sent.empty());
  }
  {
    RelayBed bed(1, 1, dl::kStdinNone);
    bed.pipe.write("nobody reads this\n");
    settle(bed.io);
    EXPECT_FALSE(bed.relay.reading());
    EXPECT_TRUE(bed.job.sent.empty());
  }
}

TEST(MpiFencesFeature, AFenceIsAnsweredOnceEveryNodeSentItsPartJoinedInNodeOrder) {
  FakeJob job(3, 1);
  dl::MpiFences fences(job, nullptr);
  fences.on_fence_up(2, proto::FenceUp{.seq = 7, .data = "c"});
  fences.on_fence_up(0, proto::FenceUp{.seq = 8, .data = "A"});  // the next fence, early
  fences.on_fence_up(0, proto::FenceUp{.seq = 7, .data = "a"});
  EXPECT_TRUE(job.sent.empty());
  fences.on_fence_up(1, proto::FenceUp{.seq = 7, .data = "b"});
  for (std::size_t i = 0; i < 3; ++i) {
    const auto down = job.sent_to<proto::FenceDown>(i);
    ASSERT_EQ(down.size(), 1u);
    EXPECT_EQ(down[0].seq, 7u);
    EXPECT_EQ(down[0].data, "abc");
  }
  fences.on_fence_up(2, proto::FenceUp{.seq = 8, .data = "C"});
  fences.on_fence_up(1, proto::FenceUp{.seq = 8, .data = "B"});
  EXPECT_EQ(job.sent_to<proto::FenceDown>(0).back().data, "ABC");
  EXPECT_TRUE(job.failures.empty());
}

TEST(MpiFencesFeature, PartsOverTheFrameLimitFailTheJobSayingSo) {
  FakeJob job(2, 1);
  dl::MpiFences fences(job, nullptr);
  const std::string half(proto::kMaxFrameBytes / 2, 'x');
  fences.on_fence_up(0, proto::FenceUp{.seq = 3, .data = half});
  fences.on_fence_up(1, proto::FenceUp{.seq = 3, .data = half});
  EXPECT_TRUE(job.sent.empty());
  ASSERT_EQ(job.failures.size(), 1u);
  EXPECT_EQ(job.failures[0].kind, dl::CauseKind::kNode);
  EXPECT_NE(job.failures[0].message.find("over the control protocol's frame limit"),
            std::string::npos)
      << job.failures[0].message;
}

namespace {
// The other launchers' nodes, answered by the test.
class HeldRelay final : public dl::FenceRelay {
 public:
  void fence(std::uint32_t seq, std::string data,
             std::function<void(std::string, std::string)> done) override {
    calls.push_back({seq, std::move(data), std::move(done)});
  }
  struct Call {
    std::uint32_t seq;
    std::string data;
    std::function<void(std::string, std::string)> done;
  };
  std::vector<Call> calls;
};
}  // namespace

TEST(MpiFencesFeature, InPerNodeModeThePlansPartGoesThroughTheRelayAndItsAnswerToEveryNode) {
  FakeJob job(2, 1);
  HeldRelay relay;
  dl::MpiFences fences(job, &relay);
  fences.on_fence_up(1, proto::FenceUp{.seq = 0, .data = "b"});
  fences.on_fence_up(0, proto::FenceUp{.seq = 0, .data = "a"});
  ASSERT_EQ(relay.calls.size(), 1u);
  EXPECT_EQ(relay.calls[0].data, "ab");
  EXPECT_TRUE(job.sent.empty());  // the other launchers' parts are not in yet
  relay.calls[0].done("ab|cd", "");
  EXPECT_EQ(job.sent_to<proto::FenceDown>(0).at(0).data, "ab|cd");
  EXPECT_EQ(job.sent_to<proto::FenceDown>(1).at(0).data, "ab|cd");

  // A relay that cannot complete the fence fails the job, naming it.
  fences.on_fence_up(0, proto::FenceUp{.seq = 1, .data = "a"});
  fences.on_fence_up(1, proto::FenceUp{.seq = 1, .data = "b"});
  ASSERT_EQ(relay.calls.size(), 2u);
  relay.calls[1].done("", "the store is gone");
  ASSERT_EQ(job.failures.size(), 1u);
  EXPECT_EQ(job.failures[0].message, "MPI fence 1 across the launchers: the store is gone");

  // An answer after the job finished goes nowhere.
  fences.on_fence_up(0, proto::FenceUp{.seq = 2, .data = "a"});
  fences.on_fence_up(1, proto::FenceUp{.seq = 2, .data = "b"});
  job.now = dl::JobPhase::kFinished;
  const std::size_t before = job.sent.size();
  relay.calls[2].done("late", "");
  EXPECT_EQ(job.sent.size(), before);
  EXPECT_EQ(job.failures.size(), 1u);
}

namespace {

// A hang watch over a FakeJob of 2 nodes x 2 ranks, every rank running, on a
// ManualClock; its stacks files go to a private folder removed at the end.
class HangWatchFeature : public ::testing::Test {
 protected:
  void make(dl::HangWatch::Config cfg) {
    null_fd_ = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    sink_.emplace(dl::OutputSink::Config{.job_id = "j",
                                         .node_of_rank = std::vector<std::string>(4, "h"),
                                         .stdout_fd = null_fd_,
                                         .stderr_fd = null_fd_});
    watch_.emplace(job_, clock_, *sink_, cfg);
    job_.running.assign(4, true);
    move(job_, *watch_, dl::JobPhase::kRunning);
  }
  void TearDown() override {
    // "(full stacks: PATH)" in whatever the watch wrote: its folder goes.
    const std::string* texts[] = {&job_.cause().stacks, &job_.console};
    for (const std::string* text : texts) {
      const auto at = text->find("full stacks: ");
      if (at == std::string::npos) continue;
      const auto file = text->substr(at + 13, text->find(')', at) - at - 13);
      std::filesystem::remove_all(std::filesystem::path(file).parent_path());
    }
    watch_.reset();
    sink_.reset();
    if (null_fd_ >= 0) ::close(null_fd_);
  }
  // Node `node` answers request `id`: its two ranks are in `function`.
  void answer(std::size_t node, std::uint32_t id, const std::string& function) {
    const int first = static_cast<int>(node) * 2;
    std::vector<proto::RankStack> ranks;
    for (int r = first; r < first + 2; ++r) {
      ranks.push_back(
          {.rank = r,
           .pid = 100 + r,
           .native = "TID " + std::to_string(100 + r) + ":\n#0  0x1 " + function + "\n"});
    }
    watch_->on_stacks(node, proto::Stacks{.request_id = id, .tool = "eu-stack", .ranks = ranks});
  }

  FakeJob job_{2, 2};
  dltest::ManualClock clock_;
  std::optional<dl::OutputSink> sink_;
  std::optional<dl::HangWatch> watch_;
  int null_fd_ = -1;
};

}  // namespace

TEST_F(HangWatchFeature, AtTheTimeoutTheCauseIsSetAtOnceAndTheJobStopsOnceEveryStackIsIn) {
  make({.stack_timeout = std::chrono::seconds(5)});
  watch_->stop_at_timeout({.kind = dl::CauseKind::kTimeout, .message = "--timeout expired"});
  EXPECT_EQ(job_.cause().kind, dl::CauseKind::kTimeout);
  EXPECT_TRUE(job_.failures.empty());
  EXPECT_TRUE(job_.stops.empty());
  for (std::size_t node : {0u, 1u}) {
    const auto req = job_.sent_to<proto::CollectStacks>(node);
    ASSERT_EQ(req.size(), 1u);
    EXPECT_TRUE(req[0].python_abort);  // the job is stopped anyway
    EXPECT_EQ(req[0].timeout_ms, 5000u);
  }
  const auto id = job_.sent_to<proto::CollectStacks>(0)[0].request_id;
  answer(0, id, "wait_for_gradients");
  EXPECT_TRUE(job_.stops.empty());
  answer(1, id, "stuck_in_data_loader");
  ASSERT_EQ(job_.stops.size(), 1u);
  EXPECT_NE(job_.cause().stacks.find("ranks 2,3 (2 ranks): stuck_in_data_loader"),
            std::string::npos)
      << job_.cause().stacks;
  EXPECT_NE(job_.cause().stacks.find("ranks 0,1 (2 ranks): wait_for_gradients"), std::string::npos)
      << job_.cause().stacks;
}

TEST_F(HangWatchFeature, StacksThatDoNotComeAreNamedAndTheJobStopsAtTheStackTimeout) {
  make({.stack_timeout = std::chrono::seconds(3)});
  watch_->stop_at_timeout({.kind = dl::CauseKind::kTimeout, .message = "--timeout expired"});
  answer(0, job_.sent_to<proto::CollectStacks>(0)[0].request_id, "f");
  clock_.advance(std::chrono::milliseconds(3999));
  EXPECT_TRUE(job_.stops.empty());
  clock_.advance(std::chrono::milliseconds(1));
  ASSERT_EQ(job_.stops.size(), 1u);
  EXPECT_NE(job_.cause().stacks.find("node 1 sent no stacks within 3.0 s"), std::string::npos)
      << job_.cause().stacks;
}

TEST_F(HangWatchFeature, AFailureWhileTheStacksComeStopsTheJobThenNotTheStacks) {
  make({.stack_timeout = std::chrono::seconds(3)});
  watch_->stop_at_timeout({.kind = dl::CauseKind::kTimeout, .message = "--timeout expired"});
  move(job_, *watch_, dl::JobPhase::kAborting);  // the controller stopped it for a failure
  const auto id = job_.sent_to<proto::CollectStacks>(0)[0].request_id;
  answer(0, id, "f");
  answer(1, id, "f");
  EXPECT_TRUE(job_.stops.empty());
  EXPECT_NE(job_.cause().stacks.find("ranks 0-3 (4 ranks): f"), std::string::npos)
      << job_.cause().stacks;
}

TEST_F(HangWatchFeature, WithoutAStackTimeoutTheTimeoutFailsTheJobAtOnce) {
  make({.stack_timeout = std::chrono::seconds(0)});
  watch_->stop_at_timeout({.kind = dl::CauseKind::kTimeout, .message = "--timeout expired"});
  ASSERT_EQ(job_.failures.size(), 1u);
  EXPECT_TRUE(job_.sent.empty());
}

TEST_F(HangWatchFeature, AStallIsReportedOnceWithTheStacksAndActivityArmsTheWatchAgain) {
  make({.stack_timeout = std::chrono::seconds(2), .stall_timeout = std::chrono::seconds(10)});
  clock_.advance(std::chrono::seconds(6));
  watch_->on_activity();  // a line at 6 s: the stall is counted from there
  clock_.advance(std::chrono::milliseconds(9999));
  EXPECT_TRUE(job_.sent.empty());
  clock_.advance(std::chrono::milliseconds(1));
  ASSERT_EQ(job_.sent_to<proto::CollectStacks>(0).size(), 1u);
  EXPECT_FALSE(job_.sent_to<proto::CollectStacks>(0)[0].python_abort);  // the job goes on
  ASSERT_FALSE(job_.said.empty());
  EXPECT_NE(job_.said.back().find("no rank wrote a line or completed a comm call for 10.0 s"),
            std::string::npos)
      << job_.said.back();
  const auto id = job_.sent_to<proto::CollectStacks>(0)[0].request_id;
  answer(0, id, "f");
  answer(1, id, "f");
  EXPECT_NE(job_.console.find("dlaunch: job j: no rank wrote a line"), std::string::npos)
      << job_.console;
  EXPECT_NE(job_.console.find("ranks 0-3 (4 ranks): f"), std::string::npos) << job_.console;
  EXPECT_TRUE(job_.stops.empty());
  EXPECT_EQ(job_.cause().kind, dl::CauseKind::kNone);
  // Once per stall: nothing more until output resumes.
  clock_.advance(std::chrono::seconds(60));
  EXPECT_EQ(job_.sent_to<proto::CollectStacks>(0).size(), 1u);
  watch_->on_activity();
  clock_.advance(std::chrono::seconds(10));
  EXPECT_EQ(job_.sent_to<proto::CollectStacks>(0).size(), 2u);
}

TEST_F(HangWatchFeature, WithStallActionAbortAStallStopsTheJobAfterTheStacks) {
  make({.stack_timeout = std::chrono::seconds(2),
        .stall_timeout = std::chrono::seconds(10),
        .stall_abort = true});
  clock_.advance(std::chrono::seconds(10));
  EXPECT_EQ(job_.cause().kind, dl::CauseKind::kStall);
  ASSERT_EQ(job_.sent_to<proto::CollectStacks>(1).size(), 1u);
  EXPECT_TRUE(job_.sent_to<proto::CollectStacks>(1)[0].python_abort);
  EXPECT_TRUE(job_.stops.empty());
  const auto id = job_.sent_to<proto::CollectStacks>(1)[0].request_id;
  answer(0, id, "f");
  answer(1, id, "f");
  EXPECT_EQ(job_.stops.size(), 1u);
}

TEST_F(HangWatchFeature, SigquitOutsideARunningJobIsRefusedAndADamagedRankIsNamedOnce) {
  make({.stack_timeout = std::chrono::seconds(2)});
  move(job_, *watch_, dl::JobPhase::kShuttingDown);
  watch_->report_now();
  ASSERT_FALSE(job_.said.empty());
  EXPECT_EQ(job_.said.back(), "SIGQUIT: no job running to take stacks of");
  EXPECT_TRUE(job_.sent.empty());
  watch_->on_progress_damaged(1, proto::ProgressDamaged{.rank = 3, .what = "wrote its counter"});
  watch_->on_progress_damaged(1, proto::ProgressDamaged{.rank = 3, .what = "again"});
  watch_->on_progress_damaged(0, proto::ProgressDamaged{.rank = 3, .what = "not its node"});
  ASSERT_EQ(watch_->notes().size(), 1u);
  EXPECT_NE(watch_->notes()[0].find("rank 3 on node 1 wrote its counter"), std::string::npos)
      << watch_->notes()[0];
}

namespace {
// The signals each node was sent, in order.
std::vector<int> signals_to(const FakeJob& job, std::size_t node) {
  std::vector<int> out;
  for (const auto& s : job.sent_to<proto::SignalRanks>(node)) out.push_back(s.signal);
  return out;
}
}  // namespace

TEST(SignalRelayFeature, ForwardedSignalsGoToEveryNodeAndOthersAreLeftToTheCore) {
  FakeJob job(2, 1);
  dltest::ManualClock clock;
  dl::SignalRelay relay(job, clock, {.forward_signals = {SIGALRM}});
  move(job, relay, dl::JobPhase::kRunning);
  for (int sig : {SIGUSR1, SIGUSR2, SIGTSTP, SIGCONT, SIGALRM}) EXPECT_TRUE(relay.on_signal(sig));
  EXPECT_EQ(signals_to(job, 0), (std::vector<int>{SIGUSR1, SIGUSR2, SIGTSTP, SIGCONT, SIGALRM}));
  EXPECT_EQ(signals_to(job, 1), signals_to(job, 0));
  // SIGCONT is said only when it resumes ranks a SIGTSTP stopped.
  EXPECT_NE(std::find(job.said.begin(), job.said.end(), "SIGCONT: resuming every rank"),
            job.said.end());
  job.said.clear();
  EXPECT_TRUE(relay.on_signal(SIGCONT));
  EXPECT_TRUE(job.said.empty());
  // Without --signal, SIGTERM is a stop, the core's; SIGINT and SIGHUP always.
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) EXPECT_FALSE(relay.on_signal(sig));
  EXPECT_EQ(job.interrupts, 0);
}

TEST(SignalRelayFeature, SigtermWithSignalWarnsTheRanksThenStopsTheJobAfterTheGrace) {
  FakeJob job(2, 1);
  dltest::ManualClock clock;
  dl::SignalRelay relay(job, clock,
                        {.warn_signal = SIGUSR1, .kill_grace = std::chrono::milliseconds(2000)});
  move(job, relay, dl::JobPhase::kRunning);
  EXPECT_TRUE(relay.on_signal(SIGTERM));
  EXPECT_EQ(job.cause().kind, dl::CauseKind::kInterrupted);
  EXPECT_EQ(job.interrupts, 1);
  EXPECT_EQ(signals_to(job, 0), std::vector<int>{SIGUSR1});
  EXPECT_EQ(signals_to(job, 1), std::vector<int>{SIGUSR1});
  clock.advance(std::chrono::milliseconds(1999));
  EXPECT_TRUE(job.stops.empty());
  // A second SIGTERM is the core's (it kills at once).
  EXPECT_FALSE(relay.on_signal(SIGTERM));
  clock.advance(std::chrono::milliseconds(1));
  EXPECT_EQ(job.stops, std::vector<std::string>{"interrupted"});
}

TEST(SignalRelayFeature, TheWarningGoesBeforeTheTimeoutOnlyToRanksThatRun) {
  const dl::SignalRelay::Config warn{.warn_signal = SIGUSR1,
                                     .warn_before = std::chrono::seconds(30),
                                     .timeout = std::chrono::seconds(100)};
  {
    FakeJob job(1, 1);
    dltest::ManualClock clock;
    dl::SignalRelay relay(job, clock, warn);
    relay.start();
    move(job, relay, dl::JobPhase::kRunning);
    clock.advance(std::chrono::milliseconds(69999));
    EXPECT_TRUE(signals_to(job, 0).empty());
    clock.advance(std::chrono::milliseconds(1));
    EXPECT_EQ(signals_to(job, 0), std::vector<int>{SIGUSR1});
    EXPECT_EQ(job.said.back(), "--timeout expires in 30.0 s: sending SIGUSR1 to every rank");
    clock.advance(std::chrono::seconds(60));  // once
    EXPECT_EQ(signals_to(job, 0), std::vector<int>{SIGUSR1});
  }
  {
    FakeJob job(1, 1);
    dltest::ManualClock clock;
    dl::SignalRelay relay(job, clock, warn);
    relay.start();  // the job is still starting at 70 s
    clock.advance(std::chrono::seconds(70));
    EXPECT_TRUE(job.sent.empty());
    EXPECT_EQ(job.said.back(),
              "--signal: the job was still starting 30.0 s before --timeout; no SIGUSR1 sent");
  }
}

namespace {

// --check's network test (BandwidthTest) over a FakeJob: node 0 chosen at
// 10.0.0.1 (eth0); every other node k reached it through its eth1, where it
// has 10.0.1.k. Each round's time is 1 s.
class BandwidthTestFeature : public ::testing::Test {
 protected:
  void begin(int nodes, const std::string& missing_on = {}) {
    job_ = std::make_unique<FakeJob>(nodes, 1);
    test_ = std::make_unique<dl::BandwidthTest>(*job_, clock_, std::chrono::milliseconds(1000),
                                                [this] { ++ends_; });
    interfaces_.assign(static_cast<std::size_t>(nodes), {});
    interfaces_[0] = {{.name = "eth0", .address = "10.0.0.1", .up = true}};
    std::vector<dl::net::NodeReach> reach;
    for (int k = 1; k < nodes; ++k) {
      if ("node " + std::to_string(k) != missing_on) {
        interfaces_[static_cast<std::size_t>(k)] = {
            {.name = "lo", .address = "127.0.0.1", .up = true, .loopback = true},
            {.name = "eth1", .address = "10.0.1." + std::to_string(k), .up = true}};
      }
      dl::net::NodeReach r;
      r.node = static_cast<std::size_t>(k);
      r.outcomes = {{.address = "10.0.0.1", .reached = true, .interface = "eth1"}};
      reach.push_back(std::move(r));
    }
    dl::net::Candidate chosen;
    chosen.address = "10.0.0.1";
    chosen.interface = "eth0";
    test_->begin("10.0.0.1", {chosen}, reach, interfaces_);
  }

  // Every node listens, node k at port 5000 + k.
  void all_listen() {
    for (std::size_t k = 0; k < interfaces_.size(); ++k) {
      test_->on_listening(k, {.port = static_cast<std::uint16_t>(5000 + k)});
    }
  }

  // The NetSends of `round`, as "from>address:port".
  std::vector<std::string> sends(std::uint32_t round) const {
    std::vector<std::string> out;
    for (const auto& [to, msg] : job_->sent) {
      if (const auto* ns = std::get_if<proto::NetSend>(&msg); ns && ns->round == round) {
        out.push_back(std::to_string(to) + ">" + ns->address + ":" + std::to_string(ns->port));
      }
    }
    return out;
  }

  // Node `from` answers `round`: 125 MB in a second (1 Gb/s) over `slower`.
  void sent(std::size_t from, std::uint32_t round, std::uint64_t slower = 1) {
    test_->on_sent(from, {.round = round, .bytes = 125'000'000 / slower, .micros = 1'000'000});
  }

  dltest::ManualClock clock_;
  std::unique_ptr<FakeJob> job_;
  int ends_ = 0;
  std::unique_ptr<dl::BandwidthTest> test_;
  std::vector<std::vector<proto::Interface>> interfaces_;
};

}  // namespace

TEST_F(BandwidthTestFeature, EveryNodeListensThenBothRingsRunAndTheSlowStreamAloneAgain) {
  begin(3);
  ASSERT_TRUE(test_->running());
  const std::string token = job_->sent_to<proto::NetListen>(0).at(0).token;
  EXPECT_EQ(token.size(), 32U);
  for (std::size_t k = 1; k < 3; ++k)
    EXPECT_EQ(job_->sent_to<proto::NetListen>(k).at(0).token, token);
  test_->on_listening(0, {.port = 5000});
  test_->on_listening(1, {.port = 5001});
  EXPECT_TRUE(sends(1).empty()) << "node 2 does not listen yet";
  test_->on_listening(2, {.port = 5002});
  // Round 1, the ring: each node to the next, at its address on the job's
  // network (node 0: the chosen one; the others: on the interface they
  // reached node 0 by).
  EXPECT_EQ(sends(1),
            (std::vector<std::string>{"0>10.0.1.1:5001", "1>10.0.1.2:5002", "2>10.0.0.1:5000"}));
  EXPECT_EQ(job_->sent_to<proto::NetSend>(0).at(0).duration_ms, 1000U);
  EXPECT_EQ(job_->sent_to<proto::NetSend>(0).at(0).token, token);
  sent(0, 1, 10);  // node 0 to node 1 at a tenth of the others
  sent(1, 1);
  EXPECT_TRUE(sends(2).empty());
  sent(2, 1);
  // Round 2, the ring the other way.
  EXPECT_EQ(sends(2),
            (std::vector<std::string>{"0>10.0.1.2:5002", "1>10.0.0.1:5000", "2>10.0.1.1:5001"}));
  for (std::size_t k = 0; k < 3; ++k) sent(k, 2);
  // Round 3: round 1's slow stream again, alone; round 4 has none to retest.
  EXPECT_EQ(sends(3), std::vector<std::string>{"0>10.0.1.1:5001"});
  sent(1, 3);  // not asked to send this round: ignored
  EXPECT_TRUE(test_->running());
  sent(0, 3, 10);
  EXPECT_FALSE(test_->running());
  EXPECT_EQ(ends_, 1);
  EXPECT_TRUE(test_->untested().empty()) << test_->untested();
  ASSERT_EQ(test_->streams().size(), 7U);
  EXPECT_EQ(test_->streams()[0].bytes, 12'500'000U);
  EXPECT_EQ(test_->streams()[6].round, 3U);
  EXPECT_EQ(test_->streams()[6].from, 0U);
  EXPECT_EQ(test_->streams()[6].to, 1U);
  clock_.advance(std::chrono::seconds(60));  // its deadline went with it
  EXPECT_EQ(ends_, 1);
}

TEST_F(BandwidthTestFeature, TwoNodesRunOneRingAndEnd) {
  begin(2);
  all_listen();
  EXPECT_EQ(sends(1), (std::vector<std::string>{"0>10.0.1.1:5001", "1>10.0.0.1:5000"}));
  sent(0, 1);
  sent(1, 1);
  EXPECT_TRUE(sends(2).empty());
  EXPECT_TRUE(sends(3).empty());
  EXPECT_EQ(ends_, 1);
  EXPECT_EQ(test_->streams().size(), 2U);
}

TEST_F(BandwidthTestFeature, ANodeWithoutAnAddressOnTheInterfaceEndsItSayingWhy) {
  begin(3, "node 2");
  EXPECT_FALSE(test_->running());
  EXPECT_EQ(ends_, 1);
  EXPECT_EQ(test_->untested(),
            "node 2 has no address on the interface (eth1) its traffic to node 0 takes");
  EXPECT_TRUE(job_->sent.empty());
}

TEST_F(BandwidthTestFeature, ANodeThatCannotListenEndsItSayingWhy) {
  begin(2);
  test_->on_listening(1, {.port = 0, .error = "bind: Address already in use"});
  EXPECT_FALSE(test_->running());
  EXPECT_EQ(ends_, 1);
  EXPECT_EQ(test_->untested(),
            "node 1 cannot listen for the network test: bind: Address already in use");
  test_->on_listening(0, {.port = 5000});
  EXPECT_TRUE(sends(1).empty());
}

TEST_F(BandwidthTestFeature, ARoundThatDoesNotFinishEndsItAtItsDeadline) {
  begin(2);
  all_listen();
  sent(0, 1);
  // A round's deadline: its time, the connection's, and twice the margin.
  clock_.advance(std::chrono::milliseconds(12'999));
  EXPECT_TRUE(test_->running());
  clock_.advance(std::chrono::milliseconds(1));
  EXPECT_FALSE(test_->running());
  EXPECT_EQ(ends_, 1);
  EXPECT_EQ(test_->untested(),
            "gave up waiting 13.0 s for every node to finish round 1 of the network test");
  // Node 0's figures are kept; node 1's stream has none.
  EXPECT_EQ(test_->streams().at(0).bytes, 125'000'000U);
  EXPECT_EQ(test_->streams().at(1).micros, 0U);
}

TEST_F(BandwidthTestFeature, AJobThatStopsEndsItWithoutAWord) {
  begin(2);
  move(*job_, *test_, dl::JobPhase::kAborting);
  EXPECT_FALSE(test_->running());
  all_listen();
  EXPECT_TRUE(sends(1).empty());
  clock_.advance(std::chrono::seconds(60));
  EXPECT_EQ(ends_, 0);
  EXPECT_TRUE(test_->untested().empty());
}

namespace {

// The reach test at start (ReachTest) over a FakeJob: node 0's addresses
// 10.0.0.1 (eth0), 172.17.0.1 (docker0, a bridge) and 127.0.0.1, tried at
// port 29500.
class ReachTestFeature : public ::testing::Test {
 protected:
  void begin(int nodes, std::vector<dl::net::Candidate> candidates = node0()) {
    job_ = std::make_unique<FakeJob>(nodes, 1);
    test_ = std::make_unique<dl::ReachTest>(*job_, clock_, [this] { ++ends_; });
    test_->begin(std::move(candidates), 29500, static_cast<std::size_t>(nodes));
  }
  static std::vector<dl::net::Candidate> node0() {
    return {{.address = "10.0.0.1", .interface = "eth0"},
            {.address = "172.17.0.1", .interface = "docker0", .tier = dl::net::Tier::kContainer},
            {.address = "127.0.0.1", .interface = "lo", .tier = dl::net::Tier::kLoopback}};
  }
  // Node `node` answers its Probe: it reached exactly `reached`.
  void answer(std::size_t node, const std::vector<std::string>& reached) {
    const auto probes = job_->sent_to<proto::Probe>(node);
    ASSERT_EQ(probes.size(), 1u);
    proto::ProbeResult r;
    for (const auto& a : probes[0].addresses) {
      const bool ok = std::find(reached.begin(), reached.end(), a) != reached.end();
      r.outcomes.push_back({.address = a,
                            .reached = ok,
                            .error = ok ? "" : "Connection refused",
                            .interface = ok ? "eth1" : ""});
    }
    test_->on_result(node, std::move(r));
  }

  dltest::ManualClock clock_;
  std::unique_ptr<FakeJob> job_;
  int ends_ = 0;
  std::unique_ptr<dl::ReachTest> test_;
};

}  // namespace

TEST_F(ReachTestFeature, EveryOtherNodeTriesNodeZerosAddressesAndTheFirstAllReachedIsChosen) {
  begin(3);
  EXPECT_TRUE(job_->sent_to<proto::Probe>(0).empty()) << "node 0 reaches itself";
  for (std::size_t k : {1, 2}) {
    const auto probes = job_->sent_to<proto::Probe>(k);
    ASSERT_EQ(probes.size(), 1u);
    EXPECT_EQ(probes[0].port, 29500);
    EXPECT_EQ(probes[0].timeout_ms, proto::ms(dl::timing::kProbeConnect));
    EXPECT_EQ(probes[0].addresses,
              (std::vector<std::string>{"10.0.0.1", "172.17.0.1", "127.0.0.1"}));
  }
  answer(2, {"172.17.0.1", "127.0.0.1"});
  EXPECT_TRUE(test_->running());
  EXPECT_EQ(ends_, 0) << "node 1 has not answered";
  answer(1, {"10.0.0.1", "172.17.0.1"});
  EXPECT_EQ(ends_, 1);
  EXPECT_FALSE(test_->running());
  EXPECT_EQ(test_->chosen(), "172.17.0.1") << "the first address every node reached";
  EXPECT_TRUE(test_->problems().empty());
  ASSERT_EQ(test_->reach().size(), 2u);
  EXPECT_EQ(test_->reach()[0].node, 1u);
  EXPECT_EQ(test_->reach()[0].label, "node 1");
  EXPECT_TRUE(test_->reach()[1].outcomes.at(1).reached);
  // Its deadline went with it.
  clock_.advance(std::chrono::seconds(60));
  EXPECT_TRUE(job_->failures.empty());
  EXPECT_EQ(ends_, 1);
}

TEST_F(ReachTestFeature, ANodeThatReachesNothingEndsItWithNoChoiceAndTheReason) {
  begin(3);
  answer(1, {"10.0.0.1"});
  answer(2, {});
  EXPECT_EQ(ends_, 1);
  EXPECT_TRUE(test_->chosen().empty());
  ASSERT_FALSE(test_->problems().empty());
  EXPECT_EQ(test_->problems().front(),
            "node 2 cannot reach node 0 at any of its addresses (TCP port 29500): 10.0.0.1 "
            "(Connection refused), 172.17.0.1 (Connection refused), 127.0.0.1 (Connection "
            "refused)");
  EXPECT_TRUE(job_->failures.empty()) << "what a failed choice means is the job's to say";
}

TEST_F(ReachTestFeature, OneNodeOrNoAddressHasNothingToTestAndEndsAtOnce) {
  begin(1);
  EXPECT_EQ(ends_, 1);
  EXPECT_TRUE(job_->sent.empty());
  EXPECT_EQ(test_->chosen(), "10.0.0.1");
  EXPECT_TRUE(test_->reach().empty());

  ends_ = 0;
  begin(2, {});
  EXPECT_EQ(ends_, 1);
  EXPECT_TRUE(job_->sent.empty());
  EXPECT_TRUE(test_->chosen().empty());
  ASSERT_EQ(test_->problems().size(), 1u);
  EXPECT_EQ(test_->problems()[0],
            "node 0 reported no address the other nodes could use (no interface that is up has "
            "one)");
}

TEST_F(ReachTestFeature, ANodeThatNeverAnswersFailsTheJobAtItsDeadlineNamed) {
  begin(4);
  answer(2, {"10.0.0.1"});
  clock_.advance(dl::timing::kProbeConnect + dl::timing::kReportMargin -
                 std::chrono::milliseconds(1));
  EXPECT_TRUE(job_->failures.empty());
  clock_.advance(std::chrono::milliseconds(1));
  ASSERT_EQ(job_->failures.size(), 1u);
  EXPECT_EQ(job_->failures[0].kind, dl::CauseKind::kLaunch);
  EXPECT_EQ(job_->failures[0].message,
            "gave up waiting 7.0 s for every node to test which of node 0's addresses it "
            "reaches; no answer from: node 1, node 3");
  EXPECT_EQ(ends_, 0);
  answer(1, {"10.0.0.1"});
  answer(3, {"10.0.0.1"});
  EXPECT_EQ(ends_, 0) << "too late: the job failed";
}

TEST_F(ReachTestFeature, AJobThatStopsEndsItWithoutAWordAndKeepsLateAnswers) {
  begin(3);
  answer(1, {"10.0.0.1"});
  answer(1, {});  // a second answer from the same node is not taken
  EXPECT_TRUE(test_->reach()[0].outcomes.at(0).reached);
  test_->on_result(0, {});              // nor one from node 0
  job_->now = dl::JobPhase::kAborting;  // node 2 was lost
  test_->on_phase(dl::JobPhase::kAborting);
  EXPECT_FALSE(test_->running());
  clock_.advance(std::chrono::seconds(60));
  EXPECT_TRUE(job_->failures.empty());
  answer(2, {"10.0.0.1"});
  EXPECT_EQ(ends_, 0);
  EXPECT_TRUE(test_->reach()[1].outcomes.at(0).reached) << "kept for --check's report";
}
