// The generated headers (proto/generator) against libprotobuf's view of the
// same .proto files: every field number, every enum value's name and number
// in the wire header and in the agent's record enums, no protobuf include in
// either (the agent compiles them beside libtorch), and the collector's short
// names.
#include <gtest/gtest.h>

#include <google/protobuf/descriptor.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>

#include "castscope/v1/events.enums.h"
#include "castscope/v1/events.names.h"
#include "castscope/v1/events.pb.h"
#include "castscope/v1/events.wire.h"
#include "castscope/v1/transport.enums.h"
#include "castscope/v1/transport.names.h"
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

// The record enums: each enumerator has the number of the .proto value whose
// name proto_name gives, and none is missing or extra.
TEST(RecordEnums, EveryValueMatchesTheDescriptors) {
  check_file(v1::Event::descriptor()->file(), v1::enums::events_proto::enum_value_name,
             wire::events_proto::field_number);
  check_file(v1::Batch::descriptor()->file(), v1::enums::transport_proto::enum_value_name,
             wire::transport_proto::field_number);
}

TEST(RecordEnums, SpelledFromTheValueNamesAndAByteWide) {
  using v1::enums::DType;
  static_assert(static_cast<int>(DType::kBfloat16) == v1::DTYPE_BFLOAT16);
  static_assert(static_cast<int>(v1::enums::GemmCompute::k32FFastTf32) == v1::GEMM_COMPUTE_32F_FAST_TF32);
  static_assert(static_cast<int>(v1::enums::CastPolicy::kFp32SetOptDtype) == v1::CAST_POLICY_FP32_SET_OPT_DTYPE);
  static_assert(static_cast<int>(v1::enums::SourceLocation_Kind::kTorchscript) == v1::SourceLocation::KIND_TORCHSCRIPT);
  static_assert(sizeof(DType) == 1 && sizeof(v1::enums::CacheSample_Trigger) == 1);
  static_assert(v1::enums::DType_MAX == DType::kOther && v1::enums::DType_MIN == DType::kUnspecified);
  EXPECT_EQ(v1::enums::proto_name(DType::kUint8), "DTYPE_UINT8");
  EXPECT_EQ(v1::enums::proto_name(static_cast<DType>(200)), "");
}

// Each short name against the rule the collector's hand-written maps used
// before the table was generated: the value name without `prefix`, lower
// case. Undefined values have none (the callers choose what they read).
template <typename Enum>
void expect_short_names(const gpb::EnumDescriptor* e, std::string_view prefix) {
  int32_t max = 0;
  for (int i = 0; i < e->value_count(); ++i) {
    const std::string& name = e->value(i)->name();
    ASSERT_TRUE(name.starts_with(prefix)) << name;
    std::string expected = name.substr(prefix.size());
    std::transform(expected.begin(), expected.end(), expected.begin(),
                   [](char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); });
    EXPECT_EQ(v1::names::short_name(static_cast<Enum>(e->value(i)->number())), expected) << name;
    max = std::max(max, e->value(i)->number());
  }
  EXPECT_EQ(v1::names::short_name(static_cast<Enum>(max + 1)), "") << e->full_name();
  EXPECT_EQ(v1::names::short_name(static_cast<Enum>(-1)), "") << e->full_name();
}

TEST(ShortNames, AreTheValueNamesWithoutTheEnumsPrefixInLowerCase) {
  expect_short_names<v1::SchemaVersion>(v1::SchemaVersion_descriptor(), "SCHEMA_VERSION_");
  expect_short_names<v1::CastPolicy>(v1::CastPolicy_descriptor(), "CAST_POLICY_");
  expect_short_names<v1::DType>(v1::DType_descriptor(), "DTYPE_");
  expect_short_names<v1::DeviceType>(v1::DeviceType_descriptor(), "DEVICE_TYPE_");
  expect_short_names<v1::Role>(v1::Role_descriptor(), "ROLE_");
  expect_short_names<v1::CacheOutcome>(v1::CacheOutcome_descriptor(), "CACHE_OUTCOME_");
  expect_short_names<v1::ExecutionMode>(v1::ExecutionMode_descriptor(), "EXECUTION_MODE_");
  expect_short_names<v1::Phase>(v1::Phase_descriptor(), "PHASE_");
  expect_short_names<v1::SourceLocation::Kind>(v1::SourceLocation::Kind_descriptor(), "KIND_");
  expect_short_names<v1::CastOutcome>(v1::CastOutcome_descriptor(), "CAST_OUTCOME_");
  expect_short_names<v1::OpOutcome>(v1::OpOutcome_descriptor(), "OP_OUTCOME_");
  expect_short_names<v1::ProbeReason>(v1::ProbeReason_descriptor(), "PROBE_REASON_");
  expect_short_names<v1::GemmCompute>(v1::GemmCompute_descriptor(), "GEMM_COMPUTE_");
  expect_short_names<v1::GpuActivity>(v1::GpuActivity_descriptor(), "GPU_ACTIVITY_");
  expect_short_names<v1::LaunchedBy>(v1::LaunchedBy_descriptor(), "LAUNCHED_BY_");
  expect_short_names<v1::CacheSample::Trigger>(v1::CacheSample::Trigger_descriptor(), "TRIGGER_");
  expect_short_names<v1::ProtocolVersion>(v1::ProtocolVersion_descriptor(), "PROTOCOL_VERSION_");
  expect_short_names<v1::EventFilter::Kind>(v1::EventFilter::Kind_descriptor(), "KIND_");
  static_assert(v1::names::short_name(v1::DTYPE_BFLOAT16) == "bfloat16");
  static_assert(v1::names::short_name(v1::CAST_POLICY_LOWER_PRECISION_FP) == "lower_precision_fp");
  static_assert(v1::names::short_name(v1::EXECUTION_MODE_EAGER) == "eager");
  static_assert(v1::names::short_name(v1::GEMM_COMPUTE_32F_FAST_TF32) == "32f_fast_tf32");
}

// Every enum of both files is in the table above (a new one must be added).
TEST(ShortNames, CoverEveryEnum) {
  size_t enums = 0;
  std::function<void(const gpb::Descriptor*)> count = [&](const gpb::Descriptor* m) {
    enums += static_cast<size_t>(m->enum_type_count());
    for (int i = 0; i < m->nested_type_count(); ++i) count(m->nested_type(i));
  };
  for (const gpb::FileDescriptor* file : {v1::Event::descriptor()->file(), v1::Batch::descriptor()->file()}) {
    enums += static_cast<size_t>(file->enum_type_count());
    for (int i = 0; i < file->message_type_count(); ++i) count(file->message_type(i));
  }
  EXPECT_EQ(enums, 18u);
}

// The agent includes these headers beside libtorch's own protobuf: they must
// stand alone.
TEST(WireHeader, IncludesNoProtobufHeader) {
  for (const char* name : {"castscope/v1/events.wire.h", "castscope/v1/transport.wire.h", "castscope/v1/events.enums.h",
                           "castscope/v1/transport.enums.h"}) {
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
