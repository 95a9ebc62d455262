#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

#include "dlaunch/process.h"
#include "output/console.h"
#include "output/output_sink.h"
#include "output_pump.h"

using namespace dlaunch;

namespace {

// Captures what the sink writes to its stdout/stderr fds.
struct Capture {
  Capture() {
    auto [r1, w1] = make_pipe();
    auto [r2, w2] = make_pipe();
    out_r = std::move(r1);
    out_w = std::move(w1);
    err_r = std::move(r2);
    err_w = std::move(w2);
    set_nonblocking(out_r.get(), true);
    set_nonblocking(err_r.get(), true);
  }
  static std::string drain(int fd) {
    std::string s;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof buf)) > 0) s.append(buf, static_cast<std::size_t>(n));
    return s;
  }
  UniqueFd out_r, out_w, err_r, err_w;
};

}  // namespace

TEST(LineBuffer, WholeLinesLeaveAndThePartialStays) {
  agent::LineBuffer b(16);
  b.append("one\ntwo\nthr");
  EXPECT_EQ(b.take_lines(), "one\ntwo\n");
  EXPECT_TRUE(b.has_partial());
  EXPECT_FALSE(b.partial_overflow());
  b.append("ee\n");
  EXPECT_EQ(b.take_lines(), "three\n");
  EXPECT_FALSE(b.has_partial());
  b.append("0123456789abcdefXYZ");
  EXPECT_EQ(b.take_lines(), "");
  EXPECT_TRUE(b.partial_overflow());
  EXPECT_EQ(b.take_all(), "0123456789abcdefXYZ");
}

TEST(OutputSink, PrefixesEveryLineAndKeepsStreamsApart) {
  Capture c;
  OutputSink sink({.stdout_fd = c.out_w.get(), .stderr_fd = c.err_w.get()});
  sink.write(3, proto::Stream::kStdout, "a\nb\n", false);
  sink.write(12, proto::Stream::kStderr, "oops\n", false);
  sink.write(3, proto::Stream::kStdout, "partial", true);
  EXPECT_EQ(Capture::drain(c.out_r.get()), "[3] a\n[3] b\n[3] partial\n");
  EXPECT_EQ(Capture::drain(c.err_r.get()), "[12] oops\n");
}

TEST(OutputSink, TagOutputNamesTheNodeAndNoPrefixForwardsAsIs) {
  Capture c;
  OutputSink tagged({.prefix = PrefixMode::kHostRank,
                     .node_of_rank = {"n0", "n1"},
                     .stdout_fd = c.out_w.get(),
                     .stderr_fd = c.err_w.get()});
  tagged.write(1, proto::Stream::kStdout, "x\n", false);
  OutputSink bare(
      {.prefix = PrefixMode::kNone, .stdout_fd = c.out_w.get(), .stderr_fd = c.err_w.get()});
  bare.write(1, proto::Stream::kStdout, "y\n", false);
  EXPECT_EQ(Capture::drain(c.out_r.get()), "[n1:1] x\ny\n");
}

TEST(OutputSink, KeepsTheLastTwentyStderrLinesPerRank) {
  Capture c;
  OutputSink sink({.stdout_fd = c.out_w.get(), .stderr_fd = c.err_w.get()});
  std::string many;
  for (int i = 0; i < 30; ++i) many += "line " + std::to_string(i) + "\n";
  sink.write(0, proto::Stream::kStderr, many, false);
  sink.write(1, proto::Stream::kStdout, "not stderr\n", false);
  auto tail = sink.stderr_tail(0);
  ASSERT_EQ(tail.size(), 20u);
  EXPECT_EQ(tail.front(), "line 10");
  EXPECT_EQ(tail.back(), "line 29");
  EXPECT_TRUE(sink.stderr_tail(1).empty());
  Capture::drain(c.err_r.get());
  Capture::drain(c.out_r.get());
}

TEST(OutputSink, OutputDirGetsRawStreamsPerRank) {
  Capture c;
  auto dir = std::filesystem::temp_directory_path() / ("sink-" + std::to_string(::getpid()));
  {
    OutputSink sink({.output_dir = dir.string(),
                     .job_id = "j",
                     .stdout_fd = c.out_w.get(),
                     .stderr_fd = c.err_w.get()});
    sink.write(2, proto::Stream::kStdout, "a\n", false);
    sink.write(2, proto::Stream::kStdout, "b", true);
    sink.write(2, proto::Stream::kStderr, "e\n", false);
  }
  std::ifstream out(dir / "j" / "rank.2.out");
  std::string all((std::istreambuf_iterator<char>(out)), {});
  EXPECT_EQ(all, "a\nb");
  EXPECT_TRUE(std::filesystem::exists(dir / "j" / "rank.2.err"));
  std::filesystem::remove_all(dir);
}

namespace {

std::string read_available(int fd) {
  std::string s;
  char buf[65536];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) s.append(buf, static_cast<std::size_t>(n));
  return s;
}

}  // namespace

// A reader that stops: the console queues what the pipe does not take, says
// "high" once past the high-water mark and "low" once under the low one,
// and every byte arrives, in order, once the reader reads again.
TEST(Console, QueuesWhatTheReaderDoesNotTakeAndSaysHighAndLow) {
  Capture c;
  boost::asio::io_context io;
  Console console(c.out_w.get(), c.err_w.get(), 256 * 1024, 64 * 1024);
  std::vector<bool> pressure;
  console.attach(io, [&](bool high) { pressure.push_back(high); });
  std::string expected;
  for (int i = 0; i < 20000; ++i) {
    const std::string line = "line " + std::to_string(i) + std::string(40, 'x') + "\n";
    expected += line;
    console.write(false, line);  // never blocks, whatever the pipe holds
  }
  EXPECT_GT(console.queued(), 256u * 1024);
  EXPECT_EQ(pressure, (std::vector<bool>{true}));
  // The inherited description is left as it was (blocking).
  EXPECT_EQ(::fcntl(c.out_w.get(), F_GETFL) & O_NONBLOCK, 0);
  std::string got;
  for (int k = 0; k < 100000 && got.size() < expected.size(); ++k) {
    got += read_available(c.out_r.get());
    io.poll();
    io.restart();
  }
  EXPECT_EQ(got.size(), expected.size());
  EXPECT_TRUE(got == expected);
  EXPECT_EQ(console.queued(), 0u);
  EXPECT_EQ(pressure, (std::vector<bool>{true, false}));
  EXPECT_EQ(Capture::drain(c.err_r.get()), "");
}

// `| head`: the reader is gone; the stream stops, silently, and drops what
// it held; stderr goes on.
TEST(Console, BrokenPipeStopsThatStreamQuietly) {
  ::signal(SIGPIPE, SIG_IGN);  // as dlaunch's main() does
  Capture c;
  Console console(c.out_w.get(), c.err_w.get());
  c.out_r.reset();
  console.write(false, "lost\n");
  EXPECT_TRUE(console.out().closed());
  EXPECT_EQ(console.out().error(), "");
  EXPECT_EQ(console.queued(), 0u);
  console.write(true, "still here\n");
  EXPECT_EQ(Capture::drain(c.err_r.get()), "still here\n");
}

// Any other error stops the stream too and is said once on stderr.
TEST(Console, WriteErrorOnStdoutIsSaidOnceOnStderr) {
  Capture c;
  UniqueFd full(::open("/dev/full", O_WRONLY | O_CLOEXEC));
  if (!full) GTEST_SKIP() << "no /dev/full";
  Console console(full.get(), c.err_w.get());
  console.write(false, "one\n");
  console.write(false, "two\n");
  EXPECT_TRUE(console.out().closed());
  EXPECT_EQ(Capture::drain(c.err_r.get()),
            "dlaunch: stopped writing to stdout (No space left on device); the job goes on "
            "without it\n");
}

// `2>&1 | less`, paused: stdout and stderr are one pipe. Ranks' lines the
// pipe took part of, then a line of dlaunch's own on stderr: the reader, a
// page at a time, gets every rank line whole and ours after them, never ours
// inside one.
TEST(Console, OnePipeForBothStreamsKeepsLinesWhole) {
  Capture c;
  boost::asio::io_context io;
  Console console(c.out_w.get(), c.out_w.get());
  EXPECT_TRUE(console.shared());
  console.attach(io, {});
  const int pipe_size = ::fcntl(c.out_w.get(), F_GETPIPE_SZ);
  ASSERT_GT(pipe_size, 0);
  std::string expected(static_cast<std::size_t>(pipe_size) - 1, 'f');
  expected += '\n';
  console.write(false, expected);  // the pipe is full
  std::string ranks;
  for (int i = 0; i < 400; ++i) ranks += "[1] line " + std::to_string(i) + " of a rank\n";
  console.write(false, ranks);  // more than a page: taken in parts
  expected += ranks;
  const std::string ours = "dlaunch: SIGTSTP: stopping every rank\n";
  console.write(true, ours);
  expected += ours;
  EXPECT_GT(console.queued(), ranks.size());
  std::string got;
  char page[4096];
  for (int k = 0; k < 100000 && got.size() < expected.size(); ++k) {
    const ssize_t n = ::read(c.out_r.get(), page, sizeof page);
    if (n > 0) got.append(page, static_cast<std::size_t>(n));
    io.poll();
    io.restart();
  }
  EXPECT_TRUE(got == expected) << got.substr(static_cast<std::size_t>(pipe_size));
}

// A terminal or pipe of its own for each: two streams, as before.
TEST(Console, TwoPipesAreTwoStreams) {
  Capture c;
  Console console(c.out_w.get(), c.err_w.get());
  EXPECT_FALSE(console.shared());
  console.write(true, "e\n");
  console.write(false, "o\n");
  EXPECT_EQ(Capture::drain(c.err_r.get()), "e\n");
  EXPECT_EQ(Capture::drain(c.out_r.get()), "o\n");
}
