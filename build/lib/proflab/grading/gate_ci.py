"""Where ``proflab gate --init-ci`` writes the CI job that gates every pull request.

The job installs the kit from its own source (``kit_requirement``: never a bare
name from the public index), the project (torch from PyTorch's CPU wheels: a
hosted runner has no GPU, and the CUDA wheels are gigabytes) and the sandbox
engine (bubblewrap; where the runner cannot use it, the gate runs unsandboxed
and says so in the job's log and summary), runs the gate against
the branch the pull request goes into, and keeps the JUnit file and both
traces as artifacts, whatever the verdict. The gate's settings are the
project's ``[tool.proflab.gate]``; the job only adds the revision and the
outputs. Nothing is overwritten: a file that exists already is left as it is.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

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
# CPU time, which the runner's neighbours move far less than the clock: measure = "cpu_time"; keep the clock
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
    """The gate, as the job runs it. ``--unsandboxed`` lets it run where the runner cannot sandbox runs (a
    container without user namespaces); where it can, runs are sandboxed all the same. The records say which."""
    target = f"{file} " if file else ""
    return f'proflab gate {target}--against "{base}" --junit {JUNIT} --json-out {REPORT} --unsandboxed'


UNSANDBOXED = "Runs are not sandboxed on this runner (proflab doctor says why), and the gate's records say so."


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
      - name: Sandbox engine
        run: |
          command -v bwrap >/dev/null || {{ sudo apt-get update -qq && sudo apt-get install -y -qq bubblewrap; }}
          # Ubuntu 24.04 runners keep unprivileged user namespaces behind AppArmor: lift it for this job
          if [ -e /proc/sys/kernel/apparmor_restrict_unprivileged_userns ]; then sudo sysctl -qw kernel.apparmor_restrict_unprivileged_userns=0; fi
          proflab doctor | tee -a "$GITHUB_STEP_SUMMARY" || echo "{UNSANDBOXED}" | tee -a "$GITHUB_STEP_SUMMARY"
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
    - command -v bwrap >/dev/null || {{ apt-get update -qq && apt-get install -y -qq bubblewrap; }}
    - proflab doctor || echo "{UNSANDBOXED}"
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


class KitSourceError(Exception):
    """No source the job could install this kit from, or one that is not the kit's own (the message says)."""


# A requirement that is only a name (with extras or versions): pip takes it from the public index, where anyone
# may have registered the name. The kit is never installed that way.
BARE = re.compile(r"^\s*[A-Za-z0-9][A-Za-z0-9._-]*\s*(\[[^\]]*\])?\s*"
                  r"((===?|~=|!=|<=?|>=?)\s*[^\s,;@]+\s*(,\s*(===?|~=|!=|<=?|>=?)\s*[^\s,;@]+\s*)*)?$")
ARCHIVES = (".whl", ".tar.gz", ".zip")
HOW = ("pass --kit with the kit's own source: 'proflab @ git+https://your.host/proflab.git@COMMIT' (a tag or a "
       "commit pins it), or a wheel's path or URL (`python -m build` writes one in dist/)")


def _git(args: list[str], where: Path) -> str:
    try:
        done = subprocess.run(["git", *args], cwd=where, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def _public(url: str) -> str:
    """``url`` without the user name or token a clone may carry (https://TOKEN@host/...): never written
    into a job file."""
    parts = urlsplit(url)
    if parts.scheme in ("http", "https") and "@" in parts.netloc:
        return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))
    return url


def kit_requirement(given: str | None, kit_dir: Path, installed: dict | None = None) -> tuple[str, list[str]]:
    """How the job installs the kit, and what to tell the user about it.

    ``given`` (``--kit``) is taken when it names a source: a direct reference (``proflab @ URL``), a VCS or
    archive URL, or a wheel or source archive's path; a bare name (``proflab``, ``proflab==1.0``) is refused,
    since the public index may hold anyone's package under it. Without one, the kit installed here is
    pinned: its clone's ``origin`` at the commit checked out (``kit_dir``, where the package was installed
    from: a clone of the kit, its ``src/proflab`` there), or, for a kit installed from a git URL or a wheel's,
    the source pip recorded (``installed``: its ``direct_url.json``, PEP 610; read from the installed
    distribution when None). KitSourceError when none gives a source CI can reach."""
    if given is not None:
        text = given.strip()
        if not text or BARE.match(text):
            raise KitSourceError(f"--kit {given!r} is a bare package name: the job would install whatever the "
                                 "public index holds under it, which is not this kit (anyone may register the "
                                 f"name); {HOW}")
        source = text.split(" @ ", 1)[1].strip() if " @ " in text else text
        notes = []
        if source.startswith("git+") and not re.search(r"@[^/@\s]+$", source.split("#", 1)[0]):
            notes.append(f"{source} names no tag or commit: the job installs whatever its default branch holds "
                         "on the day it runs; add @TAG or @COMMIT to pin it")
        if "://" in source or source.lower().endswith(ARCHIVES) or source.startswith(("./", "../", "/")):
            return text, notes
        raise KitSourceError(f"--kit {given!r} is neither a URL, a direct reference (name @ URL) nor a wheel or "
                             f"archive's path; {HOW}")
    # Only the kit's own clone: an installed kit's folder may sit inside some other project's repository
    commit = _git(["rev-parse", "HEAD"], kit_dir) if (kit_dir / "src" / "proflab").is_dir() else ""
    if not commit:
        return _installed_from(installed if installed is not None else _direct_url(), kit_dir)
    origin = _git(["remote", "get-url", "origin"], kit_dir)
    local = not origin or origin.startswith(("/", ".", "file:")) or Path(origin).exists()
    if local:
        raise KitSourceError(f"the kit's clone has {'no origin' if not origin else f'origin {origin}, a path on this machine'}"
                             f", which CI cannot reach; {HOW}")
    if re.match(r"^[\w.-]+@[\w.-]+:", origin):  # scp-like: git@host:owner/repo.git
        user_host, path = origin.split(":", 1)
        origin = f"ssh://{user_host}/{path}"
    url = _public(origin)
    notes = []
    if _git(["status", "--porcelain", "--untracked-files=no"], kit_dir):
        notes.append(f"the kit's clone has changes not in commit {commit[:12]}: the job installs the commit, "
                     "without them")
    return f"proflab @ git+{url}@{commit}", notes


def _direct_url() -> dict:
    """Where pip installed the kit from (its ``direct_url.json``), or {} (from an index, or not installed)."""
    import json
    from importlib import metadata

    try:
        return json.loads(metadata.distribution("proflab").read_text("direct_url.json") or "{}")
    except (metadata.PackageNotFoundError, ValueError, OSError):
        return {}


def _installed_from(direct: dict, kit_dir: Path) -> tuple[str, list[str]]:
    """The requirement that installs again what pip recorded (``direct``): a VCS URL at its commit, or an
    archive's URL; never a path of this machine, which CI cannot reach."""
    url = str(direct.get("url") or "")
    vcs = direct.get("vcs_info") or {}
    where = f"the kit here ({kit_dir}) is not a git clone"
    if not url:
        raise KitSourceError(f"{where}, and pip recorded no source for it, so the job cannot pin it; {HOW}")
    if url.startswith("file:") or direct.get("dir_info") is not None:
        raise KitSourceError(f"{where}, and it was installed from {url}, a path on this machine, which CI "
                             f"cannot reach; {HOW}")
    if vcs.get("commit_id"):
        return f"proflab @ {vcs.get('vcs', 'git')}+{_public(url)}@{vcs['commit_id']}", []
    if "archive_info" in direct:
        return f"proflab @ {_public(url)}", []
    raise KitSourceError(f"{where}, and its source {url} names no commit; {HOW}")


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


def write(kind: str, project: Path, kit: str, file: str | None = None,
          trace_dir: str = "runs/gate") -> list[Path]:
    """Write the job's files under ``project``, installing the kit by the requirement ``kit``
    (``kit_requirement``'s); the paths written. FileExistsError names one that exists."""
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
