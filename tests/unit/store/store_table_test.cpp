// White-box: the server's table and waiter bookkeeping, and the wire helpers.
#include <cstdint>
#include <cstdio>
#include <string>

#include <gtest/gtest.h>

#include "store/table.h"
#include "store/wire.h"

namespace {

using dlaunch::comm::detail::Reader;
using dlaunch::comm::detail::Table;
using dlaunch::comm::detail::Writer;

struct CountingWaiter : dlaunch::comm::detail::Waiter {
  explicit CountingWaiter(std::vector<std::string> k) { keys = std::move(k); }
  void on_ready() override { ++ready; }
  int ready = 0;
};

}  // namespace

TEST(StoreTable, AWaiterWakesOnceWhenItsLastKeyAppears) {
  Table t;
  CountingWaiter w({"a", "b"});
  EXPECT_FALSE(t.park(w));
  EXPECT_EQ(t.parked(), 1u);
  t.set("b", "2");
  EXPECT_EQ(w.ready, 0);
  t.set("a", "1");
  EXPECT_EQ(w.ready, 1);
  EXPECT_EQ(t.parked(), 0u);
  t.set("c", "3");
  EXPECT_EQ(w.ready, 1);
}

TEST(StoreTable, AWaiterWhoseKeysAllExistIsNotParked) {
  Table t;
  t.set("a", "1");
  CountingWaiter w({"a"});
  EXPECT_TRUE(t.park(w));
  EXPECT_EQ(t.parked(), 0u);
}

TEST(StoreTable, AKeyDeletedBehindTheWaiterKeepsItParked) {
  Table t;
  CountingWaiter w({"a", "b"});
  EXPECT_FALSE(t.park(w));
  t.set("a", "1");
  EXPECT_TRUE(t.erase("a"));
  t.set("b", "2");
  EXPECT_EQ(w.ready, 0);
  EXPECT_EQ(t.parked(), 1u);
  EXPECT_EQ(t.add("a", 1).value(), 1);
  EXPECT_EQ(w.ready, 1);
}

TEST(StoreTable, CancelledWaitersAreForgotten) {
  Table t;
  CountingWaiter w({"a"}), v({"a"});
  t.park(w);
  t.park(v);
  t.cancel(w);
  t.cancel(w);  // twice is harmless
  EXPECT_EQ(t.parked(), 1u);
  t.compare_set("a", "", "1");
  EXPECT_EQ(w.ready, 0);
  EXPECT_EQ(v.ready, 1);
}

TEST(StoreTable, OverwritingAnExistingKeyWakesNobodyNew) {
  Table t;
  t.set("a", "1");
  CountingWaiter w({"b"});
  t.park(w);
  t.set("a", "2");
  EXPECT_EQ(w.ready, 0);
  EXPECT_EQ(*t.find("a"), "2");
}

TEST(StoreTable, AddSaysWhyItCannotAdd) {
  Table t;
  t.set("text", "forty");
  auto not_a_number = t.add("text", 1);
  ASSERT_FALSE(not_a_number);
  EXPECT_EQ(not_a_number.error(), "the stored value is not a decimal integer");
  EXPECT_EQ(*t.find("text"), "forty");
  t.set("big", std::to_string(INT64_MAX));
  auto overflow = t.add("big", 1);
  ASSERT_FALSE(overflow);
  EXPECT_EQ(overflow.error(), "the counter would overflow int64");
  auto fresh = t.add("new", -5);
  ASSERT_TRUE(fresh);
  EXPECT_EQ(*fresh, -5);
  EXPECT_EQ(*t.find("new"), "-5");
}

TEST(StoreWire, WriterAndReaderRoundTrip) {
  std::string frame = Writer(7).u32(1).u64(2).i64(-3).str("key").finish();
  ASSERT_EQ(dlaunch::comm::detail::frame_length(frame.data()), frame.size() - 4);
  Reader r(std::string_view(frame).substr(4));
  EXPECT_EQ(r.u8(), 7);
  EXPECT_EQ(r.u32(), 1u);
  EXPECT_EQ(r.u64(), 2u);
  EXPECT_EQ(r.i64(), -3);
  EXPECT_EQ(r.bytes(), "key");
  EXPECT_TRUE(r.finish());
}

TEST(StoreWire, IntegersAreLittleEndian) {
  std::string frame = Writer(7).u32(0x01020304).str("k").finish();
  EXPECT_EQ(frame, std::string("\x0a\0\0\0"  // body length 10
                               "\x07"
                               "\x04\x03\x02\x01"
                               "\x01\0\0\0"
                               "k",
                               14));
}

TEST(StoreWire, ReaderRefusesOverrunsAndImpossibleCounts) {
  Reader short_string(
      std::string_view("\x09\0\0\0"
                       "abc",
                       7));
  EXPECT_EQ(short_string.bytes(), "");
  EXPECT_FALSE(short_string.ok());
  Reader big_count(
      std::string_view("\x03\0\0\0"
                       "abcdefgh",
                       12));
  // 3 strings need at least 12 more bytes; 8 remain
  big_count.count(dlaunch::comm::detail::kMinStringBytes);
  EXPECT_FALSE(big_count.ok());
}

namespace {

template <typename Bytes>
std::string hex_of(const Bytes& b) {
  std::string out;
  for (unsigned char c : b) {
    char h[3];
    std::snprintf(h, sizeof h, "%02x", c);
    out += h;
  }
  return out;
}

}  // namespace

// Test vectors of docs/store.md, the same as Python's hmac module gives:
//   hmac.new(b"secret", b"dlaunch-store-v3" + LABEL + ns + nc, "sha256")
// with ns = bytes(range(32)), nc = bytes(range(32, 64)).
TEST(StoreWire, TheHandshakeValuesAreHmacSha256OfRoleAndBothNonces) {
  dlaunch::comm::detail::Nonce ns{};
  dlaunch::comm::detail::Nonce nc{};
  for (int i = 0; i < 32; ++i) {
    ns[i] = static_cast<unsigned char>(i);
    nc[i] = static_cast<unsigned char>(32 + i);
  }
  auto h = dlaunch::comm::detail::handshake_values("secret", ns, nc);
  EXPECT_EQ(hex_of(h.server_proof),
            "7550a1ad721463245796255eaaf8fb30021411e079ead99a42e765b0cdb80950");
  EXPECT_EQ(hex_of(h.client_proof),
            "71c4f794cc7850949e346a7c7fca87824784d1acda0de25aee4ed138057b85b1");
  EXPECT_EQ(hex_of(h.to_server),
            "afb69887732324e00291ea1db6181c22d0db4c7508f77957abb9ea95f98b7c60");
  EXPECT_EQ(hex_of(h.to_client),
            "9851145a056ab5a4931f50585acd1da57fe78c285278d929acb7840a480ca608");
  // A frame's tag: HMAC(to_server, u64 sequence || frame)[:16], the
  // sequence counting from 0; the same frame twice gets two tags.
  dlaunch::comm::detail::FrameTagger tags(h.to_server);
  const std::string frame("\x01\0\0\0\x08", 5);  // num_keys
  EXPECT_EQ(hex_of(tags.next(frame)), "085c3c03b69bfdd784ea23a29c2142c3");
  EXPECT_EQ(hex_of(tags.next(frame)), "0895fe57ca37032239c10955957b8e62");
}

TEST(StoreWire, AKeyLongerThanABlockIsHashedFirstAsHmacSays) {
  dlaunch::comm::detail::Hmac mac(std::string(100, 'k'));
  EXPECT_EQ(hex_of(mac({"a", "bc"})),
            "b58b2b694fdba0dd76da3ebe99174f728d327560f36ece224e90867972479922");
}
