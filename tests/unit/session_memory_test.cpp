// SessionPages (launcher/transport/ssh/session_memory.h): libssh2's session
// structure in pages of its own, and its all-zero pages given back to the
// kernel without changing what the structure holds. Measured with mincore,
// on the allocator alone (the SSH tests run every real session through it).
#include "transport/ssh/session_memory.h"

#include <unistd.h>

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
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(s) % kPage, 0U);
  EXPECT_EQ(pages.block_bytes(), (kStructure + kPage - 1) / kPage * kPage);
  // Later allocations are malloc's, whatever their size.
  void* later = SessionPages::alloc(kStructure, &abstract);
  EXPECT_EQ(pages.block_bytes(), (kStructure + kPage - 1) / kPage * kPage);
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
  s[10] = 1;                      // page 0
  s[4 * kPage + 100] = 2;         // page 4
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
