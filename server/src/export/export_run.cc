#include "server/src/export/export_run.h"

#include <memory>
#include <vector>

#include "server/src/export/chrome_trace_writer.h"
#include "server/src/export/perfetto_trace_writer.h"
#include "server/src/export/run_events.h"

namespace castscope::collector {

Status export_run(const ExportOptions& options, ExportSummary& summary) {
  summary = ExportSummary();
  if (options.perfetto_path.empty() && options.chrome_path.empty())
    return Status::invalid_argument("give --perfetto FILE, --chrome FILE or both");
  if (!options.perfetto_path.empty() && options.perfetto_path == options.chrome_path)
    return Status::invalid_argument("--perfetto and --chrome name the same file " + options.perfetto_path);
  // The output files first: an unwritable path fails before any reading.
  std::unique_ptr<PerfettoTraceWriter> perfetto;
  std::unique_ptr<ChromeTraceWriter> chrome;
  if (!options.perfetto_path.empty())
    if (Status s = PerfettoTraceWriter::open(options.perfetto_path, perfetto); !s.ok()) return s;
  if (!options.chrome_path.empty())
    if (Status s = ChromeTraceWriter::open(options.chrome_path, options.run_id, chrome); !s.ok()) return s;
  std::vector<TraceWriter*> writers;
  if (perfetto) writers.push_back(perfetto.get());
  if (chrome) writers.push_back(chrome.get());

  std::unique_ptr<RunEventCursor> reader;
  if (Status s = RunEventCursor::open(options.db_path, options.run_id, reader); !s.ok()) return s;
  for (size_t i = 0; i < reader->agents().size(); ++i) {
    if (Status s = reader->start_agent(i); !s.ok()) return s;
    for (TraceWriter* w : writers)
      if (Status s = w->begin_agent(i, reader->agents()[i]); !s.ok()) return s;
    ExportEvent event;
    Status error;
    while (reader->next(event, error)) {
      ++summary.events;
      for (TraceWriter* w : writers)
        if (Status s = w->add(event); !s.ok()) return s;
    }
    if (!error.ok()) return error;
    for (TraceWriter* w : writers)
      if (Status s = w->end_agent(); !s.ok()) return s;
    ++summary.agents;
  }
  for (TraceWriter* w : writers)
    if (Status s = w->finish(); !s.ok()) return s;
  if (perfetto) summary.perfetto = perfetto->counts();
  if (chrome) summary.chrome = chrome->counts();
  return {};
}

}  // namespace castscope::collector
