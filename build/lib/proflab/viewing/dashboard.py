"""The kit's profiler views, as a TensorBoard tab that needs no network: "Profile".

The PyTorch Profiler plugin's Overview and Operator pages draw with Google
Charts, loaded from the internet, so in a workshop room with no network they
spin forever; its Memory view does not read ``profile_memory`` traces of
torch 2.x. This tab reads the same runs (the newest trace under each run
folder of TensorBoard's log folder) and serves, as JSON for its own page
(``dashboard_static/``, plain HTML and JavaScript, nothing fetched from
elsewhere):

* ``/overview``: step time and where it went (``breakdown``), host reads per
  step (those of the training step apart from those inside data loading), and a
  finding where one part of the step is large: what is large and where; what to
  try, for a lab's own runs, only once the learner asked a hint of that lab or
  passed it (``findings``), for any other trace always;
  a trace that is no lab's run (the learner's own script) gets the findings of
  ``proflab profile`` (``measuring.diagnosis``);
* ``/operators``: the operator table of key_averages (``operators.table``),
  per step or in total;
* ``/diff``: two runs' tables side by side, per step (``operators.diff``), the
  original (or a gate's baseline) *before*, yours (or the candidate) *after*;
  ``/pair`` says which two runs the Diff of a run compares by default (``pair``);
* ``/memory``: for a run profiled with ``profile_memory``, memory allocated
  over the profiled steps, its peak, and the operators that allocate most;
  ``/memory.svg`` draws the curve (matplotlib, on the server).

Registered through the ``tensorboard_plugins`` entry point in pyproject.toml.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from tensorboard.plugins import base_plugin
from werkzeug import Request, Response, wrappers

from ..measuring import breakdown, diagnosis, evidence, operators
from . import loading
from .timeline import OfflineTab, open_route

STATIC = Path(__file__).resolve().parent / "dashboard_static"

HELD = ("What to try is held back for a lab's own runs until you ask for it: proflab hint {lab} (or pass the "
        "lab). Find it from the profile first: what is large, and where.")

# The runs a Diff compares: a reference (the original, a gate's baseline) before, and a version after.
REFERENCES = ("original", "baseline")
VERSIONS = ("yours", "candidate", "reference")


class ProfilePlugin(OfflineTab):
    plugin_name = "proflab_profile"
    TAB_NAME = "Profile"
    STATIC = STATIC

    def __init__(self, context: base_plugin.TBContext):
        super().__init__(context)

    def get_plugin_apps(self):
        return {
            "/index.js": self._static("index.js", "application/javascript"),
            "/index.html": self._static("index.html", "text/html"),
            "/runs": self._json(lambda args: list(self._runs())),
            "/open": open_route(self.logdir),
            "/overview": self._json(lambda args: self._overview(args.get("run", ""))),
            "/about": self._json(lambda args: self._about(args.get("run", ""))),
            "/operators": self._json(lambda args: [r.as_dict() for r in operators.table(
                self._trace(args.get("run", "")), per_step=args.get("per", "step") == "step")]),
            "/pair": self._json(lambda args: dict(zip(("before", "after"),
                                                       pair(list(self._runs()), args.get("run", ""))))),
            "/diff": self._json(lambda args: {
                "before": args.get("before", ""), "after": args.get("after", ""),
                "changes": [c.as_dict() for c in operators.diff(self._trace(args.get("before", "")),
                                                               self._trace(args.get("after", "")))]}),
            "/memory": self._json(lambda args: memory(self._trace(args.get("run", "")))),
            "/memory.svg": self._memory_svg,
        }

    def _loaded(self, run: str) -> tuple[Path, loading.Loaded]:
        path = self._runs().get(run)
        if path is None:  # only traces found under the log folder are ever read
            raise LookupError(f"no run {run!r}")
        return path, loading.load(path)

    def _trace(self, run: str) -> evidence.Trace:
        path, loaded = self._loaded(run)
        return loaded.trace(path)

    def _overview(self, run: str) -> dict[str, Any]:
        path, loaded = self._loaded(run)
        lab = lab_of(run)
        held = lab is not None and not earned(lab)
        return {**overview(loaded.trace(path), reveal=not held, own=lab is None), "window": loaded.window,
                "held": HELD.format(lab=lab.number) if held else None}

    def _about(self, run: str) -> dict[str, Any]:
        path = self._runs().get(run)
        if path is None:
            raise LookupError(f"no run {run!r}")
        return loading.about(path)

    @staticmethod
    def _json(answer):
        @wrappers.Request.application
        def serve(request: Request) -> Response:
            try:
                body = answer(request.args)
            except LookupError as e:
                return Response(json.dumps({"error": str(e)}), status=404, content_type="application/json")
            except (evidence.TraceError, ValueError, TypeError, KeyError, AttributeError, OSError) as e:
                return Response(json.dumps({"error": unreadable(e)}), status=422, content_type="application/json")
            return Response(json.dumps(body), content_type="application/json")

        return serve

    @wrappers.Request.application
    def _memory_svg(self, request: Request) -> Response:
        try:
            found = memory(self._trace(request.args.get("run", "")))
            if not found["recorded"]:
                return Response("this run was profiled without profile_memory", status=404)
            return Response(memory_svg(found), content_type="image/svg+xml")
        except LookupError:
            return Response("no such run", status=404)
        except (evidence.TraceError, ValueError, TypeError, AttributeError, OSError) as e:
            return Response(unreadable(e), status=422, content_type="text/plain; charset=utf-8")


def unreadable(e: Exception) -> str:
    """What a view says of a trace it cannot read (cut short, empty, not JSON, no steps): never a traceback."""
    if isinstance(e, evidence.TraceError):
        return str(e)
    return f"this trace cannot be read ({type(e).__name__}: {e}): profile the run again"


def overview(trace: evidence.Trace, reveal: bool = True, own: bool = False) -> dict[str, Any]:
    """Where a profiled step's time went, and a finding for each part that is large: what and where, and
    what to try where ``reveal``. A trace that is no lab's run (``own``: the learner's own script, profiled
    by ``proflab profile`` or by their own code) gets the findings ``proflab profile`` prints for it."""
    b = breakdown.of(trace)
    reads = evidence.host_reads(trace)
    comm = evidence.allreduce_calls(trace) if b.comm_ms else None
    if own:
        findings = [(f"{f.what} Seen in: {f.where}.", f.cure) for f in diagnosis.diagnose(trace, b).findings]
    else:
        findings = diagnosis.overview_findings(trace, b, reads)
    return {
        "steps": b.steps, "step_ms": b.step_ms, "on_cuda": trace.on_cuda,
        "parts": [{"key": part, "label": breakdown.LABELS[part], "ms": b.host_ms[part], "share": b.share(part)}
                  for part in breakdown.HOST_PARTS],
        "device_busy_ms": b.device_busy_ms,
        # A distributed job's rank: the time its collectives cover, its all-reduce calls and MB per step.
        "comm_ms": b.comm_ms, "comm_share": b.comm_ms / b.step_ms if b.step_ms else 0.0,
        "allreduce_per_step": comm.value if comm else 0.0,
        "allreduce_mb_per_step": comm.details.get("mb_per_step") if comm else None,  # None: shapes not recorded
        # Reads in the training step; those inside data loading (the data set's own code, the DataLoader's
        # __next__) are counted apart: they are not a sync of the step, and not the learner's to change.
        "host_reads_per_step": reads.in_step_per_step, "host_reads": reads.in_step,
        "loading_reads_per_step": reads.in_loading_per_step, "loading_reads": reads.in_loading,
        # Reads inside optimizer.step() (AdamW's step counts): the optimizer's own, shown apart.
        "optimizer_reads_per_step": reads.in_optimizer_per_step, "optimizer_reads": reads.in_optimizer,
        "findings": [{"what": what, "try": cure if reveal else None} for what, cure in findings],
    }


def lab_of(run: str):
    """The lab whose own run ``run`` is (``01-dataloader/yours`` → lab 1), or None for any other trace."""
    from .. import labs

    slug = run.split("/", 1)[0]
    try:
        return next((lab for lab in labs.discover() if lab.slug == slug), None)
    except labs.ManifestError:  # no lab loads: every trace is shown whole
        return None


def earned(lab) -> bool:
    """Whether the learner asked a hint of ``lab`` or passed it: then its runs' findings say what to try."""
    from .. import progress

    entry = progress.entry(lab.name)
    return entry.get("hints_shown", 0) > 0 or entry.get("status") == progress.PASSED


def pair(runs: list[str], run: str) -> tuple[str, str]:
    """The two runs the Diff of ``run`` compares: (before, after), the reference (``original``, or the gate's
    ``baseline``) before and a version (``yours``, the ``candidate``, the ``reference`` fix) after, of the same
    lab and the same worker (rank). ``run`` is one of them; the other is found by swapping its role."""
    parts = run.split("/")
    listed = set(runs)

    def swapped(roles) -> str | None:
        for i, part in enumerate(parts[1:], 1):
            for role in roles:
                other = "/".join([*parts[:i], role, *parts[i + 1:]])
                if other != run and other in listed:
                    return other
        return None

    if any(part in REFERENCES for part in parts[1:]):
        after = swapped(VERSIONS) or next((r for r in runs if r != run and r.split("/")[0] == parts[0]
                                           and not set(r.split("/")[1:]) & set(REFERENCES)), run)
        return run, after
    before = swapped(REFERENCES) or next((r for r in runs if r != run and r.split("/")[0] == parts[0]
                                          and set(r.split("/")[1:]) & set(REFERENCES)), run)
    return before, run


def memory(trace: evidence.Trace) -> dict[str, Any]:
    """Memory allocated over the profiled steps, per device, from the ``[memory]`` events of ``profile_memory``;
    what each step leaves behind, and the operators whose allocations are never freed (``measuring.memory``)."""
    from ..measuring import memory as trace_memory

    return trace_memory.curve(trace)


def memory_svg(found: dict[str, Any]) -> bytes:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 3.2), dpi=100)
    ax = fig.subplots()
    for device, d in found["devices"].items():
        ax.step(d["t_ms"], d["allocated_mb"], where="post", label=f"{device} (peak {d['peak_mb']:.1f} MB)")
        ax.plot([d["peak_t_ms"]], [d["peak_mb"]], "v", color="black")
    for start in found.get("step_starts_ms", []):
        ax.axvline(start, color="#bbbbbb", linewidth=0.8, linestyle=":")
    ax.set_xlabel("ms since the first profiled step (dotted: each step's start)")
    ax.set_ylabel("MB allocated")
    ax.legend(fontsize=8, frameon=False)
    fig.tight_layout()
    out = io.BytesIO()
    fig.savefig(out, format="svg")
    return out.getvalue()
