// The OpenSSH client-config reader (launcher/ssh_config/ssh_config.h):
// precedence, Host/Match, Include, tokens, errors and caps, from memory
// through MemoryFiles, and once from real files.
#include "ssh_config/ssh_config.h"

#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "seams/scoped_env.h"
#include "transport/ssh/known_hosts.h"

namespace dlaunch::ssh {
namespace {

const std::string kHome = "/home/me";
const std::string kUserFile = "/home/me/.ssh/config";
const std::string kSystemFile = "/etc/ssh/ssh_config";

ResolveContext test_ctx() {
  ResolveContext ctx;
  ctx.local_user = "me";
  ctx.home = kHome;
  ctx.local_host = "head.example.com";
  ctx.uid = 1000;
  ctx.getenv = [](const std::string& name) -> std::optional<std::string> {
    if (name == "KEYDIR") return "/keys";
    return std::nullopt;
  };
  return ctx;
}

SshConfig load(const MemoryFiles& files) {
  LoadOptions options;
  options.home = kHome;
  options.files = &files;
  return SshConfig::load(options);
}

MemoryFiles user_file(const std::string& text) {
  MemoryFiles files;
  files.files[kUserFile] = text;
  return files;
}

HostConfig resolve(const std::string& text, const std::string& alias,
                   const ResolveContext& ctx = test_ctx()) {
  return load(user_file(text)).resolve(alias, ctx);
}

// The message of the InputError that loading (and resolving) `files` throws.
std::string error_of(const MemoryFiles& files, const std::string& alias = "h") {
  try {
    (void)load(files).resolve(alias, test_ctx());
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

std::string error_of(const std::string& text) { return error_of(user_file(text)); }

TEST(SshConfig, FirstValueWinsAcrossBlocks) {
  const std::string text =
      "Host a\n"
      "  User alice\n"
      "  Port 2201\n"
      "Host *\n"
      "  User everyone\n"
      "  Port 2202\n"
      "  HostName fallback\n";
  const HostConfig a = resolve(text, "a");
  EXPECT_EQ(a.user, "alice");
  EXPECT_EQ(a.port, 2201);
  EXPECT_EQ(a.hostname, "fallback");
  const HostConfig b = resolve(text, "b");
  EXPECT_EQ(b.user, "everyone");
  EXPECT_EQ(b.port, 2202);
  EXPECT_FALSE(b.identities_only.has_value());
}

TEST(SshConfig, UserFileBeatsSystemFile) {
  MemoryFiles files;
  files.files[kUserFile] = "Port 2200\n";
  files.files[kSystemFile] = "Port 2300\nUser sys\n";
  const HostConfig c = load(files).resolve("x", test_ctx());
  EXPECT_EQ(c.port, 2200);
  EXPECT_EQ(c.user, "sys");
  EXPECT_EQ(load(files).files(), (std::vector<std::string>{kUserFile, kSystemFile}));
}

TEST(SshConfig, EqualsSyntaxQuotesCaseAndComments) {
  const HostConfig c = resolve(
      "# a comment\n"
      "\n"
      "   \t\n"
      "hOsTnAmE=real.example\n"
      "PORT = 2200   # trailing comment\n"
      "User \"bob\"\r\n"
      "IdentityFile \"~/my keys/id\"\n"
      "IdentityFile '/k/with \"dq\"'\n"
      "BatchMode=yes\n"
      "Ciphers aes128-ctr,aes256-ctr\n",
      "x");
  EXPECT_EQ(c.hostname, "real.example");
  EXPECT_EQ(c.port, 2200);
  EXPECT_EQ(c.user, "bob");
  EXPECT_EQ(c.identity_files, (std::vector<std::string>{"/home/me/my keys/id", "/k/with \"dq\""}));
  EXPECT_EQ(c.batch_mode, true);
}

TEST(SshConfig, HostWildcards) {
  const std::string text =
      "Host node?? *.example.com\n"
      "  User pat\n";
  EXPECT_EQ(resolve(text, "node07").user, "pat");
  EXPECT_EQ(resolve(text, "gpu.example.com").user, "pat");
  EXPECT_FALSE(resolve(text, "node7").user.has_value());
  EXPECT_FALSE(resolve(text, "node123").user.has_value());
  EXPECT_FALSE(resolve(text, "example.com").user.has_value());
}

TEST(SshConfig, HostNegationBeatsAnyOtherPattern) {
  const std::string text =
      "Host * !bastion\n"
      "  ProxyJump bastion\n"
      "Host !gpu* gpu1\n"
      "  User never\n";
  EXPECT_EQ(resolve(text, "node1").proxy_jump.size(), 1U);
  EXPECT_TRUE(resolve(text, "bastion").proxy_jump.empty());
  EXPECT_FALSE(resolve(text, "gpu1").user.has_value());
  EXPECT_FALSE(resolve(text, "node1").user.has_value());  // only negated patterns matched nothing
}

TEST(SshConfig, HostIsCaseSensitiveAndMatchesTheAliasNotTheHostName) {
  const std::string text =
      "Host short\n"
      "  HostName long.example.com\n"
      "Host long.example.com\n"
      "  User by-hostname\n"
      "Host SHORT\n"
      "  Port 2222\n";
  const HostConfig c = resolve(text, "short");
  EXPECT_EQ(c.hostname, "long.example.com");
  EXPECT_FALSE(c.user.has_value());
  EXPECT_FALSE(c.port.has_value());
}

TEST(SshConfig, MatchHostUsesTheHostNameSoFarAndOriginalHostTheAlias) {
  const std::string text =
      "Host n*\n"
      "  HostName %h.cluster.example\n"
      "Match host *.CLUSTER.example\n"
      "  User clusteruser\n"
      "Match originalhost n1\n"
      "  Port 2001\n"
      "Match host n1\n"
      "  IdentitiesOnly yes\n";
  const HostConfig c = resolve(text, "n1");
  EXPECT_EQ(c.hostname, "n1.cluster.example");
  EXPECT_EQ(c.user, "clusteruser");
  EXPECT_EQ(c.port, 2001);
  EXPECT_FALSE(c.identities_only.has_value());
}

TEST(SshConfig, MatchUserLocalUserAllAndNegation) {
  const std::string text =
      "Match user root\n"
      "  Port 1\n"
      "Match !user root localuser me\n"
      "  Port 2\n"
      "Match host a,!b*\n"
      "  User matched-list\n"
      "Match all\n"
      "  BatchMode yes\n"
      "Match !all\n"
      "  IdentitiesOnly yes\n";
  const HostConfig c = resolve(text, "a");
  EXPECT_EQ(c.port, 2);
  EXPECT_EQ(c.user, "matched-list");
  EXPECT_EQ(c.batch_mode, true);
  EXPECT_FALSE(c.identities_only.has_value());
  EXPECT_FALSE(resolve(text, "bx").user.has_value());

  ResolveContext as_root = test_ctx();
  as_root.user = "root";
  const HostConfig r = resolve(text, "a", as_root);
  EXPECT_EQ(r.port, 1);
  EXPECT_FALSE(r.user.has_value());  // the command line's user wins: the config's is not reported
}

TEST(SshConfig, MatchUserSeesTheConfiguredUserSoFar) {
  const HostConfig c = resolve(
      "User deploy\n"
      "Match user deploy\n"
      "  Port 2022\n",
      "x");
  EXPECT_EQ(c.port, 2022);
}

TEST(SshConfig, MatchAllCannotBeCombined) {
  EXPECT_NE(error_of("Match all host x\n").find("config:1: Match"), std::string::npos);
}

TEST(SshConfig, MatchCriteriaOnlyOpensshEvaluatesAreLeftToSshG) {
  // Accepted; a host that reaches one is resolved by `ssh -G`, which needs the
  // files on disk (tests/integration/ssh_config_diff runs the real thing).
  for (const std::string crit : {"exec \"true\"", "!exec=true"}) {
    EXPECT_NE(error_of("# first\nHost *\nMatch " + crit + "\n").find("needs the installed ssh"),
              std::string::npos)
        << crit;
  }
  // One that cannot match before it is not reached: dlaunch resolves alone.
  EXPECT_EQ(resolve("Match host other exec \"true\"\n  User x\nHost h\n  User y\n", "h").user, "y");
  // OpenSSH 9.2 has none of these.
  for (const std::string crit : {"localnetwork 10.0.0.0/8", "tagged x"}) {
    EXPECT_NE(error_of("Match " + crit + "\n").find("unknown criterion"), std::string::npos);
  }
  EXPECT_NE(error_of("Match frobnicate x\n").find("unknown criterion"), std::string::npos);
  EXPECT_NE(error_of("Match host\n").find("needs a value"), std::string::npos);
}

// A resolver that knows these fully qualified names (with their dot) only,
// and remembers what it was asked.
ResolveContext knowing(std::vector<std::string> names,
                       const std::shared_ptr<std::vector<std::string>>& asked = nullptr) {
  ResolveContext ctx = test_ctx();
  ctx.resolves = [names = std::move(names), asked](const std::string& name) {
    if (asked) asked->push_back(name);
    return std::find(names.begin(), names.end(), name) != names.end();
  };
  return ctx;
}

TEST(SshConfig, CanonicalizeHostnameTriesEachDomainThenReadsTheFilesAgain) {
  const std::string text =
      "CanonicalizeHostname yes\n"
      "CanonicalDomains Example.NET example.com. example.org\n"
      "Host web.example.com\n"
      "  User canon\n"
      "  Port 2700\n"
      "  IdentityFile ~/.ssh/id_%h\n"
      "Host web\n"
      "  Port 2200\n"
      "  IdentityFile ~/.ssh/id_first\n";
  auto asked = std::make_shared<std::vector<std::string>>();
  HostConfig c = resolve(text, "Web", knowing({"web.example.com.", "web.example.org."}, asked));
  // Domains in lower case, without their dot, in order, up to the first known.
  EXPECT_EQ(*asked, (std::vector<std::string>{"web.example.net.", "web.example.com."}));
  EXPECT_EQ(c.hostname, "web.example.com");
  EXPECT_EQ(c.user, "canon");  // from the block the canonical name matches
  // `Host web` did not match the alias as given ("Web"), so the second
  // pass's Port stands; first-pass values would have stayed.
  EXPECT_EQ(c.port, 2700);
  EXPECT_EQ(c.identity_files, (std::vector<std::string>{"/home/me/.ssh/id_web.example.com"}));
  // `none`: no domains.
  EXPECT_EQ(resolve("CanonicalizeHostname yes\nCanonicalDomains none\n", "web",
                    knowing({"web.example.com.", "web.none."}))
                .hostname,
            "web");
  EXPECT_NE(error_of("CanonicalDomains example.com none\n").find("must be the only value"),
            std::string::npos);
  c = resolve(text, "web", knowing({"web.example.com."}));
  EXPECT_EQ(c.hostname, "web.example.com");
  EXPECT_EQ(c.port, 2200);  // the first pass's
  EXPECT_EQ(c.identity_files, (std::vector<std::string>{"/home/me/.ssh/id_first",
                                                        "/home/me/.ssh/id_web.example.com"}));
  // No domain knows it: the name stays, and the second pass still runs.
  c = resolve(text, "db", knowing({}));
  EXPECT_EQ(c.hostname, "db");
  EXPECT_FALSE(c.user);
  // HostName is what is canonicalized.
  c = resolve(text + "Host alias\n  HostName WEB\n", "alias", knowing({"web.example.com."}));
  EXPECT_EQ(c.hostname, "web.example.com");
  EXPECT_EQ(c.user, "canon");
}

TEST(SshConfig, CanonicalizationSkipsAddressesLongNamesAndProxiedHosts) {
  const std::string base = "CanonicalDomains example.com\n";
  auto asked = std::make_shared<std::vector<std::string>>();
  const auto ctx = knowing({"a.b.example.com.", "web.example.com.", "fq.example.com."}, asked);
  EXPECT_EQ(resolve(base + "CanonicalizeHostname yes\n", "10.0.0.1", ctx).hostname, "10.0.0.1");
  EXPECT_EQ(resolve(base + "CanonicalizeHostname yes\n", "fe80::1%eth0", ctx).hostname,
            "fe80::1%eth0");
  // One dot is the default limit; more stays as it is.
  EXPECT_EQ(resolve(base + "CanonicalizeHostname yes\n", "a.b", ctx).hostname, "a.b.example.com");
  EXPECT_EQ(resolve(base + "CanonicalizeHostname yes\n", "x.a.b", ctx).hostname, "x.a.b");
  EXPECT_EQ(
      resolve(base + "CanonicalizeHostname yes\nCanonicalizeMaxDots 0\n", "a.b", ctx).hostname,
      "a.b");
  // Fully qualified: looked up as it is, the dot dropped.
  EXPECT_EQ(resolve(base + "CanonicalizeHostname yes\n", "fq.example.com.", ctx).hostname,
            "fq.example.com");
  EXPECT_EQ(asked->size(), 2U);  // a.b once, fq. once
  // A proxy resolves the name itself, unless `always`; ProxyJump none
  // counts as a jump at that point, ProxyCommand none does not.
  for (const std::string proxy :
       {"ProxyJump bastion\n", "ProxyJump none\n", "ProxyCommand nc %h %p\n"}) {
    EXPECT_EQ(resolve(base + "CanonicalizeHostname yes\n" + proxy, "web", ctx).hostname, "web")
        << proxy;
    EXPECT_EQ(resolve(base + "CanonicalizeHostname always\n" + proxy, "web", ctx).hostname,
              "web.example.com")
        << proxy;
  }
  EXPECT_EQ(resolve(base + "CanonicalizeHostname yes\nProxyCommand none\n", "web", ctx).hostname,
            "web.example.com");
  // Not asked for: nothing looked up.
  asked->clear();
  EXPECT_EQ(resolve(base, "web", ctx).hostname, "web");
  EXPECT_TRUE(asked->empty());
}

TEST(SshConfig, CanonicalizeFallbackLocalNoRefusesANameNoDomainKnows) {
  MemoryFiles files = user_file(
      "CanonicalizeHostname yes\nCanonicalDomains example.com\nCanonicalizeFallbackLocal no\n");
  std::string error;
  try {
    (void)load(files).resolve("db", knowing({}));
  } catch (const InputError& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("/home/me/.ssh/config:3"), std::string::npos) << error;
  EXPECT_NE(error.find("CanonicalizeFallbackLocal"), std::string::npos) << error;
  EXPECT_NE(error.find("\"db\" is not found in any of CanonicalDomains (example.com)"),
            std::string::npos)
      << error;
  EXPECT_EQ(load(files).resolve("db", knowing({"db.example.com."})).hostname, "db.example.com");
}

TEST(SshConfig, MatchFinalAndCanonicalHoldInTheSecondPassOnly) {
  const std::string text =
      "Host w\n"
      "  HostName GPU1\n"
      "Match canonical\n"
      "  User from-canonical\n"
      "Host gpu1\n"
      "  Port 2300\n"
      "Match final host gpu1\n"
      "  IdentityFile ~/final\n";
  // `Match final` asks for the second pass: Host lines then see the host
  // name (lower case), not the alias.
  HostConfig c = resolve(text, "w", knowing({}));
  EXPECT_EQ(c.hostname, "gpu1");
  EXPECT_EQ(c.user, "from-canonical");
  EXPECT_EQ(c.port, 2300);
  EXPECT_EQ(c.identity_files, (std::vector<std::string>{"/home/me/final"}));
  // `!final` asks for it too (OpenSSH 9.2): true in the first pass only.
  c = resolve("Match !final\n  User one-pass\nMatch canonical\n  Port 9\n", "w", knowing({}));
  EXPECT_EQ(c.user, "one-pass");
  EXPECT_EQ(c.port, 9);
  // A `Match final` that cannot apply (in an Include under a block that
  // does not match) still asks for it, as ssh evaluates every Match line.
  MemoryFiles files = user_file("Host nothing\n  Include inc\nMatch canonical\n  User again\n");
  files.files["/home/me/.ssh/inc"] = "Match final\n";
  EXPECT_EQ(load(files).resolve("w", knowing({})).user, "again");
}

TEST(SshConfig, CanonicalizationLinesAreChecked) {
  EXPECT_NE(error_of("CanonicalizeHostname maybe\n").find("config:1: CanonicalizeHostname"),
            std::string::npos);
  EXPECT_NE(error_of("CanonicalDomains .example.com\n").find("starts with an invalid character"),
            std::string::npos);
  EXPECT_NE(error_of("CanonicalDomains a..b\n").find("two dots in a row"), std::string::npos);
  EXPECT_NE(error_of("CanonicalDomains a/b\n").find("invalid character"), std::string::npos);
  EXPECT_NE(error_of("CanonicalizeMaxDots -1\n").find("CanonicalizeMaxDots"), std::string::npos);
  EXPECT_NE(error_of("CanonicalizeFallbackLocal sometimes\n").find("not yes or no"),
            std::string::npos);
  // Checked in a block that never applies, too (as ssh does); set, they
  // change nothing while CanonicalizeHostname is unset.
  EXPECT_NE(error_of("Host nothing\n  CanonicalizeMaxDots x\n").find("config:2"),
            std::string::npos);
  EXPECT_EQ(resolve("CanonicalDomains example.com\nCanonicalizeMaxDots 3\n", "web").hostname,
            "web");
  // ssh follows CNAMEs with its own resolver's answers: left to ssh -G.
  EXPECT_NE(error_of("CanonicalizePermittedCNAMEs *.a.example:*.b.example\n")
                .find("needs the installed ssh"),
            std::string::npos);
}

TEST(SshConfig, IncludeIsRelativeToDotSshAndGlobbedInOrder) {
  MemoryFiles files;
  files.files[kUserFile] = "Include conf.d/*.conf other\nUser late\n";
  files.files["/home/me/.ssh/conf.d/20-b.conf"] = "IdentityFile ~/b\n";
  files.files["/home/me/.ssh/conf.d/10-a.conf"] = "IdentityFile ~/a\nUser from-a\n";
  files.files["/home/me/.ssh/conf.d/.hidden.conf"] = "IdentityFile ~/hidden\n";
  files.files["/home/me/.ssh/conf.d/x.txt"] = "IdentityFile ~/txt\n";
  files.files["/home/me/.ssh/other"] = "IdentityFile ~/other\n";
  const HostConfig c = load(files).resolve("h", test_ctx());
  EXPECT_EQ(c.identity_files,
            (std::vector<std::string>{"/home/me/a", "/home/me/b", "/home/me/other"}));
  EXPECT_EQ(c.user, "from-a");
}

TEST(SshConfig, SystemIncludeIsRelativeToEtcSshAndRefusesTilde) {
  MemoryFiles files;
  files.files[kSystemFile] = "Include ssh_config.d/*.conf\n";
  files.files["/etc/ssh/ssh_config.d/50-site.conf"] = "Port 2345\n";
  EXPECT_EQ(load(files).resolve("h", test_ctx()).port, 2345);

  files.files[kSystemFile] = "Include ~/x\n";
  EXPECT_NE(error_of(files).find("/etc/ssh/ssh_config:1: Include"), std::string::npos);
}

TEST(SshConfig, IncludeInsideABlockAppliesOnlyWhenTheBlockMatches) {
  MemoryFiles files;
  files.files[kUserFile] =
      "Host gpu*\n"
      "  Include gpu.conf\n"
      "  Port 2001\n"
      "Host *\n"
      "  BatchMode yes\n";
  // The included file's own Host block ends with the file: the including
  // block is active again after it (Port 2001 applies).
  files.files["/home/me/.ssh/gpu.conf"] =
      "User gpuuser\n"
      "Host nothing-matches-this\n"
      "  IdentitiesOnly yes\n";
  const SshConfig config = load(files);
  const HostConfig gpu = config.resolve("gpu3", test_ctx());
  EXPECT_EQ(gpu.user, "gpuuser");
  EXPECT_EQ(gpu.port, 2001);
  EXPECT_FALSE(gpu.identities_only.has_value());
  EXPECT_EQ(gpu.batch_mode, true);
  const HostConfig cpu = config.resolve("cpu3", test_ctx());
  EXPECT_FALSE(cpu.user.has_value());
  EXPECT_FALSE(cpu.port.has_value());
}

TEST(SshConfig, HostBlocksInAnIncludeUnderANonMatchingBlockNeverMatch) {
  MemoryFiles files;
  files.files[kUserFile] = "Host other\n  Include inc\n";
  files.files["/home/me/.ssh/inc"] = "Host *\n  User leaked\n";
  EXPECT_FALSE(load(files).resolve("h", test_ctx()).user.has_value());
}

TEST(SshConfig, IncludeOfAMissingFileIsNoError) {
  const HostConfig c = resolve("Include nothing-here /etc/none/* ~/.ssh/gone\nPort 7\n", "h");
  EXPECT_EQ(c.port, 7);
}

TEST(SshConfig, AFileThatIncludesItselfEndsWithTheDepthError) {
  MemoryFiles files;
  files.files[kUserFile] = "Include config\n";
  const std::string err = error_of(files);
  EXPECT_NE(err.find("/home/me/.ssh/config:1: Include: Include nested deeper than 16"),
            std::string::npos)
      << err;
}

TEST(SshConfig, IncludeDepthLimitIsSixteen) {
  const auto chain = [](int levels) {
    MemoryFiles files;
    files.files[kUserFile] = "Include f1\n";
    for (int i = 1; i <= levels; ++i) {
      files.files["/home/me/.ssh/f" + std::to_string(i)] =
          i < levels ? "Include f" + std::to_string(i + 1) + "\n" : "Port 1616\n";
    }
    return files;
  };
  EXPECT_EQ(load(chain(16)).resolve("h", test_ctx()).port, 1616);
  EXPECT_NE(error_of(chain(17)).find("/home/me/.ssh/f16:1: Include: Include nested deeper"),
            std::string::npos);
}

TEST(SshConfig, TokensInEachKeyword) {
  const HostConfig c = resolve(
      "Host n*\n"
      "  HostName %h.Example.com\n"
      "  Port 2200\n"
      "  User %u-remote\n"  // no token in User: OpenSSH 9.2 takes it as written
      "  IdentityFile %d/.ssh/%h_%r_%p_%u_%n_%i_%l_%L_%k%%\n"
      "  CertificateFile ${KEYDIR}/%r-cert.pub\n"
      "  UserKnownHostsFile ~/.ssh/kh_%n %d/kh2\n"
      "  GlobalKnownHostsFile ~/g%h\n"
      "  ProxyCommand nc -X connect %h %p # %r\n",
      "n1");
  EXPECT_EQ(c.hostname, "n1.example.com");  // lower case, as ssh makes it
  EXPECT_EQ(c.user, "%u-remote");
  EXPECT_EQ(c.identity_files,
            (std::vector<std::string>{"/home/me/.ssh/n1.example.com_%u-remote_2200_me_n1_1000_"
                                      "head.example.com_head_n1%"}));
  EXPECT_EQ(c.certificate_files, (std::vector<std::string>{"/keys/%u-remote-cert.pub"}));
  EXPECT_EQ(c.user_known_hosts_files,
            (std::vector<std::string>{"/home/me/.ssh/kh_n1", "/home/me/kh2"}));
  EXPECT_EQ(c.global_known_hosts_files, (std::vector<std::string>{"/home/me/g%h"}));
  EXPECT_EQ(c.proxy_command, "nc -X connect n1.example.com 2200 # %u-remote");
}

TEST(SshConfig, TokensUseTheCommandLineUserAndPort) {
  ResolveContext ctx = test_ctx();
  ctx.user = "cli";
  ctx.port = 2999;
  const HostConfig c = resolve("User cfg\nPort 22\nIdentityFile ~/%r@%p\n", "h", ctx);
  EXPECT_FALSE(c.user.has_value());
  EXPECT_FALSE(c.port.has_value());
  EXPECT_EQ(c.identity_files, (std::vector<std::string>{"/home/me/cli@2999"}));
}

// %C as OpenSSH 9.2: the SHA-1 of %l%h%p%r, with the HostName, the port and
// the user that apply (printf 'head.example.comweb22me' | sha1sum).
TEST(SshConfig, TokenCIsTheHashOfLocalHostHostPortAndUser) {
  EXPECT_EQ(resolve("IdentityFile ~/.ssh/%C\nUserKnownHostsFile %d/kh_%C\n", "web").identity_files,
            (std::vector<std::string>{"/home/me/.ssh/a4f1e78f561765ae5270b4c2e21092caaa352db5"}));
  const HostConfig c = resolve(
      "Host web\n  HostName 10.0.0.7\n  Port 2200\n  User bob\n  UserKnownHostsFile ~/kh_%C\n",
      "web");
  EXPECT_EQ(c.user_known_hosts_files,
            (std::vector<std::string>{"/home/me/kh_cb6285835afc0e5c50d05683407353a92c371bae"}));
}

TEST(SshConfig, BadTokensNameFileAndLine) {
  EXPECT_NE(error_of("Port 22\nIdentityFile ~/%Z\n")
                .find("config:2: IdentityFile: "
                      "\"~/%Z\": unknown token %Z"),
            std::string::npos);
  EXPECT_NE(error_of("HostName %p.x\n").find("config:1: HostName: \"%p.x\": unknown token %p"),
            std::string::npos);
  EXPECT_NE(error_of("IdentityFile ~/x%\n").find("lone %"), std::string::npos);
  EXPECT_NE(error_of("IdentityFile ~nosuchuser-dl/id\n").find("no user"), std::string::npos);
  EXPECT_NE(error_of("ProxyCommand ssh -W %h:%p %u\n").find("unknown token %u"), std::string::npos);
  EXPECT_NE(error_of("IdentityFile ${1X}/id\n").find("bad variable name"), std::string::npos);
  EXPECT_NE(
      error_of("IdentityFile ${NOPE}/id\n").find("config:1: IdentityFile: ${NOPE} is not set"),
      std::string::npos);
}

TEST(SshConfig, ProxyJumpChains) {
  const HostConfig c =
      resolve("ProxyJump alice@jump1:2222,jump2,[fe80::1]:23,bob@[::1],ssh://carol@j5:99/\n", "h");
  ASSERT_EQ(c.proxy_jump.size(), 5U);
  EXPECT_EQ(c.proxy_jump[0].user, "alice");
  EXPECT_EQ(c.proxy_jump[0].host, "jump1");
  EXPECT_EQ(c.proxy_jump[0].port, 2222);
  EXPECT_EQ(c.proxy_jump[1].user, "");
  EXPECT_EQ(c.proxy_jump[1].host, "jump2");
  EXPECT_EQ(c.proxy_jump[1].port, 0);
  EXPECT_EQ(c.proxy_jump[2].host, "fe80::1");
  EXPECT_EQ(c.proxy_jump[2].port, 23);
  EXPECT_EQ(c.proxy_jump[3].user, "bob");
  EXPECT_EQ(c.proxy_jump[3].host, "::1");
  EXPECT_EQ(c.proxy_jump[4].user, "carol");
  EXPECT_EQ(c.proxy_jump[4].port, 99);
  EXPECT_FALSE(c.proxy_command.has_value());

  const HostConfig tokens = resolve("ProxyJump %r@gw-%h\n", "n1");
  EXPECT_EQ(tokens.proxy_jump.at(0).user, "me");
  EXPECT_EQ(tokens.proxy_jump.at(0).host, "gw-n1");
}

TEST(SshConfig, ProxyJumpAndProxyCommandShareOneSlot) {
  const HostConfig none = resolve("Host b\n  ProxyJump none\nHost *\n  ProxyJump gw\n", "b");
  EXPECT_TRUE(none.proxy_jump_none);
  EXPECT_TRUE(none.proxy_jump.empty());

  const HostConfig jump_first = resolve("ProxyJump gw\nProxyCommand nc %h %p\n", "h");
  EXPECT_EQ(jump_first.proxy_jump.size(), 1U);
  EXPECT_FALSE(jump_first.proxy_command.has_value());

  const HostConfig command_first = resolve("ProxyCommand nc %h %p\nProxyJump gw\n", "h");
  EXPECT_TRUE(command_first.proxy_jump.empty());
  EXPECT_EQ(command_first.proxy_command, "nc h 22");

  const HostConfig command_none = resolve("ProxyCommand NONE\nProxyJump gw\n", "h");
  EXPECT_TRUE(command_none.proxy_command_none);
  EXPECT_TRUE(command_none.proxy_jump.empty());

  // ProxyJump none blocks later ProxyJumps only.
  const HostConfig then_command = resolve("ProxyJump none\nProxyCommand nc %h %p\n", "h");
  EXPECT_TRUE(then_command.proxy_jump_none);
  EXPECT_EQ(then_command.proxy_command, "nc h 22");
}

TEST(SshConfig, BadProxyJumpNamesTheHop) {
  for (const std::string bad :
       {"gw:0", "gw:70000", "@gw", "a@", ",gw", "gw,", "[::1", "gw:x", "j\x7f", "a b"}) {
    const std::string err = error_of("ProxyJump " + bad + "\n");
    EXPECT_NE(err.find("config:1: ProxyJump: "), std::string::npos) << bad << ": " << err;
  }
}

TEST(SshConfig, IdentityFilesAccumulateInOrderWithoutDuplicates) {
  const HostConfig c = resolve(
      "Host h\n"
      "  IdentityFile ~/.ssh/h_key\n"
      "  IdentitiesOnly yes\n"
      "Host *\n"
      "  IdentityFile ~/.ssh/id_ed25519\n"
      "  IdentityFile ~/.ssh/h_key\n"
      "  IdentityFile none\n"
      "  IdentitiesOnly no\n"
      "  CertificateFile ~/c1\n"
      "  CertificateFile ~/c2\n",
      "h");
  EXPECT_EQ(c.identity_files,
            (std::vector<std::string>{"/home/me/.ssh/h_key", "/home/me/.ssh/id_ed25519"}));
  EXPECT_EQ(c.identities_only, true);
  EXPECT_EQ(c.certificate_files, (std::vector<std::string>{"/home/me/c1", "/home/me/c2"}));
}

TEST(SshConfig, KnownHostsFilesTakeTheirFirstLine) {
  const HostConfig c = resolve(
      "UserKnownHostsFile ~/a ~/b\n"
      "UserKnownHostsFile ~/c\n"
      "GlobalKnownHostsFile none\n"
      "GlobalKnownHostsFile /etc/x\n",
      "h");
  EXPECT_EQ(c.user_known_hosts_files, (std::vector<std::string>{"/home/me/a", "/home/me/b"}));
  ASSERT_TRUE(c.global_known_hosts_files.has_value());
  EXPECT_TRUE(c.global_known_hosts_files->empty());
  EXPECT_NE(error_of("UserKnownHostsFile none ~/a\n").find("must be the only value"),
            std::string::npos);
}

TEST(SshConfig, TimesFlagsAndPolicies) {
  const HostConfig c = resolve(
      "ConnectTimeout none\n"
      "ConnectTimeout 1m30s\n"
      "ServerAliveInterval 15\n"
      "ServerAliveCountMax 0\n"
      "StrictHostKeyChecking accept-new\n"
      "HostKeyAlias cluster-key\n",
      "h");
  EXPECT_EQ(c.connect_timeout_s, 90);
  EXPECT_EQ(c.server_alive_interval_s, 15);
  EXPECT_EQ(c.server_alive_count_max, 0);
  EXPECT_EQ(c.strict_host_key_checking, StrictHostKeyChecking::kAcceptNew);
  EXPECT_EQ(c.host_key_alias, "cluster-key");
  EXPECT_EQ(resolve("StrictHostKeyChecking no\n", "h").strict_host_key_checking,
            StrictHostKeyChecking::kOff);
  EXPECT_EQ(resolve("StrictHostKeyChecking ASK\n", "h").strict_host_key_checking,
            StrictHostKeyChecking::kAsk);
}

TEST(SshConfig, BadValuesNameFileLineAndKeyword) {
  const std::map<std::string, std::string> cases = {
      {"Port 0", "Port"},
      {"Port 70000", "Port"},
      {"Port abc", "Port"},
      {"Port 22 23", "Port"},
      {"ConnectTimeout x", "ConnectTimeout"},
      {"ConnectTimeout 5x", "ConnectTimeout"},
      {"ServerAliveInterval 1s2s", "ServerAliveInterval"},
      {"ServerAliveCountMax -1", "ServerAliveCountMax"},
      {"StrictHostKeyChecking maybe", "StrictHostKeyChecking"},
      {"BatchMode sometimes", "BatchMode"},
      {"IdentitiesOnly 1", "IdentitiesOnly"},
      {"HostName \"\"", "HostName"},
      {"HostName", "HostName"},
      {"HostName \"a b\"", "HostName"},
      {"User \"\"", "User"},
      {"Host \"\"", "Host"},
      {"IdentityFile \"\"", "IdentityFile"},
      {"UserKnownHostsFile ~/a \"\"", "UserKnownHostsFile"},
      {"Include \"\"", "Include"},
  };
  for (const auto& [line, keyword] : cases) {
    // Checked even in a block that does not match, as OpenSSH does.
    const std::string err = error_of("Host never-this-one\n  " + line + "\n");
    EXPECT_NE(err.find("/home/me/.ssh/config:2: " + keyword + ": "), std::string::npos)
        << line << " -> " << err;
  }
}

TEST(SshConfig, UnknownKeywordsAreTokenisedAndIgnored) {
  EXPECT_EQ(resolve("SendEnv LANG LC_*\nForwardAgent yes\nPort 2\n", "h").port, 2);
  EXPECT_NE(error_of("SendEnv \"LANG\n").find("config:1: SendEnv: unterminated quote"),
            std::string::npos);
  EXPECT_NE(error_of("ForwardAgent\n").find("no value"), std::string::npos);
}

TEST(SshConfig, ControlBytesInMessagesAreEscaped) {
  const std::string err = error_of("Port \x1b[31mred\n");
  EXPECT_EQ(err.find('\x1b'), std::string::npos);
  EXPECT_NE(err.find("\\e[31mred"), std::string::npos);
}

TEST(SshConfig, LineAndTotalCaps) {
  EXPECT_NE(
      error_of("# " + std::string(limits::kMaxSshConfigLineBytes, 'x') + "\n").find("config:1: "),
      std::string::npos);
  EXPECT_NE(error_of(std::string("Port 2\0 3\n", 10)).find("NUL"), std::string::npos);

  std::string many;
  for (std::size_t i = 0; i <= limits::kMaxSshConfigLines; ++i) many += "\n";
  EXPECT_NE(error_of(many).find("lines in all"), std::string::npos);

  MemoryFiles files;
  files.files[kUserFile] = "Include d/*\n";
  for (std::size_t i = 0; i < limits::kMaxSshConfigFiles; ++i)
    files.files["/home/me/.ssh/d/" + std::to_string(i)] = "\n";
  EXPECT_NE(error_of(files).find("config:1: Include: more than"), std::string::npos);
}

TEST(SshConfig, DashFReplacesBothFilesAndMustExist) {
  MemoryFiles files;
  files.files[kUserFile] = "Port 1\n";
  files.files[kSystemFile] = "Port 2\n";
  files.files["/tmp/alt"] = "User alt\nInclude inc\n";
  files.files["/home/me/.ssh/inc"] = "Port 3\n";
  LoadOptions options;
  options.home = kHome;
  options.files = &files;
  options.config_file = "/tmp/alt";
  const HostConfig c = SshConfig::load(options).resolve("h", test_ctx());
  EXPECT_EQ(c.user, "alt");
  EXPECT_EQ(c.port, 3);

  options.config_file = "none";
  EXPECT_FALSE(SshConfig::load(options).resolve("h", test_ctx()).port.has_value());
  options.config_file = "/tmp/missing";
  EXPECT_THROW((void)SshConfig::load(options), InputError);
}

// The real filesystem: glob(3), read_input_file and the permission check.
TEST(SshConfig, RealFilesFromATemporaryHome) {
  char templ[] = "/tmp/ssh_config_test.XXXXXX";
  ASSERT_NE(::mkdtemp(templ), nullptr);
  const std::string home = templ;
  std::filesystem::create_directories(home + "/.ssh/conf.d");
  std::ofstream(home + "/.ssh/config") << "Include conf.d/*\nHost web\n  User www\n";
  std::ofstream(home + "/.ssh/conf.d/a") << "Host web\n  Port 8022\n  IdentityFile ~/k\n";
  std::filesystem::create_directories(home + "/.ssh/conf.d/subdir");  // read as no file
  ::chmod((home + "/.ssh/config").c_str(), 0600);
  ::chmod((home + "/.ssh/conf.d/a").c_str(), 0644);
  LoadOptions options;
  options.home = home;
  options.system_file = home + "/no-system-file";
  ResolveContext ctx = test_ctx();
  ctx.home = home;
  const HostConfig c = SshConfig::load(options).resolve("web", ctx);
  EXPECT_EQ(c.user, "www");
  EXPECT_EQ(c.port, 8022);
  EXPECT_EQ(c.identity_files, (std::vector<std::string>{home + "/k"}));

  ::chmod((home + "/.ssh/conf.d/a").c_str(), 0666);
  try {
    (void)SshConfig::load(options);
    ADD_FAILURE() << "a group-writable include was read";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("bad owner or permissions"), std::string::npos);
  }
  std::filesystem::remove_all(home);
}

// A temporary home for the real-file tests below, removed at the end.
class RealHome {
 public:
  RealHome() {
    char templ[] = "/tmp/ssh_config_test.XXXXXX";
    if (::mkdtemp(templ) != nullptr) path = templ;
    std::filesystem::create_directories(path + "/.ssh");
    options.home = path;
    options.system_file = path + "/no-system-file";
  }
  ~RealHome() { std::filesystem::remove_all(path); }
  RealHome(const RealHome&) = delete;
  RealHome& operator=(const RealHome&) = delete;

  // Writes `text` to `rel` with `mode` (0600 for the user's config).
  std::string write(const std::string& rel, const std::string& text, mode_t mode = 0644) const {
    std::string p = path + "/" + rel;
    std::filesystem::create_directories(std::filesystem::path(p).parent_path());
    std::ofstream(p) << text;
    ::chmod(p.c_str(), mode);
    return p;
  }
  // The message of the InputError that loading throws; empty if none.
  std::string load_error() const {
    try {
      (void)SshConfig::load(options);
    } catch (const InputError& e) {
      return e.what();
    }
    return {};
  }

  std::string path;
  LoadOptions options;
};

// Another user's file: owned by nobody where we may chown (CI runs as root),
// else one that others may write; either is refused as ssh refuses it.
void make_foreign(const std::string& file) {
  if (::getuid() == 0 && ::chown(file.c_str(), 65534, 65534) == 0) return;
  ::chmod(file.c_str(), 0666);
}

TEST(SshConfig, IncludedFilesOthersOwnOrMayWriteAreRefusedNamingTheFile) {
  RealHome h;
  h.write(".ssh/config", "Include conf.d/*\n", 0600);
  const std::string inc = h.write(".ssh/conf.d/a", "Port 2222\n");
  EXPECT_EQ(h.load_error(), "");
  // 0664 is taken where the file's group has its owner alone (Debian's ssh).
  for (const mode_t mode : {0646, 0666}) {
    ::chmod(inc.c_str(), mode);
    const std::string e = h.load_error();
    EXPECT_NE(e.find(inc), std::string::npos) << e;
    EXPECT_NE(e.find("bad owner or permissions"), std::string::npos)
        << std::oct << mode << " " << e;
  }
  ::chmod(inc.c_str(), 0644);
  if (::getuid() == 0) {
    ASSERT_EQ(::chown(inc.c_str(), 65534, 65534), 0);
    const std::string e = h.load_error();
    EXPECT_NE(e.find(inc + ": ssh config: bad owner or permissions"), std::string::npos) << e;
  }
}

TEST(SshConfig, TheUsersOwnConfigGetsThePermissionCheckButADashFFileDoesNot) {
  RealHome h;
  const std::string user = h.write(".ssh/config", "Port 2222\n", 0666);
  EXPECT_NE(h.load_error().find("bad owner or permissions"), std::string::npos);
  h.options.config_file = user;  // -F: ssh does not check it either
  EXPECT_EQ(h.load_error(), "");
}

TEST(SshConfig, AnIncludedSymlinkIsFollowedAndWhatItPointsAtIsChecked) {
  RealHome h;
  h.write(".ssh/config", "Include conf.d/*\n", 0600);
  const std::string good = h.write("dotfiles/good", "Host web\n  Port 2222\n");
  const std::string bad = h.write("elsewhere/bad", "Host web\n  Port 6666\n");
  make_foreign(bad);
  std::filesystem::create_directories(h.path + "/.ssh/conf.d");
  std::filesystem::create_symlink(good, h.path + "/.ssh/conf.d/link");
  ResolveContext ctx = test_ctx();
  ctx.home = h.path;
  EXPECT_EQ(SshConfig::load(h.options).resolve("web", ctx).port, 2222);  // as ssh: links are fine
  std::filesystem::remove(h.path + "/.ssh/conf.d/link");
  std::filesystem::create_symlink(bad, h.path + "/.ssh/conf.d/link");
  const std::string e = h.load_error();
  EXPECT_NE(e.find(h.path + "/.ssh/conf.d/link: ssh config: bad owner or permissions"),
            std::string::npos)
      << e;
}

// Issue 27 item 5: an Include of a folder another user may write, where they
// flip a symlink between the user's file and their own while dlaunch reads
// it. The check is made on the file that was opened, so their file is
// refused every time and never read (the old stat-then-open let it through).
TEST(SshConfig, AnIncludeSwappedWhileBeingLoadedNeverYieldsTheOtherUsersFile) {
  RealHome h;
  const std::string shared = h.path + "/shared";  // writable by anyone, not sticky
  std::filesystem::create_directories(shared);
  ::chmod(shared.c_str(), 0777);
  h.write(".ssh/config", "Include " + shared + "/link\n", 0600);
  const std::string good = h.write("good", "Host web\n  Port 2222\n");
  const std::string bad = h.write("bad", "Host web\n  ProxyCommand /tmp/theirs %h\n  Port 6666\n");
  make_foreign(bad);
  const std::string link = shared + "/link";
  std::filesystem::create_symlink(good, link);

  std::atomic<bool> stop{false};
  std::thread flipper([&] {
    const std::string tmp = shared + "/next";
    for (bool to_bad = true; !stop.load(std::memory_order_relaxed); to_bad = !to_bad) {
      ::unlink(tmp.c_str());
      if (::symlink((to_bad ? bad : good).c_str(), tmp.c_str()) == 0)
        (void)::rename(tmp.c_str(), link.c_str());
    }
  });
  ResolveContext ctx = test_ctx();
  ctx.home = h.path;
  int read_good = 0;
  int refused = 0;
  int read_bad = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  for (int i = 0; i < 5000 && std::chrono::steady_clock::now() < until; ++i) {
    try {
      const HostConfig c = SshConfig::load(h.options).resolve("web", ctx);
      (c.port == 2222 && !c.proxy_command ? read_good : read_bad) += 1;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("bad owner or permissions"), std::string::npos)
          << e.what();
      ++refused;
    }
  }
  stop = true;
  flipper.join();
  EXPECT_EQ(read_bad, 0) << "the other user's file was read; good " << read_good << ", refused "
                         << refused;
  EXPECT_GT(read_good, 0);
  EXPECT_GT(refused, 0);
}

// $HOME set elsewhere than the passwd entry's home (a container, a CI job,
// `sudo -E`) for the duration of a test.
using OtherHome = dltest::ScopedEnv;

std::string passwd_home() {
  const passwd* pw = ::getpwuid(::getuid());
  return pw != nullptr ? pw->pw_dir : "";
}

TEST(SshHome, IsThePasswdEntrysNotHomeAsForOpenSsh) {
  const std::string pw_home = passwd_home();
  ASSERT_FALSE(pw_home.empty());
  const OtherHome other{{"HOME", "/nonexistent/other-home"}};
  EXPECT_EQ(ResolveContext::current().home, pw_home);
  EXPECT_EQ(home_directory(), pw_home);
  EXPECT_EQ(default_known_hosts_path(), pw_home + "/.ssh/known_hosts");
}

TEST(SshHome, UserConfigAndTildeComeFromThePasswdHomeWhenHomeDiffers) {
  const std::string pw_home = passwd_home();
  ASSERT_FALSE(pw_home.empty());
  const std::string fake = "/nonexistent/other-home";
  const OtherHome other{{"HOME", fake}};
  MemoryFiles files;
  files.files[pw_home + "/.ssh/config"] =
      "Host gpu-1\n  User frompasswd\n  IdentityFile ~/.ssh/id_gpu\n"
      "  UserKnownHostsFile %d/kh\n";
  files.files[fake + "/.ssh/config"] = "Host gpu-1\n  User fromhome\n  Port 2222\n";
  LoadOptions options;  // home left empty: the process's, as dlaunch loads it
  options.files = &files;
  options.system_file = "/nonexistent/system";
  const HostConfig c = SshConfig::load(options).resolve("gpu-1", ResolveContext::current());
  EXPECT_EQ(c.user, "frompasswd");
  EXPECT_EQ(c.port, std::nullopt);
  EXPECT_EQ(c.identity_files, (std::vector<std::string>{pw_home + "/.ssh/id_gpu"}));
  EXPECT_EQ(c.user_known_hosts_files, (std::vector<std::string>{pw_home + "/kh"}));
}

}  // namespace
}  // namespace dlaunch::ssh
