// The generated wire headers (proto/generator) against libprotobuf's view of
// the same .proto files: every field number, every enum value's name, and no
// protobuf include (the agent compiles them beside libtorch).
#include <gtest/gtest.h>

#include <google/protobuf/descriptor.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>

#include "castscope/v1/events.pb.h"
#include "castscope/v1/events.wire.h"
#include "castscope/v1/transport.pb.h"
#include "castscope/v1/transport.wire.h"

namespace castscope {
namespace {

namespace gpb = google::protobuf;
namespace wire = v1::wire;

using EnumLookup = std::function<std::string_view(std::string_view, int32_t)>;
using FieldLookup = std::function<uint32_t(std::string_view, std::string_view)>;

void check_enum(const gpb::EnumDescriptor* e, const EnumLookup& name) {
  int32_t max = e->value(0)->number();
  for (int i = 0; i < e->value_count(); ++i) {
    const gpb::EnumValueDescriptor* v = e->value(i);
    EXPECT_EQ(name(e->full_name(), v->number()), e->FindValueByNumber(v->number())->name()) << e->full_name();
    max = std::max(max, v->number());
  }
  EXPECT_EQ(name(e->full_name(), max + 1), "") << e->full_name() << ": a value the schema does not define has no name";
}

void check_message(const gpb::Descriptor* m, const EnumLookup& enum_name, const FieldLookup& field_number) {
  for (int i = 0; i < m->field_count(); ++i)
    EXPECT_EQ(field_number(m->full_name(), m->field(i)->name()), static_cast<uint32_t>(m->field(i)->number()))
        << m->field(i)->full_name();
  for (int i = 0; i < m->enum_type_count(); ++i) check_enum(m->enum_type(i), enum_name);
  for (int i = 0; i < m->nested_type_count(); ++i) check_message(m->nested_type(i), enum_name, field_number);
}

void check_file(const gpb::FileDescriptor* file, const EnumLookup& enum_name, const FieldLookup& field_number) {
  for (int i = 0; i < file->enum_type_count(); ++i) check_enum(file->enum_type(i), enum_name);
  for (int i = 0; i < file->message_type_count(); ++i) check_message(file->message_type(i), enum_name, field_number);
}

TEST(WireHeader, EveryFieldNumberAndEnumNameMatchesTheDescriptors) {
  check_file(v1::Event::descriptor()->file(), wire::events_proto::enum_value_name, wire::events_proto::field_number);
  check_file(v1::Batch::descriptor()->file(), wire::transport_proto::enum_value_name,
             wire::transport_proto::field_number);
  // Unknown names are 0 / empty, not some other message's field.
  EXPECT_EQ(wire::events_proto::field_number("castscope.v1.Batch", "events"), 0u);
  EXPECT_EQ(wire::events_proto::enum_value_name("castscope.v1.ProtocolVersion", 1), "");
}

// Each generated <Enum>_Name against libprotobuf's, for every value.
template <typename WireEnum, typename PbName>
void expect_same_names(std::string_view (*wire_name)(WireEnum), PbName pb_name, const gpb::EnumDescriptor* e) {
  for (int i = 0; i < e->value_count(); ++i)
    EXPECT_EQ(wire_name(static_cast<WireEnum>(e->value(i)->number())), pb_name(e->value(i)->number()))
        << e->value(i)->full_name();
}

#define EXPECT_SAME_NAMES(Enum)                                                                        \
  expect_same_names(                                                                                   \
      wire::Enum##_Name, [](int value) { return v1::Enum##_Name(static_cast<v1::Enum>(value)); }, \
      v1::Enum##_descriptor())

TEST(WireHeader, NameTablesMatchLibprotobuf) {
  EXPECT_SAME_NAMES(SchemaVersion);
  EXPECT_SAME_NAMES(CastPolicy);
  EXPECT_SAME_NAMES(DType);
  EXPECT_SAME_NAMES(DeviceType);
  EXPECT_SAME_NAMES(Role);
  EXPECT_SAME_NAMES(CacheOutcome);
  EXPECT_SAME_NAMES(ExecutionMode);
  EXPECT_SAME_NAMES(Phase);
  EXPECT_SAME_NAMES(SourceLocation::Kind);
  EXPECT_SAME_NAMES(CastOutcome);
  EXPECT_SAME_NAMES(OpOutcome);
  EXPECT_SAME_NAMES(ProbeReason);
  EXPECT_SAME_NAMES(CacheSample::Trigger);
  EXPECT_SAME_NAMES(ProtocolVersion);
  EXPECT_SAME_NAMES(EventFilter::Kind);
}

TEST(WireHeader, VersionsAndBoundsMatchLibprotobuf) {
  static_assert(wire::ProtocolVersion_MAX == static_cast<int32_t>(v1::ProtocolVersion_MAX));
  static_assert(wire::SchemaVersion_MAX == static_cast<int32_t>(v1::SchemaVersion_MAX));
  static_assert(wire::DType_MIN == static_cast<int32_t>(v1::DType_MIN));
  static_assert(wire::DType_MAX == static_cast<int32_t>(v1::DType_MAX));
  static_assert(wire::CacheSample::Trigger_MAX == static_cast<int32_t>(v1::CacheSample::Trigger_MAX));
  static_assert(wire::CastEvent::kRoundTrip == v1::CastEvent::kRoundTripFieldNumber);
  static_assert(wire::Batch::kFinal == v1::Batch::kFinalFieldNumber);
}

// The agent includes these headers beside libtorch's own protobuf: they must
// stand alone.
TEST(WireHeader, IncludesNoProtobufHeader) {
  for (const char* name : {"castscope/v1/events.wire.h", "castscope/v1/transport.wire.h"}) {
    std::ifstream in(std::string(CASTSCOPE_WIRE_DIR) + "/" + name);
    ASSERT_TRUE(in) << name;
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("#include", 0) != 0) continue;
      EXPECT_TRUE(line == "#include <cstdint>" || line == "#include <string_view>") << name << ": " << line;
    }
  }
}

}  // namespace
}  // namespace castscope
