// dlaunch::codec: the one byte codec of dlaunch's wire formats, the control
// protocol between head and agents (proto/) and the job store's (comm/store/).
// Header-only and standard C++ only, so that comm can use it without linking
// anything of dlaunch's into what workers install.
//
// Encoding:
//   u8, u16, u32, u64   fixed width, little-endian
//   i32, i64            two's complement, as u32 / u64
//   boolean             one byte, 0 or 1 (anything else is refused)
//   bytes               u32 length, then that many bytes (arbitrary content)
//   count               u32, a number of items that follow
//
// Failure style: sticky, with explicit checks. A Reader never reads past the
// end of its input and never trusts a length or a count: the first read that
// would overrun, a boolean other than 0 or 1, or a count that the rest of the
// input cannot hold marks the Reader failed and remembers why (failure()).
// From then on every read returns 0 / false / empty and consumes nothing, so
// a decoder may read all its fields and look once, at the end, with ok() or
// finish() (which also refuses bytes left over). A decoder whose next step
// depends on a value (a count to allocate, a tag to validate) checks ok()
// first, or relies on the failed reads yielding 0. Each user turns a failure
// into its own error: proto throws ProtocolError as soon as a read fails, the
// store's server closes the connection, its client reports a malformed answer.
// Nothing here throws or allocates, except Writer growing its string and
// u32_at on bytes never written (std::out_of_range: a bug in the caller).
//
// The Writer appends to a string it is given (it never owns one). A `bytes`
// value longer than UINT32_MAX cannot be encoded: the caller bounds sizes
// (both formats refuse frames far smaller than that before sending).
//
// Thread safety: none needed; a Reader or Writer belongs to one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace dlaunch::codec {

class Writer {
 public:
  explicit Writer(std::string& out) : out_(out) {}

  Writer& u8(std::uint8_t v) {
    out_.push_back(static_cast<char>(v));
    return *this;
  }
  Writer& u16(std::uint16_t v) { return le(v); }
  Writer& u32(std::uint32_t v) { return le(v); }
  Writer& u64(std::uint64_t v) { return le(v); }
  Writer& i32(std::int32_t v) { return le(static_cast<std::uint32_t>(v)); }
  Writer& i64(std::int64_t v) { return le(static_cast<std::uint64_t>(v)); }
  Writer& boolean(bool v) { return u8(v ? 1 : 0); }
  // u32 length + the bytes; s.size() must fit in 32 bits.
  Writer& bytes(std::string_view s) {
    u32(static_cast<std::uint32_t>(s.size()));
    out_.append(s);
    return *this;
  }
  // The bytes as they are, no length: only for a tail that Reader::rest() read.
  Writer& raw(std::string_view s) {
    out_.append(s);
    return *this;
  }
  // Overwrites the 4 bytes at `pos` (written before, e.g. as u32(0)) with v:
  // a length prefix that is known only once the rest is written.
  Writer& u32_at(std::size_t pos, std::uint32_t v) {
    for (std::size_t i = 0; i < 4; ++i) out_.at(pos + i) = static_cast<char>((v >> (8 * i)) & 0xff);
    return *this;
  }

  std::string& out() { return out_; }

 private:
  template <typename U>
  Writer& le(U v) {
    for (std::size_t i = 0; i < sizeof(U); ++i) {
      out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
    }
    return *this;
  }

  std::string& out_;
};

// Why a Reader failed (the first reason only).
enum class Failure : std::uint8_t {
  kNone,
  kTruncated,      // a field runs past the end of the input
  kBadBool,        // a boolean byte other than 0 or 1
  kBadCount,       // a count of items that the rest of the input cannot hold
  kTrailingBytes,  // finish(): input left over after the last field
};

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}

  std::uint8_t u8() {
    const char* p = take(1);
    return p == nullptr ? 0 : static_cast<std::uint8_t>(*p);
  }
  std::uint16_t u16() { return le<std::uint16_t>(); }
  std::uint32_t u32() { return le<std::uint32_t>(); }
  std::uint64_t u64() { return le<std::uint64_t>(); }
  std::int32_t i32() { return static_cast<std::int32_t>(le<std::uint32_t>()); }
  std::int64_t i64() { return static_cast<std::int64_t>(le<std::uint64_t>()); }
  bool boolean() {
    const std::uint8_t v = u8();
    if (v > 1) fail(Failure::kBadBool);
    return v == 1;
  }
  // A view into the input (valid as long as the input is); empty on failure.
  std::string_view bytes() {
    const std::uint32_t n = u32();
    const char* p = take(n);
    return p == nullptr ? std::string_view() : std::string_view(p, n);
  }
  // Everything not read yet (a view into the input); the Reader is then used up.
  std::string_view rest() {
    const std::string_view r = in_;
    in_ = {};
    return r;
  }
  // A u32 count of items that each take at least min_item_bytes (> 0) on the
  // wire: refused (kBadCount, 0) when the rest of the input cannot hold that
  // many, so that a caller may size a container by it.
  std::uint32_t count(std::size_t min_item_bytes) {
    const std::uint32_t n = u32();
    if (static_cast<std::uint64_t>(n) * min_item_bytes > in_.size()) {
      fail(Failure::kBadCount);
      return 0;
    }
    return n;
  }
  // True when every read succeeded and the input is used up; otherwise the
  // Reader is failed (kTrailingBytes when only the leftovers were wrong).
  bool finish() {
    if (ok() && !in_.empty()) fail(Failure::kTrailingBytes);
    return ok();
  }

  bool ok() const { return failure_ == Failure::kNone; }
  Failure failure() const { return failure_; }
  std::size_t remaining() const { return in_.size(); }

 private:
  void fail(Failure why) {
    if (failure_ == Failure::kNone) failure_ = why;
    in_ = {};
  }
  // The next n bytes, or nullptr (and failed) when fewer are left or the
  // Reader has failed already.
  const char* take(std::size_t n) {
    if (!ok()) return nullptr;
    if (n > in_.size()) {
      fail(Failure::kTruncated);
      return nullptr;
    }
    const char* p = in_.data();
    in_.remove_prefix(n);
    return p;
  }
  template <typename U>
  U le() {
    const char* p = take(sizeof(U));
    if (p == nullptr) return 0;
    U v = 0;
    for (std::size_t i = 0; i < sizeof(U); ++i) {
      v = static_cast<U>(v | (static_cast<U>(static_cast<unsigned char>(p[i])) << (8 * i)));
    }
    return v;
  }

  std::string_view in_;
  Failure failure_ = Failure::kNone;
};

}  // namespace dlaunch::codec
