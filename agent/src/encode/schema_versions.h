// The versions this build writes: the newest value of each version enum of
// the schema. Bumping one is a change to the .proto alone; the collector takes
// the same value from libprotobuf's `ProtocolVersion_MAX`.
#pragma once

#include <cstdint>

#include "castscope/v1/events.wire.h"
#include "castscope/v1/transport.wire.h"

namespace castscope {

// Batch.protocol_version (castscope.v1.ProtocolVersion).
inline constexpr uint32_t kProtocolVersion = static_cast<uint32_t>(v1::wire::ProtocolVersion_MAX);
// AgentStats.schema_version.
inline constexpr v1::wire::SchemaVersion kSchemaVersion = v1::wire::SchemaVersion_MAX;

}  // namespace castscope
