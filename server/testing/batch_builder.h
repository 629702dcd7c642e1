// Builders of castscope.v1 batches for unit tests, fuzzer seeds and benches.
//
// Every message has a spec, generated from the .proto (castscope/v1/*.specs.h,
// proto/generator/spec_builders.h): a struct of the same name in v1::specs
// with one value-initialized member per field in .proto order, so a spec says
// only what a test cares about, and to_message(spec) builds the message with
// the generated setters:
//
//   add<v1::specs::CastEvent>(batch, {.seq = 2, .src_dtype = v1::DTYPE_FLOAT32, .op_id = 1});
//
// A field added to the .proto is in its spec at once.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

#include "castscope/v1/events.specs.h"
#include "castscope/v1/transport.pb.h"
#include "castscope/v1/transport.specs.h"

namespace castscope::collector::testing {

namespace v1 = castscope::v1;
using v1::specs::to_message;

// The field of castscope.v1.Event that holds a message of type `message`.
const google::protobuf::FieldDescriptor& event_member(const google::protobuf::Descriptor& message);

// The message a spec describes, the spec's type named so that a braced list
// converts: message<v1::specs::OpEvent>({.seq = 1, ...}).
template <typename Spec>
auto message(const Spec& spec) {
  return to_message(spec);
}

// Appends the event `Spec` describes to the batch and returns it (a spec of a
// message no Event field holds aborts with its name).
template <typename Spec>
auto& add(v1::Batch& batch, const Spec& spec) {
  auto built = to_message(spec);
  using Message = decltype(built);
  static const google::protobuf::FieldDescriptor& member = event_member(*Message::descriptor());
  v1::Event& event = *batch.add_events();
  auto& added = static_cast<Message&>(*event.GetReflection()->MutableMessage(&event, &member));
  added = std::move(built);
  return added;
}

// A new batch of the current protocol with its head set.
v1::Batch batch_head(const v1::specs::AgentIdentity& agent, uint64_t sequence);

// Interns `texts` with ids first_id, first_id + 1, ...; returns the next free id.
uint32_t add_strings(v1::Batch& batch, uint32_t first_id, std::initializer_list<const char*> texts);
void add_location(v1::Batch& batch, uint32_t id, const v1::specs::SourceLocation& spec);

// The collector tests' batch: `casts` cast events (seq from first_seq after
// one op), one cache sample and the agent's stats, with two interned strings
// ("aten::linear", "weight") and one location (/src/model.py:42).
v1::Batch make_batch(const std::string& run_id, const std::string& agent_id, uint64_t sequence,
                     uint64_t first_seq = 1, int casts = 3);

// A small run for the export tests: one agent (rank 0, pid 4321, host
// "node1"), one thread, two ops with their casts, a cache sample and four GPU
// activities, one of each kind of launch:
//
//   seq  ts     what
//   1    1000   op aten::linear (500 ns, thread 1) ─ launched kernel 8
//   2    1100   cast input fp32→bf16 (op 1)        ─ launched kernel 7
//   3    1200   cast weight fp32→bf16 (op 1), cache hit
//   4    2000   op aten::mm (100 ns)
//   5    2010   cast self already bf16 (op 4)
//   6    2500   cache sample: 3 casts, 4096 bytes
//   7    1300   kernel copy (50 ns, GPU 0 stream 7), launched by cast 2
//   8    1400   kernel gemm (200 ns, stream 7), launched by op 1
//   9    900    memset (10 ns, stream 7), launched outside castscope's ops
//   10   3000   kernel (20 ns, stream 9), launched by cast 99: not stored
v1::Batch export_run_batch();

// The export run's second batch: numerics windows and GradScaler updates of
// the same agent (thread 1, /src/model.py:42):
//
//   seq  ts          what
//   11   2600        scaler update: scale 256, 1 update
//   12   2700        scaler update: scale 256, 2 updates (no change)
//   13   2800        scaler update: step skipped, scale 128, 3 updates
//   14   1100-2900   cast window: input of aten::linear fp32→fp16, 3 of 32 values overflowed
//   15   1000-2900   op window: aten::mm's outputs, 5 of 64 non-finite, first at op 4
//   16   1100-2900   cast window: weight of aten::linear, nothing wrong
//   17   2950        scaler update: scale 128, 4 updates
v1::Batch export_numerics_batch();

}  // namespace castscope::collector::testing
