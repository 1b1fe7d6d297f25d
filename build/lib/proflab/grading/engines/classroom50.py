"""Classroom 50, GitHub Classroom's successor: the autograder an instructor commits to the classroom's config
repository, and what it runs for each submission.

An assignment's template repository is a copy of the kit; each learner works in ``labs/<lab>/exercise.py`` of
their own and submits by pushing (or ``gh student submit``). Classroom 50's runner, in the Actions of the
learner's repository, fetches the assignment's bundle from the config repository
(``<classroom>/autograders/<slug>/``: ``autograder.py`` and the files beside it) and runs ``python
autograder.py`` in the learner's checkout, with the submission's identity in its environment
(``CLASSROOM``, ``ASSIGNMENT``, ``SUBMISSION_TAG``, ``COMMIT_URL``, ``RELEASE_URL``, ``REVIEW_URL``,
``USERNAME``). The script must write ``result.json`` (schema ``classroom50/result/v1``: integer scores, a test
per entry) and may write ``release-body.md``, which the runner publishes as the submission's Release; a
non-zero exit is an infrastructure error, and no score is published.

``proflab autograder classroom50`` writes that folder (``files``):

* ``autograder.py``: fetches the kit pinned at the instructor's commit (never the learner's copy of ``src/`` or
  ``labs/``), installs it with torch's CPU wheels, lets bubblewrap sandbox every run, builds the labs' data,
  then runs ``proflab autograder run --format classroom50`` on the learner's checkout (``run``);
* ``runtime.json``: the assignment's runtime block (Python, bubblewrap from apt), for ``gh teacher assignment
  add ... --runtime runtime.json``;
* ``README.md``: the instructor's steps.

``run`` grades each lab's exercise with ``proflab grade``'s own grading (``grade.grade``), and writes one test
per check of each lab (its points as integers), and the labs with nothing to grade as failed tests worth their
points. A lab the kit could not grade (the machine's or the kit's failure) makes the script exit 3: the runner
then reports an error, and nothing is recorded against the learner.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable

from ... import __version__, labs
from .classroom import TORCH_CPU, checked

SCHEMA = "classroom50/result/v1"
IDENTITY = ("CLASSROOM", "ASSIGNMENT", "SUBMISSION_TAG", "COMMIT_URL", "RELEASE_URL", "REVIEW_URL")
RESULT, BODY = "result.json", "release-body.md"
NOT_GRADED_EXIT = 3


def scale_of(values: list[float]) -> int:
    """The smallest of 1, 10 and 100 that makes every points figure whole: Classroom 50 scores are integers."""
    for scale in (1, 10, 100):
        if all(abs(v * scale - round(v * scale)) < 1e-9 for v in values):
            return scale
    return 100


def result_json(result, absent: list, env: dict[str, str]) -> tuple[dict[str, Any], int]:
    """Classroom 50's result.json for one submission (and the scale its points were multiplied by)."""
    from ..verdicts import PASSED

    rows: list[tuple[str, bool, float, float, str]] = []  # (name, passed, earned, max, the check's words)
    for g in result.graded:
        r = g.report
        for check, points in zip(r.checks, g.points):
            rows.append((f"Lab {r.number} · {r.title}: {check.title}",
                         check.status == PASSED and g.graded, points.earned if g.graded else 0.0, points.max,
                         check.rationale or check.status))
    for a in absent:
        rows.append((f"Lab {a.lab.number} · {a.lab.title}: not checked", False, 0.0, a.lab.grading.max_score, a.why))
    scale = scale_of([v for row in rows for v in row[2:4]])
    tests = [{"test-name": name, "passed": passed, "score": round(earned * scale), "max-score": round(most * scale),
              "message": words[:500]} for name, passed, earned, most, words in rows]
    data = {"schema": SCHEMA, "classroom": env.get("CLASSROOM", ""), "assignment": env.get("ASSIGNMENT", ""),
            "submission": env.get("SUBMISSION_TAG", ""), "commit": env.get("COMMIT_URL", ""),
            "release": env.get("RELEASE_URL", ""), "review": env.get("REVIEW_URL", ""),
            "score": sum(t["score"] for t in tests), "max-score": sum(t["max-score"] for t in tests), "tests": tests}
    return data, scale


def body(result, absent: list, scale: int, sandbox_line: str) -> str:
    """release-body.md: the graded labs as ``proflab grade --format markdown`` shows them, and what was not."""
    from ...reporting import grade_formats

    lines = [grade_formats.to_markdown(result).rstrip(), ""]
    lines += [f"- Lab {a.lab.number} · {a.lab.title}: not checked: {a.why}" for a in absent]
    if scale != 1:
        lines.append(f"\nPoints are the kit's points ×{scale} (Classroom 50 counts whole points).")
    lines.append(f"\n{sandbox_line}\n\nGraded by proflab {__version__}.")
    return "\n".join(lines) + "\n"


def run(workspace: Path, out: Path, graded: list[labs.Lab], env: dict[str, str],
        say: Callable[[str], None] = print) -> int:
    """``proflab autograder run --format classroom50``: grade the labs' exercises of the learner's checkout
    ``workspace``; write result.json and release-body.md into ``out``. 0 once written; 3 when the kit or the
    machine failed a lab (Classroom 50 then reports an error and records nothing)."""
    from ... import outputs
    from ...running import sandbox
    from .. import grade
    from .gradescope import gather, writable

    started = time.perf_counter()
    learner = env.get("USERNAME") or env.get("OWNER") or "learner"
    missing = [key for key in IDENTITY if not env.get(key)]
    if missing:
        say(f"proflab: Classroom 50's runner sets {', '.join(missing)}; they are missing here, so result.json "
            "would not be accepted")
        return NOT_GRADED_EXIT
    engine = sandbox.engine()
    sandbox_line = ("Runs were sandboxed: " + engine.describe()) if engine.ok else \
        ("Runs were not sandboxed: " + engine.why)
    say(sandbox_line)
    found, absent = gather(workspace, graded, learner)
    for a in absent:
        say(f"lab {a.lab.number}: not checked: {a.why}")
    grade.prepare_data(found)
    result = grade.grade(found, on_done=lambda i, n, g: say(
        f"lab {g.report.number}: {g.report.verdict} ({g.submission.shown}, {g.report.duration_s:.0f} s)"))
    data, scale = result_json(result, absent, env)
    for name, text in ((RESULT, json.dumps(writable(data), indent=2, ensure_ascii=False) + "\n"),
                       (BODY, writable(body(result, absent, scale, sandbox_line)))):
        outputs.write_text(out / name, text, [workspace / "labs"], option="--results")
    not_graded = [g for g in result.graded if not g.graded]
    say(f"{RESULT} written: {data['score']}/{data['max-score']} in {time.perf_counter() - started:.0f} s")
    if not_graded:
        for g in not_graded:
            say(f"lab {g.report.number} was not graded: {g.report.error}")
        return NOT_GRADED_EXIT
    return 0


AUTOGRADER = '''"""Classroom 50 autograder for proflab labs {numbers}: written by `proflab autograder classroom50`
(proflab {version}). Run by Classroom 50's runner in the learner's checkout, it installs the kit pinned at
{ref} of {url} (never the learner's copy of it), grades each lab's labs/<lab>/exercise.py, and writes
result.json and release-body.md. A non-zero exit means the kit or the machine failed: nothing is scored."""

import os
import subprocess
import sys
from pathlib import Path

KIT_URL = {url!r}
KIT_REF = {ref!r}
LABS = {labs!r}
TORCH_INDEX = {torch!r}


def sh(*argv, **kw):
    print("+", " ".join(argv), flush=True)
    return subprocess.run(argv, check=True, **kw)


def main():
    work = Path.cwd()
    kit = Path(os.environ.get("RUNNER_TEMP", "/tmp")) / "proflab-kit"
    if not (kit / ".git").is_dir():
        sh("git", "init", "-q", str(kit))
        sh("git", "-C", str(kit), "fetch", "-q", "--depth", "1", KIT_URL, KIT_REF)
        sh("git", "-C", str(kit), "checkout", "-q", "FETCH_HEAD")
    python = sys.executable
    sh(python, "-m", "pip", "install", "--quiet", "torch", "torchvision", *(["--index-url", TORCH_INDEX] if TORCH_INDEX else []))
    sh(python, "-m", "pip", "install", "--quiet", str(kit))
    # Ubuntu 24.04 runners keep unprivileged user namespaces, which bubblewrap needs, behind AppArmor
    if Path("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").exists():
        subprocess.run(["sudo", "-n", "sysctl", "-qw", "kernel.apparmor_restrict_unprivileged_userns=0"], check=False)
    # The kit runs from its own folder, with the current folder kept off its import path (-P): nothing in the
    # learner's checkout is imported in its place.
    env = {{**os.environ, "PROFLAB_ROOT": str(kit), "PYTHONSAFEPATH": "1"}}
    env.pop("PYTHONPATH", None)
    proflab = [python, "-P", "-m", "proflab"]
    subprocess.run([*proflab, "doctor"], env=env, cwd=kit, check=False)
    done = subprocess.run([*proflab, "autograder", "run", "--format", "classroom50", "--labs", *LABS,
                           "--submission", str(work), "--results", str(work)], env=env, cwd=kit)
    return done.returncode


if __name__ == "__main__":
    try:
        sys.exit(main())
    except subprocess.CalledProcessError as e:
        print(f"proflab autograder: {{e}}: the kit could not be set up; nothing was graded", flush=True)
        sys.exit(3)
'''


def files(graded: list[labs.Lab], kit_url: str, kit_ref: str, torch_index: str = TORCH_CPU,
          python: str = "3.11", slug: str = "proflab") -> dict[str, str]:
    """What goes in ``<classroom>/autograders/<slug>/`` of the config repository: name -> text."""
    checked(kit_url, kit_ref)
    numbers = " ".join(str(lab.number) for lab in graded)
    script = AUTOGRADER.format(numbers=numbers, version=__version__, url=kit_url, ref=kit_ref,
                               labs=[str(lab.number) for lab in graded], torch=torch_index)
    runtime = json.dumps({"python": python, "apt": ["bubblewrap"]}, indent=2) + "\n"
    readme = README.format(numbers=numbers, url=kit_url, ref=kit_ref, slug=slug)
    return {"autograder.py": script, "runtime.json": runtime, "README.md": readme}


README = """# proflab labs {numbers} on Classroom 50

Written by `proflab autograder classroom50`. This folder is the assignment's autograder: commit it to your
organization's config repository as `CLASSROOM/autograders/{slug}/` (CLASSROOM: the classroom's short name;
`{slug}`: the assignment's slug).

1. The assignment's template repository is a copy of the kit at {ref} (its exercises untouched). Each learner
   works in `labs/<lab>/exercise.py` of their own copy.
2. Create the assignment with its runtime (Python, and bubblewrap, the sandbox every run of a learner's file
   goes in):

       gh teacher assignment add ORG CLASSROOM {slug} --name "proflab" --template ORG/TEMPLATE --runtime runtime.json

3. Commit this folder as `CLASSROOM/autograders/{slug}/` in `ORG/classroom50` and push: the config repository
   publishes it within minutes.
4. A learner accepts (`gh student accept ORG CLASSROOM {slug}`), fixes a lab, and submits (a push, or
   `gh student submit`). Each submission is graded in the learner's repository: the kit is fetched from
   {url} at {ref} (that commit must be reachable there), torch's CPU wheels installed, and labs {numbers}
   checked against their originals on the runner. The Release of the submission holds `result.json` (one
   test per check of each lab) and the report.
5. Collect the scores: `gh workflow run collect-scores.yaml --repo ORG/classroom50`.

The grading runs in the learner's own repository, whose workflow file the learner can edit: Classroom 50 says
so itself (it is not an isolation boundary). What it shows a learner is feedback; grades you rely on come from
runs you make (`proflab grade` on the class's repositories, or Gradescope).

A submission's job may take several minutes: the kit's install, the labs' data, then each lab's check. A
lab the kit could not grade (the machine's fault) ends the script with an error: Classroom 50 then marks the
submission as an error and records no score; the learner submits again.
"""
