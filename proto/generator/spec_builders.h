// Test builders of the schema's messages, written by the same plugin with the
// parameter `specs` (--castscope-wire_out=specs:DIR):
// `castscope/v1/events.specs.h`, namespace castscope::v1::specs, for
// server/testing's batch builder (unit tests, fuzzer seeds, benches):
//   - per message, a struct of the same name with one value-initialized
//     member per field in .proto order (scalars as themselves, strings as
//     std::string, enums as libprotobuf's enum, repeated fields as
//     std::vector, a message as std::optional of its spec), so a test names
//     just the fields it cares about:
//       to_message(specs::CastEvent{.seq = 2, .src_dtype = v1::DTYPE_FLOAT32});
//   - `to_message(spec)`: the message, built with libprotobuf's setters.
// A message with a oneof (Event, the stream envelopes) gets no spec, nor does
// a field of such a type; tests build those by hand.
#pragma once

#include <google/protobuf/descriptor.h>

#include <string>

namespace castscope::wiregen {

std::string spec_builders_header(const google::protobuf::FileDescriptor* file);

}  // namespace castscope::wiregen
