// The peers' spellings that need more than another name for a dlaunch option
// (docs/compat.md): mpirun's -N, --map-by ppr:N:node, --host without a
// hostfile, --mca and --output-filename; DeepSpeed's --num_gpus and its
// .deepspeed_env files; and the peers' options dlaunch refuses by name, each
// with why and what to write instead.
#pragma once

#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace dlaunch {

struct Options;

// Registers the peers' options that dlaunch refuses (hidden from --help).
void add_refused_peer_options(CLI::App& app);

// After parsing, before the mode is chosen: refuses what cannot be honoured
// (InputError naming the option), turns -N/--num_gpus/--map-by ppr:N:node
// into ranks per node, --mca into -x OMPI_MCA_K=V, and mpirun's --host
// without -H or --hostfile into the job's hosts.
void finish_peer_options(const CLI::App& app, Options& o);

// MPMD without -H or --hostfile: the apps' --host lists together are the
// hosts (mpirun's union), each app keeping its own names. Nothing otherwise.
void hosts_from_apps(Options& o);

// mpirun's --host list as an inline -H value: a:2 has 2 slots, a name
// without :N one, and a name given again adds its slots to the first's.
// Throws InputError naming --host for a bad entry.
std::string host_list_as_inline(const std::vector<std::string>& entries);

// --output-filename DIR[:nojobid,nocopy] taken apart; InputError for an
// unknown directive or an empty DIR.
struct OutputFilename {
  std::string dir;
  bool jobid = true;  // DIR/1/rank.N (false: DIR/rank.N)
  bool copy = true;   // the console shows the output too
};
OutputFilename parse_output_filename(const std::string& value);

// DeepSpeed's .deepspeed_env files that exist, in the order DeepSpeed reads
// them (a later one wins): in home, then in cwd; $DS_ENV_FILE in env names
// another file (an absolute path is that one file).
std::vector<std::string> deepspeed_env_files(const std::vector<std::string>& env,
                                             const std::string& home, const std::string& cwd);

}  // namespace dlaunch
