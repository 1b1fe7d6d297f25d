"""The names the evidence check's module had at this path: the check is ``checks.evidence`` (and lab 0's,
``checks.own_profile``)."""

from .checks.evidence import (PROFILED_SLOWDOWN_MAX, PROFILED_SLOWDOWN_MIN_S, TRACE_STEP_FACTOR, TRACE_STEP_SLACK_S,
                              evidence_holds, measure, not_a_fix, same_work_when_profiled)
from .checks.own_profile import own_profile

__all__ = ["PROFILED_SLOWDOWN_MAX", "PROFILED_SLOWDOWN_MIN_S", "TRACE_STEP_FACTOR", "TRACE_STEP_SLACK_S",
           "evidence_holds", "measure", "not_a_fix", "same_work_when_profiled", "own_profile"]
