// The registry's verbs (jobs/registry.h), as dlaunch's first argument:
//   dlaunch ps [--all] [--json]     the user's running jobs (--all: every record)
//   dlaunch status JOB [--json]     one job: what was started, its state, how it ended
//   dlaunch events JOB [--follow]   its events, JSON Lines (docs/events.md)
//   dlaunch stop JOB [--signal SIG] stops it (SIGTERM to its head, or INT, HUP)
//                                   and waits until its head has ended
//   dlaunch signal JOB SIG          SIG to its head, which forwards USR1, USR2,
//                                   TSTP, CONT to every rank (QUIT: stacks)
//   dlaunch logs JOB [--rank N] [--attempt K] [--tail N] [--follow]
//                                   the ranks' output the record keeps
//   dlaunch stacks JOB              every rank's stack, grouped (SIGQUIT to
//                                   its head, which answers in the record)
//   dlaunch attach JOB [--tail N] [--detach-keys KEYS]
//                                   its output live until it ends (Ctrl-C:
//                                   SIGINT to it; ctrl-p,ctrl-q: detach)
//   dlaunch wait JOB                until the job has ended; exits with its
//                                   exit status
//   dlaunch attach --recover JOB    a new head for a job whose head is gone
//                                   (--head-grace), then attach
//   dlaunch recover JOB             the same take-over, returning once every
//                                   node is taken over
// JOB: a record's name, a job id, or `last`. A program of one of these names
// runs as any other after `--` (`dlaunch -- ps`) or with a path.
#pragma once

#include <string_view>

namespace dlaunch {

// Whether argv[1] is one of the verbs.
bool is_job_command(std::string_view word);

// Runs the verb in argv[1]; the exit status (2 for bad arguments, 1 when the
// registry cannot be read). Writes to stdout and stderr.
int run_job_command(int argc, char** argv);

}  // namespace dlaunch
