// output/file_writer.h: writes on a thread of its own. A pipe that nobody
// reads plays the disk that stops answering (a blocking write(2) that does
// not return); /dev/full the disk that is full. The Console's use of it: a
// regular file under dlaunch's stdout.
#include "output/file_writer.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

#include "dlaunch/process.h"
#include "output/console.h"

using namespace dlaunch;
using std::chrono::milliseconds;

namespace {

std::string numbered_lines(int from, int to) {
  std::string s;
  for (int i = from; i < to; ++i) s += "line " + std::to_string(i) + "\n";
  return s;
}

std::string read_to_end(int fd) {
  std::string s;
  char buf[65536];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) s.append(buf, static_cast<std::size_t>(n));
  return s;
}

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs what the writer's thread posts to io until done() (10 s at most).
template <typename Done>
void poll_until(boost::asio::io_context& io, Done done) {
  for (int k = 0; k < 10000 && !done(); ++k) {
    io.restart();
    io.poll();
    std::this_thread::sleep_for(milliseconds(1));
  }
}

struct TempDir {
  TempDir() {
    path = std::filesystem::temp_directory_path() /
           ("dlaunch-file-writer-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
    fd.reset(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::filesystem::path path;
  UniqueFd fd;
};

}  // namespace

// The caller hands over far more than the "disk" takes, and is never held:
// a blocking write(2) that does not return holds the writer's thread only.
// Once the reader reads, every byte arrives in order.
TEST(FileWriter, AStuckFileHoldsItsThreadNotTheCaller) {
  auto [rd, wr] = make_pipe();  // blocking both ends; a pipe holds 64 KiB
  FileWriter w;
  const auto t = w.add_fd(wr.get(), "stuck");
  std::string expected;
  for (int k = 0; k < 100; ++k) {
    const std::string piece = numbered_lines(k * 1000, (k + 1) * 1000);
    expected += piece;
    w.write(t, piece);  // about 1.2 MB in all: returns at once
  }
  EXPECT_GT(w.queued(), 512u * 1024) << "the pipe took it all?";
  EXPECT_FALSE(w.finish(milliseconds(200))) << "nothing was read: finish gives up";
  std::string got;
  std::thread reader([&, fd = rd.get()] {
    char buf[65536];
    while (got.size() < expected.size()) {
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n <= 0) break;
      got.append(buf, static_cast<std::size_t>(n));
    }
  });
  EXPECT_TRUE(w.finish(milliseconds(10000)));
  reader.join();
  EXPECT_EQ(w.queued(), 0u);
  EXPECT_EQ(w.written(), expected.size());
  EXPECT_TRUE(got == expected);
  EXPECT_TRUE(w.take_failures().empty());
}

// A full disk: said once, with the error; what follows is dropped, and
// counts as queued no more.
TEST(FileWriter, AFailedFileIsSaidOnceAndWrittenNoMore) {
  UniqueFd full(::open("/dev/full", O_WRONLY | O_CLOEXEC));
  if (!full) GTEST_SKIP() << "no /dev/full";
  FileWriter w;
  const auto t = w.add_fd(full.get(), "/dev/full");
  w.write(t, "one\n");
  EXPECT_TRUE(w.finish(milliseconds(10000)));
  w.write(t, "two\n");
  EXPECT_TRUE(w.failed(t));
  EXPECT_EQ(w.queued(), 0u);
  const auto failures = w.take_failures();
  ASSERT_EQ(failures.size(), 1u);
  EXPECT_EQ(failures[0].target, t);
  EXPECT_EQ(failures[0].label, "/dev/full");
  EXPECT_EQ(failures[0].error, ENOSPC);
  EXPECT_FALSE(failures[0].creating);
  EXPECT_TRUE(w.take_failures().empty());
}

// Files added by name are made by the thread, new (O_EXCL), with the mode
// given; one that exists already is not written into.
TEST(FileWriter, FilesAreCreatedNewByTheThread) {
  TempDir dir;
  std::ofstream(dir.path / "taken") << "someone else's\n";
  FileWriter w;
  const auto a = w.add_file(dir.fd.get(), "a", "A", 0600);
  const auto taken = w.add_file(dir.fd.get(), "taken", "TAKEN", 0600);
  EXPECT_FALSE(std::filesystem::exists(dir.path / "a")) << "made before the first write";
  w.write(a, "alpha\n");
  w.write(taken, "lost\n");
  w.write(a, "beta\n");
  EXPECT_TRUE(w.finish(milliseconds(10000)));
  EXPECT_EQ(slurp(dir.path / "a"), "alpha\nbeta\n");
  EXPECT_EQ(std::filesystem::status(dir.path / "a").permissions() & std::filesystem::perms::all,
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  EXPECT_EQ(slurp(dir.path / "taken"), "someone else's\n");
  const auto failures = w.take_failures();
  ASSERT_EQ(failures.size(), 1u);
  EXPECT_EQ(failures[0].label, "TAKEN");
  EXPECT_EQ(failures[0].error, EEXIST);
  EXPECT_TRUE(failures[0].creating);
  EXPECT_FALSE(w.failed(a));
}

// A rotation comes in order with the writes: what was handed over before it
// ends up in NAME.1 (the one before is replaced), what comes after in a new
// NAME; a rotation before anything was written again moves nothing.
TEST(FileWriter, RotationMovesWhatCameBeforeItAside) {
  TempDir dir;
  FileWriter w;
  const auto a = w.add_file(dir.fd.get(), "a", "A", 0600);
  w.rotate(a);  // nothing made yet
  w.write(a, "one\n");
  w.write(a, "two\n");  // (joins the chunk before: the rotation must not)
  w.rotate(a);
  w.write(a, "three\n");
  w.rotate(a);
  w.rotate(a);  // nothing since: "three" stays in a.1
  w.write(a, "four\n");
  EXPECT_TRUE(w.finish(milliseconds(10000)));
  EXPECT_EQ(slurp(dir.path / "a"), "four\n");
  EXPECT_EQ(slurp(dir.path / "a.1"), "three\n");
  EXPECT_FALSE(w.failed(a));
  EXPECT_TRUE(w.take_failures().empty());
  // Published: it appears under its final name once written; closed: it
  // stays, and its descriptor is given back.
  const auto part = w.add_file(dir.fd.get(), ".report.part", "REPORT", 0600);
  w.write(part, "whole\n");
  w.publish(part, "report");
  w.write(a, "five\n");
  w.close(a);
  EXPECT_TRUE(w.finish(milliseconds(10000)));
  EXPECT_EQ(slurp(dir.path / "report"), "whole\n");
  EXPECT_FALSE(std::filesystem::exists(dir.path / ".report.part"));
  EXPECT_EQ(slurp(dir.path / "a"), "four\nfive\n");
  int open_in_dir = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    const auto target = std::filesystem::read_symlink(e.path(), ec);
    if (!ec && target.parent_path() == dir.path) ++open_in_dir;
  }
  EXPECT_EQ(open_in_dir, 0) << "a closed or published file is not held open";
  EXPECT_TRUE(w.take_failures().empty());
  // A file given by descriptor is never renamed.
  const UniqueFd fd(::open((dir.path / "given").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
  const auto given = w.add_fd(fd.get(), "GIVEN");
  w.write(given, "x\n");
  w.rotate(given);
  w.write(given, "y\n");
  EXPECT_TRUE(w.finish(milliseconds(10000)));
  EXPECT_EQ(slurp(dir.path / "given"), "x\ny\n");
  EXPECT_FALSE(std::filesystem::exists(dir.path / "given.1"));
}

// The loop hears of progress (to lower back-pressure, to end the drain).
TEST(FileWriter, TheAttachedLoopHearsOfProgress) {
  TempDir dir;
  boost::asio::io_context io;
  FileWriter w;
  int heard = 0;
  w.attach(io, [&] { ++heard; });
  const auto a = w.add_file(dir.fd.get(), "a", "A", 0644);
  w.write(a, "x\n");
  poll_until(io, [&] { return heard > 0; });
  EXPECT_GE(heard, 1);
  EXPECT_EQ(w.queued(), 0u);
  w.detach();
}

// Destroying a writer whose thread is stuck does not wait for the disk
// for good: the thread is left behind and ends once its write returns.
TEST(FileWriter, DestroyingItWithAStuckFileTakesTheStallTimeNotForever) {
  ::signal(SIGPIPE, SIG_IGN);  // as dlaunch's main() does
  auto [rd, wr] = make_pipe();
  const auto begin = std::chrono::steady_clock::now();
  {
    FileWriter w;
    const auto t = w.add_fd(wr.get(), "stuck");
    w.write(t, std::string(256 * 1024, 'x'));
  }
  const auto took = std::chrono::steady_clock::now() - begin;
  EXPECT_LT(took, FileWriter::kFinishStall * 3);
  rd.reset();  // the left-behind thread's write now fails (EPIPE) and it ends
}

// dlaunch's stdout redirected to a regular file: written by the writer's
// thread, counted in the console's queue until written, all of it there.
TEST(FileWriter, AConsoleOnARegularFileWritesThroughIt) {
  TempDir dir;
  const auto path = dir.path / "out.txt";
  UniqueFd out(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  auto [err_r, err_w] = make_pipe();
  set_nonblocking(err_r.get(), true);
  boost::asio::io_context io;
  std::string expected;
  {
    Console console(out.get(), err_w.get());
    bool empty = false;
    console.attach(
        io, [](bool) {}, [&] { empty = true; });
    for (int k = 0; k < 50; ++k) {
      const std::string piece = numbered_lines(k * 100, (k + 1) * 100);
      expected += piece;
      console.write(false, piece);
    }
    EXPECT_EQ(console.out().wait_fd(), -1) << "nothing to poll on a regular file";
    ASSERT_TRUE(console.out().file_target().has_value());
    poll_until(io, [&] { return empty; });
    EXPECT_TRUE(empty);
    EXPECT_EQ(console.queued(), 0u);
    EXPECT_EQ(console.written(), expected.size());
  }
  EXPECT_TRUE(slurp(path) == expected);
  EXPECT_EQ(read_to_end(err_r.get()), "");
}
