"""Where ``proflab gate --init-ci`` writes the CI job that gates every pull request.

The job installs the project (torch from PyTorch's CPU wheels: a hosted
runner has no GPU, and the CUDA wheels are gigabytes), runs the gate against
the branch the pull request goes into, and keeps the JUnit file and both
traces as artifacts, whatever the verdict. The gate's settings are the
project's ``[tool.proflab.gate]``; the job only adds the revision and the
outputs. Nothing is overwritten: a file that exists already is left as it is.
"""

from __future__ import annotations

from pathlib import Path

JUNIT = "proflab-gate.xml"
REPORT = "proflab-gate.json"

GITHUB_PATH = Path(".github/workflows/proflab-gate.yml")
GITLAB_PATH = Path(".gitlab/proflab-gate.yml")
GITLAB_MAIN = Path(".gitlab-ci.yml")


def _lines(lines: list[str], prefix: str) -> str:
    return "\n".join(prefix + line for line in lines)


# A hosted runner is a shared machine: its neighbours move the clock by about 3% from run to run. What
# the job file says about the settings that hold there.
RUNNER_ADVICE = """#
# On a shared runner: a step that is CPU work (your model's operators on the CPU) is best timed in
# CPU time, which the runner's neighbours barely move: measure = "cpu_time"; keep the clock
# (measure = "wall_time", the default) where waiting is the point (data loading, a device, a peer).
# To pick max_slowdown: gate the branch against itself here (`proflab gate FILE --baseline FILE`)
# and read the report's noise (±N%) and interval: a max_slowdown of 1 + 3N (1.10 for a runner's
# usual 3%) is seldom too noisy to call, and the smallest slowdown worth failing a pull request for
# should sit above it."""


def upload_step(title: str, name: str, kept: list[str]) -> str:
    """A GitHub Actions step that keeps ``kept`` as the artifact ``name``, whatever the job's verdict."""
    files = "\n".join(f"            {path}" for path in kept)
    return f"""      - name: {title}
        if: always()
        uses: actions/upload-artifact@v4
        with:
          name: {name}
          path: |
{files}
          if-no-files-found: ignore
"""


def gate_command(base: str, file: str | None) -> str:
    target = f"{file} " if file else ""
    return f'proflab gate {target}--against "{base}" --junit {JUNIT} --json-out {REPORT}'


def github(install: list[str], file: str | None = None, trace_dir: str = "runs/gate") -> str:
    return f"""# Written by `proflab gate --init-ci github`: gates every pull request against the branch it
# goes into, with the settings in pyproject.toml's [tool.proflab.gate].
{RUNNER_ADVICE}
name: proflab gate
on:
  pull_request:
jobs:
  gate:
    runs-on: ubuntu-latest
    timeout-minutes: 60
    steps:
      - uses: actions/checkout@v4
        with:
          fetch-depth: 0  # the base branch's history too: the baseline is taken from it
      - uses: actions/setup-python@v5
        with:
          python-version: "3.11"
      - name: Install
        run: |
          python -m pip install --upgrade pip
          python -m pip install torch torchvision --index-url https://download.pytorch.org/whl/cpu
{_lines(install, "          ")}
      - name: Gate against ${{{{ github.base_ref }}}}
        run: {gate_command("origin/${{ github.base_ref }}", file)}
{upload_step("Keep the JUnit file and both traces", "proflab-gate", [JUNIT, REPORT, f"{trace_dir}/"])}"""


def gitlab(install: list[str], file: str | None = None, trace_dir: str = "runs/gate") -> str:
    return f"""# Written by `proflab gate --init-ci gitlab`: gates every merge request against the branch it
# goes into, with the settings in pyproject.toml's [tool.proflab.gate].
{RUNNER_ADVICE}
proflab-gate:
  image: python:3.11
  rules:
    - if: $CI_PIPELINE_SOURCE == "merge_request_event"
  variables:
    GIT_DEPTH: "0"  # the target branch's history too: the baseline is taken from it
  script:
    - python -m pip install --upgrade pip
    - python -m pip install torch torchvision --index-url https://download.pytorch.org/whl/cpu
{_lines(install, "    - ")}
    - git fetch origin "$CI_MERGE_REQUEST_TARGET_BRANCH_NAME"
    - {gate_command("origin/$CI_MERGE_REQUEST_TARGET_BRANCH_NAME", file)}
  artifacts:
    when: always
    reports:
      junit: {JUNIT}
    paths:
      - {JUNIT}
      - {REPORT}
      - {trace_dir}/
"""


GITLAB_INCLUDE = f"include:\n  - local: {GITLAB_PATH.as_posix()}\n"


def install_lines(project: Path, kit: str) -> list[str]:
    """What the job installs besides torch: the kit (``kit``: a pip requirement, such as
    ``proflab @ git+https://host/proflab.git``), the project's requirements file, the project itself."""
    lines = [f'python -m pip install "{kit}"']
    if (project / "requirements.txt").is_file():
        lines.append("python -m pip install -r requirements.txt")
    pyproject = project / "pyproject.toml"
    declared = pyproject.is_file() and "[project]" in pyproject.read_text(encoding="utf-8", errors="replace")
    if declared or (project / "setup.py").is_file():
        lines.append("python -m pip install -e .")
    return lines


def write(kind: str, project: Path, kit: str = "proflab", file: str | None = None,
          trace_dir: str = "runs/gate") -> list[Path]:
    """Write the job's files under ``project``; the paths written. FileExistsError names one that exists."""
    install = install_lines(project, kit)
    if kind == "github":
        planned = {GITHUB_PATH: github(install, file, trace_dir)}
    else:
        planned = {GITLAB_PATH: gitlab(install, file, trace_dir)}
        if not (project / GITLAB_MAIN).exists():
            planned[GITLAB_MAIN] = GITLAB_INCLUDE
    for path in planned:
        if (project / path).exists() or (project / path).is_symlink():
            raise FileExistsError(f"{path} exists already: it is left as it is (move it aside to write a new one)")
        above = next((p for p in (project / path).parents if p.exists()), None)
        if above is not None and not above.is_dir():
            raise FileExistsError(f"{above.relative_to(project) if above.is_relative_to(project) else above} "
                                  f"is a file, where the folder of {path} should be: nothing was written")
    from .. import outputs

    for path in planned:
        why = outputs.refusal(project / path, exists_ok=False)
        if why:
            raise FileExistsError(why)
    for path, text in planned.items():
        outputs.write_text(project / path, text, exists_ok=False)
    return list(planned)
