#include <gtest/gtest.h>

#include "hostfile/hostfile.h"

namespace dlaunch {
namespace {

TEST(InputErrorFormat, FullPositionFieldAndHint) {
  const InputError e({"hosts.yaml", 3, 7}, "slots", "expected a positive integer", "write 4");
  EXPECT_STREQ(e.what(), "hosts.yaml:3:7: slots: expected a positive integer (hint: write 4)");
  EXPECT_EQ(e.pos().source, "hosts.yaml");
  EXPECT_EQ(e.pos().line, 3);
  EXPECT_EQ(e.pos().column, 7);
  EXPECT_EQ(e.field(), "slots");
  EXPECT_EQ(e.message(), "expected a positive integer");
  EXPECT_EQ(e.hint(), "write 4");
}

TEST(InputErrorFormat, OmitsUnknownColumn) {
  const InputError e({"h", 2, 0}, "host", "bad");
  EXPECT_STREQ(e.what(), "h:2: host: bad");
}

TEST(InputErrorFormat, OmitsUnknownLineAndColumn) {
  const InputError e({"h", 0, 0}, "hostfile", "file not found", "check it");
  EXPECT_STREQ(e.what(), "h: hostfile: file not found (hint: check it)");
}

TEST(InputErrorFormat, OmitsEmptyFieldAndHint) {
  const InputError e({"-H", 1, 4}, "", "bad");
  EXPECT_STREQ(e.what(), "-H:1:4: bad");
}

TEST(LocalHost, RecognisesLoopbackNames) {
  EXPECT_TRUE(is_local_host("localhost"));
  EXPECT_TRUE(is_local_host("localhost.localdomain"));
  EXPECT_TRUE(is_local_host("127.0.0.1"));
  EXPECT_TRUE(is_local_host("127.0.0.5"));
  EXPECT_TRUE(is_local_host("127.255.1.0"));
  EXPECT_TRUE(is_local_host("::1"));
}

TEST(LocalHost, RejectsOtherAndMalformedAddresses) {
  EXPECT_FALSE(is_local_host("node1"));
  EXPECT_FALSE(is_local_host("10.0.0.1"));
  EXPECT_FALSE(is_local_host("127.0.0"));
  EXPECT_FALSE(is_local_host("127.0.0.256"));
  EXPECT_FALSE(is_local_host("127.0.0.1.2"));
  EXPECT_FALSE(is_local_host("127.0.0.x"));
  EXPECT_FALSE(is_local_host("127.0.0."));
  EXPECT_FALSE(is_local_host("127.-1.0.1"));
  EXPECT_FALSE(is_local_host("localhost2"));
  EXPECT_FALSE(is_local_host("::2"));
  EXPECT_FALSE(is_local_host(""));
}

}  // namespace
}  // namespace dlaunch
