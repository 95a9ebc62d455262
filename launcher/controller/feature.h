// The seam between the job's core on the head and its features
// (docs/architecture.md, "Features of a job").
//
// The controller keeps what every job has: each node's lifecycle
// (core/node_state.h), the rank table, the job's phase (core/job_phase.h) and
// its first cause. A feature is what only some jobs use, with state and
// timers of its own: --stdin's relay (stdin_relay.h), the MPI fences
// (mpi_fences.h), the hang watch (hang_watch.h: stacks and stalls), the
// signals that are not a stop (signal_relay.h), the reach test at start
// (reach_test.h) and --check's network test (bandwidth_test.h); an attach
// client or a job log would be new ones. A feature sees and moves the job only through JobAccess,
// and the controller tells it the job's moments through JobFeature: so a feature is built and
// unit-tested against a fake job, without a controller, links or processes
// (tests/unit/controller/feature_test.cpp).
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

#include <fmt/format.h>

#include "core/job_phase.h"
#include "dlaunch/proto/protocol.h"
#include "jobs/report.h"
#include "plan/plan.h"

namespace dlaunch {

// A duration as the job's lines say it, core and features alike: "2.5 s".
inline std::string seconds_text(std::chrono::milliseconds d) {
  return fmt::format("{:.1f} s", static_cast<double>(d.count()) / 1000.0);
}

// What a feature may ask of the job and do to it. All of it on the job's
// loop.
class JobAccess {
 public:
  virtual JobPhase phase() const = 0;
  virtual const JobPlan& plan() const = 0;
  // The node's agent can still be sent to: its link is open, and it has
  // neither said Done nor been lost.
  virtual bool node_reachable(std::size_t node) const = 0;
  // The rank has exited, its node was lost, or another launcher runs it.
  virtual bool rank_exited(int rank) const = 0;
  // The rank has started and not exited.
  virtual bool rank_running(int rank) const = 0;
  // "node 1 (name)" or "node 1 (name, address)", as every line names it.
  virtual std::string node_label(std::size_t node) const = 0;
  // The job's root cause so far (kind kNone: none).
  virtual const RootCause& cause() const = 0;
  virtual void send(std::size_t node, const proto::Message& msg) = 0;
  // To every agent still connected.
  virtual void send_all(const proto::Message& msg) = 0;
  // The job failed: the first cause wins and the job is stopped
  // (controller.h, "Fail fast, report once").
  virtual void fail(RootCause cause) = 0;
  // The cause, when it is the first, without stopping anything yet: the
  // feature stops the job later (stop()).
  virtual void record_cause(RootCause cause) = 0;
  // Stops every rank as after a failure; `reason` is what the agents are told.
  virtual void stop(const std::string& reason) = 0;
  // dlaunch was told to stop (SIGINT, SIGTERM, SIGHUP) at least once.
  virtual bool interrupted() const = 0;
  // The job's cause is this signal from now on, counted as the first
  // interrupt (another kills at once), but nothing is stopped yet: the
  // feature stops the job later (stop()). The other launchers of a per-node
  // job are not told (each gets its own signal).
  virtual void begin_interrupt(int sig) = 0;
  // The ranks' stacks the report of the job's cause shows.
  virtual void attach_stacks(std::string section) = 0;
  // One line of dlaunch's own on stderr ("dlaunch: " is put before it).
  virtual void say(const std::string& line) = 0;
  // Text of dlaunch's own as it is (whole lines), on stderr in order with the
  // ranks' output.
  virtual void write_console(const std::string& text) = 0;

 protected:
  ~JobAccess() = default;
};

// The job's moments a feature hears of, after the core has taken them in.
class JobFeature {
 public:
  virtual ~JobFeature() = default;
  // The job moved to `now` (never called for staying in a phase).
  virtual void on_phase(JobPhase /*now*/) {}
  // A rank exited (its Exited came).
  virtual void on_rank_exited(int /*rank*/) {}
  // A node is beyond reach for good: its link closed or it said Done.
  virtual void on_node_gone(std::size_t /*node*/) {}
};

}  // namespace dlaunch
