#include "agent/worker.h"

#include <unordered_map>

namespace dlaunch::agent {

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
