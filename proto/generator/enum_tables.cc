#include "proto/generator/enum_tables.h"

#include <algorithm>
#include <set>
#include <vector>

#include "proto/generator/generated_text.h"

namespace castscope::wiregen {
namespace {

namespace pb = google::protobuf;

char lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

bool fits_a_byte(const pb::EnumDescriptor* e) {
  for (int i = 0; i < e->value_count(); ++i)
    if (e->value(i)->number() < 0 || e->value(i)->number() > 255) return false;
  return true;
}

// The values with distinct numbers: with allow_alias the first name wins, as
// in libprotobuf's <Enum>_Name.
std::vector<const pb::EnumValueDescriptor*> distinct_values(const pb::EnumDescriptor* e) {
  std::vector<const pb::EnumValueDescriptor*> out;
  std::set<int32_t> seen;
  for (int i = 0; i < e->value_count(); ++i)
    if (seen.insert(e->value(i)->number()).second) out.push_back(e->value(i));
  return out;
}

std::string enumerator(const pb::EnumValueDescriptor* v) { return "k" + camel_case(unprefixed_name(v), true); }

void emit_record_enum(const pb::EnumDescriptor* e, Out& out) {
  const std::string name = scoped_name(e, "_");
  out.line("// " + e->full_name());
  out.open("enum class " + name + " : " + (fits_a_byte(e) ? "uint8_t" : "int32_t") + " {");
  const pb::EnumValueDescriptor* min = e->value(0);
  const pb::EnumValueDescriptor* max = e->value(0);
  for (int i = 0; i < e->value_count(); ++i) {
    const pb::EnumValueDescriptor* v = e->value(i);
    out.line(enumerator(v) + " = " + int32_literal(v->number()) + ",  // " + v->name());
    if (v->number() < min->number()) min = v;
    if (v->number() > max->number()) max = v;
  }
  out.close();
  out.line("inline constexpr " + name + " " + name + "_MIN = " + name + "::" + enumerator(min) + ";");
  out.line("inline constexpr " + name + " " + name + "_MAX = " + name + "::" + enumerator(max) + ";");
  out.open("constexpr std::string_view proto_name(" + name + " value) {");
  out.open("switch (value) {");
  for (const pb::EnumValueDescriptor* v : distinct_values(e))
    out.line("case " + name + "::" + enumerator(v) + ": return \"" + v->name() + "\";");
  out.close("}");
  out.line("return {};");
  out.close("}");
}

void emit_short_names(const pb::EnumDescriptor* e, Out& out) {
  out.line("// " + e->full_name());
  out.open("constexpr std::string_view short_name(" + scoped_name(e, "_") + " value) {");
  // By number: proto3 enums are open, a message may carry any int32.
  out.open("switch (static_cast<int32_t>(value)) {");
  for (const pb::EnumValueDescriptor* v : distinct_values(e)) {
    std::string text = unprefixed_name(v);
    for (char& c : text) c = lower(c);
    out.line("case " + int32_literal(v->number()) + ": return \"" + text + "\";");
  }
  out.close("}");
  out.line("return {};");
  out.close("}");
}

// Per message with singular enum fields, `for_each_enum_field(message, f)`:
// f(field name, value) for each, in the .proto's order. Batch validation
// bounds them all, so an enum field added to the .proto is checked unasked.
void emit_enum_field_visitors(const pb::FileDescriptor* file, Out& out) {
  const std::string ns = "::" + cpp_namespace(file->package()) + "::";
  for (const pb::Descriptor* m : all_messages(file)) {
    std::vector<const pb::FieldDescriptor*> fields;
    for (int i = 0; i < m->field_count(); ++i)
      if (m->field(i)->enum_type() != nullptr && !m->field(i)->is_repeated()) fields.push_back(m->field(i));
    if (fields.empty()) continue;
    out.line("// The singular enum fields of " + m->full_name() + ", as (name, value).");
    out.line("template <typename Visit>");
    out.open("void for_each_enum_field(const " + ns + scoped_name(m, "_") + "& message, Visit&& visit) {");
    for (const pb::FieldDescriptor* f : fields)
      out.line("visit(std::string_view(\"" + f->name() + "\"), static_cast<int32_t>(message." + f->name() + "()));");
    out.close("}");
    out.line();
  }
  // Per oneof of messages, `visit_<oneof>(message, f)`: f(the member set),
  // false when none is (or one this header predates). Each stage that works
  // on every event kind alike (its seq, its time) asks the member itself.
  for (const pb::Descriptor* m : all_messages(file)) {
    for (int o = 0; o < m->oneof_decl_count(); ++o) {
      const pb::OneofDescriptor* oneof = m->oneof_decl(o);
      if (oneof->is_synthetic()) continue;  // a proto3 optional field
      bool all_messages_in_it = true;
      for (int i = 0; i < oneof->field_count(); ++i)
        if (oneof->field(i)->message_type() == nullptr) all_messages_in_it = false;
      if (!all_messages_in_it) continue;
      const std::string type = ns + scoped_name(m, "::");
      int end = 0;
      for (int i = 0; i < oneof->field_count(); ++i) end = std::max(end, oneof->field(i)->number() + 1);
      out.line("// One past the highest field number in " + m->full_name() + "'s oneof " + oneof->name() +
               ": a table by " + oneof->name() + "_case() has this many rows.");
      out.line("inline constexpr int k" + camel_case(scoped_name(m, "_")) + camel_case(oneof->name()) +
               "CaseEnd = " + std::to_string(end) + ";");
      out.line("// The member of " + m->full_name() + "'s oneof " + oneof->name() + " that is set.");
      out.line("template <typename Visit>");
      out.open("bool visit_" + oneof->name() + "(const " + type + "& message, Visit&& visit) {");
      out.open("switch (message." + oneof->name() + "_case()) {");
      for (int i = 0; i < oneof->field_count(); ++i) {
        const pb::FieldDescriptor* f = oneof->field(i);
        out.line("case " + type + "::k" + camel_case(f->name()) + ": visit(message." + f->name() + "()); return true;");
      }
      out.line("default: return false;");
      out.close("}");
      out.close("}");
      out.line();
    }
  }
}

// namespace <file>_proto { enum_value_name(enum full name, value) }, spelled
// by `function` (proto_name, short_name).
void emit_test_lookup(const pb::FileDescriptor* file, const std::vector<const pb::EnumDescriptor*>& enums,
                      const std::string& function, Out& out) {
  out.line("// Lookups by full name, for tests that compare this header with the descriptors.");
  out.line("namespace " + file_stem(file) + "_proto {");
  out.line();
  emit_enum_value_lookup(file, enums, [&](const pb::EnumDescriptor*) { return function; }, "_", out);
  out.line();
  out.line("}  // namespace " + file_stem(file) + "_proto");
}

// A header of every enum of `file` in namespace <package>::<ns>, each written
// by `emit`, then the test lookup over `function`.
std::string enums_header(const pb::FileDescriptor* file, const std::string& ns, const std::vector<std::string>& about,
                         const std::vector<std::string>& includes,
                         void (*emit)(const pb::EnumDescriptor*, Out&), const std::string& function,
                         void (*emit_more)(const pb::FileDescriptor*, Out&) = nullptr) {
  Out out;
  out.line("// Generated by protoc-gen-castscope-wire (proto/generator) from " + file->name() + ". Do not edit.");
  out.line("//");
  for (const std::string& line : about) out.line("// " + line);
  out.line("#pragma once");
  out.line();
  for (const std::string& include : includes) out.line(include.empty() ? "" : "#include " + include);
  out.line();
  const std::string full_ns = cpp_namespace(file->package()) + "::" + ns;
  out.line("namespace " + full_ns + " {");
  out.line();
  const auto enums = all_enums(file);
  for (const pb::EnumDescriptor* e : enums) {
    emit(e, out);
    out.line();
  }
  if (emit_more != nullptr) emit_more(file, out);
  emit_test_lookup(file, enums, function, out);
  out.line();
  out.line("}  // namespace " + full_ns);
  return out.text();
}

}  // namespace

std::string unprefixed_name(const pb::EnumValueDescriptor* value) {
  const std::string& name = value->name();
  size_t at = 0;
  for (char c : value->type()->name()) {
    while (at < name.size() && name[at] == '_') ++at;
    if (at == name.size() || lower(name[at]) != lower(c)) return name;
    ++at;
  }
  if (at + 1 >= name.size() || name[at] != '_') return name;
  return name.substr(at + 1);
}

std::string record_enums_header(const pb::FileDescriptor* file) {
  return enums_header(file, "enums",
                      {"The schema's enums as the agent's fixed-size records hold them: scoped, a",
                       "byte wide, with the .proto's numbers, so the hand-written encoder writes",
                       "a record's value as it is. No protobuf include (docs/events.md, \"The",
                       "generated enums\")."},
                      {"<cstdint>", "<string_view>"}, emit_record_enum, "proto_name");
}

std::string short_names_header(const pb::FileDescriptor* file) {
  std::string pb_header = file->name();
  pb_header = "\"" + pb_header.substr(0, pb_header.rfind('.')) + ".pb.h\"";
  return enums_header(file, "names",
                      {"Short names of the schema's enum values, the spelling of the collector's",
                       "reports, viewer and trace export: the value name without the enum's",
                       "prefix, lower case (DTYPE_BFLOAT16 -> \"bfloat16\"). Empty for a value the",
                       "schema does not define; each caller says what such a value reads as."},
                      {"<cstdint>", "<string_view>", "", pb_header}, emit_short_names, "short_name",
                      emit_enum_field_visitors);
}

}  // namespace castscope::wiregen
