"""A learner's own repository: the GitHub Actions workflow it runs on every push, as feedback (it served GitHub
Classroom, discontinued on 2026-08-28; Classroom 50, its successor, is ``classroom50``), and the instructor's steps.

The assignment's template repository is a copy of the kit; each learner
works in ``labs/<lab>/exercise.py`` of their own. The workflow
(``.github/workflows/proflab.yml``) checks those files on every push:

* the kit that grades is **pinned**: fetched at one commit (or tag) of the
  instructor's repository, never the learner's own copy of ``src/`` or
  ``labs/``, which the learner could change;
* torch from its CPU wheels (a hosted runner has no GPU);
* bubblewrap, with the runner's AppArmor rule on user namespaces lifted so
  that it can make its sandbox;
* each graded lab's exercise copied into a class folder of one learner, then
  ``proflab grade`` (JUnit and the JSON record), the results as the job's
  summary (``proflab grade --merge … --format markdown``), both files kept as
  artifacts, and the job red unless every lab passed (``--require-pass``).

A learner can edit their own workflow: what it shows is feedback. Grades an
instructor relies on come from runs the instructor makes (``proflab grade``
on the class's repositories, or Gradescope).
"""

from __future__ import annotations

import json
import re
import subprocess
from datetime import datetime, timezone
from pathlib import Path

from ... import __version__, labs
from ..gate_ci import upload_step

WORKFLOW = Path(".github/workflows/proflab.yml")
JUNIT = "proflab.xml"
RECORD = "proflab.json"
SUMMARY = "proflab-summary.md"
MINE = "mine"  # where the learner's repository is checked out
KIT = "kit"  # where the pinned kit is fetched
CLASS = "submission"  # the class folder of one learner that proflab grade reads
TORCH_CPU = "https://download.pytorch.org/whl/cpu"


def head_commit(root: Path) -> str | None:
    """The commit ``root`` is checked out at, if it is a clean git checkout (a pin must name what is there)."""
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                             timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return sha or None


def gather_lines(graded: list[labs.Lab]) -> list[str]:
    """Shell lines that copy each lab's exercise into the class folder, saying which labs have no file."""
    lines = [f'mkdir -p "{CLASS}/$LEARNER"']
    for lab in graded:
        mine = f"{MINE}/labs/{lab.folder.name}/{lab.exercise.name}"
        lines.append(f'if [ -f {mine} ]; then cp {mine} "{CLASS}/$LEARNER/{lab.number}{lab.exercise.suffix}"; '
                     f'else echo "no {mine}: lab {lab.number} is not checked"; fi')
    return lines


class ClassroomError(Exception):
    """A value given for the workflow cannot go into it as it is (a usage error: the message says why)."""


REF = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]*")  # a commit, a tag or a branch: what git fetch takes as a ref


def checked(kit_url: str, kit_ref: str) -> None:
    """Refuse a value that would change the workflow rather than fill it: a line break or another control
    character (a new YAML key, a new shell line), a GitHub expression (``${{ … }}``, evaluated by Actions), a
    leading '-' (read by git as an option), a ref git would not take."""
    for what, value in (("--kit-url", kit_url), ("--kit-ref", kit_ref)):
        if not value.strip():
            raise ClassroomError(f"{what} is empty: name the kit's repository and the commit or tag it pins")
        bad = next((c for c in value if ord(c) < 32 or ord(c) == 127), None)
        if bad is not None:
            raise ClassroomError(f"{what} {value!r} holds a control character ({bad!r}); a line break would write "
                                 "its own lines into the workflow: give the value on one line")
        if "${{" in value:
            raise ClassroomError(f"{what} {value!r} holds a GitHub expression ('${{{{'), which Actions would "
                                 "evaluate: give the plain value")
        if value.startswith("-"):
            raise ClassroomError(f"{what} {value!r} starts with '-', which git reads as an option")
    if not REF.fullmatch(kit_ref):
        raise ClassroomError(f"--kit-ref {kit_ref!r}: name a commit, a tag or a branch (letters, digits, . _ / -)")


def _quoted(value: str) -> str:
    """A YAML scalar that holds ``value`` as it is (a JSON string is a YAML double-quoted scalar)."""
    return json.dumps(value)


def workflow(graded: list[labs.Lab], kit_url: str, kit_ref: str, python: str = "3.11") -> str:
    checked(kit_url, kit_ref)
    made = datetime.now(timezone.utc).isoformat(timespec="seconds")
    numbers = " ".join(str(lab.number) for lab in graded)
    gather = "\n".join("          " + line for line in gather_lines(graded))
    return f"""# Written by `proflab autograder classroom` (proflab {__version__}, {made}): checks labs {numbers}
# of this repository on every push, with the kit pinned at {kit_ref}.
name: proflab
on:
  push:
  workflow_dispatch:
permissions:
  contents: read
env:
  PROFLAB_KIT: {_quoted(kit_url)}
  PROFLAB_REF: {_quoted(kit_ref)}
  PROFLAB_ROOT: ${{{{ github.workspace }}}}/{KIT}
  LEARNER: ${{{{ github.actor }}}}
jobs:
  check:
    runs-on: ubuntu-latest
    timeout-minutes: 60
    steps:
      - uses: actions/checkout@v4
        with:
          path: {MINE}
      - uses: actions/setup-python@v5
        with:
          python-version: "{python}"
      - name: Install the kit, pinned, and torch's CPU wheels
        run: |
          git init -q {KIT}
          git -C {KIT} fetch -q --depth 1 "$PROFLAB_KIT" "$PROFLAB_REF"
          git -C {KIT} checkout -q FETCH_HEAD
          python -m pip install --quiet torch torchvision --index-url {TORCH_CPU}
          python -m pip install --quiet ./{KIT}
      - name: Let bubblewrap sandbox every run
        run: |
          command -v bwrap >/dev/null || {{ sudo apt-get update -qq && sudo apt-get install -y -qq bubblewrap; }}
          # Ubuntu 24.04 runners keep unprivileged user namespaces behind AppArmor: lift it for this job
          if [ -e /proc/sys/kernel/apparmor_restrict_unprivileged_userns ]; then sudo sysctl -qw kernel.apparmor_restrict_unprivileged_userns=0; fi
          proflab doctor
      - name: Gather labs {numbers}
        run: |
{gather}
      - name: Check labs {numbers}
        run: proflab grade {CLASS} --format junit --out {JUNIT} --json-out {RECORD}
      - name: Results as the job's summary
        if: always()
        run: |
          proflab grade --merge {RECORD} --format markdown --out {SUMMARY}
          cat {SUMMARY} >> "$GITHUB_STEP_SUMMARY"
{upload_step("Keep the JUnit file and the record", "proflab-results", [JUNIT, RECORD])}\
      - name: Every lab passed
        run: proflab grade --merge {RECORD} --require-pass --format markdown
"""


def instructor_steps(kit_url: str, kit_ref: str, written: Path) -> list[str]:
    return [
        f"Commit {written} to the assignment's template repository (a copy of the kit, its exercises untouched), "
        "and push it.",
        f"The workflow grades with the kit at {kit_url} @ {kit_ref}: that commit must be reachable there "
        "(push it, or make the bundle again with --kit-ref naming a tag that is).",
        "Each learner's repository made from that template (GitHub Classroom is discontinued: for a classroom, "
        "use `proflab autograder classroom50`) runs "
        "the workflow on every push (Actions tab: the job's summary holds the results; the artifact "
        "'proflab-results' the JUnit file and the JSON record).",
        "To gather the class: download each repository's 'proflab-results' artifact, then "
        "`proflab grade --merge FOLDER --format json --out class.json`. A learner can edit their workflow: "
        "for grades, run `proflab grade` on the class's repositories yourself, or use Gradescope.",
    ]
