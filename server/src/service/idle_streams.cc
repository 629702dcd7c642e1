#include "server/src/service/idle_streams.h"

#include <vector>

namespace castscope::collector {

namespace {

std::string seconds(std::chrono::milliseconds limit) {
  const auto ms = limit.count();
  return ms % 1000 == 0 ? std::to_string(ms / 1000) + " s" : std::to_string(ms) + " ms";
}

}  // namespace

IdleStreams::IdleStreams(IdlePolicy policy, std::function<void(bool evicted)> on_ended)
    : policy_(policy), on_ended_(std::move(on_ended)), sweeper_([this] { run(); }) {}

IdleStreams::~IdleStreams() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  stop_signal_.notify_all();
  sweeper_.join();
}

std::vector<std::shared_ptr<IdleTrackedStream>> IdleStreams::live() {
  std::vector<std::shared_ptr<IdleTrackedStream>> out;
  std::lock_guard lock(mutex_);
  for (auto it = streams_.begin(); it != streams_.end();) {
    if (auto stream = it->lock()) {
      out.push_back(std::move(stream));
      ++it;
    } else {
      it = streams_.erase(it);
    }
  }
  return out;
}

void IdleStreams::add(std::weak_ptr<IdleTrackedStream> stream) {
  std::lock_guard lock(mutex_);
  streams_.push_back(std::move(stream));
}

bool IdleStreams::evict_idlest() {
  const auto now = std::chrono::steady_clock::now();
  std::shared_ptr<IdleTrackedStream> idlest;
  for (auto& stream : live())
    if (!idlest || stream->last_message() < idlest->last_message()) idlest = std::move(stream);
  // Ended outside the lock: ending takes the stream's own lock.
  if (!idlest || now - idlest->last_message() < policy_.evict_after) return false;
  const auto idle = std::chrono::duration_cast<std::chrono::milliseconds>(now - idlest->last_message());
  if (!idlest->end_idle("ended to admit a new stream at the collector's --max-streams: this one sent nothing for " +
                        seconds(idle)))
    return false;
  on_ended_(true);
  return true;
}

void IdleStreams::sweep(std::chrono::steady_clock::time_point now) {
  // Ended outside the lock: ending takes the stream's own lock.
  for (auto& stream : live()) {
    const auto idle = now - stream->last_message();
    std::string why;
    if (!stream->greeted() && idle >= policy_.hello_limit) {
      why = "no Hello in " + seconds(policy_.hello_limit) + " (--stream-hello-s)";
    } else if (policy_.idle_limit.count() > 0 && idle >= policy_.idle_limit) {
      why = "no message in " + seconds(policy_.idle_limit) + " (--stream-idle-s)";
    }
    if (!why.empty() && stream->end_idle("ended: " + why)) on_ended_(false);
  }
}

void IdleStreams::run() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    stop_signal_.wait_for(lock, std::chrono::seconds(1));
    if (stopping_) break;
    lock.unlock();
    sweep(std::chrono::steady_clock::now());
    lock.lock();
  }
}

}  // namespace castscope::collector
