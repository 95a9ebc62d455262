// bench_writer: writes MIB mebibytes of 100-byte lines (99 characters and a
// newline) to stdout in 64 KiB writes, as a logging rank does at full speed.
//   bench_writer [MIB]     (default 64)
// Each line names the writer's rank (RANK, or OMPI_COMM_WORLD_RANK under
// mpirun) and its number, so a reader can check that nothing was lost.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace {
constexpr std::size_t kLine = 100;
constexpr std::size_t kLinesPerWrite = 655;  // 65,500 bytes

const char* rank_string() {
  for (const char* name : {"RANK", "OMPI_COMM_WORLD_RANK"}) {
    if (const char* v = std::getenv(name)) return v;
  }
  return "0";
}

bool write_all(const char* p, std::size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(1, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}
}  // namespace

int main(int argc, char** argv) {
  const long mib = argc > 1 ? std::strtol(argv[1], nullptr, 10) : 64;
  if (mib <= 0) {
    std::fprintf(stderr, "usage: bench_writer [MIB]\n");
    return 2;
  }
  const std::size_t lines = static_cast<std::size_t>(mib) * 1024 * 1024 / kLine;
  const std::string rank = rank_string();
  std::string buf(kLinesPerWrite * kLine, 'x');
  std::size_t done = 0;
  while (done < lines) {
    const std::size_t now = std::min(kLinesPerWrite, lines - done);
    for (std::size_t i = 0; i < now; ++i) {
      char* line = buf.data() + i * kLine;  // the prefix only grows: no clearing needed
      const int k = std::snprintf(line, kLine, "rank %s line %zu ", rank.c_str(), done + i);
      line[k] = 'x';  // snprintf's terminator
      line[kLine - 1] = '\n';
    }
    if (!write_all(buf.data(), now * kLine)) return 1;
    done += now;
  }
  return 0;
}
