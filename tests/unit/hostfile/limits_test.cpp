// Counts and sizes from input are checked against dlaunch's limits at the
// field that gives them, before anything proportional is allocated (issue 15,
// items 5 and 8).
#include <string>

#include "dlaunch/tunables.h"
#include "test_support.h"

using dlaunch::parse_hostfile_file;
using dlaunch::parse_inline_hosts;
using dlaunch::parse_plain_hostfile;
using dlaunch::parse_yaml_hostfile;
using dlaunch::testing::catch_input_error;
using dlaunch::testing::TempDir;

TEST(Limits, SlotsOverThePerNodeLimitAreRefusedAtTheField) {
  const std::string over = "1000000000 is over the limit of 4096 ranks per node";
  auto e = catch_input_error(
      [] { parse_yaml_hostfile("hosts:\n  - host: a\n    slots: 1000000000\n", "h.yaml"); });
  EXPECT_EQ(std::string(e.what()), "h.yaml:3:12: slots: " + over);
  e = catch_input_error([] { parse_plain_hostfile("a slots=1000000000\n", "h"); });
  EXPECT_EQ(e.pos().line, 1);
  EXPECT_EQ(e.pos().column, 9);
  EXPECT_EQ(e.message(), over);
  e = catch_input_error([] { parse_inline_hosts("localhost:1000000000"); });
  EXPECT_EQ(e.message(), over);
  // The limit itself is fine.
  EXPECT_EQ(parse_inline_hosts("localhost:4096").hosts.at(0).slots, 4096);
  // A YAML default counts too.
  e = catch_input_error(
      [] { parse_yaml_hostfile("defaults: {slots: 5000}\nhosts:\n  - host: a\n", "h.yaml"); });
  EXPECT_EQ(e.pos().line, 1);
}

TEST(Limits, MoreHostsThanAJobMayHaveAreRefusedAtTheFirstOneTooMany) {
  const long long n = dlaunch::limits::kMaxNodesPerJob + 1;
  std::string inline_spec, plain;
  for (long long i = 0; i < n; ++i) {
    inline_spec += (i ? ",h" : "h") + std::to_string(i);
    plain += "h" + std::to_string(i) + "\n";
  }
  auto e = catch_input_error([&] { parse_inline_hosts(inline_spec); });
  EXPECT_EQ(e.message(), "more than 65536 hosts, the limit per job");
  e = catch_input_error([&] { parse_plain_hostfile(plain, "many"); });
  EXPECT_EQ(e.pos().line, n);
  EXPECT_EQ(e.message(), "more than 65536 hosts, the limit per job");
}

TEST(PlainFormat, ErrorsAreTheFieldsNotAYamlComplaint) {
  TempDir dir;
  auto e =
      catch_input_error([&] { parse_hostfile_file(dir.write("hosts", "localhost slots=0\n")); });
  EXPECT_EQ(e.pos().line, 1);
  EXPECT_EQ(e.pos().column, 17);
  EXPECT_EQ(e.field(), "slots");
  EXPECT_EQ(e.message(), "expected a positive integer, got '0'");
  e = catch_input_error([&] { parse_hostfile_file(dir.write("semi", "local;host slots=2\n")); });
  EXPECT_EQ(e.pos().column, 6);
  EXPECT_EQ(e.field(), "host");
  // A byte order mark is no error in either format.
  const auto hosts = parse_hostfile_file(dir.write("bom", "\xEF\xBB\xBFlocalhost slots=2\n"));
  EXPECT_EQ(hosts.hosts.at(0).slots, 2);
  const auto yaml = parse_hostfile_file(dir.write("bom.yaml", "\xEF\xBB\xBFhosts: [{host: a}]\n"));
  EXPECT_EQ(yaml.hosts.at(0).host, "a");
  EXPECT_TRUE(dlaunch::looks_like_yaml("# c\nhosts:\n  - host: a\n"));
  EXPECT_TRUE(dlaunch::looks_like_yaml("- host: a\n"));
  EXPECT_FALSE(dlaunch::looks_like_yaml("[::1] slots=2\n"));
  EXPECT_FALSE(dlaunch::looks_like_yaml("node1:4\n"));
}

TEST(YamlFormat, TabsGetAHintAboutTabs) {
  const auto e =
      catch_input_error([] { parse_yaml_hostfile("hosts:\n  - host: a\n\tslots: 2\n", "t.yaml"); });
  EXPECT_EQ(e.hint(), "YAML indents with spaces only; this file has tabs");
}
