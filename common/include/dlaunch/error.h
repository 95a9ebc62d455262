// dlaunch's error vocabulary, for the head (launcher/) and the agent
// (agent/); comm has its own (comm/errors are what users' programs see).
//
// Exceptions: every failure that crosses a function boundary as an exception
// is a dlaunch::Error, whose kind says whose problem it is:
//
//   kInput        the user's input: command line, hostfile, env file. dlaunch
//                 exits 2 and nothing has started (InputError, hostfile.h).
//   kEnvironment  the world: a host, the network, the operating system, a
//                 missing program, a port taken, a peer that went away. The
//                 job fails (exit 1, or the node is lost) with the message.
//   kProtocol     a peer broke the control protocol: version skew or a bug on
//                 the other side (ProtocolError, dlaunch/proto/protocol.h).
//   kInternal     a bug in dlaunch itself: an invariant that does not hold.
//
// Anything else that escapes (std::bad_alloc, a std::logic_error) is a bug
// too and is reported as such.
//
// Results: where a failure is expected and the caller handles it on the spot
// (a program that cannot be executed, a port that is taken), functions return
// a Result<T>: the value, or the reason and kind, never an out-parameter.
//
// Messages follow one style: what was attempted, on what (host, path, port),
// and what the system said, with no trailing period.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

namespace dlaunch {

enum class ErrorKind { kInput, kEnvironment, kProtocol, kInternal };

// "input", "environment", "protocol", "internal".
const char* to_string(ErrorKind kind);

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

template <typename T>
class [[nodiscard]] Result {
 public:
  // Success.
  Result(T value) : value_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  // Failure: why, and whose problem it is. (`why` is moved from: clang-tidy
  // 14 misses the move inside a class template.)
  // NOLINTNEXTLINE(performance-unnecessary-value-param)
  static Result failure(std::string why, ErrorKind kind = ErrorKind::kEnvironment) {
    Result r;
    r.error_ = std::move(why);
    r.kind_ = kind;
    return r;
  }

  bool ok() const { return value_.has_value(); }
  explicit operator bool() const { return ok(); }
  // The value; only when ok().
  T& value() { return *value_; }
  const T& value() const { return *value_; }
  T& operator*() { return *value_; }
  T* operator->() { return &*value_; }
  // Why it failed; empty when ok().
  const std::string& error() const { return error_; }
  ErrorKind kind() const { return kind_; }
  // The value, or throws Error(kind(), error()).
  T take() {
    if (!ok()) throw Error(kind_, error_);
    return std::move(*value_);
  }

 private:
  Result() = default;
  std::optional<T> value_;
  std::string error_;
  ErrorKind kind_ = ErrorKind::kEnvironment;
};

}  // namespace dlaunch
