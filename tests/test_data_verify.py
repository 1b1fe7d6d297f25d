"""Lab data is ready when its files are, not when a READY file says so.

Every test works on real files in a kit of its own: a copy (never a symlink)
of the data ``proflab data`` built once for this module, damaged the way a
partial copy from another machine is (photos missing, a file cut short, a
byte changed), then handed to the real CLI. The read-only and full-disk cases
mount a read-only bind mount or a small tmpfs over the kit's ``data/``; they
are skipped, saying why, where this machine does not let the tests mount.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

from conftest import REPO, Kit, make_kit

if str(REPO / "src") not in sys.path:
    sys.path.insert(0, str(REPO / "src"))

from proflab import labkit  # noqa: E402
from proflab.labkit import blocks, classify, photos, recsys  # noqa: E402

NUM_FILES = photos.NUM_PHOTOS + 1  # and labels.txt
PHOTOS = labkit.data_version(photos._FORMAT, photos._write_photos)  # READY: format + builder fingerprint


def digests(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` but READY, with its sha256."""
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != "READY"}


def said(proc: subprocess.CompletedProcess) -> str:
    return proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Kit, dict[str, dict[str, str]]]:
    """A kit whose data ``proflab data`` built, and each lab folder's files with their sha256."""
    kit = make_kit(tmp_path_factory.mktemp("built"))
    proc = kit.run("data")
    assert proc.returncode == 0, said(proc)
    data = kit.root / "data"
    return kit, {folder.name: digests(folder) for folder in data.iterdir() if folder.is_dir()}


def copied(root: Path, built) -> Kit:
    """A kit of its own holding a byte-for-byte copy of the built data (a copy, so it can be damaged)."""
    kit = make_kit(root)
    shutil.copytree(built[0].root / "data", root / "data", symlinks=False)
    return kit


def assert_like_built(kit: Kit, built) -> None:
    for name, files in built[1].items():
        assert digests(kit.root / "data" / name) == files, f"data/{name} differs from what proflab data builds"


def stamps(folder: Path) -> dict[str, tuple[int, int]]:
    return {p.relative_to(folder).as_posix(): (p.stat().st_ino, p.stat().st_mtime_ns) for p in folder.rglob("*")}


@contextmanager
def mounted(target: Path, *options: str, source: Path | None = None):
    """A tmpfs (``-o size=...``) or a read-only bind mount of ``source`` over ``target``; skip if not allowed."""
    target.mkdir(parents=True, exist_ok=True)
    if source is not None:
        steps = [["mount", "--bind", str(source), str(target)], ["mount", "-o", "remount,ro,bind", str(target)]]
    else:
        steps = [["mount", "-t", "tmpfs", "-o", ",".join(options), "tmpfs", str(target)]]
    done = 0
    try:
        for step in steps:
            try:
                proc = subprocess.run(step, capture_output=True, text=True, timeout=30)
            except (OSError, subprocess.TimeoutExpired) as e:
                pytest.skip(f"cannot mount here ({e}): the test needs `mount` and the right to use it")
            if proc.returncode != 0:
                pytest.skip(f"cannot mount here ({' '.join(step[:3])}: {proc.stderr.strip()}); "
                            "the test needs root in a namespace that allows mounts")
            done += 1
        yield target
    finally:
        if done:
            subprocess.run(["umount", str(target)], capture_output=True, timeout=30)


# --- (a) photos missing ---------------------------------------------------------

def test_missing_photos_are_reported_and_rebuilt_with_the_same_bytes(tmp_path, built):
    kit = copied(tmp_path, built)
    gone = [f"{i:05d}.jpg" for i in range(100, 112)]
    for name in gone:
        (kit.root / "data" / "photos" / name).unlink()
    proc = kit.run("data")
    assert proc.returncode == 0, said(proc)
    assert (f"lab 1 (dataloader): data was incomplete (12 of {NUM_FILES} files missing: "
            f"00100.jpg, 00101.jpg, 00102.jpg and 9 more); rebuilt in data/photos") in proc.stdout, said(proc)
    assert "lab 2 (embeddings): data ready in data/requests" in proc.stdout
    assert_like_built(kit, built)
    assert not [p for p in (kit.root / "data").iterdir() if p.name.startswith(".")], "a temporary folder was left"
    assert labkit.inspect(kit.root / "data" / "photos", PHOTOS, hashes=True)[:2] == (None, NUM_FILES)


# --- (b) a file cut short -----------------------------------------------------------

def test_a_truncated_file_is_found_by_its_size(tmp_path, built):
    kit = copied(tmp_path, built)
    photo = kit.root / "data" / "photos" / "00007.jpg"
    os.truncate(photo, photo.stat().st_size // 2)
    tokens = kit.root / "data" / "tokens" / "tokens.pt"
    os.truncate(tokens, 4096)
    proc = kit.run("data")
    assert proc.returncode == 0, said(proc)
    assert (f"lab 1 (dataloader): data was incomplete (1 of {NUM_FILES} files of the wrong size: 00007.jpg); "
            "rebuilt in data/photos") in proc.stdout, said(proc)
    assert ("lab 3 (fusion): data was incomplete (1 of 1 files of the wrong size: tokens.pt); "
            "rebuilt in data/tokens") in proc.stdout, said(proc)
    assert_like_built(kit, built)


# --- (c) a byte changed, the size kept ----------------------------------------------------

def test_a_changed_byte_passes_the_cheap_check_and_is_caught_and_repaired_by_verify(tmp_path, built):
    kit = copied(tmp_path, built)
    photo = kit.root / "data" / "photos" / "00042.jpg"
    raw = bytearray(photo.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    photo.write_bytes(bytes(raw))

    plain = kit.run("data")  # readiness is a stat per file: same sizes, so ready
    assert plain.returncode == 0, said(plain)
    assert f"lab 1 (dataloader): data ready in data/photos ({NUM_FILES} files)" in plain.stdout, said(plain)
    assert photo.read_bytes() == bytes(raw)

    proc = kit.run("data", "--verify")
    assert proc.returncode == 0, said(proc)
    assert (f"lab 1 (dataloader): data was damaged (1 of {NUM_FILES} files with other bytes than READY lists: "
            "00042.jpg); rebuilt in data/photos") in proc.stdout, said(proc)
    assert "lab 2 (embeddings): ready, 1 file verified in data/requests" in proc.stdout, said(proc)
    assert_like_built(kit, built)
    assert labkit.inspect(kit.root / "data" / "photos", PHOTOS, hashes=True)[:2] == (None, NUM_FILES)


# --- (d) an intact copy ----------------------------------------------------------------

def test_an_intact_copy_is_ready_without_touching_a_file(tmp_path, built):
    kit = copied(tmp_path, built)
    (kit.root / "data" / "photos" / "notes.txt").write_text("an instructor's file, not the kit's\n")
    before = stamps(kit.root / "data")
    proc = kit.run("data")
    assert proc.returncode == 0, said(proc)
    assert "rebuilt" not in proc.stdout and "built in" not in proc.stdout, said(proc)
    for line in (f"lab 1 (dataloader): data ready in data/photos ({NUM_FILES} files)",
                 "lab 2 (embeddings): data ready in data/requests (1 file)",
                 "lab 3 (fusion): data ready in data/tokens (1 file)",
                 "lab 4 (syncs): data ready in data/features (1 file)"):
        assert line in proc.stdout, said(proc)
    verify = kit.run("data", "--verify")
    assert verify.returncode == 0, said(verify)
    assert (f"lab 1 (dataloader): ready, {NUM_FILES} files verified in data/photos; "
            "1 file READY does not list, left alone: notes.txt") in verify.stdout, said(verify)
    assert stamps(kit.root / "data") == before, "a ready folder was written to"


def test_a_ready_from_the_previous_kit_or_none_or_a_cut_short_one_is_rebuilt(tmp_path, built):
    """A READY that only names the format (the kit before file lists) proves nothing: built again, once.
    So is a folder without READY (its copy stopped before READY), or with half of one."""
    kit = copied(tmp_path, built)
    data = kit.root / "data"
    for name, fmt in (("photos", photos._FORMAT), ("requests", recsys._FORMAT)):
        (data / name / "READY").write_text(fmt + "\n")
    (data / "tokens" / "READY").unlink()
    ready = data / "features" / "READY"
    ready.write_bytes(ready.read_bytes()[:40])
    proc = kit.run("data")
    assert proc.returncode == 0, said(proc)
    assert ("lab 1 (dataloader): data was from an older kit (its READY lists no files to verify it by); "
            "rebuilt in data/photos") in proc.stdout, said(proc)
    assert "lab 2 (embeddings): data was from an older kit" in proc.stdout, said(proc)
    assert "lab 3 (fusion): data was incomplete (no READY file" in proc.stdout, said(proc)
    assert "lab 4 (syncs): data was unverifiable (its READY cannot be read" in proc.stdout, said(proc)
    assert_like_built(kit, built)
    for name, fmt in (("photos", PHOTOS), ("requests", labkit.data_version(recsys._FORMAT, recsys._write_requests)),
                      ("tokens", labkit.data_version(blocks._FORMAT, blocks._write_tokens)),
                      ("features", labkit.data_version(classify._FORMAT, classify._write_features))):
        assert labkit.inspect(data / name, fmt)[0] is None, f"data/{name} is still not ready: built every time"


# --- (e) a read-only data folder ---------------------------------------------------------

def test_a_read_only_data_folder_is_a_clear_kit_error(tmp_path, built):
    kit = make_kit(tmp_path / "kit")
    empty = tmp_path / "empty"
    empty.mkdir()
    with mounted(kit.root / "data", source=empty):
        proc = kit.run("data")
        assert proc.returncode == 3, said(proc)
        assert "cannot build lab 1's data in data/photos: Read-only file system" in proc.stderr, said(proc)
        assert "Traceback" not in said(proc)

        # the call `proflab check` makes before it runs anything
        cwd = os.getcwd()
        os.chdir(kit.root)
        try:
            with pytest.raises(labkit.DataError) as raised:
                labkit.prepare("proflab.labkit.photos:ensure_photos", kit.root / "data")
        finally:
            os.chdir(cwd)
        assert str(raised.value).startswith("cannot build lab 1's data in data/photos: Read-only file system")
        assert "\n" not in str(raised.value)


def test_a_read_only_copy_is_usable_when_intact_and_a_kit_error_when_not(tmp_path, built):
    kit = make_kit(tmp_path / "kit")
    shutil.copytree(built[0].root / "data", tmp_path / "copy")
    with mounted(kit.root / "data", source=tmp_path / "copy"):
        proc = kit.run("data", "--verify")
        assert proc.returncode == 0, said(proc)
        assert f"lab 1 (dataloader): ready, {NUM_FILES} files verified in data/photos" in proc.stdout, said(proc)
    (tmp_path / "copy" / "photos" / "00003.jpg").unlink()
    with mounted(kit.root / "data", source=tmp_path / "copy"):
        proc = kit.run("data")
        assert proc.returncode == 3, said(proc)
        assert ("cannot build lab 1's data in data/photos: Read-only file system; the folder is incomplete "
                f"(1 of {NUM_FILES} files missing: 00003.jpg)") in proc.stderr, said(proc)
        assert "lab 2 (embeddings): data ready in data/requests" in proc.stdout, said(proc)
        assert "Traceback" not in said(proc)


# --- (f) a full disk ---------------------------------------------------------------

def test_a_full_disk_is_a_clear_kit_error_and_leaves_nothing_that_looks_ready(tmp_path, built):
    kit = make_kit(tmp_path / "kit")
    data = kit.root / "data"
    with mounted(data, "size=3m"):  # lab 2's 1.4 MB fits; lab 1's 2,049 photos (8 MB) do not
        proc = kit.run("data")
        assert proc.returncode == 3, said(proc)
        assert "cannot build lab 1's data in data/photos: No space left on device" in proc.stderr, said(proc)
        assert "lab 2 (embeddings): data built in data/requests (1 file)" in proc.stdout, said(proc)
        assert "Traceback" not in said(proc) and "RuntimeError" not in said(proc)
        assert not (data / "photos").exists()
        assert sorted(p.name for p in data.iterdir()) == ["requests"], "a half-built folder was left behind"
        assert labkit.inspect(data / "photos", PHOTOS)[0] is not None


def test_a_full_disk_while_repairing_leaves_the_incomplete_copy_as_not_ready(tmp_path, built):
    kit = make_kit(tmp_path / "kit")
    data = kit.root / "data"
    with mounted(data, "size=9m"):  # room for one copy of the photos, not for a second beside it
        shutil.copytree(built[0].root / "data" / "photos", data / "photos")
        for i in range(20):
            (data / "photos" / f"{i:05d}.jpg").unlink()
        proc = kit.run("data")
        assert proc.returncode == 3, said(proc)
        assert ("cannot build lab 1's data in data/photos: No space left on device; the folder is incomplete "
                f"(20 of {NUM_FILES} files missing") in proc.stderr, said(proc)
        assert "Traceback" not in said(proc)
        assert len(list((data / "photos").iterdir())) == NUM_FILES - 20 + 1  # as it was, READY included
        assert not [p for p in data.iterdir() if p.name.startswith(".")], "a temporary folder was left"
        again = kit.run("data")
        assert again.returncode == 3, said(again)
        assert "the folder is incomplete (20 of" in again.stderr, said(again)


# --- processes that race, and the cost of the check ------------------------------------------

def test_processes_racing_to_repair_a_copy_all_get_the_whole_data(tmp_path, built):
    kit = copied(tmp_path, built)
    for i in range(0, 2048, 100):
        (kit.root / "data" / "photos" / f"{i:05d}.jpg").unlink()
    code = ("import sys; from proflab.labkit.photos import PhotoDataset; d = PhotoDataset(sys.argv[1]); "
            "[d.root.joinpath(f'{i:05d}.jpg').read_bytes() for i in range(len(d))]; print(len(d))")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(kit.root / "data")], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], results
    assert all(out.strip() == "2048" for out, _ in results), results
    assert_like_built(kit, built)
    assert not [p for p in (kit.root / "data").iterdir() if p.name.startswith(".")]


# --- what the last preparation found, kept for the checker ----------------------------------------

# Prepares one lab's data as a check does, then says where, and whether that imported torch.
PREPARE = ("import json, sys; from pathlib import Path; from proflab.labkit import prepare; "
           "print(json.dumps([str(prepare(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]))), "
           "'torch' in sys.modules]))")
FEATURES = "proflab.labkit.classify:ensure_features"  # lab 4's data: one file and READY


def prepared(data: Path, memo: Path) -> tuple[str, bool]:
    proc = subprocess.run([sys.executable, "-c", PREPARE, FEATURES, str(data), str(memo)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    folder, imported = json.loads(proc.stdout)
    return folder, imported


def test_a_check_finds_its_data_ready_without_importing_torch_from_any_kit_that_shares_it(tmp_path, built):
    kit = copied(tmp_path / "kit", built)
    data, memo = kit.root / "data", kit.root / "data" / ".prepared.json"
    assert prepared(data, memo) == (str(data / "features"), True)  # no memo yet: the preparer itself
    assert json.loads(memo.read_text())[FEATURES]["data_dir"] == str(data.resolve())
    assert prepared(data, memo) == (str(data / "features"), False)
    # A kit whose data/ links to this one's (the tests' kits, a moved kit) reads the same memo.
    other = make_kit(tmp_path / "other")
    (other.root / "data").symlink_to(data)
    assert prepared(other.root / "data", other.root / "data" / ".prepared.json") == \
        (str(other.root / "data" / "features"), False)
    assert_like_built(kit, built)


@pytest.mark.parametrize("damage", ["file removed", "file cut short", "other source", "memo garbled",
                                    "memo of another folder"])
def test_the_memo_is_only_believed_while_the_data_and_the_preparer_are_as_it_says(tmp_path, built, damage):
    kit = copied(tmp_path, built)
    data, memo = kit.root / "data", kit.root / "data" / ".prepared.json"
    prepared(data, memo)
    features = data / "features" / "features.pt"
    kept = json.loads(memo.read_text())
    if damage == "file removed":
        features.unlink()
    elif damage == "file cut short":
        features.write_bytes(features.read_bytes()[:1000])
    elif damage == "other source":
        kept[FEATURES]["source"] = "0" * 64
    elif damage == "memo garbled":
        memo.write_text("{ not json")
    else:
        kept[FEATURES]["data_dir"] = str(tmp_path / "elsewhere")
    if damage in ("other source", "memo of another folder"):
        memo.write_text(json.dumps(kept))
    assert prepared(data, memo) == (str(data / "features"), True)  # checked by the preparer, repaired
    assert_like_built(kit, built)
    assert json.loads(memo.read_text())[FEATURES]["data_dir"] == str(data.resolve())
    assert prepared(data, memo)[1] is False
