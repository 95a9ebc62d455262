// dlaunch::make_private_dir: fresh, private, checked directories in shared places.
#include "dlaunch/private_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>

#include <gtest/gtest.h>

namespace fs = std::filesystem;
using dlaunch::make_private_dir;
using dlaunch::PrivateDirError;

namespace {

// A scratch folder of the test's own, mode `mode`.
class Scratch {
 public:
  explicit Scratch(mode_t mode) {
    path_ = (fs::temp_directory_path() / "private-dir-test.XXXXXX").string();
    if (::mkdtemp(path_.data()) == nullptr) throw std::runtime_error("mkdtemp");
    ::chmod(path_.c_str(), mode);
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace

TEST(PrivateDir, IsFreshPrivateAndOurs) {
  Scratch base(01777);
  const std::string a = make_private_dir(base.path(), "dlaunch-x-");
  const std::string b = make_private_dir(base.path(), "dlaunch-x-");
  EXPECT_NE(a, b);
  EXPECT_EQ(fs::path(a).parent_path(), fs::path(base.path()));
  EXPECT_EQ(fs::path(a).filename().string().rfind("dlaunch-x-", 0), 0u);
  struct stat st {};
  ASSERT_EQ(::lstat(a.c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  EXPECT_EQ(st.st_uid, ::geteuid());
}

TEST(PrivateDir, RefusesAFolderOthersMayWriteThatIsNotSticky) {
  Scratch base(0777);
  try {
    make_private_dir(base.path(), "dlaunch-x-");
    FAIL() << "a world-writable folder without the sticky bit was accepted";
  } catch (const PrivateDirError& e) {
    EXPECT_NE(std::string(e.what()).find("not sticky"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(base.path()), std::string::npos) << e.what();
  }
  EXPECT_TRUE(fs::is_empty(base.path()));
}

TEST(PrivateDir, RefusesAFolderOfAnotherUser) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give a folder to another user";
  Scratch base(0755);
  ASSERT_EQ(::chown(base.path().c_str(), 65534, 65534), 0);  // nobody
  EXPECT_THROW(make_private_dir(base.path(), "dlaunch-x-"), PrivateDirError);
}

TEST(PrivateDir, RefusesWhatIsNotADirectoryAndSlashesInThePrefix) {
  Scratch base(0700);
  const std::string file = base.path() + "/file";
  ASSERT_EQ(::close(::creat(file.c_str(), 0600)), 0);
  EXPECT_THROW(make_private_dir(file, "x-"), PrivateDirError);
  EXPECT_THROW(make_private_dir(base.path() + "/missing", "x-"), PrivateDirError);
  EXPECT_THROW(make_private_dir(base.path(), "../x-"), PrivateDirError);
}

TEST(PrivateDir, BaseIsTmpdirThenXdgRuntimeDirThenTmp) {
  const char* old_tmp = std::getenv("TMPDIR");
  const char* old_xdg = std::getenv("XDG_RUNTIME_DIR");
  const std::string saved_tmp = old_tmp ? old_tmp : "";
  const std::string saved_xdg = old_xdg ? old_xdg : "";
  ::setenv("TMPDIR", "/a", 1);
  ::setenv("XDG_RUNTIME_DIR", "/b", 1);
  EXPECT_EQ(dlaunch::runtime_base_dir(), "/a");
  ::setenv("TMPDIR", "", 1);
  EXPECT_EQ(dlaunch::runtime_base_dir(), "/b");
  ::unsetenv("XDG_RUNTIME_DIR");
  EXPECT_EQ(dlaunch::runtime_base_dir(), "/tmp");
  old_tmp ? ::setenv("TMPDIR", saved_tmp.c_str(), 1) : ::unsetenv("TMPDIR");
  old_xdg ? ::setenv("XDG_RUNTIME_DIR", saved_xdg.c_str(), 1) : ::unsetenv("XDG_RUNTIME_DIR");
}
