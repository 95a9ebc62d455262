// dlaunch(1) in roff, made from the same CLI11 app that parses the command
// line (`dlaunch --help-man`, run at build time), so the man page lists every
// option --help lists, with the same text.
#pragma once

#include <string>

namespace CLI {
class App;
}

namespace dlaunch {

// The whole page: NAME and SYNOPSIS from the app's description, one OPTIONS
// subsection per option group, the footer's paragraphs (Examples, Exit status)
// as sections, then ENVIRONMENT, FILES and SEE ALSO.
std::string man_page(const CLI::App& app, const std::string& version);

// Text made safe for roff: backslashes, leading '.' and '\'', and '-' (as \-,
// so option names stay ASCII hyphens when rendered).
std::string roff_escape(const std::string& text);

}  // namespace dlaunch
