// Result<T, E>: what a private function of comm returns when a failure is an
// expected outcome that the caller decides about (retry, give up, answer the
// peer) rather than an exception: either a T or the reason, an E (by default
// the text for the caller's message). The small part of C++23's std::expected
// that comm needs, with the same names, so that it can become std::expected.
//
//   Result<Fd> connect_tcp(...);
//   if (auto fd = connect_tcp(...)) use(*fd); else log(fd.error());
//   return failure("cannot resolve host: ...");  // inside connect_tcp
//
// Asking a Result for the alternative it does not hold is a bug: value() of a
// failure, error() of a success throw std::bad_variant_access.
#pragma once

#include <string>
#include <type_traits>
#include <utility>
#include <variant>

namespace dlaunch::comm::detail {

// The failed alternative on its way into a Result (std::unexpected).
template <typename E>
struct Failure {
  E error;
};

template <typename E>
Failure<std::decay_t<E>> failure(E&& error) {
  return {std::forward<E>(error)};
}

template <typename T, typename E = std::string>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::in_place_index<0>, std::move(value)) {}  // NOLINT: implicit on purpose
  template <typename G>
  requires std::is_constructible_v<E, G&&> Result(Failure<G> f)
      : v_(std::in_place_index<1>, std::move(f.error)) {}  // NOLINT

  bool has_value() const { return v_.index() == 0; }
  explicit operator bool() const { return has_value(); }

  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const E& error() const& { return std::get<1>(v_); }
  E&& error() && { return std::get<1>(std::move(v_)); }

 private:
  std::variant<T, E> v_;
};

}  // namespace dlaunch::comm::detail
