#include <gtest/gtest.h>

#include "hostfile/hostfile.h"
#include "test_support.h"

namespace dlaunch {
namespace {

using testing::catch_input_error;

Hostfile parse_text(const std::string& text) { return parse_plain_hostfile(text, "hosts.txt"); }

InputError plain_error(const std::string& text) {
  return catch_input_error([&] { parse_text(text); });
}

TEST(PlainHostfile, ReadsHostsSlotsUsersAndComments) {
  const Hostfile hf = parse_text(
      "# DeepSpeed style\n"
      "\n"
      "worker-1 slots=4\n"
      "  bob@worker-2   slots=2 max_slots=8   # trailing comment\n"
      "localhost\n");
  EXPECT_EQ(hf.source, "hosts.txt");
  ASSERT_EQ(hf.hosts.size(), 3u);
  EXPECT_EQ(hf.hosts[0].name, "worker-1");
  EXPECT_EQ(hf.hosts[0].slots, 4);
  EXPECT_EQ(hf.hosts[0].user, "");
  EXPECT_EQ(hf.hosts[0].transport, Transport::kSsh);
  EXPECT_EQ(hf.hosts[0].pos.line, 3);
  EXPECT_EQ(hf.hosts[0].pos.column, 1);
  EXPECT_EQ(hf.hosts[1].host, "worker-2");
  EXPECT_EQ(hf.hosts[1].user, "bob");
  EXPECT_EQ(hf.hosts[1].slots, 2);
  EXPECT_EQ(hf.hosts[1].pos.column, 3);
  EXPECT_EQ(hf.hosts[2].slots, 1);
  EXPECT_EQ(hf.hosts[2].transport, Transport::kLocal);
}

TEST(PlainHostfile, AcceptsWindowsLineEndings) {
  const Hostfile hf = parse_text("a slots=2\r\nb\r\n");
  ASSERT_EQ(hf.hosts.size(), 2u);
  EXPECT_EQ(hf.hosts[1].name, "b");
}

TEST(PlainHostfile, MaxSlotsBelowSlotsIsError) {
  const InputError e = plain_error("a slots=4 max_slots=2\n");
  EXPECT_STREQ(e.what(),
               "hosts.txt:1:21: max_slots: max_slots (2) is less than slots (4) "
               "(hint: raise max_slots or lower slots)");
}

// mpirun(1): "The max_slots field specifies such a limit. When it does, the
// slots value defaults to the limit."
TEST(PlainHostfile, MaxSlotsWithoutSlotsIsTheSlotCount) {
  const Hostfile hf = parse_plain_hostfile("aa slots=4 max_slots=4\nbb max_slots=4\ncc\n", "h");
  ASSERT_EQ(hf.hosts.size(), 3u);
  EXPECT_EQ(hf.hosts[0].slots, 4);
  EXPECT_EQ(hf.hosts[1].slots, 4);
  EXPECT_EQ(hf.hosts[2].slots, 1);
}

TEST(PlainHostfile, GarbageTokenReportsItsColumn) {
  const InputError e = plain_error("a slots=2\nnode1 slots=2 extra\n");
  EXPECT_EQ(e.pos().line, 2);
  EXPECT_EQ(e.pos().column, 15);
  EXPECT_EQ(e.message(), "unexpected 'extra'");
  EXPECT_NE(e.hint().find("[user@]host [slots=N] [max_slots=N]"), std::string::npos);
}

TEST(PlainHostfile, UnknownKeySuggestsClosest) {
  const InputError e = plain_error("node1 slot=2\n");
  EXPECT_EQ(e.pos().column, 7);
  EXPECT_EQ(e.field(), "slot");
  EXPECT_EQ(e.hint(), "did you mean 'slots'?");
}

TEST(PlainHostfile, SlotsValueMustBePositiveInteger) {
  const InputError e = plain_error("node1 slots=x\n");
  EXPECT_STREQ(
      e.what(),
      "hosts.txt:1:13: slots: expected a positive integer, got 'x' (hint: write `slots=4`)");
  EXPECT_EQ(plain_error("node1 slots=0\n").pos().column, 13);
  EXPECT_EQ(plain_error("node1 slots=\n").field(), "slots");
}

TEST(PlainHostfile, SlotsGivenTwiceIsError) {
  const InputError e = plain_error("node1 slots=1 slots=2\n");
  EXPECT_EQ(e.pos().column, 15);
  EXPECT_EQ(e.message(), "slots given twice");
}

TEST(PlainHostfile, HostColonSlotsIsRejected) {
  const InputError e = plain_error("node1:4\n");
  EXPECT_EQ(e.pos().column, 6);
  EXPECT_EQ(e.field(), "host");
  EXPECT_NE(e.hint().find("slots=N"), std::string::npos);
}

TEST(PlainHostfile, BadCharactersInUserAndHost) {
  const InputError empty_user = plain_error("@node1\n");
  EXPECT_EQ(empty_user.field(), "user");
  EXPECT_EQ(empty_user.pos().column, 1);
  const InputError bad_host = plain_error("bob@no/de\n");
  EXPECT_EQ(bad_host.field(), "host");
  EXPECT_EQ(bad_host.pos().column, 7);
}

TEST(PlainHostfile, DuplicateHostNamesFirstLine) {
  const InputError e = plain_error("a\nb\n  a slots=2\n");
  EXPECT_STREQ(e.what(),
               "hosts.txt:3:3: host: duplicate host 'a' (first defined at line 1) "
               "(hint: each host may appear once)");
}

TEST(PlainHostfile, NoHostsIsError) {
  const InputError e = plain_error("# only a comment\n\n");
  EXPECT_EQ(e.field(), "hosts");
  EXPECT_EQ(e.message(), "no hosts defined");
}

TEST(PlainHostfile, LooksLikePlainAcceptsPlainLines) {
  EXPECT_TRUE(looks_like_plain("node1 slots=4\n# c\n\nbob@node2 max_slots=2\n"));
  EXPECT_TRUE(looks_like_plain("localhost"));
  EXPECT_TRUE(looks_like_plain("::1 slots=2\n"));
}

TEST(PlainHostfile, LooksLikePlainRejectsYamlAndEmptyText) {
  EXPECT_FALSE(looks_like_plain(""));
  EXPECT_FALSE(looks_like_plain("# only a comment\n"));
  EXPECT_FALSE(looks_like_plain("hosts:\n  - host: a\n"));
  EXPECT_FALSE(looks_like_plain("- a\n- b\n"));
  EXPECT_FALSE(looks_like_plain("node1 slots=four\n"));
  EXPECT_FALSE(looks_like_plain("node1:4\n"));
}

}  // namespace
}  // namespace dlaunch
