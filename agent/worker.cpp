#include "worker.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <unordered_map>

#include "dlaunch/tunables.h"
#include "dlaunch/unique_fd.h"

namespace dlaunch::agent {

namespace {
constexpr std::string_view kErrorFileVar = "TORCHELASTIC_ERROR_FILE=";
}

std::string ensure_error_file(std::vector<std::string>& env, const std::string& dir, int rank) {
  for (const auto& e : env) {
    if (e.size() > kErrorFileVar.size() && e.compare(0, kErrorFileVar.size(), kErrorFileVar) == 0)
      return e.substr(kErrorFileVar.size());
  }
  if (dir.empty()) return {};
  std::string path = dir + "/error." + std::to_string(rank) + ".json";
  // An empty value is as good as unset: replace it.
  std::erase_if(env, [](const std::string& e) { return e == kErrorFileVar; });
  env.push_back(std::string(kErrorFileVar) + path);
  return path;
}

std::string read_error_file(const std::string& path, std::chrono::system_clock::time_point since,
                            std::size_t max_bytes) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  struct stat st {};
  if (!fd || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) return {};
  // File times come from a coarse clock: allow some slack.
  const auto mtime = std::chrono::system_clock::time_point(
      std::chrono::duration_cast<std::chrono::system_clock::duration>(
          std::chrono::seconds(st.st_mtim.tv_sec) + std::chrono::nanoseconds(st.st_mtim.tv_nsec)));
  if (mtime + timing::kErrorFileSlack < since) return {};
  std::string data(max_bytes, '\0');
  std::size_t got = 0;
  while (got < max_bytes) {
    const ssize_t n = ::read(fd.get(), data.data() + got, max_bytes - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  data.resize(got);
  return data;
}

std::vector<std::string> worker_environment(const std::vector<std::string>& base,
                                            const proto::Env& worker_env,
                                            const proto::Env& start_env,
                                            const std::string& token_entry) {
  std::vector<std::string> out;
  std::unordered_map<std::string, std::size_t> index;  // name -> position in out
  auto put = [&](std::string name, std::string entry) {
    auto [it, fresh] = index.try_emplace(std::move(name), out.size());
    if (fresh) {
      out.push_back(std::move(entry));
    } else {
      out[it->second] = std::move(entry);
    }
  };
  for (const auto& e : base) {
    auto eq = e.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    put(e.substr(0, eq), e);
  }
  for (const auto* env : {&worker_env, &start_env}) {
    for (const auto& [k, v] : *env) put(k, k + "=" + v);
  }
  auto eq = token_entry.find('=');
  put(token_entry.substr(0, eq), token_entry);
  return out;
}

}  // namespace dlaunch::agent
