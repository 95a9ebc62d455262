// read_input_file: what a user names as a hostfile or env file is read only
// when it is a regular file or a pipe, and never past the limit.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "dlaunch/tunables.h"
#include "test_support.h"

using dlaunch::read_input_file;
using dlaunch::testing::catch_input_error;
using dlaunch::testing::TempDir;

TEST(InputFile, DevicesAreRefusedWithoutBeingRead) {
  const auto start = std::chrono::steady_clock::now();
  for (const char* dev : {"/dev/zero", "/dev/urandom"}) {
    const auto e = catch_input_error([&] { read_input_file(dev, "hostfile"); });
    EXPECT_EQ(e.message(), "is not a regular file or a pipe") << dev;
    EXPECT_EQ(e.pos().source, dev);
    EXPECT_NE(std::string(e.what()).find("64 MiB"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
}

TEST(InputFile, AFileOverTheLimitIsRefusedBeforeItIsRead) {
  TempDir dir;
  const std::string path = dir.write("big.yaml", "");
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(dlaunch::limits::kMaxInputFileBytes) + 1),
            0);
  const auto e = catch_input_error([&] { read_input_file(path, "hostfile"); });
  EXPECT_NE(e.message().find("over the limit of 64 MiB"), std::string::npos) << e.what();
}

TEST(InputFile, APipeIsReadButNotPastTheLimit) {
  TempDir dir;
  const std::string fifo = (dir.path() / "hosts").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  ::signal(SIGPIPE, SIG_IGN);  // the writer's end once the reader gave up
  // A writer that would go on forever, like -H <(yes localhost).
  std::thread writer([&] {
    const int fd = ::open(fifo.c_str(), O_WRONLY);
    const std::string chunk(1 << 16, 'x');
    while (::write(fd, chunk.data(), chunk.size()) > 0) {
    }
    ::close(fd);
  });
  const auto e = catch_input_error([&] { read_input_file(fifo, "hostfile"); });
  EXPECT_EQ(e.message(), "is larger than the limit of 64 MiB");
  writer.join();  // the reader closed its end: the writer's write fails with EPIPE

  std::thread small([&] {
    const int fd = ::open(fifo.c_str(), O_WRONLY);
    (void)!::write(fd, "a slots=2\n", 10);
    ::close(fd);
  });
  EXPECT_EQ(read_input_file(fifo, "hostfile"), "a slots=2\n");
  small.join();
}

// -H <(make-hosts): the shell names the pipe /dev/fd/N; it is opened through
// the descriptor that was checked (/proc/self/fd), which works for pipes too.
TEST(InputFile, AnAnonymousPipeNamedThroughDevFdIsRead) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  ASSERT_EQ(::write(fds[1], "a slots=2\n", 10), 10);
  ::close(fds[1]);
  EXPECT_EQ(read_input_file("/dev/fd/" + std::to_string(fds[0]), "hostfile"), "a slots=2\n");
  ::close(fds[0]);
}

TEST(InputFile, ALoopOfLinksIsNamedAsSuch) {
  TempDir dir;
  const auto a = dir.path() / "a";
  const auto b = dir.path() / "b";
  std::filesystem::create_symlink(b, a);
  std::filesystem::create_symlink(a, b);
  const auto e = catch_input_error([&] { read_input_file(a.string(), "hostfile"); });
  EXPECT_EQ(e.message(), "too many levels of symbolic links (a loop?)");
}

TEST(InputFile, MissingAndDirectoriesAreInputErrors) {
  TempDir dir;
  EXPECT_EQ(catch_input_error([&] {
              read_input_file((dir.path() / "nope").string(), "--env-file");
            }).message(),
            "file not found");
  EXPECT_EQ(catch_input_error([&] { read_input_file(dir.path().string(), "hostfile"); }).message(),
            "is a directory, not a file");
}
