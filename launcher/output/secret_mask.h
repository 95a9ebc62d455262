// What --dry-run prints for an environment variable's value and a program's
// argument: its output lands in logs and CI output, so a value that may be a
// secret is shown as "<hidden: KIND, N chars>" unless --show-secrets. Either
// test hides a value: the variable's name (HF_TOKEN, MYSQL_PWD, SENTRY_DSN,
// ...) or the value's shape (a URL with a password, a connection string with
// Password=, a webhook URL, a JWT, a PEM private key, a token).
// docs/environment.md ("What --dry-run hides") states the rules;
// tests/unit/secret_mask_test.cpp holds them against real names from CI
// systems and SDKs and against ordinary values.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace dlaunch {

// Whether a variable's name says it holds a secret. value matters only for
// the names that say so but hold a flag ("", 0, 1, true, false, yes, no, on,
// off: HF_HUB_DISABLE_IMPLICIT_TOKEN=1), which are not hidden.
bool name_says_secret(std::string_view name, std::string_view value);

// Why the value's shape says it is (or holds) a secret, whatever its name:
// "URL with a password", "JWT", ...; nullopt when nothing in it looks like one.
std::optional<std::string> value_secret_kind(std::string_view value);

// One word (no blanks) that looks like a randomly made token: a known token
// prefix (ghp_, hf_, AKIA, xoxb-, ...), or long, mixed-case and of high
// entropy (the rule is spelled out at its definition and in the docs).
bool looks_like_token(std::string_view word);

// Why --dry-run hides this variable's value (the name's reason first);
// nullopt when it shows it.
std::optional<std::string> secret_kind(std::string_view name, std::string_view value);

// Why --dry-run hides a program's argument: its shape, or the option before
// it (--hf-token VALUE); nullopt when it shows it.
std::optional<std::string> argument_secret_kind(std::string_view previous, std::string_view arg);

// --dry-run's values and arguments: each shell-quoted, or hidden unless
// `show`; counts what it hid, for the one line that says how to see them.
class SecretMask {
 public:
  explicit SecretMask(bool show) : show_(show) {}
  std::string operator()(std::string_view name, std::string_view value);
  std::string argument(std::string_view previous, std::string_view arg);
  int hidden() const { return hidden_; }

 private:
  std::string shown(const std::optional<std::string>& kind, std::string_view value);
  bool show_;
  int hidden_ = 0;
};

}  // namespace dlaunch
