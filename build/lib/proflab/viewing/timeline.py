"""A TensorBoard tab that shows the kit's traces as a timeline, with no network.

The PyTorch Profiler plugin's Trace view embeds Chromium's trace viewer
(``trace_viewer_full.html``, shipped inside torch-tb-profiler) but loads the
web-components polyfill that viewer needs from the internet (cdnjs.cloudflare.com). Offline,
that page never renders. This tab serves the same viewer file, read from the
installed plugin at run time (nothing of the plugin is copied), together with
a local copy of that polyfill (``timeline_static/``), and feeds it the trace
files under TensorBoard's log folder.

What makes the tab quick (tests/test_timeline_speed.py, each lab's trace in a real browser, on the
2-core machine, shared: lab 2's 25 MB trace took 3.3 to 6.1 s to a drawn timeline, now 0.9 to 1.5 s;
every other lab's 0.4 to 1.2 s): a trace that the window would keep whole goes out as it is on disk, never parsed
by the server (``loading.fits_window``: parsing took 1 to 7 s while TensorBoard's own plugins loaded
the same runs); the page asks for the trace at once, while the viewer is still loading; the viewer's
2.6 MB file is revalidated by the browser (an ETag), not sent again for every view; and the trace is
imported in one go, not through the viewer's progress dialog, whose stages each waited for the browser
to be idle ("Importing… Creating importers…"). The page's status line says what it waits for meanwhile.

Registered through the ``tensorboard_plugins`` entry point in pyproject.toml.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import re
import zlib
from pathlib import Path

from tensorboard.plugins import base_plugin
from werkzeug import Request, Response, wrappers

STATIC = Path(__file__).resolve().parent / "timeline_static"
TRACE_GLOB = "*.pt.trace.json*"


def viewer_file() -> Path | None:
    """``trace_viewer_full.html`` of the installed torch-tb-profiler, if any."""
    spec = importlib.util.find_spec("torch_tb_profiler")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "static" / "trace_viewer_full.html"
    return path if path.exists() else None


def newest_traces(logdir: Path | None) -> dict[str, Path]:
    """Run name (its folder under the log folder) → its newest trace file. A run whose traces are of
    several workers of a distributed job is listed once per rank, as ``RUN/rankN``: the kit's own
    (``rank0.….pt.trace.json``, ``rank1.…``), and any job's whose traces say which rank wrote them
    (``distributedInfo``: a DDP job profiled with ``tensorboard_trace_handler``'s default worker names,
    ``<host>_<pid>``), each rank's newest trace. Several workers that are no job's ranks (one script run
    twice into the same folder) are one run: its newest trace."""
    if logdir is None or not logdir.is_dir():
        return {}
    newest: dict[tuple[str, str], tuple[float, Path]] = {}
    for trace in logdir.rglob(TRACE_GLOB):
        try:  # a file only: a dangling link or a folder named like a trace hides nothing else
            if not trace.is_file():
                continue
            mtime = trace.stat().st_mtime
        except OSError:
            continue
        key = (trace.parent.relative_to(logdir).as_posix(), worker_of(trace.name))
        if key not in newest or mtime > newest[key][0]:
            newest[key] = (mtime, trace)
    workers: dict[str, set[str]] = {}
    for run, worker in newest:
        workers.setdefault(run, set()).add(worker)
    found: dict[str, tuple[float, Path]] = {}
    ranked = {run: _ranks(run, newest, names) for run, names in workers.items()  # each run's once
              if len(names) > 1 and not all(w.startswith("rank") for w in names)}
    for (run, worker), (mtime, trace) in newest.items():
        if len(workers[run]) > 1 and all(w.startswith("rank") for w in workers[run]):
            found[f"{run}/{worker}"] = (mtime, trace)
        elif ranks := ranked.get(run):
            rank = ranks.get(worker)
            if rank is not None and (f"{run}/{rank}" not in found or mtime > found[f"{run}/{rank}"][0]):
                found[f"{run}/{rank}"] = (mtime, trace)
        elif run not in found or mtime > found[run][0]:
            found[run] = (mtime, trace)
    return {run: trace for run, (_, trace) in sorted(found.items())}


TRACE_SUFFIXES = (".pt.trace.json.gz", ".pt.trace.json")


def worker_of(name: str) -> str:
    """The worker that wrote a trace, from its file name: ``tensorboard_trace_handler`` names a file
    ``<worker>.<time>.pt.trace.json[.gz]``, and the default worker, ``<host>_<pid>``, may hold dots
    (``ip-10-0-0-5.ec2.internal_4242``)."""
    stem = next((name[:-len(s)] for s in TRACE_SUFFIXES if name.endswith(s)), name)
    worker, _, stamp = stem.rpartition(".")
    return worker if worker and stamp.isdigit() else stem.split(".", 1)[0]


def _ranks(run: str, newest: dict[tuple[str, str], tuple[float, Path]], workers: set[str]) -> dict[str, str]:
    """Worker → ``rankN`` for a run whose workers' newest traces were written by two ranks or more of a
    distributed job, as their ``distributedInfo`` says; {} otherwise."""
    ranks = {}
    for worker in workers:
        rank = trace_rank(newest[(run, worker)][1])
        if rank is not None:
            ranks[worker] = f"rank{rank}"
    return ranks if len(set(ranks.values())) > 1 else {}


DISTRIBUTED_RANK = re.compile(rb'"distributedInfo"\s*:\s*\{[^{}]*?"rank"\s*:\s*(\d+)')
HEAD_BYTES = 16384  # the profiler writes distributedInfo among the first lines, before the events
_rank_cache: dict[tuple[str, float, int], int | None] = {}


def trace_rank(path: Path) -> int | None:
    """The rank of the distributed job that wrote the trace at ``path`` (its ``distributedInfo``), read from
    the head of the file only; None for a trace of no job, or one that cannot be read."""
    try:
        st = path.stat()
        key = (str(path), st.st_mtime, st.st_size)
        if key in _rank_cache:
            return _rank_cache[key]
        opener = gzip.open if path.name.endswith(".gz") else open
        with opener(path, "rb") as f:
            head = f.read(HEAD_BYTES)
    except (OSError, EOFError, zlib.error):
        return None
    found = DISTRIBUTED_RANK.search(head)
    rank = int(found.group(1)) if found else None
    if len(_rank_cache) > 256:
        _rank_cache.clear()
    _rank_cache[key] = rank
    return rank


def recommended_run(logdir: Path) -> str | None:
    """The run a learner should open first, by the name the tabs list it under: the one they made last (the
    kit's progress file says which; a distributed job's first rank), else the newest trace's, however deep
    its folder (a gate's ``07-gate/regression/candidate``); None when there is none. Odd state (a progress
    file of another shape, a trace deleted meanwhile) falls back, never raises for it."""
    from .. import progress

    listed = newest_traces(logdir)
    last = progress.last_run()
    if isinstance(last, dict) and all(isinstance(last.get(key), str) and last[key] for key in ("lab", "run")):
        name = f"{last['lab']}/{last['run']}"
        found = name if name in listed else next((r for r in listed if r.startswith(name + "/")), None)
        if found is not None:
            return found
    newest = None
    for run, trace in listed.items():
        try:
            mtime = trace.stat().st_mtime
        except OSError:  # gone meanwhile, a broken link
            continue
        if newest is None or mtime > newest[0]:
            newest = (mtime, run)
    return None if newest is None else newest[1]


def open_route(logdir: Path | None):
    """``/open``: the run a tab shows first (``recommended_run``)."""

    @wrappers.Request.application
    def serve(request: Request) -> Response:
        try:
            run = recommended_run(logdir) if logdir is not None else None
        except Exception:  # a tab still opens, on its first run
            run = None
        return Response(json.dumps({"run": run}), content_type="application/json")

    return serve


class OfflineTab(base_plugin.TBPlugin):
    """What the kit's tabs share: a page of their own (``STATIC``), and the runs under the log folder."""

    TAB_NAME = ""
    STATIC = STATIC

    def __init__(self, context: base_plugin.TBContext):
        self.logdir = Path(context.logdir).resolve() if context.logdir else None

    def frontend_metadata(self):
        return base_plugin.FrontendMetadata(es_module_path="/index.js", tab_name=self.TAB_NAME, disable_reload=True)

    def is_active(self) -> bool:
        return bool(self._runs())

    def _runs(self) -> dict[str, Path]:
        return newest_traces(self.logdir)

    def _static(self, name: str, content_type: str):
        folder = self.STATIC

        @wrappers.Request.application
        def serve(request: Request) -> Response:
            return revalidated(request, folder / name, content_type)

        return serve


def revalidated(request: Request, path: Path, content_type: str) -> Response:
    """``path``, which the browser keeps and asks for again only to learn whether it changed (an ETag of its
    size and time): a view after the first gets a 304, not the file again (the viewer's is 2.6 MB)."""
    st = path.stat()
    response = Response(path.read_bytes(), content_type=content_type)
    response.set_etag(f"{st.st_size:x}-{st.st_mtime_ns:x}")
    response.headers["Cache-Control"] = "no-cache"
    return response.make_conditional(request)


class TimelinePlugin(OfflineTab):
    plugin_name = "proflab_timeline"
    TAB_NAME = "Trace timeline"

    def get_plugin_apps(self):
        return {
            "/index.js": self._static("index.js", "application/javascript"),
            "/index.html": self._static("index.html", "text/html"),
            "/webcomponents.min.js": self._static("webcomponents.min.js", "application/javascript"),
            "/trace_viewer_full.html": self._viewer,
            "/runs": self._runs_route,
            "/open": open_route(self.logdir),
            "/trace": self._trace_route,
            "/about": self._about_route,
        }

    @wrappers.Request.application
    def _viewer(self, request: Request) -> Response:
        path = viewer_file()
        if path is None:
            return Response("torch-tb-profiler is not installed: its trace viewer is missing", status=404)
        return revalidated(request, path, "text/html")

    @wrappers.Request.application
    def _runs_route(self, request: Request) -> Response:
        return Response(json.dumps(list(self._runs())), content_type="application/json")

    @wrappers.Request.application
    def _trace_route(self, request: Request) -> Response:
        trace = self._runs().get(request.args.get("run", ""))
        if trace is None:  # only files found under the log folder are ever served
            return Response("no such run", status=404)
        from . import loading

        try:
            if loading.about(trace)["large"] and not loading.fits_window(trace):
                return Response(loading.load(trace).body(), content_type="application/json")  # a window of its
                # steps, parsed once (loading); a trace the window would keep whole goes out as it is, unparsed
            data = trace.read_bytes()
            if trace.suffix == ".gz":
                data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error, ValueError) as e:  # a .gz cut short, a file gone meanwhile
            return Response(f"this trace cannot be read ({type(e).__name__}: {e}): profile the run again",
                            status=422, content_type="text/plain; charset=utf-8")
        return Response(data, content_type="application/json")

    @wrappers.Request.application
    def _about_route(self, request: Request) -> Response:
        from . import loading

        trace = self._runs().get(request.args.get("run", ""))
        if trace is None:
            return Response("no such run", status=404)
        about = loading.about(trace)
        try:  # a large trace the window keeps whole is sent as it is: nothing cut, no wait to announce
            about["whole"] = not about["large"] or loading.fits_window(trace)
        except (OSError, EOFError, zlib.error):  # the trace route says what is wrong with it
            about["whole"] = False
        if about["whole"]:
            about["seconds"] = 0
        return Response(json.dumps(about), content_type="application/json")
