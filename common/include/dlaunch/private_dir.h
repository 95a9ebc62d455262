// Directories of dlaunch's own in places other users can write (/tmp, a
// shared $TMPDIR): always created fresh, never reused, private to the caller.
//
// Another local user can pre-create any predictable name in /tmp, as a
// directory of theirs or a symbolic link, and wait for a privileged job to
// write through it. So every such directory is made by mkdtemp(3) (a name
// nobody can predict, created atomically, failing on anything existing,
// mode 0700) and then checked with lstat: a directory, not a link, owned by
// the effective uid, mode 0700. The folder it is made in must itself be
// safe: owned by the caller or root, and, if others may write to it, sticky
// (so they cannot rename the new directory away and put theirs in its place).
#pragma once

#include <string>

#include "dlaunch/error.h"

namespace dlaunch {

// A shared directory that cannot safely hold a private one, or a failed
// creation: the message names the path and what is wrong with it.
class PrivateDirError : public Error {
 public:
  explicit PrivateDirError(const std::string& message) : Error(ErrorKind::kEnvironment, message) {}
};

// Where per-job runtime files go: $TMPDIR when set and not empty, else
// $XDG_RUNTIME_DIR when set and not empty, else /tmp.
std::string runtime_base_dir();

// Creates `base`/`prefix`XXXXXX (the X's random) as described above and
// returns its path. `prefix` must not contain '/'. Throws PrivateDirError.
std::string make_private_dir(const std::string& base, const std::string& prefix);

// Throws PrivateDirError unless `base` is a directory (links followed) that
// a private directory may be created in, as described above.
void check_shared_base(const std::string& base);

}  // namespace dlaunch
