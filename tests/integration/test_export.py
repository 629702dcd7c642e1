"""`castscope export` as a user runs it: a real torch job under `castscope run`,
then its run written as a Perfetto trace, read back with Perfetto's own
generated classes (the `perfetto` package), and as a Chrome trace checked
against that format's rules. Counts must equal what the store holds."""
from __future__ import annotations

import collections
import inspect
import json
import os
import pathlib
import shutil
import sqlite3
import stat
import struct
import subprocess
import sys

import pytest
import torch

import castscope
from helpers import line_of, train

perfetto_trace_pb2 = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")
TrackEvent = perfetto_trace_pb2.TrackEvent

REPO = pathlib.Path(__file__).resolve().parents[2]

JOB = f"""
import threading
import torch

{inspect.getsource(train)}
train(3)
worker = threading.Thread(target=train, args=(2,))  # a second thread: its own track
worker.start()
worker.join()
"""


def _castscope(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "castscope", *args], capture_output=True, text=True,
                          timeout=timeout)


def _store(db: pathlib.Path, sql: str, *params):
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as connection:
        return connection.execute(sql, params).fetchall()


@pytest.fixture(scope="module")
def stored_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("export-run")
    job = out / "job.py"
    job.write_text(JOB)
    result = _castscope("run", "--out", str(out / "out"), "--run-id", "export-run", "--", sys.executable, str(job))
    assert result.returncode == 0, result.stdout + result.stderr
    return out / "out" / "castscope.db"


@pytest.fixture(scope="module")
def exported(stored_run, tmp_path_factory):
    out = tmp_path_factory.mktemp("export-files")
    perfetto, chrome = out / "run.pftrace", out / "run.json"
    result = _castscope("export", "export-run", "--db", str(stored_run), "--perfetto", str(perfetto),
                        "--chrome", str(chrome))
    assert result.returncode == 0, result.stdout + result.stderr
    return perfetto, chrome


def read_perfetto(path: pathlib.Path):
    trace = perfetto_trace_pb2.Trace()
    trace.ParseFromString(path.read_bytes())
    return trace


class Decoded:
    """A Perfetto trace's tracks and events, interned names resolved."""

    def __init__(self, trace):
        self.tracks = {}
        self.events = []  # (packet, event, name)
        names, annotation_names = {}, {}
        for packet in trace.packet:
            names.update({n.iid: n.name for n in packet.interned_data.event_names})
            annotation_names.update({n.iid: n.name for n in packet.interned_data.debug_annotation_names})
            if packet.HasField("track_descriptor"):
                self.tracks[packet.track_descriptor.uuid] = packet.track_descriptor
            if packet.HasField("track_event"):
                event = packet.track_event
                assert event.track_uuid in self.tracks, "an event before its track's descriptor"
                args = {annotation_names[a.name_iid]: getattr(a, a.WhichOneof("value"))
                        for a in event.debug_annotations}
                self.events.append((packet, event, names.get(event.name_iid), args))

    def of_type(self, kind, tracks=None):
        return [e for e in self.events if e[1].type == kind and (tracks is None or e[1].track_uuid in tracks)]


def test_perfetto_trace_has_the_runs_tracks_slices_casts_flows_and_counters(stored_run, exported):
    perfetto, _ = exported
    assert stat.S_IMODE(perfetto.stat().st_mode) == 0o600
    [(pid, casts, ops, samples)] = _store(stored_run, "SELECT pid, casts, ops, cache_samples FROM agents")
    decoded = Decoded(read_perfetto(perfetto))

    processes = {u: t for u, t in decoded.tracks.items() if t.HasField("process")}
    threads = {u: t for u, t in decoded.tracks.items() if t.HasField("thread")}
    counters = {u: t for u, t in decoded.tracks.items() if t.HasField("counter")}
    [process] = processes.values()
    assert process.process.pid == pid and f"pid {pid}" in process.process.process_name
    thread_threads = {t for (t,) in _store(stored_run, "SELECT DISTINCT thread FROM ops")}
    assert len(thread_threads) == 2  # the main thread and the worker
    assert sorted(t.thread.thread_name for t in threads.values()) == sorted(
        f"castscope thread {t}" for t in thread_threads)
    assert all(t.thread.pid == pid for t in threads.values())

    # Ops as slices: as many as stored, named as stored, every BEGIN ended.
    begins = decoded.of_type(TrackEvent.TYPE_SLICE_BEGIN, threads)
    assert len(begins) == ops
    assert len(decoded.of_type(TrackEvent.TYPE_SLICE_END, threads)) == ops
    stored_names = collections.Counter(dict(_store(
        stored_run, "SELECT s.text, COUNT(*) FROM ops o JOIN strings s ON s.id = o.op GROUP BY s.text")))
    assert collections.Counter(name for _, _, name, _ in begins) == stored_names
    linear = next(args for _, _, name, args in begins if name == "aten::linear")
    assert linear["policy"] == "lower_precision_fp" and linear["mode"] == "eager" and linear["phase"] == "forward"
    line = line_of(JOB, "loss = model(x)")
    assert linear["output_dtype"] == "bfloat16" and linear["location"].endswith(f"job.py:{line}")

    # Casts as instants on the thread tracks, each flowing into its op's slice.
    instants = decoded.of_type(TrackEvent.TYPE_INSTANT, threads)
    assert len(instants) == casts
    weight = next(args for _, _, _, args in instants if args["arg"] == "weight")
    assert weight["dtypes"] == "float32→bfloat16" and weight["role"] == "weight"
    assert weight["cache"] in ("miss", "hit") and weight["bytes"] == 64 * 32 * 4 and weight["shape"] == "[64, 32]"
    # The precision map's keys: the first Linear's weight (the model is the root, its layers "0" and "2").
    assert (weight["module"], weight["parameter"]) == ("<Sequential>.0", "weight"), weight
    # None: the loss's, outside the model.
    assert {args.get("module") for _, _, _, args in instants} == {"<Sequential>.0", "<Sequential>.2", None}
    ends = {}
    for _, event, _, _ in decoded.of_type(TrackEvent.TYPE_SLICE_END, threads):
        for flow in event.terminating_flow_ids:
            ends[flow] = event.track_uuid
    for _, event, _, args in instants:
        if "maker" in args:  # a conversion autocast did not make (the loss's .float()): no op to flow into
            assert args["op_seq"] == 0 and not event.flow_ids
            continue
        [flow] = event.flow_ids  # no kernels on this CPU job: only the flow to the op
        assert ends[flow] == event.track_uuid, args  # ended by an op on the same thread

    # Counter tracks for the cast cache, one value per cache sample.
    units = {t.counter.unit: u for u, t in counters.items()}
    Unit = perfetto_trace_pb2.CounterDescriptor.Unit
    assert set(units) == {Unit.Value("UNIT_SIZE_BYTES"), Unit.Value("UNIT_COUNT")}
    values = collections.defaultdict(list)
    for _, event, _, _ in decoded.of_type(TrackEvent.TYPE_COUNTER):
        values[event.track_uuid].append(event.counter_value)
    assert len(values[units[Unit.Value("UNIT_SIZE_BYTES")]]) == samples
    stored = _store(stored_run, "SELECT live_bytes, live_casts FROM cache_samples ORDER BY id")
    assert values[units[Unit.Value("UNIT_SIZE_BYTES")]] == [b for b, _ in stored]
    assert values[units[Unit.Value("UNIT_COUNT")]] == [c for _, c in stored]


def check_chrome_rules(trace: dict) -> collections.Counter:
    """The Chrome trace format's rules; returns events by phase."""
    assert trace["displayTimeUnit"] == "ns"
    phases = collections.Counter()
    named_threads = set()
    for event in trace["traceEvents"]:
        assert {"ph", "pid", "tid"} <= event.keys(), event
        phases[event["ph"]] += 1
        if event["ph"] == "M":
            assert event["name"] in ("process_name", "thread_name") and event["args"]["name"]
            if event["name"] == "thread_name":
                named_threads.add((event["pid"], event["tid"]))
            continue
        assert isinstance(event["ts"], (int, float)) and event["ts"] > 0, event
        if event["ph"] == "X":
            assert isinstance(event["dur"], (int, float)) and event["dur"] >= 0, event
            assert (event["pid"], event["tid"]) in named_threads, event
        if event["ph"] == "i":
            assert event["s"] == "t" and (event["pid"], event["tid"]) in named_threads
        if event["ph"] == "f":
            assert event["bp"] == "e"
    return phases


def test_chrome_trace_follows_the_format_and_the_store(stored_run, exported):
    _, chrome = exported
    assert stat.S_IMODE(chrome.stat().st_mode) == 0o600
    [(pid, casts, ops, samples)] = _store(stored_run, "SELECT pid, casts, ops, cache_samples FROM agents")
    trace = json.loads(chrome.read_text())
    phases = check_chrome_rules(trace)
    assert phases["X"] == ops and phases["i"] == casts and phases["C"] == samples
    weights = [e["args"] for e in trace["traceEvents"] if e["ph"] == "i" and e["args"].get("arg") == "weight"]
    assert weights and {(a["module"], a["parameter"]) for a in weights} == {("<Sequential>.0", "weight"),
                                                                             ("<Sequential>.2", "weight")}
    assert phases["M"] == 1 + 2  # the process and its two threads
    [op_ts] = _store(stored_run, "SELECT MIN(ts_ns) FROM ops")[0:1]
    first_op = min(e["ts"] for e in trace["traceEvents"] if e["ph"] == "X")
    assert abs(first_op * 1000 - op_ts[0]) < 1  # microseconds, the nanoseconds as a fraction
    assert {e["pid"] for e in trace["traceEvents"]} == {pid}


def test_perfetto_subset_matches_perfettos_own_schema(tmp_path):
    """Every message, field and enum value of proto/perfetto/ has Perfetto's
    number and type (checked against the classes Perfetto generates)."""
    protoc = shutil.which("protoc")
    if protoc is None:
        pytest.skip("protoc is not installed")
    from google.protobuf import descriptor_pb2

    out = tmp_path / "subset.desc"
    subprocess.run([protoc, f"-I{REPO / 'proto'}", f"--descriptor_set_out={out}",
                    str(REPO / "proto" / "perfetto" / "perfetto_trace_subset.proto")], check=True)
    files = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    checked = 0

    def compare(ours, theirs_descriptor):
        nonlocal checked
        theirs = theirs_descriptor.fields_by_name
        for field in ours.field:
            assert field.name in theirs, f"{ours.name}.{field.name} is not Perfetto's"
            t = theirs[field.name]
            assert (field.number, field.type) == (t.number, t.type), f"{ours.name}.{field.name}"
            assert (field.label == field.LABEL_REPEATED) == t.is_repeated, f"{ours.name}.{field.name}"
            if field.HasField("oneof_index"):
                assert t.containing_oneof is not None
                assert ours.oneof_decl[field.oneof_index].name == t.containing_oneof.name
            checked += 1
        for enum in ours.enum_type:
            theirs_enum = theirs_descriptor.enum_types_by_name[enum.name]
            for value in enum.value:
                assert theirs_enum.values_by_name[value.name].number == value.number, f"{enum.name}.{value.name}"
                checked += 1
        for nested in ours.nested_type:
            compare(nested, theirs_descriptor.nested_types_by_name[nested.name])

    for message in files.file[0].message_type:
        compare(message, getattr(perfetto_trace_pb2, message.name).DESCRIPTOR)
    assert checked > 50


def test_gradscaler_scale_and_numerics_problems_in_both_traces(tmp_path):
    """A GradScaler loop whose fc1 overflows every 7th batch (scaler_skips.py
    spikes): its scale is a counter track with every update, its 5 skipped
    steps and fc1's non-finite outputs are instants on the thread."""
    scenario = REPO / "tests" / "integration" / "scenarios" / "scaler_skips.py"
    out = tmp_path / "out"
    result = _castscope("run", "--out", str(out), "--run-id", "spikes", "--", sys.executable, str(scenario), "spikes")
    assert result.returncode == 0, result.stdout + result.stderr
    db = out / "castscope.db"
    perfetto, chrome = tmp_path / "spikes.pftrace", tmp_path / "spikes.json"
    result = _castscope("export", "spikes", "--db", str(db), "--perfetto", str(perfetto), "--chrome", str(chrome))
    assert result.returncode == 0, result.stderr
    assert "40 GradScaler updates (5 skipped steps)" in result.stderr
    scales = [struct.unpack("<d", struct.pack("<q", bits))[0]
              for (bits,) in _store(db, "SELECT scale_bits FROM numerics WHERE kind = 3 ORDER BY id")]
    assert len(scales) == 40
    fc1 = line_of(scenario, "h = self.fc1(x)")
    [(nonfinite,)] = _store(db, "SELECT SUM(nonfinite) FROM numerics n JOIN locations l ON l.id = n.location "
                                "WHERE n.kind = 2 AND l.line = ?", fc1)
    assert nonfinite > 0

    decoded = Decoded(read_perfetto(perfetto))
    [process_uuid] = [u for u, t in decoded.tracks.items() if t.HasField("process")]
    threads = {u for u, t in decoded.tracks.items() if t.HasField("thread")}
    [scale_track] = [u for u, t in decoded.tracks.items() if t.name == "GradScaler scale"]
    assert decoded.tracks[scale_track].HasField("counter") and decoded.tracks[scale_track].parent_uuid == process_uuid
    counted = [e.double_counter_value for _, e, _, _ in decoded.of_type(TrackEvent.TYPE_COUNTER, {scale_track})]
    assert counted == scales
    skips = [args for _, _, name, args in decoded.of_type(TrackEvent.TYPE_INSTANT, threads)
             if name == "GradScaler step skipped"]
    assert [(a["scale_before"], a["scale"]) for a in skips] == [(256, 128), (128, 64), (64, 32), (32, 16), (16, 8)]
    assert all(a["location"].endswith(f"scaler_skips.py:{line_of(scenario, 'scaler.update()')}") for a in skips)
    problems = [(name, args) for _, _, name, args in decoded.of_type(TrackEvent.TYPE_INSTANT, threads)
                if name.startswith(("non-finite output", "cast overflow", "cast underflow", "NaN cast"))]
    at_fc1 = [args for name, args in problems if args["location"].endswith(f"scaler_skips.py:{fc1}")]
    assert at_fc1 and sum(a["nonfinite"] for a in at_fc1) == nonfinite
    assert all(a["op"] == "aten::linear" and a["output_dtype"] == "float16" for a in at_fc1)
    assert "aten::linear produced" in at_fc1[0]["summary"] and "from finite inputs" in at_fc1[0]["summary"]

    trace = json.loads(chrome.read_text())
    check_chrome_rules(trace)
    events = trace["traceEvents"]
    assert [e["args"]["scale"] for e in events if e["ph"] == "C" and e["name"] == "GradScaler scale"] == scales
    assert sum(1 for e in events if e["ph"] == "i" and e["name"] == "GradScaler step skipped") == 5
    chrome_fc1 = [e for e in events if e["ph"] == "i" and e.get("cat") == "castscope.numerics"
                  and e["args"].get("location", "").endswith(f"scaler_skips.py:{fc1}")]
    assert sum(e["args"]["nonfinite"] for e in chrome_fc1) == nonfinite


def test_errors_exit_2_or_1_and_say_what_and_where(stored_run, tmp_path):
    unknown = _castscope("export", "no-such-run", "--db", str(stored_run), "--perfetto", str(tmp_path / "t"))
    assert unknown.returncode == 2
    assert f'no run "no-such-run" in {stored_run}' in unknown.stderr
    assert not (tmp_path / "t").exists() and not list(tmp_path.iterdir())  # no half file, no temporary

    missing_db = _castscope("export", "export-run", "--db", str(tmp_path / "none.db"), "--chrome", str(tmp_path / "t"))
    assert missing_db.returncode == 2 and str(tmp_path / "none.db") in missing_db.stderr

    unwritable = tmp_path / "no-such-folder" / "run.pftrace"
    result = _castscope("export", "export-run", "--db", str(stored_run), "--perfetto", str(unwritable))
    assert result.returncode == 1
    assert f"cannot write {unwritable}" in result.stderr and "does not exist" in result.stderr

    no_output = _castscope("export", "export-run", "--db", str(stored_run))
    assert no_output.returncode == 2 and "give --perfetto FILE, --chrome FILE or both" in no_output.stderr

    binary = str(castscope.collector_binary())
    for argv, says in ([["export", "--db", str(stored_run)]], "--run is required"), \
                      ([["export", "--db", str(stored_run), "--run", "export-run", "--frobnicate"]], "frobnicate"), \
                      ([["export", "--db", str(stored_run), "--run", "export-run", "--chrome", "x", "--perfetto", "x"]],
                       "name the same file"):
        result = subprocess.run([binary, *argv[0]], capture_output=True, text=True, timeout=60)
        assert result.returncode == 2, result.stderr
        assert says in result.stderr, result.stderr


def test_gpu_kernels_get_stream_tracks_and_flows_from_their_launches(tmp_path, monkeypatch):
    """Kernels from the stand-in CUPTI (tests/stand_ins/cupti), as in test_gpu_timing.py."""
    from test_gpu_timing import mm_three_times_under_a_collector, with_standin

    gpu = with_standin(tmp_path, monkeypatch, {
        "cast": [{"name": "void at::native::elementwise_kernel<copy>", "duration_ns": 4000}],
        "op": [{"name": "sm90_xmma_gemm_bf16bf16_bf16f32_f32", "duration_ns": 6000}],
        "unscoped": [{"name": "void at::native::vectorized_elementwise_kernel<4, add>", "duration_ns": 500}]})
    db = mm_three_times_under_a_collector(tmp_path, gpu, unscoped=True)
    perfetto, chrome = tmp_path / "gpu.pftrace", tmp_path / "gpu.json"
    result = _castscope("export", "gpu", "--db", str(db), "--perfetto", str(perfetto), "--chrome", str(chrome))
    assert result.returncode == 0, result.stderr
    kernels = _store(db, "SELECT id & 1099511627775, (codes >> 6) & 63, launch_seq, device, stream FROM kernels")
    launched = [k for k in kernels if k[1] in (1, 2)]  # LAUNCHED_BY_CAST, LAUNCHED_BY_OP
    assert len(launched) == 9  # 2 casts and the op, 3 times

    decoded = Decoded(read_perfetto(perfetto))
    [process_uuid] = [u for u, t in decoded.tracks.items() if t.HasField("process")]
    streams = {u: t for u, t in decoded.tracks.items()
               if t.parent_uuid == process_uuid and t.name.startswith("GPU ")}
    assert {t.name for t in streams.values()} == {f"GPU {d} stream {s}" for *_, d, s in kernels}
    slices = decoded.of_type(TrackEvent.TYPE_SLICE_BEGIN, streams)
    assert len(slices) == len(kernels)
    assert len(decoded.of_type(TrackEvent.TYPE_SLICE_END, streams)) == len(kernels)
    # Every launched kernel shares a flow id with the cast or op that launched it.
    started = {}
    for _, event, name, args in decoded.events:
        if event.track_uuid not in streams:
            for flow in event.flow_ids:
                started[flow] = (event.type, args["seq"])
    by_seq = {seq: (by, launch_seq) for seq, by, launch_seq, *_ in kernels}
    for _, event, name, args in slices:
        by, launch_seq = by_seq[args["seq"]]
        assert not event.terminating_flow_ids
        if by in (1, 2):
            [flow] = event.flow_ids
            kind, seq = started[flow]
            assert seq == launch_seq
            assert kind == (TrackEvent.TYPE_INSTANT if by == 1 else TrackEvent.TYPE_SLICE_BEGIN)
        else:
            assert not event.flow_ids
    assert any(name == "sm90_xmma_gemm_bf16bf16_bf16f32_f32" for _, _, name, _ in slices)

    trace = json.loads(chrome.read_text())
    check_chrome_rules(trace)
    gpu_tids = {e["tid"] for e in trace["traceEvents"] if e["ph"] == "M" and e["args"]["name"].startswith("GPU ")}
    assert sum(1 for e in trace["traceEvents"] if e["ph"] == "X" and e["tid"] in gpu_tids) == len(kernels)
    flows = collections.Counter()
    for e in trace["traceEvents"]:
        if e["ph"] in ("s", "f"):
            flows[e["id"]] += 1 if e["ph"] == "s" else 10
    assert len(flows) == len(launched) and set(flows.values()) == {11}
