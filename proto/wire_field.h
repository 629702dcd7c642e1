// One field of a castscope.v1 message as the generated wire headers declare
// it (castscope/v1/*.wire.h): number, name and type, all from the .proto.
//
// The agent's encoders walk a record's fields once (agent/src/encode/
// record_fields.h); the wire encoder takes the number and type, the
// JSON-lines writer the name and type, so neither restates the schema. It
// converts to its number, so `out.u64(CastEvent::kSeq, …)` reads as before.
#pragma once

#include <cstdint>
#include <string_view>

namespace castscope {

struct WireField {
  // The .proto's scalar types as the encoders treat them: how the wire packs
  // the value (varint, zigzag, fixed64, length-delimited) and how proto3 JSON
  // spells it (64-bit integers quoted, enums by name).
  enum Type : uint8_t { kUint64, kInt64, kUint32, kInt32, kSint32, kDouble, kBool, kEnum, kString, kBytes, kMessage };

  uint32_t number;
  std::string_view name;  // the .proto's field name, also its proto3 JSON name with proto names
  Type type;
  bool repeated = false;

  constexpr operator uint32_t() const noexcept { return number; }
};

}  // namespace castscope
