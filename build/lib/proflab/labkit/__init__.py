"""What the labs import: their data sets and models, kept out of the lab files.

A lab file holds the pipeline a learner edits; the data it reads and the
model it trains live here, so that a fix changes how the work is done, never
what the work is. Each lab names its data preparer in its manifest
(``data = "proflab.labkit.photos:ensure_photos"``).

Every data folder ends with a ``READY`` file, written last, that lists the
folder's format version and every file in it with its size and sha256. A
folder is *ready* when its format is this kit's and every listed file is
there with its listed size: a ``stat`` per file, cheap enough to check at the
start of every run. ``proflab data --verify`` also hashes every file. A
folder that is not ready (never built, a partial copy, a file truncated, a
``READY`` from an older kit that lists no files) is built again; the data is
generated deterministically, so it comes back identical.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import io
import json
import os
import shutil
import stat
import tempfile
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

READY = "READY"
MANIFEST_VERSION = 1  # of READY's own layout
SHOWN = 3  # file names quoted in a problem's description, before "and N more"


_round_seed = 0  # this run's inputs: 0 outside a check, a fresh number the checker draws for each round


def set_round(seed: int) -> None:
    """Called by the kit's runner before a lab file is imported: the seed of this round's inputs."""
    global _round_seed
    _round_seed = int(seed)


def seed_for(base: int) -> int:
    """The seed a lab's model weights (or generated inputs) are drawn from: ``base`` outside a check (the
    figures the docs quote), and a different one every round of a check, drawn by the checker, so that
    no version can keep results from an earlier round or check and replay them."""
    return base if not _round_seed else (base + _round_seed * 7_919) % (2**62)


class DataError(Exception):
    """A lab's data could not be built or verified; the message is one line, for the person at the keyboard."""

    def __init__(self, message: str, folder: Path | None = None, reason: str = "", problem: "Problem | None" = None):
        super().__init__(message)
        self.folder, self.reason, self.problem = folder, reason, problem


# --- what READY holds --------------------------------------------------------

def _display(path: Path) -> str:
    from .. import paths

    return paths.display(path)


def _files(folder: Path) -> list[str]:
    """Every file under ``folder`` but READY, as sorted ``/``-separated relative paths."""
    found = []
    for parent, dirs, names in os.walk(folder):
        dirs.sort()
        rel = Path(parent).relative_to(folder)
        for name in names:
            path = (rel / name).as_posix()
            if path != READY:
                found.append(path)
    return sorted(found)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_manifest(folder: Path, version: str, progress: Callable[[str], None] | None = None) -> int:
    """Write ``folder/READY``: the format ``version`` and every file's size and sha256. Returns the count."""
    names = _files(folder)
    entries = []
    for i, name in enumerate(names):
        if progress and i % 256 == 0:
            progress(f"recording its {len(names)} files ({i} done)")
        path = folder / name
        entries.append(json.dumps([name, path.stat().st_size, _sha256(path)]))
    head = json.dumps({"manifest": MANIFEST_VERSION, "format": version, "count": len(names)})[:-1]
    (folder / READY).write_text(head + ', "files": [\n' + ",\n".join(entries) + "\n]}\n", encoding="utf-8")
    return len(names)


def _count(n: int) -> str:
    return f"{n} file" if n == 1 else f"{n} files"


def _names(names: list[str]) -> str:
    shown = ", ".join(names[:SHOWN])
    return shown + (f" and {len(names) - SHOWN} more" if len(names) > SHOWN else "")


@dataclass
class Problem:
    """Why a data folder is not ready."""

    kind: str  # absent | unfinished | unlisted | unreadable | format | files
    detail: str = ""
    total: int = 0  # files READY lists
    missing: list[str] = field(default_factory=list)
    wrong_size: list[str] = field(default_factory=list)
    wrong_hash: list[str] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)

    def describe(self) -> str:
        """``incomplete (12 of 2049 files missing: 00003.jpg, … and 9 more)`` and the like."""
        if self.kind == "absent":
            return "not built yet"
        if self.kind == "unfinished":
            return "incomplete (no READY file: its build or its copy never finished)"
        if self.kind == "unlisted":
            return "from an older kit (its READY lists no files to verify it by)"
        if self.kind == "unreadable":
            return f"unverifiable (its READY cannot be read: {self.detail})"
        if self.kind == "format":
            return f"of an older format ({self.detail})"
        parts = []
        for names, what in ((self.missing, "missing"), (self.wrong_size, "of the wrong size"),
                            (self.unreadable, "unreadable"), (self.wrong_hash, "with other bytes than READY lists")):
            if names:
                parts.append(f"{len(names)} of {self.total} files {what}: {_names(names)}")
        state = "incomplete" if self.missing or self.wrong_size or self.unreadable else "damaged"
        return f"{state} ({'; '.join(parts)})"


def _manifest(root: Path) -> tuple[dict | None, Problem | None]:
    try:
        text = (root / READY).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None, Problem("unfinished")
    except (OSError, UnicodeDecodeError) as e:
        return None, Problem("unreadable", _why(e))
    if not text.lstrip().startswith("{"):
        return None, Problem("unlisted", text.strip()[:40])
    try:
        manifest = json.loads(text)
        if manifest.get("manifest") != MANIFEST_VERSION or not isinstance(manifest.get("files"), list):
            return None, Problem("unreadable", f"a READY layout this kit does not know "
                                               f"({manifest.get('manifest')!r})")
        if manifest.get("count") != len(manifest["files"]):
            return None, Problem("unreadable", "it was cut short")
    except (ValueError, AttributeError, TypeError):
        return None, Problem("unreadable", "it was cut short or edited")
    return manifest, None


def inspect(root: Path, version: str, hashes: bool = False,
            progress: Callable[[str], None] | None = None) -> tuple[Problem | None, int, list[str]]:
    """``(problem or None, files listed, files not listed)`` for the data folder ``root``.

    Without ``hashes`` this is the cheap check, a ``stat`` per listed file (and
    no listing of the folder: files READY does not name are not looked for).
    With ``hashes`` every file is also read and hashed, and the files READY
    does not name are returned as the third item.
    """
    root = Path(root)
    if not root.is_dir():
        return Problem("absent"), 0, []
    manifest, problem = _manifest(root)
    if problem:
        return problem, 0, []
    if manifest.get("format") != version:
        return Problem("format", f"{manifest.get('format')}; this kit makes {version}"), len(manifest["files"]), []
    files = manifest["files"]
    problem = Problem("files", total=len(files))
    # A stat relative to the folder's descriptor skips the path's lookup: 2,049 photos in about 4 ms.
    try:
        folder = os.open(root, os.O_RDONLY) if os.stat in os.supports_dir_fd else None
    except OSError:
        folder = None
    try:
        _compare(root, folder, files, problem, hashes, progress)
    except (TypeError, ValueError):  # an entry that is not [name, size, sha256]
        return Problem("unreadable", "it was edited"), 0, []
    finally:
        if folder is not None:
            os.close(folder)
    extra: list[str] = []
    if hashes:
        listed = {name for name, _, _ in files}
        extra = [name for name in _files(root) if name not in listed]
    if problem.missing or problem.wrong_size or problem.wrong_hash or problem.unreadable:
        return problem, len(files), extra
    return None, len(files), extra


def _compare(root: Path, folder: int | None, files: list, problem: Problem, hashes: bool,
             progress: Callable[[str], None] | None) -> None:
    for i, (name, size, digest) in enumerate(files):
        try:
            st = os.stat(name, dir_fd=folder) if folder is not None else os.stat(os.path.join(root, name))
        except OSError:
            problem.missing.append(name)
            continue
        if not stat.S_ISREG(st.st_mode):
            problem.missing.append(name)
        elif st.st_size != size:
            problem.wrong_size.append(name)
        elif hashes:
            if progress and i % 256 == 0:
                progress(f"verifying {i} of {len(files)} files")
            try:
                if _sha256(root / name) != digest:
                    problem.wrong_hash.append(name)
            except OSError:
                problem.unreadable.append(name)


# --- building ----------------------------------------------------------------

@dataclass
class Outcome:
    """What ``build_once`` found in a data folder, and what it did."""

    folder: Path
    files: int
    problem: Problem | None  # what was wrong before, None if it was ready
    rebuilt: bool
    verified: bool  # every file was hashed
    extra: list[str] = field(default_factory=list)
    version: str = ""  # the format its READY names


_verifying: ContextVar[bool] = ContextVar("proflab_data_verifying", default=False)
_progress: ContextVar[Callable[[str], None] | None] = ContextVar("proflab_data_progress", default=None)
_outcomes: ContextVar[list | None] = ContextVar("proflab_data_outcomes", default=None)


def _why(e: BaseException) -> str:
    """An exception as the end of a one-line message: ``No space left on device``."""
    seen = e
    while seen is not None:  # an OSError behind another library's error says it best
        if isinstance(seen, OSError) and seen.strerror:
            return seen.strerror
        seen = seen.__cause__ or seen.__context__
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


@contextlib.contextmanager
def _locked(data_dir: Path) -> Iterator[bool]:
    """One builder at a time in ``data_dir``: an advisory lock on the folder itself. Yields whether it
    holds the lock (not on a file system without locks, nor on Windows)."""
    try:
        import fcntl
    except ImportError:  # not on this system: the rename below is still atomic
        yield False
        return
    fd = os.open(data_dir, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            locked = True
        except OSError:  # a file system without locks
            locked = False
        yield locked
    finally:
        os.close(fd)  # releases the lock


def save(obj, path: Path) -> None:
    """``torch.save`` through memory, so a full disk is an ``OSError`` ("No space left on device")
    rather than torch's ``RuntimeError`` about stream positions."""
    import torch

    buffer = io.BytesIO()
    torch.save(obj, buffer)
    Path(path).write_bytes(buffer.getvalue())


_CONSTANTS = (bool, int, float, complex, str, bytes, tuple, frozenset, type(None))


def fingerprint(build: Callable) -> str:
    """Twelve hex digits of what ``build`` is made of: its source, the source of every function and class
    of the lab kit it names (and of those they name, in turn), and the value of every constant of the
    kit's modules they name. A change to any of them is a change to the data: ``build_once`` builds it
    again, with no version for an author to remember to bump. Modules from elsewhere (torch, PIL) are
    taken as they are."""
    digest = hashlib.sha256()
    seen: set[int] = set()

    def ours_module(module: str | None) -> bool:  # the lab kit's, or the builder's own module
        return bool(module) and (module.startswith(__name__) or module == build.__module__)

    def ours(obj) -> bool:
        return ours_module(getattr(obj, "__module__", None))

    def code_names(code) -> set[str]:
        names = set(code.co_names)
        for const in code.co_consts:
            if hasattr(const, "co_names"):
                names |= code_names(const)
        return names

    def visit(obj) -> None:
        if id(obj) in seen:
            return
        seen.add(id(obj))
        try:
            text = inspect_source(obj)
        except (OSError, TypeError):
            code = getattr(obj, "__code__", None)
            text = code.co_code.hex() if code is not None else repr(obj)
        digest.update(f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', '')}\n{text}".encode())
        functions = [obj] if hasattr(obj, "__code__") else \
            [v for v in vars(obj).values() if hasattr(v, "__code__")] if isinstance(obj, type) else []
        for function in functions:
            namespace = function.__globals__
            for name in sorted(code_names(function.__code__)):
                value = namespace.get(name)
                if value is None and name not in namespace:
                    continue
                if callable(value) and ours(value):  # a function or a class of the kit's
                    visit(value)
                elif isinstance(value, _CONSTANTS) and ours_module(namespace.get("__name__")):
                    digest.update(f"{name}={value!r}\n".encode())

    visit(build)
    return digest.hexdigest()[:12]


def data_version(version: str, build: Callable) -> str:
    """What a data folder's READY names: its format, and the fingerprint of the code that builds it."""
    return f"{version}+{fingerprint(build)}"


def inspect_source(obj) -> str:
    import inspect as _inspect

    return _inspect.getsource(obj)


def build_once(data_dir: str | os.PathLike, name: str, version: str, build: Callable[[Path], None]) -> Path:
    """``data_dir/name``, built by ``build(folder)`` unless it is ready; safe if processes race.

    Ready means READY names ``version`` and the builder's ``fingerprint`` (a
    change to the code that builds the data builds it again), and every file
    it lists is there with its size (with every file's sha256 too inside
    ``proflab data --verify``).
    The data is built in a temporary folder, READY written last, and renamed
    into place, so no process ever reads half of it. Raises ``DataError``
    when the folder is not ready and cannot be built.
    """
    data_dir = Path(data_dir)
    root = data_dir / name
    version = data_version(version, build)
    hashes = _verifying.get()
    say = _progress.get() or (lambda text: None)
    problem, files, extra = inspect(root, version, hashes=hashes, progress=say)
    if problem is None:
        _note(Outcome(root, files, None, rebuilt=False, verified=hashes, extra=extra, version=version))
        return root
    try:
        files = _rebuild(data_dir, root, version, build, hashes, say)
    except DataError:
        raise
    except Exception as e:  # noqa: BLE001 - whatever stops the build, said in one line
        why = _why(e)
        was = "" if problem.kind == "absent" else f"; the folder is {problem.describe()}"
        raise DataError(f"cannot build the data in {_display(root)}: {why}{was}", root, why, problem) from None
    _note(Outcome(root, files, problem, rebuilt=True, verified=hashes, version=version))
    return root


def _rebuild(data_dir: Path, root: Path, version: str, build: Callable[[Path], None],
             hashes: bool, say: Callable[[str], None]) -> int:
    data_dir.mkdir(parents=True, exist_ok=True)
    if data_dir.stat().st_uid == os.geteuid():  # enterable by a sandbox's nobody, whatever the umask
        os.chmod(data_dir, data_dir.stat().st_mode & 0o7777 | 0o005)
    with _locked(data_dir) as alone:
        problem, files, _ = inspect(root, version, hashes=hashes)
        if problem is None:  # another process built it while this one waited
            return files
        if alone:  # no other builder is at work: what a killed build left behind goes
            for stale in data_dir.glob(f".{root.name}-*"):
                shutil.rmtree(stale, ignore_errors=True)
        say(f"building {_display(root)}")
        tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}-", dir=data_dir))
        old = None
        try:
            build(tmp)
            files = write_manifest(tmp, version, say)
            _public(tmp)
            if root.exists() or root.is_symlink():
                old = Path(tempfile.mkdtemp(prefix=f".{root.name}-old-", dir=data_dir))
                os.replace(root, old / root.name)
            os.replace(tmp, root)
        except BaseException:
            if old is not None and not root.exists() and (old / root.name).exists():
                os.replace(old / root.name, root)  # put back what was there
            raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
    return files


def _public(folder: Path) -> None:
    """The data is read by every run, in a sandbox that may run as ``nobody`` (the kit run as root): readable
    by all, whatever the umask, and the folder too (``mkdtemp`` makes it private)."""
    os.chmod(folder, 0o755)
    for top, dirs, files in os.walk(folder):
        for name in dirs:
            os.chmod(Path(top) / name, 0o755)
        for name in files:
            os.chmod(Path(top) / name, 0o644)


def _note(outcome: Outcome) -> None:
    seen = _outcomes.get()
    if seen is not None:
        seen.append(outcome)


# --- preparing a lab's data ----------------------------------------------------

def _call(spec: str, data_dir: Path) -> Path:
    module, _, func = spec.partition(":")
    return Path(getattr(importlib.import_module(module), func)(data_dir))


def _lab_for(spec: str) -> str:
    """``lab 1's`` for the lab whose manifest names ``spec``; ``the lab's`` if none can be found."""
    try:
        from .. import labs

        for lab in labs.discover():
            if lab.data == spec:
                return f"lab {lab.number}'s"
    except Exception:  # noqa: BLE001 - only a message depends on it
        pass
    return "the lab's"


def _failed(spec: str, e: Exception, whose: str | None) -> DataError:
    whose = whose or _lab_for(spec)
    if isinstance(e, DataError) and e.folder is not None:
        was = "" if not e.problem or e.problem.kind == "absent" else f"; the folder is {e.problem.describe()}"
        return DataError(f"cannot build {whose} data in {_display(e.folder)}: {e.reason}{was}",
                         e.folder, e.reason, e.problem)
    return DataError(f"cannot prepare {whose} data ({spec}): {_why(e)}", None, _why(e))


def prepare(spec: str, data_dir: Path, memo: Path | None = None) -> Path:
    """Make the data of the lab whose manifest says ``data = spec`` ready under ``data_dir``; its folder.

    Raises ``DataError``, with a one-line message, when it cannot be built.

    ``memo``: a file (the caller's, where nothing it runs can write) that keeps which folder and format
    the preparer used last time, with its source's sha256. While the source is the same, the folder is
    checked as ``build_once`` checks it (READY names the format, every listed file is there with its
    size) without importing the preparer: a module that imports torch costs seconds, the check a stat
    per file.
    """
    data_dir = Path(data_dir)
    where = _resolved(data_dir)  # a kit whose data/ links to another's shares that one's memo
    source = _source_sha256(spec)
    remembered = _memo(memo) if source else {}
    known = remembered.get(spec, {})
    if known.get("source") == source and known.get("data_dir") == where:
        root = data_dir / known.get("folder", "")
        if known.get("folder") and inspect(root, known.get("format", ""))[0] is None:
            return root
    seen: list[Outcome] = []
    token = _outcomes.set(seen)
    try:
        root = _call(spec, data_dir)
    except Exception as e:  # noqa: BLE001
        raise _failed(spec, e, None) from None
    finally:
        _outcomes.reset(token)
    if memo is not None and source and len(seen) == 1 and \
            _resolved(seen[0].folder.parent) == where == _resolved(root.parent):
        with contextlib.suppress(OSError):
            kept = {**remembered, spec: {"source": source, "data_dir": where,
                                          "folder": root.name, "format": seen[0].version}}
            memo.parent.mkdir(parents=True, exist_ok=True)
            tmp = memo.with_name(f".{memo.name}.{os.getpid()}")
            tmp.write_text(json.dumps(kept, indent=1), encoding="utf-8")
            os.replace(tmp, memo)
    return root


def _resolved(folder: Path) -> str:
    try:
        return str(Path(folder).resolve())
    except (OSError, RuntimeError):
        return str(folder)


def _source_sha256(spec: str) -> str:
    """The sha256 of the source file of ``spec``'s module, found without importing it; "" if none."""
    import importlib.util

    try:
        found = importlib.util.find_spec(spec.partition(":")[0])
        return hashlib.sha256(Path(found.origin).read_bytes()).hexdigest() if found and found.origin else ""
    except (ImportError, ValueError, OSError):
        return ""


def _memo(path: Path | None) -> dict:
    try:
        found = json.loads(path.read_text(encoding="utf-8")) if path is not None else {}
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


@dataclass
class Prepared:
    """One lab's line in ``proflab data``."""

    lab: str  # "lab 1 (dataloader)"
    ok: bool
    message: str
    folder: Path | None = None
    rebuilt: bool = False


def prepare_all(data_dir: Path, verify: bool = False,
                on_progress: Callable[[str], None] | None = None) -> list[Prepared]:
    """Every lab's data made ready (with every file's sha256 checked if ``verify``), one report per lab.

    A lab whose data cannot be built gets ``ok=False`` and the next lab is
    still prepared.
    """
    from .. import labs

    done = []
    for lab in labs.discover():
        if not lab.data:
            continue
        who = f"lab {lab.number} ({lab.name})"
        say = on_progress or (lambda text: None)
        say(f"{who}: {'verifying' if verify else 'checking'} its data…")
        seen: list[Outcome] = []
        tokens = (_verifying.set(verify), _progress.set(lambda text, who=who: say(f"{who}: {text}…")),
                  _outcomes.set(seen))
        whose = f"lab {lab.number}'s"
        try:
            folder = _call(lab.data, data_dir)
        except Exception as e:  # noqa: BLE001
            done.append(Prepared(who, False, str(_failed(lab.data, e, whose))))
            continue
        finally:
            _outcomes.reset(tokens[2])
            _progress.reset(tokens[1])
            _verifying.reset(tokens[0])
        done.append(_reported(who, folder, seen, verify))
    return done


def _reported(who: str, folder: Path, seen: list[Outcome], verify: bool) -> Prepared:
    if not seen:  # a preparer of its own, without build_once
        return Prepared(who, True, f"{who}: data ready in {_display(folder)}", folder)
    lines, rebuilt = [], False
    for o in seen:
        where = _display(o.folder)
        if o.problem is None:
            line = (f"{who}: ready, {_count(o.files)} verified in {where}" if o.verified
                    else f"{who}: data ready in {where} ({_count(o.files)})")
            if o.extra:
                line += f"; {_count(len(o.extra))} READY does not list, left alone: {_names(o.extra)}"
        elif o.problem.kind == "absent":
            line, rebuilt = f"{who}: data built in {where} ({_count(o.files)})", True
        else:
            line, rebuilt = f"{who}: data was {o.problem.describe()}; rebuilt in {where} ({_count(o.files)})", True
        lines.append(line)
    return Prepared(who, True, "\n".join(lines), folder, rebuilt)
