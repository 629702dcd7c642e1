"""Writes a store holding one run from a crafted agent: every string an agent
controls (run id, agent id, host, command, op and argument names, file,
function, source text) carries HTML and script. The viewer must show them as
text; its tests load this store with `castscope view` and look for
window.__xss, which any script that ran would set.

    python tests/integration/crafted_run.py --db PATH

The last batch also holds numerics summaries at the crafted location: a
cast window whose values overflowed (a mark on the timeline) and two
GradScaler updates, the second a skipped step (the scale track).

The batch is written byte by byte (just enough protobuf for it), as no
castscope agent would send it, over the collector's real gRPC ingest.
"""
from __future__ import annotations

import argparse
import pathlib
import signal
import struct
import subprocess
import sys
import time

import grpc

REPO = pathlib.Path(__file__).resolve().parents[2]
COLLECTOR = REPO / "build" / "server" / "castscope-collector"

RUN_ID = '<script>window.__xss="run"</script>'
AGENT_ID = 'agent<img src=x onerror="window.__xss=\'agent\'">'
OP = '<script>window.__xss="op"</script>::mm'
ARG = '<img src=x onerror="window.__xss=\'arg\'">'
FILE = '/tmp/<script>window.__xss="file"</script>.py'
FUNCTION = '<svg onload="window.__xss=\'function\'">'
SOURCE = 'y = x  # <script>window.__xss="source"</script>'
HOST = '<b onmouseover="window.__xss=\'host\'">host</b>'
COMMAND = '<iframe src="javascript:window.__xss=\'command\'"></iframe>'


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # int64 fields: two's complement, ten bytes when negative
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, value) -> bytes:
    if isinstance(value, int):
        return _varint(number << 3) + _varint(value)
    if isinstance(value, str):
        value = value.encode()
    return _varint(number << 3 | 2) + _varint(len(value)) + value


def _batch(sequence: int, first_seq: int, ts_ns: int, final: bool) -> bytes:
    """An op and three casts of its weight (a miss, then stale hits) at the crafted location."""
    op = (_field(1, first_seq) + _field(2, ts_ns) + _field(3, 1) + _field(5, 1) + _field(6, 1)  # seq ts thread policy device
          + _field(8, 3) + _field(9, 2000) + _field(10, 1) + _field(11, 3) + _field(13, 1) + _field(14, 1)
          + _field(17, 1) + _field(18, 1))  # output bf16, dur, ok, autocast bf16, eager, forward, op_id, location_id
    events = _field(8, _field(2, op))
    for i in range(3):
        cast = (_field(1, first_seq + 1 + i) + _field(2, ts_ns + 100 + i) + _field(3, 1) + _field(5, 1)
                + _field(7, 0xFFFFFFFF) + _field(8, 1) + _field(9, 1) + _field(10, 3) + _field(11, 1)  # list -1, policy, f32->bf16, cast
                + _field(12, _varint(4) + _varint(4)) + _field(14, 64) + _field(15, 1) + _field(16, first_seq)
                + _field(17, 1) + _field(18, 2 if sequence == 1 and i == 0 else 4)  # weight; miss, then stale hits
                + _field(19, sequence * 3 + i) + _field(20, 1) + _field(22, 1) + _field(23, 1)
                + _field(24, 1) + _field(25, 2) + _field(26, 1))
        events += _field(8, _field(1, cast))
    if final:
        events += _numerics(first_seq + 4, ts_ns)
    location = (_field(1, 1) + _field(2, FILE) + _field(3, 3) + _field(4, FUNCTION) + _field(7, SOURCE))
    identity = (_field(1, RUN_ID) + _field(2, AGENT_ID) + _field(3, 4242) + _field(4, 0) + _field(5, 0) + _field(6, 1)
                + _field(7, HOST) + _field(8, "2.14.1") + _field(9, COMMAND))
    batch = (_field(1, 1) + _field(2, identity) + _field(3, sequence) + _field(5, sequence * 4)
             + _field(6, _field(1, 1) + _field(2, OP)) + _field(6, _field(1, 2) + _field(2, ARG))
             + _field(7, _field(1, 1) + _field(2, location)) + events + (_field(9, 1) if final else b""))
    return _field(2, batch)


def _numerics(first_seq: int, ts_ns: int) -> bytes:
    """A cast window of the crafted op and argument that overflowed (3 of 32
    values, float32 -> float16) over the whole run, and two GradScaler
    updates at the crafted line, the second a skipped step (256 -> 128)."""
    scale = lambda value: _varint(24 << 3 | 1) + struct.pack("<d", value)  # double: fixed 64 bits
    window = (_field(1, first_seq) + _field(2, 1_000_000_000) + _field(3, ts_ns + 300) + _field(4, 1) + _field(5, 1)
              + _field(6, 1) + _field(7, 2) + _field(8, 1) + _field(10, 1) + _field(11, 1) + _field(12, 2)
              + _field(13, 1) + _field(14, 1) + _field(16, 2) + _field(17, 32) + _field(18, 3))
    updates = b""
    for i, (value, skipped) in enumerate(((256.0, 0), (128.0, 1))):
        t = ts_ns + 400 + 100 * i
        updates += _field(8, _field(8, _field(1, first_seq + 1 + i) + _field(2, t) + _field(3, t) + _field(4, 3)
                                    + _field(5, 1) + _field(8, 1) + _field(15, i + 1) + _field(16, i + 1)
                                    + scale(value) + _field(25, skipped)))
    return _field(8, _field(8, window)) + updates


def write(db: pathlib.Path, batches: int = 6) -> None:
    hello = _field(1, _field(1, 1) + _field(2, AGENT_ID))
    ingest(db, [[hello] + [_batch(n, 1 + 4 * (n - 1), 1_000_000_000 + n * 1_000_000, n == batches)
                           for n in range(1, batches + 1)]])


def ingest(db: pathlib.Path, streams: list[list[bytes]]) -> None:
    """Sends each stream (a Hello message, then Batch messages) to a collector
    storing into `db`, one stream after the other; every batch must be acknowledged."""
    ready = db.with_suffix(".addr")
    ready.unlink(missing_ok=True)
    collector = subprocess.Popen([str(COLLECTOR), "serve", "--db", str(db), "--listen", "127.0.0.1:0",
                                  "--ready-file", str(ready), "--no-http", "--analyze-interval-ms", "100"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while not ready.exists():
            if collector.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"collector did not start: {collector.stderr.read().decode(errors='replace')}")
            time.sleep(0.02)
        with grpc.insecure_channel(ready.read_text().strip()) as channel:
            call = channel.stream_stream("/castscope.v1.Ingest/Stream")
            for messages in streams:
                acks = list(call(iter(messages), timeout=30))
                if len(acks) < len(messages) - 1:
                    raise RuntimeError(f"only {len(acks)} of {len(messages) - 1} batches acknowledged")
    finally:
        collector.send_signal(signal.SIGTERM)
        collector.wait(timeout=60)
        ready.unlink(missing_ok=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True, type=pathlib.Path)
    args = parser.parse_args()
    args.db.unlink(missing_ok=True)
    write(args.db)
    print(args.db)
    return 0


if __name__ == "__main__":
    sys.exit(main())
