"""The evidence counts the lesson however it is written: lab 6's ranks and labs 1 and 9's loading.

Attempts in plain Python (the audit lets them through), each the lab's
reference fix with one trick, graded through the checker's own batches
(``conftest.Batch``), as in ``test_trust``:

* lab 6, the ranks share no channel but the collectives: gradients averaged
  after every micro-batch through a file both ranks map (in /dev/shm, or in
  /tmp with numpy) never reach the other rank, whose files are its own;
* lab 6, the ranks share no channel but the collectives (the attempts that
  import ``socket`` or ``ctypes``, which the audit refuses, with the audit
  off): a Unix socket reached by its
  path, and System V shared memory, are refused to a rank; a TCP socket of
  the ranks' own, and the collectives' key-value store, carry bytes the
  kernel counts on the job's network, which count as traffic;
* lab 6, a rank does its own share of the work: one that also runs the other
  rank's half (through the model, or with its products spelled as einsum) to
  need no collective is held to the original rank's matrix products;
* labs 1 and 9, loading is the DataLoader's wait wherever it runs: photos
  loaded in the step from a DataLoader of indices, or with no DataLoader at
  all, are waited for as long, while a pool of threads that loads beside the
  steps (a sound fix) still passes (``test_trust_sound``: it rests on a speed).

Lab 6's attempts fail on what load does not move (a count, a refusal, seconds
of work after the window): they run with the other slow tests, on two workers
(``load_free``). The loading attempts are held to the original's wait, measured
beside them: they run alone.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import Batch, explain, sharing_data

from proflab.running import landlock

CHEATS = Path(__file__).resolve().parent / "cheats"

SHARED_FILES = ["lab6_shm_average.py", "lab6_tmp_memmap.py"]
JOBS_WORK = ["lab6_both_halves.py", "lab6_other_half_by_einsum.py"]
REFUSED_CHANNELS = ["lab6_unix_socket.py", "lab6_sysv_shm.py", "lab6_netlink_socket.py"]
COUNTED_CHANNELS = ["lab6_loopback_socket.py", "lab6_store_exchange.py"]
AFTER_WINDOW = "lab6_work_after_window.py"
# (they import socket or ctypes)
AUDIT_REFUSES = {"lab6_unix_socket.py", "lab6_sysv_shm.py", "lab6_loopback_socket.py", "lab6_netlink_socket.py"}
LOADED_IN_THE_STEP = ["lab9_indices_loader.py", "lab9_no_dataloader.py"]


@pytest.fixture(scope="module")
def batch(kit, tmp_path_factory) -> Batch:
    """Two batches, audited as a learner's file is: lab 6's attempts, and the loading attempts."""
    return Batch(sharing_data(tmp_path_factory.mktemp("spellings-kit"), kit), {
        "ranks": ({}, [("6", CHEATS / n, True) for n in SHARED_FILES + JOBS_WORK]
                  + [("6", CHEATS / n, n not in AUDIT_REFUSES) for n in REFUSED_CHANNELS + COUNTED_CHANNELS]
                  + [("6", CHEATS / AFTER_WINDOW, True)]),
        "loading": ({}, [("9", CHEATS / n, True) for n in LOADED_IN_THE_STEP]),
    })


def only_failure(report: dict) -> dict:
    failed = [c for c in report["checks"] if c["status"] == "failed"]
    assert len(failed) == 1, explain(report)
    return failed[0]


@pytest.mark.load_free
@pytest.mark.parametrize("name", SHARED_FILES)
def test_gradients_averaged_through_a_file_the_ranks_share_never_reach_the_other_rank(batch, name):
    """Before: traffic 60 MB -> 0 MB, and faster. Each rank now writes and reads only files of its own."""
    if landlock.landlock_abi() < 1:
        pytest.skip("this kernel offers no Landlock: the ranks' files cannot be kept apart here")
    code, report = batch.report("ranks", CHEATS / name)
    assert report["audited"] is True and code == 1, explain(report)
    check = only_failure(report)
    assert check["name"] == "runs" and "raised an error on rank" in check["rationale"], explain(report)
    assert "Permission denied" in check["actual"], explain(report)
    assert "the ranks share nothing but torch.distributed's collectives" in check["actual"], explain(report)


@pytest.mark.load_free
@pytest.mark.parametrize("name", REFUSED_CHANNELS)
def test_a_channel_reached_by_name_outside_the_file_system_is_refused_to_a_rank(batch, name):
    """Before: traffic 60 MB -> 0 MB (the Unix socket: faster 0.97x; the shared memory: 1.11x, inconclusive
    between 1.00 and 1.24x). A rank's seccomp filter refuses the socket and the segment, named."""
    from proflab.running import side_channels

    if not side_channels.program():
        pytest.skip("the kit has no seccomp filter for this machine's architecture")
    code, report = batch.report("ranks", CHEATS / name)
    assert report["audited"] is False and code == 1, explain(report)
    check = only_failure(report)
    assert check["name"] == "runs" and "raised an error on rank" in check["rationale"], explain(report)
    assert "Operation not permitted" in check["actual"], explain(report)
    assert "opens no socket but the network's (no Unix or netlink socket) and no shared memory" in check["actual"], \
        explain(report)


@pytest.mark.load_free
@pytest.mark.parametrize("name", COUNTED_CHANNELS)
def test_bytes_the_ranks_send_outside_the_collectives_count_as_traffic(batch, name):
    """Before: traffic 60 MB -> 0 MB (the evidence passed; the socket was 1.05x, the store 0.37x). The
    kernel counts the job's network: what the collectives do not explain is traffic."""
    code, report = batch.report("ranks", CHEATS / name)
    assert report["audited"] is (name not in AUDIT_REFUSES) and code == 1, explain(report)
    check = only_failure(report)
    assert check["name"] == "evidence" and "is still" in check["rationale"], explain(report)
    learner = report["evidence"]["learner"]
    # the trace's collectives carry nothing; the kernel's count puts the original's bytes, or more, back
    assert learner["details"]["calls_per_step"] == 0, explain(report)
    assert learner["details"]["outside_collectives_mb_per_step"] >= 0.9 * report["evidence"]["original"]["value"], \
        explain(report)
    assert "went outside the collectives the trace records" in check["actual"], explain(report)


@pytest.mark.load_free
def test_a_ranks_work_after_its_window_counts_to_the_jobs_end(batch):
    """Rank 0 spins 3 s once its steps are over, rank 1 waits for it: before, no rank's after-window time
    was read. Each rank's runs to the job's end now, and what exceeds the original's counts per step."""
    code, report = batch.report("ranks", CHEATS / AFTER_WINDOW)
    assert code == 1, explain(report)
    counted = report["after"]["counted_s"]
    assert counted and min(counted) >= 2.0, explain(report)  # of the 3 s, beyond the original's shutdown
    assert only_failure(report)["name"] == "faster", explain(report)


@pytest.mark.load_free
@pytest.mark.parametrize("name", JOBS_WORK)
def test_a_rank_that_does_the_whole_jobs_work_fails_on_its_share(batch, name):
    """Before: no collective at all (0 MB), the same results, and faster. The products of a rank's steps,
    counted by size whatever their operator (einsum's are batched products), are twice the original's."""
    code, report = batch.report("ranks", CHEATS / name)
    assert report["audited"] is True and code == 1, explain(report)
    check = only_failure(report)
    assert check["name"] == "evidence", explain(report)
    assert "did the work of more than its own share of the job" in check["rationale"], explain(report)
    assert "the original's:" in check["actual"], explain(report)
    # rank 0's share, as the report says it: at least 1.9x (two ranks' halves), never the original's own
    ratio = float(check["rationale"].rsplit(": ", 1)[1].split("×")[0])
    assert ratio >= 1.9, explain(report)


@pytest.mark.parametrize("name", LOADED_IN_THE_STEP)
def test_photos_loaded_in_the_step_are_still_waited_for(batch, name):
    """Before: the DataLoader's wait read 41 -> 0 ms, only the speed-up's noise stood in the way."""
    code, report = batch.report("loading", CHEATS / name)
    assert report["audited"] is True and code == 1, explain(report)
    check = only_failure(report)
    assert check["name"] == "evidence", explain(report)
    assert "time each step waits on the DataLoader is still" in check["rationale"], explain(report)
    wait = next(e for e in report["evidences"] if e["metric"] == "dataloader_wait")
    assert not wait["met"], explain(report)
    assert wait["learner"]["value"] > 0.5 * wait["original"]["value"], explain(report)
    # the wait is the loading on the step's own thread, outside any DataLoader range
    assert wait["learner"]["details"]["loading_outside_ms_per_step"] > 0.9 * wait["learner"]["value"], explain(report)
    # the other two bottlenecks are fixed: only the loading is left
    assert all(e["met"] for e in report["evidences"] if e["metric"] != "dataloader_wait"), explain(report)


