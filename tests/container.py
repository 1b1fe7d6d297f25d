"""Gradescope's container, as near as this machine makes one: the autograder tested the way Gradescope runs it.

Gradescope unpacks autograder.zip at ``/autograder/source``, runs ``setup.sh``
there once, as root, to build an image, then runs ``/autograder/run_autograder``
for each submission, as root, in a fresh container of that image, with the
learner's files in ``/autograder/submission`` and its metadata in
``/autograder/submission_metadata.json``; it reads
``/autograder/results/results.json``.

Here a container is a bubblewrap sandbox started as root, with a root of its
own: the machine's ``/usr`` and ``/etc`` read-only (its Python, its pip
settings), the package registry pip uses here (``/opt``), ``/autograder`` and
``/root`` from the image's folder, a private ``/tmp``, and nothing of the
kit's checkout or its virtual environment: no kit is installed beforehand.
Its ``/proc`` is the machine's, which the sandboxes of the kit inside it need
(a fresh one is refused to a nested sandbox). A fresh container is an
overlay on the built image: what a submission's run writes is gone after it.

``python tests/container.py``'s callers: ``tests/test_autograder_gradescope.py``
and ``benchmarks/bench_autograder.py``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def unpack(bundle: Path, source: Path) -> None:
    """Unzip as Gradescope does, keeping the executable bits the zip holds."""
    with zipfile.ZipFile(bundle) as z:
        for info in z.infolist():
            z.extract(info, source)
            mode = (info.external_attr >> 16) & 0o777
            if mode:
                (source / info.filename).chmod(mode)


def sandbox(root: Path, command: list[str], cwd: str) -> list[str]:
    """bwrap's command line for ``command`` in a container whose /autograder and /root are ``root``'s."""
    args = ["bwrap", "--ro-bind", "/usr", "/usr"]
    for link in ("bin", "lib", "lib64", "sbin"):
        if Path("/" + link).is_symlink():
            args += ["--symlink", f"usr/{link}", f"/{link}"]
        elif Path("/" + link).exists():
            args += ["--ro-bind", f"/{link}", f"/{link}"]
    args += ["--ro-bind", "/etc", "/etc"]
    if Path("/opt").is_dir():
        args += ["--ro-bind", "/opt", "/opt"]
    args += ["--bind", str(root / "autograder"), "/autograder", "--bind", str(root / "root"), "/root",
             "--tmpfs", "/tmp", "--bind", "/proc", "/proc", "--dev", "/dev",
             "--unshare-ipc", "--unshare-uts", "--die-with-parent", "--clearenv",
             "--setenv", "PATH", PATH, "--setenv", "HOME", "/root", "--setenv", "LANG", "C.UTF-8",
             "--chdir", cwd]
    return args + command


@dataclass
class Run:
    proc: subprocess.CompletedProcess
    results: dict | None
    seconds: float


class Image:
    """An autograder's image: ``folder/autograder`` (source, venv) and ``folder/root``, built by setup.sh."""

    def __init__(self, folder: Path):
        self.folder = folder
        (folder / "autograder").mkdir(parents=True, exist_ok=True)
        (folder / "root").mkdir(exist_ok=True)

    def build(self, bundle: Path, timeout: float = 1500) -> tuple[subprocess.CompletedProcess, float]:
        unpack(bundle, self.folder / "autograder" / "source")
        started = time.perf_counter()
        proc = subprocess.run(sandbox(self.folder, ["bash", "/autograder/source/setup.sh"], "/autograder/source"),
                              capture_output=True, text=True, timeout=timeout)
        # Gradescope places the bundle's run_autograder at /autograder/run_autograder
        shutil.copy2(self.folder / "autograder" / "source" / "run_autograder", self.folder / "autograder")
        return proc, time.perf_counter() - started

    def run(self, scratch: Path, files: dict[str, bytes], metadata: dict | None = None,
            timeout: float = 900) -> Run:
        """``run_autograder`` on a submission of ``files`` (relative path -> bytes), in a fresh container."""
        upper, work, merged = (scratch / n for n in ("upper", "work", "merged"))
        for d in (upper, work, merged):
            d.mkdir(parents=True)
        subprocess.run(["mount", "-t", "overlay", "overlay", "-o",
                        f"lowerdir={self.folder},upperdir={upper},workdir={work}", str(merged)], check=True)
        try:
            sub = merged / "autograder" / "submission"
            sub.mkdir()
            for rel, data in files.items():
                (sub / rel).parent.mkdir(parents=True, exist_ok=True)
                (sub / rel).write_bytes(data)
            (merged / "autograder" / "results").mkdir()
            if metadata is not None:
                (merged / "autograder" / "submission_metadata.json").write_text(json.dumps(metadata))
            started = time.perf_counter()
            proc = subprocess.run(sandbox(merged, ["/autograder/run_autograder"], "/autograder"),
                                  capture_output=True, text=True, timeout=timeout)
            seconds = time.perf_counter() - started
            out = merged / "autograder" / "results" / "results.json"
            results = json.loads(out.read_text()) if out.is_file() else None
            return Run(proc, results, seconds)
        finally:
            subprocess.run(["umount", "-l", str(merged)], check=False)
            shutil.rmtree(scratch, ignore_errors=True)
