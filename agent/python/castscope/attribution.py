"""Which test raised a finding: the one running when the finding's first
event happened. Tests are time windows on CLOCK_MONOTONIC (Python's
time.monotonic_ns() on Linux, the clock of every event's `ts_ns`); a
finding's first event is the one its evidence names (`first_event_seq`),
else the earliest event recorded at its first site."""
from __future__ import annotations

import bisect
from dataclasses import dataclass

SEVERITIES = ("info", "warning", "error", "critical")  # lowest first, as docs/diagnostics.md ranks them


@dataclass(frozen=True)
class Window:
    """One test, from the start of its setup to the end of its teardown."""
    start_ns: int
    end_ns: int
    nodeid: str


class EventIndex:
    """The first time each sequence number and each site was seen, from one
    process's event dump (castscope.iter_events)."""

    def __init__(self, events):
        self.ts_by_seq: dict[int, int] = {}
        self.first_ts_by_site: dict[tuple, int] = {}
        for event in events:
            for kind in ("cast", "op"):
                body = event.get(kind)
                if body is None:
                    continue
                ts = int(body.get("ts_ns", 0))
                self.ts_by_seq[int(body.get("seq", 0))] = ts
                location = body.get("location") or {}
                if location.get("file"):
                    for key in ((location["file"], location.get("line", 0), body.get("op", "")),
                                (location["file"], location.get("line", 0))):
                        if ts < self.first_ts_by_site.get(key, ts + 1):
                            self.first_ts_by_site[key] = ts

    def first_ts(self, finding: dict) -> int | None:
        """When `finding` first happened, or None when no event says."""
        seq = (finding.get("evidence") or {}).get("first_event_seq")
        if seq is not None and int(seq) in self.ts_by_seq:
            return self.ts_by_seq[int(seq)]
        for site in finding.get("sites", []):
            for key in ((site["file"], site["line"], site["op"]), (site["file"], site["line"])):
                if key in self.first_ts_by_site:
                    return self.first_ts_by_site[key]
        return None


def owning_test(windows: list[Window], ts_ns: int | None) -> str | None:
    """The node id of the test whose window holds `ts_ns` (windows sorted by start, not overlapping)."""
    if ts_ns is None:
        return None
    i = bisect.bisect_right([w.start_ns for w in windows], ts_ns) - 1
    return windows[i].nodeid if i >= 0 and ts_ns <= windows[i].end_ns else None


def at_or_above(severity: str, threshold: str) -> bool:
    return SEVERITIES.index(severity) >= SEVERITIES.index(threshold)
