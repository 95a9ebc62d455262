// How one SSH host's connection options come together
// (launcher/transport/ssh/host_options.h): hostfile and command line beat
// the ssh config, the config beats dlaunch's defaults; jump host chains;
// the agent-upload commands (agent_install.h).
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "dlaunch/version.h"
#include "transport/ssh/agent_install.h"
#include "transport/ssh/host_options.h"

namespace dlaunch::ssh {
namespace {

const std::string kHomeDir = "/home/me";

HostSettings settings(const std::string& config_text) {
  MemoryFiles files;
  files.files[kHomeDir + "/.ssh/config"] = config_text;
  LoadOptions lo;
  lo.home = kHomeDir;
  lo.files = &files;
  HostSettings s;
  s.config = std::make_shared<const SshConfig>(SshConfig::load(lo));
  s.context.local_user = "me";
  s.context.home = kHomeDir;
  s.context.local_host = "head";
  s.context.getenv = [](const std::string&) { return std::nullopt; };
  return s;
}

HostEntry ssh_host(const std::string& name) {
  HostEntry h;
  h.name = h.host = name;
  h.pos = {"hosts.yaml", 3, 5};
  return h;
}

TEST(SshHostOptions, WithoutAConfigTheHostfileAndDefaultsDecide) {
  HostSettings s;
  s.context.home = kHomeDir;
  auto h = ssh_host("node7");
  h.user = "alice";
  h.port = 2222;
  h.port_given = true;
  const auto o = resolve_host(h, s);
  EXPECT_EQ(o.host, "node7");
  EXPECT_EQ(o.user, "alice");
  EXPECT_EQ(o.port, 2222);
  EXPECT_TRUE(o.identity_files.empty());
  EXPECT_TRUE(o.default_identities);
  EXPECT_FALSE(o.identities_only);
  EXPECT_EQ(o.known_hosts, (std::vector<std::string>{kHomeDir + "/.ssh/known_hosts",
                                                     kHomeDir + "/.ssh/known_hosts2"}));
  EXPECT_EQ(o.host_key_policy, HostKeyPolicy::kStrict);
  EXPECT_TRUE(o.jumps.empty());
  EXPECT_TRUE(o.proxy_command.empty());
}

TEST(SshHostOptions, TheConfigFillsWhatTheHostfileLeavesOpen) {
  const auto s = settings(
      "Host gpu-*\n  HostName %h.cluster.internal\n  User trainer\n  Port 2200\n"
      "  IdentityFile ~/.ssh/cluster_key\n  IdentitiesOnly yes\n"
      "  UserKnownHostsFile ~/.ssh/cluster_hosts\n  HostKeyAlias gpu-alias\n"
      "  ConnectTimeout 7\n  ServerAliveInterval 4\n  StrictHostKeyChecking accept-new\n");
  const auto o = resolve_host(ssh_host("gpu-1"), s);
  EXPECT_EQ(o.alias, "gpu-1");
  EXPECT_EQ(o.host, "gpu-1.cluster.internal");
  EXPECT_EQ(o.user, "trainer");
  EXPECT_EQ(o.port, 2200);
  EXPECT_EQ(o.identity_files, std::vector<std::string>{kHomeDir + "/.ssh/cluster_key"});
  EXPECT_FALSE(o.default_identities);
  EXPECT_TRUE(o.identities_only);
  EXPECT_EQ(o.known_hosts, std::vector<std::string>{kHomeDir + "/.ssh/cluster_hosts"});
  EXPECT_EQ(o.host_key_alias, "gpu-alias");
  EXPECT_EQ(o.timeout, std::chrono::seconds(7));
  EXPECT_EQ(o.keepalive_s, 4);
  EXPECT_EQ(o.host_key_policy, HostKeyPolicy::kAcceptNew);
  EXPECT_EQ(o.display(), "gpu-1 (gpu-1.cluster.internal:2200)");
  EXPECT_EQ(o.where(), "trainer@gpu-1.cluster.internal:2200");
}

TEST(SshHostOptions, HostfileAndCommandLineBeatTheConfig) {
  auto s = settings(
      "Host *\n  User cfguser\n  Port 2200\n  IdentityFile /keys/cfg\n  ConnectTimeout 7\n"
      "  StrictHostKeyChecking no\n");
  s.host_key_policy = HostKeyPolicy::kStrict;
  s.host_key_policy_given = true;
  s.connect_timeout = std::chrono::milliseconds(1500);
  s.connect_timeout_given = true;
  auto h = ssh_host("n1");
  h.user = "fileuser";
  h.port = 2022;
  h.port_given = true;
  h.identity = "/keys/from-hostfile";
  const auto o = resolve_host(h, s);
  EXPECT_EQ(o.user, "fileuser");
  EXPECT_EQ(o.port, 2022);
  // The hostfile's key first, then the config's.
  EXPECT_EQ(o.identity_files, (std::vector<std::string>{"/keys/from-hostfile", "/keys/cfg"}));
  EXPECT_EQ(o.hostfile_identity, "/keys/from-hostfile");
  EXPECT_EQ(o.timeout, std::chrono::milliseconds(1500));
  EXPECT_EQ(o.host_key_policy, HostKeyPolicy::kStrict);
}

TEST(SshHostOptions, StrictHostKeyCheckingMapsToThePolicies) {
  EXPECT_EQ(resolve_host(ssh_host("a"), settings("StrictHostKeyChecking ask\n")).host_key_policy,
            HostKeyPolicy::kStrict);
  EXPECT_EQ(resolve_host(ssh_host("a"), settings("StrictHostKeyChecking no\n")).host_key_policy,
            HostKeyPolicy::kOff);
  EXPECT_EQ(resolve_host(ssh_host("a"), settings("StrictHostKeyChecking yes\n")).host_key_policy,
            HostKeyPolicy::kStrict);
}

TEST(SshHostOptions, ProxyJumpHopsAreResolvedThroughTheConfigToo) {
  const auto s2 = settings(
      "Host bastion\n  HostName 203.0.113.5\n  User jump\n  IdentityFile /keys/bastion\n"
      "Host gpu-1\n  HostName 10.0.0.11\n  ProxyJump bastion\n");
  const auto o = resolve_host(ssh_host("gpu-1"), s2);
  ASSERT_EQ(o.jumps.size(), 1u);
  EXPECT_EQ(o.host, "10.0.0.11");
  EXPECT_EQ(o.jumps[0].alias, "bastion");
  EXPECT_EQ(o.jumps[0].host, "203.0.113.5");
  EXPECT_EQ(o.jumps[0].user, "jump");
  EXPECT_EQ(o.jumps[0].identity_files, std::vector<std::string>{"/keys/bastion"});
}

TEST(SshHostOptions, AChainListsEveryHopFirstHopFirstWithItsOwnJumpBeforeIt) {
  const auto s = settings(
      "Host outer\n  HostName 198.51.100.1\n"
      "Host inner\n  HostName 10.1.0.1\n  ProxyJump outer\n"
      "Host mid\n  HostName 10.2.0.1\n"
      "Host n1\n  HostName 10.3.0.1\n  ProxyJump inner,admin@mid:2022\n");
  const auto o = resolve_host(ssh_host("n1"), s);
  ASSERT_EQ(o.jumps.size(), 3u);
  EXPECT_EQ(o.jumps[0].host, "198.51.100.1");  // inner's own jump host
  EXPECT_EQ(o.jumps[1].host, "10.1.0.1");
  EXPECT_EQ(o.jumps[2].host, "10.2.0.1");
  EXPECT_EQ(o.jumps[2].user, "admin");
  EXPECT_EQ(o.jumps[2].port, 2022);
  for (const auto& j : o.jumps) EXPECT_TRUE(j.jumps.empty());
}

TEST(SshHostOptions, ABastionThatJumpsThroughItselfIsRefusedAsSshRefusesIt) {
  // `Host *` gives the bastion a ProxyJump to itself: ssh says "jumphost
  // loop" for it, so every host behind it fails (checked against ssh -G in
  // tests/integration/ssh_config_diff).
  try {
    (void)resolve_host(ssh_host("gpu-1"), settings("Host *\n  ProxyJump bastion\n"));
    ADD_FAILURE() << "not refused";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("jumphost loop via bastion"), std::string::npos)
        << e.what();
  }
  // With a HostName, ssh's check does not see it and each hop starts another
  // ssh: a chain that never ends, refused at kMaxProxyDepth.
  try {
    (void)resolve_host(
        ssh_host("gpu-1"),
        settings("Host bastion\n  HostName 203.0.113.5\nHost *\n  ProxyJump bastion\n"));
    ADD_FAILURE() << "not refused";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("nest deeper"), std::string::npos) << e.what();
  }
}

TEST(SshHostOptions, JumpHostsThatJumpThroughEachOtherAreAnInputErrorNamingTheHostEntry) {
  try {
    (void)resolve_host(ssh_host("x"), settings("Host x\n  ProxyJump a\nHost a\n  ProxyJump b\n"
                                               "Host b\n  ProxyJump a\n"));
    ADD_FAILURE() << "a -> b -> a never ends, for ssh too";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("hosts.yaml:3"), std::string::npos) << e.what();
  }
  // A chain deeper than the limit is refused.
  std::string deep;
  for (int i = 0; i < 12; ++i) {
    deep += "Host h" + std::to_string(i) + "\n  ProxyJump h" + std::to_string(i + 1) + "\n";
  }
  try {
    (void)resolve_host(ssh_host("h0"), settings(deep));
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("hosts.yaml:3:5"), std::string::npos) << what;
    EXPECT_NE(what.find("nest deeper than 8"), std::string::npos) << what;
    EXPECT_NE(what.find("h0 -> h1"), std::string::npos) << what;
  }
}

TEST(SshHostOptions, ProxyCommandIsExpandedAndKeptWhenNoProxyJumpCameFirst) {
  const auto s =
      settings("Host gpu-1\n  HostName 10.0.0.11\n  ProxyCommand ssh -W %h:%p bastion\n");
  const auto o = resolve_host(ssh_host("gpu-1"), s);
  EXPECT_TRUE(o.jumps.empty());
  EXPECT_EQ(o.proxy_command, "ssh -W 10.0.0.11:22 bastion");
}

TEST(SshHostOptions, DescribeShowsUserAddressKeysKnownHostsAndTheChain) {
  const auto s = settings(
      "Host bastion\n  HostName 203.0.113.5\nHost gpu-1\n  HostName 10.0.0.11\n  User u\n"
      "  ProxyJump bastion\n  IdentityFile /k/one\n  IdentitiesOnly yes\n"
      "  CertificateFile /k/one-cert.pub\n");
  const auto lines = describe(resolve_host(ssh_host("gpu-1"), s));
  std::string all;
  for (const auto& l : lines) all += l + "\n";
  EXPECT_NE(all.find("ssh: u@10.0.0.11:22\n"), std::string::npos) << all;
  EXPECT_NE(all.find("keys: /k/one\n"), std::string::npos) << all;  // no agent: IdentitiesOnly
  EXPECT_NE(all.find("certificates: /k/one-cert.pub (not offered"), std::string::npos) << all;
  EXPECT_NE(all.find("via: " + current_user() + "@203.0.113.5:22"), std::string::npos) << all;
}

TEST(SshAgentInstall, StartCommandPassesEverythingAsArgumentsToOneShellScript) {
  const AgentImage image = AgentImage::from_bytes("x");
  const std::string cmd = start_command("/opt/dl/bin/dlaunch-agent", &image);
  EXPECT_EQ(cmd.rfind("exec /bin/sh -c '", 0), 0u) << cmd;
  EXPECT_NE(cmd.find("exit 97"), std::string::npos) << cmd;
  EXPECT_NE(cmd.find("dlaunch-start " + image.key + " /opt/dl/bin/dlaunch-agent"),
            std::string::npos)
      << cmd;
  EXPECT_NE(cmd.find(image.sha256), std::string::npos) << cmd;
  // A forced path is run as it is.
  EXPECT_EQ(start_command("/x y/agent", nullptr), "exec '/x y/agent'");
}

TEST(SshAgentInstall, TheHashIsSha256AndTheKeyCarriesTheVersion) {
  EXPECT_NE(content_hash("a"), content_hash("b"));
  // sha256("abc"), FIPS 180-2's example.
  EXPECT_EQ(content_hash("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const AgentImage image = AgentImage::from_bytes("abc");
  EXPECT_EQ(image.key, std::string(kVersion) + "-ba7816bf8f01cfea414140de5dae2223");
}

// The scripts of agent_install.h, run by /bin/sh here with HOME in a
// temporary folder, as sshd would run them on a node.
class AgentInstallScript : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("dlaunch-install-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_ / "home");
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  struct Result {
    int status = -1;
    std::string out, err;
  };
  // Runs `command` (what the head sends over SSH) with `input` on stdin.
  Result run(const std::string& command, const std::string& input, const std::string& env = {}) {
    std::ofstream(dir_ / "cmd.sh") << command << "\n";
    std::ofstream(dir_ / "in", std::ios::binary) << input;
    const std::string sh = env + " HOME=" + (dir_ / "home").string() + " /bin/sh " +
                           (dir_ / "cmd.sh").string() + " < " + (dir_ / "in").string() + " > " +
                           (dir_ / "out").string() + " 2> " + (dir_ / "err").string();
    const int rc = std::system(sh.c_str());
    Result r;
    r.status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
    r.out = slurp(dir_ / "out");
    r.err = slurp(dir_ / "err");
    return r;
  }
  static std::string slurp(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
  }
  std::filesystem::path cache(const AgentImage& image) const {
    return dir_ / "home/.cache/dlaunch" / image.key;
  }
  // A stand-in agent: a script that answers --version like the real one.
  static AgentImage image(const std::string& body) {
    return AgentImage::from_bytes("#!/bin/sh\n" + body);
  }
  std::filesystem::path dir_;
};

TEST_F(AgentInstallScript, ACopyThatAnswersItsVersionIsPutInPlaceAndStartedFromThere) {
  const auto img = image("if [ \"$1\" = --version ]; then echo '" + expected_agent_version_line() +
                         "'; else echo started-from-cache; fi\n");
  const auto r = run(upload_command(img, "ok-marker"), img.packed());
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "ok-marker\n");
  const auto agent = cache(img) / "dlaunch-agent";
  struct stat st {};
  ASSERT_EQ(::stat(agent.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_EQ(content_hash(slurp(agent)), img.sha256);
  // Nothing else is left in the folder (no temporary copy).
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(cache(img))) files += e.exists() ? 1 : 0;
  EXPECT_EQ(files, 1);
  // The start command prefers the cached copy over the path (which does not exist).
  const auto s = run(start_command("/nonexistent/dlaunch-agent", &img), "");
  EXPECT_EQ(s.status, 0) << s.err;
  EXPECT_EQ(s.out, "started-from-cache\n");
}

TEST_F(AgentInstallScript, WithoutACopyOrAnAgentTheStartCommandExitsWithItsOwnStatus) {
  const auto img = image("exit 0\n");
  const auto s = run(start_command("/nonexistent/dlaunch-agent", &img), "");
  EXPECT_EQ(s.status, kNoAgentStatus);
  EXPECT_EQ(s.out, "");
}

TEST_F(AgentInstallScript, ACopyThatCannotRunThereIsRemovedAndTheLoadersMessageComesBack) {
  const auto img = image(
      "echo 'dlaunch-agent: error while loading shared libraries: libpmix.so.2: cannot open "
      "shared object file: No such file or directory' >&2; exit 127\n");
  const auto r = run(upload_command(img, "ok-marker"), img.packed());
  EXPECT_EQ(r.status, kUploadNoRunStatus);
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("libpmix.so.2"), std::string::npos) << r.err;
  EXPECT_TRUE(std::filesystem::is_empty(cache(img)));
}

TEST_F(AgentInstallScript, ACutTransferLeavesNothingUnderTheFinalName) {
  const auto img = image("echo '" + expected_agent_version_line() + "'\n");
  const auto r = run(upload_command(img), img.packed().substr(0, img.packed().size() / 2));
  EXPECT_EQ(r.status, kUploadBrokenStatus);
  EXPECT_NE(r.err.find("received " + std::to_string(img.packed().size() / 2) + " of " +
                       std::to_string(img.packed().size()) + " bytes"),
            std::string::npos)
      << r.err;
  EXPECT_TRUE(std::filesystem::is_empty(cache(img)));
}

// Issue 27 item 2: the cache runs nothing the head did not make, and the
// installed agent of this version comes first.
TEST_F(AgentInstallScript, TheInstalledAgentOfThisVersionIsPreferredToTheCache) {
  const auto img = image("if [ \"$1\" = --version ]; then echo '" + expected_agent_version_line() +
                         "'; else echo from-cache; fi\n");
  ASSERT_EQ(run(upload_command(img), img.packed()).status, 0);
  const auto installed = dir_ / "installed-agent";
  std::ofstream(installed) << "#!/bin/sh\nif [ \"$1\" = --version ]; then echo '"
                           << expected_agent_version_line() << "'; else echo installed; fi\n";
  std::filesystem::permissions(installed, std::filesystem::perms::owner_all);
  auto s = run(start_command(installed.string(), &img), "");
  EXPECT_EQ(s.status, 0) << s.err;
  EXPECT_EQ(s.out, "installed\n");
  // One of another version gives way to the cached copy.
  std::ofstream(installed) << "#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'dlaunch-agent "
                              "0.0.1 (protocol 1)'; else echo installed; fi\n";
  s = run(start_command(installed.string(), &img), "");
  EXPECT_EQ(s.status, 0) << s.err;
  EXPECT_EQ(s.out, "from-cache\n");
}

TEST_F(AgentInstallScript, ACachedCopyWhoseBytesChangedIsNeverRun) {
  const auto img = image("if [ \"$1\" = --version ]; then echo '" + expected_agent_version_line() +
                         "'; else echo from-cache; fi\n");
  ASSERT_EQ(run(upload_command(img), img.packed()).status, 0);
  const auto agent = cache(img) / "dlaunch-agent";
  std::ofstream(agent, std::ios::app) << "echo trojan\n";
  const auto s = run(start_command("/nonexistent/dlaunch-agent", &img), "");
  EXPECT_EQ(s.status, kNoAgentStatus);  // taken for absent: the head copies its own over it
  EXPECT_EQ(s.out, "");
  // The copy replaces it.
  ASSERT_EQ(run(upload_command(img), img.packed()).status, 0);
  EXPECT_EQ(content_hash(slurp(agent)), img.sha256);
  EXPECT_EQ(run(start_command("/nonexistent/dlaunch-agent", &img), "").out, "from-cache\n");
}

TEST_F(AgentInstallScript, ACacheFolderOthersMayWriteIsRefusedWithItsPath) {
  const auto img = image("if [ \"$1\" = --version ]; then echo '" + expected_agent_version_line() +
                         "'; else echo from-cache; fi\n");
  ASSERT_EQ(run(upload_command(img), img.packed()).status, 0);
  const auto dotcache = dir_ / "home/.cache";
  ::chmod(dotcache.c_str(), 0775);
  auto s = run(start_command("/nonexistent/dlaunch-agent", &img), "");
  EXPECT_EQ(s.status, kUnsafeCacheStatus);
  EXPECT_EQ(s.out, "");
  EXPECT_NE(s.err.find(dotcache.string() + " may be written by others (mode 775)"),
            std::string::npos)
      << s.err;
  auto u = run(upload_command(img), img.packed());
  EXPECT_EQ(u.status, kUnsafeCacheStatus);
  EXPECT_NE(u.err.find("may be written by others"), std::string::npos) << u.err;
  ::chmod(dotcache.c_str(), 0700);
  // Another user's folder, and a link instead of a folder.
  if (::geteuid() == 0) {
    const auto dl = dotcache / "dlaunch";
    ASSERT_EQ(::chown(dl.c_str(), 65534, 65534), 0);
    s = run(start_command("/nonexistent/dlaunch-agent", &img), "");
    EXPECT_EQ(s.status, kUnsafeCacheStatus);
    EXPECT_NE(s.err.find(dl.string() + " belongs to uid 65534, not to this user"),
              std::string::npos)
        << s.err;
    ASSERT_EQ(::chown(dl.c_str(), 0, 0), 0);
  }
  const auto folder = cache(img);
  std::filesystem::rename(folder, dir_ / "elsewhere");
  std::filesystem::create_directory_symlink(dir_ / "elsewhere", folder);
  s = run(start_command("/nonexistent/dlaunch-agent", &img), "");
  EXPECT_EQ(s.status, kUnsafeCacheStatus);
  EXPECT_NE(s.err.find(folder.string() + " is not a folder"), std::string::npos) << s.err;
  EXPECT_EQ(s.out, "");
}

TEST_F(AgentInstallScript, APlantedLinkAtTheAgentsNameIsNeverFollowed) {
  const auto img = image("if [ \"$1\" = --version ]; then echo '" + expected_agent_version_line() +
                         "'; else echo from-cache; fi\n");
  std::filesystem::create_directories(cache(img));
  ::chmod((dir_ / "home/.cache").c_str(), 0700);
  ::chmod((dir_ / "home/.cache/dlaunch").c_str(), 0700);
  ::chmod(cache(img).c_str(), 0700);
  const auto victim = dir_ / "victim";
  std::ofstream(victim) << "the user's file\n";
  ::chmod(victim.c_str(), 0600);
  std::filesystem::create_symlink(victim, cache(img) / "dlaunch-agent");
  auto s = run(start_command("/nonexistent/dlaunch-agent", &img), "");
  EXPECT_EQ(s.status, kNoAgentStatus);
  ASSERT_EQ(run(upload_command(img), img.packed()).status, 0);
  EXPECT_EQ(slurp(victim), "the user's file\n");
  struct stat st {};
  ASSERT_EQ(::stat(victim.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(::lstat((cache(img) / "dlaunch-agent").c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(run(start_command("/nonexistent/dlaunch-agent", &img), "").out, "from-cache\n");
}

// Issue 30: what travels is gzip's format, unpacked and checked on the node.
TEST_F(AgentInstallScript, TheAgentTravelsPackedAndIsUnpackedOnTheNode) {
  std::string body = "if [ \"$1\" = --version ]; then echo '" + expected_agent_version_line() +
                     "'; else echo unpacked; fi\nexit 0\n";
  for (int i = 0; i < 2000; ++i) body += "# padding that packs well\n";
  const auto img = image(body);
  ASSERT_GE(img.packed().size(), 2u);
  EXPECT_EQ(static_cast<unsigned char>(img.packed()[0]), 0x1f);  // gzip's magic
  EXPECT_EQ(static_cast<unsigned char>(img.packed()[1]), 0x8b);
  EXPECT_LT(img.packed().size() * 10, img.size);
  EXPECT_EQ(img.packed_sha256(), content_hash(img.packed()));
  const auto r = run(upload_command(img, "ok-marker"), img.packed());
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(content_hash(slurp(cache(img) / "dlaunch-agent")), img.sha256);
  EXPECT_EQ(run(start_command("/nonexistent/dlaunch-agent", &img), "").out, "unpacked\n");
}

TEST_F(AgentInstallScript, ANodeWithoutGzipSaysSoAndKeepsNothing) {
  const auto img = image("echo '" + expected_agent_version_line() + "'\n");
  // A PATH with every program the script uses but gzip.
  const auto bin = dir_ / "bin";
  std::filesystem::create_directories(bin);
  for (const char* tool :
       {"id", "stat", "mkdir", "mktemp", "cat", "wc", "sha256sum", "chmod", "mv", "rm"}) {
    for (const char* dir : {"/usr/bin/", "/bin/"}) {
      if (std::filesystem::exists(std::string(dir) + tool)) {
        std::filesystem::create_symlink(std::string(dir) + tool, bin / tool);
        break;
      }
    }
  }
  const auto r = run(upload_command(img), img.packed(), "PATH=" + bin.string());
  EXPECT_EQ(r.status, kUploadBrokenStatus);
  EXPECT_NE(r.err.find("gzip is not installed"), std::string::npos) << r.err;
  EXPECT_TRUE(std::filesystem::is_empty(cache(img)));
}

TEST_F(AgentInstallScript, APackedAgentOnTheHeadIsHashedAsTheAgentItHolds) {
  const auto img = image("echo '" + expected_agent_version_line() + "'\n");
  const auto agent = dir_ / "dlaunch-agent";
  std::ofstream(agent) << "not the packed one";
  EXPECT_EQ(packed_agent_for(agent.string()), agent.string());
  std::ofstream(agent.string() + ".gz", std::ios::binary) << img.packed();
  ASSERT_EQ(packed_agent_for(agent.string()), agent.string() + ".gz");
  const auto loaded = AgentImage::load(agent.string() + ".gz");
  EXPECT_EQ(loaded->size, img.size);
  EXPECT_EQ(loaded->sha256, img.sha256);
  EXPECT_EQ(loaded->key, img.key);
  EXPECT_EQ(loaded->packed(), img.packed());
  // A .gz cut short is refused at load, before any node is touched.
  std::ofstream(agent.string() + ".gz", std::ios::binary)
      << img.packed().substr(0, img.packed().size() - 4);
  EXPECT_THROW((void)AgentImage::load(agent.string() + ".gz"), Error);
  // Without a .gz, the agent itself is packed on the head.
  const auto raw = AgentImage::load(agent.string());
  EXPECT_EQ(raw->sha256, content_hash("not the packed one"));
  const auto sent = run(upload_command(*raw), raw->packed());
  EXPECT_EQ(sent.status, kUploadNoRunStatus);  // it does not answer --version, but it arrived
}

}  // namespace
}  // namespace dlaunch::ssh
