// Counts batches the spool refused, per kind of failure, and keeps the log
// to one line per kind when it first happens, a count at most every 30 s
// while it goes on, and a total at the end: a disk that stays full must not
// print a line per batch. Used by the exporter thread under its io lock.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <string>

#include "common/log/log.h"
#include "common/spool/spool_writer.h"

namespace castscope {

class SpoolLosses {
 public:
  void count(SpoolWriter::Failure failure, const std::string& error, uint64_t events,
             std::chrono::steady_clock::time_point now) {
    Kind& kind = kinds_[static_cast<size_t>(failure)];
    ++kind.batches;
    kind.events += events;
    if (kind.batches == 1) {
      log::error("events lost: " + error + "; further losses of this kind are counted (the run's accounting says how many)");
      kind.logged_at = now;
      kind.logged_batches = 1;
    } else if (now - kind.logged_at >= std::chrono::seconds(30)) {
      summarize(failure, kind, "so far");
      kind.logged_at = now;
      kind.logged_batches = kind.batches;
    }
  }

  // One line per kind that lost anything since its last line.
  void finish() {
    for (size_t i = 0; i < kinds_.size(); ++i)
      if (kinds_[i].batches > kinds_[i].logged_batches) summarize(static_cast<SpoolWriter::Failure>(i), kinds_[i], "in all");
  }

  uint64_t batches() const {
    uint64_t n = 0;
    for (const Kind& kind : kinds_) n += kind.batches;
    return n;
  }

 private:
  struct Kind {
    uint64_t batches = 0;
    uint64_t events = 0;
    uint64_t logged_batches = 0;
    std::chrono::steady_clock::time_point logged_at{};
  };

  static void summarize(SpoolWriter::Failure failure, const Kind& kind, const char* when) {
    log::error(std::string("events lost (") + SpoolWriter::failure_name(failure) + ") " + when + ": " +
               std::to_string(kind.batches) + " batches, " + std::to_string(kind.events) + " events");
  }

  std::array<Kind, 5> kinds_{};  // indexed by SpoolWriter::Failure
};

}  // namespace castscope
