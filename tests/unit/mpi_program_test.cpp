// Which programs are MPI programs (plan/mpi_program.h), on real files: the
// examples this build made, a copy of one that names another MPI library,
// Python scripts, and what is no program at all.
#include "plan/mpi_program.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <gtest/gtest.h>

#include "dlaunch/process.h"

using namespace dlaunch;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

class MpiProgram : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        std::filesystem::temp_directory_path() / ("dlaunch-mpiprog-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    const auto p = dir_ / name;
    std::ofstream(p, std::ios::binary) << text;
    return p.string();
  }
  std::filesystem::path dir_;
};

}  // namespace

TEST_F(MpiProgram, AnElfProgramIsOneWhenItNeedsLibmpi) {
  EXPECT_EQ(elf_mpi_linkage(MPI_HELLO_BIN).kind, MpiKind::kOpenMpi);
  EXPECT_EQ(elf_mpi_linkage(MPI_HELLO_BIN).what, "libmpi.so.40");
  EXPECT_EQ(elf_mpi_linkage(HELLO_BIN).kind, MpiKind::kNone);  // comm's store only
  EXPECT_EQ(elf_mpi_linkage("/bin/sh").kind, MpiKind::kNone);
  EXPECT_EQ(elf_mpi_linkage(write("text", "#!/bin/sh\necho libmpi.so.40\n")).kind, MpiKind::kNone);
  EXPECT_EQ(elf_mpi_linkage(write("short",
                                  "\x7f"
                                  "ELF"))
                .kind,
            MpiKind::kNone);
  EXPECT_EQ(elf_mpi_linkage((dir_ / "missing").string()).kind, MpiKind::kNone);
  // The same program as if built against MPICH (its library's name, same length).
  std::string bytes = slurp(MPI_HELLO_BIN);
  const auto at = bytes.find("libmpi.so.40");
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at, 12, "libmpi.so.12");
  const auto other = elf_mpi_linkage(write("mpich_hello", bytes));
  EXPECT_EQ(other.kind, MpiKind::kOther);
  EXPECT_EQ(other.what, "libmpi.so.12");
}

TEST_F(MpiProgram, APythonScriptIsOneWhenItImportsMpi4py) {
  const auto env = current_environment();
  const std::string dir = dir_.string();
  write("a.py", "import os\nfrom mpi4py import MPI\nprint(MPI.COMM_WORLD.rank)\n");
  write("b.py", "import os\n  import mpi4py.MPI as M\n");
  write("c.py", "# we do not use mpi4py here\nimport torch\n");
  EXPECT_EQ(mpi_linkage({"python3", "a.py"}, env, dir).kind, MpiKind::kOpenMpi);
  EXPECT_EQ(mpi_linkage({"python3", "-u", "b.py", "--x"}, env, dir).kind, MpiKind::kOpenMpi);
  EXPECT_EQ(mpi_linkage({"python3", "c.py"}, env, dir).kind, MpiKind::kNone);
  write("d.py", "x = 1\n\tfrom\tmpi4py.futures import MPIPoolExecutor\n");
  EXPECT_EQ(mpi_linkage({"python3", "d.py"}, env, dir).kind, MpiKind::kOpenMpi);
  // Not an import of mpi4py: another module, no blank after the keyword, a
  // `from mpi4py` the line does not go on from.
  write("e.py", "from mpi4pyx import y\nimportmpi4py\nfrom mpi4py\nx = 'import mpi4py'\n");
  EXPECT_EQ(mpi_linkage({"python3", "e.py"}, env, dir).kind, MpiKind::kNone);
  EXPECT_EQ(mpi_linkage({"python3", "-m", "a"}, env, dir).kind, MpiKind::kNone);
  EXPECT_EQ(mpi_linkage({MPI_HELLO_BIN}, env, dir).kind, MpiKind::kOpenMpi);
  EXPECT_EQ(mpi_linkage({"no-such-program-here"}, env, dir).kind, MpiKind::kNone);
}
