#include <gtest/gtest.h>

#include "hostfile/hostfile.h"
#include "test_support.h"

namespace dlaunch {
namespace {

using testing::catch_input_error;

InputError inline_error(const std::string& spec) {
  return catch_input_error([&] { parse_inline_hosts(spec); });
}

TEST(InlineHosts, SlotsDefaultToOne) {
  const Hostfile hf = parse_inline_hosts("a:4,b");
  EXPECT_EQ(hf.source, "-H");
  ASSERT_EQ(hf.hosts.size(), 2u);
  EXPECT_EQ(hf.hosts[0].name, "a");
  EXPECT_EQ(hf.hosts[0].slots, 4);
  EXPECT_EQ(hf.hosts[0].pos.column, 1);
  EXPECT_EQ(hf.hosts[1].name, "b");
  EXPECT_EQ(hf.hosts[1].slots, 1);
  EXPECT_EQ(hf.hosts[1].pos.column, 5);
  EXPECT_EQ(hf.hosts[1].transport, Transport::kSsh);
}

TEST(InlineHosts, Ipv6AddressesAreBracketed) {
  const Hostfile hf = parse_inline_hosts("[::1]:2,[fe80::1%eth0],127.0.0.1:3");
  ASSERT_EQ(hf.hosts.size(), 3u);
  EXPECT_EQ(hf.hosts[0].host, "::1");
  EXPECT_EQ(hf.hosts[0].slots, 2);
  EXPECT_EQ(hf.hosts[0].transport, Transport::kLocal);
  EXPECT_EQ(hf.hosts[1].host, "fe80::1%eth0");
  EXPECT_EQ(hf.hosts[1].slots, 1);
  EXPECT_EQ(hf.hosts[2].slots, 3);
  EXPECT_EQ(hf.hosts[2].transport, Transport::kLocal);
}

TEST(InlineHosts, BadSlotsReportColumn) {
  const InputError e = inline_error("a:4,b:x");
  EXPECT_STREQ(e.what(),
               "-H:1:7: slots: expected a positive integer, got 'x' "
               "(hint: write hosts as host[:slots], e.g. a:4,b:2,[::1]:2)");
  EXPECT_EQ(inline_error("a:0").pos().column, 3);
  EXPECT_EQ(inline_error("[::1]:").field(), "slots");
}

TEST(InlineHosts, UnbracketedIpv6IsRejected) {
  const InputError e = inline_error("a,::1:2");
  EXPECT_EQ(e.pos().column, 3);
  EXPECT_EQ(e.hint(), "write [::1]:2");
}

TEST(InlineHosts, MalformedBracketsAreRejected) {
  EXPECT_EQ(inline_error("[::1").message(), "missing ']' after IPv6 address");
  const InputError trailing = inline_error("[::1]x");
  EXPECT_EQ(trailing.pos().column, 6);
}

TEST(InlineHosts, EmptyEntriesAreRejected) {
  const InputError e = inline_error("a,,b");
  EXPECT_EQ(e.pos().column, 3);
  EXPECT_EQ(e.message(), "empty host entry");
  EXPECT_EQ(inline_error("").message(), "empty host entry");
  EXPECT_EQ(inline_error("a,").pos().column, 3);
}

TEST(InlineHosts, BadHostCharacterReportsColumn) {
  const InputError e = inline_error("a,b/c:2");
  EXPECT_EQ(e.pos().column, 4);
  EXPECT_EQ(e.field(), "host");
}

// mpirun(1): "-H aa,aa,bb launches two processes on node aa and one on bb".
TEST(InlineHosts, AHostNamedAgainAddsItsSlotsToTheFirst) {
  const Hostfile hf = parse_inline_hosts("a,b,a:2,a");
  ASSERT_EQ(hf.hosts.size(), 2u);
  EXPECT_EQ(hf.hosts[0].name, "a");
  EXPECT_EQ(hf.hosts[0].slots, 4);
  EXPECT_EQ(hf.hosts[1].name, "b");
  EXPECT_EQ(hf.hosts[1].slots, 1);
  const InputError e = inline_error("a:4000,a:100");
  EXPECT_EQ(e.field(), "slots");
  EXPECT_NE(e.message().find("'a' named again"), std::string::npos) << e.message();
}

}  // namespace
}  // namespace dlaunch
