// SessionPages (launcher/transport/ssh/session_memory.h): libssh2's session
// structure in pages of its own, and its all-zero pages given back to the
// kernel without changing what the structure holds. Measured with mincore,
// on the allocator alone (the SSH tests run every real session through it).
#include "transport/ssh/session_memory.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

using dlaunch::ssh::SessionPages;

namespace {

const std::size_t kPage = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
constexpr std::size_t kStructure = 54840;  // libssh2 1.10's LIBSSH2_SESSION

}  // namespace

TEST(SessionPages, TheFirstLargeAllocationGetsPagesOfItsOwn) {
  SessionPages pages;
  void* abstract = &pages;
  void* s = SessionPages::alloc(kStructure, &abstract);
  ASSERT_NE(s, nullptr);
  // Not at the start of its first page: see kStructureOffset.
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(s) % kPage, SessionPages::kStructureOffset);
  const std::size_t pages_len =
      (SessionPages::kStructureOffset + kStructure + kPage - 1) / kPage * kPage;
  EXPECT_EQ(pages.block_bytes(), pages_len);
  // Later allocations are malloc's, whatever their size.
  void* later = SessionPages::alloc(kStructure, &abstract);
  EXPECT_EQ(pages.block_bytes(), pages_len);
  SessionPages::free(later, &abstract);
  SessionPages::free(s, &abstract);
  EXPECT_EQ(pages.block_bytes(), 0U);
}

TEST(SessionPages, ZeroPagesAreGivenBackAndTheContentStaysTheSame) {
  SessionPages pages;
  void* abstract = &pages;
  auto* s = static_cast<unsigned char*>(SessionPages::alloc(kStructure, &abstract));
  ASSERT_NE(s, nullptr);
  std::memset(s, 0, kStructure);  // as libssh2_session_init_ex does: every page resident
  s[10] = 1;                      // the first page
  s[4 * kPage + 100] = 2;         // the fifth
  s[kStructure - 1] = 3;          // the last, partial page
  const std::size_t whole = pages.block_bytes() / kPage;
  EXPECT_EQ(pages.resident_bytes(), whole * kPage);
  const std::vector<unsigned char> before(s, s + kStructure);

  const std::size_t released = pages.release_zero_pages();
  EXPECT_EQ(released, (whole - 3) * kPage);
  EXPECT_EQ(pages.resident_bytes(), 3 * kPage);
  EXPECT_EQ(std::memcmp(before.data(), s, kStructure), 0) << "what the structure holds changed";
  // A page given back and written again is libssh2's again, and is kept by
  // the next release. (Reading a page given back maps the kernel's shared
  // zero page: mincore counts it, the memory does not, and a release
  // unmaps it again.)
  s[8 * kPage] = 9;
  (void)pages.release_zero_pages();
  std::vector<unsigned char> expected = before;
  expected[8 * kPage] = 9;
  EXPECT_EQ(std::memcmp(expected.data(), s, kStructure), 0);
  SessionPages::free(s, &abstract);
}

TEST(SessionPages, SmallFirstAllocationsAndReallocLeaveThePagesForMalloc) {
  SessionPages small;
  void* a = &small;
  void* p = SessionPages::alloc(64, &a);
  EXPECT_EQ(small.block_bytes(), 0U);
  EXPECT_EQ(small.release_zero_pages(), 0U);
  SessionPages::free(p, &a);

  SessionPages big;
  void* b = &big;
  auto* s = static_cast<unsigned char*>(SessionPages::alloc(kStructure, &b));
  std::memset(s, 7, kStructure);
  auto* moved = static_cast<unsigned char*>(SessionPages::realloc(s, kStructure + 100, &b));
  ASSERT_NE(moved, nullptr);
  EXPECT_EQ(big.block_bytes(), 0U);
  EXPECT_EQ(moved[0], 7);
  EXPECT_EQ(moved[kStructure - 1], 7);
  SessionPages::free(moved, &b);
}

// libssh2's packet buffers lie inside the structure: what a receive wrote is
// given back when the connection goes quiet, what was sent as soon as it went
// out; pages holding anything else (either end of a buffer) stay.
// Real sockets (a socketpair), the structure's memory as the buffers.
TEST(SessionPages, DeadPacketBytesAreGivenBackAndLiveOnesStay) {
  SessionPages pages;
  void* abstract = &pages;
  auto* s = static_cast<unsigned char*>(SessionPages::alloc(kStructure, &abstract));
  ASSERT_NE(s, nullptr);
  std::memset(s, 0, kStructure);
  std::memset(s, 0x5a, 600);  // fields before the receive buffer
  (void)pages.release_zero_pages();
  const std::size_t idle = pages.resident_bytes();
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);

  // A receive of 12 KB into a 16 KB buffer at s + 600, as libssh2 reads.
  unsigned char* rbuf = s + 600;
  const std::size_t rlen = 16384;
  std::vector<unsigned char> data(12000);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<unsigned char>(i * 7 + 1);
  ASSERT_EQ(::write(sv[1], data.data(), data.size()), static_cast<ssize_t>(data.size()));
  ASSERT_EQ(SessionPages::recv(sv[0], rbuf, rlen, 0, &abstract), 12000);
  EXPECT_EQ(std::memcmp(rbuf, data.data(), data.size()), 0);
  EXPECT_GE(pages.resident_bytes(), idle + 2 * kPage);
  // While data keeps coming, the pages stay (a flood is not slowed by
  // faulting them in again for every read).
  ASSERT_EQ(::write(sv[1], data.data(), 100), 100);
  ASSERT_EQ(SessionPages::recv(sv[0], rbuf, rlen, 0, &abstract), 100);
  EXPECT_GE(pages.resident_bytes(), idle + 2 * kPage);
  // Quiet: the receive that finds nothing (-EAGAIN, as libssh2's own recv
  // says it) gives back the pages of the space it was offered.
  EXPECT_EQ(SessionPages::recv(sv[0], rbuf, rlen, 0, &abstract), -EAGAIN);
  EXPECT_LE(pages.resident_bytes(), idle + kPage);
  for (std::size_t i = 0; i < 600; ++i) ASSERT_EQ(s[i], 0x5a) << "a field before the buffer";

  // A send of 20 KB from s + 20000: gone out, its whole pages go back.
  unsigned char* sbuf = s + 20000;
  for (std::size_t i = 0; i < 20000; ++i) sbuf[i] = static_cast<unsigned char>(i % 251);
  const std::size_t before_send = pages.resident_bytes();
  std::size_t sent = 0;
  std::vector<unsigned char> got;
  unsigned char chunk[65536];
  while (sent < 20000) {
    const ssize_t n = SessionPages::send(sv[0], sbuf + sent, 20000 - sent, 0, &abstract);
    if (n > 0) sent += static_cast<std::size_t>(n);
    const ssize_t r = ::read(sv[1], chunk, sizeof chunk);
    if (r > 0) got.insert(got.end(), chunk, chunk + r);
    ASSERT_TRUE(n > 0 || n == -EAGAIN) << n;
  }
  for (ssize_t r; (r = ::read(sv[1], chunk, sizeof chunk)) > 0;)
    got.insert(got.end(), chunk, chunk + r);
  ASSERT_EQ(got.size(), 20000U);
  for (std::size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], i % 251) << i;
  EXPECT_LT(pages.resident_bytes(), before_send);
  EXPECT_LE(pages.resident_bytes(), idle + 2 * kPage);

  // A closed peer: the error as libssh2 expects it, negative errno.
  ::close(sv[1]);
  EXPECT_EQ(SessionPages::send(sv[0], sbuf, 10, MSG_NOSIGNAL, &abstract), -EPIPE);
  ::close(sv[0]);
  SessionPages::free(s, &abstract);
}
