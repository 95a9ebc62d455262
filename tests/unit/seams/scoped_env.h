// Sets environment variables for one test and puts the old values back (or
// unsets those that were not set) when it goes out of scope.
#pragma once

#include <cstdlib>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace dltest {

class ScopedEnv {
 public:
  ScopedEnv(std::initializer_list<std::pair<std::string, std::string>> vars) {
    for (const auto& [k, v] : vars) {
      const char* old = std::getenv(k.c_str());
      saved_.emplace_back(k, old != nullptr ? std::optional<std::string>(old) : std::nullopt);
      ::setenv(k.c_str(), v.c_str(), 1);
    }
  }
  ~ScopedEnv() {
    for (const auto& [k, v] : saved_)
      v ? ::setenv(k.c_str(), v->c_str(), 1) : ::unsetenv(k.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

}  // namespace dltest
