"""The evidence metrics, one module each, registered by name.

(The contract each metric module keeps is written here as the metrics move in.)
"""

from __future__ import annotations

from typing import Callable

from ..trace import Measure, Trace

METRICS: dict[str, Callable[[Trace], Measure]] = {}
