// The corpus (tests/integration/corpus/command_lines.yaml): command lines from
// the documentation of mpirun, horovodrun, DeepSpeed and torchrun, each run
// with dlaunch on this machine's logical nodes and checked against what the
// peer's documentation promises: the ranks, their environment, where they
// ran, the exit status, the output files; or, for an option dlaunch cannot
// honour, that it is refused by name with exit 2 before anything runs.
// One test per line: CommandLine/<id>. The summary at the end counts them.
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include "support.h"

using namespace dltest;
namespace fs = std::filesystem;

namespace {

const std::string kCorpusDir = std::string(SOURCE_DIR) + "/tests/integration/corpus";

struct Entry {
  std::string id;
  std::string source;
  std::string peer;
  std::string run;
  std::map<std::string, std::string> files;
  std::map<std::string, std::string> env;
  std::string refused;
  YAML::Node expect;
};

std::vector<Entry> load_corpus() {
  std::vector<Entry> out;
  const YAML::Node root = YAML::LoadFile(kCorpusDir + "/command_lines.yaml");
  for (const auto& n : root["lines"]) {
    Entry e;
    e.id = n["id"].as<std::string>();
    e.source = n["source"].as<std::string>();
    e.peer = n["peer"].as<std::string>();
    e.run = n["run"].as<std::string>();
    for (const auto& f : n["files"])
      e.files[f.first.as<std::string>()] = f.second.as<std::string>();
    for (const auto& v : n["env"]) e.env[v.first.as<std::string>()] = v.second.as<std::string>();
    if (n["refused"]) e.refused = n["refused"].as<std::string>();
    e.expect = n["expect"] ? n["expect"] : YAML::Node(YAML::NodeType::Map);
    out.push_back(std::move(e));
  }
  return out;
}

const std::vector<Entry>& corpus() {
  static const std::vector<Entry> entries = load_corpus();
  return entries;
}

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  ::close(fd);
  return port;
}

std::string find_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path != nullptr ? path : "/usr/bin");
  for (std::string d; std::getline(dirs, d, ':');) {
    if (!d.empty() && ::access((d + "/" + name).c_str(), X_OK) == 0) return d + "/" + name;
  }
  return {};
}

// $PORT, $PORT2 in an expected value.
std::string expand(std::string v, const std::map<std::string, std::string>& vars) {
  for (const auto& [k, val] : vars) {
    for (auto at = v.find("$" + k); at != std::string::npos; at = v.find("$" + k)) {
      v.replace(at, k.size() + 1, val);
    }
  }
  return v;
}

// Every line that names a RANK: its NAME=VALUE words, by rank. A rank seen
// twice is kept under -1 - rank, so that the count check names it.
std::map<int, std::map<std::string, std::string>> rank_lines(const std::string& out) {
  std::map<int, std::map<std::string, std::string>> by_rank;
  for (const auto& line : lines_of(out)) {
    std::map<std::string, std::string> words;
    std::istringstream in(line);
    for (std::string w; in >> w;) {
      const auto eq = w.find('=');
      if (eq == std::string::npos || eq == 0) continue;
      std::string value = w.substr(eq + 1);
      if (!value.empty() && value.back() == ',' && w.compare(0, eq, "ARGS") != 0) value.pop_back();
      words.emplace(w.substr(0, eq), value);
    }
    const auto r = words.find("RANK");
    if (r == words.end() || r->second.empty() ||
        r->second.find_first_not_of("0123456789") != std::string::npos) {
      continue;
    }
    const int rank = std::stoi(r->second);
    if (!by_rank.emplace(rank, words).second) by_rank[-1 - rank] = words;
  }
  return by_rank;
}

std::vector<std::string> strings(const YAML::Node& n) {
  std::vector<std::string> out;
  for (const auto& s : n) out.push_back(s.as<std::string>());
  return out;
}

struct Summary {
  int ran = 0;
  int refused = 0;
};
Summary& summary() {
  static Summary s;
  return s;
}

class CorpusSummary : public ::testing::Environment {
 public:
  void TearDown() override {
    std::printf("CORPUS: %zu command lines; %d run and checked, %d refused by design\n",
                corpus().size(), summary().ran, summary().refused);
  }
};
[[maybe_unused]] auto* const kSummary = ::testing::AddGlobalTestEnvironment(new CorpusSummary);

class CommandLine : public ::testing::TestWithParam<std::size_t> {};

TEST_P(CommandLine, DoesWhatThePeersDocumentationSays) {
  const Entry& e = corpus().at(GetParam());
  SCOPED_TRACE(e.id + " (" + e.source + ")\n  peer:    " + e.peer + "\n  dlaunch: " + e.run);
  const std::string dir = temp_dir("corpus");
  // Removed however the test ends (an ASSERT returns early).
  const struct Cleanup {
    std::string path;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(path, ec);
    }
  } cleanup{dir};
  const std::string work = dir + "/work";
  const std::string home = dir + "/home";
  const std::string bin = dir + "/bin";
  for (const auto& d : {work, home, bin}) fs::create_directories(d);
  // The peers' programs: a.out and its Python twin under the names the
  // documents use, examples/mpi_hello, and `python` where only python3 is.
  fs::create_symlink(kCorpusDir + "/show_env.sh", work + "/a.out");
  for (const char* py : {"train.py", "client_entry.py", "YOUR_TRAINING_SCRIPT.py", "corpus_mod.py"})
    fs::copy_file(kCorpusDir + "/show_env.py", work + "/" + py);
  fs::create_symlink(MPI_HELLO_BIN, work + "/mpi_hello");
  if (const auto py = find_on_path("python3"); !py.empty()) fs::create_symlink(py, bin + "/python");
  for (const auto& [name, text] : e.files) {
    const std::string path = name.rfind("~/", 0) == 0 ? home + name.substr(1) : work + "/" + name;
    fs::create_directories(fs::path(path).parent_path());
    std::ofstream(path) << text;
    if (text.rfind("#!", 0) == 0) ::chmod(path.c_str(), 0755);
  }
  const std::map<std::string, std::string> vars = {{"PORT", std::to_string(free_port())},
                                                   {"PORT2", std::to_string(free_port())}};
  const char* path = std::getenv("PATH");
  std::vector<std::string> env = {
      "HOME=" + home,
      "PATH=" + bin + ":" + fs::path(DLAUNCH_BIN).parent_path().string() + ":" +
          (path != nullptr ? path : "/usr/bin:/bin"),
      "PORT=" + vars.at("PORT"), "PORT2=" + vars.at("PORT2"), "NO_COLOR=1"};
  for (const auto& [k, v] : e.env) env.push_back(k + "=" + v);

  const auto r = run({"/bin/sh", "-c", "cd \"$0\" && " + e.run, work}, 120, env);
  const auto& x = e.expect;
  const int exit = x["exit"] ? x["exit"].as<int>() : 0;
  ASSERT_EQ(r.exit_code, exit) << "stdout:\n" << r.out << "stderr:\n" << r.err;
  if (exit == 2) {
    ASSERT_FALSE(e.refused.empty()) << "an exit 2 by design says why under `refused`";
    EXPECT_EQ(r.out, "") << "a refused line runs nothing";
    EXPECT_NE(r.err.find("dlaunch: error: "), std::string::npos) << r.err;
    ++summary().refused;
  } else {
    ++summary().ran;
  }

  const auto ranks = rank_lines(r.out);
  if (x["ranks"]) {
    const int n = x["ranks"].as<int>();
    std::set<int> seen;
    for (const auto& [rank, words] : ranks) seen.insert(rank);
    std::set<int> want;
    for (int k = 0; k < n; ++k) want.insert(k);
    EXPECT_EQ(seen, want) << "ranks seen (a negative one: a rank printed twice)\n" << r.out;
  }
  const auto check_words = [&](const YAML::Node& wanted, const std::string& who,
                               const std::map<std::string, std::string>& words) {
    for (const auto& kv : wanted) {
      const auto name = kv.first.as<std::string>();
      const std::string value = expand(kv.second.as<std::string>(), vars);
      const auto it = words.find(name);
      EXPECT_TRUE(it != words.end() && it->second == value)
          << who << ": " << name << "=" << (it == words.end() ? "<missing>" : it->second)
          << ", wanted " << value << "\n"
          << r.out;
    }
  };
  for (const auto& [rank, words] : ranks) {
    if (x["all"]) check_words(x["all"], "rank " + std::to_string(rank), words);
  }
  for (const auto& kv : x) {
    const auto key = kv.first.as<std::string>();
    if (key.rfind("rank.", 0) != 0) continue;
    const int rank = std::stoi(key.substr(5));
    const auto it = ranks.find(rank);
    ASSERT_NE(it, ranks.end()) << "no line from rank " << rank << "\n" << r.out;
    check_words(kv.second, key, it->second);
  }
  for (const auto& s : strings(x["stdout"])) {
    EXPECT_NE(r.out.find(s), std::string::npos) << "stdout lacks '" << s << "'\n" << r.out;
  }
  for (const auto& s : strings(x["no_stdout"])) {
    EXPECT_EQ(r.out.find(s), std::string::npos) << "stdout has '" << s << "'\n" << r.out;
  }
  for (const auto& s : strings(x["stdout_regex"])) {
    EXPECT_TRUE(std::regex_search(r.out, std::regex(s, std::regex::multiline)))
        << "stdout does not match " << s << "\n"
        << r.out;
  }
  for (const auto& s : strings(x["stderr"])) {
    EXPECT_NE(r.err.find(s), std::string::npos) << "stderr lacks '" << s << "'\n" << r.err;
  }
  for (const auto& s : strings(x["no_stderr"])) {
    EXPECT_EQ(r.err.find(s), std::string::npos) << "stderr has '" << s << "'\n" << r.err;
  }
  for (const auto& kv : x["files"]) {
    const std::string file = work + "/" + kv.first.as<std::string>();
    EXPECT_TRUE(fs::exists(file)) << kv.first.as<std::string>() << " is missing";
    const auto want = kv.second.as<std::string>();
    EXPECT_NE(slurp(file).find(want), std::string::npos)
        << kv.first.as<std::string>() << " lacks '" << want << "':\n"
        << slurp(file);
  }
  for (const auto& a : strings(x["absent"])) {
    EXPECT_FALSE(fs::exists(work + "/" + a)) << a << " should not exist";
  }
}

INSTANTIATE_TEST_SUITE_P(Corpus, CommandLine, ::testing::Range<std::size_t>(0, corpus().size()),
                         [](const ::testing::TestParamInfo<std::size_t>& p) {
                           return corpus().at(p.param).id;
                         });

// The corpus itself: enough lines, each with its source, unique names.
TEST(Corpus, EveryLineNamesItsSourceAndTheCorpusIsLargeEnough) {
  std::set<std::string> ids;
  for (const auto& e : corpus()) {
    EXPECT_TRUE(ids.insert(e.id).second) << "duplicate id " << e.id;
    EXPECT_FALSE(e.source.empty()) << e.id;
    EXPECT_FALSE(e.peer.empty()) << e.id;
    EXPECT_NE(e.run.find("dlaunch"), std::string::npos) << e.id;
  }
  EXPECT_GE(corpus().size(), 60u);
}

}  // namespace
