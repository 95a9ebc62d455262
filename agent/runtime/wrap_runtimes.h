// apptainer and enroot (runtime.h): each worker's command runs under the
// runtime's own program, which becomes the worker (apptainer exec IMAGE
// PROG..., enroot start NAME PROG...). Neither is packaged for Debian 12:
// their command lines follow their documentation and are unit-tested; no
// test here runs them.
#pragma once

#include <string>
#include <vector>

#include "runtime.h"

namespace dlaunch::agent {

// apptainer shares every namespace of the host by default: one container
// per worker, each a view of the same image.
class ApptainerRuntime final : public Runtime {
 public:
  ApptainerRuntime(std::string program, proto::ContainerSpec spec)
      : program_(std::move(program)), spec_(std::move(spec)) {}
  RuntimeKind kind() const override { return RuntimeKind::kApptainer; }
  Result<std::string> prepare(const RuntimeNode& node) override;
  std::string check_program(const std::string&, const std::vector<std::string>&,
                            const std::string&) override {
    return {};  // only apptainer itself could look inside the image
  }
  void adapt(SpawnOptions& opts) const override;
  std::string teardown(std::chrono::milliseconds) override { return {}; }

 private:
  std::string program_;
  proto::ContainerSpec spec_;
  RuntimeNode node_;
};

// enroot: the node's container is created once from a squashfs image
// (enroot create), each worker starts in it, and it is removed at the end.
class EnrootRuntime final : public Runtime {
 public:
  EnrootRuntime(std::string program, proto::ContainerSpec spec)
      : program_(std::move(program)), spec_(std::move(spec)) {}
  RuntimeKind kind() const override { return RuntimeKind::kEnroot; }
  Result<std::string> prepare(const RuntimeNode& node) override;
  std::string check_program(const std::string&, const std::vector<std::string>&,
                            const std::string&) override {
    return {};
  }
  void adapt(SpawnOptions& opts) const override;
  std::vector<std::string> removal_command(const RuntimeNode& node) const override;
  std::string teardown(std::chrono::milliseconds limit) override;

 private:
  std::string program_;
  proto::ContainerSpec spec_;
  RuntimeNode node_;
  std::string name_;  // empty until created
};

}  // namespace dlaunch::agent
