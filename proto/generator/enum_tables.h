// The schema's enums for the code beside the wire encoder, written by the
// same plugin (wire_generator.h says how protoc runs it):
//
// `castscope/v1/events.enums.h` (namespace castscope::v1::enums), for the
// agent's fixed-size records; includes no protobuf header:
//   - per enum, `enum class <Name> : uint8_t` (int32_t where a value does not
//     fit a byte) with the .proto's numbers and the value names without the
//     enum's prefix, in kCamelCase: DTYPE_BFLOAT16 -> DType::kBfloat16. A
//     nested enum is named as libprotobuf names it: CacheSample_Trigger;
//   - `<Name>_MIN` / `<Name>_MAX`, and `constexpr std::string_view
//     proto_name(value)`: the .proto spelling, empty for an undefined value;
//   - namespace `<file>_proto` with `enum_value_name(enum full name, value)`
//     over those enums, for tests that walk the descriptors.
//
// `castscope/v1/events.names.h` (namespace castscope::v1::names), for the
// collector; includes the libprotobuf header of the same file:
//   - per enum, `constexpr std::string_view short_name(<libprotobuf enum>)`:
//     the value name without the enum's prefix, lower case (DTYPE_BFLOAT16 ->
//     "bfloat16"), the spelling of reports, viewer and trace export; empty for
//     a value the schema does not define;
//   - per message with singular enum fields, `for_each_enum_field(message,
//     visit)`: visit(field name, value) for each, in .proto order (batch
//     validation bounds the event kinds' fields with it);
//   - namespace `<file>_proto` with `enum_value_name(enum full name, value)`
//     giving the short name, for tests.
//
// The prefix is the enum's name in upper snake case, letters compared without
// the underscores (DType: DTYPE_; CacheSample.Trigger: TRIGGER_), as the
// protobuf style guide asks every value to begin with. A value without it
// keeps its whole name.
#pragma once

#include <google/protobuf/descriptor.h>

#include <string>

namespace castscope::wiregen {

// "DTYPE_BFLOAT16" of castscope.v1.DType -> "BFLOAT16".
std::string unprefixed_name(const google::protobuf::EnumValueDescriptor* value);

std::string record_enums_header(const google::protobuf::FileDescriptor* file);
std::string short_names_header(const google::protobuf::FileDescriptor* file);

}  // namespace castscope::wiregen
