// Wire format shared by the store client and server (docs/store.md): the
// codec of dlaunch/codec.h, as the control protocol's: integers
// little-endian, strings as u32 length + bytes; every frame after the
// greeting is u32 length + body.
//
// Protocol version 3 (kProtocolVersion, the digit ending kGreetingMagic):
// mutual authentication, and every frame after it carries a tag made with a
// key of that connection alone (docs/store.md, "Connection and
// authentication"). Version 2 authenticated the client only; version 1 had
// version 2's messages with every integer big-endian. A client and a server
// of different versions refuse each other at the greeting.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "dlaunch/codec.h"
#include "store/sha256.h"

namespace dlaunch::comm::detail {

inline constexpr int kProtocolVersion = 3;
inline constexpr std::string_view kGreetingPrefix = "DLSTORE";
inline constexpr std::string_view kGreetingMagic = "DLSTORE3";  // prefix + version
static_assert(kGreetingMagic.size() == kGreetingPrefix.size() + 1 &&
              kGreetingMagic.substr(0, kGreetingPrefix.size()) == kGreetingPrefix &&
              kGreetingMagic.back() == '0' + kProtocolVersion);
inline constexpr size_t kNonceBytes = 32;
inline constexpr size_t kMacBytes = 32;
inline constexpr size_t kGreetingBytes = 8 + kNonceBytes;
// What every MAC of the handshake starts with: the protocol and its version.
inline constexpr std::string_view kMacContext = "dlaunch-store-v3";
inline constexpr size_t kFrameHeaderBytes = 4;
// Every frame after the handshake ends with this many bytes of its tag.
inline constexpr size_t kTagBytes = 16;
// What a client accepts before the server has proved the secret (the
// acceptance frame is 25 bytes): nothing a peer says makes it allocate more.
inline constexpr size_t kMaxHandshakeFrame = 64;
// The least a string takes on the wire (its length), for codec::Reader::count.
inline constexpr size_t kMinStringBytes = 4;

enum class Op : uint8_t {
  set = 1,
  get = 2,
  add = 3,
  compare_set = 4,
  check = 5,
  wait = 6,
  erase = 7,
  num_keys = 8,
  multi_get = 9,
  multi_set = 10,
  set_owned = 11,  // a set the server undoes when this connection closes
};

enum class Status : uint8_t { ok = 0, timeout = 1, error = 2 };

using Mac = std::array<unsigned char, kMacBytes>;
using Nonce = std::array<unsigned char, kNonceBytes>;
using Tag = std::array<unsigned char, kTagBytes>;

// HMAC-SHA256 with one key, its padded key blocks hashed once: each MAC then
// costs two copies of a hash state plus the message. One thread at a time.
class Hmac {
 public:
  explicit Hmac(std::string_view key);
  // The MAC of the concatenation of `parts`.
  Mac operator()(std::initializer_list<std::string_view> parts) const;

 private:
  Sha256 inner_;  // SHA-256 after (key ^ ipad)
  Sha256 outer_;  // SHA-256 after (key ^ opad)
};

// The handshake of version 3 (docs/store.md), from the job's secret and the
// two fresh nonces of one connection:
//   server_proof  HMAC(secret, context || "server-proof" || Ns || Nc)
//   client_proof  HMAC(secret, context || "client-proof" || Ns || Nc)
//   to_server, to_client: the keys of each direction's frame tags,
//                 HMAC(secret, context || "client-to-server" || Ns || Nc) and
//                 "server-to-client".
// Each proof names its role, so one side's proof is never the other's; both
// nonces are in every value, so nothing of one connection is worth anything
// on another.
struct Handshake {
  Mac server_proof{};
  Mac client_proof{};
  Mac to_server{};
  Mac to_client{};
};
Handshake handshake_values(std::string_view secret, const Nonce& server_nonce,
                           const Nonce& client_nonce);

// Fresh random bytes (random_bytes); comm::Error (kInternal) if none.
Nonce fresh_nonce();

// Constant-time comparison of two MACs.
bool same_mac(const unsigned char* a, const unsigned char* b, size_t n);

// One direction of a connection's frames: each frame's tag is
// HMAC(key, u64 sequence || frame header || body), cut to kTagBytes, the
// sequence counting that direction's frames from 0. A frame dropped,
// repeated, reordered or made elsewhere fails its check.
class FrameTagger {
 public:
  explicit FrameTagger(const Mac& key)
      : mac_(std::string_view(reinterpret_cast<const char*>(key.data()), key.size())) {}
  // The tag of the next frame (`frame`: its header and body).
  Tag next(std::string_view frame);
  // Whether `tag` is the next frame's; counts the frame either way.
  bool check(std::string_view frame, const unsigned char* tag);

 private:
  Hmac mac_;
  uint64_t sequence_ = 0;
};

// The body length in a frame header (kFrameHeaderBytes at `header`).
inline uint32_t frame_length(const char* header) {
  return codec::Reader(std::string_view(header, kFrameHeaderBytes)).u32();
}

// Builds one frame with codec::Writer; the length prefix is filled in by finish().
class Writer {
 public:
  explicit Writer(uint8_t tag) : buf_(kFrameHeaderBytes, '\0') { u8(tag); }
  Writer& u8(uint8_t v) {
    codec::Writer(buf_).u8(v);
    return *this;
  }
  Writer& u32(uint32_t v) {
    codec::Writer(buf_).u32(v);
    return *this;
  }
  Writer& u64(uint64_t v) {
    codec::Writer(buf_).u64(v);
    return *this;
  }
  Writer& i64(int64_t v) {
    codec::Writer(buf_).i64(v);
    return *this;
  }
  Writer& str(std::string_view s) {
    codec::Writer(buf_).bytes(s);
    return *this;
  }
  size_t body_size() const { return buf_.size() - kFrameHeaderBytes; }
  // Frame bodies over 4 GiB are the caller's job to refuse.
  std::string finish() {
    codec::Writer(buf_).u32_at(0, static_cast<uint32_t>(body_size()));
    return std::move(buf_);
  }

 private:
  std::string buf_;
};

// Frame bodies are read with codec::Reader: sticky, so a handler reads every
// field and then checks finish() (all read, nothing left over) once.
using codec::Reader;

}  // namespace dlaunch::comm::detail
