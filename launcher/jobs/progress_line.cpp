#include "jobs/progress_line.h"

#include <cstdlib>
#include <optional>

#include <fmt/format.h>

namespace dlaunch {

namespace {

// The value of "KEY": in one event line, as the head writes them (a flat
// object, strings without escaped quotes in the keys this reads). A string
// value without its quotes; nothing when the key is not there.
std::optional<std::string_view> value_of(std::string_view line, std::string_view key) {
  const std::string quoted = "\"" + std::string(key) + "\":";
  const auto at = line.find(quoted);
  if (at == std::string_view::npos) return std::nullopt;
  std::string_view rest = line.substr(at + quoted.size());
  if (!rest.empty() && rest.front() == '"') {
    rest.remove_prefix(1);
    const auto close = rest.find('"');
    if (close == std::string_view::npos) return std::nullopt;
    return rest.substr(0, close);
  }
  const auto end = rest.find_first_of(",}");
  return rest.substr(0, end);
}

std::optional<int> int_of(std::string_view line, std::string_view key) {
  const auto v = value_of(line, key);
  if (!v || v->empty()) return std::nullopt;
  const std::string text(*v);
  char* end = nullptr;
  const long n = std::strtol(text.c_str(), &end, 10);
  if (*end != '\0' || n < 0 || n > 1'000'000'000) return std::nullopt;
  return static_cast<int>(n);
}

std::string duration(std::int64_t s) {
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}h{:02}m", s / 3600, (s % 3600) / 60);
}

}  // namespace

void ProgressLine::add(std::string_view line) {
  const auto type = value_of(line, "type");
  const auto attempt = int_of(line, "attempt");
  if (!type || !attempt) return;
  if (*attempt > attempt_) {
    attempt_ = *attempt;
    ready_ = started_ = exited_ = failed_ = lost_ = 0;
    pulling_.clear();
  } else if (*attempt < attempt_) {
    return;  // an older attempt's line, after a newer one's
  }
  if (*type == "start" || *type == "restart" || *type == "head_recovered") {
    if (auto n = int_of(line, "nodes")) nodes_ = *n;
    if (auto w = int_of(line, "world_size")) ranks_ = *w;
    // A new head hears every node and rank again (docs/events.md): counted anew.
    if (*type == "head_recovered") {
      ready_ = started_ = exited_ = failed_ = lost_ = 0;
      pulling_.clear();
    }
  } else if (*type == "image_pull") {
    const auto node = int_of(line, "node");
    const auto done = value_of(line, "done");
    if (node && done && *done == "false") pulling_.insert(*node);
    if (node && done && *done == "true") pulling_.erase(*node);
  } else if (*type == "node_ready" || *type == "node_resumed") {
    ++ready_;
    if (auto node = int_of(line, "node")) pulling_.erase(*node);
  } else if (*type == "node_lost") {
    ++lost_;
    if (auto node = int_of(line, "node")) pulling_.erase(*node);
  } else if (*type == "rank_started") {
    ++started_;
  } else if (*type == "rank_exited") {
    ++exited_;
    const auto how = value_of(line, "how");
    const auto code = int_of(line, "code");
    if (!how || *how != "exited" || !code || *code != 0) ++failed_;
  }
}

std::string ProgressLine::text(std::int64_t up_s) const {
  std::string out =
      fmt::format("attempt {}: {}/{} nodes ready{}, {}/{} ranks running", attempt_, ready_, nodes_,
                  pulling_.empty() ? "" : fmt::format(" ({} pulling the image)", pulling_.size()),
                  started_ - exited_, ranks_);
  if (exited_ > 0) {
    out += fmt::format(", {} exited", exited_);
    if (failed_ > 0) out += fmt::format(" ({} failed)", failed_);
  }
  if (lost_ > 0) out += fmt::format(", {} node{} lost", lost_, lost_ == 1 ? "" : "s");
  if (up_s >= 0) out += " · " + duration(up_s);
  return out;
}

}  // namespace dlaunch
