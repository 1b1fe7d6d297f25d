"""Where a file is taken at another git revision: the baseline of ``proflab gate --against REV``.

The whole tree of tracked files at that revision is exported (``git archive``)
into a scratch folder, not the one file alone: a pipeline imports its
project's modules, and the baseline must import them as they were there too.
Nothing of the working tree is touched: no checkout, no stash, no worktree.
"""

from __future__ import annotations

import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path


class RevisionError(ValueError):
    """The revision, the repository or the file cannot be used (a usage error: exit 2)."""


@dataclass(frozen=True)
class Tree:
    root: Path  # the exported tree
    revision: str  # as given (main, HEAD~1)
    commit: str  # what it named: 40 hex digits
    repo: Path  # the repository's top folder

    def import_paths(self, searched: list[str]) -> list[str]:
        """The images, in the exported tree, of the folders of ``searched`` (a ``sys.path``) inside the
        repository (a ``src/`` layout installed in editable mode puts its ``src/`` there), and ``src/``
        itself when the tree has one: a baseline imports its project's modules as they were."""
        found = []
        for entry in searched:
            try:
                image = self.image(Path(entry or "."))
            except ValueError:
                continue
            if image.is_dir() and str(image) not in found:
                found.append(str(image))
        if (self.root / "src").is_dir() and str(self.root / "src") not in found:
            found.append(str(self.root / "src"))
        return found

    def image(self, path: Path) -> Path:
        """Where ``path`` (in the working tree) lies in the exported tree."""
        return self.root / Path(path).resolve().relative_to(self.repo)


def _git(args: list[str], cwd: Path) -> str:
    try:
        done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    except FileNotFoundError:
        raise RevisionError("git is not installed here: --against needs it (or compare with --baseline FILE)") \
            from None
    except subprocess.TimeoutExpired:
        raise RevisionError(f"git {' '.join(args)} did not answer within 120 s") from None
    if done.returncode != 0:
        raise RevisionError((done.stderr.strip().splitlines() or [f"git {args[0]} failed"])[-1])
    return done.stdout.strip()


def _inside(member: tarfile.TarInfo, path: str) -> tarfile.TarInfo | None:
    """tarfile's "data" filter, skipping (not failing on) a member it refuses: a link out of the tree."""
    try:
        return tarfile.data_filter(member, path)
    except tarfile.FilterError:
        return None


def export(revision: str, file: Path, into: Path) -> tuple[Tree, Path]:
    """The tree at ``revision`` of the repository ``file`` is in, exported into ``into``, and ``file``'s
    copy there."""
    file = Path(file).resolve()
    try:
        repo = Path(_git(["rev-parse", "--show-toplevel"], file.parent)).resolve()
    except RevisionError:
        raise RevisionError(f"{file.parent} is not inside a git repository: --against needs one "
                            "(or compare with --baseline FILE)") from None
    try:
        commit = _git(["rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}"], repo)
    except RevisionError:
        commit = ""
    if not commit:
        raise RevisionError(f"'{revision}' names no commit of {repo} (a branch, a tag, a commit, HEAD~1); "
                            "in a CI job, fetch it first (git fetch origin main, or a checkout with "
                            "fetch-depth: 0)")
    inside = file.relative_to(repo).as_posix()
    listed = _git(["ls-tree", "--name-only", commit, "--", inside], repo)
    if not listed:
        raise RevisionError(f"{inside} does not exist at {revision} ({commit[:12]}): there is nothing to compare "
                            "it with; compare with --baseline FILE instead")
    into.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryFile() as errors:  # a file, not a pipe: git's messages can never fill it and stall it
        proc = subprocess.Popen(["git", "archive", "--format=tar", commit], cwd=repo, stdout=subprocess.PIPE,
                                stderr=errors)
        unpacked = ""
        try:
            with tarfile.open(fileobj=proc.stdout, mode="r|") as tar:
                if hasattr(tarfile, "data_filter"):
                    tar.extractall(into, filter=_inside)
                else:  # Python before 3.10.12 / 3.11.4: the project's own repository, unfiltered
                    tar.extractall(into)
        except tarfile.TarError as e:
            unpacked = str(e)
        finally:
            proc.stdout.close()
            if unpacked:
                proc.kill()
            code = proc.wait()
        errors.seek(0)
        said = errors.read().decode(errors="replace").strip()
    if unpacked or code != 0:
        last = said.splitlines()[-1] if said else f"git exited with {code}"
        raise RevisionError(f"git archive {revision} could not be unpacked: {unpacked or last}")
    tree = Tree(into.resolve(), revision, commit, repo)
    return tree, tree.image(file)
