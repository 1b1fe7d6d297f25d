"""A lab's check, assembled from named checks: one module each, registered by name (``registry``).

``check`` (``checker``) grades a file against its lab; the names below are
also where the checker's callers have always found them.
"""

from ..failures import runtime_failure
from ..measures import (FIRST_STEP_SLACK, FIRST_STEP_SLACK_S, changed_during, counted_step_s, differs, figure_of,
                        fingerprint, first_step_allowance, round_seed, tampering)
from ..publishing import name_the_file, trace_dir
from ..staging import (Stage, original_reads, original_role, prepare_data, snapshot, stage, unreadable,
                       workspace)
from ..verdicts import (EXIT_CODES, FAILED, INCONCLUSIVE, PASSED, SKIPPED, Check, NotGraded, Progress, Report,
                        where_to_look)
from .checker import check, judge
from .registry import CHECKS, REGISTRY, Chain, chain_of

__all__ = [
    "check", "judge", "CHECKS", "REGISTRY", "Chain", "chain_of",
    "EXIT_CODES", "FAILED", "INCONCLUSIVE", "PASSED", "SKIPPED", "Check", "NotGraded", "Progress", "Report",
    "where_to_look", "runtime_failure", "name_the_file", "trace_dir",
    "Stage", "original_reads", "original_role", "prepare_data", "snapshot", "stage", "unreadable", "workspace",
    "FIRST_STEP_SLACK", "FIRST_STEP_SLACK_S", "changed_during", "counted_step_s", "differs", "figure_of",
    "fingerprint", "first_step_allowance", "round_seed", "tampering",
]
