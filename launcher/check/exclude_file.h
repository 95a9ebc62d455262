// --exclude-file FILE (issue 33): the hosts a check found failing, carried to
// the next job. `dlaunch --check --exclude-file F` writes F anew with the
// hosts that failed (so a host that passes again drops out of it); a job
// with --exclude-file F leaves the hosts F names out, as --exclude would;
// --preflight adds to F the hosts it left out. One host per line, its
// hostfile name first; `#` starts a comment (the time and the reason).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace dlaunch {

// Refuses, as input (exit 2, before anything starts), an F that exists and
// is not a regular file of this user: a device, a directory, a pipe, a
// symbolic link or another user's file is never replaced or added to.
void check_exclude_file(const std::string& path);

// The names F lists; none when F does not exist. Throws InputError naming
// --exclude-file when it exists and cannot be read.
std::vector<std::string> read_exclude_file(const std::string& path);

using ExcludedHost = std::pair<std::string, std::string>;  // name, reason

// F anew with these hosts (written beside it and renamed over it, 0600).
// Throws Error when it cannot be written.
void write_exclude_file(const std::string& path, const std::vector<ExcludedHost>& hosts);

// These hosts added at the end of F (created 0600 when missing; never
// through a symbolic link, never a file of another user). Throws Error.
void append_exclude_file(const std::string& path, const std::vector<ExcludedHost>& hosts);

}  // namespace dlaunch
