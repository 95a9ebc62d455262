#include "comm/worker_env.h"

#include <charconv>
#include <cstdlib>
#include <optional>

namespace dlaunch::comm {
namespace {

std::optional<std::string> get(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return std::nullopt;
  return std::string(v);
}

int to_int(const char* name, const std::string& text, int min, int max) {
  int value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) {
    throw EnvError(name, "'" + text + "' is not an integer");
  }
  if (value < min || value > max) {
    throw EnvError(name, std::to_string(value) + " is out of range [" + std::to_string(min) + ", " +
                             std::to_string(max) + "]");
  }
  return value;
}

int required_int(const char* name, int min, int max) {
  auto v = get(name);
  if (!v) throw EnvError(name, "not set (is this process started by dlaunch or torchrun?)");
  return to_int(name, *v, min, max);
}

int optional_int(const char* name, const char* fallback_name, int fallback, int min, int max) {
  if (auto v = get(name)) return to_int(name, *v, min, max);
  if (auto v = get(fallback_name)) return to_int(fallback_name, *v, min, max);
  return fallback;
}

}  // namespace

WorkerEnv WorkerEnv::from_env() {
  constexpr int kMax = 1 << 24;
  WorkerEnv e;
  e.world_size = required_int("WORLD_SIZE", 1, kMax);
  e.rank = required_int("RANK", 0, e.world_size - 1);
  e.local_rank = required_int("LOCAL_RANK", 0, e.world_size - 1);
  e.local_world_size =
      optional_int("LOCAL_WORLD_SIZE", "LOCAL_SIZE", e.world_size, 1, e.world_size);
  if (e.local_rank >= e.local_world_size) {
    throw EnvError("LOCAL_RANK", std::to_string(e.local_rank) + " is not below LOCAL_WORLD_SIZE " +
                                     std::to_string(e.local_world_size));
  }
  e.num_nodes = optional_int("NNODES", "GROUP_WORLD_SIZE", 1, 1, kMax);
  e.node_rank = optional_int("NODE_RANK", "GROUP_RANK", 0, 0, e.num_nodes - 1);
  auto addr = get("MASTER_ADDR");
  if (!addr || addr->empty()) throw EnvError("MASTER_ADDR", "not set");
  e.master_addr = *addr;
  e.master_port = required_int("MASTER_PORT", 1, 65535);
  e.job_id = get("DLAUNCH_JOB_ID").value_or(get("TORCHELASTIC_RUN_ID").value_or(""));
  return e;
}

}  // namespace dlaunch::comm
