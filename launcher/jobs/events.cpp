#include "jobs/events.h"

#include <chrono>
#include <cmath>
#include <ctime>

#include <fmt/format.h>

namespace dlaunch {

namespace {

// The length of the UTF-8 sequence that starts s[i], 0 when it is not one
// (overlong forms, surrogates and code points past U+10FFFF included).
std::size_t utf8_length(std::string_view s, std::size_t i) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  std::size_t n = 0;
  std::uint32_t cp = 0;
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
    cp = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    cp = c & 0x0F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (std::size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b(i + k) & 0x3F);
  }
  if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10FFFF ||
      (cp >= 0xD800 && cp <= 0xDFFF)) {
    return 0;
  }
  return n;
}

}  // namespace

std::string json_quote(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out += '"';
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      const std::size_t n = utf8_length(s, i);
      if (n == 0) {
        out += "\xEF\xBF\xBD";  // U+FFFD
        ++i;
      } else {
        out.append(s.substr(i, n));
        i += n;
      }
      continue;
    }
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20 || c == 0x7F) {
          out += fmt::format("\\u{:04x}", c);
        } else {
          out += static_cast<char>(c);
        }
    }
    ++i;
  }
  out += '"';
  return out;
}

std::string rfc3339_ms(std::int64_t unix_ms) {
  const auto secs = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  ::gmtime_r(&secs, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, unix_ms % 1000);
}

std::int64_t unix_now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string EventLog::line(std::int64_t unix_ms, std::string_view type,
                           const std::vector<EventField>& fields) const {
  std::string out =
      fmt::format(R"({{"v":{},"time":"{}","job":{},"attempt":{},"type":{})", kEventSchemaVersion,
                  rfc3339_ms(unix_ms), json_quote(job_id_), attempt_, json_quote(type));
  for (const auto& f : fields) {
    out += ',' + json_quote(f.key) + ':';
    if (const auto* s = std::get_if<std::string>(&f.value)) {
      out += json_quote(*s);
    } else if (const auto* i = std::get_if<long long>(&f.value)) {
      out += std::to_string(*i);
    } else if (const auto* d = std::get_if<double>(&f.value)) {
      out += std::isfinite(*d) ? fmt::format("{:.3f}", *d) : "null";
    } else {
      out += std::get<bool>(f.value) ? "true" : "false";
    }
  }
  out += "}\n";
  return out;
}

void EventLog::emit(std::string_view type, const std::vector<EventField>& fields) {
  if (writers_.empty()) return;
  const std::string l = line(unix_now_ms(), type, fields);
  for (const auto& w : writers_) w(l);
}

}  // namespace dlaunch
