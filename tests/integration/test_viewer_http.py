"""The viewer's HTTP side with real processes: a collector serving a real
torch job's run (or a crafted agent's), asked over real sockets. The page
itself is tested in a real browser (ui/tests, Playwright)."""
from __future__ import annotations

import gzip
import http.client
import json
import os
import pathlib
import signal
import socket
import sqlite3
import subprocess
import tempfile
import sys
import threading
import time
import urllib.parse

import grpc
import jsonschema
import pytest
import referencing

from crafted_run import COLLECTOR, _field, _varint, write as write_crafted_run
from helpers import line_of

REPO = pathlib.Path(__file__).resolve().parents[2]
CASTSCOPE = REPO / ".venv" / "bin" / "castscope"

# The viewer API's one declaration (docs/schema/viewer-api.schema.json); its
# findings are the report's (report.schema.json), found by their $id.
_SCHEMAS = [json.loads((REPO / "docs" / "schema" / name).read_text())
            for name in ("viewer-api.schema.json", "report.schema.json")]
_REGISTRY = referencing.Registry().with_resources(
    (schema["$id"], referencing.Resource.from_contents(schema)) for schema in _SCHEMAS)


def conforms(definition: str, answer) -> None:
    """`answer` is what the schema's $defs/`definition` declares."""
    validator = jsonschema.Draft202012Validator({"$ref": f"{_SCHEMAS[0]['$id']}#/$defs/{definition}"},
                                                registry=_REGISTRY)
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message[:300]}" for e in validator.iter_errors(answer)]
    assert not errors, f"{definition}: " + "; ".join(errors[:5])

JOB = """
import torch
model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(16, 32)
for step in range({steps}):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(x).float().sum()
    loss.backward()
    opt.step()
    opt.zero_grad()
"""


class Viewer:
    """castscope-collector view (or serve) with its viewer file read back."""

    def __init__(self, tmp: pathlib.Path, *args: str):
        self.args = args
        url_file = tmp / f"viewer-{time.monotonic_ns()}.url"
        self.process = subprocess.Popen([str(COLLECTOR), *args, "--viewer-file", str(url_file)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 30
        while not url_file.exists():
            assert self.process.poll() is None, self.process.stderr.read().decode(errors="replace")
            assert time.monotonic() < deadline, "viewer not ready in 30 s"
            time.sleep(0.02)
        self.url = url_file.read_text().strip()
        parsed = urllib.parse.urlparse(self.url)
        self.host, self.port = parsed.hostname, parsed.port
        self.token = urllib.parse.parse_qs(parsed.query)["token"][0]

    def get(self, path: str, headers: dict | None = None, token: bool = True):
        headers = dict(headers or {})
        if token:
            headers.setdefault("Authorization", f"Bearer {self.token}")
        connection = http.client.HTTPConnection(self.host, self.port, timeout=30)
        connection.putrequest("GET", path, skip_host="Host" in headers, skip_accept_encoding="Accept-Encoding" in headers)
        for name, value in headers.items():
            connection.putheader(name, value)
        connection.endheaders()
        response = connection.getresponse()
        body = response.read()
        connection.close()
        return response, body

    def api(self, path: str) -> dict:
        response, body = self.get(path)
        assert response.status == 200, (path, response.status, body[:300])
        return json.loads(body)

    def stop(self):
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=30)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A real job's store (castscope run), and a UI folder of two files."""
    tmp = tmp_path_factory.mktemp("viewer")
    job = tmp / "job.py"
    job.write_text(JOB.format(steps=40))
    result = subprocess.run([str(CASTSCOPE), "run", "--out", str(tmp / "out"), "--", sys.executable, str(job)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    assert "castscope: viewer at http://127.0.0.1:" in result.stderr
    ui = tmp / "ui"
    (ui / "assets").mkdir(parents=True)
    (ui / "index.html").write_text("<!doctype html><title>castscope</title>")
    (ui / "assets" / "app.js").write_text("console.log('castscope')")
    return tmp, tmp / "out" / "castscope.db", ui


@pytest.fixture(scope="module")
def viewer(trained):
    tmp, db, ui = trained
    v = Viewer(tmp, "view", "--db", str(db), "--ui-dir", str(ui))
    yield v
    v.stop()


ROUTES = ["/", "/index.html", "/assets/app.js", "/api/runs", "/api/tracks?run=x", "/api/live?run=x",
          "/api/sites?run=x", "/api/modules?run=x", "/api/findings?run=x", "/api/event?run=x&agent=y&seq=1",
          "/api/numerics?run=x"]


@pytest.mark.parametrize("route", ROUTES)
def test_every_route_needs_the_token(viewer, route):
    response, _ = viewer.get(route, token=False)
    assert response.status == 401
    response, _ = viewer.get(route, headers={"Authorization": "Bearer wrong"})
    assert response.status == 401
    response, _ = viewer.get(route, headers={"Cookie": f"castscope_{viewer.port}=wrong"}, token=False)
    assert response.status == 401


def test_the_url_token_becomes_a_strict_httponly_cookie(viewer):
    response, _ = viewer.get(f"/?token={viewer.token}", token=False)
    assert response.status == 303 and response.getheader("Location") == "/"
    cookie = response.getheader("Set-Cookie")
    assert cookie.startswith(f"castscope_{viewer.port}={viewer.token};")
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    response, body = viewer.get("/", headers={"Cookie": cookie.split(";")[0]}, token=False)
    assert response.status == 200 and b"<title>castscope</title>" in body
    response, _ = viewer.get("/api/runs", headers={"Cookie": cookie.split(";")[0]}, token=False)
    assert response.status == 200


@pytest.mark.parametrize("host", ["evil.example", "evil.example:80", "127.0.0.1:1", "localhost", "127.0.0.1.evil.example"])
def test_other_host_headers_are_refused(viewer, host):
    response, body = viewer.get("/api/runs", headers={"Host": host})
    assert response.status == 403, host
    assert b"Host header" in body


def test_loopback_names_of_the_port_are_served(viewer):
    for host in (f"127.0.0.1:{viewer.port}", f"localhost:{viewer.port}", f"LOCALHOST:{viewer.port}"):
        response, _ = viewer.get("/api/runs", headers={"Host": host})
        assert response.status == 200, host


@pytest.mark.parametrize("path", ["/assets/../../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd", "/assets/..%2f..%2fCMakeLists.txt",
                                  "/assets/%2e%2e/index.html", "/assets/.hidden", "/../../../../etc/passwd",
                                  "/assets//etc/passwd", "/assets/..", "/etc/passwd", "/ui/dist/index.html"])
def test_static_files_only_from_the_ui_folder(viewer, path):
    response, body = viewer.get(path)
    assert response.status in (400, 404), (path, response.status)
    assert b"root:" not in body and b"cmake_minimum_required" not in body


def test_no_cors_and_a_strict_content_security_policy(viewer):
    for path in ("/", "/api/runs", "/assets/app.js"):
        response, _ = viewer.get(path, headers={"Origin": "http://evil.example"})
        assert response.getheader("Access-Control-Allow-Origin") is None
        csp = response.getheader("Content-Security-Policy")
        assert "default-src 'self'" in csp and "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
        assert response.getheader("X-Content-Type-Options") == "nosniff"


def lane(viewer, rid: str, track: dict, t0: int, t1: int, px: int) -> dict:
    """/api/timeline for one track: its one lane."""
    answer = viewer.api(f"/api/timeline?run={rid}&tracks={urllib.parse.quote(track['track'])}&t0={t0}&t1={t1}&px={px}")
    assert [lane["track"] for lane in answer["lanes"]] == [track["track"]]
    return answer["lanes"][0]


def in_full(lane: dict) -> dict:
    """An events lane as the page completes it: the lane's agent id in each
    event, each location index replaced by the lane's entry."""
    for event in lane["ops"] + lane["casts"] + lane["kernels"]:
        event["agent_id"] = lane["agent_id"]
        if "location" in event:
            event["location"] = lane["locations"][event["location"]]
    return lane


def bucket_rows(lane: dict) -> list[dict]:
    """A buckets lane's columns as one dict per bucket."""
    columns = lane["buckets"]
    return [{name: values[i] for name, values in columns.items()} for i in range(len(columns["t"]))]


def test_only_get(viewer):
    connection = http.client.HTTPConnection(viewer.host, viewer.port, timeout=10)
    connection.request("POST", "/api/runs", body=b"{}", headers={"Authorization": f"Bearer {viewer.token}"})
    assert connection.getresponse().status == 405


@pytest.mark.parametrize("query,needle", [
    ("/api/timeline?run=R&tracks=a/1&t0=x&t1=5&px=10", b"parameter t0"),
    ("/api/timeline?run=R&tracks=a/1&t0=0&t1=5&px=0", b"parameter px"),
    ("/api/timeline?run=R&tracks=nonsense&t0=0&t1=5&px=10", b"track: expected"),
    ("/api/timeline?run=R&tracks=a/1,,a/2&t0=0&t1=5&px=10", b"track: expected"),
    ("/api/timeline?run=R&tracks=a/1&t0=5&t1=5&px=10", b"t1 must be greater"),
    ("/api/timeline?run=R&track=a/1&t0=0&t1=5&px=10", b"parameter tracks"),
    ("/api/timeline?run=R&tracks=" + ",".join(["a/1"] * 257) + "&t0=0&t1=5&px=10", b"at most 256 per request"),
    ("/api/event?run=R&agent=a&seq=-1", b"parameter seq"),
    ("/api/tracks", b"parameter run"),
    ("/api/numerics", b"parameter run"),
])
def test_bad_parameters_get_clear_errors(viewer, query, needle):
    response, body = viewer.get(query)
    assert response.status == 400, body
    assert needle in body


def test_unknown_run_is_404(viewer):
    response, body = viewer.get("/api/tracks?run=no-such-run")
    assert response.status == 404 and b"no run no-such-run" in body


def test_the_timeline_answers_buckets_far_out_and_events_close_in(viewer):
    run = viewer.api("/api/runs")["runs"][0]
    agent = run["agents"][0]
    rid = urllib.parse.quote(run["run_id"])
    tracks = viewer.api(f"/api/tracks?run={rid}")
    track = tracks["processes"][0]["tracks"][0]
    assert track["kind"] == "thread" and track["events"] == agent["casts"] + agent["ops"]
    t1 = tracks["t_max"]
    # Far out: too many events for one page; per-bucket counts that add up to the store's.
    far = lane(viewer, rid, track, 0, t1, 3)
    if far["kind"] == "buckets":
        assert sum(far["buckets"]["decisions"]) == agent["casts"]
        assert sum(far["buckets"]["ops"]) == agent["ops"]
        # Buckets start on their level's grid of the agents' clock.
        origin = int(tracks["origin_ns"])
        assert all((origin + t) % far["bucket_ns"] == 0 for t in far["buckets"]["t"])
    # Close in, from the first cast on (the op probe records ops before the
    # loop, e.g. the layers' initialisation): the events themselves, each
    # inside the range, with their user line.
    first = (next(b["t"] for b in bucket_rows(far) if b["decisions"]) if far["kind"] == "buckets"
             else min(c["ts"] for c in far["casts"]))
    t0, t_end = first, first + t1 // 20
    near = lane(viewer, rid, track, t0, t_end, 1000)
    assert near["kind"] == "events" and near["casts"]
    # Each location once per lane; the events name theirs by index.
    assert len({json.dumps(l, sort_keys=True) for l in near["locations"]}) == len(near["locations"])
    assert all(0 <= e["location"] < len(near["locations"]) for e in near["casts"] + near["ops"])
    near = in_full(near)
    assert all(t0 <= c["ts"] < t_end for c in near["casts"] + near["ops"])
    cast = near["casts"][0]
    assert cast["location"]["file"].endswith("job.py") and cast["src"] == "float32" and cast["dst"] == "bfloat16"
    # One event in full, with the text of its line read by the agent.
    detail = viewer.api(f"/api/event?run={rid}&agent={urllib.parse.quote(cast['agent_id'])}&seq={cast['seq']}")
    assert detail["kind"] == "cast" and detail["seq"] == cast["seq"]
    assert detail["location"]["source"] == "loss = model(x).float().sum()"


def test_unix_times_are_exact_decimal_strings(trained, viewer):
    """first/last_seen_unix_ns are past 2^53: strings, like origin_ns, to the nanosecond as stored."""
    _, db, _ = trained
    run = viewer.api("/api/runs")["runs"][0]
    first, last = run["first_seen_unix_ns"], run["last_seen_unix_ns"]
    assert isinstance(first, str) and first.isdigit() and isinstance(last, str) and last.isdigit(), (first, last)
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as store:
        stored = store.execute("SELECT first_seen_unix_ns, last_seen_unix_ns FROM runs WHERE run_id = ?",
                               (run["run_id"],)).fetchone()
    assert (int(first), int(last)) == stored
    assert 2**53 < int(first) <= int(last) <= time.time_ns()


def joint_lanes_equal_single_lanes(viewer, rid: str) -> list[str]:
    """The page asks once per view step: each lane of the joint answer is what
    that track alone answers, buckets as columns of equal length. Returns the
    run's tracks."""
    tracks = viewer.api(f"/api/tracks?run={rid}")
    names = [t["track"] for p in tracks["processes"] for t in p["tracks"]]
    for t0, t1, px in [(0, tracks["t_max"], 3), (0, tracks["t_max"], 1000), (0, max(1, tracks["t_max"] // 50), 1000)]:
        asked = list(reversed(names)) + names  # any order, repeats allowed
        joint = viewer.api(f"/api/timeline?run={rid}&tracks={urllib.parse.quote(','.join(asked))}&t0={t0}&t1={t1}&px={px}")
        conforms("TimelineAnswer", joint)
        assert (joint["t0"], joint["t1"]) == (t0, t1)
        assert [lane["track"] for lane in joint["lanes"]] == asked
        assert joint["mode_names"][1] == "eager"
        for name, answered in zip(asked, joint["lanes"]):
            assert answered == lane(viewer, rid, {"track": name}, t0, t1, px)
            if answered["kind"] == "buckets":
                assert {len(column) for column in answered["buckets"].values()} == {len(answered["buckets"]["t"])}
    missing = viewer.get(f"/api/timeline?run={rid}&tracks={urllib.parse.quote(names[0])},nosuchagent/1&t0=0&t1=10&px=10")[0]
    assert missing.status == 404
    return names


def test_one_request_answers_every_lane_of_a_step_in_the_order_asked(viewer):
    run = viewer.api("/api/runs")["runs"][0]
    joint_lanes_equal_single_lanes(viewer, urllib.parse.quote(run["run_id"]))


def test_answers_are_gzipped_when_the_client_takes_it_never_brotli(viewer):
    """Chromium offers br first; the collector answers gzip (cpp-httplib's own brotli was far too slow)."""
    run = viewer.api("/api/runs")["runs"][0]
    rid = urllib.parse.quote(run["run_id"])
    tracks = viewer.api(f"/api/tracks?run={rid}")
    track = urllib.parse.quote(tracks["processes"][0]["tracks"][0]["track"])
    path = f"/api/timeline?run={rid}&tracks={track}&t0=0&t1={tracks['t_max']}&px=1000"  # the whole run: well over 1 kB
    response, plain = viewer.get(path, headers={"Accept-Encoding": "identity"})
    assert response.status == 200 and response.getheader("Content-Encoding") is None and len(plain) >= 1024
    response, body = viewer.get(path, headers={"Accept-Encoding": "gzip, deflate, br, zstd"})
    assert response.getheader("Content-Encoding") == "gzip" and "Accept-Encoding" in response.getheader("Vary")
    assert response.getheader("Content-Type") == "application/json"
    assert json.loads(gzip.decompress(body)) == json.loads(plain)
    for refused in ("br", "gzip;q=0, br", "zstd"):
        response, body = viewer.get(path, headers={"Accept-Encoding": refused})
        assert response.getheader("Content-Encoding") is None, refused
        assert json.loads(body) == json.loads(plain)


def test_counters_findings_and_sites(viewer):
    run = viewer.api("/api/runs")["runs"][0]
    rid = urllib.parse.quote(run["run_id"])
    t1 = viewer.api(f"/api/tracks?run={rid}")["t_max"]
    # Past the last op: the cache is sampled once more after the last optimizer step.
    counters = viewer.api(f"/api/counters?run={rid}&t0=0&t1={t1 + 10**9}&points=50")
    seconds = counters["bucket_ns"] / 1e9
    # Every conversion: autocast's (its sites) and the others (the job's .float(), autograd's; not sites).
    db = viewer.args[viewer.args.index("--db") + 1]
    with sqlite3.connect(db) as store:
        [[others]] = store.execute("SELECT COUNT(*) FROM cast_rows WHERE outcome = 1 AND maker > 1").fetchall()
    assert others > 0
    assert round(sum(counters["casts_per_s"]) * seconds) == others + sum(
        s["by_mode"]["eager"].get("float32->bfloat16", 0) for s in viewer.api(f"/api/sites?run={rid}")["sites"])
    assert len(counters["steps"]) == 40
    assert counters["cache"][0]["live_casts"]
    # Zoomed in between two samples: the samples either side frame the range, so the chart is not empty.
    samples = viewer.api(f"/api/counters?run={rid}&t0=0&t1={t1 + 10**9}&points=20000")["cache"][0]["t"]
    ta, tb = next((a, b) for a, b in zip(samples, samples[1:]) if b - a > 2)
    framed = viewer.api(f"/api/counters?run={rid}&t0={ta + 1}&t1={tb}&points=50")
    assert framed["cache"][0]["t"] == [ta, tb] and framed["steps"] == []
    assert viewer.api(f"/api/findings?run={rid}")["findings"] == []  # a clean job
    sites = viewer.api(f"/api/sites?run={rid}")["sites"]
    assert {(s["op"], s["arg"]) for s in sites} >= {("aten::linear", "weight"), ("aten::linear", "input")}
    assert not any(s["mismatch"] for s in sites)


STANDIN_CUPTI = REPO / "build" / "tests" / "stand_ins" / "cupti" / "libcastscope_standin_cupti.so"

# A few optimizer steps (counters' steps), then more than 5 000 events on one
# thread, so that the whole range comes as buckets and a narrow one as events;
# with the stand-in CUPTI (where it is built), a kernel per op on a GPU track.
SCHEMA_JOB = """
import json, sys
import torch
import castscope
collector, events_path, gpu = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
castscope.attach(collector=collector, run_id="schema-run", events_path=events_path, gpu_timing=gpu)
model = torch.nn.Linear(8, 8)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
a, b = torch.randn(8, 8), torch.randn(8, 8)
for step in range(3):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(a).float().sum()
    loss.backward()
    opt.step()
    opt.zero_grad()
with torch.autocast("cpu", dtype=torch.bfloat16):
    for _ in range(3000):
        torch.mm(a, b)
castscope.detach()
"""


@pytest.fixture(scope="module")
def schema_run(tmp_path_factory):
    """A collector serving a run with casts, ops, steps and (with the stand-in CUPTI) kernels."""
    tmp = tmp_path_factory.mktemp("schema")
    ready = tmp / "collector.addr"
    v = Viewer(tmp, "serve", "--db", str(tmp / "schema.db"), "--listen", "127.0.0.1:0", "--ready-file", str(ready))
    try:
        while not ready.exists():
            time.sleep(0.02)
        env = dict(os.environ)
        gpu = None
        if STANDIN_CUPTI.is_file():
            (tmp / "standin.json").write_text(json.dumps({"op": [{"name": "gemm_kernel", "duration_ns": 1000}]}))
            env["CASTSCOPE_STANDIN_CUPTI"] = str(tmp / "standin.json")
            gpu = {"mode": "on", "cupti_library": str(STANDIN_CUPTI), "correlate": "all_ops", "window_steps": 0}
        job = tmp / "job.py"
        job.write_text(SCHEMA_JOB)
        result = subprocess.run([sys.executable, str(job), ready.read_text().strip(), str(tmp / "events.jsonl"),
                                 json.dumps(gpu)], capture_output=True, text=True, timeout=600, env=env)
        assert result.returncode == 0, result.stderr
        deadline = time.monotonic() + 120
        while not all(a["finished"] for r in v.api("/api/runs")["runs"] for a in r["agents"]):
            assert time.monotonic() < deadline, "the job's batches did not all arrive in 120 s"
            time.sleep(0.2)
        yield v, gpu is not None
    finally:
        v.stop()


def test_every_answer_matches_the_viewer_api_schema(schema_run):
    """Real answers of every JSON route against docs/schema/viewer-api.schema.json
    (the UI's types are generated from it: ui/api-types.mjs). /api/live's
    messages are checked in the live test."""
    viewer, with_kernels = schema_run
    jsonschema.Draft202012Validator.check_schema(_SCHEMAS[0])
    runs = viewer.api("/api/runs")
    conforms("RunsAnswer", runs)
    rid = urllib.parse.quote("schema-run")
    tracks = viewer.api(f"/api/tracks?run={rid}")
    conforms("TracksAnswer", tracks)
    by_kind = {}
    for track in tracks["processes"][0]["tracks"]:
        by_kind.setdefault(track["kind"], track)
    assert set(by_kind) == ({"thread", "gpu"} if with_kernels else {"thread"}), tracks

    def timeline(track: dict, t0: int, t1: int, px: int) -> dict:
        answer = viewer.api(f"/api/timeline?run={rid}&tracks={urllib.parse.quote(track['track'])}&t0={t0}&t1={t1}&px={px}")
        conforms("TimelineAnswer", answer)
        return answer["lanes"][0]

    def zoomed_in(track: dict, answer: dict) -> dict:
        """Into the first bucket with events, until the events themselves come."""
        for _ in range(20):
            if answer["kind"] == "events":
                return answer
            bucket = next(b for b in bucket_rows(answer) if b["decisions"] or b["kernels"])
            answer = timeline(track, bucket["t"], bucket["t"] + answer["bucket_ns"], 1000)
        raise AssertionError("no events after 20 zooms")

    thread = by_kind["thread"]
    whole = timeline(thread, 0, tracks["t_max"], 1)
    assert whole["kind"] == "buckets" and whole["buckets"], whole["kind"]
    conforms("TimelineBuckets", whole)
    # Finer than the millisecond tiles with too many events to send: buckets of
    # about two pixels made from the events, not millisecond blocks.
    coarse = timeline(thread, 0, tracks["t_max"], 1000)
    busy = [b for b in bucket_rows(coarse) if b["decisions"]]
    t0, t1 = busy[0]["t"], busy[-1]["t"] + coarse["bucket_ns"]
    assert 2 * (t1 - t0) // 20000 < 2**19, (t0, t1)  # the mm burst: tens of ms, finer than the tiles at 20 000 px
    fine = timeline(thread, t0, t1, 20000)
    assert fine["kind"] == "buckets" and fine["bucket_ns"] <= max(1, 2 * (t1 - t0) // 20000), fine["bucket_ns"]
    assert sum(b["decisions"] for b in bucket_rows(fine)) == sum(b["decisions"] for b in busy)
    conforms("TimelineBuckets", fine)
    near = zoomed_in(thread, whole)
    assert near["casts"] and near["ops"]
    assert {c["maker"] for c in near["casts"]} <= {"autocast", "autocast_backward", "autograd", "user"}, near["casts"][0]
    assert "autocast" in {c["maker"] for c in near["casts"]}
    conforms("TimelineEvents", near)
    near = in_full(near)
    details = [("cast", near["casts"][0]), ("op", near["ops"][0])]
    if with_kernels:
        gpu = by_kind["gpu"]
        kernels = in_full(zoomed_in(gpu, timeline(gpu, 0, tracks["t_max"], 1)))
        assert kernels["kernels"]
        details.append(("kernel", kernels["kernels"][0]))
    for kind, event in details:
        detail = viewer.api(f"/api/event?run={rid}&agent={urllib.parse.quote(event['agent_id'])}&seq={event['seq']}")
        assert detail["kind"] == kind
        # The lane's event, completed as the page does, is the event in full.
        expected = dict(event)
        location = expected.pop("location", None)
        assert {k: detail[k] for k in expected} == expected
        if location is not None:
            assert {k: detail["location"][k] for k in location} == location
        conforms("EventAnswer", detail)
        conforms({"cast": "CastDetail", "op": "OpDetail", "kernel": "KernelDetail"}[kind], detail)
    # A weight's cast names its module and parameter, in the lane and in full.
    [cast, *_] = [c for c in near["casts"] if c["arg"] == "weight"]
    assert cast["module"].startswith("<") and cast["parameter"] == "weight", cast  # the job's model, or a layer of it
    detail = viewer.api(f"/api/event?run={rid}&agent={urllib.parse.quote(cast['agent_id'])}&seq={cast['seq']}")
    assert (detail["module"], detail["parameter"]) == (cast["module"], "weight"), detail
    # Thread and GPU lanes in one request, as the page asks.
    assert len(joint_lanes_equal_single_lanes(viewer, rid)) == len(by_kind)
    counters = viewer.api(f"/api/counters?run={rid}&t0=0&t1={tracks['t_max'] + 10**9}&points=50")
    assert counters["steps"] and counters["cache"]
    conforms("CountersAnswer", counters)
    conforms("FindingsAnswer", viewer.api(f"/api/findings?run={rid}"))
    sites = viewer.api(f"/api/sites?run={rid}")
    assert sites["sites"]
    conforms("SitesAnswer", sites)
    modules = viewer.api(f"/api/modules?run={rid}")
    assert modules["available"] and modules["modules"], modules
    conforms("ModulesAnswer", modules)
    conforms("NumericsAnswer", viewer.api(f"/api/numerics?run={rid}"))
    for path, status in [("/api/tracks?run=no-such-run", 404), ("/api/modules?run=no-such-run", 404), ("/api/modules", 400), (f"/api/timeline?run={rid}&tracks=x&t0=0&t1=1&px=0", 400),
                         ("/api/runs", 401)]:
        response, body = viewer.get(path, token=status != 401)
        assert response.status == status, (path, response.status)
        conforms("ErrorAnswer", json.loads(body))


def test_numerics_answer_has_the_scale_its_skipped_steps_and_the_overflowing_line(tmp_path):
    """A GradScaler loop whose fc1 overflows every 7th batch (scaler_skips.py
    spikes): /api/numerics has its scale with the 5 skipped steps, halving
    each time, and a mark at fc1's line over the window that saw it."""
    scenario = REPO / "tests" / "integration" / "scenarios" / "scaler_skips.py"
    result = subprocess.run([str(CASTSCOPE), "run", "--out", str(tmp_path / "out"), "--run-id", "spikes", "--",
                             sys.executable, str(scenario), "spikes"], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    v = Viewer(tmp_path, "view", "--db", str(tmp_path / "out" / "castscope.db"))
    try:
        answer = v.api("/api/numerics?run=spikes")
        conforms("NumericsAnswer", answer)
        assert not answer["truncated"]
        [scaler] = answer["scalers"]
        assert scaler["updates_total"] == 40 and scaler["skipped_total"] == 5
        assert scaler["location"]["line"] == line_of(scenario.read_text(), "scaler.update()")
        skipped = [p for p in scaler["points"] if p["found_inf"]]
        assert [p["scale"] for p in skipped] == [128, 64, 32, 16, 8]
        assert scaler["points"][0]["scale"] == 256 and scaler["points"][-1]["updates"] == 40
        assert [p["t"] for p in scaler["points"]] == sorted(p["t"] for p in scaler["points"])
        fc1 = line_of(scenario.read_text(), "h = self.fc1(x)")
        marks = [m for m in answer["marks"] if m["location"]["line"] == fc1]
        assert marks and all(m["kind"] == "op_output" and m["nonfinite"] > 0 for m in marks), answer["marks"]
        assert all(m["op"] == "aten::linear" and m["src"] == "float16" and m["t0"] <= m["t1"] for m in marks)
        response, body = v.get("/api/numerics?run=no-such-run")
        assert response.status == 404
        conforms("ErrorAnswer", json.loads(body))
    finally:
        v.stop()


# A second thread when the agent has rings for one: its 100 mm calls are
# dropped (2 casts and an op each, and the op probe's record), between the
# main thread's events before and after it.
LOSSES_JOB = """
import sys, threading
import torch
import castscope
castscope.attach(collector=sys.argv[1], run_id="losses-run", max_threads=1, events_path=sys.argv[2])
a, b = torch.randn(8, 8), torch.randn(8, 8)
def work():
    with torch.autocast("cpu", dtype=torch.bfloat16):
        for _ in range(100):
            torch.mm(a, b)
work()
thread = threading.Thread(target=work)
thread.start()
thread.join()
work()
castscope.detach()
"""


def test_tracks_mark_where_events_were_lost(tmp_path):
    """Every dropped event is placed on the timeline: /api/tracks' losses add
    up to the agent's drops, within the run's time."""
    ready = tmp_path / "collector.addr"
    v = Viewer(tmp_path, "serve", "--db", str(tmp_path / "losses.db"), "--listen", "127.0.0.1:0", "--ready-file", str(ready))
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert time.monotonic() < deadline and v.process.poll() is None, "the collector did not start"
            time.sleep(0.02)
        job = tmp_path / "job.py"
        job.write_text(LOSSES_JOB)
        result = subprocess.run([sys.executable, str(job), ready.read_text().strip(), str(tmp_path / "events.jsonl")],
                                capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stderr
        deadline = time.monotonic() + 120
        while not all(a["finished"] for r in v.api("/api/runs")["runs"] for a in r["agents"]):
            assert time.monotonic() < deadline, "the job's batches did not all arrive in 120 s"
            time.sleep(0.2)
        [agent] = v.api("/api/runs")["runs"][0]["agents"]
        assert agent["events_dropped"] == 301, agent
        tracks = v.api("/api/tracks?run=losses-run")
        conforms("TracksAnswer", tracks)
        [process] = tracks["processes"]
        assert process["losses"], process
        assert sum(loss["events_dropped"] for loss in process["losses"]) == 301
        assert all(0 <= loss["t0"] <= loss["t1"] <= tracks["t_max"] for loss in process["losses"]), process["losses"]
    finally:
        v.stop()


def test_export_downloads(schema_run):
    """The export buttons' files: the report, a Perfetto and a Chrome trace of
    the run, each named for it, with no temporary file left behind."""
    viewer, _ = schema_run
    before = set(pathlib.Path(tempfile.gettempdir()).glob("castscope-export-*"))
    rid = urllib.parse.quote("schema-run")
    response, body = viewer.get(f"/api/export?run={rid}&format=report")
    assert response.status == 200, body[:300]
    assert response.getheader("Content-Disposition") == 'attachment; filename="castscope-schema-run-report.json"'
    report = json.loads(body)
    assert report["run"]["run_id"] == "schema-run" and report["totals"]
    response, body = viewer.get(f"/api/export?run={rid}&format=chrome")
    assert response.status == 200 and "chrome-trace.json" in response.getheader("Content-Disposition")
    assert any(e.get("cat") == "castscope.cast" for e in json.loads(body)["traceEvents"])
    response, body = viewer.get(f"/api/export?run={rid}&format=perfetto")
    assert response.status == 200 and response.getheader("Content-Disposition").endswith('.perfetto-trace"')
    assert len(body) > 1000
    response, body = viewer.get(f"/api/export?run={rid}&format=sqlite")
    assert response.status == 400 and b"expected report, perfetto or chrome" in body
    response, body = viewer.get("/api/export?run=no-such-run&format=chrome")
    assert response.status == 404, body[:300]
    response, body = viewer.get(f"/api/export?run={rid}&format=report", token=False)
    assert response.status == 401
    assert set(pathlib.Path(tempfile.gettempdir()).glob("castscope-export-*")) == before


def test_crafted_strings_come_back_as_data(tmp_path):
    """The API returns agent strings verbatim in JSON (the page renders them
    as text; ui/tests checks that no script runs)."""
    db = tmp_path / "crafted.db"
    write_crafted_run(db)
    v = Viewer(tmp_path, "view", "--db", str(db))
    try:
        run = v.api("/api/runs")["runs"][0]
        assert run["run_id"] == '<script>window.__xss="run"</script>'
        response, body = v.get("/api/runs")
        assert response.getheader("Content-Type") == "application/json"
        findings = v.api(f"/api/findings?run={urllib.parse.quote(run['run_id'])}")["findings"]
        assert findings and findings[0]["kind"] == "stale-cache-hit"
        # The Runs page's counts: the run's findings by severity.
        assert run["findings"]["critical"] == sum(f["severity"] == "critical" for f in findings) > 0
        assert sum(run["findings"].values()) == len(findings)
        # A finding with sites and evidence: the report's, as the schema says.
        conforms("FindingsAnswer", {"findings": findings})
        conforms("RunsAnswer", v.api("/api/runs"))
        conforms("SitesAnswer", v.api(f"/api/sites?run={urllib.parse.quote(run['run_id'])}"))
    finally:
        v.stop()


def _sse_events(host: str, port: int, token: str, run: str, seconds: float, out: list, stop: threading.Event,
                subscribed: threading.Event | None = None):
    connection = http.client.HTTPConnection(host, port, timeout=seconds + 5)
    connection.request("GET", f"/api/live?run={urllib.parse.quote(run)}", headers={"Authorization": f"Bearer {token}"})
    response = connection.getresponse()
    assert response.getheader("Content-Type").startswith("text/event-stream")
    if subscribed is not None:
        subscribed.set()  # the collector subscribes before it sends the headers
    event = None
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not stop.is_set():
        line = response.fp.readline().decode()
        if not line:
            break
        if line.startswith("event: "):
            event = line[7:].strip()
        elif line.startswith("data: "):
            out.append((event, json.loads(line[6:])))
    connection.close()


def test_live_pages_get_casts_while_the_job_trains_and_a_stalled_one_slows_nothing(tmp_path):
    db = tmp_path / "live.db"
    ready = tmp_path / "collector.addr"
    v = Viewer(tmp_path, "serve", "--db", str(db), "--listen", "127.0.0.1:0", "--ready-file", str(ready))
    try:
        while not ready.exists():
            time.sleep(0.02)
        run_id = "live-run"
        # A viewer that connects and never reads: its queue fills, it is skipped.
        stalled = socket.create_connection((v.host, v.port))
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stalled.sendall(f"GET /api/live?run={run_id} HTTP/1.1\r\nHost: 127.0.0.1:{v.port}\r\n"
                        f"Authorization: Bearer {v.token}\r\n\r\n".encode())
        events: list = []
        stop = threading.Event()
        reader = threading.Thread(target=_sse_events, args=(v.host, v.port, v.token, run_id, 120, events, stop))
        reader.start()
        time.sleep(0.3)
        job = tmp_path / "job.py"
        job.write_text(JOB.format(steps=300))
        result = subprocess.run([str(CASTSCOPE), "run", "--collector", ready.read_text().strip(), "--run-id", run_id,
                                 "--no-jsonl", "--out", str(tmp_path / "out"), "--", sys.executable, str(job)],
                                capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stderr
        time.sleep(1.0)
        stop.set()
        reader.join(timeout=30)
        stalled.close()
        batches = [data for event, data in events if event == "batch"]
        assert batches, events[:5]
        for event, data in events:
            conforms({"batch": "LiveBatch", "skipped": "LiveSkipped"}[event], data)
        casts = [c for b in batches for c in b["casts"]]
        assert casts and all(c["location"]["file"] == str(job) for c in casts)
        assert all(b["run_id"] == run_id and b["events"] >= len(b["casts"]) for b in batches)
        # Everything the job recorded was stored, the stalled viewer notwithstanding.
        stored = v.api("/api/runs")["runs"][0]["agents"][0]
        assert stored["events_stored"] == stored["events_recorded"] and stored["finished"]
        assert sum(b["events"] for b in batches) + sum(d["events"] for e, d in events if e == "skipped") \
            == stored["events_stored"]
    finally:
        v.stop()


def _casts_batch(run_id: str, sequence: int, first_seq: int, casts: int) -> bytes:
    """IngestRequest.batch of `casts` casts of aten::mm (a 4x4 float32 -> bfloat16), each a microsecond apart."""
    events = b"".join(
        _field(8, _field(1, _field(1, seq) + _field(2, 1_000_000_000 + seq * 1_000) + _field(3, 1) + _field(8, 1)
                         + _field(9, 1) + _field(10, 3) + _field(11, 1) + _field(12, _varint(4) + _varint(4)) + _field(14, 64)
                         + _field(15, 1) + _field(24, 1)))
        for seq in range(first_seq, first_seq + casts))
    identity = _field(1, run_id) + _field(2, "busy-agent") + _field(3, 4242)
    return _field(2, _field(1, 1) + _field(2, identity) + _field(3, sequence) + _field(5, first_seq + casts - 1)
                  + _field(6, _field(1, 1) + _field(2, "aten::mm")) + events)


def test_a_live_message_under_heavy_ingest_carries_16_casts_not_64(tmp_path):
    """One run and agent's message of 5 000 events or more (heavy ingest)
    carries its 16 newest casts; a lighter one its 64 newest."""
    ready = tmp_path / "collector.addr"
    v = Viewer(tmp_path, "serve", "--db", str(tmp_path / "busy.db"), "--listen", "127.0.0.1:0",
               "--ready-file", str(ready))
    run_id = "busy-run"
    events: list = []
    stop, subscribed = threading.Event(), threading.Event()
    reader = threading.Thread(target=_sse_events, args=(v.host, v.port, v.token, run_id, 60, events, stop, subscribed),
                              daemon=True)
    try:
        deadline = time.monotonic() + 30
        while not ready.exists():
            assert v.process.poll() is None and time.monotonic() < deadline, "collector not ready"
            time.sleep(0.02)
        reader.start()
        assert subscribed.wait(timeout=30), "no live stream"
        hello = _field(1, _field(1, 1) + _field(2, "busy-agent"))
        with grpc.insecure_channel(ready.read_text().strip()) as channel:
            for sequence, first, casts in ((1, 1, 6000), (2, 6001, 200)):
                call = channel.stream_stream("/castscope.v1.Ingest/Stream")
                responses = list(call(iter([hello, _casts_batch(run_id, sequence, first, casts)]), timeout=30))
                assert len(responses) == 2, responses  # Welcome, then the batch's acknowledgement (it is stored)
                deadline = time.monotonic() + 30
                while sum(data["events"] for event, data in events if event == "batch") < first + casts - 1:
                    assert time.monotonic() < deadline, events
                    time.sleep(0.02)
    finally:
        stop.set()
        v.stop()  # ends the event stream the reader waits on
        if reader.ident is not None:
            reader.join(timeout=30)
    assert not reader.is_alive()
    batches = [data for event, data in events if event == "batch"]
    for b in batches:
        conforms("LiveBatch", b)
    assert [(b["events"], len(b["casts"])) for b in batches] == [(6000, 16), (200, 64)]
    assert [c["seq"] for c in batches[0]["casts"]] == list(range(5985, 6001))  # the newest


def _interruptible() -> None:
    """Ctrl-C as at a terminal: a suite started in the background by a shell
    without job control inherits SIGINT ignored, and so would castscope run."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_castscope_run_serves_the_ui_dir_it_is_given(tmp_path):
    ui = tmp_path / "my-ui"
    ui.mkdir()
    (ui / "index.html").write_text("<!doctype html><title>my castscope ui</title>")
    job = tmp_path / "job.py"
    job.write_text(JOB.format(steps=1))
    process = subprocess.Popen([str(CASTSCOPE), "run", "--serve", "--ui-dir", str(ui), "--out", str(tmp_path / "out"),
                                "--", sys.executable, str(job)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True,
                               preexec_fn=_interruptible)
    try:
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(iter(process.stderr.readline, "")), daemon=True)
        reader.start()
        deadline = time.monotonic() + 300
        # Asked once the job has ended (an interrupt while it runs would reach the job too).
        while not any("still serving the viewer at" in line for line in lines):
            assert process.poll() is None and time.monotonic() < deadline, "".join(lines)
            time.sleep(0.1)
        url = urllib.parse.urlparse(next(line for line in lines if "viewer at" in line).split("viewer at ")[1].split()[0])
        token = urllib.parse.parse_qs(url.query)["token"][0]
        connection = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
        connection.request("GET", "/", headers={"Authorization": f"Bearer {token}"})
        response = connection.getresponse()
        assert response.status == 200 and b"my castscope ui" in response.read()
    finally:
        os.killpg(process.pid, signal.SIGINT)
        process.wait(timeout=60)


def _processes_with_argument(argument: str) -> list[int]:
    pids = []
    for entry in pathlib.Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and argument.encode() in (entry / "cmdline").read_bytes().split(b"\0"):
                pids.append(int(entry.name))
        except OSError:
            pass  # gone meanwhile
    return pids


def test_a_killed_castscope_run_leaves_no_collector_behind(tmp_path):
    """kill -9 of `castscope run --serve` while it serves: its collector (its own
    session, so a terminal's Ctrl-C does not reach it) stops too, and the run it
    stored stays readable."""
    job = tmp_path / "job.py"
    job.write_text(JOB.format(steps=1))
    db = tmp_path / "out" / "castscope.db"
    process = subprocess.Popen([str(CASTSCOPE), "run", "--serve", "--out", str(tmp_path / "out"), "--run-id", "killed",
                                "--", sys.executable, str(job)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(process.stderr.readline, "")), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 300
        while not any("still serving the viewer at" in line for line in lines):
            assert process.poll() is None and time.monotonic() < deadline, "".join(lines)
            time.sleep(0.1)
        [collector] = _processes_with_argument(str(db))
        process.kill()
        process.wait(timeout=60)
        deadline = time.monotonic() + 30
        while collector in _processes_with_argument(str(db)):
            assert time.monotonic() < deadline, f"the collector (pid {collector}) outlived its killed castscope run by 30 s"
            time.sleep(0.1)
    finally:  # nothing left running whatever failed
        for pid in [process.pid, *_processes_with_argument(str(db))]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        process.wait(timeout=60)
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as connection:
        assert connection.execute("SELECT count(*) FROM casts").fetchone()[0] > 0


@pytest.mark.parametrize("extra", [["--ui-dir", "{tmp}/no-such-ui"], ["--collector", "127.0.0.1:1", "--ui-dir", "{tmp}"]])
def test_castscope_run_refuses_a_ui_dir_it_cannot_serve(tmp_path, extra):
    (tmp_path / "index.html").write_text("<title>ui</title>")
    result = subprocess.run([str(CASTSCOPE), "run", "--out", str(tmp_path / "out"),
                             *[arg.format(tmp=tmp_path) for arg in extra], "--", sys.executable, "-c", "pass"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    assert "--ui-dir" in result.stderr
