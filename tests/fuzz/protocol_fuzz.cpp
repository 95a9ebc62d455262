// Fuzzes the control protocol decoder (agent/protocol/protocol.h), the bytes
// the head reads from every agent and every agent from the head.
//
// Input: a byte stream as it would arrive on the channel. It is decoded twice,
// once in one piece and once cut into chunks whose sizes come from the input,
// and both must yield the same messages and the same error. Every decoded
// message must encode back to exactly the bytes of its frame: the format has
// one encoding per message, so the decoder accepts nothing else. The first
// two bytes are also tried as a message type for decode_payload on the rest,
// which reaches every message type without a valid frame header.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dlaunch/proto/protocol.h"

namespace proto = dlaunch::proto;

namespace {

[[noreturn]] void broken(const char* what) {
  std::fprintf(stderr, "protocol_fuzz: %s\n", what);
  std::abort();
}

struct Result {
  std::vector<std::string> frames;  // each decoded message, encoded again
  std::optional<std::string> error;
  std::size_t pending = 0;
};

// Pulls every message out of the decoder; checks each against its frame bytes.
void drain(proto::Decoder& d, std::string_view stream, std::size_t& consumed, Result& out) {
  for (;;) {
    std::optional<proto::Message> m;
    try {
      m = d.next();
    } catch (const proto::ProtocolError& e) {
      out.error = e.what();
      return;
    }
    if (!m) return;
    std::string again = proto::encode(*m);
    if (stream.substr(consumed, again.size()) != again) {
      broken("a decoded message does not encode back to its frame");
    }
    if (proto::message_name(*m) == nullptr) broken("message without a name");
    consumed += again.size();
    out.frames.push_back(std::move(again));
  }
}

Result decode_stream(std::string_view stream, std::string_view cuts) {
  proto::Decoder d;
  Result out;
  std::size_t consumed = 0;
  std::size_t pos = 0;
  std::size_t i = 0;
  while (pos < stream.size() && !out.error) {
    // Chunk sizes 1..256 from the cut bytes; the whole rest once they run out.
    std::size_t n = i < cuts.size() ? static_cast<unsigned char>(cuts[i++]) + 1u : stream.size();
    n = std::min(n, stream.size() - pos);
    d.feed(stream.substr(pos, n));
    pos += n;
    drain(d, stream, consumed, out);
  }
  if (!out.error) out.pending = d.pending();
  return out;
}

void decode_one_payload(std::string_view input) {
  if (input.size() < 2) return;
  const auto type = static_cast<std::uint16_t>(static_cast<unsigned char>(input[0]) |
                                               static_cast<unsigned char>(input[1]) << 8);
  const std::string_view payload = input.substr(2);
  try {
    proto::Message m = proto::decode_payload(type, payload);
    const std::string frame = proto::encode(m);
    if (frame.size() < proto::kHeaderBytes ||
        std::string_view(frame).substr(proto::kHeaderBytes) != payload) {
      broken("decode_payload accepted a payload that does not encode back to itself");
    }
  } catch (const proto::ProtocolError&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);

  const Result whole = decode_stream(input, {});
  const Result chunked = decode_stream(input, input);
  if (whole.frames != chunked.frames || whole.error.has_value() != chunked.error.has_value() ||
      whole.pending != chunked.pending) {
    broken("decoding depends on how the bytes were cut");
  }
  decode_one_payload(input);
  return 0;
}
