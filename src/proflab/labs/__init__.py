"""The labs: what a lab is (``model``), the vocabulary of its manifest (``keys``), reading a manifest
(``reading``) and finding the kit's labs (``finding``).

A lab's manifest is declarative, like a rustlings exercise list: its title, summary, files, the workload
every version runs, how results are compared, which trace evidence proves the fix, the speed-up
thresholds per device, and the hints. Nothing about a lab is scattered through the code.
"""

from .finding import BrokenLab, broken, discover, discover_all, find_by_file, resolve
from .keys import FORMAT
from .model import (DEVICES, FIGURES, GATE_WORKLOAD, Answer, Audit, Distributed, Drill, Evidence, Gating, Grading,
                    Lab, LabNotFound, ManifestError, Profiling, ResultRule, Storage, Workload, format_value, sha256)
from .reading import load, shown, tomllib

__all__ = ["BrokenLab", "broken", "discover", "discover_all", "find_by_file", "resolve", "FORMAT", "DEVICES",
           "FIGURES", "GATE_WORKLOAD", "Answer", "Audit", "Distributed", "Drill", "Evidence", "Gating", "Grading",
           "Lab", "LabNotFound", "ManifestError", "Profiling", "ResultRule", "Storage", "Workload", "format_value",
           "sha256", "load", "shown", "tomllib"]
