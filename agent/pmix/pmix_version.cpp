#include "pmix/pmix_version.h"

#include <fcntl.h>
#include <unistd.h>

#include <cctype>

#include "dlaunch/unique_fd.h"

namespace dlaunch::agent {

namespace {

// "4.2.2rc2" at the start of `s`: the numbers, and the text up to the first
// byte that is no letter, digit or dot.
std::optional<PmixVersion> version_at(std::string_view s) {
  PmixVersion v;
  std::size_t i = 0;
  int* parts[] = {&v.major, &v.minor, &v.patch};
  for (int k = 0; k < 3; ++k) {
    if (i >= s.size() || std::isdigit(static_cast<unsigned char>(s[i])) == 0) return std::nullopt;
    int n = 0;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])) != 0 && n < 100000) {
      n = n * 10 + (s[i] - '0');
      ++i;
    }
    *parts[k] = n;
    if (k < 2) {
      if (i >= s.size() || s[i] != '.') return std::nullopt;
      ++i;
    }
  }
  std::size_t end = i;
  while (end < s.size() && end < i + 16 &&
         (std::isalnum(static_cast<unsigned char>(s[end])) != 0 || s[end] == '.')) {
    ++end;
  }
  v.text = std::string(s.substr(0, end));
  return v;
}

}  // namespace

std::optional<PmixVersion> parse_pmix_version(std::string_view bytes) {
  // Each marker is followed by the version, with or without a "v".
  for (const std::string_view marker : {"OpenPMIx ", "PMIx v", "MCA component version "}) {
    for (std::size_t at = bytes.find(marker); at != std::string_view::npos;
         at = bytes.find(marker, at + 1)) {
      std::string_view rest = bytes.substr(at + marker.size());
      if (!rest.empty() && rest.front() == 'v') rest.remove_prefix(1);
      // A component's line is PMIx's only when it says so: "PMIX gds ..."
      if (marker.front() == 'M') {
        const std::size_t line = bytes.rfind('\0', at);
        const std::size_t from = line == std::string_view::npos ? 0 : line + 1;
        const std::string_view head = bytes.substr(from, at - from);
        if (head.find("PMIX ") == std::string_view::npos) continue;
      }
      if (auto v = version_at(rest)) return v;
    }
  }
  return std::nullopt;
}

std::optional<PmixVersion> pmix_version_in_file(int file) {
  UniqueFd fd(file);
  if (!fd) return std::nullopt;
  constexpr std::size_t kMaxBytes = std::size_t{32} << 20;
  std::string bytes;
  char buf[65536];
  while (bytes.size() < kMaxBytes) {
    const ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    bytes.append(buf, static_cast<std::size_t>(n));
  }
  return parse_pmix_version(bytes);
}

std::vector<std::string> image_pmix_candidates() {
  std::vector<std::string> out;
  const char* dirs[] = {"/usr/lib/x86_64-linux-gnu",
                        "/usr/lib/aarch64-linux-gnu",
                        "/usr/lib64",
                        "/usr/lib",
                        "/usr/local/lib",
                        "/usr/local/mpi/lib",
                        "/opt/hpcx/ompi/lib",
                        "/opt/openmpi/lib",
                        "/usr/lib64/openmpi/lib"};
  for (const char* d : dirs) out.push_back(std::string(d) + "/libpmix.so.2");
  for (const char* d : dirs) {
    for (const char* sub : {"/openmpi/mca_pmix_pmix3x.so", "/openmpi/mca_pmix_pmix2x.so",
                            "/openmpi3/mca_pmix_pmix3x.so", "/openmpi/mca_pmix_pmix112.so"}) {
      out.push_back(std::string(d) + sub);
    }
  }
  return out;
}

PmixJudgement judge_image_pmix(const PmixVersion& server, const std::optional<PmixVersion>& image,
                               const std::string& image_path, const std::string& image_name) {
  PmixJudgement j;
  const std::string ours = "this node's PMIx server is " + server.text;
  if (!image) {
    j.note = "no PMIx library in the usual places of image " + image_name +
             " (libpmix.so.2, or an Open MPI's pmix component); " + ours +
             ": an Open MPI program there that finds none starts as a singleton";
    return j;
  }
  const std::string theirs =
      "the image " + image_name + " has PMIx " + image->text + " (" + image_path + ")";
  // PMIx serves clients of other versions from 2.1 on.
  if (image->major < 2 || (image->major == 2 && image->minor < 1)) {
    j.refusal = theirs + ", " + ours +
                ": PMIx servers serve clients of 2.1 and later only, so its MPI ranks would "
                "fail in MPI_Init (use an image whose Open MPI has PMIx 2.1 or later, or run "
                "without --mpi)";
    return j;
  }
  if (image->major != server.major || image->minor != server.minor) {
    j.note = theirs + ", " + ours +
             ": the ranks get PMIX_MCA_gds=hash (no store shared between the two versions); "
             "a PMIx error in MPI_Init is most likely the two versions (docs/containers.md)";
    j.gds_hash = true;
  }
  return j;
}

}  // namespace dlaunch::agent
