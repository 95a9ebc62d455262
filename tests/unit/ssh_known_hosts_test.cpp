// Host key checks against known_hosts files (launcher/transport/ssh/known_hosts.h)
// as OpenSSH 9.2 makes them (issue 27 item 3). Keys, hashed names and the
// advised removal come from the real ssh-keygen; files are real files.
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "dlaunch/process.h"
#include "transport/ssh/known_hosts.h"

namespace dlaunch::ssh {
namespace {

namespace fs = std::filesystem;

// stdout of a shell command, and its exit status.
std::pair<std::string, int> sh(const std::string& command) {
  std::string out;
  FILE* p = ::popen(command.c_str(), "r");
  if (p == nullptr) return {"", -1};
  std::array<char, 4096> buf{};
  while (std::fgets(buf.data(), buf.size(), p) != nullptr) out += buf.data();
  const int status = ::pclose(p);
  return {out, WIFEXITED(status) ? WEXITSTATUS(status) : -1};
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), {}};
}

// A folder of keys made once by ssh-keygen, and a scratch folder per test.
class KnownHosts : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char templ[] = "/tmp/known_hosts_test.XXXXXX";
    ASSERT_NE(::mkdtemp(templ), nullptr);
    keys_ = new std::string(templ);
    for (const char* name : {"ed25519", "ecdsa", "other_ed25519", "ca"}) {
      const std::string type =
          std::string(name).find("ecdsa") != std::string::npos ? "ecdsa" : "ed25519";
      const auto r =
          sh("ssh-keygen -q -t " + type + " -N '' -f " + *keys_ + "/" + name + " </dev/null 2>&1");
      ASSERT_EQ(r.second, 0) << r.first;
    }
  }
  static void TearDownTestSuite() {
    if (keys_ != nullptr) fs::remove_all(*keys_);
    delete keys_;
    keys_ = nullptr;
  }
  void SetUp() override {
    dir_ = *keys_ + "/t" + std::to_string(counter_++);
    fs::create_directories(dir_);
    file_ = dir_ + "/known_hosts";
  }

  // "TYPE BASE64" of a key's .pub, for known_hosts lines.
  static std::string pub(const std::string& name) {
    std::istringstream in(read_text(*keys_ + "/" + name + ".pub"));
    std::string type, key;
    in >> type >> key;
    return type + " " + key;
  }
  // The key blob a server holding that key would send.
  static std::string blob(const std::string& name) {
    const auto r = sh("cut -d' ' -f2 " + *keys_ + "/" + name + ".pub | base64 -d | od -An -v -tx1");
    std::string out;
    std::istringstream in(r.first);
    std::string hex;
    while (in >> hex) out += static_cast<char>(std::stoi(hex, nullptr, 16));
    return out;
  }
  void write(const std::string& text) const { std::ofstream(file_) << text; }
  HostKeyQuery query(const std::string& name = "node1", int port = 2222) const {
    return {.name = name, .port = port, .user_files = {file_}, .global_files = {}};
  }
  static HostKeyVerdict check(const std::string& key, const HostKeyQuery& q, HostKeyPolicy p) {
    KnownHostsCache cache;
    return cache.verify(blob(key), q, p);
  }

  static std::string* keys_;
  static int counter_;
  std::string dir_;
  std::string file_;
};

std::string* KnownHosts::keys_ = nullptr;
int KnownHosts::counter_ = 0;

TEST_F(KnownHosts, TheKeyOnRecordIsAccepted) {
  write("# a comment\n\n[node1]:2222 " + pub("ed25519") + " root@node1\n");
  for (const auto policy : {HostKeyPolicy::kStrict, HostKeyPolicy::kAcceptNew}) {
    const auto v = check("ed25519", query(), policy);
    EXPECT_TRUE(v.ok) << v.message;
    EXPECT_FALSE(v.added);
  }
}

TEST_F(KnownHosts, AKeyOfAnotherTypeForAKnownHostIsAChangedKey) {
  // A man in the middle offers an ed25519 key for a host known by ECDSA.
  const std::string before =
      "other 127.0.0.1 " + pub("ed25519") + "\n[node1]:2222 " + pub("ecdsa") + "\n";
  write(before);
  for (const auto policy : {HostKeyPolicy::kStrict, HostKeyPolicy::kAcceptNew}) {
    const auto v = check("ed25519", query(), policy);
    EXPECT_FALSE(v.ok);
    EXPECT_NE(
        v.message.find("host key for [node1]:2222 has CHANGED: the server offers ssh-ed25519 "),
        std::string::npos)
        << v.message;
    EXPECT_NE(v.message.find(file_ + ":2 holds another ECDSA key for it"), std::string::npos)
        << v.message;
  }
  EXPECT_EQ(read_text(file_), before) << "nothing may be recorded";
}

TEST_F(KnownHosts, AnotherKeyOfTheSameTypeIsAChangedKey) {
  write("[node1]:2222 " + pub("other_ed25519") + "\n");
  const auto v = check("ed25519", query(), HostKeyPolicy::kAcceptNew);
  EXPECT_FALSE(v.ok);
  EXPECT_NE(v.message.find("has CHANGED"), std::string::npos) << v.message;
}

TEST_F(KnownHosts, TheKeyOnRecordIsAcceptedWhateverOtherTypesAreKnownForTheHost) {
  write("[node1]:2222 " + pub("ecdsa") + "\n[node1]:2222 " + pub("ed25519") + "\n");
  EXPECT_TRUE(check("ed25519", query(), HostKeyPolicy::kStrict).ok);
  EXPECT_TRUE(check("ecdsa", query(), HostKeyPolicy::kStrict).ok);
}

TEST_F(KnownHosts, TheChangedKeyErrorAdvisesVerifyingThenSshKeygenRWithTheFile) {
  write("node1 " + pub("other_ed25519") + "\n[node1]:2222 " + pub("ecdsa") + "\n");
  const auto v = check("ed25519", query(), HostKeyPolicy::kStrict);
  const std::string fingerprint =
      sh("ssh-keygen -l -f " + *keys_ + "/ed25519.pub | cut -d' ' -f2").first;
  EXPECT_NE(v.message.find("Check with the host's administrator that " +
                           fingerprint.substr(0, fingerprint.size() - 1) + " is its key"),
            std::string::npos)
      << v.message;
  const std::string advice = "remove the old key with: ";
  const auto at = v.message.find(advice);
  ASSERT_NE(at, std::string::npos) << v.message;
  const std::string command = v.message.substr(
      at + advice.size(), v.message.find(" and connect again") - at - advice.size());
  EXPECT_EQ(command, "ssh-keygen -R '[node1]:2222' -f " + file_);
  // The advice works as given: ssh-keygen removes that host's line only.
  const auto r = sh(command + " 2>&1");
  ASSERT_EQ(r.second, 0) << r.first;
  EXPECT_EQ(sh("ssh-keygen -F '[node1]:2222' -f " + file_).second, 1);
  EXPECT_EQ(sh("ssh-keygen -F node1 -f " + file_).second, 0);
  KnownHostsCache cache;
  const auto again = cache.verify(blob("ed25519"), query(), HostKeyPolicy::kAcceptNew);
  EXPECT_TRUE(again.ok && again.added) << again.message;
}

TEST_F(KnownHosts, ARevokedKeyIsRefusedUnderStrictAndAcceptNewEvenWhenAlsoOnRecord) {
  write("[node1]:2222 " + pub("ed25519") + "\n@revoked * " + pub("ed25519") + "\n");
  for (const auto policy : {HostKeyPolicy::kStrict, HostKeyPolicy::kAcceptNew}) {
    const auto v = check("ed25519", query(), policy);
    EXPECT_FALSE(v.ok);
    EXPECT_NE(v.message.find("the ED25519 host key of [node1]:2222 (ssh-ed25519 SHA256:"),
              std::string::npos)
        << v.message;
    EXPECT_NE(v.message.find(") is marked as revoked in " + file_ + ":2"), std::string::npos)
        << v.message;
  }
  write("@revoked [node1]:2222 " + pub("ed25519") + "\n");  // and an unknown host's, too
  const auto v = check("ed25519", query(), HostKeyPolicy::kAcceptNew);
  EXPECT_FALSE(v.ok);
  EXPECT_NE(v.message.find("revoked"), std::string::npos) << v.message;
  EXPECT_EQ(read_text(file_), "@revoked [node1]:2222 " + pub("ed25519") + "\n");
}

TEST_F(KnownHosts, ARevokedLineAppliesOnlyToItsHostsAndItsKey) {
  write("@revoked otherhost " + pub("ed25519") + "\n@revoked * " + pub("other_ed25519") +
        "\n[node1]:2222 " + pub("ed25519") + "\n");
  const auto v = check("ed25519", query(), HostKeyPolicy::kStrict);
  EXPECT_TRUE(v.ok) << v.message;
}

TEST_F(KnownHosts, ACertificateAuthorityForTheHostIsRefusedClearlyUnlessTheKeyIsOnRecord) {
  const std::string before = "@cert-authority *.cluster,[node1]:2222 " + pub("ca") + "\n";
  write(before);
  for (const auto policy : {HostKeyPolicy::kStrict, HostKeyPolicy::kAcceptNew}) {
    const auto v = check("ed25519", query(), policy);
    EXPECT_FALSE(v.ok);
    EXPECT_NE(v.message.find(file_ + ":1 says a certificate authority signs the keys of "
                                     "[node1]:2222 (@cert-authority), but dlaunch's own SSH "
                                     "client (libssh2) cannot check host certificates"),
              std::string::npos)
        << v.message;
    EXPECT_NE(v.message.find("--ssh openssh"), std::string::npos) << v.message;
  }
  EXPECT_EQ(read_text(file_), before) << "nothing may be recorded";
  // A CA for other hosts changes nothing; the host's own key on record is enough.
  write("@cert-authority *.cluster " + pub("ca") + "\n");
  EXPECT_TRUE(check("ed25519", query(), HostKeyPolicy::kAcceptNew).ok);
  write("@cert-authority * " + pub("ca") + "\n[node1]:2222 " + pub("ed25519") + "\n");
  EXPECT_TRUE(check("ed25519", query(), HostKeyPolicy::kStrict).ok);
}

TEST_F(KnownHosts, AnUnknownHostUnderStrictAdvisesVerifyingTheFingerprintNotAcceptNew) {
  write("");
  const auto v = check("ed25519", query(), HostKeyPolicy::kStrict);
  EXPECT_FALSE(v.ok);
  EXPECT_NE(v.message.find("no host key for [node1]:2222 in " + file_ +
                           " (the server offers ssh-ed25519 SHA256:"),
            std::string::npos)
      << v.message;
  EXPECT_NE(v.message.find("Check with the host's administrator that SHA256:"), std::string::npos)
      << v.message;
  EXPECT_EQ(v.message.find("accept-new"), std::string::npos) << v.message;
}

TEST_F(KnownHosts, AcceptNewAppendsALineSshKeygenFindsAfterAnUnterminatedLastLine) {
  write("# mine, no newline at the end");
  KnownHostsCache cache;
  const auto v = cache.verify(blob("ed25519"), query("Node1"), HostKeyPolicy::kAcceptNew);
  ASSERT_TRUE(v.ok && v.added) << v.message;
  EXPECT_EQ(v.message.find("added ssh-ed25519 SHA256:"), 0u) << v.message;
  EXPECT_EQ(read_text(file_),
            "# mine, no newline at the end\n[node1]:2222 " + pub("ed25519") + "\n");
  const auto found = sh("ssh-keygen -F '[node1]:2222' -f " + file_);
  EXPECT_EQ(found.second, 0) << found.first;
  // The job's later connections see it without reading the file again.
  EXPECT_TRUE(cache.verify(blob("ed25519"), query(), HostKeyPolicy::kStrict).ok);
  EXPECT_FALSE(cache.verify(blob("ecdsa"), query(), HostKeyPolicy::kAcceptNew).ok);
  EXPECT_EQ(cache.reads(), 1);
}

TEST_F(KnownHosts, HashedNamesAsSshKeygenWritesThemAreHonoured) {
  write("[node1]:2222 " + pub("ecdsa") + "\nnode2 " + pub("ed25519") + "\n");
  const auto r = sh("ssh-keygen -H -f " + file_ + " 2>&1");
  ASSERT_EQ(r.second, 0) << r.first;
  ASSERT_EQ(read_text(file_).find("node"), std::string::npos) << read_text(file_);
  EXPECT_TRUE(check("ecdsa", query(), HostKeyPolicy::kStrict).ok);
  EXPECT_TRUE(check("ed25519", query("node2", 22), HostKeyPolicy::kStrict).ok);
  const auto v = check("ed25519", query(), HostKeyPolicy::kAcceptNew);
  EXPECT_NE(v.message.find(file_ + ":1 holds another ECDSA key"), std::string::npos) << v.message;
}

// The host field as ssh reads it, checked against ssh-keygen -F on the same
// lines: wildcards, negation, lists, [host]:port, case.
TEST_F(KnownHosts, HostPatternsMatchAsSshKeygenFindsThem) {
  const std::vector<std::string> fields = {"node1",         "Node1,node2",           "*.cluster",
                                           "node?",         "[node1]:2222",          "[node*]:2222",
                                           "*,!node1",      "!node3,node*",          "10.0.0.*",
                                           "[10.0.0.1]:22", "*.cluster,!bad.cluster"};
  const std::vector<std::string> hosts = {"node1",       "node2",        "node3",
                                          "node12",      "[node1]:2222", "a.cluster",
                                          "bad.cluster", "10.0.0.1",     "[10.0.0.1]:2222"};
  for (const auto& field : fields) {
    write(field + " " + pub("ed25519") + "\n");
    for (const auto& host : hosts) {
      const bool ssh_finds = sh("ssh-keygen -F " + shell_quote(host) + " -f " + file_).second == 0;
      EXPECT_EQ(host_field_matches(field, host), ssh_finds) << field << " vs " << host;
    }
  }
}

TEST_F(KnownHosts, ABrokenLineAboutTheHostIsRefusedNamingFileAndLineAndOthersAreSkipped) {
  const std::map<std::string, std::string> broken = {
      {"[node1]:2222 ssh-ed25519 not*base64", "the key is not base64"},
      {"[node1]:2222 ssh-ed25519", "no key after the key type"},
      {"[node1]:2222 ssh-rsa " + pub("ed25519").substr(12), "the key is ssh-ed25519, not ssh-rsa"},
      {"@revokd [node1]:2222 " + pub("ed25519"), "unknown marker @revokd"},
  };
  for (const auto& [line, why] : broken) {
    const std::string before = "node9 " + pub("ecdsa") + "\n" + line + "\n";
    write(before);
    const auto v = check("ed25519", query(), HostKeyPolicy::kAcceptNew);
    EXPECT_FALSE(v.ok) << line;
    EXPECT_NE(
        v.message.find(file_ + ":2: cannot read this known_hosts line about [node1]:2222: " + why),
        std::string::npos)
        << v.message;
    EXPECT_EQ(read_text(file_), before) << "nothing may be recorded";
  }
  // Broken lines about other hosts are skipped, as ssh skips them.
  write("node9 ssh-ed25519 not*base64\nnode9 1024 35 12345\n[node1]:2222 " + pub("ed25519") + "\n");
  EXPECT_TRUE(check("ed25519", query(), HostKeyPolicy::kStrict).ok);
}

TEST_F(KnownHosts, GlobalFilesCountAndNewKeysGoToTheFirstUserFile) {
  const std::string global = dir_ + "/global";
  std::ofstream(global) << "[node1]:2222 " << pub("ecdsa") << "\n";
  write("");
  HostKeyQuery q = query();
  q.global_files = {global};
  const auto v = check("ed25519", q, HostKeyPolicy::kAcceptNew);
  EXPECT_NE(v.message.find(global + ":1 holds another ECDSA key"), std::string::npos) << v.message;
  EXPECT_NE(v.message.find("-f " + global), std::string::npos) << v.message;
  q.name = "node2";
  EXPECT_TRUE(check("ed25519", q, HostKeyPolicy::kAcceptNew).added);
  EXPECT_NE(read_text(file_).find("[node2]:2222 ssh-ed25519"), std::string::npos);
  EXPECT_EQ(read_text(global).find("node2"), std::string::npos);
}

TEST_F(KnownHosts, TheFingerprintIsTheOneSshKeygenPrints) {
  const std::string printed =
      sh("ssh-keygen -l -E sha256 -f " + *keys_ + "/ecdsa.pub | cut -d' ' -f2").first;
  EXPECT_EQ(sha256_fingerprint(blob("ecdsa")) + "\n", printed);
}

TEST(HostKeyMethods, TheKnownTypesComeFirstAndCertificatesNever) {
  const std::vector<std::string> libssh2 = {"ecdsa-sha2-nistp256",
                                            "ecdsa-sha2-nistp384",
                                            "ecdsa-sha2-nistp256-cert-v01@openssh.com",
                                            "ssh-ed25519",
                                            "ssh-rsa",
                                            "ssh-dss"};
  EXPECT_EQ(host_key_methods({}, libssh2), "");
  EXPECT_EQ(host_key_methods({"ssh-ed25519"}, libssh2),
            "ssh-ed25519,ecdsa-sha2-nistp256,ecdsa-sha2-nistp384,ssh-rsa,ssh-dss");
  EXPECT_EQ(host_key_methods({"ssh-rsa", "ecdsa-sha2-nistp384"}, libssh2),
            "ecdsa-sha2-nistp384,ssh-rsa,ecdsa-sha2-nistp256,ssh-ed25519,ssh-dss");
  EXPECT_EQ(host_key_methods({"sk-ssh-ed25519@openssh.com"}, libssh2), "");
}

}  // namespace
}  // namespace dlaunch::ssh
