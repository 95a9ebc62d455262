#include "cli/man_page.h"

#include <sstream>
#include <vector>

#include <CLI/CLI.hpp>

namespace dlaunch {

namespace {

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

std::string upper(std::string s) {
  for (char& c : s) {
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  }
  return s;
}

// "-H,--hosts" + " TEXT=x" -> \fB\-H\fR, \fB\-\-hosts\fR \fITEXT=x\fR
std::string option_heading(const CLI::Option* opt, const CLI::Formatter& fmt) {
  std::string names;
  std::istringstream in(opt->get_name(false, true));
  for (std::string name; std::getline(in, name, ',');) {
    if (!names.empty()) names += ", ";
    names += "\\fB" + roff_escape(name) + "\\fR";
  }
  const std::string opts = trim(fmt.make_option_opts(opt));
  if (!opts.empty()) names += " \\fI" + roff_escape(opts) + "\\fR";
  return names;
}

// One paragraph of text lines; indented lines are kept as they are (examples).
void emit_text(std::ostringstream& out, const std::vector<std::string>& lines) {
  bool literal = false;
  for (const auto& line : lines) {
    const bool indented = !line.empty() && (line[0] == ' ' || line[0] == '\t');
    if (indented && !literal) {
      out << ".PP\n.RS 4\n.nf\n";
      literal = true;
    } else if (!indented && literal) {
      out << ".fi\n.RE\n";
      literal = false;
    }
    if (line.empty()) {
      out << ".PP\n";
    } else {
      out << roff_escape(literal ? trim(line) : line) << "\n";
    }
  }
  if (literal) out << ".fi\n.RE\n";
}

constexpr const char* kEnvironment = R"(.SH MPMD JOBS AND STDIN
Several programs in one world, as with mpirun:
.PP
.RS 4
.nf
dlaunch [global options] \-n 1 ./server : \-n 8 \-\-role trainer ./worker
dlaunch [global options] \-\-app jobs.app
.fi
.RE
.PP
A \fB:\fR followed by an option starts the next app; each later app takes the app
options \fB\-n\fR \fIN\fR (required), \fB\-\-role\fR \fINAME\fR,
\fB\-\-host\fR \fINAME,...\fR, \fB\-\-nproc\-per\-node\fR \fIN\fR,
\fB\-x\fR, \fB\-\-env\-file\fR, \fB\-\-wdir\fR and
\fB\-\-container\-image\fR \fIIMAGE\fR before its program. An app
file has one \fB\-n\fR \fIN\fR [\fIapp options\fR] \fIPROGRAM\fR [\fIARGS\fR] per
line (shell quoting, \fB#\fR comments); errors name \fIFILE\fR:\fILINE\fR. Ranks are
numbered in app order, each app filling the free slots of its nodes in node order.
ROLE_NAME is the app's \fB\-\-role\fR, else its program's base name; ROLE_RANK and
ROLE_WORLD_SIZE count within the role. Under \fB\-\-mpi\fR all apps share one
MPI_COMM_WORLD.
.PP
\fB\-\-stdin\fR \fIRANK\fR|\fBall\fR|\fBnone\fR (default 0): dlaunch's stdin goes to
that rank (every rank, or none) over the control channel, with flow control (a 1 MiB window
per node: a rank that does not read stops dlaunch reading), then EOF. Other ranks read
/dev/null. See docs/mpmd.md.
.SH ENVIRONMENT
.TP
.B SLURM_JOB_NODELIST
Inside a Slurm allocation (batch script or salloc shell) and without
\fB\-H\fR or \fB\-\-hostfile\fR, the job runs on the allocation's nodes, in
the order of this hostlist (\fBnode[01\-04,07],gpu\-a[1\-2]\fR; zero padding is
kept). Ranks per node, first that applies: \fBSLURM_NTASKS_PER_NODE\fR;
\fBSLURM_TASKS_PER_NODE\fR (\fB2(x3),1\fR) when a task count was asked for
(\fBSLURM_NTASKS\fR set); the GPU count \fBSLURM_GPUS_ON_NODE\fR, else
\fBSLURM_GPUS_PER_NODE\fR; \fBSLURM_TASKS_PER_NODE\fR; 1.
\fB\-\-nproc\-per\-node\fR and \fB\-n\fR apply on top. The node dlaunch runs on
starts its agent directly; the other nodes get theirs through \fBsrun\fR(1),
one job step per node. Outside an allocation, dlaunch needs hosts.
.TP
.B DLAUNCH_SRUN
The srun program the Slurm transport runs (default: \fBsrun\fR on PATH).
.TP
.B FLUX_URI, PBS_NODEFILE, LSB_DJOB_HOSTFILE, LSB_MCPU_HOSTS, PE_HOSTFILE
Inside a Flux instance (\fBflux resource R\fR), a PBS/Torque, LSF or SGE/UGE
job, likewise: the allocation's nodes and slots are the hosts. When several
schedulers' variables are set, Flux comes first, then Slurm, PBS, LSF, SGE.
Other nodes start with \fBflux run\fR, \fBblaunch\fR, \fBqrsh \-inherit\fR
where those are on PATH, else (and always for PBS) over SSH. See
docs/schedulers.md.
.TP
.B DLAUNCH_QRSH, DLAUNCH_BLAUNCH, DLAUNCH_FLUX
The qrsh, blaunch and flux programs of those transports (default: on PATH).
.PP
Workers get RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK,
GROUP_WORLD_SIZE, ROLE_RANK, ROLE_WORLD_SIZE, ROLE_NAME, MASTER_ADDR,
MASTER_PORT, NODE_RANK, NNODES, TORCHELASTIC_RUN_ID, TORCHELASTIC_RESTART_COUNT,
TORCHELASTIC_MAX_RESTARTS, DLAUNCH_JOB_ID and DLAUNCH_STORE_ADDR, _PORT and
_SECRET (the job's comm store); and, unless \fB\-\-no\-mpi\fR, the variables
mpirun gives: OMPI_COMM_WORLD_SIZE, _RANK, _LOCAL_RANK, _LOCAL_SIZE, _NODE_RANK
and OMPI_UNIVERSE_SIZE.
For a job on more than one machine, unless \fB\-\-master\-addr\fR or node 0's
\fBaddress:\fR gives it, MASTER_ADDR is the first of node 0's addresses that
every other node could connect to at start (container bridges such as docker0,
link\-local and loopback addresses last), and each node's workers get
GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME (under \fB\-\-mpi\fR also
OMPI_MCA_btl_tcp_if_include and OMPI_MCA_oob_tcp_if_include) naming its
interface toward it, where the user did not set them.
.TP
.B HWLOC_SYNTHETIC, HWLOC_XMLFILE
Read by hwloc: placement (\fB\-\-bind\-to\fR, \fB\-\-map\-by\fR,
\fB\-\-report\-bindings\fR, \fB\-\-dry\-run\fR) is computed on that
topology instead of the machine's (\fBpackage:2 numa:1 core:4 pu:1\fR), and
nothing is bound by it. Local agents inherit dlaunch's environment.
A bound rank gets OMP_NUM_THREADS, the number of its cores, unless it is set.
.TP
.B DS_ENV_FILE
The name (or path) of DeepSpeed's environment file, in place of
\fI.deepspeed_env\fR (FILES).
.TP
.B DLAUNCH_DEBUG
Comma\-separated topics printed to stderr: \fBssh\fR (each connection's
stages), \fBstats\fR (start\-up milestones and resource use), \fBnet\fR
(node 0's addresses in the order tried, what each node reached, the choice).
)";

constexpr const char* kTail = R"(.SH FILES
.TP
.I dlaunch\-agent
The per-node agent, looked for next to dlaunch (\fB\-\-agent\fR, or a host's
\fBagent:\fR in the hostfile, to change it). An SSH node without it gets a copy in
.IR ~/.cache/dlaunch/ VERSION\- HASH /dlaunch\-agent
(\fB\-\-no\-agent\-upload\fR turns this off).
.TP
.I ~/.ssh/config, /etc/ssh/ssh_config
Read as \fBssh\fR(1) reads them (\fB\-F\fR \fIFILE\fR in their place): host
aliases, HostName, User, Port, IdentityFile, ProxyJump, ProxyCommand, known_hosts files.
As for \fBssh\fR, \fI~\fR there (and in the default keys and known_hosts) is the home of
the password database's entry, not \fB$HOME\fR.
.TP
.I ~/.deepspeed_env, ./.deepspeed_env
DeepSpeed's NAME=VALUE lines, read in that order (the current directory's
win), for every rank of a job started from a head (not in the per\-node
mode), under \fB\-\-env\-file\fR and \fB\-x\fR; dlaunch says on stderr which
variables it took from which file.
.TP
.I share/dlaunch/hostfiles/
Example hostfiles.
.SH SEE ALSO
\fBmpirun\fR(1), \fBsrun\fR(1), \fBsalloc\fR(1), \fBssh\fR(1), \fBssh_config\fR(5)
)";

}  // namespace

std::string roff_escape(const std::string& text) {
  std::string out;
  out.reserve(text.size() + 8);
  for (char c : text) {
    if (c == '\\') {
      out += "\\e";
    } else if (c == '-') {
      out += "\\-";
    } else {
      out += c;
    }
  }
  // A line must not start with a control character.
  std::string safe;
  bool line_start = true;
  for (char c : out) {
    if (line_start && (c == '.' || c == '\'')) safe += "\\&";
    safe += c;
    line_start = c == '\n';
  }
  return safe;
}

std::string man_page(const CLI::App& app, const std::string& version) {
  std::ostringstream out;
  const CLI::Formatter fmt{};
  const std::string& name = app.get_name();
  out << ".\\\" Generated by `" << name << " --help-man` at build time; do not edit.\n";
  out << ".TH " << upper(name) << " 1 \"\" \"" << roff_escape(name + " " + version)
      << "\" \"User Commands\"\n";

  // Description: "name: what it does" then "usage: ..." lines.
  std::string summary;
  std::vector<std::string> usage;
  std::vector<std::string> description;
  for (const auto& line : split_lines(app.get_description())) {
    if (line.rfind("usage: ", 0) == 0) {
      usage.push_back(line.substr(7));
    } else if (summary.empty() && line.rfind(name + ": ", 0) == 0) {
      summary = line.substr(name.size() + 2);
    } else {
      description.push_back(line);
    }
  }
  out << ".SH NAME\n" << roff_escape(name) << " \\- " << roff_escape(summary) << "\n";
  out << ".SH SYNOPSIS\n";
  for (const auto& u : usage) {
    const std::string rest = u.rfind(name, 0) == 0 ? u.substr(name.size()) : u;
    out << ".B " << roff_escape(name) << "\n" << roff_escape(trim(rest)) << "\n.br\n";
  }
  out << ".SH DESCRIPTION\n";
  if (!description.empty()) emit_text(out, description);
  out << roff_escape(name) << " reads a list of nodes (a hostfile, an inline list, or the Slurm "
      << "allocation it runs in), starts one agent per node (as a child process, over SSH, or "
      << "with srun) and runs PROGRAM with the torchrun environment as ranks 0..N\\-1. The first "
      << "rank that fails stops the job everywhere, and one report names it.\n";

  out << ".SH OPTIONS\n";
  auto emit_options = [&](const CLI::App& owner, bool top) {
    for (const CLI::Option* opt : owner.get_options()) {
      if (opt->get_group().empty() || opt->get_positional()) continue;  // hidden
      // An option group carries a copy of the app's help flag: list it once.
      if (!top && (opt == owner.get_help_ptr() || opt == owner.get_help_all_ptr())) continue;
      out << ".TP\n" << option_heading(opt, fmt) << "\n";
      out << roff_escape(opt->get_description()) << "\n";
    }
  };
  emit_options(app, true);
  for (const CLI::App* group : app.get_subcommands([](const CLI::App*) { return true; })) {
    bool visible = false;
    for (const auto* o : group->get_options()) {
      visible = visible || (!o->get_group().empty() && o != group->get_help_ptr() &&
                            o != group->get_help_all_ptr());
    }
    if (!visible) continue;
    out << ".SS \"" << roff_escape(group->get_group()) << "\"\n";
    emit_options(*group, false);
  }

  // Footer: "Title:" alone or "Title: text" starts a section.
  std::vector<std::string> para;
  std::string section;
  auto flush = [&] {
    if (!section.empty()) out << ".SH " << roff_escape(upper(section)) << "\n";
    emit_text(out, para);
    para.clear();
  };
  for (const auto& line : split_lines(app.get_footer())) {
    const auto colon = line.find(':');
    const bool heading = !line.empty() && line[0] >= 'A' && line[0] <= 'Z' &&
                         colon != std::string::npos && colon < 24 &&
                         line.find_first_of(".,(`") > colon &&
                         (colon + 1 == line.size() || line[colon + 1] == ' ');
    if (heading) {
      if (!section.empty() || !para.empty()) flush();
      section = line.substr(0, colon);
      const std::string rest = trim(line.substr(colon + 1));
      if (!rest.empty()) para.push_back(rest);
    } else {
      para.push_back(line);
    }
  }
  if (!section.empty() || !para.empty()) flush();
  out << kEnvironment << kTail;
  return out.str();
}

}  // namespace dlaunch
