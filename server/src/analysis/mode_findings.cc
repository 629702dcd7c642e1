// Findings of execution modes: backward-under-autocast, mode-mismatch, script-disable-ignored,
// trace-dropped-autocast, script-under-trace and compile-mismatch.
#include "server/src/analysis/finding_rules.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <set>

#include "server/src/analysis/finding_text.h"

namespace castscope::collector {

using json = nlohmann::json;

void backward_under_autocast(const RunData& run, std::vector<Finding>& out) {
  if (run.backward_ops.empty()) return;
  std::vector<const BackwardOpRow*> rows;
  uint64_t calls = 0, graph_runs = 0;  // autocast ops; runs of compiled backward graphs (compiled::backward)
  for (const auto& row : run.backward_ops) {
    rows.push_back(&row);
    (row.site.op.starts_with("compiled::") ? graph_runs : calls) += row.calls;
  }
  std::sort(rows.begin(), rows.end(), [](const BackwardOpRow* a, const BackwardOpRow* b) { return a->calls > b->calls; });
  std::map<std::tuple<std::string, uint32_t>, SiteRef> lines;  // the backward() calls, by line
  json ops = json::object();
  for (const auto* row : rows) {
    SiteRef line = row->site;
    line.op = "backward";
    lines.try_emplace({line.file, line.line}, line);
    ops[row->site.op] = ops.value(row->site.op, uint64_t{0}) + row->calls;
  }
  std::vector<SiteRef> sites;
  for (const auto& [key, site] : lines) sites.push_back(site);
  Finding f = make_finding(FindingKind::kBackwardUnderAutocast, sites);
  std::string what;
  if (calls > 0) what = std::to_string(calls) + " autocast ops";
  if (graph_runs > 0)
    what += (what.empty() ? "" : " and ") + std::to_string(graph_runs) +
            (graph_runs == 1 ? " run" : " runs") + " of a compiled backward graph";
  f.summary = what + " ran in the backward pass with autocast enabled, from " + where(sites.front());
  f.explanation =
      "backward() was called inside a torch.autocast region. Backward ops already run in the dtypes autocast chose "
      "for the forward pass; with autocast still on, the backward ops it covers are cast again by their own "
      "policies, so gradient dtypes can differ from what the forward pass implies. PyTorch recommends against it.";
  f.fix = "Leave the torch.autocast block before calling loss.backward() (keep only forward and loss inside).";
  f.evidence = {{"backward_autocast_ops", calls + graph_runs}, {"ops", ops}};
  out.push_back(std::move(f));
}

namespace {

// What one mode computed in at a line and op: from cast decisions (the
// dtype each argument was computed in) and from op events (the dtypes the op
// returned), with the first sequence number that saw it.
struct ModeDtypes {
  std::set<std::string> computed;  // from casts
  std::set<std::string> outputs;   // from op events
  std::set<std::tuple<std::string, std::string, std::string, std::string>> casts;  // policy, src, dst, outcome
  bool outputs_probe_only = true;
  uint64_t first_seq = UINT64_MAX;
};

// Whether two modes' dtypes part: compared on what both saw (a mode the
// probe's windows missed has no outputs to compare).
bool dtypes_part(const std::vector<const std::set<std::string>*>& seen) {
  const std::set<std::string>* first = nullptr;
  for (const auto* dtypes : seen) {
    if (dtypes->empty()) continue;
    if (first == nullptr) first = dtypes;
    else if (*dtypes != *first) return true;
  }
  return false;
}

}  // namespace

void mode_mismatches(const RunData& run, std::vector<Finding>& out) {
  // Per line, op and autocast state (on or off for the op's device): cast
  // rows are all made with autocast on. Script-while-tracing has its own
  // finding (script-under-trace), and so has torch.compile
  // (compile-mismatch); JIT autocast's cast ops are the mechanism, not the
  // user's computation.
  using Key = std::tuple<std::string, uint32_t, std::string, bool>;
  std::map<Key, SiteRef> sites;
  std::map<Key, std::map<std::string, ModeDtypes>> by_mode;
  auto skip = [](const SiteRef& site, v1::ExecutionMode mode) {
    return site.file.empty() || jit_autocast_cast(site.op) || mode == v1::EXECUTION_MODE_SCRIPT_WHILE_TRACING ||
           mode == v1::EXECUTION_MODE_COMPILING || mode == v1::EXECUTION_MODE_COMPILED;
  };
  for (const auto& row : run.sites) {
    if (skip(row.site, row.mode)) continue;
    const Key key{row.site.file, row.site.line, row.site.op, true};
    merge_site(sites[key], row.site);
    ModeDtypes& m = by_mode[key][mode_name(row.mode)];
    const std::string outcome = outcome_name(row.outcome);
    // The dtype this argument was computed in: a cast's target, an input
    // already in it, else the source (a traced graph that recorded its casts
    // and then sees already-cast inputs computes the same way).
    // A relabelled tensor computes as its new label says.
    const bool in_dst = outcome == "cast" || outcome == "already_target" || outcome == "dtype_arg_set" ||
                        outcome == "relabelled";
    m.computed.insert(in_dst ? dtype_name(row.dst) : dtype_name(row.src));
    m.casts.insert({policy_name(row.policy), dtype_name(row.src), dtype_name(row.dst), outcome});
    m.first_seq = std::min(m.first_seq, row.first_seq);
  }
  for (const auto& row : run.site_dtypes) {
    if (skip(row.site, row.mode)) continue;
    const Key key{row.site.file, row.site.line, row.site.op, row.autocast};
    merge_site(sites[key], row.site);
    ModeDtypes& m = by_mode[key][mode_name(row.mode)];
    for (auto dtype : row.output_dtypes) m.outputs.insert(dtype_name(dtype));
    m.outputs_probe_only &= row.probe_only;
    m.first_seq = std::min(m.first_seq, row.first_seq);
  }
  std::vector<std::pair<uint64_t, Finding>> found;
  for (const auto& [key, modes_seen] : by_mode) {
    if (modes_seen.size() < 2) continue;
    std::vector<const std::set<std::string>*> computed, outputs;
    uint64_t first_seq = UINT64_MAX;
    bool probe_only = false;
    for (const auto& [mode, m] : modes_seen) {
      computed.push_back(&m.computed);
      outputs.push_back(&m.outputs);
      first_seq = std::min(first_seq, m.first_seq);
      probe_only |= !m.outputs.empty() && m.outputs_probe_only;
    }
    const bool by_casts = dtypes_part(computed);
    if (!by_casts && !dtypes_part(outputs)) continue;
    Finding f = make_finding(FindingKind::kModeMismatch, {sites[key]});
    json casts = json::object(), returned = json::object();
    std::string described;
    for (const auto& [mode, m] : modes_seen) {
      if (!m.casts.empty()) {
        json list = json::array();
        for (const auto& [policy, src, dst, outcome] : m.casts)
          list.push_back({{"policy", policy}, {"src_dtype", src}, {"dst_dtype", dst}, {"outcome", outcome}});
        casts[mode] = list;
      }
      if (!m.outputs.empty()) returned[mode] = m.outputs;
      const auto& shown = by_casts ? m.computed : m.outputs;
      if (!shown.empty()) described += (described.empty() ? "" : "; ") + mode + ": " + dtype_list(shown);
    }
    f.summary = std::string("the same line ") + (by_casts ? "computes in" : "returns") +
                " different dtypes by mode (" + described + ")";
    f.explanation =
        "This line ran in more than one execution mode (eager, scripted, traced) and computed in a different dtype "
        "in each, so what was tested in one mode is not what runs in the other. Typical causes: JIT autocast casts "
        "the operands of ops outside the autocast lists (add, mul, cat...) to the widest dtype where eager code "
        "keeps the lower precision; an autocast context inside scripted code (JIT autocast applies it with its own "
        "casts, and eager autocast around the call then casts again); a traced graph that fixed the dtypes it saw "
        "while tracing; or autocast state that differs between the calls.";
    f.fix =
        "Run and test the model in the mode it ships in; make the dtype explicit at this line in every mode (cast "
        "with .to(dtype) before the op), or trace or script under the same torch.autocast settings it will run "
        "with.";
    f.evidence = {{"autocast", std::get<3>(key)}, {"first_event_seq", first_seq}};
    if (!casts.empty()) f.evidence["behaviour_by_mode"] = casts;
    if (!returned.empty()) f.evidence["outputs_by_mode"] = returned;
    if (probe_only) f.evidence["observed"] = "op probe windows only";
    found.emplace_back(first_seq, std::move(f));
  }
  // Ordered by first execution: the first place the modes part leads.
  std::stable_sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [seq, f] : found) out.push_back(std::move(f));
}

void script_disable_ignored(const RunData& run, std::vector<Finding>& out) {
  LineSites sites;
  for (const auto& row : run.sites) {
    if (!row.site.inside_disabled_autocast || row.outcome != v1::CAST_OUTCOME_CAST) continue;
    if (row.mode != v1::EXECUTION_MODE_SCRIPT) continue;
    gather(sites, row).dtypes.insert(dtype_name(row.src) + "->" + dtype_name(row.dst));
  }
  for (const auto& [key, s] : sites) {
    Finding f = make_finding(FindingKind::kScriptDisableIgnored, {s.site});
    f.summary = std::to_string(s.decisions) + " autocast conversions (" + *s.dtypes.begin() + ") at a scripted line " +
                "inside `autocast(enabled=False)`: the disable did not hold";
    f.explanation =
        "This line is inside a `with torch.autocast(..., enabled=False)` block of scripted (TorchScript) code, and "
        "the scripted function was called while eager autocast was on. TorchScript does not turn eager autocast "
        "off for the block, so the op still went through autocast and was cast to lower precision, although the "
        "code asks for full precision. Eagerly the same code would not cast.";
    f.fix =
        "Call the scripted function outside the eager autocast region (or leave it unscripted); or cast explicitly "
        "inside it (`a.float()`, `b.float()`) so the op gets fp32 inputs whatever autocast does.";
    f.evidence = {{"conversions", s.decisions}, {"dtype_pairs", s.dtypes}};
    out.push_back(std::move(f));
  }
}

void trace_dropped_autocast(const RunData& run, std::vector<Finding>& out) {
  LineSites sites;
  for (const auto& row : run.sites) {
    // Computed in lower precision: cast here, or handed inputs that JIT
    // autocast's own cast ops had already converted.
    const bool lowered = (row.outcome == v1::CAST_OUTCOME_CAST || row.outcome == v1::CAST_OUTCOME_ALREADY_TARGET) &&
                         (row.dst == v1::DTYPE_BFLOAT16 || row.dst == v1::DTYPE_FLOAT16);
    if (row.mode != v1::EXECUTION_MODE_TRACED || !lowered) continue;
    if (!run.traced_with_autocast_off.contains({row.site.file, row.site.line, row.site.op})) continue;
    gather(sites, row).dtypes.insert(dtype_name(row.dst));
  }
  for (const auto& [key, s] : sites) {
    Finding f = make_finding(FindingKind::kTraceDroppedAutocast, {s.site});
    f.summary = "a traced graph ran " + s.site.op + " in " + *s.dtypes.begin() +
                " at a line that ran with autocast off when it was traced (" + std::to_string(s.decisions) +
                " argument decisions)";
    f.explanation =
        "When this code was traced it ran inside `autocast(enabled=False)` (or with autocast otherwise off), so the "
        "tracer recorded the op at full precision. The traced graph keeps no record of the disable: run under "
        "autocast, the op goes through autocast again and is cast to lower precision, unlike the code that was "
        "traced. PyTorch cannot warn about this.";
    f.fix =
        "Make the precision explicit in the traced code (`a.float()`, `b.float()` before the op, or `.to(dtype)`), "
        "or script the function instead of tracing it, or run the traced graph outside autocast.";
    f.evidence = {{"lower_precision_decisions", s.decisions}, {"computed_dtypes", s.dtypes}};
    out.push_back(std::move(f));
  }
}

void script_under_trace(const RunData& run, std::vector<Finding>& out) {
  // One finding per traced line that called into TorchScript (where the user
  // combined the two), naming it first and then the scripted lines; per
  // scripted line when the calling line is unknown (no Python frame reader).
  struct Call {
    LineSites scripted;
    SiteRef caller;
  };
  // Keyed by the calling line (op "") or, when unknown, the scripted line and op.
  std::map<std::tuple<std::string, uint32_t, std::string>, Call> calls;
  for (const auto& row : run.sites) {
    if (row.mode != v1::EXECUTION_MODE_SCRIPT_WHILE_TRACING || jit_autocast_cast(row.site.op)) continue;
    const bool cast = row.outcome == v1::CAST_OUTCOME_CAST || row.outcome == v1::CAST_OUTCOME_ALREADY_TARGET;
    const bool known = !row.site.called_from_file.empty();
    Call& call = calls[{known ? row.site.called_from_file : row.site.file,
                        known ? row.site.called_from_line : row.site.line, known ? "" : row.site.op}];
    if (known) {
      call.caller.file = row.site.called_from_file;
      call.caller.line = row.site.called_from_line;
      call.caller.function = row.site.called_from_function;
      call.caller.op = "call into TorchScript";
    }
    gather(call.scripted, row).dtypes.insert(dtype_name(cast ? row.dst : row.src));
  }
  for (const auto& [key, call] : calls) {
    std::vector<SiteRef> named;
    if (!call.caller.file.empty()) named.push_back(call.caller);
    std::set<std::string> dtypes;
    uint64_t decisions = 0;
    for (const auto& [line, s] : call.scripted) {
      named.push_back(s.site);
      dtypes.insert(s.dtypes.begin(), s.dtypes.end());
      decisions += s.decisions;
    }
    const std::string computed = joined(dtypes);
    const SiteRef& first_scripted = call.caller.file.empty() ? named.front() : named[1];
    Finding f = make_finding(FindingKind::kScriptUnderTrace, named);
    f.summary = "torch.jit.trace recorded a call into scripted code that ran " + first_scripted.op +
                " under autocast (in " + computed + ")" +
                (call.caller.file.empty() ? "" : ", called from " + call.caller.file + ":" + std::to_string(call.caller.line));
    f.explanation =
        "The code being traced called a scripted (TorchScript) function while autocast was on. The tracer does not "
        "look inside the scripted call: it records the call, not the casts eager autocast made in it, and the "
        "scripted graph later runs with TorchScript's own autocast handling (off by default). So the traced graph "
        "need not compute in the dtypes the traced code did, under autocast or not. PyTorch does not support this "
        "combination and does not warn.";
    f.fix =
        "Trace the function without scripting the part it calls (or script the whole model instead of tracing "
        "it); or cast explicitly inside the scripted function so its dtypes do not depend on autocast.";
    f.evidence = {{"decisions_while_tracing", decisions}, {"computed_dtypes", dtypes}};
    out.push_back(std::move(f));
  }
}

namespace {

bool lower_precision(v1::DType dtype) { return dtype == v1::DTYPE_BFLOAT16 || dtype == v1::DTYPE_FLOAT16; }

const char* kCompileMismatchFix =
    "set torch._functorch.config.backward_pass_autocast = \"off\" (or leave this computation out of the compiled "
    "region); see pytorch#179804";

// torch.compile's backward graph is traced under the forward's autocast state
// (backward_pass_autocast = "same_as_forward"), so a line whose forward ran
// with autocast off inside an autocast region gets a backward cast to lower
// precision that eager backward never makes. Seen at compile time: COMPILING
// casts in the backward at a line where no COMPILING forward op had autocast on.
void compile_backward_mismatches(const RunData& run, std::vector<std::pair<uint64_t, Finding>>& found) {
  std::set<std::pair<std::string, uint32_t>> forward_under_autocast;
  for (const auto& row : run.site_dtypes)
    if (row.mode == v1::EXECUTION_MODE_COMPILING && row.autocast) forward_under_autocast.insert({row.site.file, row.site.line});
  struct Line {
    std::map<std::tuple<std::string, std::string>, SiteRef> sites;  // op, arg
    std::set<std::string> ops, compiled, eager;
    uint64_t casts = 0, first_seq = UINT64_MAX;
  };
  std::map<std::pair<std::string, uint32_t>, Line> lines;
  for (const auto& row : run.compile_decisions) {
    if (row.backward == 0 || row.outcome != v1::CAST_OUTCOME_CAST || !lower_precision(row.dst)) continue;
    if (row.site.file.empty() || forward_under_autocast.contains({row.site.file, row.site.line})) continue;
    Line& line = lines[{row.site.file, row.site.line}];
    line.sites.try_emplace({row.site.op, row.site.arg}, row.site);
    line.ops.insert(row.site.op);
    line.compiled.insert(dtype_name(row.dst));
    line.eager.insert(dtype_name(row.src));
    line.casts += row.count;
    line.first_seq = std::min(line.first_seq, row.first_seq);
  }
  for (const auto& [key, line] : lines) {
    std::vector<SiteRef> sites;
    for (const auto& [op_arg, site] : line.sites) sites.push_back(site);
    Finding f = make_finding(FindingKind::kCompileMismatch, sites);
    f.id = finding_id(f.kind, {SiteRef{key.first, key.second, "", "backward", ""}});  // the line: new args keep it
    const std::string compiled = joined(line.compiled), eager = joined(line.eager), ops = joined(line.ops);
    f.summary = "the compiled backward computes " + ops + " at this line in " + compiled + "; eager backward computes it in " +
                eager + ", as the forward did (autocast off here)";
    f.explanation =
        "torch.compile traces the backward graph under the autocast state of the forward pass "
        "(torch._functorch.config.backward_pass_autocast = \"same_as_forward\"), that is the state of the autocast "
        "region around the compiled call. This line's forward ran with autocast off (inside `torch.autocast(..., "
        "enabled=False)`), so it computed in full precision, yet the compiled backward casts its inputs to lower "
        "precision: its gradients differ from eager's, silently (pytorch#179804).";
    f.fix = kCompileMismatchFix;
    f.evidence = {{"phase", "backward"}, {"compiled_dtype", compiled}, {"eager_dtype", eager},
                  {"ops", line.ops},     {"casts", line.casts},       {"first_event_seq", line.first_seq}};
    found.emplace_back(line.first_seq, std::move(f));
  }
}

// The same line, op and autocast dtype computed eagerly and traced by
// torch.compile (COMPILING) in one run, returning different dtypes.
void compile_forward_mismatches(const RunData& run, std::vector<std::pair<uint64_t, Finding>>& found) {
  struct Modes {
    SiteRef site;
    std::set<std::string> eager, compiling;
    uint64_t first_seq = UINT64_MAX;
  };
  std::map<std::tuple<std::string, uint32_t, std::string, v1::DType>, Modes> by_site;
  for (const auto& row : run.site_dtypes) {
    const bool eager = row.mode == v1::EXECUTION_MODE_EAGER;
    if (!row.autocast || row.probe_only || row.site.file.empty() || (!eager && row.mode != v1::EXECUTION_MODE_COMPILING))
      continue;
    Modes& m = by_site[{row.site.file, row.site.line, row.site.op, row.autocast_dtype}];
    m.site = row.site;
    for (auto dtype : row.output_dtypes) (eager ? m.eager : m.compiling).insert(dtype_name(dtype));
    m.first_seq = std::min(m.first_seq, row.first_seq);
  }
  // One finding per line, its ops together.
  std::map<std::pair<std::string, uint32_t>, std::vector<const Modes*>> lines;
  for (const auto& [key, m] : by_site)
    if (!m.eager.empty() && !m.compiling.empty() && m.eager != m.compiling)
      lines[{std::get<0>(key), std::get<1>(key)}].push_back(&m);
  for (const auto& [key, parted] : lines) {
    std::vector<SiteRef> sites;
    std::set<std::string> ops, eager, compiling;
    uint64_t first_seq = UINT64_MAX;
    for (const Modes* m : parted) {
      if (!ops.contains(m->site.op)) sites.push_back(m->site);
      ops.insert(m->site.op);
      eager.insert(m->eager.begin(), m->eager.end());
      compiling.insert(m->compiling.begin(), m->compiling.end());
      first_seq = std::min(first_seq, m->first_seq);
    }
    Finding f = make_finding(FindingKind::kCompileMismatch, sites);
    f.id = finding_id(f.kind, {SiteRef{key.first, key.second, "", "forward", ""}});
    f.summary = "the same line returns different dtypes eagerly and compiled under the same autocast dtype (" +
                joined(ops) + "; eager: " + dtype_list(eager) + "; compiling: " + dtype_list(compiling) + ")";
    f.explanation =
        "This line ran eagerly and was traced by torch.compile in the same run, under the same autocast dtype, and "
        "its autocast ops returned different dtypes: the compiled graph does not compute what the eager code did. "
        "Typical causes: autocast state that differs between the eager call and the compile (a graph compiled "
        "under one region and reused under another), or code whose dtypes depend on something torch.compile "
        "fixed at trace time.";
    f.fix =
        "Make the dtype explicit at this line (cast with .to(dtype) before the op), compile under the same "
        "torch.autocast settings the code runs with, or leave this computation out of the compiled region.";
    f.evidence = {{"phase", "forward"},
                  {"ops", ops},
                  {"outputs_by_mode", {{"eager", eager}, {"compiling", compiling}}},
                  {"first_event_seq", first_seq}};
    found.emplace_back(first_seq, std::move(f));
  }
}

}  // namespace

void compile_mismatches(const RunData& run, std::vector<Finding>& out) {
  std::vector<std::pair<uint64_t, Finding>> found;
  compile_backward_mismatches(run, found);
  compile_forward_mismatches(run, found);
  std::stable_sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [seq, f] : found) out.push_back(std::move(f));
}

}  // namespace castscope::collector
