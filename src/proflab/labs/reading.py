"""Reading a lab's manifest, and checking every key of it against the vocabulary (``labs.keys``).

A mistake in a manifest is the kit's, not the learner's: it is refused when the manifest is read, with the
file, the table and key, what is expected and what was found, every problem of the file at once. It never
shows up later as a traceback, a learner's failed check, or a check that passes a slower fix.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

from .. import paths
from ..vocabulary import Problems, Table, got
from . import keys as k
from .model import (DEVICES, GATE_WORKLOAD, Answer, Audit, Distributed, Drill, Evidence, Gating, Grading, Lab,
                    ManifestError, Profiling, ResultRule, Storage, Workload)


def shown(manifest: Path) -> str:
    """A manifest's path as messages show it: relative to the kit's root when inside it."""
    path = Path(manifest).resolve()
    try:
        return path.relative_to(paths.root()).as_posix()
    except ValueError:
        return paths.display(path)


def _format(data: dict, p: Problems) -> bool:
    """Whether the manifest is of a format this kit reads; said when it is not (nothing else is read then)."""
    given = data.get("format")
    if isinstance(given, int) and not isinstance(given, bool) and given > k.FORMAT:
        p.add("", f"format = {given}: this manifest is written for a later proflab, which reads format {given}; "
                  f"this one reads format {k.FORMAT}. Upgrade the kit (`pip install -U proflab`)")
        return False
    return True


def _grading(table: dict, p: Problems) -> Grading | None:
    good = p.table(table, k.GRADING)
    if len(good) != len(table):
        return None
    grading = Grading(**{key: float(value) for key, value in good.items()})
    if grading.max_score <= 0:
        p.add("grading", "gives no points at all; give at least one check a point")
        return None
    return grading


def _evidences(given: dict | list, p: Problems) -> tuple[Evidence, ...]:
    """The lab's evidences: one ``[evidence]`` table, or each table of ``[[evidence]]`` (problems named
    ``[evidence[2]]``, counted from 1, as a reader counts the tables in the file)."""
    if isinstance(given, dict):
        one = _evidence(given, "evidence", p)
        return (one,) if one is not None else ()
    if not given:
        p.add("evidence", "names no evidence: give each bottleneck an [[evidence]] table")
    found, metrics = [], {}
    for n, table in enumerate(given, 1):
        where = f"evidence[{n}]"
        for key in k.FIRST_ONLY if n > 1 else ():
            if key in table:
                p.add(where, f"{key} belongs in the first [[evidence]] only: the work every version does is "
                             f"the lab's, checked once")
        metric = table.get("metric")
        if isinstance(metric, str) and metric in metrics:
            p.add(where, f"metric {metric!r} is graded already by evidence[{metrics[metric]}]: give both "
                         f"bounds in one table")
        if isinstance(metric, str):
            metrics.setdefault(metric, n)
        one = _evidence({key: v for key, v in table.items() if n == 1 or key not in k.FIRST_ONLY}, where, p)
        if one is not None:
            found.append(one)
    return tuple(found) if len(found) == len(given) else ()


def _evidence(table: dict, where: str, p: Problems) -> Evidence | None:
    """One evidence table, every key checked; None (with its problems in ``p``) when it is not valid."""
    before = len(p.lines)
    good = p.table(table, k.evidence(), where)
    if not any(bound in table for bound in k.BOUNDS):
        p.add(where, "has no bound: give it max, min or max_vs_original")
    if "max" in good and "min" in good and good["min"] > good["max"]:
        p.add(where, f"min ({good['min']!r}) is above max ({good['max']!r}): no value can meet both")
    if len(p.lines) > before:
        return None
    return Evidence(**{**good, "work_ops": tuple(good.get("work_ops", ())),
                       "not_a_fix": tuple(good.get("not_a_fix", {}).items()),
                       "allow": tuple((key, float(v)) for key, v in good.get("allow", {}).items())})


def _files(table: dict, folder: Path, p: Problems) -> dict[str, Path]:
    """The lab's files; the original, and a solution the manifest names, must be there."""
    good = p.table(table, k.FILES)
    found = {}
    for key in ("original", "exercise", "solution"):
        if key in table and key not in good:
            continue  # not a file name: said already
        path = folder / good.get(key, k.FILES.keys[key].default)
        found[key] = path
        # The exercise is the learner's (proflab reset makes it again); a lab may have no solution.
        needed = key == "original" or (key == "solution" and key in good)
        if needed and not path.is_file():
            p.add("files", f"{key} names {path.name!r}, which is not a file in {Path(p.where).parent.as_posix()}/")
    # What the kit shows once the lab is passed (proflab debrief): never in the site, where it would be read first
    debrief = folder / good.get("debrief", k.FILES.keys["debrief"].default)
    if "debrief" in good and not debrief.is_file():
        p.add("files", f"debrief names {debrief.name!r}, which is not a file in {Path(p.where).parent.as_posix()}/")
    found["debrief"] = debrief if debrief.is_file() else None
    return found


def _each(top: dict, name: str, table: Table, p: Problems) -> dict[str, dict]:
    """The tables under ``[name]``, one per key (``[results.KEY]``, ``[answers.KEY]``), each checked."""
    found = {}
    for key, spec in (top.get(name) or {}).items():
        if not isinstance(spec, dict):
            p.add(name, f"{key} must be a table, [{name}.{key}] (got {got(spec)})")
            continue
        good = p.table(spec, table, f"{name}.{key}")
        if len(good) == len(spec) and all(need in good for need, key_ in table.keys.items() if key_.required):
            found[key] = good
    return found


def _build(data: dict, folder: Path, p: Problems) -> Lab | None:
    """The lab that ``data`` describes, or None with every problem in ``p``."""
    if not _format(data, p):
        return None
    gate_lab = isinstance(data.get("gate"), dict)  # lab 7: no pipeline, so no workload, results or speed-up
    top_keys = dict(k.TOP.keys)
    if gate_lab:
        for name in ("workload", "results"):
            top_keys[name] = replace(top_keys[name], required=False)
    top = p.table(data, k.TOP, keys=top_keys)
    files = _files(top["files"], folder, p) if "files" in top else {}
    workload = p.table(top["workload"], k.WORKLOAD) if "workload" in top else {}

    if "results" in top and not top["results"]:
        p.add("results", "names no values: give each value the pipeline yields a [results.NAME] table")
    rules = [ResultRule(key=key, **good) for key, good in _each(top, "results", k.RESULT, p).items()]

    evidences = _evidences(top["evidence"], p) if "evidence" in top else ()

    speedup = p.table(top["speedup"], k.SPEEDUPS) if "speedup" in top else {}
    overhead = p.table(top["overhead"], k.OVERHEADS) if "overhead" in top else {}
    leaner = p.table(top["memory"], k.PEAK_SHARES) if "memory" in top else {}
    gating = p.table(top["gate"], k.GATE) if gate_lab else None
    if gating and "pipeline" in gating and not (folder / gating["pipeline"]).is_file():
        p.add("gate", f"pipeline names {gating['pipeline']!r}, which is not a file in "
                      f"{Path(p.where).parent.as_posix()}/")
    timing = p.table(top["timing"], k.TIMING) if "timing" in top else {}
    if not gate_lab and sum(key in top for key in ("speedup", "overhead", "memory")) != 1:
        p.add("", "give one of [speedup] (how much faster a fix must be), [overhead] (how little slower "
                  "a profiled version may be) or [memory] (how much less memory a fix may use at its peak)")
    profiling = p.table(top["profile"], k.PROFILE) if "profile" in top else None
    if profiling is None and "evidence" not in top and not gate_lab:
        p.add("", "[evidence] is missing: it says what the trace of a good fix shows")
    given_steps = workload.get("profile_steps")
    if profiling is None and given_steps is not None and given_steps < 2:
        p.add("workload", f"profile_steps must be an integer, 2 or more (the checker leaves out the first "
                          f"profiled step) (got {given_steps})")
    if profiling is not None and given_steps:
        p.add("workload", f"profile_steps must be 0 in a lab whose learner profiles ([profile]): the kit "
                          f"does not profile it (got {given_steps})")
    kinds = [f"[{name}]" for name in ("gate", "profile", "distributed") if name in top]
    if len(kinds) > 1:
        p.add("", f"{' and '.join(kinds)} cannot go together: a lab's exercise is a gate's settings ([gate]), a "
                  "pipeline that profiles itself ([profile]), or a pipeline the kit runs, alone or as a torchrun "
                  "job ([distributed])")
    answers = [Answer(key=key, **good) for key, good in _each(top, "answers", k.answer(), p).items()]
    grading = _grading(top["grading"], p) if "grading" in top else Grading()
    storage = p.table(top["storage"], k.STORAGE) if "storage" in top else None
    drill = p.table(top["drill"], k.DRILL) if "drill" in top else None
    audit = p.table(top["audit"], k.audit()) if "audit" in top else {}
    distributed = p.table(top["distributed"], k.DISTRIBUTED) if "distributed" in top else None
    for key in (*(distributed or {}).get("same_on_every_rank", ()), *(distributed or {}).get("own_on_each_rank", ())):
        if key not in {rule.key for rule in rules}:
            p.add("distributed", f"names '{key}', which is not one of the lab's [results]")

    if p.lines:
        return None
    return Lab(
        number=top["number"],
        name=top["name"],
        title=top["title"],
        summary=top["summary"],
        folder=folder,
        original=files["original"],
        exercise=files["exercise"],
        solution=files["solution"],
        debrief=files.get("debrief"),
        original_sha256=top["files"]["original_sha256"].lower(),
        workload=Workload(**workload) if not gate_lab else GATE_WORKLOAD,
        results=tuple(rules),
        evidence=evidences[0] if evidences else None,
        evidences=evidences,
        thresholds={device: float(value) for device, value in speedup.items()},
        hints=tuple(top.get("hints", ())),
        fix_words=tuple(top.get("fix_words", ())),
        docs=top.get("docs", ""),
        data=top.get("data", ""),
        grading=grading,
        storage=Storage(**storage) if storage is not None else None,
        drill=Drill(bottleneck=drill["bottleneck"], parts=tuple(drill.get("parts", ())),
                    operator_words=tuple(drill.get("operator_words", ()))) if drill and "bottleneck" in drill else None,
        audit=Audit(allow=tuple(audit.get("allow", ())), refuse=tuple(audit.get("refuse", ()))),
        profiling=Profiling(labels=tuple(profiling["labels"]), max_steps=profiling["max_steps"],
                            where=profiling.get("where", ""), kit_steps=profiling.get("kit_steps", 0))
        if profiling is not None else None,
        answers=tuple(answers),
        overhead={device: float(value) for device, value in overhead.items()},
        leaner={device: float(value) for device, value in leaner.items()},
        distributed=Distributed(nproc=distributed["nproc"],
                                same_on_every_rank=tuple(distributed.get("same_on_every_rank", ())),
                                own_on_each_rank=tuple(distributed.get("own_on_each_rank", ())))
        if distributed is not None and "nproc" in distributed else None,
        gating=Gating(lab=str(gating["lab"]), fix=gating["fix"], fix_sha256=gating["fix_sha256"].lower(),
                      regression=gating["regression"], cause=gating["cause"], settings=tuple(gating["settings"]),
                      limits={key: (float(a), float(b)) for key, (a, b) in gating.get("limits", {}).items()},
                      where=gating.get("where", ""), pipeline=gating.get("pipeline", ""))
        if gating and len(gating) >= 6 else None,
        timing={device: figure for device, figure in timing.items() if device in DEVICES},
        timing_why=timing.get("why", ""),
        compile_credit=bool(timing.get("compile", False)),
    )


def load(folder: Path) -> Lab:
    """The lab in ``folder``, from its ``lab.toml``; ManifestError lists every problem of the file, one a line."""
    folder = Path(folder)
    manifest = folder / "lab.toml"
    where = shown(manifest)
    try:
        text = manifest.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ManifestError(f"{where}: cannot read it: {getattr(e, 'strerror', None) or e}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ManifestError(f"{where}: not valid TOML: {e}") from None
    problems = Problems(where)
    lab = _build(data, folder, problems)
    if lab is None:
        raise ManifestError("\n".join(problems.lines))
    return lab

