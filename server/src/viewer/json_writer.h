// JSON text written straight into a string, for the answers that hold
// thousands of objects (timeline buckets and events, live casts): building
// them as nlohmann::json trees spent most of a request in malloc and free.
// Strings are escaped as nlohmann's dump with error_handler_t::replace does:
// quotes, backslashes and control characters escaped, bytes that are not
// valid UTF-8 replaced by U+FFFD, everything else (non-ASCII included) as is.
#pragma once

#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>

namespace castscope::collector::viewer {

class JsonWriter {
 public:
  const std::string& text() const { return out_; }
  std::string take() { return std::move(out_); }
  bool empty() const { return out_.empty(); }

  JsonWriter& begin_object() { return open('{'); }
  JsonWriter& end_object() { return close('}'); }
  JsonWriter& begin_array() { return open('['); }
  JsonWriter& end_array() { return close(']'); }

  // An object's key; the next call writes its value.
  JsonWriter& key(std::string_view name) {
    separate();
    escaped(name);
    out_ += ':';
    need_comma_ = false;
    return *this;
  }

  JsonWriter& value(int64_t v) { return number(v); }
  JsonWriter& value(uint64_t v) { return number(v); }
  JsonWriter& value(int32_t v) { return number(static_cast<int64_t>(v)); }
  JsonWriter& value(uint32_t v) { return number(static_cast<uint64_t>(v)); }
  JsonWriter& value(bool v) { return raw(v ? "true" : "false"); }
  JsonWriter& value(std::string_view v) {
    separate();
    escaped(v);
    return *this;
  }
  JsonWriter& value(const std::string& v) { return value(std::string_view(v)); }
  JsonWriter& value(const char* v) { return value(std::string_view(v)); }
  JsonWriter& null() { return raw("null"); }

  // Already serialized JSON (one value).
  JsonWriter& raw(std::string_view json) {
    separate();
    out_ += json;
    return *this;
  }

 private:
  JsonWriter& open(char c) {
    separate();
    out_ += c;
    need_comma_ = false;
    return *this;
  }
  JsonWriter& close(char c) {
    out_ += c;
    need_comma_ = true;
    return *this;
  }
  void separate() {
    if (need_comma_) out_ += ',';
    need_comma_ = true;
  }
  template <typename T>
  JsonWriter& number(T v) {
    separate();
    char buffer[24];
    const auto end = std::to_chars(buffer, buffer + sizeof buffer, v).ptr;
    out_.append(buffer, end);
    return *this;
  }
  void escaped(std::string_view text);

  std::string out_;
  bool need_comma_ = false;
};

}  // namespace castscope::collector::viewer
