"""A lab's data is built again when the code that builds it changes, with no version to bump by hand.

``build_once`` keys a data folder's READY by the builder's ``fingerprint``:
its source, the source of the kit's functions and classes it names (in turn),
and the kit's constants it names. A builder is written here as a module of
its own, imported, changed on disk and imported again, as an author edits a
lab kit module between two runs.
"""

from __future__ import annotations

import importlib.util
import itertools
from pathlib import Path

from proflab import labkit

BUILDER = '''
from pathlib import Path

ROWS = {rows}


def _row(i):
    return {row}


def _unused():
    return {unused}


def write(folder):
    Path(folder, "rows.txt").write_text("\\\\n".join(_row(i) for i in range(ROWS)))
'''
_names = itertools.count()


def builder(tmp_path: Path, rows=3, row="f'row {i}'", unused="0"):
    path = tmp_path / f"builder_{next(_names)}.py"
    path.write_text(BUILDER.format(rows=rows, row=row, unused=unused))
    spec = importlib.util.spec_from_file_location("fp_builder", path)  # one name, as a module edited in place
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.write


def test_a_change_to_the_builder_or_what_it_uses_changes_the_fingerprint(tmp_path):
    base = labkit.fingerprint(builder(tmp_path))
    assert base == labkit.fingerprint(builder(tmp_path))  # the same code: the same data
    assert base == labkit.fingerprint(builder(tmp_path, unused="1"))  # a function it never calls
    assert base != labkit.fingerprint(builder(tmp_path, row="f'row {i + 1}'"))  # a helper it calls
    assert base != labkit.fingerprint(builder(tmp_path, rows=4))  # a constant it reads


def test_a_changed_builder_builds_the_data_again(tmp_path):
    data = tmp_path / "data"
    first = labkit.build_once(data, "rows", "rows-v1", builder(tmp_path))
    assert (first / "rows.txt").read_text().startswith("row 0")
    again = labkit.build_once(data, "rows", "rows-v1", builder(tmp_path, unused="2"))
    assert (again / "rows.txt").read_text().startswith("row 0")
    # the author changes the helper, not the version: the folder is built again
    changed = labkit.build_once(data, "rows", "rows-v1", builder(tmp_path, row="f'line {i}'"))
    assert (changed / "rows.txt").read_text().startswith("line 0")
    ready = (changed / labkit.READY).read_text()
    assert "rows-v1+" in ready
