#include "controller/stacks.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

namespace dlaunch {

namespace {

std::vector<std::string_view> lines_of(std::string_view text) {
  std::vector<std::string_view> out;
  while (!text.empty()) {
    const auto nl = text.find('\n');
    auto line = text.substr(0, nl);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    out.push_back(line);
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
  return out;
}

std::string_view trim_left(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  return s;
}

// "#12  0x00007f... name@GLIBC_2.2.5" (eu-stack) or "#3  0x... in name (args) at f.c:4"
// / "#0  name (args) at ..." (gdb): the function name, "??" when none.
std::string frame_function(std::string_view line) {
  auto rest = line.substr(1);
  while (!rest.empty() && rest.front() >= '0' && rest.front() <= '9') rest.remove_prefix(1);
  rest = trim_left(rest);
  if (rest.starts_with("0x")) {
    const auto sp = rest.find(' ');
    rest = sp == std::string_view::npos ? std::string_view{} : trim_left(rest.substr(sp));
    if (rest.starts_with("in ")) rest = trim_left(rest.substr(3));
  }
  std::size_t end = rest.find(" (");
  end = std::min(end, rest.find(' '));
  auto name = rest.substr(0, end);
  if (const auto at = name.find('@'); at != std::string_view::npos && at > 0) {
    name = name.substr(0, at);
  }
  if (name.empty() || name.starts_with("0x")) return "??";
  return std::string(name);
}

bool is_frame(std::string_view line) {
  return line.size() > 1 && line[0] == '#' && line[1] >= '0' && line[1] <= '9';
}

std::string basename_of(std::string_view path) {
  const auto slash = path.rfind('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

std::string joined(const std::vector<std::string>& frames, std::size_t max) {
  std::string out;
  for (std::size_t i = 0; i < frames.size() && i < max; ++i) {
    out += (i == 0 ? "" : " <- ") + frames[i];
  }
  if (frames.size() > max) out += " <- ...";
  return out;
}

}  // namespace

std::vector<std::string> native_frames(std::string_view text, int pid) {
  std::vector<std::vector<std::string>> threads;
  std::size_t main_thread = 0;
  bool found_main = false;
  const std::string eu_main = fmt::format("TID {}:", pid);
  const std::string gdb_main = fmt::format("(LWP {})", pid);
  for (auto line : lines_of(text)) {
    if (line.starts_with("TID ") || line.starts_with("Thread ")) {
      threads.emplace_back();
      if (!found_main && (line == eu_main || line.find(gdb_main) != std::string_view::npos)) {
        main_thread = threads.size() - 1;
        found_main = true;
      }
    } else if (is_frame(line)) {
      if (threads.empty()) threads.emplace_back();  // gdb on a process with one thread
      threads.back().push_back(frame_function(line));
    }
  }
  if (threads.empty()) return {};
  return threads[main_thread];
}

std::vector<std::string> python_frames(std::string_view dump) {
  // Every thread faulthandler listed, in its order. "Current thread" is the
  // one the SIGABRT happened to land on, which may be any thread (a helper
  // thread, say), so the rank is described by its main thread: the one whose
  // outermost frame is the script's `<module>`; failing that, the current
  // thread, else the first.
  struct Thread {
    bool current = false;
    std::vector<std::string> frames;
  };
  std::vector<Thread> threads;
  Thread* into = nullptr;
  for (auto line : lines_of(dump)) {
    if (line.starts_with("Current thread 0x") || line.starts_with("Thread 0x") ||
        line.starts_with("Stack (most recent call first)")) {
      threads.push_back({.current = line.starts_with("Current thread"), .frames = {}});
      into = &threads.back();
      continue;
    }
    const auto l = trim_left(line);
    if (!l.starts_with("File \"")) {
      if (line.empty()) into = nullptr;  // a blank line ends a thread
      continue;
    }
    if (into == nullptr) continue;
    // File "path", line N in function
    const auto q = l.find('"', 6);
    if (q == std::string_view::npos) continue;
    const auto file = basename_of(l.substr(6, q - 6));
    auto rest = l.substr(q + 1);
    std::string lineno;
    if (const auto ln = rest.find("line "); ln != std::string_view::npos) {
      auto num = rest.substr(ln + 5);
      num = num.substr(0, num.find(' '));
      lineno = std::string(num);
    }
    std::string fn = "?";
    if (const auto in = rest.find(" in "); in != std::string_view::npos) {
      fn = std::string(rest.substr(in + 4));
    }
    into->frames.push_back(fmt::format("{} ({}:{})", fn, file, lineno));
  }
  const Thread* main_thread = nullptr;
  const Thread* current = nullptr;
  for (const auto& t : threads) {
    if (t.current && current == nullptr) current = &t;
    const bool is_main = !t.frames.empty() && t.frames.back().starts_with("<module> (");
    if (is_main && (main_thread == nullptr || t.current)) main_thread = &t;
  }
  if (main_thread != nullptr) return main_thread->frames;
  if (current != nullptr) return current->frames;
  return threads.empty() ? std::vector<std::string>{} : threads.front().frames;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += ",";
    if (j - i >= 2) {
      out += fmt::format("{}-{}", ranks[i], ranks[j]);
    } else {
      for (std::size_t k = i; k <= j; ++k) out += fmt::format("{}{}", k == i ? "" : ",", ranks[k]);
    }
    i = j + 1;
  }
  return out;
}

std::vector<StackGroup> group_stacks(const std::vector<RankStackText>& stacks) {
  std::map<std::string, StackGroup> by_key;
  for (const auto& s : stacks) {
    std::string key;
    std::string summary;
    if (auto py = python_frames(s.python); !py.empty()) {
      key = "py\n" + joined(py, py.size());
      summary = joined(py, kSummaryFrames);
    } else if (auto native = native_frames(s.native, s.pid); !native.empty()) {
      key = "native\n" + joined(native, native.size());
      std::vector<std::string> shown;
      for (const auto& f : native) {
        if (!f.starts_with("_")) shown.push_back(f);
      }
      if (shown.empty()) shown = native;
      summary = joined(shown, kSummaryFrames);
    } else {
      summary = "no stack: " + (s.error.empty() ? std::string("nothing came back") : s.error);
      key = "error\n" + summary;
    }
    auto& g = by_key[key];
    g.summary = summary;
    g.ranks.push_back(s.rank);
  }
  std::vector<StackGroup> out;
  for (auto& [key, g] : by_key) {
    std::sort(g.ranks.begin(), g.ranks.end());
    out.push_back(std::move(g));
  }
  std::sort(out.begin(), out.end(), [](const StackGroup& a, const StackGroup& b) {
    if (a.ranks.size() != b.ranks.size()) return a.ranks.size() < b.ranks.size();
    return a.ranks.front() < b.ranks.front();
  });
  return out;
}

std::string format_stack_groups(const std::vector<StackGroup>& groups, const std::string& indent) {
  std::string out;
  for (const auto& g : groups) {
    if (g.ranks.size() == 1) {
      out += fmt::format("{}rank {}: {}\n", indent, g.ranks.front(), g.summary);
    } else {
      out += fmt::format("{}ranks {} ({} ranks): {}\n", indent, rank_list(g.ranks), g.ranks.size(),
                         g.summary);
    }
  }
  return out;
}

std::string format_full_stacks(const std::vector<RankStackText>& stacks, const std::string& title) {
  std::string out = title + "\n";
  for (const auto& s : stacks) {
    out += fmt::format("\n===== rank {} (node {}, pid {}) =====\n", s.rank, s.node, s.pid);
    if (!s.error.empty()) {
      out +=
          (s.native.empty() ? "no native stack: " : "native stack incomplete: ") + s.error + "\n";
    }
    if (!s.native.empty()) {
      out += "--- native stack (" + s.tool + ") ---\n" + s.native;
      if (s.native.back() != '\n') out += "\n";
    }
    if (!s.python.empty()) {
      out += "--- Python traceback (faulthandler, after SIGABRT) ---\n" + s.python;
      if (s.python.back() != '\n') out += "\n";
    }
  }
  return out;
}

}  // namespace dlaunch
