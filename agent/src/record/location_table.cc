#include "agent/src/record/location_table.h"

namespace castscope {

LocationTable::LocationTable() : libraries_(std::make_unique<std::atomic<uint8_t>[]>(kLibraryIds)) {
  locations_.push_back(Location{});
}

uint32_t LocationTable::intern(const Location& location) {
  std::string key;
  key.reserve(location.file.size() + location.function.size() + location.stack.size() +
              location.also_consumed_at.size() + 16);
  key += static_cast<char>('0' + static_cast<int>(location.kind));
  key += location.inside_disabled_autocast ? 'd' : '-';
  key += static_cast<char>('A' + static_cast<int>(location.library));
  key += location.file + '\0' + std::to_string(location.line) + '\0' + location.function + '\0' + location.stack + '\0' +
         location.also_consumed_at;
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = ids_.find(key);
  if (found != ids_.end()) return found->second;
  const auto id = static_cast<uint32_t>(locations_.size());
  locations_.push_back(location);
  ids_.emplace(std::move(key), id);
  if (id < kLibraryIds) libraries_[id].store(static_cast<uint8_t>(location.library), std::memory_order_relaxed);
  return id;
}

Location LocationTable::get(uint32_t id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return id < locations_.size() ? locations_[id] : Location{};
}

}  // namespace castscope
