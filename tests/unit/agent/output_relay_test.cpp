// The workers' output on its way to the head (agent/output_pump.h
// OutputRelay), without an agent: real pipes read on a real event loop, the
// flush period on a clock the test moves. Whole lines go at once, a partial
// line after the period (later for a worker that is runnable), nothing is
// read while the channel is behind or the head paused the output, and an
// exited worker's pipes are read to the end at once.
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

#include "../seams/manual_clock.h"
#include "dlaunch/process.h"
#include "dlaunch/tunables.h"
#include "output_pump.h"

namespace {

namespace proto = dlaunch::proto;
using dlaunch::agent::OutputRelay;
using std::chrono::milliseconds;

constexpr milliseconds kFlush{50};

class OutputRelayTest : public ::testing::Test {
 protected:
  OutputRelayTest()
      : relay_(io_, clock_,
               {.send = [this](proto::Output out) { sent_.push_back(std::move(out)); },
                .queued = [this] { return queued_; },
                .heard = [this](int, proto::Stream, std::string_view data) { heard_ += data; },
                .runnable = [this](int) { return runnable_; }}) {
    relay_.set_flush(kFlush);
    auto [out_r, out_w] = dlaunch::make_pipe();
    auto [err_r, err_w] = dlaunch::make_pipe();
    dlaunch::set_nonblocking(out_r.get(), true);
    dlaunch::set_nonblocking(err_r.get(), true);
    out_w_ = std::move(out_w);
    err_w_ = std::move(err_w);
    relay_.watch(3, out_r.release(), err_r.release());
  }

  void write(const dlaunch::UniqueFd& fd, const std::string& data) {
    ASSERT_TRUE(dlaunch::write_all(fd.get(), data));
  }
  // Runs the loop until `n` messages were sent, or a second passed.
  void pump_until(std::size_t n) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    while (sent_.size() < n && std::chrono::steady_clock::now() < deadline)
      io_.run_one_for(milliseconds(20));
  }
  // Runs what is ready now (the pipes' reads), for a while.
  void pump_briefly() {
    for (int k = 0; k < 5; ++k) io_.run_one_for(milliseconds(20));
  }

  boost::asio::io_context io_;
  dltest::ManualClock clock_;
  std::vector<proto::Output> sent_;
  std::size_t queued_ = 0;
  std::string heard_;
  bool runnable_ = false;
  OutputRelay relay_;
  dlaunch::UniqueFd out_w_, err_w_;
};

TEST_F(OutputRelayTest, WholeLinesGoAtOnceAndAPartialLineAfterTheFlushPeriod) {
  write(out_w_, "a\nb\npar");
  pump_until(1);
  ASSERT_EQ(sent_.size(), 1u);
  EXPECT_EQ(sent_[0].rank, 3);
  EXPECT_EQ(sent_[0].stream, proto::Stream::kStdout);
  EXPECT_EQ(sent_[0].data, "a\nb\n");
  EXPECT_FALSE(sent_[0].partial);
  EXPECT_EQ(heard_, "a\nb\npar");  // the services hear it all, as it is read
  clock_.advance(kFlush - milliseconds(1));
  EXPECT_EQ(sent_.size(), 1u);
  clock_.advance(milliseconds(1));
  ASSERT_EQ(sent_.size(), 2u);
  EXPECT_EQ(sent_[1].data, "par");
  EXPECT_TRUE(sent_[1].partial);
  write(err_w_, "e\n");
  pump_until(3);
  ASSERT_EQ(sent_.size(), 3u);
  EXPECT_EQ(sent_[2].stream, proto::Stream::kStderr);
}

TEST_F(OutputRelayTest, ARunnableWorkersPartialLineWaitsLongerForItsNewline) {
  runnable_ = true;  // preempted in the middle of a line, not done with it
  write(out_w_, "half");
  pump_briefly();
  ASSERT_TRUE(sent_.empty());
  clock_.advance(kFlush * dlaunch::timing::kStarvedHolds);
  EXPECT_TRUE(sent_.empty());
  write(out_w_, " and the rest\n");
  pump_until(1);
  ASSERT_EQ(sent_.size(), 1u);
  EXPECT_EQ(sent_[0].data, "half and the rest\n");
  // A line that never ends goes at the last hold's end all the same.
  write(out_w_, "never");
  pump_briefly();
  clock_.advance(kFlush * (dlaunch::timing::kStarvedHolds + 1));
  ASSERT_EQ(sent_.size(), 2u);
  EXPECT_EQ(sent_[1].data, "never");
}

TEST_F(OutputRelayTest, NothingIsReadWhileTheChannelIsBehindOrTheHeadPausedIt) {
  queued_ = dlaunch::agent::kHighWatermark + 1;
  write(out_w_, "x\n");
  pump_briefly();  // the read that was armed at watch() finds the channel behind
  write(out_w_, "y\n");
  pump_briefly();
  ASSERT_EQ(sent_.size(), 1u);  // the read already under way, and no other
  EXPECT_EQ(sent_[0].data, "x\n");
  queued_ = 0;
  relay_.resume();
  pump_until(2);
  ASSERT_EQ(sent_.size(), 2u);
  EXPECT_EQ(sent_[1].data, "y\n");

  // Paused: the read under way ends, and no other begins.
  relay_.pause(true);
  write(out_w_, "z\n");
  pump_briefly();
  sent_.clear();
  write(out_w_, "w\n");
  pump_briefly();
  EXPECT_TRUE(sent_.empty());
  relay_.pause(false);
  pump_until(1);
  ASSERT_EQ(sent_.size(), 1u);
  EXPECT_EQ(sent_[0].data, "w\n");
}

TEST_F(OutputRelayTest, AnExitedWorkersPipesAreReadToTheEndAtOnce) {
  write(out_w_, "last\nwor");
  write(err_w_, "ds");
  out_w_.reset();
  err_w_.reset();
  relay_.drain(3);  // no loop run: before the Exited goes
  ASSERT_EQ(sent_.size(), 3u);
  EXPECT_EQ(sent_[0].data, "last\n");
  EXPECT_EQ(sent_[1].data, "wor");
  EXPECT_TRUE(sent_[1].partial);
  EXPECT_EQ(sent_[2].stream, proto::Stream::kStderr);
  EXPECT_EQ(sent_[2].data, "ds");
  relay_.drain(4);  // a rank it does not read: nothing
  EXPECT_EQ(sent_.size(), 3u);
}

}  // namespace
