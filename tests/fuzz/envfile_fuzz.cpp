// Fuzzes the env-file parser (--env-file, launcher/plan/user_env.h).
//
// Input: the file's text. parse_env_file_text must either throw InputError
// (naming the file and a line within it) or return variables that an
// environment can hold: valid names, no NUL in a value, every NAME=VALUE
// shorter than Linux's limit for one string. Anything else (another
// exception, a crash, a sanitizer report) is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "dlaunch/text.h"
#include "dlaunch/tunables.h"
#include "plan/user_env.h"

namespace {

[[noreturn]] void broken(const char* what, const std::string& detail) {
  std::fprintf(stderr, "envfile_fuzz: contract broken: %s: %s\n", what, detail.c_str());
  std::abort();
}

int lines_of(std::string_view text) {
  int n = 1;
  for (char c : text) n += c == '\n' ? 1 : 0;
  return n;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const auto env = dlaunch::parse_env_file_text(text, "fuzz.env");
    for (const auto& [name, value] : env) {
      if (!dlaunch::is_env_name(name)) broken("invalid name accepted", name);
      if (value.find('\0') != std::string::npos) broken("NUL in a value accepted", name);
      if (name.size() + 1 + value.size() >= dlaunch::limits::kMaxArgStringBytes)
        broken("a variable over MAX_ARG_STRLEN accepted", name);
    }
  } catch (const dlaunch::InputError& e) {
    if (e.pos().source != "fuzz.env") broken("error names another source", e.what());
    if (e.pos().line < 1 || e.pos().line > lines_of(text))
      broken("error line outside the file", e.what());
  }
  return 0;
}
