// Which Python source files are the user's: the one rule behind every "user
// line" castscope reports. The Python frame reader (agent/pyframes), the
// TorchScript traced stacks (context/jit_context.cc) and, through
// castscope_source_kind (agent.h), the torch.compile capture and FX stack
// traces (castscope/_native.py) all ask here.
//
// Not the user's: files under an internal directory (torch's package,
// castscope's own), frozen modules ("<frozen runpy>") and code with no file.
// FX-generated code ("<eval_with_key>.N") is a kind of its own: the frame
// reader maps it to the user's line through its graph, everyone else skips it
// as not the user's. Other pseudo-files ("<string>", "<stdin>") are the user's.
//
// Concurrency: the process's directories are set rarely (agent start, the
// Python package loading the agent) and read on every new site, from any
// thread, some holding the GIL: readers take no lock (an immutable copy,
// replaced whole and never freed).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "castscope/v1/events.enums.h"

namespace castscope {

// Values equal CASTSCOPE_SOURCE_* in agent.h.
enum class SourceKind : uint8_t { kUser = 0, kInternal = 1, kGenerated = 2 };

// A library that casts below the user's code and is named as the maker of
// its conversions (CastEvent.maker): torchao (its package directory),
// Transformer Engine's (transformer_engine/) and torch's FSDP
// (torch/distributed/fsdp/). Its files are not the user's (source_kind says
// kInternal: the line is the user's call of it); the frame reader names the
// innermost one it passes. kUnspecified: none of them.
v1::enums::CastMaker maker_library(std::string_view file);

// The rule itself. Each of `internal_dirs` ends in a path separator (or is
// empty, matching nothing).
SourceKind source_kind(std::string_view file, std::span<const std::string> internal_dirs);

// The rule on the process's internal directories.
SourceKind source_kind(std::string_view file);

// torch's package directory: the agent config's internal_path_prefix, set at
// every start ("" for none).
void set_torch_dir(const std::string& dir);
// Another directory that is never the user's (castscope's Python package,
// as its code objects name it); kept for the process's life.
void add_internal_dir(const std::string& dir);

}  // namespace castscope
