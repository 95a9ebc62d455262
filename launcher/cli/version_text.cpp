#include "cli/version_text.h"

#include "cli/build_info.h"
#include "dlaunch/proto/protocol.h"
#include "dlaunch/version.h"

namespace dlaunch {

namespace {
std::string yes_no(bool on, const std::string& version) {
  if (!on) return "no";
  return version.empty() ? "yes" : "yes (" + version + ")";
}
}  // namespace

std::string version_text() {
  std::string out = std::string("dlaunch ") + kVersion + " (control protocol " +
                    std::to_string(proto::kProtocolVersion) + ")\n";
  out += std::string("build: ") + build::kBuildType + ", " + build::kCompiler + "\n";
  out += "MPI: " + yes_no(build::kWithMpi, build::kMpiVersion) + "\n";
  out += "NCCL: " + yes_no(build::kWithNccl, build::kNcclVersion) + "\n";
  out += "CUDA: " + yes_no(build::kWithCuda, build::kCudaVersion) + "\n";
  out += std::string("PMIx: ") + build::kPmixVersion;
  return out;
}

}  // namespace dlaunch
