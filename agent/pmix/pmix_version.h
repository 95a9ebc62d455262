// Which PMIx a library is, and whether an image's can speak to this agent's
// PMIx server (docs/containers.md, "--mpi").
//
// Under --mpi a rank in a container is a client of the agent's PMIx server
// on the host, through the image's own Open MPI and PMIx. PMIx promises that
// a server serves clients of other versions from 2.1 on (its cross-version
// compatibility); an older client fails in MPI_Init with errors that do not
// say why, and the shared-memory store of another version (PMIx's gds
// ds12/ds21 components) is the usual trouble between versions that can talk.
// So before any rank starts the agent finds the image's PMIx (the system's
// libpmix, or the one an Open MPI carries in its pmix component) and judges
// it against its own: a client older than 2.1 fails the job at start, naming
// both; another version is said, and the ranks get PMIX_MCA_gds=hash (PMIx's
// own store in the client's memory instead of the shared one) unless they
// set PMIX_MCA_gds themselves.
//
// Pure functions but pmix_version_in_file (a read).
//
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dlaunch::agent {

struct PmixVersion {
  int major = 0;
  int minor = 0;
  int patch = 0;
  std::string text;  // as the library says it: "4.2.2rc2"
};

// The first version a PMIx library's bytes name ("OpenPMIx 4.2.2rc2 (PMIx
// Standard ...", PMIx 3's "PMIx v3.1.5", a component's "PMIX ... MCA
// component version 4.0.0"); nullopt when none.
std::optional<PmixVersion> parse_pmix_version(std::string_view bytes);

// The version in a library file open at `fd` (taken and closed; read up to
// 32 MiB); nullopt when it cannot be read or names none (or fd < 0).
std::optional<PmixVersion> pmix_version_in_file(int fd);

// The files of an image where its PMIx is found, in the order looked at:
// libpmix.so.2 in the usual library folders (Debian's, Red Hat's, /usr/local,
// the MPI folders of NVIDIA's and others' images), then Open MPI's pmix
// components that carry their own (mca_pmix_pmix*.so).
std::vector<std::string> image_pmix_candidates();

// What the agent makes of an image's PMIx (found: nullopt when the image
// has none in the places above) against its own server's.
struct PmixJudgement {
  std::string refusal;    // non-empty: the job cannot start (a client too old)
  std::string note;       // non-empty: said at start (another version, or none found)
  bool gds_hash = false;  // the ranks get PMIX_MCA_gds=hash
};
PmixJudgement judge_image_pmix(const PmixVersion& server, const std::optional<PmixVersion>& image,
                               const std::string& image_path, const std::string& image_name);

}  // namespace dlaunch::agent
