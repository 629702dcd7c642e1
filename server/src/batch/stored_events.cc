#include "server/src/batch/stored_events.h"

#include "server/src/batch/batch_validation.h"

namespace castscope::collector {

namespace v1 = castscope::v1;

void resolve_batch_events(const v1::Batch& batch, std::vector<v1::StoredEvent>& out, size_t newest_casts) {
  int first = 0;
  if (newest_casts != SIZE_MAX) {
    size_t casts = 0;
    for (first = batch.events_size(); first > 0 && casts < newest_casts; --first)
      if (batch.events(first - 1).has_cast()) ++casts;
  }
  LocalIdIndex strings;
  LocalIdIndex locations;
  size_t bad = 0;
  if (!strings.build(string_ids(batch), bad) || !locations.build(location_ids(batch), bad)) return;
  auto text = [&](uint32_t id, std::string& into) {
    if (const int32_t at = id == 0 ? LocalIdIndex::kAbsent : strings.find(id); at != LocalIdIndex::kAbsent)
      into = batch.strings(at).text();
  };
  auto location = [&](uint32_t id, auto& event) {
    if (const int32_t at = id == 0 ? LocalIdIndex::kAbsent : locations.find(id); at != LocalIdIndex::kAbsent)
      *event.mutable_location() = batch.locations(at).location();
  };
  for (int i = first; i < batch.events_size(); ++i) {
    const v1::Event& event = batch.events(i);
    // Aggregate mode's counters and numerics summaries are no timeline events: the viewer's live stream leaves them out.
    if (event.kind_case() == v1::Event::kStats || event.kind_case() == v1::Event::KIND_NOT_SET ||
        event.kind_case() == v1::Event::kCastCounts || event.kind_case() == v1::Event::kOpCounts ||
        event.kind_case() == v1::Event::kNumerics)
      continue;
    if (newest_casts != SIZE_MAX && !event.has_cast()) continue;
    v1::StoredEvent& stored = out.emplace_back();
    stored.set_run_id(batch.agent().run_id());
    stored.set_agent_id(batch.agent().agent_id());
    v1::Event& copy = *stored.mutable_event();
    copy = event;
    if (copy.has_cast()) {
      v1::CastEvent& cast = *copy.mutable_cast();
      text(cast.op_id(), *cast.mutable_op());
      text(cast.arg_name_id(), *cast.mutable_arg_name());
      location(cast.location_id(), cast);
      text(cast.module_id(), *cast.mutable_module());
      text(cast.parameter_id(), *cast.mutable_parameter());
      cast.clear_module_id();
      cast.clear_parameter_id();
      cast.clear_op_id();
      cast.clear_arg_name_id();
      cast.clear_location_id();
    } else if (copy.has_op()) {
      v1::OpEvent& op = *copy.mutable_op();
      text(op.op_id(), *op.mutable_op());
      location(op.location_id(), op);
      op.clear_op_id();
      op.clear_location_id();
    }
  }
}

}  // namespace castscope::collector
