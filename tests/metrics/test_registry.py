"""The registry of evidence metrics keeps its contract (``proflab.measuring.metrics``' docstring).

Every registered metric is a module of its own, named as it is registered,
with a documentation row, a unit and a unit test of its own beside this file;
every module of the package is registered; the labs write their figures in
their metric's unit; and the registry imports no torch.
"""

from __future__ import annotations

import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

from proflab import labs
from proflab.measuring import evidence, metrics

HERE = Path(__file__).resolve().parent


@pytest.mark.parametrize("name", sorted(metrics.METRICS))
def test_a_registered_metric_is_a_documented_module_with_a_unit_and_a_test(name):
    module = sys.modules[metrics.METRICS[name].__module__]
    assert module.__name__ == f"{metrics.__name__}.{name}", "the module is named as the metric"
    assert module.NAME == name
    assert metrics.METRICS[name] is module.measure
    assert isinstance(module.UNIT, str) and module.UNIT.strip()
    doc = (module.__doc__ or "").strip()
    assert doc.splitlines() and doc.splitlines()[0].strip(), "its docstring's first line is its documentation row"
    assert "Seen in TensorBoard:" in doc, "its docstring says where a learner sees it"
    assert (HERE / f"test_{name}.py").is_file(), f"{name} has no unit test: tests/metrics/test_{name}.py"


def test_every_module_of_the_package_is_registered():
    found = {m.name for m in pkgutil.iter_modules(metrics.__path__) if not m.name.startswith("_")}
    assert found == set(metrics.METRICS), "a module in metrics/ is a metric: register it in metrics/__init__.py"


def test_a_lab_writes_its_evidence_in_its_metric_unit():
    for lab in labs.discover():
        if lab.evidence is not None and lab.evidence.unit:
            module = sys.modules[metrics.METRICS[lab.evidence.metric].__module__]
            assert lab.evidence.unit == module.UNIT, f"lab {lab.number}'s [evidence] unit"


def test_evidence_keeps_the_registry_and_measure():
    assert evidence.METRICS is metrics.METRICS
    assert evidence.measure is metrics.measure
    with pytest.raises(KeyError, match="unknown evidence metric"):
        metrics.measure("no_such_metric", "unused.json")


def test_the_registry_imports_no_torch():
    """The manifest check lists the metric names, and must not wait for torch to load."""
    code = "import sys, proflab.measuring.metrics, proflab.measuring.evidence; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
