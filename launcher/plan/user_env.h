// Variables the user adds for every worker on the command line, in this
// order (a later one overrides an earlier one with the same name):
//   --env-file FILE   KEY=VALUE lines (repeatable, files in the order given)
//   -x NAME=VALUE     this value
//   -x NAME           the value NAME has in dlaunch's environment (mpirun's -x)
// Pure functions; errors are InputError naming the file and line, or -x.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "hostfile/hostfile.h"

namespace dlaunch {

// One KEY=VALUE per line. Blank lines and lines starting with '#' (after
// spaces) are skipped; a leading `export ` is allowed; the value is the rest
// of the line, taken literally, except that one pair of matching quotes
// around all of it ('...' or "...") is removed. source names the file in errors.
EnvList parse_env_file_text(std::string_view text, const std::string& source);
// Reads path; a missing or unreadable file is an InputError.
EnvList parse_env_file(const std::string& path);

// DeepSpeed's .deepspeed_env: NAME=VALUE lines, the name and the value with
// the blanks around them taken off (as DeepSpeed does); otherwise the rules
// of parse_env_file_text (comments, quotes). Errors name the file and line.
EnvList parse_deepspeed_env_text(std::string_view text, const std::string& source);
EnvList parse_deepspeed_env(const std::string& path);

// -x arguments resolved against head_env ("NAME=VALUE" entries).
EnvList resolve_exports(const std::vector<std::string>& exports,
                        const std::vector<std::string>& head_env);

// MASTER_PORT as the user set it for the workers (-x MASTER_PORT=N, an env
// file), which dlaunch then uses as the job's MASTER_PORT instead of
// choosing one: 0 when not set; InputError when it is no port.
int pinned_master_port(const EnvList& user_env);

// Env files, then -x: what PlanOptions::user_env gets.
EnvList user_environment(const std::vector<std::string>& env_files,
                         const std::vector<std::string>& exports,
                         const std::vector<std::string>& head_env);

}  // namespace dlaunch
