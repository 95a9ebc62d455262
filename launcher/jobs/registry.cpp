#include "jobs/registry.h"

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "dlaunch/error.h"
#include "dlaunch/proc_stat.h"
#include "dlaunch/process.h"
#include "dlaunch/unique_fd.h"
#include "jobs/events.h"

namespace dlaunch {

namespace fs = std::filesystem;

namespace {

Error env_error(const std::string& msg) { return {ErrorKind::kEnvironment, msg}; }

std::string home_dir() {
  if (const char* h = std::getenv("HOME"); h != nullptr && h[0] == '/') return h;
  if (const passwd* pw = ::getpwuid(::geteuid()); pw != nullptr && pw->pw_dir != nullptr) {
    return pw->pw_dir;
  }
  throw env_error("no home folder for the job registry ($HOME is unset and uid " +
                  std::to_string(::geteuid()) + " has no passwd entry)");
}

// Makes `path` (0700) unless it is there, then checks it is a folder of ours
// that nobody else may write to or read.
void private_folder(const std::string& path, bool create) {
  if (create && ::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
    throw env_error(fmt::format("cannot make '{}': {}", path, std::strerror(errno)));
  }
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (!create && errno == ENOENT) return;  // no jobs yet: nothing to read
    throw env_error(fmt::format("cannot use '{}': {}", path, std::strerror(errno)));
  }
  if (!S_ISDIR(st.st_mode)) throw env_error(fmt::format("'{}' is not a folder", path));
  if (st.st_uid != ::geteuid()) {
    throw env_error(
        fmt::format("'{}' belongs to uid {}, not to this user ({})", path, st.st_uid, ::geteuid()));
  }
  if ((st.st_mode & 077) != 0) {
    throw env_error(fmt::format("'{}' has mode {:o}: group and others may use it (chmod 700 it)",
                                path, st.st_mode & 0777));
  }
}

// Writes `text` to dir/name whole: a temporary file of ours renamed over it.
void write_whole(const std::string& dir, const std::string& name, const std::string& text) {
  const std::string tmp = dir + "/." + name + ".tmp";
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd) throw env_error(fmt::format("cannot write '{}': {}", tmp, std::strerror(errno)));
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd.get(), text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw env_error(fmt::format("cannot write '{}': {}", tmp, std::strerror(errno)));
    done += static_cast<std::size_t>(n);
  }
  fd.reset();
  if (::rename(tmp.c_str(), (dir + "/" + name).c_str()) != 0) {
    throw env_error(fmt::format("cannot write '{}/{}': {}", dir, name, std::strerror(errno)));
  }
}

std::string start_json(const JobStart& s) {
  std::string argv;
  for (const auto& a : s.argv) argv += (argv.empty() ? "" : ",") + json_quote(a);
  std::string names;
  for (const auto& n : s.node_names) names += (names.empty() ? "" : ",") + json_quote(n);
  return fmt::format(
      "{{\"v\":{},\"id\":{},\"argv\":[{}],\"cwd\":{},\"head_host\":{},\"head_pid\":{},"
      "\"head_start_ticks\":{},\"nodes\":{},\"ranks\":{},\"node_names\":[{}],"
      "\"started\":\"{}\",\"started_ms\":{}}}\n",
      kEventSchemaVersion, json_quote(s.id), argv, json_quote(s.cwd), json_quote(s.head_host),
      s.head_pid, s.head_start_ticks, s.nodes, s.ranks, names, rfc3339_ms(s.started_ms),
      s.started_ms);
}

std::optional<JobEntry> read_entry(const fs::path& dir) {
  JobEntry e;
  e.name = dir.filename().string();
  e.dir = dir.string();
  try {
    const YAML::Node j = YAML::LoadFile((dir / "job.json").string());
    e.start.id = j["id"].as<std::string>();
    for (const auto& a : j["argv"]) e.start.argv.push_back(a.as<std::string>());
    e.start.cwd = j["cwd"].as<std::string>("");
    e.start.head_host = j["head_host"].as<std::string>("");
    e.start.head_pid = j["head_pid"].as<long>(0);
    e.start.head_start_ticks = j["head_start_ticks"].as<unsigned long long>(0);
    e.start.nodes = j["nodes"].as<int>(0);
    e.start.ranks = j["ranks"].as<int>(0);
    for (const auto& n : j["node_names"]) e.start.node_names.push_back(n.as<std::string>());
    e.start.started_ms = j["started_ms"].as<std::int64_t>(0);
  } catch (const YAML::Exception&) {
    return std::nullopt;  // not a record (or one being written)
  }
  std::error_code ec;
  if (fs::exists(dir / "result.json", ec)) {
    try {
      const YAML::Node r = YAML::LoadFile((dir / "result.json").string());
      e.exit_status = r["exit_status"].as<int>();
      e.ended_ms = r["ended_ms"].as<std::int64_t>(0);
      e.summary = r["summary"].as<std::string>("");
      e.attempts = r["attempts"].as<int>(1);
      e.state = "ended";
      return e;
    } catch (const YAML::Exception&) {
      // a result being written: judged by the head below
    }
  }
  const bool here = e.start.head_host == host_name();
  if (!here) {
    e.state = "elsewhere";  // a head on another machine (a shared home)
  } else if (e.start.head_pid > 0 &&
             process_start_ticks(e.start.head_pid) == e.start.head_start_ticks &&
             process_cpu(e.start.head_pid).value_or(ProcessCpu{.state = 'Z'}).state != 'Z') {
    // (A head killed whose parent has not reaped it yet is a zombie: gone.)
    e.state = "running";
  } else {
    e.state = "lost";
  }
  return e;
}

}  // namespace

void set_head_to_this_process(JobStart& start) {
  start.head_host = host_name();
  start.head_pid = static_cast<long>(::getpid());
  start.head_start_ticks = process_start_ticks(start.head_pid);
}

std::string jobs_dir(bool create) {
  std::string state;
  if (const char* x = std::getenv("XDG_STATE_HOME"); x != nullptr && x[0] == '/') {
    state = x;
  } else {
    state = home_dir() + "/.local/state";
  }
  if (create) {
    // The parents are the user's own business (made as mkdir -p would);
    // the two folders of dlaunch's are checked.
    std::error_code ec;
    fs::create_directories(state, ec);
    if (ec) throw env_error(fmt::format("cannot make '{}': {}", state, ec.message()));
  }
  const std::string top = state + "/dlaunch";
  private_folder(top, create);
  std::string jobs = top + "/jobs";
  private_folder(jobs, create);
  return jobs;
}

JobRecord JobRecord::create(const std::string& jobs_dir, const JobStart& start) {
  JobRecord r;
  for (int k = 1;; ++k) {
    r.name_ = k == 1 ? start.id : fmt::format("{}-{}", start.id, k);
    r.dir_ = jobs_dir + "/" + r.name_;
    if (::mkdir(r.dir_.c_str(), 0700) == 0) break;
    if (errno != EEXIST || k >= 1000) {
      throw env_error(fmt::format("cannot make '{}': {}", r.dir_, std::strerror(errno)));
    }
  }
  write_whole(r.dir_, "job.json", start_json(start));
  return r;
}

JobRecord JobRecord::reopen(const JobEntry& entry, const JobStart& start) {
  JobRecord r;
  r.dir_ = entry.dir;
  r.name_ = entry.name;
  write_whole(r.dir_, "job.json", start_json(start));
  return r;
}

void JobRecord::write_takeover(const Takeover& t) const {
  std::string hosts;
  for (const auto& h : t.hosts) hosts += (hosts.empty() ? "" : ",") + json_quote(h);
  write_whole(dir_, "takeover.json",
              fmt::format("{{\"v\":{},\"secret\":{},\"attempt\":{},\"restarts\":{},"
                          "\"hosts\":[{}],\"started_ms\":{}}}\n",
                          kEventSchemaVersion, json_quote(t.secret), t.attempt, t.restarts, hosts,
                          t.started_ms));
}

std::optional<Takeover> read_takeover(const std::string& record_dir) {
  const std::string path = record_dir + "/takeover.json";
  struct stat st {};
  // Ours alone: a secret another user could have read or written is none.
  if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid() ||
      (st.st_mode & 077) != 0) {
    return std::nullopt;
  }
  try {
    const YAML::Node j = YAML::LoadFile(path);
    Takeover t;
    t.secret = j["secret"].as<std::string>();
    t.attempt = j["attempt"].as<int>(0);
    t.restarts = j["restarts"].as<int>(0);
    for (const auto& h : j["hosts"]) t.hosts.push_back(h.as<std::string>());
    t.started_ms = j["started_ms"].as<std::int64_t>(0);
    if (t.secret.empty() || t.hosts.empty()) return std::nullopt;
    return t;
  } catch (const YAML::Exception&) {
    return std::nullopt;
  }
}

void JobRecord::finish(int exit_status, const std::string& summary, int attempts) const {
  const auto now = unix_now_ms();
  write_whole(dir_, "result.json",
              fmt::format("{{\"v\":{},\"exit_status\":{},\"summary\":{},\"attempts\":{},"
                          "\"ended\":\"{}\",\"ended_ms\":{}}}\n",
                          kEventSchemaVersion, exit_status, json_quote(summary), attempts,
                          rfc3339_ms(now), now));
}

std::vector<JobEntry> list_jobs(const std::string& jobs_dir) {
  std::vector<JobEntry> out;
  std::error_code ec;
  for (const auto& d : fs::directory_iterator(jobs_dir, ec)) {
    if (!d.is_directory(ec) || d.is_symlink(ec)) continue;
    if (auto e = read_entry(d.path())) out.push_back(std::move(*e));
  }
  std::sort(out.begin(), out.end(), [](const JobEntry& a, const JobEntry& b) {
    if (a.start.started_ms != b.start.started_ms) return a.start.started_ms > b.start.started_ms;
    return a.name > b.name;
  });
  return out;
}

JobEntry find_job(const std::string& jobs_dir, const std::string& name) {
  const auto all = list_jobs(jobs_dir);
  if (name == "last") {
    if (all.empty()) throw Error(ErrorKind::kInput, "no jobs in " + jobs_dir);
    return all.front();
  }
  // An id names its newest record; an older one of a reused id goes by its
  // own name (<id>-2, ...), the first of them by <id>-1.
  for (const auto& e : all) {
    if (e.start.id == name) return e;  // newest first
  }
  for (const auto& e : all) {
    if (e.name == name) return e;
  }
  if (name.size() > 2 && name.compare(name.size() - 2, 2, "-1") == 0) {
    const std::string first = name.substr(0, name.size() - 2);
    for (const auto& e : all) {
      if (e.name == first) return e;
    }
  }
  throw Error(ErrorKind::kInput,
              fmt::format("no job '{}' in {} (dlaunch ps --all lists them)", name, jobs_dir));
}

namespace {

// The bytes a record's files hold (what is still there of them).
std::uint64_t record_bytes(const std::string& dir) {
  std::uint64_t total = 0;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec),
       end;
       it != end; it.increment(ec)) {
    if (ec) break;
    std::error_code size_ec;
    if (it->is_regular_file(size_ec) && !it->is_symlink(size_ec)) {
      const auto n = it->file_size(size_ec);
      if (!size_ec) total += n;
    }
  }
  return total;
}

}  // namespace

void prune_jobs(const std::string& jobs_dir, const KeepLimits& keep) {
  const auto all = list_jobs(jobs_dir);  // newest first
  const auto cutoff = unix_now_ms() - std::int64_t{keep.days} * 24 * 3600 * 1000;
  std::size_t kept = 0;
  std::uint64_t bytes = 0;
  for (const auto& e : all) {
    const bool done = e.state == "ended" || e.state == "lost";
    if (!done) continue;
    ++kept;
    const std::uint64_t size = record_bytes(e.dir);
    // The newest ended record stays whatever its size: the one a user looks
    // at next.
    const bool over_size = kept > 1 && bytes + size > keep.bytes;
    if (kept > keep.records || e.start.started_ms < cutoff || over_size) {
      std::error_code ec;
      fs::remove_all(e.dir, ec);
      continue;
    }
    bytes += size;
  }
}

bool prune_jobs_when_due(const std::string& jobs_dir, const KeepLimits& keep,
                         const PruneCadence& cadence) {
  const std::string stamp = jobs_dir + "/.pruned";
  struct stat st {};
  bool due =
      ::lstat(stamp.c_str(), &st) != 0 || !S_ISREG(st.st_mode) ||
      std::chrono::system_clock::now() - std::chrono::system_clock::from_time_t(st.st_mtime) >=
          cadence.every;
  if (!due) {
    std::size_t entries = 0;
    std::error_code ec;
    for (fs::directory_iterator it(jobs_dir, ec), end; !ec && it != end; it.increment(ec)) {
      ++entries;
    }
    due = entries > keep.records + cadence.slack;
  }
  if (!due) return false;
  // The stamp first: a start that comes meanwhile does not prune as well.
  // In the user's own folder (0700); never through a link.
  const int fd =
      ::open(stamp.c_str(), O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0600);
  if (fd >= 0) {
    ::futimens(fd, nullptr);
    ::close(fd);
  }
  prune_jobs(jobs_dir, keep);
  return true;
}

std::string job_json(const JobEntry& e) {
  std::string argv;
  for (const auto& a : e.start.argv) argv += (argv.empty() ? "" : ",") + json_quote(a);
  std::string out = fmt::format(
      "{{\"name\":{},\"id\":{},\"state\":{},\"argv\":[{}],\"cwd\":{},\"head_host\":{},"
      "\"head_pid\":{},\"nodes\":{},\"ranks\":{},\"started\":\"{}\"",
      json_quote(e.name), json_quote(e.start.id), json_quote(e.state), argv,
      json_quote(e.start.cwd), json_quote(e.start.head_host), e.start.head_pid, e.start.nodes,
      e.start.ranks, rfc3339_ms(e.start.started_ms));
  if (e.exit_status) {
    out += fmt::format(",\"exit_status\":{},\"summary\":{},\"attempts\":{},\"ended\":\"{}\"",
                       *e.exit_status, json_quote(e.summary), e.attempts, rfc3339_ms(e.ended_ms));
  }
  out += fmt::format(",\"record\":{}}}", json_quote(e.dir));
  return out;
}

}  // namespace dlaunch
