#include "proto/generator/wire_generator.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream.h>

#include <memory>
#include <set>
#include <vector>

namespace castscope::wiregen {
namespace {

namespace pb = google::protobuf;

// "events_dropped_total" -> "EventsDroppedTotal".
std::string camel_case(const std::string& snake) {
  std::string out;
  bool upper = true;
  for (char c : snake) {
    if (c == '_') {
      upper = true;
      continue;
    }
    out += upper && c >= 'a' && c <= 'z' ? static_cast<char>(c - 'a' + 'A') : c;
    upper = false;
  }
  return out;
}

// "castscope.v1" -> "castscope::v1".
std::string cpp_namespace(const std::string& package) {
  std::string out;
  for (char c : package) out += c == '.' ? std::string("::") : std::string(1, c);
  return out;
}

// An int32 as a C++ constant expression (INT32_MIN has no literal).
std::string int32_literal(int32_t value) {
  if (value == INT32_MIN) return "-2147483647 - 1";
  return std::to_string(value);
}

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

// `member` is "static " inside a message struct, "inline " at namespace scope.
void emit_enum(const pb::EnumDescriptor* e, const std::string& member, Out& out) {
  const std::string name = e->name();
  out.line("// " + e->full_name());
  out.open("enum " + name + " : int32_t {");
  const pb::EnumValueDescriptor* min = e->value(0);
  const pb::EnumValueDescriptor* max = e->value(0);
  for (int i = 0; i < e->value_count(); ++i) {
    const pb::EnumValueDescriptor* v = e->value(i);
    out.line(v->name() + " = " + int32_literal(v->number()) + ",");
    if (v->number() < min->number()) min = v;
    if (v->number() > max->number()) max = v;
  }
  out.close();
  out.line(member + "constexpr " + name + " " + name + "_MIN = " + min->name() + ";");
  out.line(member + "constexpr " + name + " " + name + "_MAX = " + max->name() + ";");
  // Aliases (allow_alias) share a number: the first name wins, as in libprotobuf.
  out.line("// The value's name as the .proto spells it; empty for a value it does not define.");
  const std::string function_member = member == "static " ? member : std::string();
  out.open(function_member + "constexpr std::string_view " + name + "_Name(" + name + " value) {");
  out.open("switch (value) {");
  std::set<int32_t> seen;
  for (int i = 0; i < e->value_count(); ++i) {
    const pb::EnumValueDescriptor* v = e->value(i);
    if (seen.insert(v->number()).second) out.line("case " + v->name() + ": return \"" + v->name() + "\";");
  }
  out.close("}");
  out.line("return {};");
  out.close("}");
}

void emit_message(const pb::Descriptor* m, Out& out) {
  out.line("// " + m->full_name());
  out.open("struct " + m->name() + " {");
  for (int i = 0; i < m->enum_type_count(); ++i) {
    emit_enum(m->enum_type(i), "static ", out);
    out.line();
  }
  for (int i = 0; i < m->nested_type_count(); ++i) {
    if (m->nested_type(i)->options().map_entry()) continue;
    emit_message(m->nested_type(i), out);
    out.line();
  }
  for (int i = 0; i < m->field_count(); ++i) {
    const pb::FieldDescriptor* f = m->field(i);
    std::string type = f->type_name();
    if (f->message_type() != nullptr) type = f->message_type()->full_name();
    if (f->enum_type() != nullptr) type = f->enum_type()->full_name();
    if (f->is_repeated()) type = "repeated " + type;
    out.line("static constexpr uint32_t k" + camel_case(f->name()) + " = " + std::to_string(f->number()) + ";  // " +
             type + " " + f->name());
  }
  out.close();
}

// C++ scope of a descriptor inside the file's namespace: "SourceLocation::Kind".
template <typename Descriptor>
std::string scoped_name(const Descriptor* d) {
  std::string out = d->name();
  for (const pb::Descriptor* parent = d->containing_type(); parent != nullptr; parent = parent->containing_type())
    out = parent->name() + "::" + out;
  return out;
}

void collect(const pb::Descriptor* m, std::vector<const pb::Descriptor*>& messages,
             std::vector<const pb::EnumDescriptor*>& enums) {
  if (m->options().map_entry()) return;
  messages.push_back(m);
  for (int i = 0; i < m->enum_type_count(); ++i) enums.push_back(m->enum_type(i));
  for (int i = 0; i < m->nested_type_count(); ++i) collect(m->nested_type(i), messages, enums);
}

// Lookups by name over the whole file, for tests that walk the descriptors.
void emit_lookups(const pb::FileDescriptor* file, Out& out) {
  std::vector<const pb::Descriptor*> messages;
  std::vector<const pb::EnumDescriptor*> enums;
  for (int i = 0; i < file->enum_type_count(); ++i) enums.push_back(file->enum_type(i));
  for (int i = 0; i < file->message_type_count(); ++i) collect(file->message_type(i), messages, enums);

  std::string stem = file->name();
  stem = stem.substr(stem.rfind('/') + 1);
  stem = stem.substr(0, stem.rfind('.'));
  out.line("// Lookups by full name, for tests that compare this header with the descriptors.");
  out.line("namespace " + stem + "_proto {");
  out.line();
  out.line("// Empty when the enum or the value is not in " + file->name() + ".");
  out.open(
      "constexpr std::string_view enum_value_name([[maybe_unused]] std::string_view enum_full_name, "
      "[[maybe_unused]] int32_t value) {");
  for (const pb::EnumDescriptor* e : enums) {
    const std::string scope = scoped_name(e);
    out.line("if (enum_full_name == \"" + e->full_name() + "\") return " + scope + "_Name(static_cast<" + scope +
             ">(value));");
  }
  out.line("return {};");
  out.close("}");
  out.line();
  out.line("// 0 when the message or the field is not in " + file->name() + ".");
  out.open(
      "constexpr uint32_t field_number([[maybe_unused]] std::string_view message_full_name, "
      "[[maybe_unused]] std::string_view field_name) {");
  for (const pb::Descriptor* m : messages) {
    if (m->field_count() == 0) continue;
    out.open("if (message_full_name == \"" + m->full_name() + "\") {");
    for (int i = 0; i < m->field_count(); ++i) {
      const pb::FieldDescriptor* f = m->field(i);
      out.line("if (field_name == \"" + f->name() + "\") return " + scoped_name(m) + "::k" + camel_case(f->name()) +
               ";");
    }
    out.close("}");
  }
  out.line("return 0;");
  out.close("}");
  out.line();
  out.line("}  // namespace " + stem + "_proto");
}

}  // namespace

std::string wire_header_name(const std::string& proto_name) {
  std::string stem = proto_name;
  if (stem.size() > 6 && stem.compare(stem.size() - 6, 6, ".proto") == 0) stem.resize(stem.size() - 6);
  return stem + ".wire.h";
}

bool WireGenerator::Generate(const pb::FileDescriptor* file, const std::string& parameter,
                             pb::compiler::GeneratorContext* context, std::string* error) const {
  if (!parameter.empty()) {
    *error = "protoc-gen-castscope-wire takes no parameter (got \"" + parameter + "\")";
    return false;
  }
  if (file->package().empty()) {
    *error = file->name() + ": a package is required (it names the C++ namespace)";
    return false;
  }
  Out out;
  out.line("// Generated by protoc-gen-castscope-wire (proto/generator) from " + file->name() + ". Do not edit.");
  out.line("//");
  out.line("// Field numbers and enums of the schema without protobuf: the agent's");
  out.line("// hand-written wire encoder uses these (docs/events.md, \"The wire header\").");
  out.line("#pragma once");
  out.line();
  out.line("#include <cstdint>");
  out.line("#include <string_view>");
  out.line();
  const std::string ns = cpp_namespace(file->package()) + "::wire";
  out.line("namespace " + ns + " {");
  out.line();
  for (int i = 0; i < file->enum_type_count(); ++i) {
    emit_enum(file->enum_type(i), "inline ", out);
    out.line();
  }
  for (int i = 0; i < file->message_type_count(); ++i) {
    emit_message(file->message_type(i), out);
    out.line();
  }
  emit_lookups(file, out);
  out.line();
  out.line("}  // namespace " + ns);

  std::unique_ptr<pb::io::ZeroCopyOutputStream> stream(context->Open(wire_header_name(file->name())));
  pb::io::CodedOutputStream coded(stream.get());
  coded.WriteString(out.text());
  return !coded.HadError();
}

}  // namespace castscope::wiregen
