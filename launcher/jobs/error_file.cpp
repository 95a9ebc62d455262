#include "jobs/error_file.h"

#include <cstdint>
#include <vector>

namespace dlaunch {
namespace {

// Just enough JSON (RFC 8259) for error files: a strict recursive reader with
// a depth limit, since the file is whatever the worker wrote.
struct Json {
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };
  Kind kind = Kind::kNull;
  std::string text;               // kString: the decoded value; kNumber, kBool: the literal
  std::vector<std::string> keys;  // kObject, in file order
  std::vector<Json> values;       // kObject: values of keys; kArray: items

  const Json* get(std::string_view key) const {
    if (kind != Kind::kObject) return nullptr;
    for (std::size_t i = 0; i < keys.size(); ++i) {
      if (keys[i] == key) return &values[i];
    }
    return nullptr;
  }
};

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}

  bool document(Json& out) {
    if (!value(out, 0)) return false;
    space();
    return pos_ == in_.size();
  }

 private:
  static constexpr int kMaxDepth = 64;

  void space() {
    while (pos_ < in_.size() &&
           (in_[pos_] == ' ' || in_[pos_] == '\t' || in_[pos_] == '\n' || in_[pos_] == '\r'))
      ++pos_;
  }
  bool eat(char c) {
    space();
    if (pos_ < in_.size() && in_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool literal(std::string_view word) {
    if (in_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  bool value(Json& out, int depth) {
    if (depth > kMaxDepth) return false;
    space();
    if (pos_ >= in_.size()) return false;
    const char c = in_[pos_];
    if (c == '{') return object(out, depth);
    if (c == '[') return array(out, depth);
    if (c == '"') {
      out.kind = Json::Kind::kString;
      return string(out.text);
    }
    if (c == 't' || c == 'f') {
      out.kind = Json::Kind::kBool;
      out.text = c == 't' ? "true" : "false";
      return literal(out.text);
    }
    if (c == 'n') {
      out.kind = Json::Kind::kNull;
      return literal("null");
    }
    return number(out);
  }

  bool object(Json& out, int depth) {
    out.kind = Json::Kind::kObject;
    ++pos_;  // '{'
    if (eat('}')) return true;
    do {
      space();
      std::string key;
      if (pos_ >= in_.size() || in_[pos_] != '"' || !string(key) || !eat(':')) return false;
      Json v;
      if (!value(v, depth + 1)) return false;
      out.keys.push_back(std::move(key));
      out.values.push_back(std::move(v));
    } while (eat(','));
    return eat('}');
  }

  bool array(Json& out, int depth) {
    out.kind = Json::Kind::kArray;
    ++pos_;  // '['
    if (eat(']')) return true;
    do {
      Json v;
      if (!value(v, depth + 1)) return false;
      out.values.push_back(std::move(v));
    } while (eat(','));
    return eat(']');
  }

  bool number(Json& out) {
    const std::size_t start = pos_;
    auto digits = [&] {
      const std::size_t s = pos_;
      while (pos_ < in_.size() && in_[pos_] >= '0' && in_[pos_] <= '9') ++pos_;
      return pos_ > s;
    };
    if (pos_ < in_.size() && in_[pos_] == '-') ++pos_;
    if (!digits()) return false;
    if (pos_ < in_.size() && in_[pos_] == '.') {
      ++pos_;
      if (!digits()) return false;
    }
    if (pos_ < in_.size() && (in_[pos_] == 'e' || in_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < in_.size() && (in_[pos_] == '+' || in_[pos_] == '-')) ++pos_;
      if (!digits()) return false;
    }
    out.kind = Json::Kind::kNumber;
    out.text = std::string(in_.substr(start, pos_ - start));
    return true;
  }

  bool hex4(std::uint32_t& v) {
    if (in_.size() - pos_ < 4) return false;
    v = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = in_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9') {
        v |= static_cast<std::uint32_t>(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        v |= static_cast<std::uint32_t>(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        v |= static_cast<std::uint32_t>(c - 'A' + 10);
      } else {
        return false;
      }
    }
    return true;
  }

  static void utf8(std::uint32_t cp, std::string& out) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xc0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xe0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
      out += static_cast<char>(0xf0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    }
  }

  bool string(std::string& out) {
    ++pos_;  // '"'
    while (pos_ < in_.size()) {
      const char c = in_[pos_++];
      if (c == '"') return true;
      if (static_cast<unsigned char>(c) < 0x20) return false;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= in_.size()) return false;
      const char e = in_[pos_++];
      switch (e) {
        case '"':
        case '\\':
        case '/':
          out += e;
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          std::uint32_t cp = 0;
          if (!hex4(cp)) return false;
          if (cp >= 0xd800 && cp < 0xdc00) {  // a surrogate pair makes one code point
            std::uint32_t low = 0;
            if (!literal("\\u") || !hex4(low) || low < 0xdc00 || low > 0xdfff) return false;
            cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
          } else if (cp >= 0xdc00 && cp <= 0xdfff) {
            return false;
          }
          utf8(cp, out);
          break;
        }
        default:
          return false;
      }
    }
    return false;  // unterminated
  }

  std::string_view in_;
  std::size_t pos_ = 0;
};

// A string field, or a number/bool written where a string was expected.
std::string scalar(const Json* j) {
  if (j == nullptr || j->kind == Json::Kind::kObject || j->kind == Json::Kind::kArray ||
      j->kind == Json::Kind::kNull)
    return {};
  return j->text;
}

}  // namespace

std::optional<WorkerError> parse_error_file(std::string_view text) {
  Json doc;
  if (!Reader(text).document(doc)) return std::nullopt;
  const Json* message = doc.get("message");
  if (message == nullptr) return std::nullopt;
  WorkerError out;
  if (message->kind == Json::Kind::kString) {
    out.message = message->text;
    return out;
  }
  if (message->kind != Json::Kind::kObject) return std::nullopt;
  out.message = scalar(message->get("message"));
  if (const Json* extra = message->get("extraInfo")) {
    out.traceback = scalar(extra->get("py_callstack"));
    out.timestamp = scalar(extra->get("timestamp"));
  }
  if (out.message.empty() && out.traceback.empty()) return std::nullopt;
  return out;
}

}  // namespace dlaunch
