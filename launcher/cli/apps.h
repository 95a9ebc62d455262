// MPMD: several programs in one world (docs/mpmd.md).
//
//   dlaunch [global options] -n 1 server --port 5 : -n 8 --role trainer worker
//   dlaunch [global options] --app FILE
//
// On the command line, a word ":" followed by an option (a word starting with
// '-') ends one app and starts the next; a ":" followed by anything else is an
// argument of the program (`sh -c :`). The first app's -n and program are the
// ones before the first ":"; the options there are dlaunch's global options.
// Every later app starts with its own options (APP OPTIONS below), then its
// program and arguments.
//
// An app file has one app per line, `-n N [APP OPTIONS] PROGRAM [ARGS...]`,
// words split as a POSIX shell would split them ('single', "double" quotes and
// backslashes; no expansion); blank lines and lines starting with '#' are
// skipped. Errors name FILE:LINE and the field.
//
// APP OPTIONS: -n/--np N (required; mpirun's -np, -c, --n too), --role NAME,
// --host NAME[,NAME...] (nodes of the hostfile by name; mpirun's -H, -host too;
// without a hostfile the apps' hosts together are the job's, cli/peer_options.h), --nproc-per-node
// N (at most N ranks of this app per node), -x NAME[=VALUE], --env-file FILE, --wdir DIR,
// --container-image IMAGE (its ranks in that image; one container per node holds the node's
// ranks, so apps sharing a node share its image), and `--` before a program whose name starts
// with '-'.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "hostfile/hostfile.h"

namespace dlaunch {

struct AppSpec {
  int np = 0;
  std::string role;                    // empty: the program's base name
  std::vector<std::string> hosts;      // node names; empty: every node
  int nproc_per_node = 0;              // 0: as many as the node's free slots
  std::vector<std::string> exports;    // -x, in order
  std::vector<std::string> env_files;  // --env-file, in order
  std::string workdir;                 // empty: the job's (--wdir, or the current directory)
  std::string container_image;         // --container-image: its ranks in this image
  std::vector<std::string> command;
  SourcePos pos;  // where the app was given, for errors ("--app FILE" line N, or "app 2")
};

// Splits a command line's words at the ":" that separate apps (see above).
std::vector<std::vector<std::string>> split_apps(const std::vector<std::string>& words);

// Parses one app's words (options, then program and arguments); pos names it
// in errors. Throws InputError.
AppSpec parse_app_words(const std::vector<std::string>& words, const SourcePos& pos);

// Splits one line into words the way a POSIX shell does, without expansions.
// Throws InputError at pos for an unterminated quote or a trailing backslash.
std::vector<std::string> split_shell_words(std::string_view line, const SourcePos& pos);

// An app file's text (source names it in errors); at least one app.
std::vector<AppSpec> parse_app_file_text(std::string_view text, const std::string& source);
// Reads path (read_input_file) and parses it.
std::vector<AppSpec> parse_app_file(const std::string& path);

// The role of an app: --role, else its program's base name.
std::string app_role(const AppSpec& app);

}  // namespace dlaunch
