// --stdin on the head (docs/mpmd.md, "stdin"): dlaunch's stdin to the nodes
// whose ranks read it, a feature of the job (controller/feature.h).
//
// Reading starts when the job runs. The head reads while every agent holding
// such a rank has acknowledged all but less than proto::kStdinWindow bytes of
// what it was sent (StdinAck), so a rank that does not read stops dlaunch
// reading, and no agent ever holds more than the window per rank. Nothing
// more is read once every reading rank has exited or its node is gone, or the
// job stops running (endless input would only be read and dropped). At the
// input's end each node still reading gets StdinEof.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "controller/feature.h"

namespace dlaunch {

class StdinReader;

// The rank that reads stdin (ControllerConfig::stdin_rank) besides a rank:
// every rank, or none.
inline constexpr int kStdinAll = -1;
inline constexpr int kStdinNone = -2;

class StdinRelay final : public JobFeature {
 public:
  // Reads fd (not owned) for `rank` (a rank, kStdinAll or kStdinNone: then
  // nothing is read) once the job runs.
  StdinRelay(JobAccess& job, boost::asio::io_context& io, int rank, int fd);
  ~StdinRelay() override;
  StdinRelay(const StdinRelay&) = delete;
  StdinRelay& operator=(const StdinRelay&) = delete;

  // The node's agent acknowledged this many bytes in all.
  void on_ack(std::size_t node, const proto::StdinAck& ack);
  // Stops reading for good (the job's loop is ending).
  void stop();

  void on_phase(JobPhase now) override;
  void on_rank_exited(int /*rank*/) override { update_hold(); }
  void on_node_gone(std::size_t /*node*/) override { update_hold(); }

  // Whether stdin is being read now (not held, not ended). For tests.
  bool reading() const;

 private:
  void start();
  bool target_open(std::size_t node) const;
  void on_data(std::string data);
  void update_hold();

  JobAccess& job_;
  boost::asio::io_context& io_;
  int rank_;
  int fd_;
  bool held_ = false;
  std::unique_ptr<StdinReader> reader_;
  std::vector<std::size_t> nodes_;           // nodes with a rank that reads stdin
  std::vector<std::uint64_t> sent_, acked_;  // per node of the plan
};

}  // namespace dlaunch
