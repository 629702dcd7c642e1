#include "server/src/ingest/read_admission.h"

#include <algorithm>

namespace castscope::collector {

uint64_t ReadAdmission::add_reader() {
  const uint64_t id = next_id_++;
  readers_.emplace(id, AdmittedStream{});
  return id;
}

void ReadAdmission::remove_reader(uint64_t reader) {
  readers_.erase(reader);
  std::erase_if(waiting_, [reader](const auto& entry) { return entry.first == reader; });
}

size_t ReadAdmission::reserved_bytes(Clock::time_point now) const {
  size_t total = 0;
  for (const auto& [id, reader] : readers_)
    if (reader.reserved > 0 && now - reader.since < life_) total += reader.reserved;
  return total;
}

bool ReadAdmission::room(size_t queued_bytes, Clock::time_point now) const {
  const size_t reserved = reserved_bytes(now);
  if (queued_bytes == 0 && reserved == 0) return true;
  return queued_bytes + reserved + readers_.size() * per_reader_ + static_cast<size_t>(average_) <= budget_;
}

void ReadAdmission::reserve(AdmittedStream& reader, Clock::time_point now) {
  reader.reserved = std::max<size_t>(1, static_cast<size_t>(average_));
  reader.since = now;
}

bool ReadAdmission::admit(uint64_t reader, size_t queued_bytes, Clock::time_point now, std::function<void()> resume) {
  auto it = readers_.find(reader);
  if (it == readers_.end()) return true;  // not tracked: never held back
  if (waiting_.empty() && room(queued_bytes, now)) {
    reserve(it->second, now);
    return true;
  }
  waiting_.emplace_back(reader, std::move(resume));
  return false;
}

void ReadAdmission::submitted(uint64_t reader, size_t bytes) {
  average_ = 0.9 * average_ + 0.1 * static_cast<double>(bytes);
  if (auto it = readers_.find(reader); it != readers_.end()) it->second.reserved = 0;
}

std::vector<std::function<void()>> ReadAdmission::admit_waiting(size_t queued_bytes, Clock::time_point now) {
  std::vector<std::function<void()>> admitted;
  while (!waiting_.empty() && room(queued_bytes, now)) {
    auto [reader, resume] = std::move(waiting_.front());
    waiting_.pop_front();
    if (auto it = readers_.find(reader); it != readers_.end()) reserve(it->second, now);
    admitted.push_back(std::move(resume));
  }
  return admitted;
}

}  // namespace castscope::collector
