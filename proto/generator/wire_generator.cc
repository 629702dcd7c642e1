#include "proto/generator/wire_generator.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream.h>

#include <memory>
#include <set>
#include <vector>

#include "proto/generator/enum_tables.h"
#include "proto/generator/generated_text.h"
#include "proto/generator/spec_builders.h"

namespace castscope::wiregen {
namespace {

namespace pb = google::protobuf;

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

// The field's WireField::Type (proto/wire_field.h); empty for the types
// castscope's schema does not use (fixed and sfixed integers, sint64, float,
// groups), which Generate refuses, so the encoders need no case for them.
std::string wire_field_type(const pb::FieldDescriptor* f) {
  switch (f->type()) {
    case pb::FieldDescriptor::TYPE_UINT64: return "kUint64";
    case pb::FieldDescriptor::TYPE_INT64: return "kInt64";
    case pb::FieldDescriptor::TYPE_UINT32: return "kUint32";
    case pb::FieldDescriptor::TYPE_INT32: return "kInt32";
    case pb::FieldDescriptor::TYPE_SINT32: return "kSint32";
    case pb::FieldDescriptor::TYPE_DOUBLE: return "kDouble";
    case pb::FieldDescriptor::TYPE_BOOL: return "kBool";
    case pb::FieldDescriptor::TYPE_ENUM: return "kEnum";
    case pb::FieldDescriptor::TYPE_STRING: return "kString";
    case pb::FieldDescriptor::TYPE_BYTES: return "kBytes";
    case pb::FieldDescriptor::TYPE_MESSAGE: return "kMessage";
    default: return "";
  }
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
    out.line("static constexpr WireField k" + camel_case(f->name()) + "{" + std::to_string(f->number()) + ", \"" +
             f->name() + "\", WireField::" + wire_field_type(f) + (f->is_repeated() ? ", true" : "") + "};  // " +
             type);
  }
  out.close();
}

// Lookups by name over the whole file, for tests that walk the descriptors.
void emit_lookups(const pb::FileDescriptor* file, Out& out) {
  const std::vector<const pb::Descriptor*> messages = all_messages(file);
  const std::string stem = file_stem(file);
  out.line("// Lookups by full name, for tests that compare this header with the descriptors.");
  out.line("namespace " + stem + "_proto {");
  out.line();
  emit_enum_value_lookup(
      file, all_enums(file), [](const pb::EnumDescriptor* e) { return scoped_name(e) + "_Name"; }, "::", out);
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

std::string wire_header(const pb::FileDescriptor* file) {
  Out out;
  out.line("// Generated by protoc-gen-castscope-wire (proto/generator) from " + file->name() + ". Do not edit.");
  out.line("//");
  out.line("// Fields (number, name, type) and enums of the schema without protobuf: the");
  out.line("// agent's hand-written encoders use these (docs/events.md, \"The wire header\").");
  out.line("#pragma once");
  out.line();
  out.line("#include <cstdint>");
  out.line("#include <string_view>");
  out.line();
  out.line("#include \"proto/wire_field.h\"");
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
  return out.text();
}

// The first field whose type WireField cannot name (fixed32, float, ...), or null.
const pb::FieldDescriptor* unsupported_field(const pb::Descriptor* m) {
  for (int i = 0; i < m->field_count(); ++i)
    if (wire_field_type(m->field(i)).empty()) return m->field(i);
  for (int i = 0; i < m->nested_type_count(); ++i)
    if (const pb::FieldDescriptor* f = unsupported_field(m->nested_type(i))) return f;
  return nullptr;
}

bool write(pb::compiler::GeneratorContext* context, const std::string& name, const std::string& text) {
  std::unique_ptr<pb::io::ZeroCopyOutputStream> stream(context->Open(name));
  pb::io::CodedOutputStream coded(stream.get());
  coded.WriteString(text);
  return !coded.HadError();
}

}  // namespace

std::string generated_header_name(const std::string& proto_name, const std::string& suffix) {
  std::string stem = proto_name;
  if (stem.size() > 6 && stem.compare(stem.size() - 6, 6, ".proto") == 0) stem.resize(stem.size() - 6);
  return stem + suffix;
}

bool WireGenerator::Generate(const pb::FileDescriptor* file, const std::string& parameter,
                             pb::compiler::GeneratorContext* context, std::string* error) const {
  if (!parameter.empty() && parameter != "names" && parameter != "specs") {
    *error = "protoc-gen-castscope-wire takes no parameter, \"names\" or \"specs\" (got \"" + parameter + "\")";
    return false;
  }
  if (file->package().empty()) {
    *error = file->name() + ": a package is required (it names the C++ namespace)";
    return false;
  }
  for (int i = 0; i < file->message_type_count(); ++i) {
    if (const pb::FieldDescriptor* f = unsupported_field(file->message_type(i))) {
      *error = f->full_name() + ": type " + f->type_name() + " has no WireField::Type (proto/wire_field.h); add one";
      return false;
    }
  }
  if (parameter == "specs")
    return write(context, generated_header_name(file->name(), ".specs.h"), spec_builders_header(file));
  if (parameter == "names") return write(context, generated_header_name(file->name(), ".names.h"), short_names_header(file));
  return write(context, generated_header_name(file->name(), ".wire.h"), wire_header(file)) &&
         write(context, generated_header_name(file->name(), ".enums.h"), record_enums_header(file));
}

}  // namespace castscope::wiregen
