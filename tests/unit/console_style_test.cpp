// --ranks, --timestamps, --color: what the console shows of worker output.
#include "output/console_style.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include <gtest/gtest.h>

#include "dlaunch/process.h"
#include "dlaunch/text.h"
#include "hostfile/hostfile.h"
#include "output/output_sink.h"
#include "plan/user_env.h"

using namespace dlaunch;

namespace {

std::string style_error_of(std::string_view spec, int world) {
  try {
    parse_rank_list(spec, world);
  } catch (const InputError& e) {
    return e.what();
  }
  return "<no error>";
}

struct Pipe {
  Pipe() {
    auto [r, w] = make_pipe();
    read_end = std::move(r);
    write_end = std::move(w);
    set_nonblocking(read_end.get(), true);
  }
  std::string drain() const {
    std::string s;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(read_end.get(), buf, sizeof buf)) > 0)
      s.append(buf, static_cast<std::size_t>(n));
    return s;
  }
  UniqueFd read_end, write_end;
};

}  // namespace

TEST(RankList, SinglesAndRangesSortedWithoutDuplicates) {
  EXPECT_EQ(parse_rank_list("0,3-5", 8), (std::vector<int>{0, 3, 4, 5}));
  EXPECT_EQ(parse_rank_list("7,2,2-3,0", 8), (std::vector<int>{0, 2, 3, 7}));
  EXPECT_EQ(parse_rank_list("4-4", 5), (std::vector<int>{4}));
}

TEST(RankList, BadSpecsAndRanksOutsideTheJobAreErrors) {
  EXPECT_EQ(style_error_of("0,9", 4), "--ranks: rank 9 is not in this job (ranks 0-3)");
  EXPECT_EQ(
      style_error_of("5-3", 8),
      "--ranks: '5-3': the range 5-3 runs backwards (hint: give ranks and ranges such as 0,3-5)");
  for (const char* bad : {"", ",", "1,", "a", "1-", "-1", "1-2-3", " 1", "0x1", "1.5"}) {
    EXPECT_NE(style_error_of(bad, 8), "<no error>") << bad;
  }
}

TEST(Color, AutoNeedsATerminalAndNoNoColor) {
  EXPECT_TRUE(color_enabled(ColorMode::kAuto, true, nullptr, "xterm"));
  EXPECT_FALSE(color_enabled(ColorMode::kAuto, false, nullptr, "xterm"));
  EXPECT_FALSE(color_enabled(ColorMode::kAuto, true, "1", "xterm"));
  EXPECT_TRUE(color_enabled(ColorMode::kAuto, true, "", "xterm"));  // empty NO_COLOR: not set
  EXPECT_FALSE(color_enabled(ColorMode::kAuto, true, nullptr, "dumb"));
  EXPECT_TRUE(color_enabled(ColorMode::kAlways, false, "1", "dumb"));
  EXPECT_FALSE(color_enabled(ColorMode::kNever, true, nullptr, "xterm"));
  EXPECT_EQ(parse_color_mode("always"), ColorMode::kAlways);
  EXPECT_THROW(parse_color_mode("yes"), InputError);
}

TEST(Timestamp, HoursMinutesSecondsMilliseconds) {
  const auto t = std::chrono::system_clock::from_time_t(1700000000) + std::chrono::milliseconds(42);
  const auto s = format_timestamp(t);
  EXPECT_TRUE(std::regex_match(s, std::regex(R"(\d\d:\d\d:\d\d\.042 )"))) << s;
}

TEST(OutputSink, RanksFilterHidesOthersFromTheConsoleButNotFromFilesOrTheReport) {
  Pipe out, err;
  const auto dir =
      std::filesystem::temp_directory_path() / ("sink-ranks-" + std::to_string(::getpid()));
  {
    OutputSink sink({.output_dir = dir.string(),
                     .job_id = "j",
                     .stdout_fd = out.write_end.get(),
                     .stderr_fd = err.write_end.get(),
                     .ranks = {0, 3}});
    for (int r = 0; r < 4; ++r) {
      sink.write(r, proto::Stream::kStdout, "out " + std::to_string(r) + "\n", false);
      sink.write(r, proto::Stream::kStderr, "err " + std::to_string(r) + "\n", false);
    }
    EXPECT_EQ(sink.stderr_tail(1), (std::vector<std::string>{"err 1"}));
  }
  EXPECT_EQ(out.drain(), "[0] out 0\n[3] out 3\n");
  EXPECT_EQ(err.drain(), "[0] err 0\n[3] err 3\n");
  std::ifstream f(dir / "j" / "rank.1.out");
  std::string all((std::istreambuf_iterator<char>(f)), {});
  EXPECT_EQ(all, "out 1\n");
  std::filesystem::remove_all(dir);
}

TEST(OutputSink, TimestampsGoBeforeThePrefixOfEveryLine) {
  Pipe out, err;
  OutputSink sink(
      {.stdout_fd = out.write_end.get(), .stderr_fd = err.write_end.get(), .timestamps = true});
  sink.write(2, proto::Stream::kStdout, "a\nb\n", false);
  const auto text = out.drain();
  EXPECT_TRUE(std::regex_match(
      text, std::regex(R"(\d\d:\d\d:\d\d\.\d\d\d \[2\] a\n\d\d:\d\d:\d\d\.\d\d\d \[2\] b\n)")))
      << text;
}

TEST(OutputSink, ColouredPrefixesOnlyOnTheStreamThatAsked) {
  Pipe out, err;
  OutputSink sink(
      {.stdout_fd = out.write_end.get(), .stderr_fd = err.write_end.get(), .color_stdout = true});
  sink.write(1, proto::Stream::kStdout, "x\n", false);
  sink.write(1, proto::Stream::kStderr, "y\n", false);
  EXPECT_EQ(out.drain(), std::string(rank_color(1)) + "[1]" + std::string(kColorReset) + " x\n");
  EXPECT_EQ(err.drain(), "[1] y\n");
  EXPECT_NE(rank_color(0), rank_color(1));
  EXPECT_EQ(rank_color(0), rank_color(10));
}

TEST(OutputSink, ColourWithoutAPrefixAddsNothingButTheDimTime) {
  Pipe out, err;
  OutputSink sink({.prefix = PrefixMode::kNone,
                   .stdout_fd = out.write_end.get(),
                   .stderr_fd = err.write_end.get(),
                   .timestamps = true,
                   .color_stdout = true});
  sink.write(0, proto::Stream::kStdout, "z\n", false);
  const auto text = out.drain();
  EXPECT_TRUE(
      std::regex_match(text, std::regex("\033\\[2m\\d\\d:\\d\\d:\\d\\d\\.\\d\\d\\d\033\\[0m z\n")))
      << text;
}

// Issue 15 item 13: what came from input or another host reaches the terminal
// with its control bytes written out.
TEST(Printable, ControlBytesAreWrittenOut) {
  EXPECT_EQ(dlaunch::printable("plain ascii, ünïcode"), "plain ascii, ünïcode");
  EXPECT_EQ(dlaunch::printable("a\x1b[2Jb\r\n\t\x01\x7f"), "a\\e[2Jb\\r\\n\\t\\x01\\x7f");
  EXPECT_EQ(dlaunch::printable(std::string("nul\0x", 5)), "nul\\x00x");
}

// The words --job-id, --rdzv-id and --container-env take (a file name under
// the state home; a name the container's environment gets from the host's).
TEST(Words, JobIdsAndVariableNames) {
  EXPECT_TRUE(dlaunch::is_job_id("train-3.b_2"));
  EXPECT_TRUE(dlaunch::is_job_id(std::string(64, 'x')));
  for (const char* bad : {"", ".", "..", "a/b", "a b", "ü", "a\n"})
    EXPECT_FALSE(dlaunch::is_job_id(bad)) << bad;
  EXPECT_FALSE(dlaunch::is_job_id(std::string(65, 'x')));
  EXPECT_TRUE(dlaunch::is_env_name("_A9"));
  EXPECT_TRUE(dlaunch::is_env_name("NCCL_DEBUG"));
  for (const char* bad : {"", "9A", "A-B", "A.B", "A=1", "É"})
    EXPECT_FALSE(dlaunch::is_env_name(bad)) << bad;
}
