// Nodes without dlaunch installed: the head copies its own dlaunch-agent
// over the SSH connection it already has, into a cache of the login user on
// that node, and starts it from there. What travels is the build's packed
// agent, dlaunch-agent.gz (stripped, gzip; the portable build that needs
// nothing on the node but glibc >= 2.17: docs/portable-agent.md), or, where
// none is found, the agent itself compressed on the head.
//
//   ~/.cache/dlaunch/<version>-<sha256 prefix>/dlaunch-agent
//
// The folder's name carries the first 128 bits of the agent's SHA-256, so a
// rebuilt agent of the same version gets its own folder. Nothing there is
// trusted that the head did not make (docs/security.md): every folder from
// ~/.cache down must be this user's, not a link, and writable by nobody
// else, or the scripts refuse it (kUnsafeCacheStatus, the reason on
// stderr); the copy is written into a new file of a random name (mktemp:
// O_EXCL, mode 600), its size and SHA-256 are checked against the head's,
// it is unpacked with gzip into a second such file whose size and SHA-256
// are checked as well before it is run for its `--version` answer, and only then is it renamed
// into place; and the start checks the cached file's owner, mode and
// SHA-256 again before every exec. A missing shared library shows in the
// version check, with the loader's message.
//
// Starting an agent (start_command): the installed agent at the expected
// path (exec'd as it is when no copy is cached; with a copy there too, only
// if it answers this version), else the cached copy if it is whole and
// safe, else the command exits kNoAgentStatus without a word (the head then
// uploads). An agent that answers Hello with another version is replaced
// the same way.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

namespace dlaunch::ssh {

// Exit statuses of the scripts below (never an agent's: it has not started).
inline constexpr int kNoAgentStatus = 97;       // start_command: no agent found
inline constexpr int kUploadBrokenStatus = 98;  // upload: could not write it whole
inline constexpr int kUploadNoRunStatus = 99;   // upload: it does not run there
inline constexpr int kUnsafeCacheStatus = 96;   // a folder of the cache others may change

// The copy, its check and the new agent's start, over one connection.
inline constexpr std::chrono::seconds kAgentUploadTimeout{120};

struct AgentImage {
  std::string path;          // on the head: the packed agent (.gz), or the agent itself
  std::uint64_t size = 0;    // bytes of the agent the node runs (unpacked)
  std::string version_line;  // what `dlaunch-agent --version` prints (without the newline)
  std::string sha256;        // of the agent the node runs, 64 hex digits
  std::string key;           // "<version>-<first 32 hex digits of sha256>": the cache folder's name

  // Hashes the file (a .gz: unpacking it as it goes) without keeping it (a
  // job whose nodes all have their agent never holds it in memory); throws
  // dlaunch::Error (kEnvironment) when it cannot be read or unpacked.
  static std::shared_ptr<const AgentImage> load(const std::string& path);
  // An image of this agent, packed here (tests).
  static AgentImage from_bytes(const std::string& agent);

  // What is sent: the agent gzip-compressed, read (or packed) on first use
  // and kept for every later copy; throws dlaunch::Error when the file
  // cannot be read or no longer has the hash it had at load (replaced on the
  // head meanwhile).
  const std::string& packed() const;
  // SHA-256 of packed(), 64 hex digits.
  const std::string& packed_sha256() const;

 private:
  bool path_is_packed_ = false;
  std::string loaded_packed_sha256_;  // of the .gz at load
  mutable std::shared_ptr<const std::string> packed_;
  mutable std::string packed_sha256_;
};

// The packed agent for `agent_path` (the head's own dlaunch-agent): its
// dlaunch-agent.gz beside it (a build folder) or in ../libexec/dlaunch/ (an
// installation); else `agent_path` itself.
std::string packed_agent_for(const std::string& agent_path);

// The version line of this build's agent.
std::string expected_agent_version_line();

// SHA-256 of data, as 64 hex digits.
std::string content_hash(const std::string& data);

// The command of an exec channel that starts the agent: `agent_path` as is
// (image null: the path was forced); else the installed agent or the cached
// copy of `image` as above, else exit kNoAgentStatus (kUnsafeCacheStatus
// for a cache folder others may change).
std::string start_command(const std::string& agent_path, const AgentImage* image);

// The command that receives image.packed() on stdin and installs it; it prints
// `ok_marker` (when not empty) on stdout once the copy is in place.
std::string upload_command(const AgentImage& image, const std::string& ok_marker = {});

// Why a node's agent was not started from its cache (kUnsafeCacheStatus),
// with what the node said (`detail`).
std::string unsafe_cache_reason(const std::string& detail);

// Where the cached copy lives on the node, for messages.
std::string cache_path_for_messages(const AgentImage& image);

}  // namespace dlaunch::ssh
