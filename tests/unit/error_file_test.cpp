// TORCHELASTIC_ERROR_FILE: the agent's side (where the file is, reading it
// back) and the head's (what PyTorch wrote, and how the report shows it).
#include "jobs/error_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "jobs/report.h"
#include "worker.h"

using namespace dlaunch;
namespace fs = std::filesystem;

namespace {

// Exactly what torch 1.13's @record wrote for `raise RuntimeError("boom from rank")`.
const std::string kRecorded =
    R"({"message": {"message": "RuntimeError: boom from rank", "extraInfo": {"py_callstack": )"
    R"("Traceback (most recent call last):\n  File \"/tmp/rec.py\", line 4, in main\n    )"
    R"(raise RuntimeError(\"boom from rank\")\nRuntimeError: boom from rank\n", "timestamp": )"
    R"("1700000000"}}})";

fs::path scratch(const std::string& tag) {
  auto d =
      fs::temp_directory_path() / ("dlaunch-errfile-" + tag + "-" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}

}  // namespace

TEST(ErrorFile, RecordFormatGivesMessageTracebackAndTimestamp) {
  auto e = parse_error_file(kRecorded);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->message, "RuntimeError: boom from rank");
  EXPECT_EQ(e->traceback,
            "Traceback (most recent call last):\n  File \"/tmp/rec.py\", line 4, in main\n    "
            "raise RuntimeError(\"boom from rank\")\nRuntimeError: boom from rank\n");
  EXPECT_EQ(e->timestamp, "1700000000");
}

TEST(ErrorFile, PlainMessageFormatIsAccepted) {
  auto e = parse_error_file(R"(  {"message": "out of memory on GPU 3"}  )");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->message, "out of memory on GPU 3");
  EXPECT_EQ(e->traceback, "");
}

TEST(ErrorFile, EscapesAndUnicodeAreDecoded) {
  auto e = parse_error_file(R"({"message": "tab\there \u00e9 \ud83d\ude00 \/ \\ \"q\""})");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->message, "tab\there \xc3\xa9 \xf0\x9f\x98\x80 / \\ \"q\"");
}

TEST(ErrorFile, ExtraFieldsOfAnyKindAreSkipped) {
  auto e = parse_error_file(
      R"({"x": [1, -2.5e3, true, false, null, {"y": []}], "message": {"message": "M", )"
      R"("errorCode": 7, "extraInfo": {"timestamp": 1700000000}}})");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->message, "M");
  EXPECT_EQ(e->timestamp, "1700000000");
}

TEST(ErrorFile, AnythingElseIsNotAnErrorFile) {
  for (const char* text :
       {"", "not json", "{", R"({"message": "unterminated)", R"({"other": "x"})",
        R"({"message": 5})", R"({"message": {}})", R"({"message": "a"} trailing)", "[1, 2]",
        R"({"message": "bad escape \q"})", R"({"message": "lone \udc00"})",
        R"({"message": "raw
newline"})"}) {
    EXPECT_FALSE(parse_error_file(text).has_value()) << text;
  }
  // Deep nesting is refused, not a stack overflow.
  std::string deep(100000, '[');
  EXPECT_FALSE(parse_error_file(deep).has_value());
}

TEST(ErrorFile, ReportShowsTheMessageAndTraceback) {
  RootCause c;
  c.kind = CauseKind::kWorker;
  c.exit = proto::Exited{.rank = 2, .pid = 77, .code = 1, .runtime_ms = 1500};
  c.exit.error_file = "/tmp/dlaunch-j-node1-5/error.2.json";
  c.exit.error_file_data = kRecorded;
  c.node = "node1";
  c.stderr_tail = {"RuntimeError: boom from rank"};
  const auto text = format_report("j", c, 3);
  EXPECT_NE(text.find("dlaunch: job j failed: rank 2 exited with code 1\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find(" (from its error file /tmp/dlaunch-j-node1-5/error.2.json):\n"
                      "    RuntimeError: boom from rank\n"
                      "  traceback:\n"
                      "    | Traceback (most recent call last):\n"
                      "    |   File \"/tmp/rec.py\", line 4, in main\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  error at "), std::string::npos) << text;
  EXPECT_NE(text.find("last 1 line(s) of its stderr"), std::string::npos) << text;
}

TEST(ErrorFile, ReportShowsAFileThatIsNotJsonAsItIs) {
  RootCause c;
  c.kind = CauseKind::kWorker;
  c.exit = proto::Exited{.rank = 0, .code = 3};
  c.exit.error_file = "/e.json";
  c.exit.error_file_data = "something went wrong\nsecond line\n";
  const auto text = format_report("j", c, 0);
  EXPECT_NE(text.find("  its error file /e.json (not JSON as PyTorch writes it):\n"
                      "    | something went wrong\n"
                      "    | second line\n"),
            std::string::npos)
      << text;
}

TEST(ErrorFile, LongTracebacksKeepTheirInnermostLines) {
  std::string tb;
  for (int i = 0; i < 100; ++i) tb += "frame " + std::to_string(i) + "\\n";
  RootCause c;
  c.kind = CauseKind::kWorker;
  c.exit.error_file = "/e.json";
  c.exit.error_file_data =
      R"({"message": {"message": "E", "extraInfo": {"py_callstack": ")" + tb + R"("}}})";
  const auto text = format_report("j", c, 0);
  EXPECT_NE(text.find("    | ... (40 earlier line(s) left out)\n    | frame 40\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("    | frame 99\n"), std::string::npos);
  EXPECT_EQ(text.find("    | frame 39\n"), std::string::npos);
}

TEST(AgentErrorFile, EachRankGetsItsOwnFileUnlessTheUserChoseOne) {
  std::vector<std::string> env = {"HOME=/root"};
  EXPECT_EQ(agent::ensure_error_file(env, "/tmp/d", 3), "/tmp/d/error.3.json");
  EXPECT_EQ(env.back(), "TORCHELASTIC_ERROR_FILE=/tmp/d/error.3.json");

  std::vector<std::string> chosen = {"TORCHELASTIC_ERROR_FILE=/data/err.json"};
  EXPECT_EQ(agent::ensure_error_file(chosen, "/tmp/d", 3), "/data/err.json");
  EXPECT_EQ(chosen, (std::vector<std::string>{"TORCHELASTIC_ERROR_FILE=/data/err.json"}));

  std::vector<std::string> empty = {"TORCHELASTIC_ERROR_FILE="};
  EXPECT_EQ(agent::ensure_error_file(empty, "/tmp/d", 0), "/tmp/d/error.0.json");
  EXPECT_EQ(empty, (std::vector<std::string>{"TORCHELASTIC_ERROR_FILE=/tmp/d/error.0.json"}));

  std::vector<std::string> no_dir;
  EXPECT_EQ(agent::ensure_error_file(no_dir, "", 0), "");
  EXPECT_TRUE(no_dir.empty());
}

TEST(AgentErrorFile, ReadsAtMostTheLimitAndOnlyAFreshFile) {
  const auto d = scratch("read");
  const auto path = (d / "error.0.json").string();
  const auto start = std::chrono::system_clock::now();
  std::ofstream(path) << std::string(100, 'x');
  EXPECT_EQ(agent::read_error_file(path, start, 64), std::string(64, 'x'));
  EXPECT_EQ(agent::read_error_file(path, start, 1000), std::string(100, 'x'));
  EXPECT_EQ(agent::read_error_file((d / "missing.json").string(), start, 64), "");
  EXPECT_EQ(agent::read_error_file(d.string(), start, 64), "");  // a directory
  // Written long before the worker started: someone else's, not reported.
  EXPECT_EQ(agent::read_error_file(path, start + std::chrono::hours(1), 64), "");
  // A FIFO must not block the agent.
  const auto fifo = (d / "fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(agent::read_error_file(fifo, start, 64), "");
  fs::remove_all(d);
}

// What a note about many nodes names them by: ranges, not a list of a
// thousand numbers.
TEST(Report, IndexRangesJoinRunsOfConsecutiveIndices) {
  EXPECT_EQ(dlaunch::index_ranges({}), "");
  EXPECT_EQ(dlaunch::index_ranges({4}), "4");
  EXPECT_EQ(dlaunch::index_ranges({0, 1}), "0-1");
  EXPECT_EQ(dlaunch::index_ranges({0, 1, 2, 3, 5, 7, 8}), "0-3,5,7-8");
  std::vector<std::size_t> many(1024);
  for (std::size_t i = 0; i < many.size(); ++i) many[i] = i;
  many.erase(many.begin() + 515);
  EXPECT_EQ(dlaunch::index_ranges(many), "0-514,516-1023");
}
