"""The storage service lab 1 reads its photos from: real sockets, real subprocesses.

The service runs in this (the kit's) process; the clients run where a lab's
pipeline runs, in fresh interpreters and in DataLoader workers forked from them.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from proflab.running import storage
from proflab.labkit import storage_client
from proflab.running.storage import StorageService

FILES = {"a.txt": b"alpha\n", "b.bin": bytes(range(256)) * 40, "sub/c.txt": "gamma \u00e9\n".encode()}


@pytest.fixture
def folder(tmp_path):
    root = tmp_path / "root"
    for name, data in FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    (tmp_path / "secret.txt").write_bytes(b"outside\n")
    (root / "escape.txt").symlink_to(tmp_path / "secret.txt")
    (root / "inside.txt").symlink_to(root / "a.txt")
    return root


@pytest.fixture
def service(folder):
    with StorageService(folder, latency_ms=0) as s:
        yield s


@pytest.fixture(autouse=True)
def fresh_connections():
    storage_client.close()
    yield
    storage_client.close()


def python(code: str, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True,
                            text=True, timeout=timeout)
    assert result.returncode == 0, result.stderr
    return result


def env_with(address: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != storage.ENV_VAR}
    if address is not None:
        env[storage.ENV_VAR] = address
    return env


def test_a_fresh_process_reads_through_the_service(service, tmp_path):
    out = tmp_path / "out"
    code = f"""
        from pathlib import Path
        from proflab.labkit import storage_client
        out = Path({str(out)!r})
        for i, name in enumerate({sorted(FILES)!r}):
            (out / str(i)).parent.mkdir(exist_ok=True)
            (out / str(i)).write_bytes(storage_client.read(name))
    """
    before = time.perf_counter()
    python(code, env_with(service.address))
    after = time.perf_counter()
    for i, name in enumerate(sorted(FILES)):
        assert (out / str(i)).read_bytes() == FILES[name]
    reads = service.reads
    assert [r.name for r in reads] == sorted(FILES)
    for r in reads:
        assert before < r.started < r.finished < after  # the kit's clock, not the client's
        assert r.nbytes == len(FILES[r.name])


def test_the_service_applies_the_latency(folder):
    with StorageService(folder, latency_ms=50) as s:
        t = time.perf_counter()
        for _ in range(5):
            assert storage_client.read("a.txt", s.address) == FILES["a.txt"]
        assert time.perf_counter() - t >= 0.25
        assert all(r.finished - r.started >= 0.05 for r in s.reads)
        assert s.max_in_flight == 1


def test_reads_on_different_connections_overlap(folder):
    latency = 0.2
    with StorageService(folder, latency_ms=latency * 1000) as s:
        ready = threading.Barrier(9)
        got, errors = [], []

        def reader():
            try:
                ready.wait()
                got.append(storage_client.read("b.bin", s.address))
            except Exception as e:  # reported below
                errors.append(e)

        threads = [threading.Thread(target=reader) for _ in range(8)]
        for th in threads:
            th.start()
        ready.wait()
        t = time.perf_counter()
        for th in threads:
            th.join()
        elapsed = time.perf_counter() - t
        assert not errors, errors
        assert got == [FILES["b.bin"]] * 8
        assert elapsed < 3 * latency
        assert s.max_in_flight >= 4
        assert len(s.reads) == 8


@pytest.mark.parametrize("name, error, words", [
    ("../secret.txt", PermissionError, "without '..'"),
    ("sub/../../secret.txt", PermissionError, "without '..'"),
    ("/etc/passwd", PermissionError, "without '..'"),
    ("escape.txt", PermissionError, "outside the storage folder"),
    ("missing.txt", FileNotFoundError, "no such file"),
    ("sub", FileNotFoundError, "no such file"),
])
def test_names_outside_the_folder_and_missing_files_are_refused(service, name, error, words):
    with pytest.raises(error, match="storage") as caught:
        storage_client.read(name, service.address)
    assert words in str(caught.value) and repr(name) in str(caught.value)
    assert service.reads == []
    # The connection is still good for the next read.
    assert storage_client.read("a.txt", service.address) == FILES["a.txt"]
    assert [r.name for r in service.reads] == ["a.txt"]


def test_a_symlink_inside_the_folder_is_served(service):
    assert storage_client.read("inside.txt", service.address) == FILES["a.txt"]


def test_refusals_reach_a_client_in_another_process(service):
    code = """
        from proflab.labkit import storage_client
        for name, error in [("../secret.txt", PermissionError), ("nope.jpg", FileNotFoundError)]:
            try:
                storage_client.read(name)
            except error as e:
                print(type(e).__name__, e)
            else:
                raise SystemExit(f"{name} was served")
    """
    out = python(code, env_with(service.address)).stdout
    assert "PermissionError storage refused the read" in out
    assert "FileNotFoundError storage: 'nope.jpg': no such file in storage" in out
    assert service.reads == []


def test_clients_that_hang_up_mid_request_do_not_stop_the_service(folder):
    with StorageService(folder, latency_ms=30) as s:
        for request in [b"a.txt\n", b"b.b", b"x" * 5000, b"\xff\xfe\n"]:
            raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            raw.connect(s.address)
            raw.sendall(request)
            raw.close()
        time.sleep(0.1)
        assert storage_client.read("b.bin", s.address) == FILES["b.bin"]
        assert s.reads[-1].name == "b.bin"


def test_a_broken_connection_is_opened_again(folder):
    with StorageService(folder, latency_ms=0) as s:
        assert storage_client.read("a.txt", s.address) == FILES["a.txt"]
        storage_client._local.conn.sock.shutdown(socket.SHUT_RDWR)  # as if the link dropped
        assert storage_client.read("a.txt", s.address) == FILES["a.txt"]
        assert len(s.reads) == 2


def test_no_service_is_a_connection_error(folder, monkeypatch):
    monkeypatch.delenv(storage.ENV_VAR, raising=False)
    with pytest.raises(ConnectionError, match="not set"):
        storage_client.read("a.txt")
    s = StorageService(folder, latency_ms=0).start()
    address = s.address
    s.close()
    with pytest.raises(ConnectionError, match="no storage service answers"):
        storage_client.read("a.txt", address)


def test_close_is_idempotent_and_removes_the_socket(folder):
    s = StorageService(folder, latency_ms=0).start()
    assert storage_client.read("a.txt", s.address) == FILES["a.txt"]  # a connection left open
    socket_dir = Path(s.address).parent
    assert socket_dir.is_dir() and len(s.address) < 100
    t = time.perf_counter()
    s.close()
    s.close()
    assert time.perf_counter() - t < 2
    assert not socket_dir.exists()
    with pytest.raises(RuntimeError):
        s.start()


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    from proflab.labkit.photos import ensure_photos

    data = tmp_path_factory.mktemp("data")
    ensure_photos(data)
    return data


def test_forked_dataloader_workers_read_through_the_service(data_dir, tmp_path, monkeypatch):
    import torch

    from proflab.labkit.photos import PhotoDataset

    out = tmp_path / "batches.pt"
    code = f"""
        import torch
        from torch.utils.data import DataLoader
        from proflab.labkit import storage_client
        from proflab.labkit.photos import PhotoDataset

        dataset = PhotoDataset({str(data_dir)!r})
        dataset[0]  # the parent holds a connection before the workers fork
        loader = DataLoader(dataset, batch_size=8, num_workers=2, multiprocessing_context="fork")
        batches = []
        for images, labels in loader:
            batches.append((images, labels))
            if len(batches) == 2:
                break
        torch.save(batches, {str(out)!r})
    """
    with StorageService(data_dir / "photos", latency_ms=8) as s:
        python(code, env_with(s.address), timeout=120)
        reads = s.reads
    names = [r.name for r in reads]
    assert len(reads) >= 1 + 16
    assert {f"{i:05d}.jpg" for i in range(16)} <= set(names)
    assert all(r.finished - r.started >= 0.008 for r in reads)

    monkeypatch.delenv(storage.ENV_VAR, raising=False)
    local = PhotoDataset(data_dir)
    batches = torch.load(out)
    for b, (images, labels) in enumerate(batches):
        for j in range(8):
            x, y = local[8 * b + j]
            assert torch.equal(images[j], x) and int(labels[j]) == y


def test_the_data_set_stays_picklable_while_reading_through_the_service(data_dir, monkeypatch):
    import pickle

    import torch

    from proflab.labkit.photos import PhotoDataset

    monkeypatch.delenv(storage.ENV_VAR, raising=False)
    local = PhotoDataset(data_dir)[3]
    with StorageService(data_dir / "photos", latency_ms=0) as s:
        monkeypatch.setenv(storage.ENV_VAR, s.address)
        dataset = PhotoDataset(data_dir)
        first = dataset[3]
        again = pickle.loads(pickle.dumps(dataset))[3]
        assert [r.name for r in s.reads] == ["00003.jpg", "00003.jpg"]
    assert torch.equal(first[0], local[0]) and torch.equal(again[0], local[0]) and first[1] == local[1]
