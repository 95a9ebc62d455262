// The job registry and its events (launcher/jobs/): JSON that any parser
// reads, records made private and read back, names resolved, pruning.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include "dlaunch/error.h"
#include "jobs/events.h"
#include "jobs/progress_line.h"
#include "jobs/registry.h"
#include "seams/scoped_env.h"

using namespace dlaunch;
namespace fs = std::filesystem;

namespace {

// A state home of the test's own, set as XDG_STATE_HOME while it lives.
struct StateHome {
  StateHome() : dir(fresh_dir()), env{{"XDG_STATE_HOME", dir.string()}} {}
  ~StateHome() { fs::remove_all(dir); }
  static fs::path fresh_dir() {
    fs::path d = fs::temp_directory_path() / ("dlaunch-jobs-" + std::to_string(::getpid()));
    fs::remove_all(d);
    fs::create_directories(d);
    return d;
  }
  fs::path dir;
  dltest::ScopedEnv env;
};

JobStart a_job(const std::string& id, std::int64_t started_ms) {
  return JobStart{.id = id,
                  .argv = {"dlaunch", "-n", "2", "python3", "train.py", "--name=\"x\"\n"},
                  .cwd = "/work/a b",
                  .head_host = "elsewhere.example",
                  .head_pid = 1,
                  .head_start_ticks = 1,
                  .nodes = 2,
                  .ranks = 4,
                  .node_names = {"n1", "n2"},
                  .started_ms = started_ms};
}

}  // namespace

TEST(Events, JsonQuoteEscapesAndRepairsUtf8) {
  EXPECT_EQ(json_quote("plain"), "\"plain\"");
  EXPECT_EQ(json_quote("a\"b\\c\n\t\x01"), "\"a\\\"b\\\\c\\n\\t\\u0001\"");
  EXPECT_EQ(json_quote("caf\xC3\xA9"), "\"caf\xC3\xA9\"");  // UTF-8 kept
  // A lone continuation byte, a truncated sequence, an overlong '/', a surrogate.
  EXPECT_EQ(json_quote("\x80"), "\"\xEF\xBF\xBD\"");
  EXPECT_EQ(json_quote("\xE2\x82"), "\"\xEF\xBF\xBD\xEF\xBF\xBD\"");
  EXPECT_EQ(json_quote("\xC0\xAF"), "\"\xEF\xBF\xBD\xEF\xBF\xBD\"");
  EXPECT_EQ(json_quote("\xED\xA0\x80"), "\"\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\"");
}

TEST(Events, ALineHasTheCommonKeysFirstAndParses) {
  EventLog log("job\"1");
  log.set_attempt(2);
  const std::string l =
      log.line(1764165425123, "rank_exited",
               {{"rank", 3LL}, {"runtime_s", 1.5}, {"ok", false}, {"reason", "a\nb\xFF"}});
  EXPECT_EQ(l.rfind(R"({"v":1,"time":"2025-11-26T13:57:05.123Z","job":"job\"1","attempt":2,)", 0),
            0u)
      << l;
  ASSERT_EQ(l.back(), '\n');
  EXPECT_EQ(l.find('\n'), l.size() - 1);  // one line
  const YAML::Node n = YAML::Load(l);
  EXPECT_EQ(n["type"].as<std::string>(), "rank_exited");
  EXPECT_EQ(n["rank"].as<int>(), 3);
  EXPECT_DOUBLE_EQ(n["runtime_s"].as<double>(), 1.5);
  EXPECT_FALSE(n["ok"].as<bool>());
  EXPECT_EQ(n["reason"].as<std::string>(), "a\nb\xEF\xBF\xBD");
  EXPECT_EQ(n["job"].as<std::string>(), "job\"1");
}

// attach's progress line, from the lines the head writes (EventLog).
TEST(Events, TheProgressLineTalliesTheNewestAttempt) {
  EventLog log("j");
  ProgressLine p(2, 4);
  EXPECT_EQ(p.text(-1), "attempt 0: 0/2 nodes ready, 0/4 ranks running");
  p.add(log.line(0, "start", {{"nodes", 2LL}, {"world_size", 4LL}}));
  p.add(log.line(0, "node_ready", {{"node", 0LL}}));
  p.add(log.line(0, "node_ready", {{"node", 1LL}}));
  for (long long r = 0; r < 4; ++r) p.add(log.line(0, "rank_started", {{"rank", r}}));
  EXPECT_EQ(p.text(312), "attempt 0: 2/2 nodes ready, 4/4 ranks running · 5m12s");
  p.add(log.line(0, "rank_exited", {{"rank", 1LL}, {"how", "exited"}, {"code", 0LL}}));
  p.add(log.line(0, "rank_exited", {{"rank", 2LL}, {"how", "signaled"}, {"code", 0LL}}));
  p.add(log.line(0, "node_lost", {{"node", 1LL}, {"reason", "\"type\":\"restart\""}}));
  EXPECT_EQ(p.text(59),
            "attempt 0: 2/2 nodes ready, 2/4 ranks running, 2 exited (1 failed), "
            "1 node lost · 59s");
  // A restart on fewer nodes starts the counts again with its own numbers.
  log.set_attempt(1);
  p.add(log.line(0, "restart", {{"nodes", 1LL}, {"world_size", 2LL}, {"why", "node lost"}}));
  p.add(log.line(0, "node_ready", {{"node", 0LL}}));
  EXPECT_EQ(p.text(7300), "attempt 1: 1/1 nodes ready, 0/2 ranks running · 2h01m");
  // What it cannot read, and an older attempt's late line, change nothing.
  p.add("not json");
  p.add(R"({"v":1,"type":"node_ready"})");
  log.set_attempt(0);
  p.add(log.line(0, "rank_started", {{"rank", 0LL}}));
  EXPECT_EQ(p.text(-1), "attempt 1: 1/1 nodes ready, 0/2 ranks running");
}

// The nodes that pull their image (image_pull events) until each is done,
// ready or lost.
TEST(Events, TheProgressLineCountsTheNodesPullingTheirImage) {
  EventLog log("j");
  ProgressLine p(3, 3);
  for (long long n = 0; n < 3; ++n) {
    p.add(log.line(0, "image_pull", {{"node", n}, {"image", "r/i:1"}, {"done", false}}));
  }
  EXPECT_EQ(p.text(-1), "attempt 0: 0/3 nodes ready (3 pulling the image), 0/3 ranks running");
  p.add(log.line(0, "image_pull", {{"node", 0LL}, {"image", "r/i:1"}, {"done", true}}));
  p.add(log.line(0, "node_lost", {{"node", 2LL}, {"reason", "gone"}}));
  EXPECT_EQ(p.text(-1),
            "attempt 0: 0/3 nodes ready (1 pulling the image), 0/3 ranks running, 1 node lost");
  p.add(log.line(0, "node_ready", {{"node", 1LL}}));
  EXPECT_EQ(p.text(-1), "attempt 0: 1/3 nodes ready, 0/3 ranks running, 1 node lost");
}

TEST(Events, EveryWriterGetsEveryLineAndNoneMeansNothingIsMade) {
  EventLog log("j");
  EXPECT_FALSE(log.active());
  log.emit("start");  // no writer: nothing to do
  std::string a;
  std::string b;
  log.add_writer([&](std::string_view l) { a += l; });
  log.add_writer([&](std::string_view l) { b += l; });
  log.emit("start");
  log.emit("end", {{"exit_status", 0LL}});
  EXPECT_EQ(a, b);
  EXPECT_EQ(std::count(a.begin(), a.end(), '\n'), 2);
}

TEST(Registry, ARecordIsPrivateAndReadsBackAsWritten) {
  StateHome home;
  const std::string jobs = jobs_dir(true);
  EXPECT_EQ(jobs, (home.dir / "dlaunch" / "jobs").string());
  struct stat st {};
  ASSERT_EQ(::stat(jobs.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ASSERT_EQ(::stat((home.dir / "dlaunch").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);

  const auto r = JobRecord::create(jobs, a_job("abc", 1000));
  EXPECT_EQ(r.name(), "abc");
  ASSERT_EQ(::stat(r.dir().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ASSERT_EQ(::stat((r.dir() + "/job.json").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  auto e = find_job(jobs, "abc");
  EXPECT_EQ(e.start.argv, a_job("abc", 1000).argv);
  EXPECT_EQ(e.start.cwd, "/work/a b");
  EXPECT_EQ(e.start.node_names, (std::vector<std::string>{"n1", "n2"}));
  EXPECT_EQ(e.state, "elsewhere");  // its head is on another machine
  EXPECT_FALSE(e.exit_status);

  r.finish(3, "job abc failed: rank 1 exited with status 3", 2);
  e = find_job(jobs, "last");
  EXPECT_EQ(e.state, "ended");
  EXPECT_EQ(e.exit_status, 3);
  EXPECT_EQ(e.attempts, 2);
  EXPECT_EQ(e.summary, "job abc failed: rank 1 exited with status 3");
  const YAML::Node j = YAML::Load(job_json(e));
  EXPECT_EQ(j["state"].as<std::string>(), "ended");
  EXPECT_EQ(j["exit_status"].as<int>(), 3);
  EXPECT_EQ(j["argv"][5].as<std::string>(), "--name=\"x\"\n");
}

TEST(Registry, AHeadThatIsGoneLeavesALostJobAndALiveOneARunningJob) {
  StateHome home;
  const std::string jobs = jobs_dir(true);
  auto mine = a_job("live", 2000);
  set_head_to_this_process(mine);
  ASSERT_NE(mine.head_start_ticks, 0u);
  JobRecord::create(jobs, mine);
  auto gone = mine;
  gone.id = "gone";
  gone.head_start_ticks += 1;  // the same pid, another process
  JobRecord::create(jobs, gone);
  EXPECT_EQ(find_job(jobs, "live").state, "running");
  EXPECT_EQ(find_job(jobs, "gone").state, "lost");
}

TEST(Registry, AnIdUsedAgainGetsANewRecordAndTheIdNamesTheNewest) {
  StateHome home;
  const std::string jobs = jobs_dir(true);
  EXPECT_EQ(JobRecord::create(jobs, a_job("same", 1000)).name(), "same");
  EXPECT_EQ(JobRecord::create(jobs, a_job("same", 2000)).name(), "same-2");
  EXPECT_EQ(find_job(jobs, "same").name, "same-2");
  EXPECT_EQ(find_job(jobs, "same-2").start.started_ms, 2000);
  EXPECT_EQ(find_job(jobs, "same-1").start.started_ms, 1000);
  EXPECT_THROW(find_job(jobs, "other"), Error);
  const auto all = list_jobs(jobs);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].name, "same-2");  // newest first
}

TEST(Registry, FoldersOthersMayUseAreRefused) {
  StateHome home;
  fs::create_directories(home.dir / "dlaunch");
  ::chmod((home.dir / "dlaunch").c_str(), 0755);
  try {
    jobs_dir(true);
    FAIL() << "a 0755 dlaunch folder was used";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has mode 755"), std::string::npos) << e.what();
  }
  ::chmod((home.dir / "dlaunch").c_str(), 0700);
  fs::create_symlink("/tmp", home.dir / "dlaunch" / "jobs");
  EXPECT_THROW(jobs_dir(true), Error);  // a link is not a folder of ours
}

TEST(Registry, PruningRemovesOldAndSurplusEndedRecordsNeverRunningOnes) {
  StateHome home;
  const std::string jobs = jobs_dir(true);
  const auto now = unix_now_ms();
  const std::int64_t day = 24LL * 3600 * 1000;
  JobRecord::create(jobs, a_job("old", now - (kKeepDays + 1) * day)).finish(0, "succeeded", 1);
  JobRecord::create(jobs, a_job("recent", now - day)).finish(0, "succeeded", 1);
  auto running = a_job("old-running", now - (kKeepDays + 5) * day);
  set_head_to_this_process(running);
  JobRecord::create(jobs, running);
  prune_jobs(jobs);
  std::vector<std::string> left;
  for (const auto& e : list_jobs(jobs)) left.push_back(e.name);
  EXPECT_EQ(left, (std::vector<std::string>{"recent", "old-running"}));
}

// A job's start prunes only when it is due (the last prune 10 minutes old,
// or the folder over its limit by the slack): a stream of short jobs does not
// read every record at each start.
TEST(Registry, AStartPrunesWhenTheLastPruneIsOldOrTheFolderIsOverItsLimit) {
  StateHome home;
  const std::string jobs = jobs_dir(true);
  const auto now = unix_now_ms();
  const std::int64_t day = 24LL * 3600 * 1000;
  const auto names = [&] {
    std::vector<std::string> out;
    for (const auto& e : list_jobs(jobs)) out.push_back(e.name);
    return out;
  };
  JobRecord::create(jobs, a_job("old1", now - (kKeepDays + 1) * day)).finish(0, "succeeded", 1);
  EXPECT_TRUE(prune_jobs_when_due(jobs));  // never pruned before
  EXPECT_TRUE(names().empty());
  JobRecord::create(jobs, a_job("old2", now - (kKeepDays + 1) * day)).finish(0, "succeeded", 1);
  EXPECT_FALSE(prune_jobs_when_due(jobs));  // pruned a moment ago
  EXPECT_EQ(names(), std::vector<std::string>{"old2"});
  // The last prune eleven minutes ago: due.
  const timespec eleven_minutes_ago{.tv_sec = ::time(nullptr) - 660, .tv_nsec = 0};
  const timespec times[2] = {eleven_minutes_ago, eleven_minutes_ago};
  ASSERT_EQ(::utimensat(AT_FDCWD, (jobs + "/.pruned").c_str(), times, 0), 0);
  EXPECT_TRUE(prune_jobs_when_due(jobs));
  EXPECT_TRUE(names().empty());
  // Just pruned, but more records than the limit and its slack: due.
  for (int k = 0; k < 4; ++k) {
    JobRecord::create(jobs, a_job("recent" + std::to_string(k), now - 1000 * (10 - k)))
        .finish(0, "succeeded", 1);
  }
  EXPECT_FALSE(prune_jobs_when_due(jobs, {.records = 2}, {.slack = 3}));  // 5 entries, 2 + 3
  EXPECT_TRUE(prune_jobs_when_due(jobs, {.records = 2}, {.slack = 2}));
  EXPECT_EQ(names(), (std::vector<std::string>{"recent3", "recent2"}));
}

// Ended records are pruned oldest first while they hold more than the size
// limit together; the newest ended one stays whatever its size, and a
// running job's record is never pruned.
TEST(Registry, PruningKeepsTheNewestEndedRecordsWithinTheSizeLimit) {
  StateHome home;
  const std::string jobs = jobs_dir(true);
  const auto now = unix_now_ms();
  const auto with_output = [&](const std::string& id, std::int64_t started, std::size_t bytes) {
    const JobRecord r = JobRecord::create(jobs, a_job(id, started));
    std::ofstream(r.dir() + "/big.log") << std::string(bytes, 'x');
    r.finish(0, "succeeded", 1);
  };
  with_output("oldest", now - 4000, 3000);
  with_output("older", now - 3000, 3000);
  with_output("newer", now - 2000, 3000);
  with_output("newest", now - 1000, 9000);  // alone over the limit: kept
  auto running = a_job("running", now - 5000);
  set_head_to_this_process(running);
  std::ofstream(JobRecord::create(jobs, running).dir() + "/big.log") << std::string(9000, 'x');
  prune_jobs(jobs, {.bytes = 16000});
  std::vector<std::string> left;
  for (const auto& e : list_jobs(jobs)) left.push_back(e.name);
  // newest (9000+) and newer (3000+) fit in 16000 with their job.json and
  // result.json; older would not.
  EXPECT_EQ(left, (std::vector<std::string>{"newest", "newer", "running"}));
  prune_jobs(jobs, {.bytes = 100});
  left.clear();
  for (const auto& e : list_jobs(jobs)) left.push_back(e.name);
  EXPECT_EQ(left, (std::vector<std::string>{"newest", "running"}));
}
