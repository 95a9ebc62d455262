// Values that parse but cannot work are refused at their field (issue 15,
// item 9): a host name no resolver or ssh would take as one, login names that
// ssh would read as options, empty addresses, NUL in env values, fewer GPUs
// than slots.
#include <string>

#include "test_support.h"

using dlaunch::parse_inline_hosts;
using dlaunch::parse_plain_hostfile;
using dlaunch::parse_yaml_hostfile;
using dlaunch::testing::catch_input_error;

namespace {
dlaunch::InputError yaml_error(const std::string& host_entry) {
  return catch_input_error(
      [&] { parse_yaml_hostfile("hosts:\n  - {" + host_entry + "}\n", "v.yaml"); });
}
}  // namespace

TEST(HostValues, ShellAndOptionSyntaxInNamesIsRefused) {
  EXPECT_EQ(yaml_error("host: \"$(reboot)\"").message(), "unexpected character '$' in host name");
  EXPECT_EQ(yaml_error("host: \"a`id`\"").message(), "unexpected character '`' in host name");
  EXPECT_EQ(yaml_error("host: \"a b\"").message(), "host name 'a b' contains whitespace");
  EXPECT_EQ(yaml_error("host: \"-oProxyCommand=x\"").message(), "host name starts with '-'");
  const auto e = yaml_error("host: " + std::string(100000, 'a'));
  EXPECT_EQ(e.message(), "host name is 100000 bytes, longer than DNS allows (253)");
  EXPECT_EQ(e.pos().line, 2);
  EXPECT_EQ(catch_input_error([] { parse_plain_hostfile("-oX slots=1\n", "p"); }).message(),
            "host name starts with '-'");
  EXPECT_EQ(catch_input_error([] { parse_inline_hosts("a,b;c"); }).message(),
            "unexpected character ';' in host name");
}

TEST(HostValues, UserAndAddressMustBeUsable) {
  EXPECT_EQ(yaml_error("host: a, user: \"bad user\"").message(),
            "unexpected character ' ' in user name");
  EXPECT_EQ(yaml_error("host: a, user: \"-oProxyCommand=x\"").message(),
            "user name starts with '-'");
  EXPECT_EQ(catch_input_error([] { parse_plain_hostfile("-root@a\n", "p"); }).message(),
            "user name starts with '-'");
  EXPECT_EQ(yaml_error("host: a, address: \"\"").message(), "must not be empty");
  EXPECT_EQ(yaml_error("host: a, address: \"a b\"").field(), "address");
}

TEST(HostValues, EnvValuesWithNulAndSlotsWithoutGpusAreRefused) {
  const auto nul = yaml_error("host: a, env: {A: \"x\\0y\"}");
  EXPECT_EQ(nul.message(), "value of 'A' contains a NUL byte, which no environment holds");
  const auto gpus = yaml_error("host: a, slots: 3, gpus: [0, 1]");
  EXPECT_EQ(gpus.field(), "gpus");
  EXPECT_EQ(gpus.message(), "host 'a' has 3 slots but 2 gpus: a rank would be left without one");
  EXPECT_NO_THROW(parse_yaml_hostfile("hosts:\n  - {host: a, slots: 2, gpus: [0, 1, 2]}\n", "v"));
}
