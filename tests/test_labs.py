"""Lab discovery and the manifests' promises, for every lab in labs/."""

import pytest

from proflab import labs
from conftest import REPO

ALL = labs.discover(REPO / "labs")


def test_labs_are_found_and_numbered_from_zero():
    assert [lab.number for lab in ALL] == list(range(0, len(ALL)))
    assert ALL[0].name == "profiler" and ALL[1].name == "dataloader"


@pytest.mark.parametrize("lab", ALL, ids=lambda lab: lab.name)
def test_manifest_promises(lab):
    assert lab.original_is_intact(), f"{lab.original} changed: update original_sha256 in lab.toml"
    assert lab.exercise.read_bytes() == lab.original.read_bytes(), "the exercise must start as the original"
    assert lab.solution.exists()
    assert len(lab.hints) >= 2
    if lab.gating is not None:  # its exercise is a gate's settings: the gate runs another lab's files
        target = labs.resolve(lab.gating.lab, ALL)
        assert lab.original.suffix == lab.exercise.suffix == lab.solution.suffix == ".toml"
        assert labs.sha256(target.folder / lab.gating.fix) == lab.gating.fix_sha256
        assert target.gating is None and not lab.results and not lab.thresholds
        return
    assert lab.results
    assert lab.workload.timed_steps >= 8 and lab.workload.rounds >= 2
    if lab.leaner:  # the kit profiles it, memory included, and a fix must use less memory at its peak
        assert set(lab.leaner) >= {"cpu", "cuda"} and all(0 < s < 1 for s in lab.leaner.values())
        assert lab.evidence.metric == "memory_growth" and not lab.thresholds
        assert lab.workload.profile_steps >= 2
    elif lab.profiling is None:  # the kit profiles it, and a fix must be faster
        assert set(lab.thresholds) >= {"cpu", "cuda"}
        assert all(t > 1.0 for t in lab.thresholds.values())
        assert lab.evidence.metric
        assert lab.workload.profile_steps >= 2, "one warm-up step and at least one active step"
    else:  # the learner profiles it (lab 0), and a fix must cost little
        assert set(lab.overhead) >= {"cpu", "cuda"} and all(0 < o < 1 for o in lab.overhead.values())
        assert lab.workload.profile_steps == 0 and lab.profiling.labels and lab.answers
        assert 1 <= lab.profiling.max_steps < lab.workload.warmup_steps + lab.workload.timed_steps


@pytest.mark.parametrize("name", ["1", "01", "dataloader", "01-dataloader", "DataLoader"])
def test_a_lab_is_named_by_number_or_name(name):
    assert labs.resolve(name, ALL).name == "dataloader"


def test_an_unknown_lab_lists_the_known_ones():
    with pytest.raises(labs.LabNotFound, match=r"0 \(profiler\), 1 \(dataloader\)"):
        labs.resolve("embeddings-on-mars", ALL)


def test_the_lab_of_a_file():
    assert labs.find_by_file(ALL[1].exercise, ALL) == ALL[1]
    assert labs.find_by_file(REPO / "README.md", ALL) is None


def test_a_broken_manifest_says_which_file(tmp_path):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "lab.toml").write_text("number = 1\nname = 'x'\n")
    with pytest.raises(labs.ManifestError, match="lab.toml"):
        labs.discover(tmp_path)


def test_an_allowance_is_named_only_to_a_run_that_used_it():
    """Lab 4 spares one bincount() a step; naming it in every report would give its fix away (the exercise's
    report is on the lab's page): only a run that made one is told it was not counted."""
    from proflab import labs

    ev = labs.resolve("4").evidence
    assert dict(ev.allow) == {"bincount()": 1}
    assert "bincount" not in ev.expectation(100.0, {"item()": 100.0})
    assert "beside 1 bincount() per step, not counted" in ev.expectation(100.0, {"bincount()": 1.0, "item()": 3.0})
