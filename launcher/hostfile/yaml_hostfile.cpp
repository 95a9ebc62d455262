// The YAML hostfile: a sequence of hosts, or a map with hosts/defaults/env.
#include <algorithm>
#include <cctype>
#include <optional>
#include <sstream>
#include <unordered_map>

#include <climits>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include "dlaunch/text.h"
#include "dlaunch/tunables.h"
#include "hostfile/hostfile.h"
#include "hostfile/hostfile_internal.h"

namespace dlaunch {

namespace {

using hostfile_detail::join;
using hostfile_detail::kFewerHostsHint;
using hostfile_detail::slots_over_limit;
using hostfile_detail::suggestion_hint;
using hostfile_detail::too_many_hosts;

const std::vector<std::string> kTopKeys{"hosts", "defaults", "env"};
const std::vector<std::string> kDefaultKeys{"slots", "user",      "port",  "gpus",
                                            "env",   "transport", "agent", "identity",
                                            "ssh",   "container", "health"};
const std::vector<std::string> kHostKeys{"host",     "name", "slots",     "user",      "port",
                                         "address",  "gpus", "env",       "transport", "agent",
                                         "identity", "ssh",  "container", "health"};
const std::vector<std::string> kSshClients{"libssh2", "openssh"};
const std::vector<std::string> kHostOnlyKeys{"host", "name", "address"};
const std::vector<std::string> kTransports{"local", "ssh", "slurm", "sge", "lsf", "flux"};

constexpr const char* kEmptyHint = "list at least one host, e.g. `hosts: [{host: localhost}]`";
constexpr const char* kSyntaxHint =
    "check the indentation, and quote values that contain ':' or '#'";

// Counts the documents of a YAML stream and finds the root of the second one,
// without building nodes. yaml-cpp 0.7 (Debian 12) leaves a token that no rule
// takes, such as a ',' at the start of a line, in place and reports a null
// document for it on every call, so YAML::LoadAll loops forever while its
// memory grows (jbeder/yaml-cpp#1040, fixed upstream by #1319). A document
// that starts where the previous one did is that case.
class DocumentScan final : public YAML::EventHandler {
 public:
  int documents = 0;
  YAML::Mark start;        // of the last document
  YAML::Mark second_root;  // first node of the second document
  // Where each anchor was defined, and every alias in order: yaml-cpp's
  // nodes know only the anchor's place, so an error about what an alias
  // repeated finds the alias here.
  std::unordered_map<YAML::anchor_t, YAML::Mark> anchors;
  std::vector<std::pair<YAML::Mark, YAML::anchor_t>> aliases;

  void OnDocumentStart(const YAML::Mark& mark) override {
    ++documents;
    start = mark;
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t) override { node(mark); }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    node(mark);
    if (documents == 1) aliases.emplace_back(mark, anchor);
  }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                const std::string&) override {
    node(mark, anchor);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    node(mark, anchor);
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    node(mark, anchor);
  }
  void OnMapEnd() override {}

 private:
  void node(const YAML::Mark& mark, YAML::anchor_t anchor = YAML::NullAnchor) {
    if (documents == 1 && anchor != YAML::NullAnchor) anchors.emplace(anchor, mark);
    if (documents == 2 && !have_second_) {
      second_root = mark;
      have_second_ = true;
    }
  }
  bool have_second_ = false;
};

// Settings that may come from `defaults:` or from the host itself.
struct Settings {
  std::optional<int> slots;
  std::optional<std::string> user;
  std::optional<int> port;
  std::optional<std::vector<int>> gpus;
  std::optional<EnvList> env;
  std::optional<Transport> transport;
  std::optional<std::string> agent;
  std::optional<std::string> identity;
  std::optional<SshClient> ssh;
  std::optional<std::string> container;
  std::optional<std::vector<HealthSetting>> health;
};

struct Entry {
  std::string key;
  YAML::Node key_node;
  YAML::Node value;
};

struct ParsedHost {
  HostEntry entry;
  YAML::Mark name_mark;  // where a duplicate-name error points
};

std::string describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Scalar:
      return "'" + node.Scalar() + "'";
    case YAML::NodeType::Sequence:
      return "a sequence";
    case YAML::NodeType::Map:
      return "a map";
    case YAML::NodeType::Null:
      return "nothing";
    case YAML::NodeType::Undefined:
      break;
  }
  return "an undefined value";
}

bool has_space(std::string_view text) {
  return std::any_of(text.begin(), text.end(),
                     [](unsigned char c) { return std::isspace(c) != 0; });
}

EnvList merge_env(EnvList base, const EnvList& overrides) {
  for (const auto& entry : overrides) {
    auto it = std::find_if(base.begin(), base.end(),
                           [&](const auto& kv) { return kv.first == entry.first; });
    if (it != base.end()) {
      it->second = entry.second;  // keeps the defaults' position, so the order stays stable
    } else {
      base.push_back(entry);
    }
  }
  return base;
}

class YamlParser {
 public:
  explicit YamlParser(const std::string& source) : source_(source) {}

  Hostfile parse(std::string_view text) const {
    const YAML::Node root = load(text);
    Hostfile result;
    result.source = source_;
    Settings defaults;
    const YAML::Node hosts = root.IsMap() ? read_top_level(root, result, defaults) : root;
    if (!hosts.IsSequence()) {
      fail(hosts, "hosts", "expected a sequence of hosts, got " + describe(hosts),
           "write `hosts:` followed by `- host: <name>` lines");
    }
    if (hosts.size() == 0) fail(hosts, "hosts", "no hosts defined", kEmptyHint);

    std::unordered_map<std::string, std::size_t> first_index;
    for (const auto& item : hosts) {
      if (result.hosts.size() >= static_cast<std::size_t>(limits::kMaxNodesPerJob)) {
        fail(item, "hosts", too_many_hosts(), kFewerHostsHint);
      }
      ParsedHost parsed = read_host(item, defaults);
      auto [it, inserted] = first_index.emplace(parsed.entry.name, result.hosts.size());
      if (!inserted) {
        const int first_line = result.hosts[it->second].pos.line;
        // The same node again through an alias (- *a): name the alias, not
        // the anchor's line, which holds the first definition.
        if (item.Mark().pos == hosts[it->second].Mark().pos) {
          if (const auto alias = alias_of(item.Mark(), alias_uses_)) {
            fail(*alias, "hosts",
                 "the alias repeats host '" + parsed.entry.name + "' (defined at line " +
                     std::to_string(first_line) + ")",
                 "each logical node once; give a copy its own `name:`");
          }
        }
        fail(parsed.name_mark, "name",
             "duplicate node name '" + parsed.entry.name + "' (first defined at line " +
                 std::to_string(first_line) + ")",
             "give each logical node a distinct `name:`");
      }
      result.hosts.push_back(std::move(parsed.entry));
    }
    return result;
  }

 private:
  mutable std::size_t env_bytes_ = 0;  // every env: value read, aliases counted each time
  mutable std::unordered_map<YAML::anchor_t, YAML::Mark> anchors_;
  mutable std::vector<std::pair<YAML::Mark, YAML::anchor_t>> aliases_;
  mutable std::size_t alias_uses_ = 0;

  // The next alias (after the `used` ones) to the anchor defined at `at`.
  std::optional<YAML::Mark> alias_of(const YAML::Mark& at, std::size_t& used) const {
    for (; used < aliases_.size(); ++used) {
      const auto anchor = anchors_.find(aliases_[used].second);
      if (anchor != anchors_.end() && anchor->second.pos == at.pos) return aliases_[used++].first;
    }
    return std::nullopt;
  }
  const std::string& source_;

  // The first document; the whole stream is checked for syntax and for a second document.
  YAML::Node load(std::string_view text) const {
    const std::string input(text);
    DocumentScan scan;
    YAML::Node root;
    try {
      // Not YAML::LoadAll: it never returns on some bad input (see DocumentScan).
      std::istringstream stream(input);
      YAML::Parser parser(stream);
      std::optional<std::size_t> last_start;
      while (parser.HandleNextDocument(scan)) {
        if (last_start == static_cast<std::size_t>(scan.start.pos)) {
          throw InputError(pos_of(scan.start), "yaml",
                           "syntax error: " + unexpected(input, scan.start), kSyntaxHint);
        }
        last_start = static_cast<std::size_t>(scan.start.pos);
      }
      root = YAML::Load(input);
      anchors_ = std::move(scan.anchors);
      aliases_ = std::move(scan.aliases);
    } catch (const YAML::Exception& e) {
      // A tab where YAML wants indentation gives yaml-cpp's "illegal tab" or
      // "illegal block entry" for the line: say what to do about it.
      const bool tabs = input.find('\t') != std::string::npos;
      throw InputError(pos_of(e.mark), "yaml", "syntax error: " + e.msg,
                       tabs ? "YAML indents with spaces only; this file has tabs" : kSyntaxHint);
    }
    if (scan.documents == 0 || root.IsNull()) {
      throw InputError({source_, 0, 0}, "hosts", "no hosts defined", kEmptyHint);
    }
    if (scan.documents > 1) {
      fail(scan.second_root, "yaml", "more than one YAML document",
           "keep one document per hostfile; remove the `---` separator");
    }
    return root;
  }

  static std::string unexpected(const std::string& input, const YAML::Mark& at) {
    if (at.pos < 0 || static_cast<std::size_t>(at.pos) >= input.size()) return "unexpected input";
    const auto c = static_cast<unsigned char>(input[static_cast<std::size_t>(at.pos)]);
    if (std::isprint(c) == 0) return "unexpected character";
    return std::string("unexpected '") + static_cast<char>(c) + "'";
  }

  SourcePos pos_of(const YAML::Mark& mark) const {
    if (mark.is_null()) return {source_, 0, 0};
    return {source_, mark.line + 1, mark.column + 1};
  }

  [[noreturn]] void fail(const YAML::Mark& at, const std::string& field, std::string message,
                         std::string hint = {}) const {
    throw InputError(pos_of(at), field, std::move(message), std::move(hint));
  }

  [[noreturn]] void fail(const YAML::Node& at, const std::string& field, std::string message,
                         std::string hint = {}) const {
    fail(at.Mark(), field, std::move(message), std::move(hint));
  }

  // Reads `defaults:` and `env:` into the outputs and returns the `hosts:` node.
  // (Nodes are returned, never assigned: YAML::Node::operator= rewrites the referenced node.)
  YAML::Node read_top_level(const YAML::Node& root, Hostfile& result, Settings& defaults) const {
    const std::vector<Entry> top = entries(root, kTopKeys, "at the top level");
    const Entry* hosts = nullptr;
    for (const auto& e : top) {
      if (e.key == "hosts") hosts = &e;
      if (e.key == "defaults") defaults = read_defaults(e);
      if (e.key == "env") result.env = read_env(e);
    }
    if (hosts == nullptr) {
      fail(root, "hosts", "missing required key 'hosts'", "list the nodes under `hosts:`");
    }
    if (hosts->value.IsNull()) fail(hosts->key_node, "hosts", "no hosts defined", kEmptyHint);
    return hosts->value;
  }

  // A missing value has no useful mark of its own (yaml-cpp points past it); use the key's.
  static const YAML::Node& anchor(const Entry& e) {
    return e.value.IsNull() ? e.key_node : e.value;
  }

  std::vector<Entry> entries(const YAML::Node& map, const std::vector<std::string>& allowed,
                             const std::string& where) const {
    std::vector<Entry> out;
    for (const auto& kv : map) {
      const YAML::Node& key = kv.first;
      if (!key.IsScalar()) fail(key, "", "expected a key name " + where + ", got " + describe(key));
      const std::string name = key.Scalar();
      if (std::find(allowed.begin(), allowed.end(), name) == allowed.end()) {
        // `host:` in defaults is a misplaced key, not a typo of `port:`.
        const bool host_only =
            &allowed == &kDefaultKeys &&
            std::find(kHostOnlyKeys.begin(), kHostOnlyKeys.end(), name) != kHostOnlyKeys.end();
        const std::string hint = host_only ? "'" + name + "' belongs on a host entry; valid keys " +
                                                 where + ": " + join(allowed, ", ")
                                           : suggestion_hint(name, allowed, "valid keys");
        fail(key, name, "unknown key '" + name + "' " + where, hint);
      }
      for (const auto& prev : out) {
        if (prev.key == name) {
          fail(key, name,
               "key given twice (first at line " + std::to_string(prev.key_node.Mark().line + 1) +
                   ")",
               "remove one of them");
        }
      }
      out.push_back({name, key, kv.second});
    }
    return out;
  }

  std::string read_string(const Entry& e) const {
    if (e.value.IsNull()) {
      fail(e.key_node, e.key, "missing value", "write `" + e.key + ": <value>`");
    }
    if (!e.value.IsScalar()) fail(e.value, e.key, "expected a string, got " + describe(e.value));
    return e.value.Scalar();
  }

  std::string read_non_empty_string(const Entry& e) const {
    std::string value = read_string(e);
    if (value.empty()) fail(e.value, e.key, "must not be empty");
    return value;
  }

  std::string read_host_name(const YAML::Node& value, const YAML::Node& at_if_null) const {
    if (value.IsNull()) {
      fail(at_if_null, "host", "missing host name", "write `host: <name or address>`");
    }
    if (!value.IsScalar()) fail(value, "host", "expected a host name, got " + describe(value));
    std::string host = value.Scalar();
    if (host.empty()) fail(value, "host", "host name must not be empty");
    if (host.size() <= 253 && has_space(host)) {
      fail(value, "host", "host name '" + host + "' contains whitespace");
    }
    if (host.size() <= 253 && host.find('@') != std::string::npos) {
      fail(value, "host", "host name '" + host + "' contains '@'",
           "set the login name with `user:`");
    }
    if (const auto p = hostfile_detail::host_name_problem(host); !p.message.empty()) {
      fail(value, "host", p.message,
           "host names are letters, digits, '.', '-', '_', and ':' or '%' in IPv6 addresses");
    }
    return host;
  }

  std::string read_label(const Entry& e) const {
    std::string name = read_non_empty_string(e);
    if (name.size() > 253) fail(e.value, "name", "node name is longer than 253 bytes");
    if (has_space(name)) fail(e.value, "name", "node name '" + name + "' contains whitespace");
    for (unsigned char c : name) {
      if (c < 0x20 || c == 0x7f) fail(e.value, "name", "node name contains a control character");
    }
    return name;
  }

  int read_int(const YAML::Node& value, const YAML::Node& at_if_null, const std::string& field,
               long long min, long long max, const std::string& expected) const {
    if (value.IsNull()) fail(at_if_null, field, "missing value; expected " + expected);
    if (!value.IsScalar()) fail(value, field, "expected " + expected + ", got " + describe(value));
    if (value.Tag() == "!") {
      fail(value, field,
           "expected " + expected + ", got the quoted string \"" + value.Scalar() + "\"",
           "write the number without quotes");
    }
    const auto number = hostfile_detail::parse_integer(value.Scalar());
    if (!number || *number < min || *number > max) {
      fail(value, field, "expected " + expected + ", got " + describe(value));
    }
    return static_cast<int>(*number);
  }

  std::vector<int> read_gpus(const Entry& e) const {
    if (!e.value.IsSequence()) {
      const std::string hint =
          e.value.IsScalar() ? "write `gpus: [" + e.value.Scalar() + "]`" : "write `gpus: [0, 1]`";
      fail(anchor(e), "gpus", "expected a sequence of device ids, got " + describe(e.value), hint);
    }
    std::vector<int> gpus;
    for (const auto& item : e.value) {
      const int id = read_int(item, e.key_node, "gpus", 0, INT_MAX, "a non-negative device id");
      if (std::find(gpus.begin(), gpus.end(), id) != gpus.end()) {
        fail(item, "gpus", "device id " + std::to_string(id) + " is listed twice",
             "each device id may appear once per host");
      }
      gpus.push_back(id);
    }
    return gpus;
  }

  EnvList read_env(const Entry& e) const {
    if (!e.value.IsMap()) {
      fail(anchor(e), "env", "expected a map of NAME: value, got " + describe(e.value),
           "write `env: {NAME: value}`");
    }
    EnvList env;
    std::vector<YAML::Node> key_nodes;
    for (const auto& kv : e.value) {
      const YAML::Node& key = kv.first;
      const std::string name = key.IsScalar() ? key.Scalar() : std::string();
      if (!is_env_name(name)) {
        fail(key, "env", "invalid variable name " + describe(key),
             "names must match [A-Za-z_][A-Za-z0-9_]*");
      }
      for (std::size_t i = 0; i < env.size(); ++i) {
        if (env[i].first == name) {
          fail(key, "env",
               "variable '" + name + "' set twice (first at line " +
                   std::to_string(key_nodes[i].Mark().line + 1) + ")",
               "remove one of them");
        }
      }
      const YAML::Node& value = kv.second;
      if (value.IsNull()) {
        fail(key, "env", "missing value for '" + name + "'",
             "write `" + name + ": \"\"` for an empty value");
      }
      if (!value.IsScalar()) {
        fail(value, "env", "value of '" + name + "' must be a scalar, got " + describe(value));
      }
      const std::string& text = value.Scalar();
      if (text.find('\0') != std::string::npos) {
        fail(value, "env",
             "value of '" + name + "' contains a NUL byte, which no environment holds");
      }
      if (name.size() + 1 + text.size() >= limits::kMaxArgStringBytes) {
        fail(value, "env",
             "'" + name + "' is " + std::to_string(name.size() + 1 + text.size()) +
                 " bytes, over Linux's limit of " + std::to_string(limits::kMaxArgStringBytes) +
                 " for one variable (MAX_ARG_STRLEN)");
      }
      // Aliases can repeat one map for every host: count what is made.
      env_bytes_ += name.size() + text.size() + 2;
      if (env_bytes_ > limits::kMaxInputFileBytes) {
        fail(value, "env",
             "the hostfile's env: maps add up to more than " +
                 std::to_string(limits::kMaxInputFileBytes >> 20) + " MiB",
             "aliases (*name) repeat a map for every host that uses them");
      }
      env.emplace_back(name, text);  // the text as written: 0x10 stays "0x10"
      key_nodes.push_back(key);
    }
    return env;
  }

  // `health: {NAME: VALUE}`: the names and numbers are the judge's to check
  // (check/health.h); here, a map of scalars, each name once.
  std::vector<HealthSetting> read_health(const Entry& e, bool from_defaults) const {
    if (!e.value.IsMap()) {
      fail(anchor(e), "health", "expected a map of threshold: value, got " + describe(e.value),
           "write `health: {free_gb: 50, gpu_temp_c: 80}` (docs/health.md)");
    }
    std::vector<HealthSetting> out;
    for (const auto& kv : e.value) {
      const YAML::Node& key = kv.first;
      const YAML::Node& value = kv.second;
      if (!key.IsScalar() || key.Scalar().empty()) {
        fail(key, "health", "expected a threshold's name, got " + describe(key));
      }
      for (const auto& earlier : out) {
        if (earlier.name == key.Scalar()) {
          fail(key, "health",
               "threshold '" + key.Scalar() + "' set twice (first at line " +
                   std::to_string(earlier.pos.line) + ")",
               "remove one of them");
        }
      }
      if (!value.IsScalar()) {
        fail(value.IsNull() ? key : value, "health",
             "threshold '" + key.Scalar() + "': expected a number, got " + describe(value));
      }
      out.push_back({.name = key.Scalar(),
                     .value = value.Scalar(),
                     .pos = pos_of(key.Mark()),
                     .from_defaults = from_defaults});
    }
    return out;
  }

  Transport read_transport(const Entry& e) const {
    const std::string value = read_string(e);
    if (value == "local") return Transport::kLocal;
    if (value == "ssh") return Transport::kSsh;
    if (value == "slurm") return Transport::kSlurm;
    if (value == "sge") return Transport::kSge;
    if (value == "lsf") return Transport::kLsf;
    if (value == "flux") return Transport::kFlux;
    fail(e.value, "transport", "unknown transport '" + value + "'",
         suggestion_hint(value, kTransports, "valid transports"));
  }

  // Returns false for keys that are not shared settings (host, name, address).
  bool read_setting(Settings& s, const Entry& e, bool in_defaults = false) const {
    if (e.key == "slots") {
      s.slots = read_int(e.value, e.key_node, "slots", 1, INT_MAX, "a positive integer");
      if (const auto over = slots_over_limit(*s.slots); !over.empty()) {
        fail(e.value, "slots", over);
      }
    } else if (e.key == "port") {
      s.port = read_int(e.value, e.key_node, "port", 1, 65535, "a port number (1..65535)");
    } else if (e.key == "user") {
      s.user = read_non_empty_string(e);
      if (const auto p = hostfile_detail::user_name_problem(*s.user); !p.message.empty()) {
        fail(e.value, "user", p.message, "login names are letters, digits, '.', '-' and '_'");
      }
    } else if (e.key == "agent") {
      s.agent = read_non_empty_string(e);
    } else if (e.key == "identity") {
      s.identity = read_non_empty_string(e);
    } else if (e.key == "container") {
      s.container = read_non_empty_string(e);
      if (s.container->find_first_of(" \t\n") != std::string::npos || s.container->front() == '-') {
        fail(e.value, "container", "'" + *s.container + "' is not an image name",
             "an image the node's container runtime knows, e.g. localhost/train:1");
      }
    } else if (e.key == "gpus") {
      s.gpus = read_gpus(e);
    } else if (e.key == "env") {
      s.env = read_env(e);
    } else if (e.key == "health") {
      s.health = read_health(e, in_defaults);
    } else if (e.key == "transport") {
      s.transport = read_transport(e);
    } else if (e.key == "ssh") {
      const std::string value = read_string(e);
      if (value == "libssh2") {
        s.ssh = SshClient::kLibssh2;
      } else if (value == "openssh") {
        s.ssh = SshClient::kOpenssh;
      } else {
        fail(e.value, "ssh", "unknown SSH client '" + value + "'",
             suggestion_hint(value, kSshClients, "valid SSH clients"));
      }
    } else {
      return false;
    }
    return true;
  }

  Settings read_defaults(const Entry& e) const {
    if (!e.value.IsMap()) {
      fail(anchor(e), "defaults", "expected a map of settings, got " + describe(e.value),
           "valid keys: " + join(kDefaultKeys, ", "));
    }
    Settings s;
    for (const auto& entry : entries(e.value, kDefaultKeys, "in defaults")) {
      read_setting(s, entry, true);
    }
    return s;
  }

  ParsedHost read_host(const YAML::Node& item, const Settings& defaults) const {
    ParsedHost parsed;
    HostEntry& h = parsed.entry;
    h.pos = pos_of(item.Mark());
    Settings own;
    std::optional<std::string> name;
    if (item.IsScalar()) {
      h.host = read_host_name(item, item);
      parsed.name_mark = item.Mark();
    } else if (item.IsMap()) {
      bool have_host = false;
      for (const auto& e : entries(item, kHostKeys, "in host entry")) {
        if (e.key == "host") {
          h.host = read_host_name(e.value, e.key_node);
          have_host = true;
          if (!name) parsed.name_mark = e.value.Mark();
        } else if (e.key == "name") {
          name = read_label(e);
          parsed.name_mark = e.value.Mark();
        } else if (e.key == "address") {
          h.address = read_string(e);
          if (const auto p = hostfile_detail::host_name_problem(h.address); !p.message.empty()) {
            fail(e.value, "address",
                 h.address.empty() ? "must not be empty" : p.message + " (in address)",
                 "the address the other nodes reach this one at");
          }
        } else {
          read_setting(own, e);
        }
      }
      if (!have_host) {
        fail(item, "host", "missing required key 'host'",
             "every host entry needs `host: <name or address>`");
      }
    } else {
      fail(item, "hosts", "expected a host name or a map with `host:`, got " + describe(item));
    }
    // The host's own value wins over `defaults:`.
    h.name = name.value_or(h.host);
    h.slots = own.slots.value_or(defaults.slots.value_or(1));
    h.user = own.user.value_or(defaults.user.value_or(""));
    h.port = own.port.value_or(defaults.port.value_or(22));
    h.port_given = own.port.has_value() || defaults.port.has_value();
    h.gpus = own.gpus.value_or(defaults.gpus.value_or(std::vector<int>{}));
    if (!h.gpus.empty() && static_cast<std::size_t>(h.slots) > h.gpus.size()) {
      fail(item, "gpus",
           "host '" + h.host + "' has " + std::to_string(h.slots) + " slots but " +
               std::to_string(h.gpus.size()) + " gpus: a rank would be left without one",
           "list a device per slot, or lower slots");
    }
    h.env = merge_env(defaults.env.value_or(EnvList{}), own.env.value_or(EnvList{}));
    std::size_t host_env = 0;
    for (const auto& [k, v] : h.env) host_env += k.size() + v.size() + 2;
    if (host_env > limits::kMaxHostEnvBytes) {
      fail(item, "env",
           "the environment of host '" + h.host + "' is " + std::to_string(host_env) +
               " bytes, over the limit of " + std::to_string(limits::kMaxHostEnvBytes >> 20) +
               " MiB per host");
    }
    h.transport = hostfile_detail::resolve_transport(
        own.transport ? own.transport : defaults.transport, h.host);
    h.agent = own.agent.value_or(defaults.agent.value_or(""));
    h.identity = own.identity.value_or(defaults.identity.value_or(""));
    h.container = own.container.value_or(defaults.container.value_or(""));
    // Both, in this order: the host's own settings are applied last.
    h.health = defaults.health.value_or(std::vector<HealthSetting>{});
    if (own.health) h.health.insert(h.health.end(), own.health->begin(), own.health->end());
    h.ssh_client = own.ssh.value_or(defaults.ssh.value_or(SshClient::kLibssh2));
    return parsed;
  }
};

}  // namespace

Hostfile parse_yaml_hostfile(std::string_view text, const std::string& source) {
  return YamlParser(source).parse(text);
}

}  // namespace dlaunch
