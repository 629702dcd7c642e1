#include "server/src/ingest/spool_import.h"

#include <algorithm>
#include <condition_variable>
#include <filesystem>
#include <mutex>

#include "common/spool/accounting_file.h"
#include "common/spool/spool_reader.h"

namespace castscope::collector {

namespace {

// Acknowledgements arrive on the writer thread; the import waits for all.
class AckTally {
 public:
  IngestDone expect(uint64_t events) {
    std::lock_guard lock(mutex_);
    ++outstanding_;
    return [this, events](const IngestResult& result) {
      std::lock_guard lock(mutex_);
      if (!result.status.ok()) {
        ++failed_;
        failures_.push_back(result.status.message());
      } else if (result.duplicate) {
        ++duplicate_;
      } else {
        ++stored_;
        events_ += events;
      }
      if (--outstanding_ == 0) all_done_.notify_all();
    };
  }

  void wait_and_report(SpoolImportReport& report) {
    std::unique_lock lock(mutex_);
    all_done_.wait(lock, [&] { return outstanding_ == 0; });
    report.batches_stored = stored_;
    report.batches_duplicate = duplicate_;
    report.batches_failed = failed_;
    report.events_stored = events_;
    for (auto& failure : failures_) report.problems.push_back("store failed: " + failure);
  }

 private:
  std::mutex mutex_;
  std::condition_variable all_done_;
  uint64_t outstanding_ = 0, stored_ = 0, duplicate_ = 0, failed_ = 0, events_ = 0;
  std::vector<std::string> failures_;
};

uint64_t segment_bytes(const std::string& segment) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(segment, ec);
  return ec ? 0 : size;
}

// How far the import is: bytes of the segments read, of all there are.
struct ImportProgress {
  const SpoolProgress& callback;
  uint64_t total = 0, done = 0;
  // Frame `frame` of `frames` of a segment of `bytes` queued: its share of the bytes.
  void frame_queued(uint64_t bytes, size_t frame, size_t frames) const {
    if (callback) callback(done + bytes * (frame + 1) / std::max<size_t>(frames, 1), total);
  }
};

void import_agent_dir(CollectorCore& core, const std::string& dir, const BatchLimits& limits, AckTally& tally,
                      SpoolImportReport& report, ImportProgress& progress) {
  ++report.agent_dirs;
  uint64_t max_sequence = 0;
  for (const std::string& segment : spool::list_segments(dir)) {
    ++report.segments;
    const uint64_t bytes = segment_bytes(segment);
    spool::SegmentContents contents = spool::read_segment(segment);
    for (const spool::ReadProblem& problem : contents.problems) {
      ++report.frames_skipped;
      report.problems.push_back(problem.str());
    }
    std::error_code ec;
    const bool zero_bytes = std::filesystem::file_size(segment, ec) == 0 && !ec;  // a full disk left it; holds nothing
    if (contents.incomplete_tail && !zero_bytes) {
      ++report.frames_skipped;
      report.problems.push_back(segment + " at byte " + std::to_string(contents.complete_bytes) +
                                ": ends inside a frame (its writer was killed mid-write, or is still writing)");
    }
    for (size_t frame = 0; frame < contents.payloads.size(); ++frame) {
      DecodedBatch batch;
      if (Status s = decode_batch(contents.payloads[frame], limits, batch); !s.ok()) {
        ++report.frames_skipped;
        report.problems.push_back(segment + " frame " + std::to_string(frame + 1) + ": " + s.message());
        continue;
      }
      const auto events = static_cast<uint64_t>(batch.batch().events_size());
      max_sequence = std::max(max_sequence, batch.batch().sequence());
      core.submit_and_wait_for_room(std::move(batch), tally.expect(events));
      progress.frame_queued(bytes, frame, contents.payloads.size());
    }
    progress.done += bytes;
  }
  // The agent's accounting (common/spool/accounting_file.h): the drops and
  // the end of a process whose last batches could not be written. Batches
  // numbered after it carry newer counts.
  if (const auto payload = spool::read_accounting(dir)) {
    DecodedBatch batch;
    if (Status s = decode_batch(*payload, limits, batch); !s.ok()) {
      ++report.frames_skipped;
      report.problems.push_back(dir + "/" + spool::kAccountingFileName + ": " + s.message());
    } else if (batch.batch().sequence() > max_sequence) {
      ++report.accounting_batches;
      core.submit_and_wait_for_room(std::move(batch), tally.expect(0));
    }
  }
}

bool is_agent_dir(const std::string& path) {
  std::error_code ec;
  return !spool::list_segments(path).empty() ||
         std::filesystem::exists(path + "/" + spool::kAccountingFileName, ec);
}

}  // namespace

SpoolImportReport import_spool(CollectorCore& core, const std::vector<std::string>& paths, const BatchLimits& limits,
                               const SpoolProgress& callback) {
  SpoolImportReport report;
  AckTally tally;
  // The agent folders first, so that the progress knows the whole size.
  std::vector<std::string> agent_dirs;
  for (const std::string& path : paths) {
    if (is_agent_dir(path)) {
      agent_dirs.push_back(path);
      continue;
    }
    const std::vector<std::string> found = spool::list_agent_dirs(path);
    if (found.empty()) report.problems.push_back(path + ": no spool segments or agent folders here");
    agent_dirs.insert(agent_dirs.end(), found.begin(), found.end());
  }
  ImportProgress progress{callback};
  if (callback)
    for (const std::string& dir : agent_dirs)
      for (const std::string& segment : spool::list_segments(dir)) progress.total += segment_bytes(segment);
  for (const std::string& dir : agent_dirs) import_agent_dir(core, dir, limits, tally, report, progress);
  tally.wait_and_report(report);
  return report;
}

}  // namespace castscope::collector
