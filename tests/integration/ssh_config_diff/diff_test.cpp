// The differential test of dlaunch's ssh_config reader against OpenSSH: every
// case (a ~/.ssh/config, an /etc/ssh/ssh_config, an /etc/hosts, queries) is
// resolved by the installed `ssh -G` (the oracle) and by dlaunch_ssh_resolve
// (resolve_tool.cpp, dlaunch's own code), and the two must agree on host name,
// user, port, key files, jump chain, timeouts, HostKeyAlias and known_hosts
// files; where ssh refuses a configuration, dlaunch must refuse it too.
//
// Both run in a private mount and network namespace (`unshare -m -n`): this
// executable starts itself there (--in-namespace), binds a scratch home over
// the passwd entry's home, a scratch /etc/ssh and /etc/hosts, and rewrites
// them per case. Nothing connects, nothing on the machine changes. Skips
// unless root with unshare and ssh.
//
// The corpus: cases.txt (written by hand, one class or more per keyword and
// token) and kGenerated configurations drawn with a fixed seed, kCanonical
// more with the CanonicalizeHostname keywords and an /etc/hosts that answers
// some fully qualified names.
#include <pwd.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "../support.h"

namespace fs = std::filesystem;

namespace {

constexpr int kGenerated = 300;
constexpr int kQueriesPerGenerated = 4;
constexpr unsigned kSeed = 30;
constexpr int kCanonical = 80;
// Appended to the system file (or the -F file): ssh -G prints 0 both for an
// unset ServerAliveInterval and for "0", which mean different things to
// dlaunch (its own keepalive, or none). With this line, unset reads 7777.
constexpr const char* kSentinel = "\nHost *\n  ServerAliveInterval 7777\n";
// Classes still known to differ, and why; the test fails when one of them
// agrees (take it off) as when any other class differs.
// None today: passwd-home agreed once dlaunch took ~ from the passwd entry.
const std::map<std::string, std::string> kKnownDifferent = {};
// dlaunch's connect timeout where the configuration sets none (ssh: none).
constexpr const char* kDefaultTimeout = "10";

struct Case {
  std::string name;
  std::string klass;
  std::map<std::string, std::string> files;  // "~/x", "$HOME/x", "/etc/ssh/x", "/etc/hosts"
  std::map<std::string, int> modes;
  std::vector<std::string> args;  // -F FILE, -l USER, -p PORT for both tools
  std::vector<std::string> queries;
  bool fake_home = false;  // $HOME points elsewhere than the passwd entry
};

std::vector<std::string> words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

// cases.txt: "case NAME CLASS", then "file PATH" ... "end", "mode PATH 0664",
// "args ...", "home" (a $HOME unlike the passwd entry's) and "query ALIAS...".
std::vector<Case> read_cases(const std::string& path) {
  std::ifstream in(path);
  std::vector<Case> out;
  std::string line;
  while (std::getline(in, line)) {
    const auto w = words(line);
    if (w.empty() || w[0][0] == '#') continue;
    if (w[0] == "case") {
      out.push_back({w.at(1), w.at(2), {}, {}, {}, {}, false});
    } else if (w[0] == "file") {
      std::string text;
      while (std::getline(in, line) && line != "end") {
        // "\xEF" style escapes let a case hold a byte order mark.
        for (std::size_t i = line.find("\\x"); i != std::string::npos; i = line.find("\\x", i)) {
          line.replace(i, 4, 1, static_cast<char>(std::stoi(line.substr(i + 2, 2), nullptr, 16)));
        }
        text += line + "\n";
      }
      out.back().files[w.at(1)] = text;
    } else if (w[0] == "mode") {
      out.back().modes[w.at(1)] = std::stoi(w.at(2), nullptr, 8);
    } else if (w[0] == "args") {
      out.back().args.assign(w.begin() + 1, w.end());
    } else if (w[0] == "home") {
      out.back().fake_home = true;
    } else if (w[0] == "query") {
      out.back().queries.insert(out.back().queries.end(), w.begin() + 1, w.end());
    }
  }
  return out;
}

// Configurations drawn with a fixed seed from the keywords and tokens dlaunch uses.
std::vector<Case> generated_cases(bool canonical) {
  std::mt19937 rng(canonical ? kSeed + 1 : kSeed);
  const auto pick = [&](const auto& v) {
    return v[std::uniform_int_distribution<std::size_t>(0, v.size() - 1)(rng)];
  };
  const std::vector<std::string> aliases = {
      "web", "db", "gpu-1", "Web", "bastion", "10.0.0.1", "node.example.com", "jump1"};
  const std::vector<std::string> heads = {"Host web",
                                          "Host *",
                                          "Host !db *",
                                          "Host gpu-*",
                                          "Host *.example.com",
                                          "Host Web",
                                          "Host w?b db",
                                          "Host bastion jump*",
                                          "Match host web,db",
                                          "Match originalhost Web",
                                          "Match user bob",
                                          "Match all",
                                          "Match !host web",
                                          "Host !x",
                                          "Match localuser root host *.example.com"};
  const std::vector<std::vector<std::string>> lines = {
      {"HostName 10.0.0.7", "HostName H1.Example.com", "HostName %h.internal", "HostName web"},
      {"User alice", "User bob", "User %u"},
      {"Port 2200", "Port 2222", "Port ssh", "Port 22"},
      {"IdentityFile ~/.ssh/id_a", "IdentityFile ~/.ssh/%h_%r", "IdentityFile none",
       "IdentityFile %d/.ssh/k_%p", "IdentityFile ~/.ssh/%k"},
      {"ProxyJump bastion", "ProxyJump bob@bastion:2022", "ProxyJump jump1,jump2", "ProxyJump none",
       "ProxyJump jump1"},
      {"HostKeyAlias KeyAlias", "HostKeyAlias shared"},
      {"ConnectTimeout 0", "ConnectTimeout 5", "ConnectTimeout 1m", "ConnectTimeout none"},
      {"ServerAliveInterval 0", "ServerAliveInterval 15"},
      {"ServerAliveCountMax 1", "ServerAliveCountMax 5"},
      {"UserKnownHostsFile ~/.ssh/kh_%k", "UserKnownHostsFile none",
       "UserKnownHostsFile /etc/kh %d/kh2"},
      {"ForwardAgent yes", "Compression no"},
  };
  std::vector<std::string> heads_here = heads;
  std::vector<std::vector<std::string>> lines_here = lines;
  if (canonical) {
    for (const char* h : {"Match canonical", "Match final host *.example.com", "Match !final",
                          "Host *.example.org", "Match canonical host web.example.com"})
      heads_here.emplace_back(h);
    lines_here.push_back(
        {"CanonicalizeHostname yes", "CanonicalizeHostname always", "CanonicalizeHostname no"});
    lines_here.push_back({"CanonicalDomains example.com",
                          "CanonicalDomains example.org example.com", "CanonicalDomains none",
                          "CanonicalDomains Example.ORG."});
    lines_here.push_back({"CanonicalizeMaxDots 0", "CanonicalizeMaxDots 2"});
    lines_here.push_back({"CanonicalizeFallbackLocal no", "CanonicalizeFallbackLocal yes"});
    // Twice as likely as another line: the point of these cases.
    lines_here.push_back(lines_here[lines_here.size() - 4]);
    lines_here.push_back(lines_here[lines_here.size() - 4]);
  }
  std::vector<Case> out;
  for (int n = 0; n < (canonical ? kCanonical : kGenerated); ++n) {
    Case c{fmt::format("{}{:03}", canonical ? "canon" : "gen", n),
           canonical ? "generated-canonical" : "generated",
           {},
           {},
           {},
           {},
           false};
    std::string text;
    // Most canonical cases ask for it before any block, as users write it.
    if (canonical && std::uniform_int_distribution<int>(0, 3)(rng) != 0) {
      text += pick(
          std::vector<std::string>{"CanonicalizeHostname yes\n", "CanonicalizeHostname always\n"});
      text += pick(std::vector<std::string>{"CanonicalDomains example.com\n",
                                            "CanonicalDomains example.org example.com\n"});
    }
    const int blocks = std::uniform_int_distribution<int>(1, 5)(rng);
    for (int b = 0; b < blocks; ++b) {
      if (b > 0 || std::uniform_int_distribution<int>(0, 3)(rng) != 0)
        text += pick(heads_here) + "\n";
      const int count = std::uniform_int_distribution<int>(1, 4)(rng);
      for (int k = 0; k < count; ++k) text += "  " + pick(pick(lines_here)) + "\n";
    }
    const bool system = std::uniform_int_distribution<int>(0, 3)(rng) == 0;
    c.files[system ? "/etc/ssh/ssh_config" : "~/.ssh/config"] = text;
    // The names a DNS server would answer (glibc's files source matches a
    // name with its trailing dot only when written so).
    if (canonical) {
      c.files["/etc/hosts"] =
          "127.0.0.1 localhost\n"
          "10.9.0.1 web.example.com. db.example.org. gpu-1.example.com. h1.example.com.\n"
          "10.9.0.2 web.example.org. node.example.com. bastion.example.com.\n";
    }
    for (int q = 0; q < kQueriesPerGenerated; ++q) {
      const std::string a = pick(aliases);
      if (std::find(c.queries.begin(), c.queries.end(), a) == c.queries.end())
        c.queries.push_back(a);
    }
    out.push_back(std::move(c));
  }
  return out;
}

// ---- the oracle: ssh -G, its output put in dlaunch_ssh_resolve's words ----

std::map<std::string, std::vector<std::string>> parse_g(const std::string& out) {
  std::map<std::string, std::vector<std::string>> m;
  for (const auto& line : dltest::lines_of(out)) {
    const auto sp = line.find(' ');
    if (sp == std::string::npos) continue;
    m[line.substr(0, sp)].push_back(line.substr(sp + 1));
  }
  return m;
}

struct Env {
  std::string home;  // the passwd entry's
  std::string local_user;
  std::string local_host;
  std::vector<std::string> env;  // for both tools
  std::vector<std::string> args;
};

std::string first(const std::map<std::string, std::vector<std::string>>& m, const std::string& k,
                  const std::string& otherwise = "-") {
  const auto it = m.find(k);
  return it == m.end() || it->second.empty() ? otherwise : it->second.front();
}

std::string getenv_of(const Env& e, const std::string& name) {
  for (const auto& v : e.env) {
    if (v.compare(0, name.size() + 1, name + "=") == 0) return v.substr(name.size() + 1);
  }
  const char* v = std::getenv(name.c_str());
  return v != nullptr ? v : "";
}

// ssh_config(5)'s TOKENS and ~ for a path, from ssh -G's own values.
std::string expand_path(std::string s, const std::map<char, std::string>& vars, const Env& e) {
  if (!s.empty() && s[0] == '~') {
    const auto slash = s.find('/');
    const std::string who = s.substr(1, slash == std::string::npos ? std::string::npos : slash - 1);
    std::string home = e.home;
    if (!who.empty()) {
      const passwd* pw = ::getpwnam(who.c_str());
      home = pw != nullptr ? pw->pw_dir : "?";
    }
    s = home + (slash == std::string::npos ? "" : s.substr(slash));
  }
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 1 < s.size()) {
      const auto it = vars.find(s[++i]);
      out += it != vars.end() ? it->second : std::string("%") + s[i];
    } else if (s[i] == '$' && i + 1 < s.size() && s[i + 1] == '{') {
      const auto end = s.find('}', i);
      out += getenv_of(e, s.substr(i + 2, end - i - 2));
      i = end;
    } else {
      out += s[i];
    }
  }
  return out;
}

struct Hop {
  std::string spec, user, host, port;
};

std::vector<Hop> parse_jumps(const std::string& list) {
  std::vector<Hop> out;
  std::stringstream in(list);
  for (std::string part; std::getline(in, part, ',');) {
    Hop h{part, "", "", ""};
    std::string s = part;
    if (s.rfind("ssh://", 0) == 0) s = s.substr(6);
    if (const auto at = s.rfind('@'); at != std::string::npos) {
      h.user = s.substr(0, at);
      s = s.substr(at + 1);
    }
    if (!s.empty() && s[0] == '[') {
      const auto close = s.find(']');
      h.host = s.substr(1, close - 1);
      if (close + 1 < s.size()) h.port = s.substr(close + 2);
    } else if (const auto colon = s.find(':'); colon != std::string::npos) {
      h.host = s.substr(0, colon);
      h.port = s.substr(colon + 1);
    } else {
      h.host = s;
    }
    out.push_back(h);
  }
  return out;
}

const std::vector<std::string> kDefaultKeys = {
    "~/.ssh/id_rsa",        "~/.ssh/id_ecdsa", "~/.ssh/id_ecdsa_sk", "~/.ssh/id_ed25519",
    "~/.ssh/id_ed25519_sk", "~/.ssh/id_xmss",  "~/.ssh/id_dsa"};

struct Resolved {
  bool error = false;
  std::string why;                 // ssh's message
  std::vector<std::string> lines;  // in resolve_tool.cpp's words
  std::vector<std::string> chain;  // jump0..: "user@host:port" etc, flattened
  std::vector<std::vector<std::string>> chain_lines;
};

Resolved oracle(const std::string& alias, const std::vector<std::string>& extra, const Env& e,
                int depth) {
  Resolved r;
  if (depth > 8) {
    r.error = true;
    r.why = "jump chain deeper than 8";
    return r;
  }
  // ControlPath (which dlaunch does not use) gives ssh's own %C for the paths
  // that ssh -G prints unexpanded (IdentityFile).
  std::vector<std::string> argv = {"ssh", "-G", "-o", "ControlPath=%C"};
  argv.insert(argv.end(), e.args.begin(), e.args.end());
  argv.insert(argv.end(), extra.begin(), extra.end());
  argv.push_back(alias);
  const auto run = dltest::run(argv, 10, e.env);
  if (run.exit_code != 0) {
    r.error = true;
    r.why = dltest::lines_of(run.err).empty() ? "exit " + std::to_string(run.exit_code)
                                              : dltest::lines_of(run.err).front();
    return r;
  }
  const auto g = parse_g(run.out);
  std::map<char, std::string> vars = {{'%', "%"},
                                      {'C', first(g, "controlpath")},
                                      {'d', e.home},
                                      {'h', first(g, "hostname")},
                                      {'i', std::to_string(::getuid())},
                                      {'k', first(g, "hostkeyalias", alias)},
                                      {'L', e.local_host.substr(0, e.local_host.find('.'))},
                                      {'l', e.local_host},
                                      {'n', alias},
                                      {'p', first(g, "port")},
                                      {'r', first(g, "user")},
                                      {'u', e.local_user}};
  r.lines.push_back("hostname " + first(g, "hostname"));
  r.lines.push_back("user " + first(g, "user"));
  r.lines.push_back("port " + first(g, "port"));
  std::vector<std::string> keys =
      g.count("identityfile") ? g.at("identityfile") : std::vector<std::string>{};
  std::vector<std::string> key_lines;
  if (keys == kDefaultKeys) {
    key_lines.emplace_back("identityfile defaults");
  } else {
    std::vector<std::string> files;
    for (const auto& k : keys) {
      if (k == "none") continue;
      std::string f = expand_path(k, vars, e);
      if (std::find(files.begin(), files.end(), f) == files.end()) files.push_back(f);
    }
    if (files.empty()) key_lines.emplace_back("identityfile none");
    for (const auto& f : files) key_lines.push_back("identityfile " + f);
  }
  r.lines.insert(r.lines.end(), key_lines.begin(), key_lines.end());
  r.lines.push_back("hostkeyalias " + first(g, "hostkeyalias"));
  std::string ukh = first(g, "userknownhostsfile");
  if (ukh == "none") ukh = "/dev/null";
  r.lines.push_back("userknownhostsfile " + ukh);
  std::string gkh = first(g, "globalknownhostsfile");
  if (gkh == "none") gkh = "";
  r.lines.push_back("globalknownhostsfile " + gkh);
  const std::string timeout = first(g, "connecttimeout");
  r.lines.push_back("connecttimeout " +
                    (timeout == "none" ? std::string(kDefaultTimeout) : timeout));
  r.lines.push_back("serveraliveinterval " + first(g, "serveraliveinterval"));
  r.lines.push_back("serveralivecountmax " + first(g, "serveralivecountmax"));

  const std::string jump = first(g, "proxyjump", "none");
  if (jump == "none") return r;
  // ssh builds `ssh [-l U] [-p P] [-J EARLIER] -W ... LAST` and expands
  // %h %k %n %p %r %% in it with this host's values.
  std::map<char, std::string> proxy_vars;
  for (const char c : std::string("%hknpr")) proxy_vars[c] = vars[c];
  const std::vector<Hop> hops = parse_jumps(expand_path(jump, proxy_vars, {"", "", "", {}, {}}));
  std::string earlier;
  for (std::size_t i = 0; i < hops.size(); ++i) {
    std::vector<std::string> hop_args;
    if (!hops[i].user.empty()) hop_args.insert(hop_args.end(), {"-l", hops[i].user});
    if (!hops[i].port.empty()) hop_args.insert(hop_args.end(), {"-p", hops[i].port});
    if (!earlier.empty()) hop_args.insert(hop_args.end(), {"-J", earlier});
    Resolved h = oracle(hops[i].host, hop_args, e, depth + 1);
    if (h.error) {
      r.error = true;
      r.why = "jump host " + hops[i].host + ": " + h.why;
      return r;
    }
    if (i == 0) {
      r.chain = h.chain;
      r.chain_lines = h.chain_lines;
    }
    const auto value = [&](const std::string& key) {
      for (const auto& l : h.lines) {
        if (l.rfind(key + " ", 0) == 0) return l.substr(key.size() + 1);
      }
      return std::string();
    };
    r.chain.push_back(value("user") + "@" + value("hostname") + ":" + value("port"));
    std::vector<std::string> hl;
    for (const auto& l : h.lines) {
      if (l.rfind("identityfile ", 0) == 0 || l.rfind("hostkeyalias ", 0) == 0 ||
          l.rfind("userknownhostsfile ", 0) == 0)
        hl.push_back(l);
    }
    r.chain_lines.push_back(hl);
    earlier += (earlier.empty() ? "" : ",") + hops[i].spec;
  }
  for (std::size_t i = 0; i < r.chain.size(); ++i) {
    r.lines.push_back(fmt::format("jump{} {}", i, r.chain[i]));
    for (const auto& l : r.chain_lines[i]) r.lines.push_back(fmt::format("jump{} {}", i, l));
  }
  return r;
}

// ---- inside the namespace ----

void write_file(const std::string& path, const std::string& text, int mode) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::trunc) << text;
  ::chmod(path.c_str(), static_cast<mode_t>(mode));
}

void must(bool ok, const std::string& what) {
  if (!ok) {
    fmt::print("FATAL {}: {}\n", what, std::strerror(errno));
    std::exit(3);
  }
}

// Prints "RESULT CLASS CASE ALIAS agree|refused|differ FIELD" per query, and
// the two resolutions where they differ.
int in_namespace(const std::string& stage, const std::string& tool, const std::string& cases_file) {
  const passwd* pw = ::getpwuid(::getuid());
  must(pw != nullptr, "getpwuid");
  Env base;
  base.home = pw->pw_dir;
  base.local_user = pw->pw_name;
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  base.local_host = host;
  const std::string home = stage + "/home";
  const std::string etc_ssh = stage + "/etc_ssh";
  const std::string hosts = stage + "/hosts";
  const std::string other_home = stage + "/other_home";
  fs::create_directories(home);
  fs::create_directories(etc_ssh);
  write_file(hosts, "", 0644);
  must(::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0, "make / private");
  must(::mount(home.c_str(), base.home.c_str(), nullptr, MS_BIND, nullptr) == 0, "bind home");
  must(::mount(etc_ssh.c_str(), "/etc/ssh", nullptr, MS_BIND, nullptr) == 0, "bind /etc/ssh");
  must(::mount(hosts.c_str(), "/etc/hosts", nullptr, MS_BIND, nullptr) == 0, "bind /etc/hosts");

  std::vector<Case> cases = read_cases(cases_file);
  for (const bool canonical : {false, true}) {
    for (auto& c : generated_cases(canonical)) cases.push_back(std::move(c));
  }
  for (const Case& c : cases) {
    for (const auto& dir : {base.home, std::string("/etc/ssh"), other_home}) {
      if (!fs::exists(dir)) continue;
      for (const auto& entry : fs::directory_iterator(dir)) fs::remove_all(entry.path());
    }
    fs::create_directories(base.home + "/.ssh");
    ::chmod((base.home + "/.ssh").c_str(), 0700);
    std::string system_file = "";
    std::string hosts_text = "127.0.0.1 localhost\n";
    std::vector<std::string> args = c.args;
    std::string f_file;
    for (auto& a : args) {
      if (a.rfind("~/", 0) == 0) a = base.home + a.substr(1);
    }
    for (std::size_t i = 0; i + 1 < args.size(); ++i) {
      if (args[i] == "-F") f_file = args[i + 1];
    }
    for (const auto& [name, text] : c.files) {
      std::string path = name;
      if (path.rfind("~/", 0) == 0) path = base.home + path.substr(1);
      if (path.rfind("$HOME/", 0) == 0) path = other_home + path.substr(5);
      const int mode = c.modes.count(name) ? c.modes.at(name) : 0600;
      if (path == "/etc/ssh/ssh_config") {
        system_file = text;
      } else if (path == "/etc/hosts") {
        hosts_text = text;
      } else {
        write_file(path, text + (path == f_file ? kSentinel : ""), mode);
      }
    }
    write_file("/etc/ssh/ssh_config", system_file + kSentinel, 0644);
    std::ofstream("/etc/hosts", std::ios::trunc) << hosts_text;
    Env e = base;
    e.args = args;
    if (c.fake_home) e.env.push_back("HOME=" + other_home);

    std::vector<std::string> argv = {tool};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.insert(argv.end(), c.queries.begin(), c.queries.end());
    const auto ours = dltest::run(argv, 20, e.env);
    std::map<std::string, std::vector<std::string>> got;
    std::string current;
    std::map<std::string, std::string> via;  // alias -> why ssh -G resolved it
    for (const auto& line : dltest::lines_of(ours.out)) {
      if (line.rfind("via ", 0) == 0) {
        via[current] = line.substr(4);
      } else if (line.rfind("= ", 0) == 0) {
        current = line.substr(2);
      } else {
        got[current].push_back(line);
      }
    }
    for (const auto& alias : c.queries) {
      const Resolved want = oracle(alias, {}, e, 0);
      const auto& have = got[alias];
      const bool refused = !have.empty() && have.front().rfind("error ", 0) == 0;
      std::string verdict = "agree";
      std::string field;
      if (want.error && refused) {
        verdict = "refused";
      } else if (want.error || refused || have.empty()) {
        verdict = "differ";
        field = want.error ? "refusal(ssh)" : "refusal(dlaunch)";
      } else if (have != want.lines) {
        verdict = "differ";
        for (std::size_t i = 0; i < std::max(have.size(), want.lines.size()); ++i) {
          const std::string a = i < have.size() ? have[i] : "";
          const std::string b = i < want.lines.size() ? want.lines[i] : "";
          if (a != b) {
            field = words(a.empty() ? b : a).front();
            if (field.rfind("jump", 0) == 0) field = "jump";
            break;
          }
        }
      }
      if (via.count(alias) && verdict != "differ") verdict = "agree-via-ssh-G";
      fmt::print("RESULT {} {} {} {} {}\n", c.klass, c.name, alias, verdict, field);
      // Evidence that the canonicalization cases canonicalize: ssh's host
      // name is the alias with one of the test domains added.
      std::string lower_alias = alias;
      for (char& ch : lower_alias)
        ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      for (const char* domain : {".example.com", ".example.org"}) {
        if (!want.error && !want.lines.empty() &&
            want.lines.front() == "hostname " + lower_alias + domain)
          fmt::print("CANONICALIZED {} {}\n", c.name, alias);
      }
      if (verdict == "differ") {
        fmt::print("  ssh -G:");
        if (want.error) fmt::print(" error {}", want.why);
        for (const auto& l : want.lines) fmt::print(" | {}", l);
        fmt::print("\n  dlaunch:");
        for (const auto& l : have) fmt::print(" | {}", l);
        if (have.empty()) fmt::print(" (nothing; exit {}) {}", ours.exit_code, ours.err);
        fmt::print("\n");
      }
    }
  }
  return 0;
}

bool have_program(const std::string& name) {
  return dltest::run({"sh", "-c", "command -v " + name}, 10).exit_code == 0;
}

TEST(SshConfigDiff, DlaunchResolvesAsSshG) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (a private mount namespace over /etc/ssh)";
  if (!have_program("unshare")) GTEST_SKIP() << "unshare(1) is not installed";
  if (!have_program("ssh")) GTEST_SKIP() << "OpenSSH's ssh is not installed (the oracle)";
  if (!fs::exists("/etc/hosts")) GTEST_SKIP() << "no /etc/hosts to bind over";
  const std::string stage =
      (fs::temp_directory_path() / ("dlaunch-sshdiff-" + std::to_string(::getpid()))).string();
  fs::create_directories(stage);
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  const auto r =
      dltest::run({"unshare", "-m", "-n", self, "--in-namespace", stage, DLAUNCH_SSH_RESOLVE_BIN,
                   std::string(SOURCE_DIR) + "/tests/integration/ssh_config_diff/cases.txt"},
                  300);
  fs::remove_all(stage);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::map<std::string, std::map<std::string, int>> by_class;  // class -> verdict -> n
  std::map<std::string, int> differ_by_field;
  std::map<std::string, int> cases;
  int queries = 0;
  int differ = 0;
  int canonicalized = 0;
  std::string details;
  std::string last_case;
  for (const auto& line : dltest::lines_of(r.out)) {
    const auto w = words(line);
    if (w.empty()) continue;
    if (w[0] == "CANONICALIZED") {
      ++canonicalized;
      continue;
    }
    if (w[0] != "RESULT") {
      details += line + "\n";
      continue;
    }
    ++queries;
    cases[w[2]] = 1;
    by_class[w[1]][w[4]]++;
    if (w[4] == "differ") {
      ++differ;
      differ_by_field[w.size() > 5 ? w[5] : "?"]++;
      details +=
          fmt::format("{} ({}), {}: differs in {}\n", w[2], w[1], w[3], w.size() > 5 ? w[5] : "?");
    }
  }
  fmt::print(
      "ssh_config differential: {} cases, {} queries, {} agree ({} of them refused by both), "
      "{} differ\n",
      cases.size(), queries, queries - differ,
      [&] {
        int n = 0;
        for (const auto& [k, v] : by_class) n += v.count("refused") ? v.at("refused") : 0;
        return n;
      }(),
      differ);
  for (const auto& [klass, v] : by_class) {
    const int d = v.count("differ") ? v.at("differ") : 0;
    const int a =
        (v.count("agree") ? v.at("agree") : 0) + (v.count("refused") ? v.at("refused") : 0);
    const int g = v.count("agree-via-ssh-G") ? v.at("agree-via-ssh-G") : 0;
    fmt::print("  class {:<20} {:>4} agree {:>4} differ ({} of the agreeing resolved by ssh -G)\n",
               klass, a + g, d, g);
  }
  for (const auto& [field, n] : differ_by_field)
    fmt::print("  differing in {:<20} {:>4}\n", field, n);
  fmt::print("  {} queries that ssh canonicalized (its host name the alias and a domain)\n",
             canonicalized);
  EXPECT_GT(queries, 800) << "the corpus did not run";
  EXPECT_GT(canonicalized, 20) << "the CanonicalizeHostname cases did not canonicalize";
  int unexpected = differ;
  for (const auto& [klass, why] : kKnownDifferent) {
    const auto it = by_class.find(klass);
    const int d = it != by_class.end() && it->second.count("differ") ? it->second.at("differ") : 0;
    fmt::print("  known to differ: {} ({} queries): {}\n", klass, d, why);
    EXPECT_GT(d, 0) << klass << " agrees now: take it off kKnownDifferent";
    unexpected -= d;
  }
  EXPECT_EQ(unexpected, 0) << details;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 5 && std::string(argv[1]) == "--in-namespace") {
    return in_namespace(argv[2], argv[3], argv[4]);
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
