"""The names lab 7's grading had at this path: its trial is ``gate_runs.GateRuns``, its four checks
``checks.gate_settings``, ``gate_unchanged``, ``gate_regression`` and ``gate_cause``."""

from .checks.gate_cause import judge_cause
from .checks.gate_regression import judge_regression
from .checks.gate_unchanged import judge_unchanged
from .gate_runs import GATES, VERSIONS, forget_untraced, run_name

__all__ = ["judge_cause", "judge_regression", "judge_unchanged", "GATES", "VERSIONS", "forget_untraced", "run_name"]
