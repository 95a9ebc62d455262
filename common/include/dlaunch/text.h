// Text from input or from another host, made safe for the terminal before it
// is shown in a message: control bytes (a hostfile name with an escape
// sequence, a program name with a carriage return) must not reach the
// terminal raw, where they could rewrite or hide what the message says.
#pragma once

#include <string>
#include <string_view>

namespace dlaunch {

// C0 control bytes and DEL written as \n, \r, \t, \e or \xNN; a backslash
// stays as it is; everything else (UTF-8 too) passes.
std::string printable(std::string_view text);

// Whether `text` is a job id as --job-id and --rdzv-id take it (a file name
// under the state home): 1 to 64 ASCII letters, digits, '.', '_' or '-', and
// neither "." nor "..".
bool is_job_id(std::string_view text);

// Whether `name` is an environment variable's name as the shell takes it
// (-x, --env-file, --container-env, the hostfile's env:): ASCII letters,
// digits and '_', not empty, not starting with a digit.
bool is_env_name(std::string_view name);

}  // namespace dlaunch
