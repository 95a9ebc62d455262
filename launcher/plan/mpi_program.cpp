#include "plan/mpi_program.h"

#include <elf.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string_view>

#include "dlaunch/process.h"
#include "dlaunch/unique_fd.h"

namespace dlaunch {

namespace {

// Reads exactly n bytes at off, or false.
bool read_at(int fd, void* out, std::size_t n, off_t off) {
  auto* p = static_cast<char*>(out);
  while (n > 0) {
    const ssize_t got = ::pread(fd, p, n, off);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got;
    n -= static_cast<std::size_t>(got);
    off += got;
  }
  return true;
}

MpiLinkage classify(const std::string& needed) {
  // libmpi.so.40 (Open MPI 3-5); libmpi.so.12 (MPICH, Intel MPI, MVAPICH).
  if (needed.rfind("libmpi.so", 0) != 0) return {};
  return {needed == "libmpi.so.40" ? MpiKind::kOpenMpi : MpiKind::kOther, needed};
}

std::string basename_of(const std::string& p) {
  const auto slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

std::string_view without_blanks(std::string_view s) {
  s.remove_prefix(std::min(s.find_first_not_of(" \t"), s.size()));
  return s;
}

// The rest of `line` after `keyword` and the blanks that must follow it.
std::optional<std::string_view> after_keyword(std::string_view line, std::string_view keyword) {
  if (!line.starts_with(keyword) || line.size() == keyword.size()) return std::nullopt;
  const char next = line[keyword.size()];
  if (next != ' ' && next != '\t') return std::nullopt;
  return without_blanks(line.substr(keyword.size()));
}

// Whether a line of the script starts, after blanks, with `import mpi4py` or
// `from mpi4py` followed by a blank or a dot (`from mpi4py.futures import`).
bool imports_mpi4py(std::string_view text) {
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t end = std::min(text.find('\n', at), text.size());
    const std::string_view line = without_blanks(text.substr(at, end - at));
    at = end + 1;
    if (const auto rest = after_keyword(line, "import"); rest && rest->starts_with("mpi4py"))
      return true;
    if (const auto rest = after_keyword(line, "from");
        rest && rest->size() > 6 && rest->starts_with("mpi4py") &&
        std::string_view(" \t.").find((*rest)[6]) != std::string_view::npos)
      return true;
  }
  return false;
}

}  // namespace

MpiLinkage elf_mpi_linkage(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return {};
  Elf64_Ehdr eh{};
  if (!read_at(fd.get(), &eh, sizeof eh, 0) || std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 ||
      eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_shentsize != sizeof(Elf64_Shdr) ||
      eh.e_shnum == 0 || eh.e_shnum > 4096) {
    return {};
  }
  std::vector<Elf64_Shdr> sections(eh.e_shnum);
  if (!read_at(fd.get(), sections.data(), sections.size() * sizeof(Elf64_Shdr),
               static_cast<off_t>(eh.e_shoff))) {
    return {};
  }
  constexpr std::size_t kMaxTable = std::size_t{16} << 20;  // a program's, not a hostile file's
  for (const auto& s : sections) {
    if (s.sh_type != SHT_DYNAMIC || s.sh_link >= sections.size()) continue;
    const Elf64_Shdr& strtab = sections[s.sh_link];
    if (s.sh_size > kMaxTable || strtab.sh_size > kMaxTable) return {};
    std::vector<Elf64_Dyn> dyn(s.sh_size / sizeof(Elf64_Dyn));
    std::string strings(strtab.sh_size, '\0');
    if (!read_at(fd.get(), dyn.data(), dyn.size() * sizeof(Elf64_Dyn),
                 static_cast<off_t>(s.sh_offset)) ||
        !read_at(fd.get(), strings.data(), strings.size(), static_cast<off_t>(strtab.sh_offset))) {
      return {};
    }
    for (const auto& d : dyn) {
      if (d.d_tag == DT_NULL) break;
      if (d.d_tag != DT_NEEDED || d.d_un.d_val >= strings.size()) continue;
      const std::string needed(strings.c_str() + d.d_un.d_val);
      if (auto l = classify(needed); l.kind != MpiKind::kNone) return l;
    }
  }
  return {};
}

MpiLinkage mpi_linkage(const std::vector<std::string>& command, const std::vector<std::string>& env,
                       const std::string& workdir) {
  if (command.empty()) return {};
  const std::string program = find_program(command.front(), env, workdir);
  if (program.empty()) return {};
  if (basename_of(program).rfind("python", 0) != 0) return elf_mpi_linkage(program);
  // python3 [options] script.py: the script (not -m, -c: nothing to read).
  for (std::size_t i = 1; i < command.size(); ++i) {
    const std::string& a = command[i];
    if (a == "-m" || a == "-c") return {};
    if (!a.empty() && a[0] == '-') continue;
    const std::filesystem::path script =
        a[0] == '/' ? std::filesystem::path(a) : std::filesystem::path(workdir) / a;
    std::ifstream in(script, std::ios::binary);
    std::string text;
    text.resize(std::size_t{1} << 20);
    in.read(text.data(), static_cast<std::streamsize>(text.size()));
    text.resize(static_cast<std::size_t>(in.gcount()));
    if (imports_mpi4py(text)) return {MpiKind::kOpenMpi, "mpi4py"};
    return {};
  }
  return {};
}

}  // namespace dlaunch
