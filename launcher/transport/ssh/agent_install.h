// Nodes without dlaunch installed: the head copies its own dlaunch-agent
// over the SSH connection it already has, into a cache of the login user on
// that node, and starts it from there.
//
//   ~/.cache/dlaunch/<version>-<hash>/dlaunch-agent
//
// <hash> is a hash of the agent's bytes, so a rebuilt agent of the same
// version gets its own folder. The copy is written under a temporary name (in
// that folder, mode 700), its size and `--version` answer are checked on the
// node, and only then renamed into place: concurrent jobs and a cut
// connection never leave a broken file behind under the final name, and a
// file there is always one that ran. A missing shared library shows in the
// version check, with the loader's message.
//
// Starting an agent (start_command): the cached copy if there is one, else
// the agent at the expected path, else the command exits kNoAgentStatus
// without a word (the head then uploads). An agent that answers Hello with
// another version is replaced the same way.
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

// The copy, its check and the new agent's start, over one connection.
inline constexpr std::chrono::seconds kAgentUploadTimeout{120};

struct AgentImage {
  std::string path;          // on the head
  std::uint64_t size = 0;    // bytes
  std::string version_line;  // what `dlaunch-agent --version` prints (without the newline)
  std::string key;           // "<version>-<hash>": the cache folder's name

  // Hashes the file without keeping it (a job whose nodes all have their
  // agent never holds the file in memory); throws dlaunch::Error
  // (kEnvironment) when it cannot be read.
  static std::shared_ptr<const AgentImage> load(const std::string& path);
  // An image of these bytes (tests).
  static AgentImage from_bytes(std::string bytes);

  // The file, read on first use and kept for every later copy; throws
  // dlaunch::Error when it cannot be read or no longer has the size and hash
  // it had at load (replaced on the head meanwhile).
  const std::string& bytes() const;

 private:
  mutable std::shared_ptr<const std::string> bytes_;
};

// The version line of this build's agent.
std::string expected_agent_version_line();

// 64-bit FNV-1a of data, as 16 hex digits (a cache key, not a checksum
// against an attacker: the cache is the user's own).
std::string content_hash(const std::string& data);

// The command of an exec channel that starts the agent: `agent_path` as is
// (image null: the path was forced), or the cached copy of `image`, else
// `agent_path`, else exit kNoAgentStatus.
std::string start_command(const std::string& agent_path, const AgentImage* image);

// The command that receives the image on stdin and installs it; it prints
// `ok_marker` (when not empty) on stdout once the copy is in place.
std::string upload_command(const AgentImage& image, const std::string& ok_marker = {});

// Where the cached copy lives on the node, for messages.
std::string cache_path_for_messages(const AgentImage& image);

}  // namespace dlaunch::ssh
