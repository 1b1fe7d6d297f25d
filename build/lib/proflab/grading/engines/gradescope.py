"""Gradescope: the autograder.zip an instructor uploads, and what its ``run_autograder`` runs.

``bundle`` writes autograder.zip as Gradescope expects it (unpacked at
``/autograder/source``):

    setup.sh          run once, as root, when Gradescope builds the image: venv, bubblewrap, torch's
                      CPU wheels, the kit, the labs' data
    run_autograder    run for every submission, in a fresh container: ``proflab autograder run``
    README.md         for the instructor: machine size, time per submission, what learners see
    autograder.json   the labs it grades, the kit's version, when it was made
    proflab/          the kit, pinned: pyproject.toml, README.md, src/, and the graded labs

``run`` is ``proflab autograder run``: it looks for each graded lab's file in
the submission (named after the lab, or ``labs/<lab>/exercise.py`` in an
uploaded copy of the kit), checks those files one after another as
``proflab grade`` does (every run sandboxed where the container allows it),
and writes Gradescope's results.json: a test per lab and check, with its
points and output, and a test for each lab with no file or with the
exercise unchanged. Whatever happens (a file that does not parse, a run that
hangs, the kit failing), it writes a results.json and exits 0: the
autograder never fails on a learner.
"""

from __future__ import annotations

import io
import json
import os
import stat
import time
import traceback
import zipfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from string import Template
from typing import Any

from ... import __version__, atomic, labs, paths

TEMPLATES = Path(__file__).resolve().parent / "templates"
TORCH_CPU = "https://download.pytorch.org/whl/cpu"  # torch's CPU wheels: a container has no GPU
PYPI = "pypi"  # --torch-index pypi: pip's own index (PyPI's torch is the CUDA build on Linux: gigabytes)
KIT = "proflab"  # the kit's folder in the bundle: /autograder/source/proflab
CONFIG = "autograder.json"
EXECUTABLE = ("setup.sh", "run_autograder")


class BundleError(Exception):
    """The bundle cannot be written as asked (a usage error: the message says what to change)."""


# --- the bundle ------------------------------------------------------------------------------------------

def kit_files(root: Path, graded: list[labs.Lab]) -> list[Path]:
    """The kit's files the bundle carries, relative to ``root``: its package and the graded labs' folders."""
    chosen = {lab.folder.resolve() for lab in graded}
    out = [Path(name) for name in ("pyproject.toml", "README.md") if (root / name).is_file()]
    for top in [root / "src"] + sorted(chosen):
        for path in sorted(top.rglob("*")):
            rel = path.relative_to(root)
            if path.is_file() and "__pycache__" not in rel.parts and path.suffix not in (".pyc", ".pyo") \
                    and not any(part.endswith(".egg-info") for part in rel.parts):
                out.append(rel)
    return out


def _naming(graded: list[labs.Lab]) -> str:
    rows = ["| lab | a file named (any one) | or, in a copy of the kit |", "|---|---|---|"]
    for lab in graded:
        names = f"`{lab.number}.py`, `{lab.name}.py`, `{lab.folder.name}.py`" + \
            (f", `{lab.exercise.name}`" if len(graded) == 1 else "")
        rows.append(f"| {lab.number} {lab.title} | {names} | `labs/{lab.folder.name}/exercise.py` |")
    return "\n".join(rows)


def _figures(root: Path) -> dict[str, Any]:
    try:
        return json.loads((root / "docs" / "figures" / "figures.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _timings(graded: list[labs.Lab], figures: dict[str, Any]) -> tuple[str, str, float]:
    """The README's table of each lab's check time, the machine it was measured on, and the slowest."""
    values, machine = figures.get("values", {}), figures.get("machine", {})
    rows = ["| lab | its check of the reference fix | of the exercise |", "|---|---|---|"]
    slowest = 0.0
    for lab in graded:
        fix, exercise = (values.get(f"lab{lab.number}.check-{w}.took_s") for w in ("solution", "exercise"))
        if fix is None:
            rows.append(f"| {lab.number} {lab.title} | not measured | not measured |")
            slowest = max(slowest, float(lab.workload.budget_s))
            continue
        rows.append(f"| {lab.number} {lab.title} | {fix} s | {exercise} s |")
        slowest = max(slowest, float(fix))
    where = (f"{machine.get('cpu', 'a CPU')}, {machine.get('cores', '?')} cores, torch {machine.get('torch', '?')}, "
             f"{machine.get('date', 'undated')}") if machine else "this kit's reference machine (not measured here)"
    return "\n".join(rows), where, slowest


def local_torch() -> str:
    """This machine's torch release, without its build label (2.14.1+cu130 -> 2.14.1), or "any"."""
    try:
        from importlib.metadata import version

        return version("torch").split("+", 1)[0]
    except Exception:  # noqa: BLE001 - no torch here: leave it to pip
        return "any"


def bundle(graded: list[labs.Lab], out: Path, torch_index: str = TORCH_CPU, root: Path | None = None,
           torch_version: str | None = None) -> list[str]:
    """Write autograder.zip to ``out``; the names it holds. ``torch_version``: the torch release setup.sh
    installs (default: this machine's, where the labs' thresholds hold; "any": pip's choice)."""
    root = (root or paths.root()).resolve()
    if not graded:
        raise BundleError("name the labs to grade: --labs 1 2 3")
    if (out.exists() and out.is_dir()) or out.suffix != ".zip":
        raise BundleError(f"{out}: name a .zip file to write (autograder.zip)")
    owned = paths.kit_owned(out)
    if owned:
        raise BundleError(owned + "; write it somewhere else")
    made = datetime.now(timezone.utc).isoformat(timespec="seconds")
    table, machine, slowest = _timings(graded, _figures(root))
    numbers = " ".join(str(lab.number) for lab in graded)
    torch_version = torch_version or local_torch()
    if torch_version != "any" and not all(part.isdigit() for part in torch_version.split(".")):
        raise BundleError(f"--torch-version {torch_version}: give a release like 2.14.1, or 'any'")
    torch_args = ("" if torch_index == PYPI else f"--index-url {torch_index} ") + \
        ("torch" if torch_version == "any" else f"torch=={torch_version}")
    torch_what = "pip's own index" if torch_index == PYPI else (
        "CPU wheels" if torch_index == TORCH_CPU else f"from {torch_index}")
    limit_min = max(10, int(((slowest * len(graded) * 2) + 60) // 60 + 1))
    torch_what += "" if torch_version == "any" else f", torch {torch_version}"
    fill = dict(version=__version__, made=made, labs=numbers, torch_args=torch_args, torch_what=torch_what,
                naming=_naming(graded), timings=table, machine=machine,
                time_limit=f"{limit_min} minutes for labs {numbers}")
    texts = {name: Template((TEMPLATES / name).read_text(encoding="utf-8")).substitute(fill)
             for name in ("setup.sh", "run_autograder", "README.md")}
    texts[CONFIG] = json.dumps({"labs": [lab.number for lab in graded], "proflab": __version__, "made": made,
                                "torch_index": torch_index, "torch": torch_version}, indent=2) + "\n"
    buffer = io.BytesIO()
    names = []
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as z:
        for name, text in texts.items():
            _add(z, name, text.encode("utf-8"), executable=name in EXECUTABLE)
            names.append(name)
        for rel in kit_files(root, graded):
            _add(z, f"{KIT}/{rel.as_posix()}", (root / rel).read_bytes())
            names.append(f"{KIT}/{rel.as_posix()}")
    from ... import outputs

    outputs.write_bytes(out, buffer.getvalue(), option="--out")  # read back and compared
    return names


def _add(z: zipfile.ZipFile, name: str, data: bytes, executable: bool = False) -> None:
    info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = ((0o755 if executable else 0o644) | stat.S_IFREG) << 16
    z.writestr(info, data)


# --- run_autograder ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Absent:
    """A graded lab with nothing to check: no file for it, or its exercise as handed out."""

    lab: labs.Lab
    why: str
    file: str = ""


def config(root: Path | None = None) -> dict[str, Any]:
    """The bundle's autograder.json (beside the kit's folder), or every lab when there is none."""
    where = (root or paths.root()).parent / CONFIG
    try:
        return json.loads(where.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def learner_of(metadata: Path | None) -> str:
    """Who submitted, from Gradescope's submission_metadata.json: names and emails; "learner" without it."""
    users: Any = []
    if metadata is not None:
        try:
            users = json.loads(Path(metadata).read_text(encoding="utf-8")).get("users") or []
        except (OSError, ValueError, AttributeError):
            users = []
    if not isinstance(users, list):
        users = []
    shown = [str(u.get("email") or u.get("name") or "").strip() for u in users if isinstance(u, dict)]
    return " + ".join(s for s in shown if s) or "learner"


def _names(lab: labs.Lab) -> set[str]:
    return {str(lab.number), f"{lab.number:02d}", lab.name, lab.folder.name, lab.slug}


KIT_DEPTH = 3  # an uploaded copy of the kit: labs/<lab>/exercise.py at most this many folders down


def candidates(submission: Path, lab: labs.Lab, only: bool = False) -> list[Path]:
    """Every file of the submission for ``lab``, in the order the rule reads them: named after it at the top
    of the submission (``exercise.py`` too when it is the only lab graded: ``only``), by name, then the lab's
    exercise in an uploaded copy of the kit (``labs/<lab>/exercise.py``, at most three folders down), the
    shallowest first. Links are listed (to be named, never followed): a linked folder is not searched."""
    suffix = lab.exercise.suffix
    names = _names(lab) | ({lab.exercise.stem} if only else set())
    try:
        top = sorted(p for p in submission.iterdir() if p.suffix == suffix and p.stem in names
                     and (p.is_symlink() or not p.is_dir()))
    except OSError:
        return []
    tail = ("labs", lab.folder.name, lab.exercise.name)
    copies = []
    for here, folders, files in os.walk(submission, followlinks=False, onerror=lambda e: None):
        rel = Path(here).relative_to(submission).parts
        if len(rel) >= KIT_DEPTH + 2:
            folders[:] = []
        if rel[-2:] == tail[:2] and tail[2] in files and len(rel) <= KIT_DEPTH + 2:
            copies.append(Path(here) / tail[2])
    copies.sort(key=lambda p: (len(p.parts), str(p)))
    return top + copies


def locate(submission: Path, lab: labs.Lab, only: bool = False) -> Path | None:
    """The file graded for ``lab`` (``grade.pick``'s rule among ``candidates``), or None."""
    from ..grade import pick, unreadable

    files = [p for p in candidates(submission, lab, only) if not unreadable(p)]
    if not files:
        return None
    return files[pick(files, lab, [_shown(p, submission) for p in files])[0]]


def _shown(path: Path, submission: Path) -> str:
    """The path as written out: a name that is not UTF-8 keeps its readable part (results.json is UTF-8)."""
    rel = path.relative_to(submission).as_posix()
    return rel.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def gather(submission: Path, graded: list[labs.Lab], learner: str):
    """What the submission holds for each graded lab: a ``grade.Found`` of its files to check (and of the
    files named but not graded: links, a second file for a lab), and the labs with nothing to check
    (``Absent``)."""
    from ..grade import Found, Skipped, Submission, pick, unreadable

    if not submission.is_dir():
        why = "no such folder" if not (submission.exists() or submission.is_symlink()) else "not a folder"
        raise SubmissionError(f"the submission {submission}: {why}")
    subs, absent, skipped = [], [], []
    for lab in graded:
        files, links = [], []
        for path in candidates(submission, lab, only=len(graded) == 1):
            why = unreadable(path)
            (links if why else files).append((path, _shown(path, submission), why))
        skipped += [Skipped(shown, why, learner) for _, shown, why in links]
        if not files:
            names = ", ".join(sorted(f"{n}{lab.exercise.suffix}" for n in _names(lab)))
            also = "".join(f"; {shown} is {why}" for _, shown, why in links)
            absent.append(Absent(lab, f"no file for lab {lab.number} in the submission{also}: name it one of "
                                      f"{names}, or submit your copy of the kit with labs/{lab.folder.name}/"
                                      f"{lab.exercise.name}", links[0][1] if links else ""))
            continue
        chosen, others = pick([p for p, _, _ in files], lab, [s for _, s, _ in files])
        skipped += [Skipped(files[i][1], why, learner) for i, why in others.items()]
        path, shown, _ = files[chosen]
        if grade_unchanged(path, lab):
            more = f" ({len(files) - 1} other file(s) for it are unchanged too)" if len(files) > 1 else ""
            absent.append(Absent(lab, f"{shown} is lab {lab.number}'s exercise as handed out: nothing changed yet, "
                                      f"so there is nothing to check{more}. Profile it, fix the bottleneck, then "
                                      "submit again", shown))
            continue
        subs.append(Submission(learner, lab, path, shown))
    return Found(submission, tuple(subs), tuple(skipped)), absent


def grade_unchanged(path: Path, lab: labs.Lab) -> bool:
    from ..grade import _unchanged

    return lab.exercise.is_file() and _unchanged(path, lab)


class SubmissionError(Exception):
    """The submission folder the autograder was given is not there: the autograder's failure, not the
    learner's (no lab is scored)."""


def _absent_tests(a: Absent) -> list[dict[str, Any]]:
    return [{"name": f"Lab {a.lab.number} · {a.lab.title}: not checked", "number": f"{a.lab.number}.0",
             "score": 0.0, "max_score": a.lab.grading.max_score, "status": "failed", "output": a.why,
             "output_format": "text", "tags": [f"lab-{a.lab.number}", "missing"], "visibility": "visible"}]


NOISY = ("Inconclusive means too noisy to call on this machine: re-run it (submit again, or ask for a "
         "regrade); it is not a failure of your fix.")


def results(found, absent: list[Absent], result, sandbox_line: str, learner: str) -> dict[str, Any]:
    """Gradescope's results.json for one submission: the checks graded, and the labs not checked."""
    from ...reporting import grade_formats

    data = json.loads(grade_formats.to_gradescope(result))
    data["tests"] += [t for a in absent for t in _absent_tests(a)]
    data["tests"].sort(key=lambda t: tuple(int(x) for x in t["number"].split(".")))
    lines = [line for line in data["output"].splitlines() if not line.startswith("Nothing was graded")]
    lines += [f"Lab {a.lab.number} · {a.lab.title}: not checked, 0/{a.lab.grading.max_score:g} points: {a.why}"
              for a in absent]
    if any(g.report.verdict == "inconclusive" for g in result.graded):
        lines.append(NOISY)
    data["output"] = "\n".join(lines)
    data["tests"].append({"name": "Sandbox (instructors only)", "status": "passed", "output": sandbox_line,
                          "output_format": "text", "visibility": "hidden", "tags": ["sandbox"]})
    records = []
    for g in result.graded:
        record = g.report.as_dict()
        record.pop("step_times", None)  # every step's time: the record stays small; the timings remain
        records.append({"file": g.submission.shown, "report": record})
    data["extra_data"].update({"learner": learner, "records": records,
                               "absent": [{"lab": a.lab.number, "why": a.why, "file": a.file} for a in absent]})
    return data


def failed_results(why: str, learner: str) -> dict[str, Any]:
    """results.json when the autograder itself failed: said so, no points either way, and how to regrade."""
    return {"score": 0, "output": f"The autograder could not grade this submission: {why}\nThis is the "
                                  "autograder's failure, not yours: your instructor can regrade it.",
            "output_format": "text", "visibility": "visible", "stdout_visibility": "hidden", "tests": [],
            "extra_data": {"proflab": __version__, "learner": learner, "error": why}}


def writable(data: Any) -> Any:
    """``data`` with every string that UTF-8 cannot carry (a file name's undecodable bytes, kept by Python as
    lone surrogates) made readable: those characters become U+FFFD."""
    if isinstance(data, str):
        try:
            data.encode("utf-8")
            return data
        except UnicodeEncodeError:
            return data.encode("utf-8", "surrogateescape" if _escaped(data) else "replace").decode("utf-8", "replace")
    if isinstance(data, dict):
        return {writable(k): writable(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [writable(v) for v in data]
    return data


def _escaped(text: str) -> bool:
    try:
        text.encode("utf-8", "surrogateescape")
        return True
    except UnicodeEncodeError:
        return False


def run(submission: Path, out: Path, metadata: Path | None = None, say=print) -> int:
    """``proflab autograder run``: grade ``submission``, write results.json to ``out``. Always 0 once it is
    written; 3 only when even that cannot be done."""
    started = time.perf_counter()
    learner = learner_of(metadata)
    try:
        from ...running import sandbox
        from .. import grade

        settings = config()
        known = labs.discover()
        wanted = settings.get("labs") or [lab.number for lab in known]
        graded = [labs.resolve(str(n), known) for n in wanted]
        if not graded:
            raise RuntimeError(f"the autograder's kit holds no labs ({paths.labs_dir()})")
        engine = sandbox.engine()
        sandbox_line = ("Runs were sandboxed: " + engine.describe()) if engine.ok else \
            ("Runs were not sandboxed: " + engine.why + ". See the autograder's README, Sandboxing.")
        say(sandbox_line)
        found, absent = gather(Path(submission), graded, learner)
        for a in absent:
            say(f"lab {a.lab.number}: not checked: {a.why}")
        grade.prepare_data(found)
        result = grade.grade(found, on_done=lambda i, n, g: say(
            f"lab {g.report.number}: {g.report.verdict} ({g.submission.shown}, {g.report.duration_s:.0f} s)"))
        data = results(found, absent, result, sandbox_line, learner)
        data["execution_time"] = round(time.perf_counter() - started)
    except SubmissionError as e:  # the autograder's setup, not the learner: no lab is scored 0 for it
        say(f"proflab: {e}")
        data = failed_results(str(e), learner)
    except BaseException as e:  # noqa: BLE001 - the autograder never fails on a submission: it says why
        if isinstance(e, KeyboardInterrupt):
            why = "the autograder was stopped (Gradescope's time limit, or a signal) before it was done"
        else:
            why = f"{type(e).__name__}: {e}"
        say(traceback.format_exc())
        data = failed_results(why, learner)
    data = writable(data)  # whatever the submission's names hold, results.json is UTF-8
    try:
        from ... import outputs

        outputs.write_text(out, json.dumps(data, indent=2, ensure_ascii=False) + "\n", [submission, metadata],
                           option="--results")
    except (OSError, ValueError) as e:  # outputs.NotWritten and outputs.Refused name the file
        say(str(e) if str(out) in str(e) else f"cannot write {out}: {e}")
        return 3
    say(f"results written to {out}: {data.get('score')} points")
    return 0
