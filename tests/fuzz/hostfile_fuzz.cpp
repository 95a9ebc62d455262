// Fuzzes the three hostfile parsers (YAML, plain `host slots=N`, inline
// `-H a:4,b:2`) and the --include/--exclude node filter.
//
// Input: hostfile text, optionally followed by a NUL byte and a node filter
// spec. Each parser must either throw InputError or return a hostfile that
// meets the contract of launcher/hostfile/hostfile.h; anything else (another
// exception, a crash, a sanitizer report) is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>

#include "hostfile/hostfile.h"

namespace {

using dlaunch::Hostfile;
using dlaunch::InputError;

[[noreturn]] void broken(const char* what, const std::string& detail) {
  std::fprintf(stderr, "hostfile_fuzz: contract broken: %s: %s\n", what, detail.c_str());
  std::abort();
}

bool valid_env_name(std::string_view name) {
  if (name.empty() || (name[0] >= '0' && name[0] <= '9')) return false;
  for (char c : name) {
    const bool ok =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    if (!ok) return false;
  }
  return true;
}

void check_env(const dlaunch::EnvList& env) {
  std::set<std::string> seen;
  for (const auto& [name, value] : env) {
    if (!valid_env_name(name)) broken("bad env name", name);
    if (!seen.insert(name).second) broken("env name twice", name);
  }
}

// What every parser promises about a hostfile it returns.
void check(const Hostfile& hf) {
  if (hf.hosts.empty()) broken("no hosts", hf.source);
  check_env(hf.env);
  std::set<std::string> names;
  for (const auto& h : hf.hosts) {
    if (h.name.empty() || h.host.empty()) broken("empty name or host", h.name + "/" + h.host);
    if (!names.insert(h.name).second) broken("duplicate name", h.name);
    if (h.slots <= 0) broken("slots <= 0", h.name);
    if (h.port < 1 || h.port > 65535) broken("port out of range", std::to_string(h.port));
    std::set<int> gpus;
    for (int g : h.gpus) {
      if (g < 0 || !gpus.insert(g).second) broken("bad or repeated gpu id", std::to_string(g));
    }
    check_env(h.env);
  }
}

void filter(const Hostfile& hf, std::string_view spec) {
  const bool numbers = !spec.empty();
  const int n = numbers ? static_cast<unsigned char>(spec.back()) % 5 : 0;
  dlaunch::NodeFilter filters[] = {
      {.include = std::string(spec)},
      {.exclude = std::string(spec)},
      {.num_nodes = n, .nproc_per_node = n},
  };
  for (const auto& f : filters) {
    try {
      Hostfile out = dlaunch::apply_node_filter(hf, f);
      check(out);
      if (out.hosts.size() > hf.hosts.size()) broken("filter added hosts", std::string(spec));
      if (f.nproc_per_node > 0) {
        for (const auto& h : out.hosts) {
          if (h.slots != f.nproc_per_node) broken("nproc_per_node not applied", h.name);
        }
      }
    } catch (const InputError&) {
    }
  }
}

template <typename Parse>
void parse_with(Parse parse, std::string_view text, std::string_view spec) {
  try {
    Hostfile hf = parse(text);
    check(hf);
    filter(hf, spec);
  } catch (const InputError& e) {
    if (std::string_view(e.what()).empty()) broken("empty error message", "");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::size_t nul = input.find('\0');
  const std::string_view text = input.substr(0, nul);
  const std::string_view spec =
      nul == std::string_view::npos ? std::string_view() : input.substr(nul + 1);

  const bool plain = dlaunch::looks_like_plain(text);
  parse_with([](std::string_view t) { return dlaunch::parse_yaml_hostfile(t, "fuzz.yaml"); }, text,
             spec);
  parse_with([](std::string_view t) { return dlaunch::parse_plain_hostfile(t, "fuzz.hosts"); },
             text, spec);
  parse_with([](std::string_view t) { return dlaunch::parse_inline_hosts(t); }, text, spec);
  if (plain) {
    // looks_like_plain promises that the plain parser takes the text.
    try {
      dlaunch::parse_plain_hostfile(text, "fuzz.hosts");
    } catch (const InputError& e) {
      // Only a duplicate host may still be refused: looks_like_plain checks lines one by one.
      if (e.message().find("duplicate host") == std::string::npos)
        broken("looks_like_plain but refused", e.what());
    }
  }
  return 0;
}
