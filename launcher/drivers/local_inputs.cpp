#include "drivers/local_inputs.h"

#include <unistd.h>

#include <filesystem>

#include "dlaunch/process.h"

namespace dlaunch {

void require_agent_here(const std::string& agent, const SourcePos& pos, const std::string& field) {
  if (::access(agent.c_str(), X_OK) == 0) return;
  throw InputError(pos, field, "dlaunch-agent not found at '" + agent + "'",
                   "build it next to dlaunch or give its path with --agent");
}

void require_directory_here(const std::string& dir, const SourcePos& pos,
                            const std::string& field) {
  if (std::filesystem::is_directory(dir)) return;
  throw InputError(pos, field, "'" + dir + "' is not a directory");
}

void require_program_here(const std::string& program, const std::vector<std::string>& env,
                          const std::string& dir, const SourcePos& pos) {
  if (!find_program(program, env, dir).empty()) return;
  throw InputError(pos, "", "program '" + program + "' not found or not executable",
                   "give a path, or put it on PATH");
}

}  // namespace dlaunch
