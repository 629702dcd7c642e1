// The user's line for casts the JIT autocast pass inserts.
//
// torch's JIT autocast pass inserts aten::_autocast_to_reduced_precision /
// _autocast_to_full_precision nodes with no source range (and autodiff's
// symbolic_script leaves ranges into its own "<string>" source), so at run
// time the interpreter reports no user line for them. A post pass, run by the
// graph executors after their optimizations, gives each such cast the source
// range of its first consumer in graph order: the line whose op asked for the
// cast. It rewrites metadata only, never computation.
//
// A cast CSE shared between several ops (`h` cast once for `h + h` and for
// `g * h`) gets a copy of its first consumer's Source (sharing the text), and
// that copy is registered with the other consumers' lines: the resolver
// finds them by the Source its range points to.
#pragma once

#include <torch/csrc/jit/frontend/source_range.h>
#include <torch/csrc/jit/ir/ir.h>

#include <string>

namespace castscope {

// Whether `range` points into user source: it has a non-empty source (torch
// gives the nodes it inserts an empty one), and not one torch compiled from a
// string of its own (symbolic_script's "<string>").
bool is_user_range(const torch::jit::SourceRange& range);

// The pass itself, on every node of `graph` (blocks and subgraphs included).
// Returns how many casts it gave a range to.
size_t attribute_jit_casts(torch::jit::Graph& graph);

// The lines ("file:line", newline-separated) of the other consumers of a
// shared cast whose range points into `source`; empty for any other source.
std::string other_consumer_lines(const torch::jit::Source* source);

// Registers the pass with torch's post passes (at agent start) and removes
// it again (at agent stop). Graphs optimized while it was registered keep
// their ranges; both are idempotent.
void register_jit_cast_lines();
void unregister_jit_cast_lines();

}  // namespace castscope
