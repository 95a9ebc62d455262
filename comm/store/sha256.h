// SHA-256 (FIPS 180-4) and a source of random bytes, for the store's HMACs
// and nonces. Our own, so that what links comm_store (the agent that dlaunch
// copies to nodes with nothing installed, workers) needs no libcrypto; the
// unit tests check it against OpenSSL's on many inputs.
//
// Sha256 is a value type: copy it to fork a state (HMAC keeps its padded key
// blocks hashed once this way). Not thread-safe; one state per thread.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace dlaunch::comm::detail {

class Sha256 {
 public:
  static constexpr std::size_t kBlockBytes = 64;
  static constexpr std::size_t kDigestBytes = 32;
  using Digest = std::array<unsigned char, kDigestBytes>;

  Sha256();
  void add(std::string_view data);
  void add(const unsigned char* data, std::size_t n);
  // The digest of everything added; the state is spent afterwards.
  Digest finish();

 private:
  void compress(const unsigned char* block);

  std::array<std::uint32_t, 8> h_;
  std::array<unsigned char, kBlockBytes> pending_{};
  std::size_t pending_len_ = 0;
  std::uint64_t total_ = 0;  // bytes added
};

// Fills `out` with bytes from the kernel's random source (getrandom(2), or
// /dev/urandom where the kernel has no getrandom). False if neither gives
// them.
bool random_bytes(unsigned char* out, std::size_t n);

// Overwrites n bytes at p with zeros in a way the compiler keeps.
void wipe(void* p, std::size_t n);

}  // namespace dlaunch::comm::detail
