// What the finding rules share: sites gathered by line and op, and the words
// findings are written in.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <tuple>

#include "server/src/analysis/run_data.h"

namespace castscope::collector {

// "file:line op (arg)", or "<no source location> op" for a site without one.
std::string where(const SiteRef& site);

// Site rows gathered by (file, line, op): one finding per line and op, with
// its arguments listed together ("self,mat2").
struct LineSite {
  SiteRef site;
  uint64_t decisions = 0;
  std::set<std::string> dtypes;
};
using LineSites = std::map<std::tuple<std::string, uint32_t, std::string>, LineSite>;

// Takes `row` into `site`: the first row sets it, later ones add their
// argument to the list.
void merge_site(SiteRef& site, const SiteRef& row);
LineSite& gather(LineSites& sites, const SiteRow& row);

// JIT autocast's own cast ops (inserted into scripted graphs): the
// mechanism, not a line of the user's computation. The agent's graph pass
// gives each the line of the op that consumes it (jit_cast_lines.h); casts
// run before that pass saw their graph (an executor's first, profiling call,
// graphs optimized before attach) are at the Python line that called it.
bool jit_autocast_cast(const std::string& op);

// "a, b, c"; dtypes as "bfloat16/float32"; dtype names of a set; "1.234 ms"; "12.3%" of a whole.
std::string joined(const std::set<std::string>& items);
std::string dtype_list(const std::set<std::string>& dtypes);
std::set<std::string> dtype_names(const std::set<v1::DType>& dtypes);
std::string milliseconds(uint64_t ns);
std::string percent(uint64_t part, uint64_t whole);

}  // namespace castscope::collector
