// protoc-gen-castscope-wire: from each .proto, a C++ header of field numbers
// and enums that includes no protobuf header (after Perfetto's protozero).
//
// The agent runs inside libtorch, which exports protobuf symbols of its own,
// so it writes the wire format by hand (agent/src/encode/proto_wire.h). This
// generator keeps that hand-written encoder on the one schema: field numbers,
// enum values and enum names come from the .proto, never from literals.
//
// For `castscope/v1/events.proto` (package castscope.v1) it writes
// `castscope/v1/events.wire.h`, namespace castscope::v1::wire:
//   - per message, a struct of `static constexpr WireField k<Field>`: number,
//     name and type of each field (proto/wire_field.h; it converts to the
//     number), with nested messages and enums as nested structs and enums;
//   - per enum, an unscoped `enum <Name> : int32_t` with the proto's value
//     names, `<Name>_MIN` / `<Name>_MAX`, and `constexpr std::string_view
//     <Name>_Name(value)` giving the proto spelling (empty when undefined),
//     as libprotobuf's generated code does;
//   - namespace `<file>_proto` with `enum_value_name(enum full name, value)`
//     and `field_number(message full name, field name)`, so tests can compare
//     the whole header with the descriptors by reflection.
//
// Beside it, `castscope/v1/events.enums.h`: the same enums as the agent's
// records hold them. With the parameter `names`
// (--castscope-wire_out=names:DIR), `castscope/v1/events.names.h` instead:
// the collector's one table of short value names. See enum_tables.h. With
// `specs`, `castscope/v1/events.specs.h`: test builders (spec_builders.h).
#pragma once

#include <google/protobuf/compiler/code_generator.h>

#include <cstdint>
#include <string>

namespace castscope::wiregen {

class WireGenerator : public google::protobuf::compiler::CodeGenerator {
 public:
  bool Generate(const google::protobuf::FileDescriptor* file, const std::string& parameter,
                google::protobuf::compiler::GeneratorContext* context, std::string* error) const override;
  uint64_t GetSupportedFeatures() const override { return FEATURE_PROTO3_OPTIONAL; }
};

// (`castscope/v1/events.proto`, ".wire.h") -> `castscope/v1/events.wire.h`.
std::string generated_header_name(const std::string& proto_name, const std::string& suffix);

}  // namespace castscope::wiregen
