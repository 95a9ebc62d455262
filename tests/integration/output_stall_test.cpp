// Output never blocks the controller (issue 17): a reader of dlaunch's stdout
// that stops reading longer than the heartbeat timeout, one that goes away
// (`| head`), and a per-rank file on a full disk. Each is a real job on this
// machine; the first takes about 30 s (a 15 s stall is the point of it).
#include <fcntl.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <gtest/gtest.h>

#include "dlaunch/process.h"
#include "support.h"

using namespace dltest;
namespace fs = std::filesystem;

namespace {

const std::string kWorker = TEST_WORKER_BIN;

// Waits for pid to exit (killing it after timeout_s); its exit code, or -1.
int wait_exit(pid_t pid, double timeout_s) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    int status = 0;
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return dlaunch::exit_code_of(status);
    if (r < 0) return -1;
    if (std::chrono::steady_clock::now() > end) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

pid_t start_dlaunch(const std::vector<std::string>& args, int stdout_fd, int stderr_fd) {
  dlaunch::SpawnOptions o;
  o.argv = dlaunch_cmd(args);
  o.env = dlaunch::current_environment();
  o.new_process_group = false;
  o.stdout_fd = stdout_fd;
  o.stderr_fd = stderr_fd;
  auto r = dlaunch::spawn(o);
  if (!r) throw std::runtime_error("spawn: " + r.error());
  return *r;
}

// "[R] R SEQ" lines of test_worker's paced mode: per rank, the sequence
// numbers in the order they came; anything else is counted as a bad line.
struct Tally {
  std::map<int, long> next;  // rank -> the sequence number expected next
  long bad = 0;
  long lines = 0;
  std::string first_bad;
  std::string carry;
  void feed(std::string_view data) {
    carry.append(data);
    std::size_t pos = 0;
    for (;;) {
      const auto nl = carry.find('\n', pos);
      if (nl == std::string::npos) break;
      line(std::string_view(carry).substr(pos, nl - pos));
      pos = nl + 1;
    }
    carry.erase(0, pos);
  }
  // One read(2) of fd, fed in; false at its end or on an error.
  bool read_from(int fd, std::vector<char>& buf) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n > 0) feed(std::string_view(buf.data(), static_cast<std::size_t>(n)));
    return n > 0 || (n < 0 && errno == EINTR);
  }
  std::vector<std::string> ours;  // dlaunch's own lines ("dlaunch: ...")
  void line(std::string_view l) {
    if (l.starts_with("dlaunch: ")) {
      ours.emplace_back(l);
      return;
    }
    ++lines;
    int pr = -1;
    int r = -1;
    long seq = -1;
    const std::string s(l);
    if (std::sscanf(s.c_str(), "[%d] %d %ld", &pr, &r, &seq) != 3 || pr != r || next[r] != seq) {
      if (bad++ == 0) first_bad = s + " (expected seq " + std::to_string(next[r]) + ")";
      return;
    }
    next[r] = seq + 1;
  }
};

}  // namespace

// The acceptance case: the reader stops for 15 s, three times the heartbeat
// timeout. Before issue 17, dlaunch blocked in write(2), sent no heartbeat,
// and the agents stopped the job; now the job waits for the reader (its
// workers block on their pipes) and every line arrives, in order.
TEST(OutputStall, ReaderThatStopsLongerThanTheHeartbeatTimeoutLosesNothing) {
  const fs::path dir = temp_dir("stall");
  const auto fifo = dir / "out.fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  dlaunch::UniqueFd rd(::open(fifo.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  ASSERT_TRUE(rd);
  dlaunch::UniqueFd wr(::open(fifo.c_str(), O_WRONLY | O_CLOEXEC));
  ASSERT_TRUE(wr);
  dlaunch::UniqueFd err(
      ::open((dir / "stderr").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  ASSERT_TRUE(err);
  dlaunch::set_nonblocking(rd.get(), false);

  constexpr long kLines = 600000;  // per rank, over about 15 s
  const auto job = unique_job_id("stall");
  const pid_t pid = start_dlaunch({"-n", "2", "--job-id", job, "--heartbeat-timeout", "5", kWorker,
                                   "paced", std::to_string(kLines), "40000"},
                                  wr.get(), err.get());
  wr.reset();
  err.reset();

  Tally tally;
  double stalled_s = 0;
  std::thread reader([&] {
    std::vector<char> buf(1 << 16);
    const auto begin = std::chrono::steady_clock::now();
    bool stalled = false;
    for (;;) {
      if (!stalled && std::chrono::steady_clock::now() - begin > std::chrono::seconds(2)) {
        stalled = true;  // a paused `less`: nothing is read for 15 s
        const auto t0 = std::chrono::steady_clock::now();
        std::this_thread::sleep_for(std::chrono::seconds(15));
        stalled_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      }
      if (!tally.read_from(rd.get(), buf)) break;
    }
  });
  const int code = wait_exit(pid, 100);
  reader.join();
  const std::string errs = slurp(dir / "stderr");
  EXPECT_GE(stalled_s, 15.0);
  EXPECT_EQ(code, 0) << errs;
  EXPECT_EQ(tally.bad, 0) << tally.first_bad;
  EXPECT_EQ(tally.next[0], kLines);
  EXPECT_EQ(tally.next[1], kLines);
  EXPECT_EQ(tally.lines, 2 * kLines);
  EXPECT_EQ(tally.carry, "") << "a cut last line";
  EXPECT_EQ(errs.find("heartbeat"), std::string::npos) << errs;
  EXPECT_EQ(wait_job_gone(job, 10), std::vector<pid_t>{});
  fs::remove_all(dir);
}

// `dlaunch ... 2>&1 | less`, paused: stdout and stderr are one stalled pipe,
// and dlaunch has something of its own to say meanwhile (SIGTSTP and SIGCONT
// are answered with a line each). Those lines go through the same
// non-blocking console as the ranks' output: a write(2) of them straight to
// fd 2 would block the controller past the heartbeat timeout, and the agents
// would stop the job.
TEST(OutputStall, DlaunchsOwnLinesDoNotBlockOnAStalledStderr) {
  const fs::path dir = temp_dir("stall-err");
  const auto fifo = dir / "out.fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  dlaunch::UniqueFd rd(::open(fifo.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  ASSERT_TRUE(rd);
  dlaunch::UniqueFd wr(::open(fifo.c_str(), O_WRONLY | O_CLOEXEC));
  ASSERT_TRUE(wr);
  dlaunch::set_nonblocking(rd.get(), false);

  constexpr long kLines = 160000;  // per rank, over about 4 s
  const auto job = unique_job_id("stall-err");
  const pid_t pid = start_dlaunch({"-n", "2", "--job-id", job, "--heartbeat-timeout", "3", kWorker,
                                   "paced", std::to_string(kLines), "40000"},
                                  wr.get(), wr.get());
  wr.reset();

  Tally tally;
  std::thread reader([&] {
    std::vector<char> buf(1 << 16);
    std::this_thread::sleep_for(std::chrono::seconds(1));
    // The pipe is full by now; dlaunch is asked to speak twice, and nothing
    // is read for 8 s (more than twice the heartbeat timeout).
    ::kill(pid, SIGTSTP);
    std::this_thread::sleep_for(std::chrono::seconds(1));
    ::kill(pid, SIGCONT);
    std::this_thread::sleep_for(std::chrono::seconds(7));
    while (tally.read_from(rd.get(), buf)) {
    }
  });
  const int code = wait_exit(pid, 60);
  reader.join();
  std::string ours;
  for (const auto& l : tally.ours) ours += l + "\n";
  EXPECT_EQ(code, 0) << ours;
  EXPECT_EQ(tally.bad, 0) << tally.first_bad;
  EXPECT_EQ(tally.lines, 2 * kLines);
  EXPECT_NE(ours.find("SIGTSTP: stopping every rank"), std::string::npos) << ours;
  EXPECT_NE(ours.find("SIGCONT: resuming every rank"), std::string::npos) << ours;
  EXPECT_EQ(ours.find("heartbeat"), std::string::npos) << ours;
  EXPECT_EQ(wait_job_gone(job, 10), std::vector<pid_t>{});
  fs::remove_all(dir);
}

// `dlaunch ... | head -n 1`: the reader goes away after a line. Issue 29:
// the job stops, and dlaunch exits as a pipeline stage ended by SIGPIPE
// (141), as `yes | head` does; under --nohup the job runs to its end without
// its stdout.
TEST(OutputStall, StdoutClosedEarlyEndsThePipelineOrUnderNohupLetsTheJobFinish) {
  for (const bool nohup : {false, true}) {
    const fs::path dir = temp_dir("head");
    auto [rd, wr] = dlaunch::make_pipe();
    dlaunch::UniqueFd err(
        ::open((dir / "stderr").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    const auto job = unique_job_id("head");
    // Still running when the reader goes (the sleep): stopped, or under
    // --nohup on to its end.
    const std::string script =
        kWorker + " lines 200000 60 && sleep 3 && touch " + (dir / "done.").string() + "$RANK";
    std::vector<std::string> args = {"-n", "2", "--job-id", job, "sh", "-c", script};
    if (nohup) args.insert(args.begin(), "--nohup");
    const auto start = std::chrono::steady_clock::now();
    const pid_t pid = start_dlaunch(args, wr.get(), err.get());
    wr.reset();
    err.reset();
    std::string first;
    char c = 0;
    while (::read(rd.get(), &c, 1) == 1 && c != '\n') first.push_back(c);
    rd.reset();  // as head(1) does after its line
    const int code = wait_exit(pid, 60);
    const std::string errs = slurp(dir / "stderr");
    EXPECT_EQ(first.rfind('[', 0), 0u) << first;
    if (nohup) {
      EXPECT_EQ(code, 0) << errs;
      EXPECT_TRUE(fs::exists(dir / "done.0")) << errs;
      EXPECT_TRUE(fs::exists(dir / "done.1")) << errs;
      EXPECT_EQ(errs, "");  // the end of a pipeline is no error
    } else {
      EXPECT_EQ(code, 141) << errs;
      EXPECT_NE(errs.find("stdout's reader went away"), std::string::npos) << errs;
      EXPECT_FALSE(fs::exists(dir / "done.0")) << errs;
      EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
    }
    EXPECT_EQ(wait_job_gone(job, 10), std::vector<pid_t>{});
    fs::remove_all(dir);
  }
}

// --output-dir on a full disk: said once per file, with the error; the job
// and the console go on.
TEST(OutputStall, FullDiskForOutputDirIsSaidOnceAndTheJobGoesOn) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to mount a small tmpfs";
  const fs::path dir = temp_dir("full");
  if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=64k") != 0) {
    const int e = errno;
    fs::remove_all(dir);
    GTEST_SKIP() << "cannot mount a tmpfs: " << std::strerror(e);
  }
  const auto job = unique_job_id("full");
  constexpr int kLines = 3000;  // 80 bytes each: 240 KB per rank, past 64 KiB
  auto r = run(dlaunch_cmd({"-n", "2", "--job-id", job, "--output-dir", dir.string(), kWorker,
                            "lines", std::to_string(kLines), "80"}),
               60);
  ::umount2(dir.c_str(), MNT_DETACH);
  fs::remove_all(dir);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // One message per file that failed, naming it and the error.
  int messages = 0;
  std::map<std::string, int> per_file;
  for (const auto& l : lines_of(r.err)) {
    if (l.find("No space left on device") == std::string::npos) continue;
    ++messages;
    const auto a = l.find("rank.");
    ASSERT_NE(a, std::string::npos) << l;
    ++per_file[l.substr(a, l.find('\'', a) - a)];
  }
  EXPECT_GE(messages, 1) << r.err;
  for (const auto& [file, n] : per_file) EXPECT_EQ(n, 1) << file << " said " << n << " times";
  int console = 0;
  for (const auto& l : lines_of(r.out)) console += l.rfind("[", 0) == 0 ? 1 : 0;
  EXPECT_EQ(console, 2 * kLines);
  EXPECT_EQ(wait_job_gone(job, 10), std::vector<pid_t>{});
}

namespace {

// A small ext4 filesystem on a loop device that a test can freeze
// (fsfreeze -f): every write(2) and openat(2) on it then blocks until it is
// thawed, as on an NFS mount whose server stopped answering. Root only.
class FreezableDisk {
 public:
  FreezableDisk() {
    base_ = temp_dir("frozen");
    mnt_ = base_ / "mnt";
    fs::create_directories(mnt_);
    const auto img = (base_ / "disk.img").string();
    if (::geteuid() != 0) {
      why_not_ = "needs root to mount a loop device";
      return;
    }
    for (const char* tool : {"mkfs.ext4", "fsfreeze", "mount"}) {
      if (dlaunch::find_program(tool, dlaunch::current_environment(), "").empty()) {
        why_not_ = std::string("no ") + tool + " (e2fsprogs, util-linux)";
        return;
      }
    }
    auto r = run({"truncate", "-s", "64M", img});
    if (r.exit_code == 0) r = run({"mkfs.ext4", "-q", "-F", img});
    if (r.exit_code == 0) r = run({"mount", "-o", "loop", img, mnt_.string()});
    if (r.exit_code != 0) {
      why_not_ = "cannot mount an ext4 image on a loop device: " + r.err;
      return;
    }
    mounted_ = true;
  }
  ~FreezableDisk() {
    if (frozen_) thaw();
    if (mounted_) run({"umount", "-l", mnt_.string()});
    fs::remove_all(base_);
  }
  FreezableDisk(const FreezableDisk&) = delete;
  FreezableDisk& operator=(const FreezableDisk&) = delete;

  const std::string& why_not() const { return why_not_; }
  const fs::path& path() const { return mnt_; }
  bool freeze() {
    frozen_ = run({"fsfreeze", "-f", mnt_.string()}).exit_code == 0;
    return frozen_;
  }
  void thaw() {
    run({"fsfreeze", "-u", mnt_.string()});
    frozen_ = false;
  }

 private:
  fs::path base_;
  fs::path mnt_;
  std::string why_not_;
  bool mounted_ = false;
  bool frozen_ = false;
};

}  // namespace

// `dlaunch ... > /nfs/log` and --output-dir /nfs/out, and the NFS server
// stops answering for three times the heartbeat timeout (a frozen
// filesystem here). Before, dlaunch blocked in write(2), sent no heartbeat,
// and the agents stopped the job; now its FileWriter's thread waits for the
// disk, back-pressure pauses the ranks' output, and once the disk answers
// again every line is in both places, in order.
TEST(OutputStall, ADiskThatStopsAnsweringHoldsNeitherTheJobNorItsHeartbeats) {
  FreezableDisk disk;
  if (!disk.why_not().empty()) GTEST_SKIP() << disk.why_not();
  const fs::path local = temp_dir("frozen-local");
  dlaunch::UniqueFd out(
      ::open((disk.path() / "log").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  ASSERT_TRUE(out);
  // stderr stays on a disk that answers, to read what dlaunch says.
  dlaunch::UniqueFd err(
      ::open((local / "stderr").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  ASSERT_TRUE(err);

  constexpr long kLines = 160000;  // per rank, over about 8 s
  const auto job = unique_job_id("frozen");
  const pid_t pid = start_dlaunch(
      {"-n", "2", "--job-id", job, "--heartbeat-timeout", "3", "--output-dir",
       (disk.path() / "ranks").string(), kWorker, "paced", std::to_string(kLines), "20000"},
      out.get(), err.get());
  out.reset();
  err.reset();
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  ASSERT_TRUE(disk.freeze());
  std::this_thread::sleep_for(std::chrono::seconds(9));
  // Still there: a controller blocked in write(2) would have lost its agents.
  int status = 0;
  EXPECT_EQ(::waitpid(pid, &status, WNOHANG), 0) << slurp(local / "stderr");
  disk.thaw();
  const int code = wait_exit(pid, 60);
  const std::string errs = slurp(local / "stderr");
  EXPECT_EQ(code, 0) << errs;
  EXPECT_EQ(errs.find("heartbeat"), std::string::npos) << errs;
  Tally console;
  console.feed(slurp(disk.path() / "log"));
  EXPECT_EQ(console.bad, 0) << console.first_bad;
  EXPECT_EQ(console.lines, 2 * kLines);
  for (int r = 0; r < 2; ++r) {
    const auto file = disk.path() / "ranks" / job / ("rank." + std::to_string(r) + ".out");
    const std::string text = slurp(file);
    long n = 0;
    long bad = 0;
    for (const auto& l : lines_of(text)) {
      if (l != std::to_string(r) + " " + std::to_string(n++)) ++bad;
    }
    EXPECT_EQ(n, kLines) << file;
    EXPECT_EQ(bad, 0) << file;
  }
  EXPECT_EQ(wait_job_gone(job, 10), std::vector<pid_t>{});
  fs::remove_all(local);
}
