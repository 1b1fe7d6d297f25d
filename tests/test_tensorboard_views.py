"""What a learner sees in TensorBoard after ``proflab check 1``, through the real server's HTTP API.

One TensorBoard serves the runs a real check wrote (the original and the
reference fix). The profiler plugin must show the DataLoader share the kit
measured, and TensorBoard's own dashboards (which need no network) must carry
the step times, the checker's report and the time-breakdown charts.
"""

from __future__ import annotations

import gzip
import json
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from conftest import explain
from proflab.viewing import tensorboard
from test_tensorboard import free_port

RUNS = {"original": "01-dataloader/original", "learner": "01-dataloader/reference"}


@pytest.fixture(scope="module")
def server(kit, solution_check):
    code, report = solution_check
    assert code == 0, explain(report)
    port = free_port()
    proc = tensorboard.start(kit.root / "runs", port=port)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # the plugin parses traces in the background
        runs = fetch_json(base, "/data/plugin/pytorch_profiler/runs")
        if not runs["loading"] and set(RUNS.values()) <= set(runs["runs"]):
            break
        time.sleep(1)
    yield base, report
    tensorboard.stop(proc)


def fetch(base: str, path: str, **params) -> bytes:
    url = base + path + ("?" + urllib.parse.urlencode(params) if params else "")
    with urllib.request.urlopen(url, timeout=60) as response:
        return response.read()


def fetch_json(base: str, path: str, **params):
    return json.loads(fetch(base, path, **params))


def profile_params(base: str, run: str) -> dict[str, str]:
    worker = fetch_json(base, "/data/plugin/pytorch_profiler/workers", run=run, view="Overview")[0]
    span = fetch_json(base, "/data/plugin/pytorch_profiler/spans", run=run, worker=worker)[0]
    return {"run": run, "worker": worker, "span": span}


def overview(base: str, run: str) -> dict:
    return fetch_json(base, "/data/plugin/pytorch_profiler/overview", **profile_params(base, run))


def dataloader_percent(data: dict) -> float:
    parts = data["performance"][0]["children"]
    return next(p["extra"] for p in parts if p["name"] == "DataLoader")


@pytest.mark.parametrize("which", ["original", "learner"])
def test_plugin_overview_shows_the_dataloader_share_the_kit_measured(server, which):
    base, report = server
    kit_share = 100 * report["evidence"][which]["details"]["share"]
    plugin_share = dataloader_percent(overview(base, RUNS[which]))
    assert plugin_share == pytest.approx(kit_share, abs=3.0)
    if which == "original":
        assert plugin_share > 40, "waiting on data is the large majority of the slow step"
    else:
        assert plugin_share < 0.25 * dataloader_percent(overview(base, RUNS["original"]))


def test_plugin_recommends_workers_for_the_original_only(server):
    base, _ = server
    original = overview(base, RUNS["original"])["recommendations"]
    assert "high time cost on input data loading" in original and "num_workers" in original
    # The plugin recommends workers above a 5% DataLoader share. The reference fix usually
    # lands at 1-5% on a 2-core CPU; when a busy machine pushes it over, the advice is right.
    fixed = overview(base, RUNS["learner"])
    assert ("num_workers" in fixed["recommendations"]) == (dataloader_percent(fixed) > 5.0)


def test_record_function_labels_reach_the_operator_and_trace_views(server):
    base, _ = server
    params = profile_params(base, RUNS["original"])
    table = fetch_json(base, "/data/plugin/pytorch_profiler/operation/table", group_by="Operation", **params)
    names = {row["name"] for row in table["data"]}
    assert "train_step" in names, "the lab's own record_function label"
    trace = json.loads(gzip.decompress(fetch(base, "/data/plugin/pytorch_profiler/trace", **params)))
    labels = {e.get("name") for e in trace["traceEvents"] if e.get("cat") == "cpu_op"}
    assert {"train_step", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
            "Optimizer.step#SGD.step"} <= labels


def test_step_time_scalars_overlay_both_versions(server):
    base, report = server
    tags = fetch_json(base, "/data/plugin/scalars/tags")
    for which, run in RUNS.items():
        assert "step_time_ms/01-dataloader" in tags[run]  # one chart per lab
        assert not any(t.startswith("step_time_ms/") and t != "step_time_ms/01-dataloader" for t in tags[run])
        points = fetch_json(base, "/data/plugin/scalars/scalars", run=run, tag="step_time_ms/01-dataloader")
        values = [value for _, _, value in points]
        assert [step for _, step, _ in points] == list(range(len(values)))
        assert values == pytest.approx([1000 * t for t in report["step_times"][which]], rel=1e-5)


def test_the_checker_report_is_a_text_summary(server):
    base, report = server
    tags = fetch_json(base, "/data/plugin/text/tags")
    tag = next(t for t in tags[RUNS["learner"]] if t.startswith("checker_report"))
    text = fetch_json(base, "/data/plugin/text/text", run=RUNS["learner"], tag=tag)[0]["text"]
    assert "Lab 1 · The starved DataLoader: PASSED" in text
    assert f"{report['comparison']['speedup']:.2f}×" in text
    assert "noise" in text
    for title in ("It runs", "Same work, same results", "The bottleneck is gone", "Faster"):
        assert title in text
    assert "DataLoader wait" in text, "the breakdown the plugin cannot draw offline"


@pytest.mark.parametrize("tag", ["where_the_time_went", "step_times"])
def test_charts_are_image_summaries(server, tag):
    base, _ = server
    tags = fetch_json(base, "/data/plugin/images/tags")
    assert tag in tags[RUNS["learner"]]
    sample = fetch_json(base, "/data/plugin/images/images", run=RUNS["learner"], tag=tag, sample=0)[0]
    png = fetch(base, "/data/plugin/images/individualImage?" + sample["query"])
    assert png.startswith(b"\x89PNG") and len(png) > 10_000


def test_the_trace_timeline_tab_serves_traces_offline(server, kit):
    base, report = server
    plugins = fetch_json(base, "/data/plugins_listing")
    assert plugins["proflab_timeline"]["enabled"] and plugins["proflab_timeline"]["tab_name"] == "Trace timeline"
    runs = fetch_json(base, "/data/plugin/proflab_timeline/runs")
    assert set(RUNS.values()) <= set(runs)
    served = json.loads(fetch(base, "/data/plugin/proflab_timeline/trace", run=RUNS["original"]))
    with open(report["traces"]["original"]) as f:
        assert served == json.load(f)
    page = fetch(base, "/data/plugin/proflab_timeline/index.html").decode()
    assert 'src="webcomponents.min.js"' in page and "cdnjs" not in page and "https://" not in page
    assert fetch(base, "/data/plugin/proflab_timeline/webcomponents.min.js").startswith(b"/**")
    assert b"tr-ui-timeline-view" in fetch(base, "/data/plugin/proflab_timeline/trace_viewer_full.html")


@pytest.mark.parametrize("run", ["../../etc", "01-dataloader", "nope/original"])
def test_the_timeline_serves_only_traces_under_the_runs_folder(server, run):
    base, _ = server
    with pytest.raises(urllib.error.HTTPError) as e:
        fetch(base, "/data/plugin/proflab_timeline/trace", run=run)
    assert e.value.code == 404
