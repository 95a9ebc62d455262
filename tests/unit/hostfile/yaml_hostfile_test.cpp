#include <gtest/gtest.h>

#include "hostfile/hostfile.h"
#include "test_support.h"

namespace dlaunch {
namespace {

using testing::catch_input_error;

Hostfile parse(const std::string& text) { return parse_yaml_hostfile(text, "h.yaml"); }

InputError parse_error(const std::string& text) {
  return catch_input_error([&] { parse(text); });
}

void expect_pos(const InputError& e, int line, int column) {
  EXPECT_EQ(e.pos().source, "h.yaml") << e.what();
  EXPECT_EQ(e.pos().line, line) << e.what();
  EXPECT_EQ(e.pos().column, column) << e.what();
}

TEST(YamlHostfile, ReadsScalarAndMapHosts) {
  const Hostfile hf = parse(
      "hosts:\n"
      "  - alpha\n"
      "  - host: beta\n"
      "    name: b\n"
      "    slots: 4\n"
      "    user: bob\n"
      "    port: 2222\n"
      "    address: 10.0.0.2\n"
      "    gpus: [3, 1, 2, 0]\n"
      "    agent: /opt/dlaunch/bin/dlaunch-agent\n");
  EXPECT_EQ(hf.source, "h.yaml");
  ASSERT_EQ(hf.hosts.size(), 2u);
  const HostEntry& a = hf.hosts[0];
  EXPECT_EQ(a.name, "alpha");
  EXPECT_EQ(a.host, "alpha");
  EXPECT_EQ(a.slots, 1);
  EXPECT_EQ(a.user, "");
  EXPECT_EQ(a.port, 22);
  EXPECT_TRUE(a.gpus.empty());
  EXPECT_EQ(a.transport, Transport::kSsh);
  EXPECT_EQ(a.pos.line, 2);
  EXPECT_EQ(a.pos.column, 5);
  const HostEntry& b = hf.hosts[1];
  EXPECT_EQ(b.name, "b");
  EXPECT_EQ(b.host, "beta");
  EXPECT_EQ(b.slots, 4);
  EXPECT_EQ(b.user, "bob");
  EXPECT_EQ(b.port, 2222);
  EXPECT_EQ(b.address, "10.0.0.2");
  EXPECT_EQ(b.gpus, (std::vector<int>{3, 1, 2, 0}));
  EXPECT_EQ(b.agent, "/opt/dlaunch/bin/dlaunch-agent");
  EXPECT_EQ(b.pos.line, 3);
}

TEST(YamlHostfile, AcceptsTopLevelSequence) {
  const Hostfile hf = parse("- node1\n- host: node2\n  slots: 2\n");
  ASSERT_EQ(hf.hosts.size(), 2u);
  EXPECT_EQ(hf.hosts[1].name, "node2");
  EXPECT_EQ(hf.hosts[1].slots, 2);
  EXPECT_TRUE(hf.env.empty());
}

TEST(YamlHostfile, DefaultsApplyAndHostValuesWin) {
  const Hostfile hf = parse(
      "defaults:\n"
      "  slots: 8\n"
      "  user: train\n"
      "  port: 2200\n"
      "  gpus: [0, 1, 2, 3, 4, 5, 6, 7]\n"
      "  agent: /usr/bin/dlaunch-agent\n"
      "hosts:\n"
      "  - node1\n"
      "  - host: node2\n"
      "    slots: 2\n"
      "    user: root\n"
      "    port: 22\n"
      "    gpus: [5, 6]\n"
      "    agent: /a\n");
  const HostEntry& d = hf.hosts[0];
  EXPECT_EQ(d.slots, 8);
  EXPECT_EQ(d.user, "train");
  EXPECT_EQ(d.port, 2200);
  EXPECT_EQ(d.gpus, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(d.agent, "/usr/bin/dlaunch-agent");
  const HostEntry& own = hf.hosts[1];
  EXPECT_EQ(own.slots, 2);
  EXPECT_EQ(own.user, "root");
  EXPECT_EQ(own.port, 22);
  EXPECT_EQ(own.gpus, (std::vector<int>{5, 6}));
  EXPECT_EQ(own.agent, "/a");
}

TEST(YamlHostfile, EnvMergesDefaultsThenHostInOrderKeepingText) {
  const Hostfile hf = parse(
      "env:\n"
      "  NCCL_DEBUG: INFO\n"
      "  MASK: 0x10\n"
      "defaults:\n"
      "  env: {A: 1, B: 2, C: 3}\n"
      "hosts:\n"
      "  - host: node1\n"
      "    env:\n"
      "      B: 20\n"
      "      D: \"quoted text\"\n"
      "      _E1: true\n"
      "  - node2\n");
  EXPECT_EQ(hf.env, (EnvList{{"NCCL_DEBUG", "INFO"}, {"MASK", "0x10"}}));
  EXPECT_EQ(hf.hosts[0].env,
            (EnvList{{"A", "1"}, {"B", "20"}, {"C", "3"}, {"D", "quoted text"}, {"_E1", "true"}}));
  EXPECT_EQ(hf.hosts[1].env, (EnvList{{"A", "1"}, {"B", "2"}, {"C", "3"}}));
}

TEST(YamlHostfile, ResolvesTransportFromHostUnlessExplicit) {
  const Hostfile hf = parse(
      "hosts:\n"
      "  - localhost\n"
      "  - 127.0.0.5\n"
      "  - \"::1\"\n"
      "  - node1\n"
      "  - {host: localhost, name: forced-ssh, transport: ssh}\n"
      "  - {host: node2, transport: local}\n");
  ASSERT_EQ(hf.hosts.size(), 6u);
  EXPECT_EQ(hf.hosts[0].transport, Transport::kLocal);
  EXPECT_EQ(hf.hosts[1].transport, Transport::kLocal);
  EXPECT_EQ(hf.hosts[2].transport, Transport::kLocal);
  EXPECT_EQ(hf.hosts[3].transport, Transport::kSsh);
  EXPECT_EQ(hf.hosts[4].transport, Transport::kSsh);
  EXPECT_EQ(hf.hosts[5].transport, Transport::kLocal);
}

TEST(YamlHostfile, DefaultTransportAppliesToEveryHost) {
  const Hostfile hf = parse("defaults: {transport: ssh}\nhosts: [localhost]\n");
  EXPECT_EQ(hf.hosts[0].transport, Transport::kSsh);
}

TEST(YamlHostfile, SlurmTransportIsAccepted) {
  const Hostfile hf = parse("defaults: {transport: slurm}\nhosts: [node1, {host: node2}]\n");
  EXPECT_EQ(hf.hosts[0].transport, Transport::kSlurm);
  EXPECT_EQ(hf.hosts[1].transport, Transport::kSlurm);
}

TEST(YamlHostfile, LogicalNodesOnOneHostNeedDistinctNames) {
  const Hostfile hf = parse(
      "hosts:\n"
      "  - {host: localhost, name: node0, slots: 2}\n"
      "  - {host: localhost, name: node1, slots: 2}\n");
  EXPECT_EQ(hf.hosts[0].name, "node0");
  EXPECT_EQ(hf.hosts[1].name, "node1");
  EXPECT_EQ(hf.hosts[1].host, "localhost");
}

TEST(YamlHostfile, SyntaxErrorReportsOneBasedPosition) {
  const InputError e = parse_error("hosts:\n  - host: a\n    slots: [1, 2\n");
  EXPECT_EQ(e.field(), "yaml");
  EXPECT_EQ(e.pos().source, "h.yaml");
  EXPECT_GE(e.pos().line, 3);
  EXPECT_GE(e.pos().column, 1);
  EXPECT_NE(e.message().find("syntax error"), std::string::npos);
}

TEST(YamlHostfile, SyntaxErrorPositionMatchesYamlMark) {
  // yaml-cpp marks the second ':' (0-based 1:11), reported 1-based.
  const InputError e = parse_error("hosts:\n  - host: a: b\n");
  expect_pos(e, 2, 12);
  EXPECT_EQ(e.message(), "syntax error: illegal map value");
  EXPECT_EQ(e.field(), "yaml");
}

TEST(YamlHostfile, UnknownKeySuggestsClosest) {
  const InputError e = parse_error("hosts:\n  - host: a\n    slot: 4\n");
  expect_pos(e, 3, 5);
  EXPECT_EQ(e.field(), "slot");
  EXPECT_EQ(e.hint(), "did you mean 'slots'?");
  EXPECT_STREQ(e.what(),
               "h.yaml:3:5: slot: unknown key 'slot' in host entry (hint: did you mean 'slots'?)");
}

TEST(YamlHostfile, UnknownKeyWithoutCloseMatchListsValidKeys) {
  const InputError e = parse_error("hosts:\n  - host: a\n    colour: red\n");
  expect_pos(e, 3, 5);
  EXPECT_EQ(
      e.hint(),
      "valid keys: host, name, slots, user, port, address, gpus, env, transport, agent, identity, "
      "ssh, container, health");
}

TEST(YamlHostfile, UnknownTopLevelKeySuggestsClosest) {
  const InputError e = parse_error("hots:\n  - a\n");
  expect_pos(e, 1, 1);
  EXPECT_EQ(e.field(), "hots");
  EXPECT_NE(e.message().find("top level"), std::string::npos);
  EXPECT_EQ(e.hint(), "did you mean 'hosts'?");
}

TEST(YamlHostfile, SingularHostAtTopLevelSuggestsHosts) {
  const InputError e = parse_error("host: a\n");
  expect_pos(e, 1, 1);
  EXPECT_EQ(e.hint(), "did you mean 'hosts'?");
}

TEST(YamlHostfile, UnknownDefaultsKeySuggestsClosest) {
  const InputError e = parse_error("defaults:\n  prot: 2\nhosts: [a]\n");
  expect_pos(e, 2, 3);
  EXPECT_EQ(e.hint(), "did you mean 'port'?");
}

TEST(YamlHostfile, HostOnlyKeyInDefaultsIsExplained) {
  const InputError e = parse_error("defaults:\n  name: x\nhosts: [a]\n");
  expect_pos(e, 2, 3);
  EXPECT_EQ(e.field(), "name");
  EXPECT_NE(e.hint().find("belongs on a host entry"), std::string::npos);
  EXPECT_NE(e.hint().find("slots, user, port, gpus, env, transport, agent"), std::string::npos);
}

TEST(YamlHostfile, RepeatedKeyIsRejected) {
  const InputError e = parse_error("hosts:\n  - host: a\n    slots: 1\n    slots: 2\n");
  expect_pos(e, 4, 5);
  EXPECT_EQ(e.field(), "slots");
  EXPECT_NE(e.message().find("line 3"), std::string::npos);
}

TEST(YamlHostfile, SlotsMustBeAnInteger) {
  const InputError e = parse_error("hosts:\n  - host: a\n    slots: four\n");
  expect_pos(e, 3, 12);
  EXPECT_STREQ(e.what(), "h.yaml:3:12: slots: expected a positive integer, got 'four'");
}

TEST(YamlHostfile, SlotsRejectsSequence) {
  const InputError e = parse_error("hosts:\n  - host: a\n    slots: [1]\n");
  expect_pos(e, 3, 12);
  EXPECT_EQ(e.message(), "expected a positive integer, got a sequence");
}

TEST(YamlHostfile, SlotsMustBePositive) {
  for (const char* value : {"0", "-2"}) {
    const InputError e =
        parse_error(std::string("hosts:\n  - host: a\n    slots: ") + value + "\n");
    expect_pos(e, 3, 12);
    EXPECT_EQ(e.field(), "slots");
    EXPECT_EQ(e.message(), std::string("expected a positive integer, got '") + value + "'");
  }
}

TEST(YamlHostfile, QuotedNumberIsAString) {
  const InputError e = parse_error("hosts:\n  - host: a\n    slots: \"4\"\n");
  expect_pos(e, 3, 12);
  EXPECT_EQ(e.hint(), "write the number without quotes");
}

TEST(YamlHostfile, MissingValueIsReportedAtTheKey) {
  const InputError e = parse_error("hosts:\n  - host: a\n    slots:\n    user: x\n");
  expect_pos(e, 3, 5);
  EXPECT_EQ(e.field(), "slots");
  EXPECT_NE(e.message().find("missing value"), std::string::npos);
}

TEST(YamlHostfile, PortMustBeInRange) {
  const InputError e = parse_error("hosts:\n  - host: a\n    port: 70000\n");
  expect_pos(e, 3, 11);
  EXPECT_EQ(e.field(), "port");
  EXPECT_EQ(e.message(), "expected a port number (1..65535), got '70000'");
}

TEST(YamlHostfile, GpusMustBeASequence) {
  const InputError e = parse_error("hosts:\n  - host: a\n    gpus: 3\n");
  expect_pos(e, 3, 11);
  EXPECT_EQ(e.field(), "gpus");
  EXPECT_EQ(e.hint(), "write `gpus: [3]`");
}

TEST(YamlHostfile, GpusMustBeDistinctNonNegative) {
  const InputError dup = parse_error("hosts:\n  - host: a\n    gpus: [0, 1, 0]\n");
  expect_pos(dup, 3, 18);
  EXPECT_EQ(dup.message(), "device id 0 is listed twice");
  const InputError negative = parse_error("hosts:\n  - host: a\n    gpus: [0, -1]\n");
  expect_pos(negative, 3, 15);
  EXPECT_EQ(negative.message(), "expected a non-negative device id, got '-1'");
}

TEST(YamlHostfile, EnvMustBeAMap) {
  const InputError e = parse_error("hosts:\n  - host: a\n    env: [a]\n");
  expect_pos(e, 3, 10);
  EXPECT_EQ(e.field(), "env");
  EXPECT_EQ(e.message(), "expected a map of NAME: value, got a sequence");
}

TEST(YamlHostfile, EnvNamesMustBeIdentifiers) {
  const InputError e = parse_error("env:\n  OK: 1\n  1BAD: 2\nhosts: [a]\n");
  expect_pos(e, 3, 3);
  EXPECT_EQ(e.field(), "env");
  EXPECT_EQ(e.message(), "invalid variable name '1BAD'");
  EXPECT_EQ(e.hint(), "names must match [A-Za-z_][A-Za-z0-9_]*");
  EXPECT_EQ(parse_error("env: {A-B: 1}\nhosts: [a]\n").message(), "invalid variable name 'A-B'");
}

TEST(YamlHostfile, EnvValueMustBeScalar) {
  const InputError nested = parse_error("env: {A: [1]}\nhosts: [a]\n");
  EXPECT_EQ(nested.message(), "value of 'A' must be a scalar, got a sequence");
  const InputError missing = parse_error("env:\n  A:\nhosts: [a]\n");
  expect_pos(missing, 2, 3);
  EXPECT_EQ(missing.hint(), "write `A: \"\"` for an empty value");
}

TEST(YamlHostfile, UnknownTransportSuggestsClosest) {
  const InputError e = parse_error("hosts:\n  - host: a\n    transport: sshh\n");
  expect_pos(e, 3, 16);
  EXPECT_EQ(e.field(), "transport");
  EXPECT_EQ(e.hint(), "did you mean 'ssh'?");
}

TEST(YamlHostfile, HostKeyIsRequired) {
  const InputError e = parse_error("hosts:\n  - name: a\n    slots: 2\n");
  expect_pos(e, 2, 5);
  EXPECT_EQ(e.field(), "host");
  EXPECT_EQ(e.message(), "missing required key 'host'");
}

TEST(YamlHostfile, HostMustBeNonEmptyWithoutWhitespace) {
  const InputError empty = parse_error("hosts:\n  - host: \"\"\n");
  expect_pos(empty, 2, 11);
  EXPECT_EQ(empty.message(), "host name must not be empty");
  const InputError spaced = parse_error("hosts:\n  - host: a b\n");
  expect_pos(spaced, 2, 11);
  EXPECT_EQ(spaced.message(), "host name 'a b' contains whitespace");
  const InputError missing = parse_error("hosts:\n  - host:\n");
  expect_pos(missing, 2, 5);
  EXPECT_EQ(missing.field(), "host");
}

TEST(YamlHostfile, UserAtHostPointsToUserKey) {
  const InputError e = parse_error("hosts:\n  - host: bob@a\n");
  EXPECT_EQ(e.hint(), "set the login name with `user:`");
}

TEST(YamlHostfile, DuplicateNameNamesFirstDefinition) {
  const InputError e = parse_error(
      "hosts:\n"
      "  - host: a\n"
      "    name: n\n"
      "  - host: b\n"
      "    name: n\n");
  expect_pos(e, 5, 11);
  EXPECT_EQ(e.field(), "name");
  EXPECT_STREQ(e.what(),
               "h.yaml:5:11: name: duplicate node name 'n' (first defined at line 2) "
               "(hint: give each logical node a distinct `name:`)");
}

TEST(YamlHostfile, SameHostTwiceWithoutNamesIsDuplicate) {
  const InputError e = parse_error("hosts:\n  - localhost\n  - host: localhost\n");
  expect_pos(e, 3, 11);
  EXPECT_EQ(e.hint(), "give each logical node a distinct `name:`");
}

TEST(YamlHostfile, EmptyHostListIsRejected) {
  const InputError e = parse_error("hosts: []\n");
  expect_pos(e, 1, 8);
  EXPECT_EQ(e.field(), "hosts");
  EXPECT_EQ(e.message(), "no hosts defined");
  EXPECT_EQ(parse_error("hosts:\n").field(), "hosts");
  EXPECT_EQ(parse_error("[]\n").message(), "no hosts defined");
}

TEST(YamlHostfile, EmptyDocumentIsRejected) {
  const InputError e = parse_error("# nothing here\n");
  EXPECT_STREQ(e.what(),
               "h.yaml: hosts: no hosts defined "
               "(hint: list at least one host, e.g. `hosts: [{host: localhost}]`)");
}

TEST(YamlHostfile, MissingHostsKeyIsRejected) {
  const InputError e = parse_error("defaults: {slots: 2}\n");
  expect_pos(e, 1, 1);
  EXPECT_EQ(e.message(), "missing required key 'hosts'");
}

TEST(YamlHostfile, HostsMustBeASequence) {
  const InputError e = parse_error("hosts: {host: a}\n");
  expect_pos(e, 1, 8);
  EXPECT_EQ(e.message(), "expected a sequence of hosts, got a map");
  EXPECT_EQ(parse_error("just-a-name\n").message(),
            "expected a sequence of hosts, got 'just-a-name'");
}

TEST(YamlHostfile, SecondDocumentIsRejected) {
  const InputError e = parse_error("- a\n---\n- b\n");
  expect_pos(e, 3, 1);
  EXPECT_EQ(e.field(), "yaml");
}

// yaml-cpp 0.7's LoadAll never returns on these, its memory growing (found by
// tests/fuzz/hostfile_fuzz; corpus file regress-yaml-loadall-hang).
TEST(YamlHostfile, StrayCommaIsASyntaxErrorNotAHang) {
  const InputError first = parse_error(",\n");
  expect_pos(first, 1, 1);
  EXPECT_EQ(first.field(), "yaml");
  EXPECT_EQ(first.message(), "syntax error: unexpected ','");
  const InputError later = parse_error("- a\n\n, b\n");
  expect_pos(later, 3, 1);
  EXPECT_EQ(later.message(), "syntax error: unexpected ','");
}

TEST(YamlHostfile, IdentityComesFromDefaultsUnlessTheHostSetsIt) {
  const Hostfile hf = parse(
      "defaults: {identity: /keys/cluster}\n"
      "hosts:\n"
      "  - a\n"
      "  - {host: b, identity: /keys/b}\n");
  ASSERT_EQ(hf.hosts.size(), 2u);
  EXPECT_EQ(hf.hosts[0].identity, "/keys/cluster");
  EXPECT_EQ(hf.hosts[1].identity, "/keys/b");
}

// docs/containers.md: a node's ranks run in its `container:` image (beating
// --container-image); a host without one takes the defaults' (or none).
TEST(YamlHostfile, ContainerComesFromDefaultsUnlessTheHostSetsIt) {
  const Hostfile hf = parse(
      "defaults: {container: localhost/train:1}\n"
      "hosts:\n"
      "  - a\n"
      "  - {host: b, container: 'registry.local:5000/team/train@sha256:abc'}\n");
  ASSERT_EQ(hf.hosts.size(), 2u);
  EXPECT_EQ(hf.hosts[0].container, "localhost/train:1");
  EXPECT_EQ(hf.hosts[1].container, "registry.local:5000/team/train@sha256:abc");
  EXPECT_EQ(parse("hosts: [a]\n").hosts[0].container, "");
  const InputError e = parse_error("hosts:\n  - {host: a, container: 'my image'}\n");
  expect_pos(e, 2, 26);
  EXPECT_EQ(e.field(), "container");
  EXPECT_EQ(e.message(), "'my image' is not an image name");
  const InputError dash = parse_error("hosts:\n  - host: a\n    container: --privileged\n");
  expect_pos(dash, 3, 16);
  EXPECT_EQ(dash.field(), "container");
}

// docs/health.md: `health:` thresholds under defaults: and a host, kept in
// that order with their places; the names are the judge's to check.
TEST(YamlHostfile, HealthThresholdsComeFromDefaultsThenTheHost) {
  const Hostfile hf = parse(
      "defaults:\n"
      "  health: {free_gb: 50, gpu_temp_c: 80}\n"
      "hosts:\n"
      "  - a\n"
      "  - host: b\n"
      "    health:\n"
      "      free_gb: 5\n");
  ASSERT_EQ(hf.hosts.size(), 2u);
  ASSERT_EQ(hf.hosts[0].health.size(), 2u);
  EXPECT_EQ(hf.hosts[0].health[0].name, "free_gb");
  EXPECT_EQ(hf.hosts[0].health[0].value, "50");
  EXPECT_TRUE(hf.hosts[0].health[0].from_defaults);
  EXPECT_EQ(hf.hosts[0].health[0].pos.line, 2);
  ASSERT_EQ(hf.hosts[1].health.size(), 3u);
  EXPECT_EQ(hf.hosts[1].health[2].name, "free_gb");
  EXPECT_EQ(hf.hosts[1].health[2].value, "5");
  EXPECT_FALSE(hf.hosts[1].health[2].from_defaults);
  EXPECT_EQ(hf.hosts[1].health[2].pos.line, 7);
  EXPECT_EQ(hf.hosts[1].health[2].pos.column, 7);
  EXPECT_TRUE(parse("hosts: [a]\n").hosts[0].health.empty());

  const InputError scalar = parse_error("hosts:\n  - {host: a, health: 5}\n");
  expect_pos(scalar, 2, 23);
  EXPECT_EQ(scalar.field(), "health");
  EXPECT_EQ(scalar.message(), "expected a map of threshold: value, got '5'");
  const InputError twice = parse_error(
      "defaults:\n  health:\n    free_gb: 1\n    free_gb: 2\n"
      "hosts: [a]\n");
  expect_pos(twice, 4, 5);
  EXPECT_EQ(twice.message(), "threshold 'free_gb' set twice (first at line 3)");
  const InputError empty = parse_error("hosts:\n  - host: a\n    health: {free_gb: }\n");
  EXPECT_EQ(empty.field(), "health");
  EXPECT_EQ(empty.message(), "threshold 'free_gb': expected a number, got nothing");
}

TEST(YamlHostfile, SshClientComesFromDefaultsUnlessTheHostSetsIt) {
  const Hostfile hf = parse(
      "defaults: {ssh: openssh}\n"
      "hosts:\n"
      "  - a\n"
      "  - {host: b, ssh: libssh2, port: 2222}\n");
  ASSERT_EQ(hf.hosts.size(), 2u);
  EXPECT_EQ(hf.hosts[0].ssh_client, SshClient::kOpenssh);
  EXPECT_EQ(hf.hosts[1].ssh_client, SshClient::kLibssh2);
  // Only a port the hostfile gives beats the ssh config's Port.
  EXPECT_FALSE(hf.hosts[0].port_given);
  EXPECT_TRUE(hf.hosts[1].port_given);
  const InputError e = parse_error("hosts:\n  - {host: a, ssh: opensssh}\n");
  expect_pos(e, 2, 20);
  EXPECT_EQ(e.field(), "ssh");
  EXPECT_NE(e.hint().find("openssh"), std::string::npos) << e.hint();
}

}  // namespace
}  // namespace dlaunch
