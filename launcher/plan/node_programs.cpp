#include "plan/node_programs.h"

#include <algorithm>

namespace dlaunch {

namespace {

// The command lines of the apps with ranks on `node` (the job's one command
// when it has no apps), in app order.
std::vector<const std::vector<std::string>*> node_commands(const JobPlan& plan, std::size_t node) {
  if (plan.apps.empty()) return {&plan.command};
  std::vector<bool> here(plan.apps.size(), false);
  for (const auto& r : plan.nodes.at(node).ranks) {
    if (r.app >= 0 && static_cast<std::size_t>(r.app) < here.size())
      here[static_cast<std::size_t>(r.app)] = true;
  }
  std::vector<const std::vector<std::string>*> out;
  for (std::size_t k = 0; k < plan.apps.size(); ++k) {
    if (here[k]) out.push_back(&plan.apps[k].command);
  }
  return out;
}

}  // namespace

std::vector<std::string> node_programs(const JobPlan& plan, std::size_t node) {
  std::vector<std::string> out;
  const auto add = [&out](const std::vector<std::string>& command) {
    if (command.empty()) return;
    if (std::find(out.begin(), out.end(), command.front()) == out.end())
      out.push_back(command.front());
  };
  for (const auto* command : node_commands(plan, node)) add(*command);
  return out;
}

namespace {

// What an interpreter's options are: those that end the options with no
// script (-c CODE, -m MODULE) and those that take the next word as a value.
struct Interpreter {
  std::vector<std::string> no_script;
  std::vector<std::string> with_value;
};

const Interpreter* interpreter_of(std::string name) {
  static const Interpreter kPython{{"-c", "-m"}, {"-W", "-X", "-Q"}};
  static const Interpreter kShell{{"-c"}, {"-o", "+o", "-O", "+O"}};
  static const Interpreter kPerl{{"-e", "-E"}, {"-I", "-M", "-m"}};
  static const Interpreter kRuby{{"-e"}, {"-I", "-r", "-C"}};
  static const Interpreter kNode{{"-e", "--eval", "-p", "--print"}, {"-r", "--require"}};
  static const Interpreter kRscript{{"-e"}, {}};
  static const Interpreter kJulia{{"-e", "-E", "--eval"}, {"-L", "-J", "-t", "-p"}};
  name = name.substr(name.rfind('/') + 1);
  // python, python3, python3.11, python3.11-dbg
  if (name.starts_with("python")) {
    const std::string rest = name.substr(6);
    if (rest.find_first_not_of("0123456789.") == std::string::npos || rest.ends_with("-dbg"))
      return &kPython;
  }
  if (name == "bash" || name == "sh" || name == "dash" || name == "zsh" || name == "ksh")
    return &kShell;
  if (name == "perl") return &kPerl;
  if (name == "ruby") return &kRuby;
  if (name == "node" || name == "nodejs") return &kNode;
  if (name == "Rscript") return &kRscript;
  if (name == "julia") return &kJulia;
  return nullptr;
}

bool listed(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

}  // namespace

std::string script_argument(const std::vector<std::string>& command) {
  if (command.empty()) return "";
  const Interpreter* in = interpreter_of(command.front());
  if (in == nullptr) return "";
  for (std::size_t k = 1; k < command.size(); ++k) {
    const std::string& a = command[k];
    if (a == "--") return k + 1 < command.size() ? command[k + 1] : "";
    if (a == "-" || a.empty()) return "";
    if (a.front() != '-' && a.front() != '+') return a;
    if (listed(in->no_script, a)) return "";
    // -cCODE, -mMODULE: the value joined to the option.
    for (const auto& opt : in->no_script) {
      if (opt.size() == 2 && a.size() > 2 && a.starts_with(opt)) return "";
    }
    if (listed(in->with_value, a)) ++k;
  }
  return "";
}

std::vector<std::string> node_scripts(const JobPlan& plan, std::size_t node) {
  std::vector<std::string> out;
  const auto add = [&out](const std::vector<std::string>& command) {
    const std::string s = script_argument(command);
    if (!s.empty() && std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
  };
  for (const auto* command : node_commands(plan, node)) add(*command);
  return out;
}
}  // namespace dlaunch
