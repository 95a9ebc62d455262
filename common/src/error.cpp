#include "dlaunch/error.h"

namespace dlaunch {

const char* to_string(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kInput:
      return "input";
    case ErrorKind::kEnvironment:
      return "environment";
    case ErrorKind::kProtocol:
      return "protocol";
    case ErrorKind::kInternal:
      return "internal";
  }
  return "internal";
}

}  // namespace dlaunch
