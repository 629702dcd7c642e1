// A stand-in for libcupti, for tests on machines with no GPU: it exports the
// CUPTI entry points castscope calls, with CUPTI's own types, and makes
// activity records the way CUPTI does, from a script.
//
// The script is a JSON file named by CASTSCOPE_STANDIN_CUPTI (read again at
// every cuptiActivityRegisterCallbacks and subscribe):
//   held_by                   non-empty: subscribing fails with
//                             CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED, naming it
//   enable_error              non-zero: cuptiActivityEnable returns it
//   clock_offset_ns           CUPTI's clock = CLOCK_MONOTONIC + this
//   cast, op                  what "runs" when an external id is popped: the
//                             launches of a cast (id with bit 63) or of an op,
//                             each {name, duration_ns, activity: kernel|memcpy|memset, bytes}
//   unscoped                  launches with no external id, made at each op pop
//   dropped_records           reported once by cuptiActivityGetNumDroppedRecords
//   correlation_in_next_buffer  external correlation records come in a later
//                             buffer than their kernels, as CUPTI may do
//   foreign_buffer            each flush also hands back a buffer the client
//                             never gave (another client's, around a hand-over)
//   a launch's "incomplete": true  its record has start = end = 0, as CUPTI
//                             leaves an activity it could not time
//
// What CUPTI does that this mimics: a launch while an external id is on top
// of a kind's stack yields an EXTERNAL_CORRELATION record (kind, id,
// correlationId), an API record and the kernel's record with the same
// correlationId; records go into buffers the client supplies, handed back
// through its completion callback at a flush; no buffer means dropped records.
#include <cupti.h>
#include <time.h>

#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace {

using json = nlohmann::json;

struct Launch {
  std::string name;
  uint64_t duration_ns = 1000;
  CUpti_ActivityKind activity = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  uint64_t bytes = 0;
  bool incomplete = false;
};

struct Script {
  std::string held_by;
  int enable_error = 0;
  int64_t clock_offset_ns = 0;
  std::vector<Launch> cast, op, unscoped;
  uint64_t dropped_records = 0;
  bool correlation_in_next_buffer = false;
  bool foreign_buffer = false;
};

// One record as CUPTI lays it out, kept as bytes until a buffer takes it.
struct PendingRecord {
  std::vector<uint8_t> bytes;
  bool correlation = false;
};

std::mutex g_mutex;
Script g_script;
CUpti_BuffersCallbackRequestFunc g_request = nullptr;
CUpti_BuffersCallbackCompleteFunc g_complete = nullptr;
std::deque<PendingRecord> g_pending;
std::deque<std::string> g_names;  // kernel records point at these
thread_local std::vector<std::pair<CUpti_ExternalCorrelationKind, uint64_t>> t_stack;
uint32_t g_next_correlation = 1;
uint64_t g_dropped = 0;
bool g_subscribed = false;
bool g_enabled[64] = {};

uint64_t cupti_now() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec) +
         static_cast<uint64_t>(g_script.clock_offset_ns);
}

std::vector<Launch> read_launches(const json& list) {
  std::vector<Launch> out;
  for (const json& item : list) {
    Launch l;
    l.name = item.value("name", "standin_kernel");
    l.duration_ns = item.value("duration_ns", uint64_t{1000});
    l.bytes = item.value("bytes", uint64_t{0});
    l.incomplete = item.value("incomplete", false);
    const std::string activity = item.value("activity", "kernel");
    l.activity = activity == "memcpy"   ? CUPTI_ACTIVITY_KIND_MEMCPY
                 : activity == "memset" ? CUPTI_ACTIVITY_KIND_MEMSET
                                        : CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
    out.push_back(l);
  }
  return out;
}

void load_script() {
  g_script = Script{};
  const char* path = std::getenv("CASTSCOPE_STANDIN_CUPTI");
  if (path == nullptr) return;
  std::ifstream in(path);
  const json doc = json::parse(in, nullptr, false);
  if (!doc.is_object()) return;
  g_script.held_by = doc.value("held_by", "");
  g_script.enable_error = doc.value("enable_error", 0);
  g_script.clock_offset_ns = doc.value("clock_offset_ns", int64_t{0});
  g_script.cast = read_launches(doc.value("cast", json::array()));
  g_script.op = read_launches(doc.value("op", json::array()));
  g_script.unscoped = read_launches(doc.value("unscoped", json::array()));
  g_script.dropped_records = doc.value("dropped_records", uint64_t{0});
  g_script.correlation_in_next_buffer = doc.value("correlation_in_next_buffer", false);
  g_script.foreign_buffer = doc.value("foreign_buffer", false);
}

template <typename T>
void append(const T& record, bool correlation = false) {
  PendingRecord pending;
  pending.bytes.resize((sizeof(T) + 7) & ~size_t{7});
  std::memcpy(pending.bytes.data(), &record, sizeof(T));
  pending.correlation = correlation;
  g_pending.push_back(std::move(pending));
}

// A memcpy or memset record of `l` on stream 7 (the two records share these fields).
template <typename Record>
Record transfer(CUpti_ActivityKind kind, const Launch& l, uint64_t start, uint32_t correlation) {
  Record m{};
  m.kind = kind;
  m.bytes = l.bytes;
  m.start = start;
  m.end = start + l.duration_ns;
  m.streamId = 7;
  m.correlationId = correlation;
  return m;
}

// Called with g_mutex held: one launch, correlated with `external` when set.
void launch(const Launch& l, const std::pair<CUpti_ExternalCorrelationKind, uint64_t>* external) {
  const uint32_t correlation = g_next_correlation++;
  if (external != nullptr && g_enabled[CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION]) {
    CUpti_ActivityExternalCorrelation c{};
    c.kind = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
    c.externalKind = external->first;
    c.externalId = external->second;
    c.correlationId = correlation;
    append(c, true);
  }
  const uint64_t start = cupti_now();
  CUpti_ActivityAPI api{};
  api.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
  api.start = start;
  api.end = start + 100;
  api.correlationId = correlation;
  if (g_enabled[CUPTI_ACTIVITY_KIND_RUNTIME]) append(api);
  if (!g_enabled[l.activity]) return;
  if (l.activity == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
    CUpti_ActivityKernel10 k{};
    k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
    k.start = l.incomplete ? 0 : start;
    k.end = l.incomplete ? 0 : start + l.duration_ns;
    k.streamId = 7;
    k.correlationId = correlation;
    g_names.push_back(l.name);
    k.name = g_names.back().c_str();
    append(k);
  } else if (l.activity == CUPTI_ACTIVITY_KIND_MEMCPY) {
    CUpti_ActivityMemcpy6 m = transfer<CUpti_ActivityMemcpy6>(CUPTI_ACTIVITY_KIND_MEMCPY, l, start, correlation);
    m.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_DTOD;
    append(m);
  } else {
    append(transfer<CUpti_ActivityMemset4>(CUPTI_ACTIVITY_KIND_MEMSET, l, start, correlation));
  }
}

size_t record_size(const CUpti_Activity* record) {
  switch (record->kind) {
    case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: return (sizeof(CUpti_ActivityExternalCorrelation) + 7) & ~size_t{7};
    case CUPTI_ACTIVITY_KIND_RUNTIME: return (sizeof(CUpti_ActivityAPI) + 7) & ~size_t{7};
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: return (sizeof(CUpti_ActivityKernel10) + 7) & ~size_t{7};
    case CUPTI_ACTIVITY_KIND_MEMCPY: return (sizeof(CUpti_ActivityMemcpy6) + 7) & ~size_t{7};
    case CUPTI_ACTIVITY_KIND_MEMSET: return (sizeof(CUpti_ActivityMemset4) + 7) & ~size_t{7};
    default: return 0;
  }
}

// Hands `records` to the client in as many buffers as it gives; what finds
// no buffer is dropped and counted. All buffers are taken before any is
// handed back, as when CUPTI fills them faster than the client returns them.
void deliver(std::deque<PendingRecord> records) {
  struct Filled {
    uint8_t* buffer;
    size_t size, used;
  };
  std::vector<Filled> filled;
  while (!records.empty()) {
    uint8_t* buffer = nullptr;
    size_t size = 0, max_records = 0;
    g_request(&buffer, &size, &max_records);
    if (buffer == nullptr || size == 0) {
      std::lock_guard<std::mutex> lock(g_mutex);
      g_dropped += records.size();
      break;
    }
    size_t used = 0;
    while (!records.empty() && used + records.front().bytes.size() <= size) {
      std::memcpy(buffer + used, records.front().bytes.data(), records.front().bytes.size());
      used += records.front().bytes.size();
      records.pop_front();
    }
    if (used == 0) {  // one record larger than a whole buffer: CUPTI would drop it
      std::lock_guard<std::mutex> lock(g_mutex);
      ++g_dropped;
      records.pop_front();
    }
    filled.push_back({buffer, size, used});
  }
  for (const Filled& f : filled) g_complete(nullptr, 0, f.buffer, f.size, f.used);
}

}  // namespace

extern "C" {

CUptiResult CUPTIAPI cuptiGetResultString(CUptiResult result, const char** str) {
  switch (result) {
    case CUPTI_SUCCESS: *str = "CUPTI_SUCCESS"; break;
    case CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED: *str = "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"; break;
    case CUPTI_ERROR_NOT_INITIALIZED: *str = "CUPTI_ERROR_NOT_INITIALIZED"; break;
    default: *str = "CUPTI_ERROR_UNKNOWN (stand-in)"; break;
  }
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiGetTimestamp(uint64_t* timestamp) {
  std::lock_guard<std::mutex> lock(g_mutex);
  *timestamp = cupti_now();
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiSubscribe_v2(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc, void*,
                                       CUpti_SubscriberParams* params) {
  std::lock_guard<std::mutex> lock(g_mutex);
  load_script();
  const std::string holder = !g_script.held_by.empty() ? g_script.held_by : g_subscribed ? "CUPTI for castscope-test" : "";
  if (!holder.empty()) {
    if (params != nullptr && params->oldSubscriberName != nullptr && params->oldSubscriberSize > 0)
      std::snprintf(params->oldSubscriberName, params->oldSubscriberSize, "%s", holder.c_str());
    return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
  }
  g_subscribed = true;
  *subscriber = reinterpret_cast<CUpti_SubscriberHandle>(&g_subscribed);
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiSubscribe(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc callback, void* userdata) {
  return cuptiSubscribe_v2(subscriber, callback, userdata, nullptr);
}

CUptiResult CUPTIAPI cuptiUnsubscribe(CUpti_SubscriberHandle) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_subscribed = false;
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc request,
                                                    CUpti_BuffersCallbackCompleteFunc complete) {
  std::lock_guard<std::mutex> lock(g_mutex);
  load_script();
  g_request = request;
  g_complete = complete;
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityEnable(CUpti_ActivityKind kind) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_script.enable_error != 0) return static_cast<CUptiResult>(g_script.enable_error);
  if (kind >= 0 && kind < 64) g_enabled[kind] = true;
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityDisable(CUpti_ActivityKind kind) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (kind >= 0 && kind < 64) g_enabled[kind] = false;
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityPushExternalCorrelationId(CUpti_ExternalCorrelationKind kind, uint64_t id) {
  t_stack.emplace_back(kind, id);
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityPopExternalCorrelationId(CUpti_ExternalCorrelationKind kind, uint64_t* last) {
  if (t_stack.empty() || t_stack.back().first != kind) return CUPTI_ERROR_INVALID_PARAMETER;
  const auto top = t_stack.back();
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    const bool cast = (top.second >> 63) != 0;
    for (const Launch& l : cast ? g_script.cast : g_script.op) launch(l, &top);
    if (!cast)
      for (const Launch& l : g_script.unscoped) launch(l, nullptr);
  }
  t_stack.pop_back();
  if (last != nullptr) *last = top.second;
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityFlushAll(uint32_t) {
  std::deque<PendingRecord> records, correlations;
  bool foreign = false;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (g_request == nullptr || g_complete == nullptr) return CUPTI_SUCCESS;
    for (PendingRecord& r : g_pending)
      (g_script.correlation_in_next_buffer && r.correlation ? correlations : records).push_back(std::move(r));
    g_pending.clear();
    foreign = g_script.foreign_buffer;
  }
  // Outside the lock, as CUPTI calls back: the client may call into CUPTI.
  deliver(std::move(records));
  if (!correlations.empty()) deliver(std::move(correlations));
  if (foreign) {
    // Another client's buffer: not for this client to free. Kept, never freed here either.
    static uint8_t other_clients_buffer[64] alignas(8);
    g_complete(nullptr, 0, other_clients_buffer, sizeof(other_clients_buffer), 0);
  }
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityGetNextRecord(uint8_t* buffer, size_t valid, CUpti_Activity** record) {
  size_t offset = 0;
  if (*record != nullptr) offset = static_cast<size_t>(reinterpret_cast<uint8_t*>(*record) - buffer) + record_size(*record);
  if (offset >= valid) return CUPTI_ERROR_MAX_LIMIT_REACHED;
  *record = reinterpret_cast<CUpti_Activity*>(buffer + offset);
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityGetNumDroppedRecords(CUcontext, uint32_t, size_t* dropped) {
  std::lock_guard<std::mutex> lock(g_mutex);
  *dropped = g_dropped + g_script.dropped_records;
  g_dropped = 0;
  g_script.dropped_records = 0;
  return CUPTI_SUCCESS;
}

}  // extern "C"
