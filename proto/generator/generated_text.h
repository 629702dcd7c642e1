// Text helpers shared by the generated headers (wire_generator.cc,
// enum_tables.cc): indentation, C++ spellings of descriptor names.
#pragma once

#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace castscope::wiregen {

// Text with the indentation of the enclosing scopes.
class Out {
 public:
  void line(const std::string& text = "") {
    if (!text.empty()) text_ += std::string(2 * depth_, ' ') + text;
    text_ += '\n';
  }
  void open(const std::string& text) {
    line(text);
    ++depth_;
  }
  void close(const std::string& text = "};") {
    --depth_;
    line(text);
  }
  const std::string& text() const { return text_; }

 private:
  std::string text_;
  int depth_ = 0;
};

// "events_dropped_total" -> "EventsDroppedTotal"; with `lower_rest`,
// "LOWER_PRECISION_FP" -> "LowerPrecisionFp" and "32F_FAST_16BF" -> "32FFast16Bf"
// (a letter after a digit starts a word too).
inline std::string camel_case(const std::string& snake, bool lower_rest = false) {
  std::string out;
  bool upper = true;
  for (char c : snake) {
    if (c == '_') {
      upper = true;
      continue;
    }
    if (upper && c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
    if (!upper && lower_rest && c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    out += c;
    upper = lower_rest && c >= '0' && c <= '9';
  }
  return out;
}

// "castscope.v1" -> "castscope::v1".
inline std::string cpp_namespace(const std::string& package) {
  std::string out;
  for (char c : package) out += c == '.' ? std::string("::") : std::string(1, c);
  return out;
}

// An int32 as a C++ constant expression (INT32_MIN has no literal).
inline std::string int32_literal(int32_t value) {
  if (value == INT32_MIN) return "-2147483647 - 1";
  return std::to_string(value);
}

// Name of a descriptor inside the file's namespace, its containing messages
// joined by `separator`: "SourceLocation::Kind", or "SourceLocation_Kind" as
// libprotobuf names a nested enum at namespace scope.
template <typename Descriptor>
std::string scoped_name(const Descriptor* d, const std::string& separator = "::") {
  std::string out = d->name();
  for (const google::protobuf::Descriptor* parent = d->containing_type(); parent != nullptr;
       parent = parent->containing_type())
    out = parent->name() + separator + out;
  return out;
}

// "castscope/v1/events.proto" -> "events".
inline std::string file_stem(const google::protobuf::FileDescriptor* file) {
  std::string stem = file->name();
  stem = stem.substr(stem.rfind('/') + 1);
  return stem.substr(0, stem.rfind('.'));
}

// Every enum of the file, top-level first, then message by message (map
// entries skipped), in declaration order.
inline void collect_enums(const google::protobuf::Descriptor* m,
                          std::vector<const google::protobuf::EnumDescriptor*>& enums) {
  if (m->options().map_entry()) return;
  for (int i = 0; i < m->enum_type_count(); ++i) enums.push_back(m->enum_type(i));
  for (int i = 0; i < m->nested_type_count(); ++i) collect_enums(m->nested_type(i), enums);
}
inline std::vector<const google::protobuf::EnumDescriptor*> all_enums(const google::protobuf::FileDescriptor* file) {
  std::vector<const google::protobuf::EnumDescriptor*> enums;
  for (int i = 0; i < file->enum_type_count(); ++i) enums.push_back(file->enum_type(i));
  for (int i = 0; i < file->message_type_count(); ++i) collect_enums(file->message_type(i), enums);
  return enums;
}

// Every message of the file, each before its nested ones (map entries
// skipped), in declaration order.
inline void collect_messages(const google::protobuf::Descriptor* m,
                             std::vector<const google::protobuf::Descriptor*>& messages) {
  if (m->options().map_entry()) return;
  messages.push_back(m);
  for (int i = 0; i < m->nested_type_count(); ++i) collect_messages(m->nested_type(i), messages);
}
inline std::vector<const google::protobuf::Descriptor*> all_messages(const google::protobuf::FileDescriptor* file) {
  std::vector<const google::protobuf::Descriptor*> messages;
  for (int i = 0; i < file->message_type_count(); ++i) collect_messages(file->message_type(i), messages);
  return messages;
}

// `constexpr std::string_view enum_value_name(enum full name, value)` over
// `enums`, `name_call(e)` naming the function that spells a value of `e`
// ("DType_Name"); tests walk the descriptors through it.
inline void emit_enum_value_lookup(const google::protobuf::FileDescriptor* file,
                                   const std::vector<const google::protobuf::EnumDescriptor*>& enums,
                                   const std::function<std::string(const google::protobuf::EnumDescriptor*)>& name_call,
                                   const std::string& separator, Out& out) {
  out.line("// Empty when the enum or the value is not in " + file->name() + ".");
  out.open(
      "constexpr std::string_view enum_value_name([[maybe_unused]] std::string_view enum_full_name, "
      "[[maybe_unused]] int32_t value) {");
  for (const google::protobuf::EnumDescriptor* e : enums)
    out.line("if (enum_full_name == \"" + e->full_name() + "\") return " + name_call(e) + "(static_cast<" +
             scoped_name(e, separator) + ">(value));");
  out.line("return {};");
  out.close("}");
}

}  // namespace castscope::wiregen
