#include "output/output_sink.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "dlaunch/error.h"
#include "dlaunch/private_dir.h"
#include "dlaunch/process.h"
#include "hostfile/hostfile.h"
#include "output/console_style.h"

namespace dlaunch {

namespace {
constexpr std::size_t kMaxTailLine = 1024;  // a report line longer than this is cut
}

OutputSink::OutputSink(Config cfg)
    : cfg_(std::move(cfg)), console_(cfg_.stdout_fd, cfg_.stderr_fd) {
  if (!cfg_.mpirun_dir.empty()) open_mpirun_files();
  if (!cfg_.output_dir.empty()) {
    dir_ = (std::filesystem::path(cfg_.output_dir) / cfg_.job_id).string();
    std::error_code ec;
    std::filesystem::create_directories(cfg_.output_dir, ec);
    if (ec) {
      throw Error(ErrorKind::kEnvironment,
                  "cannot create output directory '" + cfg_.output_dir + "': " + ec.message());
    }
    // A folder others may write to (a shared /tmp/out) only if it is sticky:
    // else they could put something of theirs in the job folder's place.
    try {
      check_shared_base(cfg_.output_dir);
    } catch (const PrivateDirError& unsafe) {
      throw InputError({"--output-dir"}, "", unsafe.what(), "give a folder of your own");
    }
    // The job's own folder is new: a job with the same id and --output-dir
    // (or a folder someone else put there) is never written into.
    if (::mkdir(dir_.c_str(), 0755) != 0) {
      const int e = errno;
      if (e == EEXIST) {
        throw InputError({"--output-dir"}, "",
                         "'" + dir_ + "' exists already (a job with the same id?)",
                         "give another --job-id, or remove it");
      }
      throw Error(ErrorKind::kEnvironment,
                  "cannot create output directory '" + dir_ + "': " + std::strerror(e));
    }
    // Files are made relative to the folder just made (no path is looked up
    // again later), which must be ours.
    dir_fd_.reset(::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    struct stat st {};
    if (!dir_fd_ || ::fstat(dir_fd_.get(), &st) != 0 || st.st_uid != ::geteuid()) {
      throw Error(ErrorKind::kEnvironment,
                  "the output directory '" + dir_ + "' is not the one dlaunch just made");
    }
  }
}

namespace {

// A folder under parent_fd that is ours: made if missing (mpirun writes
// into the one of an earlier run), never a link, owned by this user.
UniqueFd own_folder(int parent_fd, const std::string& name, const std::string& path) {
  if (::mkdirat(parent_fd, name.c_str(), 0755) != 0 && errno != EEXIST) {
    throw Error(ErrorKind::kEnvironment,
                "cannot create output directory '" + path + "': " + std::strerror(errno));
  }
  UniqueFd fd(::openat(parent_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  struct stat st {};
  if (!fd || ::fstat(fd.get(), &st) != 0 || st.st_uid != ::geteuid()) {
    throw InputError({"--output-filename"}, "",
                     "'" + path + "' is not a folder of this user's (a link, or someone else's)",
                     "remove it, or give another folder");
  }
  return fd;
}

// A private folder (0700) `name` under parent_fd for the job's record: made
// if missing, never a link, this user's; else none (errno says why, where
// the system said).
UniqueFd private_folder_at(int parent_fd, const char* name) {
  if (parent_fd < 0 || (::mkdirat(parent_fd, name, 0700) != 0 && errno != EEXIST)) return {};
  UniqueFd fd(::openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  struct stat st {};
  if (!fd || ::fstat(fd.get(), &st) != 0) return {};
  if (st.st_uid != ::geteuid()) {
    errno = EPERM;
    return {};
  }
  return fd;
}

}  // namespace

void OutputSink::open_mpirun_files() {
  std::error_code ec;
  std::filesystem::create_directories(cfg_.mpirun_dir, ec);
  if (ec) {
    throw Error(ErrorKind::kEnvironment,
                "cannot create output directory '" + cfg_.mpirun_dir + "': " + ec.message());
  }
  try {
    check_shared_base(cfg_.mpirun_dir);
  } catch (const PrivateDirError& unsafe) {
    throw InputError({"--output-filename"}, "", unsafe.what(), "give a folder of your own");
  }
  const UniqueFd top(
      ::open(cfg_.mpirun_dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!top) {
    throw Error(ErrorKind::kEnvironment,
                "cannot open output directory '" + cfg_.mpirun_dir + "': " + std::strerror(errno));
  }
  // mpirun's job number: 1 for the first (here, only) job it starts.
  const std::string base_path = cfg_.mpirun_dir + (cfg_.mpirun_jobid ? "/1" : "");
  UniqueFd base_own = cfg_.mpirun_jobid ? own_folder(top.get(), "1", base_path) : UniqueFd();
  const int base = cfg_.mpirun_jobid ? base_own.get() : top.get();
  const std::size_t world = cfg_.node_of_rank.size();
  const std::size_t digits = std::to_string(world).size();
  for (std::size_t r = 0; r < world; ++r) {
    std::string n = std::to_string(r);
    const std::string folder = "rank." + std::string(digits - std::min(digits, n.size()), '0') + n;
    const std::string folder_path = base_path + "/" + folder;
    const UniqueFd dir = own_folder(base, folder, folder_path);
    for (const int stream : {1, 2}) {
      const char* name = stream == 1 ? "stdout" : "stderr";
      // Emptied as mpirun does (O_TRUNC), without following a link put there.
      if (::unlinkat(dir.get(), name, 0) != 0 && errno != ENOENT) {
        throw Error(ErrorKind::kEnvironment,
                    "cannot replace '" + folder_path + "/" + name + "': " + std::strerror(errno));
      }
      if (stream == 2 && cfg_.merge_stderr) continue;
      const UniqueFd fd(
          ::openat(dir.get(), name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
      if (!fd) {
        throw Error(ErrorKind::kEnvironment,
                    "cannot create '" + folder_path + "/" + name + "': " + std::strerror(errno));
      }
      files_.emplace(std::make_pair(static_cast<int>(r), stream),
                     console_.add_open_file(fd.get(), folder_path + "/" + name));
    }
  }
}

std::string OutputSink::prefix(int rank) const {
  switch (cfg_.prefix) {
    case PrefixMode::kNone:
      return {};
    case PrefixMode::kHostRank: {
      const auto r = static_cast<std::size_t>(rank);
      const std::string node = r < cfg_.node_of_rank.size() ? cfg_.node_of_rank[r] : "?";
      return "[" + node + ":" + std::to_string(rank) + "] ";
    }
    case PrefixMode::kRank:
      break;
  }
  return std::string("[").append(std::to_string(rank)).append("] ");
}

void OutputSink::keep_rank_logs(const std::string& record_dir, std::size_t rank_bytes) {
  if (rank_bytes == 0) return;
  const std::string dir = record_dir + "/output";
  const UniqueFd record(
      ::open(record_dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  UniqueFd fd = private_folder_at(record.get(), "output");
  if (!fd) {
    write_all(2, "dlaunch: the ranks' output is not kept in the job's record: cannot make " + dir +
                     ": " + std::strerror(errno) + "\n");
    return;
  }
  logs_dir_ = dir;
  logs_fd_ = std::move(fd);
  rank_log_bytes_ = rank_bytes;
}

void OutputSink::keep_record(const std::string& record_dir) {
  UniqueFd fd(::open(record_dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  struct stat st {};
  if (fd && ::fstat(fd.get(), &st) == 0 && st.st_uid == ::geteuid()) {
    record_fd_ = std::move(fd);
    record_dir_ = record_dir;
  }
}

bool OutputSink::write_record_file(const std::string& name, std::string_view text) {
  if (!record_fd_) return false;
  const std::string part = "." + name + ".part";
  const auto t = console_.add_file(record_fd_.get(), part, part, 0600);
  console_.write_file(t, text);
  console_.publish_file(t, name);
  return true;
}

void OutputSink::start_attempt(int attempt, bool continued) {
  // The last attempt's files are done: closed once written, so that a job
  // that restarts holds one file per rank, not one per rank and attempt.
  for (const auto& [rank, log] : rank_logs_) console_.close_file(log.target);
  rank_logs_.clear();
  attempt_ = -1;
  if (!logs_fd_) return;
  const std::string name = std::to_string(attempt);
  UniqueFd fd = private_folder_at(logs_fd_.get(), name.c_str());
  if (!fd) {
    write_all(2, "dlaunch: the ranks' output of attempt " + name +
                     " is not kept in the job's record: cannot make " + logs_dir_ + "/" + name +
                     "\n");
    return;
  }
  if (continued) {
    // The FileWriter makes each file afresh (O_EXCL): the last head's go aside.
    if (DIR* d = ::fdopendir(::dup(fd.get())); d != nullptr) {
      std::vector<std::string> names;
      while (const dirent* e = ::readdir(d)) {
        const std::string n = e->d_name;
        if (n.starts_with("rank-") && n.ends_with(".log")) names.push_back(n);
      }
      ::closedir(d);
      for (const auto& n : names)
        (void)::renameat(fd.get(), n.c_str(), fd.get(), (n + ".1").c_str());
    }
  }
  attempt_fds_.push_back(std::move(fd));
  attempt_ = attempt;
}

std::string OutputSink::rank_log(int rank) const {
  if (attempt_ < 0 || rank_logs_.count(rank) == 0) return {};  // (made at its first byte)
  return logs_dir_ + "/" + std::to_string(attempt_) + "/rank-" + std::to_string(rank) + ".log";
}

void OutputSink::keep_rank_output(int rank, std::string_view data) {
  auto it = rank_logs_.find(rank);
  if (it == rank_logs_.end()) {
    const std::string name = "rank-" + std::to_string(rank) + ".log";
    const std::string path = logs_dir_ + "/" + std::to_string(attempt_) + "/" + name;
    it = rank_logs_
             .emplace(rank, RankLog{.target = console_.add_file(attempt_fds_.back().get(), name,
                                                                path, 0600)})
             .first;
  }
  RankLog& log = it->second;
  // Two files of half the budget each: the newest output always whole.
  const std::size_t half = std::max<std::size_t>(rank_log_bytes_ / 2, 1);
  if (log.bytes > 0 && log.bytes + data.size() > half) {
    console_.rotate_file(log.target);
    log.bytes = 0;
  }
  console_.write_file(log.target, data);
  log.bytes += data.size();
}

void OutputSink::write(int rank, proto::Stream stream, std::string_view data, bool partial) {
  if (data.empty()) return;
  if (attempt_ >= 0) keep_rank_output(rank, data);
  // The report's tail keeps a rank's own stderr, merged or not.
  const bool own_err = stream == proto::Stream::kStderr;
  const bool is_err = own_err && !cfg_.merge_stderr;
  if (!cfg_.mpirun_dir.empty()) {
    const auto it = files_.find(std::make_pair(rank, is_err ? 2 : 1));
    if (it != files_.end()) console_.write_file(it->second, data);
  }
  if (!dir_.empty()) {
    // Created and written by the console's FileWriter, off the loop: an
    // --output-dir on a disk that stops answering does not stop dlaunch.
    auto key = std::make_pair(rank, is_err ? 2 : 1);
    auto it = files_.find(key);
    if (it == files_.end()) {
      const std::string name = "rank." + std::to_string(rank) + (is_err ? ".err" : ".out");
      it = files_.emplace(key, console_.add_file(dir_fd_.get(), name, output_path(name), 0644))
               .first;
    }
    console_.write_file(it->second, data);
  }

  bool shown = cfg_.console && (cfg_.ranks.empty() ||
                                std::binary_search(cfg_.ranks.begin(), cfg_.ranks.end(), rank));
  if (const auto r = cfg_.redirected.find(rank); r != cfg_.redirected.end())
    shown = shown && (r->second & (is_err ? 2 : 1)) == 0;
  // --no-prefix: the console gets a rank's bytes as it wrote them (a line
  // longer than the agent's 64 KiB piece stays one line; no newline is added
  // at the end), like the per-rank files.
  if (cfg_.prefix == PrefixMode::kNone && !cfg_.timestamps) {
    if (shown) console_.write(is_err, data);
    if (own_err) remember_tail(rank, data, partial);
    return;
  }
  const bool color = is_err ? cfg_.color_stderr : cfg_.color_stdout;
  // One prefixed line per '\n'; a partial piece is ended with a newline so the
  // next line from another rank starts clean.
  std::string pre;
  if (cfg_.timestamps) {
    const std::string ts = format_timestamp(std::chrono::system_clock::now());
    pre = color ? std::string(kColorDim) + ts.substr(0, ts.size() - 1) + std::string(kColorReset) +
                      " "
                : ts;
  }
  const std::string tag = prefix(rank);
  if (color && !tag.empty()) {
    pre += std::string(rank_color(rank)) + tag.substr(0, tag.size() - 1) +
           std::string(kColorReset) + " ";
  } else {
    pre += tag;
  }
  batch_.clear();
  batch_.reserve(data.size() + (pre.size() + 1) * 16);
  auto* tail = own_err ? &tails_[rank] : nullptr;
  std::size_t pos = 0;
  while (pos < data.size()) {
    auto nl = data.find('\n', pos);
    const bool has_nl = nl != std::string_view::npos;
    auto line = data.substr(pos, has_nl ? nl - pos : std::string_view::npos);
    if (shown) {
      batch_ += pre;
      batch_ += line;
      batch_ += '\n';
    }
    if (tail != nullptr) {
      tail->emplace_back(line.substr(0, kMaxTailLine));
      if (tail->size() > cfg_.tail_lines) tail->pop_front();
    }
    pos = has_nl ? nl + 1 : data.size();
  }
  (void)partial;
  if (!batch_.empty()) console_.write(is_err, batch_);
}

std::optional<FileWriter::Target> OutputSink::add_job_file(const std::string& name, mode_t mode) {
  if (!dir_fd_) return std::nullopt;
  return console_.add_file(dir_fd_.get(), name, output_path(name), mode);
}

// The report's last lines of a rank's stderr, for data that was passed
// through unprefixed: a piece without a newline continues the last line.
void OutputSink::remember_tail(int rank, std::string_view data, bool partial) {
  auto& tail = tails_[rank];
  bool& open = tail_open_[rank];
  std::size_t pos = 0;
  while (pos < data.size()) {
    const auto nl = data.find('\n', pos);
    const auto piece =
        data.substr(pos, nl == std::string_view::npos ? data.size() - pos : nl - pos);
    if (open && !tail.empty()) {
      auto& last = tail.back();
      last.append(piece.substr(0, kMaxTailLine - std::min(kMaxTailLine, last.size())));
    } else {
      tail.emplace_back(piece.substr(0, kMaxTailLine));
      if (tail.size() > cfg_.tail_lines) tail.pop_front();
    }
    open = nl == std::string_view::npos;
    pos = nl == std::string_view::npos ? data.size() : nl + 1;
  }
  (void)partial;
}

std::vector<std::string> OutputSink::stderr_tail(int rank) const {
  auto it = tails_.find(rank);
  if (it == tails_.end()) return {};
  return {it->second.begin(), it->second.end()};
}

}  // namespace dlaunch
