"""Reading JSON-lines event dumps (one castscope.v1.Event per line) and
summarizing them for the terminal."""
from __future__ import annotations

import json
from collections import Counter


class EventFileError(ValueError):
    """A line of an events file is not a castscope event."""


def iter_events(path, skipped: list | None = None, start: int = 0):
    """Streams a JSON-lines dump, one castscope.v1.Event (as a dict) per line,
    from byte `start` (where an attach began appending to an existing file).

    A line that is not JSON (a process killed mid-write leaves a truncated
    last line) is skipped; with `skipped` given, "path:line" is appended to it
    for each, otherwise EventFileError is raised (lines counted from `start`)."""
    with open(path, "rb") as f:
        f.seek(start)
        for number, raw in enumerate(f, start=1):
            line = raw.decode("utf-8", errors="replace")
            if not line.strip():
                continue
            try:
                event = json.loads(line)
            except json.JSONDecodeError as e:
                if skipped is None:
                    raise EventFileError(f"{path}:{number}: not a castscope event ({e.msg})") from None
                skipped.append(f"{path}:{number}")
                continue
            yield event


def read_events(path, start: int = 0) -> list[dict]:
    """Reads a whole JSON-lines dump, from byte `start` (see iter_events)."""
    return list(iter_events(path, start=start))


def is_probe_record(op: dict) -> bool:
    """An OpEvent the op probe recorded, not an autocast kernel's op."""
    return op.get("probe_reason", "PROBE_REASON_UNSPECIFIED") != "PROBE_REASON_UNSPECIFIED"


def is_autocast_decision(cast: dict) -> bool:
    """A CastEvent (or CastCounts) of autocast's kernel, not a conversion made
    elsewhere (docs/events.md, "Makers"); older agents wrote no maker."""
    return cast.get("maker", "CAST_MAKER_UNSPECIFIED") in ("CAST_MAKER_UNSPECIFIED", "CAST_MAKER_AUTOCAST")


def maker_name(cast: dict) -> str:
    """CAST_MAKER_AUTOCAST_BACKWARD -> "autocast_backward"."""
    return cast.get("maker", "CAST_MAKER_UNSPECIFIED")[len("CAST_MAKER_"):].lower()


def summarize(events, skipped=()) -> str:
    """A terminal summary of events (an iterable, from one or several processes), in one pass."""
    casts, cache = Counter(), Counter()
    others = Counter()  # conversions autocast's kernel did not make (CastEvent.maker), by maker
    ops = compiling = graph_runs = 0  # torch.compile (docs/compile.md): apart, as the collector's report has them
    gpu_ns = Counter()  # GPU time by what launched it (docs/gpu.md)
    last_stats = {}  # per process: its final counters
    for e in events:
        c = e.get("cast")
        if c is not None and c.get("mode") == "EXECUTION_MODE_COMPILING":
            compiling += 1
        elif c is not None and not is_autocast_decision(c):
            others[maker_name(c)] += 1
        elif c is not None:
            cache[c.get("cache")] += 1
            if c["outcome"] == "CAST_OUTCOME_CAST":
                casts[(c["op"], c["arg_name"], c["src_dtype"][6:].lower(), c["dst_dtype"][6:].lower())] += 1
        elif "op" in e:
            mode = e["op"].get("mode")
            if mode == "EXECUTION_MODE_COMPILED":
                graph_runs += 1
            elif mode != "EXECUTION_MODE_COMPILING" and not is_probe_record(e["op"]):
                ops += 1
        elif "cast_counts" in e or "op_counts" in e:  # aggregate mode: one line counts many
            k = e.get("cast_counts")
            if k is not None and k.get("mode") == "EXECUTION_MODE_COMPILING":
                compiling += int(k["count"])
            elif k is not None and not is_autocast_decision(k):
                others[maker_name(k)] += int(k["count"])
            elif k is not None:
                cache[k.get("cache")] += int(k["count"])
                if k["outcome"] == "CAST_OUTCOME_CAST":
                    casts[(k["op"], k["arg_name"], k["src_dtype"][6:].lower(), k["dst_dtype"][6:].lower())] += int(k["count"])
            else:
                k = e["op_counts"]
                if k.get("mode") == "EXECUTION_MODE_COMPILED":
                    graph_runs += int(k["calls"])
                elif k.get("mode") != "EXECUTION_MODE_COMPILING" and not is_probe_record(k):
                    ops += int(k["calls"])
        elif "stats" in e:
            last_stats[e["stats"].get("pid")] = e["stats"]
        elif "kernel" in e:
            gpu_ns[e["kernel"]["launched_by"]] += int(e["kernel"]["duration_ns"])
    lines = [f"castscope: {ops} autocast ops, {sum(casts.values())} casts"
             + (f" in {len(last_stats)} processes" if len(last_stats) > 1 else "")]
    for (op, arg, src, dst), n in casts.most_common(15):
        lines.append(f"  {n:6d}  {op:36s} {arg:12s} {src} -> {dst}")
    if others:
        lines.append(f"  other conversions: {sum(others.values())} ("
                     + ", ".join(f"{maker} {n}" for maker, n in others.most_common()) + ")")
    if compiling or graph_runs:
        lines.append(f"  torch.compile: {compiling} decisions while compiling (not counted), {graph_runs} compiled "
                     f"graph runs")
    if cache.get("CACHE_OUTCOME_MISS") or cache.get("CACHE_OUTCOME_HIT") or cache.get("CACHE_OUTCOME_STALE_HIT"):
        lines.append(f"  cast cache: {cache.get('CACHE_OUTCOME_MISS', 0)} misses, {cache.get('CACHE_OUTCOME_HIT', 0)} hits, "
                     f"{cache.get('CACHE_OUTCOME_STALE_HIT', 0)} stale hits")
    if last_stats:
        dropped = sum(int(s["events_dropped"]) for s in last_stats.values())
        errors = sum(int(s["internal_errors"]) for s in last_stats.values())
        lines.append(f"  dropped events: {dropped}, internal errors: {errors}")
        states = sorted({s["gpu_timing"] for s in last_stats.values() if s.get("gpu_timing")})
        if states:
            lines.append(f"  GPU timing: {'; '.join(states)}")
    if gpu_ns:
        cast, op, other = (gpu_ns[f"LAUNCHED_BY_{k}"] / 1e6 for k in ("CAST", "OP", "NONE"))
        share = cast / (cast + op) if cast + op else 0.0
        lines.append(f"  GPU time: casts {cast:.3f} ms, autocast ops {op:.3f} ms ({share:.0%} of their sum in casts), "
                     f"outside autocast ops {other:.3f} ms")
    if skipped:
        lines.append(f"  {len(skipped)} unreadable lines skipped (first: {skipped[0]})")
    return "\n".join(lines)
