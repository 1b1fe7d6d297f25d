"""The evidence of a lab: reading a trace, and measuring the metric that proves a fix.

One name for what the checker, the Profile tab and ``proflab run`` read from a
trace. The trace model lives in ``trace``, each metric in its own module of
``metrics`` (registered in ``metrics.METRICS``), the work a step does in
``work``; this module only gathers their public names.
"""

from __future__ import annotations

from .metrics import METRICS, MODULES, measure
from .metrics.allreduce_traffic import ALLREDUCE_OPS, COLLECTIVE_OPS, GRADIENT_BYTES, allreduce_calls
from .metrics.allreduce_traffic import measure as allreduce_traffic
from .metrics.dataloader_wait import measure as dataloader_wait
from .metrics.elementwise_traffic import MATMUL_OPS
from .metrics.elementwise_traffic import measure as elementwise_traffic
from .metrics.host_syncs import HOST_READS, SIZE_READS, SYNC_CALLS, HostReads, counts_text, host_reads
from .metrics.host_syncs import measure as host_syncs
from .metrics.indexing_ops import INDEXING_OPS, ROW_VIEWS, SPLITTING_OPS
from .metrics.indexing_ops import measure as indexing_ops
from .metrics.memory_growth import measure as memory_growth
from .metrics.op_count import VIEW_OPS
from .metrics.op_count import measure as op_count
from .trace import (DATALOADER_PREFIX, DEVICE_CATEGORIES, LOADING_PREFIXES, Event, Measure, Trace, TraceError,
                    aten_ops, from_data, load, numel, outermost, union_length)
from .work import flops, hidden_convolutions, other_shapes, work_flops, work_shapes

# The names these helpers had when they were private to this module.
_outermost = outermost
_union_length = union_length

__all__ = [
    "METRICS", "MODULES", "measure",
    "Event", "Measure", "Trace", "TraceError", "load", "from_data", "DATALOADER_PREFIX", "LOADING_PREFIXES",
    "DEVICE_CATEGORIES",
    "aten_ops", "numel", "outermost", "union_length", "_outermost", "_union_length",
    "dataloader_wait", "indexing_ops", "op_count", "elementwise_traffic", "host_syncs", "memory_growth",
    "allreduce_traffic", "allreduce_calls",
    "INDEXING_OPS", "SPLITTING_OPS", "ROW_VIEWS", "VIEW_OPS", "MATMUL_OPS",
    "SYNC_CALLS", "HOST_READS", "SIZE_READS", "HostReads", "host_reads", "counts_text",
    "ALLREDUCE_OPS", "COLLECTIVE_OPS", "GRADIENT_BYTES",
    "flops", "work_flops", "work_shapes", "other_shapes", "hidden_convolutions",
]
