"""Each bottleneck's drill, done as a learner would: the original profiled with ``proflab run``, the answer read
from that profile into ANSWERS, the kit's reference fix checked. It passes every check, the diagnosis
included. Measured alone (tests/conftest.py, MEASURED_MODULES): its speed-ups are the drills' thresholds'."""

from __future__ import annotations

import pytest

from conftest import explain

from proflab.authoring.drill_catalogue import CATALOGUE


@pytest.mark.parametrize("key", [b.key for b in CATALOGUE])
def test_a_drill_diagnosed_from_its_profile_and_fixed_passes(drill_kit, key):
    k, found = drill_kit
    lab, (where, ms) = found[key]
    code, report = k.check_decided(lab.name, "--file", str(lab.folder / "solution.py"))
    assert code == 0, explain(report)
    checks = {c["name"]: c for c in report["checks"]}
    assert [c["status"] for c in report["checks"]] == ["passed"] * 5, explain(report)
    assert where in checks["diagnosis"]["rationale"], checks["diagnosis"]
