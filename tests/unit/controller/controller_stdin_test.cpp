// --stdin on the head (docs/mpmd.md): what dlaunch reads goes only to the
// node of the chosen rank, never more than the credit window ahead of that
// agent's StdinAck, then StdinEof. The agents are fakes; stdin is a pipe.
#include <fcntl.h>
#include <unistd.h>

#include <string>

#include "controller_test_support.h"

using namespace dltest;
namespace proto = dlaunch::proto;

namespace {

std::size_t bytes_of(const std::vector<proto::StdinData>& data) {
  std::size_t n = 0;
  for (const auto& d : data) n += d.data.size();
  return n;
}

// Writes what fits into fd (non-blocking) and lets the controller's loop run,
// `rounds` times; returns the bytes written.
std::size_t pump(int fd, boost::asio::io_context& io, int rounds) {
  static const std::string block(64 << 10, 'x');
  std::size_t written = 0;
  for (int i = 0; i < rounds; ++i) {
    const ssize_t n = ::write(fd, block.data(), block.size());
    if (n > 0) written += static_cast<std::size_t>(n);
    io.restart();
    io.poll();
  }
  return written;
}

}  // namespace

TEST_F(ControllerTest, StdinGoesToTheChosenRanksNodeWithinTheCreditWindowThenEof) {
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  ASSERT_EQ(::fcntl(fds[1], F_SETFL, O_NONBLOCK), 0);
  dlaunch::ControllerConfig cfg;
  cfg.stdin_rank = 1;  // node 1 of 2
  cfg.stdin_fd = fds[0];
  make(2, 1, cfg);
  start_job();
  EXPECT_FALSE(link(0).sent_of<proto::Setup>().front().workers.front().stdin_pipe);
  EXPECT_TRUE(link(1).sent_of<proto::Setup>().front().workers.front().stdin_pipe);

  // Nobody acknowledges: dlaunch stops reading once a window is out.
  pump(fds[1], io_, 200);
  const std::size_t sent = bytes_of(link(1).sent_of<proto::StdinData>());
  EXPECT_GE(sent, proto::kStdinWindow);
  EXPECT_LT(sent, proto::kStdinWindow + proto::kStdinChunk);
  EXPECT_TRUE(link(0).sent_of<proto::StdinData>().empty());
  for (const auto& d : link(1).sent_of<proto::StdinData>())
    EXPECT_LE(d.data.size(), proto::kStdinChunk);

  // An acknowledgement opens the window again.
  link(1).deliver(proto::StdinAck{.bytes = sent});
  pump(fds[1], io_, 50);
  const std::size_t more = bytes_of(link(1).sent_of<proto::StdinData>());
  EXPECT_GT(more, sent);
  EXPECT_LT(more, sent + proto::kStdinWindow + proto::kStdinChunk);

  // EOF: everything read so far is sent, then StdinEof, to node 1 only.
  link(1).deliver(proto::StdinAck{.bytes = more});
  ::close(fds[1]);
  for (int i = 0; i < 100 && link(1).sent_of<proto::StdinEof>().empty(); ++i) {
    io_.restart();
    io_.poll();
    link(1).deliver(proto::StdinAck{.bytes = bytes_of(link(1).sent_of<proto::StdinData>())});
  }
  EXPECT_EQ(link(1).sent_of<proto::StdinEof>().size(), 1u);
  EXPECT_TRUE(link(0).sent_of<proto::StdinEof>().empty());
  ASSERT_FALSE(link(1).sent.empty());
  EXPECT_TRUE(std::holds_alternative<proto::StdinEof>(link(1).sent.back()));
  ::close(fds[0]);
}

TEST_F(ControllerTest, StdinNoneReadsNothing) {
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  ASSERT_EQ(::fcntl(fds[1], F_SETFL, O_NONBLOCK), 0);
  dlaunch::ControllerConfig cfg;
  cfg.stdin_rank = dlaunch::kStdinNone;
  cfg.stdin_fd = fds[0];
  make(1, 2, cfg);
  start_job();
  EXPECT_GT(pump(fds[1], io_, 3), 0u);
  const auto setup = link(0).sent_of<proto::Setup>().front();
  for (const auto& w : setup.workers) EXPECT_FALSE(w.stdin_pipe);
  EXPECT_TRUE(link(0).sent_of<proto::StdinData>().empty());
  EXPECT_TRUE(link(0).sent_of<proto::StdinEof>().empty());
  ::close(fds[0]);
  ::close(fds[1]);
}

TEST_F(ControllerTest, StdinIsNoLongerReadOnceTheReadingRankHasExited) {
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  ASSERT_EQ(::fcntl(fds[1], F_SETFL, O_NONBLOCK), 0);
  dlaunch::ControllerConfig cfg;
  cfg.stdin_rank = 0;
  cfg.stdin_fd = fds[0];
  make(1, 2, cfg);
  start_job();
  pump(fds[1], io_, 3);
  const std::size_t before = bytes_of(link(0).sent_of<proto::StdinData>());
  EXPECT_GT(before, 0u);
  link(0).deliver(proto::StdinAck{.bytes = before});
  exited(0, 0);  // rank 1 runs on: the job goes on, endless input is left unread
  pump(fds[1], io_, 20);
  EXPECT_EQ(bytes_of(link(0).sent_of<proto::StdinData>()), before);
  ::close(fds[0]);
  ::close(fds[1]);
}
