#include <gtest/gtest.h>

#include "hostfile/hostfile.h"
#include "test_support.h"

namespace dlaunch {
namespace {

using testing::catch_input_error;
using testing::TempDir;

constexpr const char* kNoFallbackHint =
    "check the path; dlaunch never falls back to running locally";

TEST(HostfileFile, MissingFileIsErrorNamingIt) {
  TempDir dir;
  const std::string path = (dir.path() / "absent.yaml").string();
  const InputError e = catch_input_error([&] { parse_hostfile_file(path); });
  EXPECT_EQ(e.what(), path + ": hostfile: file not found (hint: " + kNoFallbackHint + ")");
  EXPECT_EQ(e.pos().source, path);
  EXPECT_EQ(e.field(), "hostfile");
}

TEST(HostfileFile, DirectoryIsError) {
  TempDir dir;
  const InputError e = catch_input_error([&] { parse_hostfile_file(dir.path().string()); });
  EXPECT_EQ(e.field(), "hostfile");
  EXPECT_EQ(e.hint(), kNoFallbackHint);
}

TEST(HostfileFile, YamlExtensionForcesYaml) {
  TempDir dir;
  const std::string path = dir.write("h.yml", "node1 slots=2\n");
  const InputError e = catch_input_error([&] { parse_hostfile_file(path); });
  EXPECT_EQ(e.pos().source, path);
  EXPECT_EQ(e.message(), "expected a sequence of hosts, got 'node1 slots=2'");
}

TEST(HostfileFile, PlainTextWithoutExtensionIsPlain) {
  TempDir dir;
  const std::string path = dir.write("hosts", "node1 slots=2\nnode2 slots=2\n");
  const Hostfile hf = parse_hostfile_file(path);
  EXPECT_EQ(hf.source, path);
  ASSERT_EQ(hf.hosts.size(), 2u);
  EXPECT_EQ(hf.hosts[1].slots, 2);
}

TEST(HostfileFile, YamlWithoutExtensionIsYaml) {
  TempDir dir;
  const std::string path = dir.write("cluster.txt", "hosts:\n  - host: node1\n    slots: 3\n");
  const Hostfile hf = parse_hostfile_file(path);
  ASSERT_EQ(hf.hosts.size(), 1u);
  EXPECT_EQ(hf.hosts[0].slots, 3);
}

TEST(HostfileFile, ErrorsInsideAFileNameThePath) {
  TempDir dir;
  const std::string path = dir.write("bad.yaml", "hosts:\n  - host: a\n    slot: 2\n");
  const InputError e = catch_input_error([&] { parse_hostfile_file(path); });
  EXPECT_EQ(e.pos().source, path);
  EXPECT_EQ(e.pos().line, 3);
}

TEST(HostsArgument, ExistingFileIsRead) {
  TempDir dir;
  const std::string path = dir.write("nodes", "a slots=2\n");
  const Hostfile hf = parse_hosts_argument(path);
  EXPECT_EQ(hf.source, path);
  EXPECT_EQ(hf.hosts[0].slots, 2);
}

TEST(HostsArgument, MissingYamlNameIsErrorNotInline) {
  const InputError e = catch_input_error([] { parse_hosts_argument("dlaunch-no-such-file.yaml"); });
  EXPECT_EQ(e.pos().source, "dlaunch-no-such-file.yaml");
  EXPECT_EQ(e.message(), "file not found");
  EXPECT_EQ(e.hint(), kNoFallbackHint);
}

TEST(HostsArgument, MissingPathWithSlashIsError) {
  const InputError e = catch_input_error([] { parse_hosts_argument("dlaunch-no-such-dir/x"); });
  EXPECT_EQ(e.field(), "hostfile");
  EXPECT_EQ(e.message(), "file not found");
}

TEST(HostsArgument, OtherValuesAreInlineHosts) {
  const Hostfile hf = parse_hosts_argument("a:2,b");
  EXPECT_EQ(hf.source, "-H");
  ASSERT_EQ(hf.hosts.size(), 2u);
  EXPECT_EQ(hf.hosts[0].slots, 2);
  EXPECT_EQ(hf.hosts[1].slots, 1);
}

TEST(ExampleHostfiles, LocalhostYamlHasTwoLocalNodes) {
  const Hostfile hf = parse_hostfile_file(DLAUNCH_SOURCE_DIR "/hostfiles/localhost.yaml");
  ASSERT_EQ(hf.hosts.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    const HostEntry& h = hf.hosts[static_cast<std::size_t>(i)];
    EXPECT_EQ(h.name, "node" + std::to_string(i));
    EXPECT_EQ(h.host, "localhost");
    EXPECT_EQ(h.slots, 2);
    EXPECT_EQ(h.transport, Transport::kLocal);
  }
}

TEST(ExampleHostfiles, SshExampleParses) {
  const Hostfile hf = parse_hostfile_file(DLAUNCH_SOURCE_DIR "/hostfiles/example.yaml");
  ASSERT_GE(hf.hosts.size(), 2u);
  for (const auto& h : hf.hosts) EXPECT_EQ(h.transport, Transport::kSsh) << h.name;
}

TEST(ExampleHostfiles, PlainExampleIsDetectedAsPlain) {
  const Hostfile hf = parse_hostfile_file(DLAUNCH_SOURCE_DIR "/hostfiles/example.plain");
  ASSERT_GE(hf.hosts.size(), 2u);
}

}  // namespace
}  // namespace dlaunch
