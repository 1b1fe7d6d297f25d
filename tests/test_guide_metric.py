"""The instructor guide's worked metric ("A metric from first line to test") runs as printed: its module,
loaded where ``new-lab --metric`` would write it, and its unit test, run against real traces."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GUIDE = REPO / "docs" / "instructor.md"
sys.path.insert(0, str(Path(__file__).resolve().parent / "metrics"))  # real_traces, as the metrics' tests import it


def _blocks() -> tuple[str, str]:
    """The section's two Python blocks: the metric's module, then its test."""
    text = GUIDE.read_text(encoding="utf-8")
    section = text[text.index("#### A metric from first line to test"):]
    section = section[:section.index("\n### ")]
    module, test = re.findall(r"```python\n(.*?)```", section, re.S)
    return module, test


def test_the_guides_metric_and_its_test_run_as_printed(tmp_path):
    import proflab.measuring.metrics as metrics

    module, test = _blocks()
    name = re.search(r'^NAME = "(\w+)"', module, re.M).group(1)
    path = tmp_path / f"{name}.py"
    path.write_text(module, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(f"proflab.measuring.metrics.{name}", path)
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = loaded
    setattr(metrics, name, loaded)
    try:
        spec.loader.exec_module(loaded)
        assert loaded.__doc__ and "Seen in TensorBoard:" in loaded.__doc__  # the registry's contract
        assert loaded.UNIT == "ms"
        namespace: dict = {}
        exec(compile(test, f"tests/metrics/test_{name}.py", "exec"), namespace)
        tests = [f for key, f in namespace.items() if key.startswith("test_")]
        assert tests
        for number, run in enumerate(tests):
            (tmp_path / str(number)).mkdir()
            run(tmp_path / str(number))
    finally:
        sys.modules.pop(spec.name, None)
        delattr(metrics, name)
