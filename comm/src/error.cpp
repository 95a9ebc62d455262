#include "comm/error.h"

namespace dlaunch::comm {

const char* to_string(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kUsage:
      return "usage";
    case ErrorKind::kEnvironment:
      return "environment";
    case ErrorKind::kInternal:
      return "internal";
  }
  return "unknown-error-kind";
}

}  // namespace dlaunch::comm
