#include "dlaunch/private_dir.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace dlaunch {
namespace {

std::string errno_text(int e) { return std::strerror(e); }

std::string octal_mode(mode_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

}  // namespace

std::string runtime_base_dir() {
  for (const char* name : {"TMPDIR", "XDG_RUNTIME_DIR"}) {
    const char* v = std::getenv(name);
    if (v != nullptr && *v != '\0') return v;
  }
  return "/tmp";
}

void check_shared_base(const std::string& base) {
  struct stat st {};
  if (::stat(base.c_str(), &st) != 0) {
    throw PrivateDirError("cannot use " + base + " for private files: " + errno_text(errno));
  }
  if (!S_ISDIR(st.st_mode)) throw PrivateDirError(base + " is not a directory");
  const uid_t me = ::geteuid();
  if (st.st_uid != me && st.st_uid != 0) {
    throw PrivateDirError("refusing to create private files in " + base + ": it belongs to uid " +
                          std::to_string(st.st_uid) + ", neither this user (uid " +
                          std::to_string(me) + ") nor root");
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (st.st_mode & S_ISVTX) == 0) {
    throw PrivateDirError("refusing to create private files in " + base +
                          ": others may write to it (mode " + octal_mode(st.st_mode) +
                          ") and it is not sticky, so they could replace what is made there");
  }
}

std::string make_private_dir(const std::string& base, const std::string& prefix) {
  if (prefix.find('/') != std::string::npos)
    throw PrivateDirError("private directory prefix '" + prefix + "' contains '/'");
  check_shared_base(base);
  std::string path = base;
  if (path.empty() || path.back() != '/') path += '/';
  path += prefix + "XXXXXX";
  // mkdtemp: a random name, created with mode 0700, EEXIST never taken as success.
  if (::mkdtemp(path.data()) == nullptr) {
    throw PrivateDirError("cannot create a private directory " + path + ": " + errno_text(errno));
  }
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid() ||
      (st.st_mode & 07777) != 0700) {
    // Cannot happen unless the file system lies; never hand such a path out.
    ::rmdir(path.c_str());
    throw PrivateDirError("the private directory " + path +
                          " is not a 0700 directory of this user after its creation");
  }
  return path;
}

}  // namespace dlaunch
