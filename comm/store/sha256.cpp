#include "store/sha256.h"

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace dlaunch::comm::detail {

namespace {

// FIPS 180-4, 4.2.2: the first 32 bits of the fractional parts of the cube
// roots of the first 64 primes.
constexpr std::array<std::uint32_t, 64> kRound = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

constexpr std::uint32_t rotr(std::uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

std::uint32_t load_be32(const unsigned char* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) |
         std::uint32_t{p[3]};
}

}  // namespace

// 5.3.3: the initial hash value.
Sha256::Sha256()
    : h_{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
         0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19} {}

// 6.2.2: one 512-bit block into the state.
void Sha256::compress(const unsigned char* block) {
  std::array<std::uint32_t, 64> w{};
  for (std::size_t t = 0; t < 16; ++t) w[t] = load_be32(block + 4 * t);
  for (std::size_t t = 16; t < 64; ++t) {
    const std::uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
    const std::uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
    w[t] = w[t - 16] + s0 + w[t - 7] + s1;
  }
  std::uint32_t a = h_[0], b = h_[1], c = h_[2], d = h_[3];
  std::uint32_t e = h_[4], f = h_[5], g = h_[6], h = h_[7];
  for (std::size_t t = 0; t < 64; ++t) {
    const std::uint32_t big_s1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
    const std::uint32_t ch = (e & f) ^ (~e & g);
    const std::uint32_t t1 = h + big_s1 + ch + kRound[t] + w[t];
    const std::uint32_t big_s0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
    const std::uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
    const std::uint32_t t2 = big_s0 + maj;
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  h_[0] += a;
  h_[1] += b;
  h_[2] += c;
  h_[3] += d;
  h_[4] += e;
  h_[5] += f;
  h_[6] += g;
  h_[7] += h;
}

void Sha256::add(std::string_view data) {
  add(reinterpret_cast<const unsigned char*>(data.data()), data.size());
}

void Sha256::add(const unsigned char* data, std::size_t n) {
  total_ += n;
  if (pending_len_ > 0) {
    const std::size_t take = std::min(n, kBlockBytes - pending_len_);
    std::memcpy(pending_.data() + pending_len_, data, take);
    pending_len_ += take;
    data += take;
    n -= take;
    if (pending_len_ < kBlockBytes) return;
    compress(pending_.data());
    pending_len_ = 0;
  }
  for (; n >= kBlockBytes; data += kBlockBytes, n -= kBlockBytes) compress(data);
  if (n > 0) std::memcpy(pending_.data(), data, n);
  pending_len_ = n;
}

// 5.1.1: a 1 bit, zeros, and the message's length in bits (64 bits, big
// endian) to fill the last block.
Sha256::Digest Sha256::finish() {
  const std::uint64_t bits = total_ * 8;
  unsigned char tail[kBlockBytes + 8] = {0x80};
  const std::size_t zeros = (pending_len_ < 56 ? 56 : 120) - pending_len_;
  for (std::size_t i = 0; i < 8; ++i) {
    tail[zeros + i] = static_cast<unsigned char>(bits >> (56 - 8 * i));
  }
  add(tail, zeros + 8);
  Digest out{};
  for (std::size_t i = 0; i < 8; ++i) {
    out[4 * i] = static_cast<unsigned char>(h_[i] >> 24);
    out[4 * i + 1] = static_cast<unsigned char>(h_[i] >> 16);
    out[4 * i + 2] = static_cast<unsigned char>(h_[i] >> 8);
    out[4 * i + 3] = static_cast<unsigned char>(h_[i]);
  }
  return out;
}

bool random_bytes(unsigned char* out, std::size_t n) {
  std::size_t got = 0;
  // The system call, not glibc's getrandom(): that one is glibc 2.25's, and
  // the agent runs on older C libraries too.
  while (got < n) {
    const long r = ::syscall(SYS_getrandom, out + got, n - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += static_cast<std::size_t>(r);
  }
  if (got == n) return true;
  if (errno != ENOSYS) return false;
  const int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  while (got < n) {
    const ssize_t r = ::read(fd, out + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += static_cast<std::size_t>(r);
  }
  ::close(fd);
  return got == n;
}

void wipe(void* p, std::size_t n) {
  auto* volatile bytes = static_cast<volatile unsigned char*>(p);
  for (std::size_t i = 0; i < n; ++i) bytes[i] = 0;
}

}  // namespace dlaunch::comm::detail
