// dlaunch/codec.h: the byte codec of the control protocol and the store.
#include "dlaunch/codec.h"

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include <gtest/gtest.h>

namespace codec = dlaunch::codec;

TEST(Codec, EveryTypeRoundTrips) {
  std::string out;
  codec::Writer(out)
      .u8(0xfe)
      .u16(0xbeef)
      .u32(0xdeadbeef)
      .u64(0x0123456789abcdefULL)
      .i32(-2)
      .i64(std::numeric_limits<std::int64_t>::min())
      .boolean(true)
      .boolean(false)
      .bytes(std::string("a\0b", 3))
      .bytes("");
  codec::Reader r(out);
  EXPECT_EQ(r.u8(), 0xfe);
  EXPECT_EQ(r.u16(), 0xbeef);
  EXPECT_EQ(r.u32(), 0xdeadbeefu);
  EXPECT_EQ(r.u64(), 0x0123456789abcdefULL);
  EXPECT_EQ(r.i32(), -2);
  EXPECT_EQ(r.i64(), std::numeric_limits<std::int64_t>::min());
  EXPECT_TRUE(r.boolean());
  EXPECT_FALSE(r.boolean());
  EXPECT_EQ(r.bytes(), std::string_view("a\0b", 3));
  EXPECT_EQ(r.bytes(), "");
  EXPECT_TRUE(r.finish());
  EXPECT_EQ(r.failure(), codec::Failure::kNone);
}

TEST(Codec, IntegersAreLittleEndianAndBytesLengthPrefixed) {
  std::string out;
  codec::Writer(out).u16(0x0102).u32(0x03040506).i32(-1).bytes("xy");
  EXPECT_EQ(out, std::string("\x02\x01"
                             "\x06\x05\x04\x03"
                             "\xff\xff\xff\xff"
                             "\x02\0\0\0"
                             "xy",
                             16));
}

TEST(Codec, U32AtFillsInALengthWrittenEarlier) {
  std::string out = "prefix";
  codec::Writer w(out);
  w.u32(0).bytes("body");
  w.u32_at(6, 0x0a0b0c0d);
  EXPECT_EQ(out.substr(6, 4), "\x0d\x0c\x0b\x0a");
  EXPECT_EQ(out.substr(0, 6), "prefix");
}

TEST(Codec, ATruncatedFieldFailsAndEveryLaterReadYieldsNothing) {
  const std::string in("\x01\x02\x03", 3);
  codec::Reader r(in);
  EXPECT_EQ(r.u32(), 0u);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.failure(), codec::Failure::kTruncated);
  EXPECT_EQ(r.u8(), 0);  // the 3 bytes are not handed out after the failure
  EXPECT_EQ(r.remaining(), 0u);
  EXPECT_FALSE(r.boolean());
  EXPECT_FALSE(r.finish());
  EXPECT_EQ(r.failure(), codec::Failure::kTruncated);  // the first reason stays
}

TEST(Codec, ALengthIsNeverTrusted) {
  // Claims 4 GiB - 1 bytes, holds 2.
  codec::Reader r(
      std::string_view("\xff\xff\xff\xff"
                       "ab",
                       6));
  EXPECT_EQ(r.bytes(), "");
  EXPECT_EQ(r.failure(), codec::Failure::kTruncated);
}

TEST(Codec, ABooleanIsZeroOrOne) {
  codec::Reader r(std::string_view("\x02", 1));
  EXPECT_FALSE(r.boolean());
  EXPECT_EQ(r.failure(), codec::Failure::kBadBool);
}

TEST(Codec, ACountMustFitWhatIsLeft) {
  // 3 items of at least 4 bytes each need 12 bytes; 11 are left.
  const std::string short_by_one = std::string("\x03\0\0\0", 4) + std::string(11, 'x');
  codec::Reader r(short_by_one);
  EXPECT_EQ(r.count(4), 0u);
  EXPECT_EQ(r.failure(), codec::Failure::kBadCount);
  const std::string exact = std::string("\x03\0\0\0", 4) + std::string(12, 'x');
  codec::Reader ok(exact);
  EXPECT_EQ(ok.count(4), 3u);
  EXPECT_TRUE(ok.ok());
  codec::Reader huge(std::string_view("\xff\xff\xff\xff", 4));
  EXPECT_EQ(huge.count(1), 0u);  // never a reason to allocate 4 G items
  EXPECT_EQ(huge.failure(), codec::Failure::kBadCount);
}

TEST(Codec, FinishRefusesLeftovers) {
  codec::Reader r(std::string_view("\x01\x02", 2));
  EXPECT_EQ(r.u8(), 1);
  EXPECT_FALSE(r.finish());
  EXPECT_EQ(r.failure(), codec::Failure::kTrailingBytes);
}
