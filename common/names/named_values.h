// A table of names for the values of an enum, read both ways: the policy
// files' names, the cuBLASLt logger's type names. Linear scans: the tables
// are short and read at parse time, never per op. Header-only.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace castscope {

template <typename Value>
struct NamedValue {
  const char* name;
  Value value;
};

// The value named `name` in `table`, if any.
template <typename Value, size_t n>
constexpr std::optional<Value> value_named(const NamedValue<Value> (&table)[n], std::string_view name) {
  for (const NamedValue<Value>& entry : table)
    if (name == entry.name) return entry.value;
  return std::nullopt;
}

// The first name of `value` in `table`; `absent` when it has none.
template <typename Value, size_t n>
constexpr const char* name_of(const NamedValue<Value> (&table)[n], Value value, const char* absent) {
  for (const NamedValue<Value>& entry : table)
    if (value == entry.value) return entry.name;
  return absent;
}

}  // namespace castscope
