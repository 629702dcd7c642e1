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
using ExpectedName = std::function<std::string(const gpb::EnumValueDescriptor*)>;

// The name libprotobuf gives a number (the first of aliases).
std::string proto_name(const gpb::EnumValueDescriptor* v) { return v->type()->FindValueByNumber(v->number())->name(); }

// The short name as the collector's hand-written maps spelled it before the
// table was generated: the value name without the prefix all values of its
// enum share ("DTYPE_"), lower case.
std::string old_short_name(const gpb::EnumValueDescriptor* v) {
  const gpb::EnumDescriptor* e = v->type();
  std::string prefix = e->value(0)->name();
  for (int i = 1; i < e->value_count(); ++i) {
    const std::string& name = e->value(i)->name();
    prefix.resize(static_cast<size_t>(std::mismatch(prefix.begin(), prefix.end(), name.begin(), name.end()).first -
                                      prefix.begin()));
  }
  prefix.resize(prefix.rfind('_') + 1);
  std::string out = proto_name(v).substr(prefix.size());
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

void check_enum(const gpb::EnumDescriptor* e, const EnumLookup& name, const ExpectedName& expected) {
  int32_t max = e->value(0)->number();
  for (int i = 0; i < e->value_count(); ++i) {
    const gpb::EnumValueDescriptor* v = e->value(i);
    EXPECT_EQ(name(e->full_name(), v->number()), expected(v)) << v->full_name();
    max = std::max(max, v->number());
  }
  EXPECT_EQ(name(e->full_name(), max + 1), "") << e->full_name() << ": a value the schema does not define has no name";
}

void check_message(const gpb::Descriptor* m, const EnumLookup& enum_name, const FieldLookup& field_number,
                   const ExpectedName& expected) {
  for (int i = 0; i < m->field_count(); ++i)
    EXPECT_EQ(field_number(m->full_name(), m->field(i)->name()), static_cast<uint32_t>(m->field(i)->number()))
        << m->field(i)->full_name();
  for (int i = 0; i < m->enum_type_count(); ++i) check_enum(m->enum_type(i), enum_name, expected);
  for (int i = 0; i < m->nested_type_count(); ++i) check_message(m->nested_type(i), enum_name, field_number, expected);
}

// Every enum (its names by `enum_name`, against `expected`) and every field
// number of `file`.
void check_file(const gpb::FileDescriptor* file, const EnumLookup& enum_name, const FieldLookup& field_number,
                const ExpectedName& expected = proto_name) {
  for (int i = 0; i < file->enum_type_count(); ++i) check_enum(file->enum_type(i), enum_name, expected);
  for (int i = 0; i < file->message_type_count(); ++i)
    check_message(file->message_type(i), enum_name, field_number, expected);
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
  static_assert(v1::enums::DType_MAX == DType::kFloat8E8M0Fnu && v1::enums::DType_MIN == DType::kUnspecified);
  EXPECT_EQ(v1::enums::proto_name(DType::kUint8), "DTYPE_UINT8");
  EXPECT_EQ(v1::enums::proto_name(static_cast<DType>(200)), "");
}

// The collector's short names, every value of every enum, and none for an
// undefined value (each caller chooses what that reads as).
TEST(ShortNames, AreTheValueNamesWithoutTheEnumsPrefixInLowerCase) {
  check_file(v1::Event::descriptor()->file(), v1::names::events_proto::enum_value_name,
             wire::events_proto::field_number, old_short_name);
  check_file(v1::Batch::descriptor()->file(), v1::names::transport_proto::enum_value_name,
             wire::transport_proto::field_number, old_short_name);
  static_assert(v1::names::short_name(v1::DTYPE_BFLOAT16) == "bfloat16");
  static_assert(v1::names::short_name(v1::CAST_POLICY_LOWER_PRECISION_FP) == "lower_precision_fp");
  static_assert(v1::names::short_name(v1::EXECUTION_MODE_EAGER) == "eager");
  static_assert(v1::names::short_name(v1::GEMM_COMPUTE_32F_FAST_TF32) == "32f_fast_tf32");
  static_assert(v1::names::short_name(v1::CacheSample::TRIGGER_MISSES) == "misses");
  EXPECT_EQ(v1::names::short_name(static_cast<v1::DType>(-1)), "");
  EXPECT_EQ(v1::names::short_name(static_cast<v1::DType>(300)), "");
}

// The agent includes these headers beside libtorch's own protobuf: they must
// stand alone (proto/wire_field.h, the field type, includes the same two).
TEST(WireHeader, IncludesNoProtobufHeader) {
  for (const char* name : {"castscope/v1/events.wire.h", "castscope/v1/transport.wire.h", "castscope/v1/events.enums.h",
                           "castscope/v1/transport.enums.h"}) {
    std::ifstream in(std::string(CASTSCOPE_WIRE_DIR) + "/" + name);
    ASSERT_TRUE(in) << name;
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("#include", 0) != 0) continue;
      EXPECT_TRUE(line == "#include <cstdint>" || line == "#include <string_view>" ||
                  line == "#include \"proto/wire_field.h\"")
          << name << ": " << line;
    }
  }
}

}  // namespace
}  // namespace castscope
