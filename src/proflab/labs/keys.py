"""The vocabulary of a lab's manifest, ``lab.toml``: every table and key, declared once.

``labs.reading`` checks a manifest against it; the instructor guide's tables of keys (``{{ keys.workload }}``)
and ``docs/schemas/lab.schema.json`` are made from it. A new key is a line here, and a field of the
``Lab`` it fills.
"""

from __future__ import annotations

import functools

from ..vocabulary import (BOOL, FILE, FOLDER, STRING, STRING_TABLE, TABLE, TEXT, TEXTS, Key, Kind, Table,
                          choice, integer, is_number, is_text, names, number, one_of, pattern)
from .model import FIGURES

# The format of lab.toml this kit reads (``format = 1``): a manifest written for a later one is refused,
# with what to do, rather than read wrongly.
FORMAT = 1

NAME = pattern('a lowercase name of letters, digits, "-" and "_" (like "dataloader")', "[a-z0-9][a-z0-9_-]*")
DATA_SPEC = pattern('"module:function" (like "proflab.labkit.photos:ensure_photos")',
                    r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*")
EVIDENCES = Kind("a table ([evidence]), or an array of tables ([[evidence]], one per bottleneck)",
                 lambda v: isinstance(v, dict) or (isinstance(v, list) and all(isinstance(x, dict) for x in v)),
                 {"oneOf": [{"type": "object"}, {"type": "array", "items": {"type": "object"}, "minItems": 1}]})
SPEEDUP = number(1.0, expected="a speed-up, a number 1.0 or more")
OVERHEAD_SHARE = number(0, strict=True, high=1,
                        expected="a share of the original's time, above 0 and below 1 (0.25: at most 25% slower)")
PEAK_SHARE = number(0, strict=True, high=1,
                    expected="a share of the original's peak memory, above 0 and below 1 (0.5: at most half)")
FIGURE = choice(FIGURES)
NOT_A_FIX = Kind("a table of calls and why each is not a fix ({\"gc.collect\" = \"...\"})",
                 lambda v: isinstance(v, dict) and all(is_text(x) for x in v.values()),
                 {"type": "object", "additionalProperties": {"type": "string", "minLength": 1}})
ALLOW = Kind("a table of a figure's parts and how many of each are not counted ({\"bincount()\" = 1})",
             lambda v: isinstance(v, dict) and all(is_text(k) and is_number(x) and x >= 0 for k, x in v.items()),
             {"type": "object", "additionalProperties": {"type": "number", "minimum": 0}})
LAB_NAME = Kind("a lab's number or name", lambda v: (isinstance(v, int) and not isinstance(v, bool)) or is_text(v),
                {"oneOf": [{"type": "integer"}, {"type": "string", "minLength": 1}]})
RANGES = Kind("a table of [low, high] ranges ({rounds = [2, 10]})",
              lambda v: isinstance(v, dict) and all(isinstance(r, list) and len(r) == 2 and all(map(is_number, r))
                                                    and r[0] <= r[1] for r in v.values()),
              {"type": "object", "additionalProperties": {"type": "array", "items": {"type": "number"},
                                                          "minItems": 2, "maxItems": 2}})
POINTS = number(0, expected="a number of points, 0 or more")
SHARE_OF_FASTER = Kind("a share of the faster points, from 0 to 1", lambda v: is_number(v) and 0 <= v <= 1,
                       {"type": "number", "minimum": 0, "maximum": 1})
FORMAT_KIND = Kind(f"the manifest's format, an integer: this kit reads {FORMAT}",
                   lambda v: isinstance(v, int) and not isinstance(v, bool) and 1 <= v, {"type": "integer", "minimum": 1})

TOP = Table("", {
    "format": Key(FORMAT_KIND, f"the format of the manifest: `{FORMAT}`. A kit that reads an older format refuses "
                                "the file and says to upgrade", required=True),
    "number": Key(integer(0), "the lab's number: `proflab check 5`", required=True),
    "name": Key(NAME, "its short name, lower case: `proflab check syncs`; `runs/` folders are `NN-name`",
                required=True),
    "title": Key(TEXT, "a line for `proflab list` and the reports", required=True),
    "summary": Key(TEXT, "a sentence under the title in `proflab list`", required=True),
    "docs": Key(STRING, "the lab's page under `docs/`, like `labs/01-dataloader.md`"),
    "data": Key(DATA_SPEC, "`\"module:function\"` that prepares the lab's data under `data/`, like "
                           "`proflab.labkit.photos:ensure_photos`; `proflab data` calls it, and so does "
                           "`proflab grade` before grading. The data is built again when the function's module "
                           "changes"),
    "hints": Key(TEXTS, "a list of hints, shown one at a time by `proflab hint`, from the symptom to the fix"),
    "fix_words": Key(TEXTS, "the words and calls that name the lab's fix: the page may not use them (they belong "
                            "in the hints and the debrief); the last hint names one, the first none"),
    "files": Key(TABLE, "`[files]`: the lab's files", required=True),
    "workload": Key(TABLE, "`[workload]`: the work every version does (not in a gate lab)", required=True),
    "results": Key(TABLE, "`[results.KEY]`: how each value the pipeline yields is compared (not in a gate lab)",
                   required=True),
    "evidence": Key(EVIDENCES, "`[evidence]` (or `[[evidence]]`, one per bottleneck): the figure from the trace "
                               "that proves the fix"),
    "speedup": Key(TABLE, "`[speedup]`: the speed-up a fix must reach, per device"),
    "overhead": Key(TABLE, "`[overhead]`, in place of `[speedup]`: how much slower a profiled version may be"),
    "memory": Key(TABLE, "`[memory]`, in place of `[speedup]`: the share of the original's peak memory a fix may "
                         "reach"),
    "timing": Key(TABLE, "`[timing]`: what a step's time is, per device"),
    "profile": Key(TABLE, "`[profile]`: what the learner's own trace must hold (a lab whose learner profiles)"),
    "answers": Key(TABLE, "`[answers.KEY]`: questions the learner answers from their own profile"),
    "grading": Key(TABLE, "`[grading]`: the points per check"),
    "storage": Key(TABLE, "`[storage]`: the modelled slow storage the lab's data lives on"),
    "audit": Key(TABLE, "`[audit]`: what the source audit allows or refuses beyond the default"),
    "distributed": Key(TABLE, "`[distributed]`: the lab runs as a torchrun job"),
    "drill": Key(TABLE, "`[drill]`: a diagnosis drill's bottleneck (written by `proflab drill`)"),
    "gate": Key(TABLE, "`[gate]`: the exercise is a gate's settings, not a pipeline"),
})

FILES = Table("files", {
    "original": Key(FILE, "the slow pipeline", default="original.py"),
    "exercise": Key(FILE, "the learner's copy", default="exercise.py"),
    "solution": Key(FILE, "the reference fix", default="solution.py"),
    "debrief": Key(FILE, "what the page keeps back, shown by `proflab debrief N` once the lab is passed: the "
                         "reference fix, its check, the sound fixes measured", default="debrief.md"),
    "original_sha256": Key(pattern("the original's SHA-256, 64 hex digits", "[0-9a-fA-F]{64}"),
                           "the SHA-256 of `original.py`: the checker refuses to compare against an edited "
                           "original (exit code 3). `sha256sum labs/NN_name/original.py` prints it", required=True),
})

WORKLOAD = Table("workload", {
    "batch_size": Key(integer(1), "`cfg.batch_size`", required=True),
    "seed": Key(integer(0), "`cfg.seed`", default=0),
    "warmup_steps": Key(integer(0), "steps run first and not timed (start-up, caches, worker processes, "
                                    "`torch.compile`)", required=True),
    "timed_steps": Key(integer(1), "steps timed, wall clock between two yields, with the profiler off", required=True),
    "profile_steps": Key(integer(0), "steps profiled after the timed ones (the first is the profiler's warm-up), in "
                                     "the first run of each version only: later runs stop after the timed steps, and "
                                     "their values are compared with the original's first run over those steps; at "
                                     "least 2 (0 in a lab whose learner profiles)", required=True),
    "rounds": Key(integer(1), "paired rounds always measured (a run of each version per round, the order "
                              "alternating)", required=True),
    "max_rounds": Key(integer(1), "the most rounds, when the speed-up is too close to the threshold to call",
                      shown_default="three times `rounds`"),
    "budget_s": Key(number(0, strict=True), "extra rounds are measured only while the whole measurement stays "
                                            "within this many seconds", default=300),
    "timeout_s": Key(number(0, strict=True), "the time limit of one run, in seconds", required=True),
    "threads": Key(integer(1), "torch's intra-op threads in every version (`torch.set_num_threads`)",
                   shown_default="torch's default"),
    "memory_mb": Key(number(0, strict=True), "memory of one run, every process it starts counted, as proportional "
                                             "set size (PSS: pages forked workers share count once); above it the "
                                             "run is stopped", default=8192),
    "background_workers": Key(BOOL, "whether threads and worker processes of a version may work beside the timed "
                                    "steps (lab 1's DataLoader workers); otherwise one that uses more than a tenth "
                                    "of the timed window's (or the profiled steps') time fails the run", default=False),
    "startup_s": Key(number(0), "how much longer than the original's first step a version's first step may take "
                                "and still be left out of its time (lab 1: 0.5, for starting DataLoader workers); "
                                "see [How the timed figure is counted](#how-the-timed-figure-is-counted)", default=0),
    "params": Key(TABLE, "`[workload.params]`: extra fields of `cfg` (`lr = 0.05` is `cfg.lr`)"),
    "env": Key(STRING_TABLE, "`[workload.env]`: environment variables set for every run, as strings"),
})

RESULT = Table("results.KEY", {
    "what": Key(TEXT, "what the value is, in words: the reports name it", required=True),
    "exact": Key(BOOL, "equal, element by element (labels, counts)", default=False),
    "rtol": Key(number(0), "otherwise: within `atol + rtol × |original|`, the relative part", default=0),
    "atol": Key(number(0), "and the absolute part", default=0),
    "hint": Key(STRING, "what to check when it differs"),
})

BOUNDS = ("max", "min", "max_vs_original")
# What only the first of several evidences may say: the work every version does is the lab's, checked once.
FIRST_ONLY = ("work_ops", "min_work_vs_original", "work", "same_shapes")


@functools.cache
def evidence() -> Table:
    from ..measuring.metrics import METRICS  # the checker's registry: its metrics import no torch

    return Table("evidence", {
        "metric": Key(one_of(METRICS, "the checker's evidence metrics"), "one of the metrics below", required=True),
        "label": Key(TEXT, "what the figure is, in words", required=True),
        "where": Key(TEXT, "where to see it in TensorBoard", required=True),
        "unit": Key(STRING, "`ms`, `ops`, `M elements`, `per step`, `%`: how it is printed"),
        "max": Key(number(), "an absolute bound: the learner's figure at most this"),
        "min": Key(number(), "an absolute bound: the learner's figure at least this"),
        "max_vs_original": Key(number(), "a bound relative to the original's figure: 0.5 is \"at most half\""),
        "work_ops": Key(TEXTS, "the work every correct version still does in a profiled step: the matrix products "
                               "and convolutions in `work_ops` (`[\"aten::mm\", \"aten::addmm\"]`, "
                               "`[\"aten::convolution\", \"aten::convolution_backward\"]`), described as `work` in "
                               "the report. Counted in FLOPs, from the shapes the checker records (`aten::mm` of "
                               "(m×k)·(k×n) is 2·m·k·n), at any depth and on every thread. A scripted, frozen graph's "
                               "convolutions prepacked for oneDNN (`torch.jit.optimize_for_inference`) leave no "
                               "operator of their own: each of the original's convolutions counts when such a graph "
                               "writes an activation of its output's shape, while the graph spends at least a tenth "
                               "of the original convolutions' time out of every operator the trace shows"),
        "min_work_vs_original": Key(number(0), "the work floor: a profiled step must do at least this share of the "
                                               "original's FLOPs in `work_ops`. A step that yields results computed "
                                               "in advance does none, and decoy calls on tiny inputs add up to next "
                                               "to nothing, however many there are", default=0.9),
        "work": Key(TEXT, "the work of `work_ops`, described for the report", default="the model's work"),
        "same_shapes": Key(TEXT, "where the work's pieces are part of the lab (lab 6's micro-batches, its memory "
                                 "budget): the operators in `work_ops` must run on no shape the original's did not "
                                 "(read from the recorded shapes, every rank's), and this text says why. One "
                                 "micro-batch of 64 sends the gradients once too, with 8 times the activations, and "
                                 "fails here"),
        "more_to_gain_above": Key(number(0), "a passing fix whose figure is still above this share of the "
                                             "original's gets a line saying there is more to gain (lab 1: 0.2)"),
        "not_a_fix": Key(NOT_A_FIX, "a table of calls that look like a fix and are not one, and why (lab 5: "
                                    "`\"gc.collect\" = \"gc.collect() frees only objects nothing refers to…\"`): a "
                                    "failing file that calls one its original does not is told why, under *look at*"),
        "allow": Key(ALLOW, "a table of parts of the figure (the measure's details) and how many of each per step "
                            "are not held against the bound (lab 4: `{ \"bincount()\" = 1 }`: a confusion matrix "
                            "counted with `torch.bincount` is one read a step on the CPU; a second one counts). The "
                            "report still shows the whole figure"),
    })


def _devices(kind: Kind, what: str) -> Table:
    return Table(what, {"cpu": Key(kind, "on the CPU", required=True),
                        "cuda": Key(kind, "on a CUDA device", shown_default="the CPU's")})


SPEEDUPS = _devices(SPEEDUP, "speedup")
OVERHEADS = _devices(OVERHEAD_SHARE, "overhead")
PEAK_SHARES = _devices(PEAK_SHARE, "memory")

TIMING = Table("timing", {
    "cpu": Key(FIGURE, "what a step's time is on the CPU: `\"wall_time\"` (the checker's clock) or `\"cpu_time\"` "
                       "(the CPU seconds of every process the run ever started, counted by the kernel)",
               default="wall_time"),
    "cuda": Key(FIGURE, "the same, on a CUDA device", default="wall_time"),
    "why": Key(TEXT, "why, in a sentence the report and the page give", required=True),
    "compile": Key(BOOL, "whether time spent compiling (`torch.compile`) in the warm-up is left out: a lab where "
                         "a compiled fix is sound (lab 3)", default=False),
})

PROFILE = Table("profile", {
    "labels": Key(TEXTS, "the `record_function` names every profiled step must hold, like `[\"data\", \"forward\", "
                         "\"backward\", \"optimizer\"]`; a missing one is named", required=True),
    "max_steps": Key(integer(1), "at most this many `ProfilerStep#` steps in the trace: a window, not the whole loop",
                     required=True),
    "where": Key(STRING, "where to look when a label is missing"),
    "kit_steps": Key(integer(2, ": the first profiled step only warms the profiler up"),
                     "the kit profiles the original's first run itself for this many steps (2 or more; the first "
                     "warms the profiler up) after its timed ones: its own record of the step. The learner's trace "
                     "must then run every `aten::` operator that record runs at least once a step as often per step "
                     "(within 10%, and one call; what the data loader runs is left out), and no operator the step "
                     "never runs may hold 5% of its operators' time. The record is the `original` run in "
                     "`proflab tensorboard`"),
})


@functools.cache
def answer() -> Table:
    from ..measuring.answers import METRICS  # no torch

    return Table("answers.KEY", {
        "question": Key(TEXT, "the question, as the report and the lab's page ask it", required=True),
        "metric": Key(one_of(METRICS, "the checker's answer metrics"),
                      "what the checker measures from the learner's trace: `top_self_cpu` (the operator with the "
                      "largest self CPU time; an operator within 80% of it is as good an answer), "
                      "`conv2d_calls_per_step`, `backward_share` (the share of a step inside the `backward` label); "
                      "`proflab.measuring.answers.METRICS`",
                      required=True),
        "where": Key(TEXT, "where to look when the answer is wrong", required=True),
        "tolerance": Key(number(0), "how far a number may be from the measured one", default=0),
    })


GRADING = Table("grading", {
    "runs": Key(POINTS, "the file imports, and `pipeline(cfg)` yields every step", default=1),
    "same_results": Key(POINTS, "the same samples and values as the original", default=3),
    "diagnosis": Key(POINTS, "a drill's: what the learner said its profile shows", default=0),
    "evidence": Key(POINTS, "the trace shows the bottleneck is gone", default=3),
    "faster": Key(POINTS, "the last check: the speed-up (or overhead, or memory) clears the threshold", default=3),
    "inconclusive": Key(SHARE_OF_FASTER, "the share (0 to 1) of the last check's points an inconclusive verdict "
                                         "earns", default=0),
})

STORAGE = Table("storage", {
    "folder": Key(FOLDER, "the folder under `data/` that the checker's storage service serves (`\"photos\"`)",
                  required=True),
    "latency_ms": Key(number(0, strict=True), "how long the service waits before it answers each read (`8`)",
                      required=True),
})

DRILL = Table("drill", {
    "bottleneck": Key(TEXT, "which bottleneck the drill's pipeline has", required=True),
    "parts": Key(TEXTS, "the parts of the step (as the Overview names them) a right diagnosis may name"),
    "operator_words": Key(TEXTS, "words of the operators a right diagnosis may name"),
})


@functools.cache
def audit() -> Table:
    from ..grading.audit import ALLOWANCES, RESTRICTIONS  # no torch either

    return Table("audit", {
        "allow": Key(names(ALLOWANCES, "allowance names"),
                     "names from `proflab.grading.audit.ALLOWANCES` (lab 1: `[\"threads\"]`; lab 6: "
                     "`[\"distributed\"]`, `torch.distributed`'s process groups and collectives, never its "
                     "launchers, elastic agents or RPC)", default=[]),
        "refuse": Key(names(RESTRICTIONS, "restriction names"),
                      "names from `proflab.grading.audit.RESTRICTIONS` (lab 4: `[\"untraced_reads\"]`)", default=[]),
    })


DISTRIBUTED = Table("distributed", {
    "nproc": Key(integer(2), "the ranks of the job, on this machine (`2`)", required=True),
    "same_on_every_rank": Key(TEXTS, "results every rank must hold alike after each step (`[\"weights\"]`): ranks "
                                     "that differ trained apart"),
    "own_on_each_rank": Key(TEXTS, "results each rank computes from its own share of the samples (`[\"loss\"]`): "
                                   "ranks that all hold the same values, where the original's differ, trained on "
                                   "the same samples"),
})

GATE = Table("gate", {
    "lab": Key(LAB_NAME, "the lab whose fix is gated (`\"dataloader\"`)", required=True),
    "fix": Key(FILE, "that lab's file holding the fix (`solution.py`)", required=True),
    "fix_sha256": Key(pattern("the fix's SHA-256, 64 hex digits", "[0-9a-fA-F]{64}"),
                      "its fingerprint; an edited fix is not graded", required=True),
    "regression": Key(FILE, "the fix undone, gated as the candidate against the fix (`original.py`)", required=True),
    "cause": Key(TEXT, "what the gate's report on the regression must name (`\"DataLoader\"`)", required=True),
    "settings": Key(TEXTS, "the settings a learner may set: how to gate, not what", required=True),
    "limits": Key(RANGES, "the range of each number a learner may set (`{rounds = [2, 10]}`)"),
    "where": Key(STRING, "where to look when the cause is not named"),
    "pipeline": Key(FILE, "the lab's own copy of the fix, in its folder, that a learner gates without having done "
                          "that lab"),
})


def tables() -> dict[str, Table]:
    """Every table of a lab's manifest, by the name the guide's ``{{ keys.NAME }}`` gives it."""
    return {"top": TOP, "files": FILES, "workload": WORKLOAD, "results": RESULT, "evidence": evidence(),
            "speedup": SPEEDUPS, "overhead": OVERHEADS, "memory": PEAK_SHARES, "timing": TIMING,
            "profile": PROFILE, "answers": answer(), "grading": GRADING, "storage": STORAGE, "drill": DRILL,
            "audit": audit(), "distributed": DISTRIBUTED, "gate": GATE}


def json_schema() -> dict:
    """``lab.toml`` as a JSON Schema (draft 2020-12), for editors (``docs/schemas/lab.schema.json``)."""
    from ..vocabulary import json_schema as schema_of

    one = {**schema_of(evidence()), "anyOf": [{"required": [bound]} for bound in BOUNDS]}
    nested = {"files": schema_of(FILES), "workload": schema_of(WORKLOAD),
              "results": {"type": "object", "additionalProperties": schema_of(RESULT), "minProperties": 1},
              "evidence": {"oneOf": [one, {"type": "array", "items": one, "minItems": 1}]},
              "speedup": schema_of(SPEEDUPS), "overhead": schema_of(OVERHEADS), "memory": schema_of(PEAK_SHARES),
              "timing": schema_of(TIMING), "profile": schema_of(PROFILE),
              "answers": {"type": "object", "additionalProperties": schema_of(answer())},
              "grading": schema_of(GRADING), "storage": schema_of(STORAGE), "drill": schema_of(DRILL),
              "audit": schema_of(audit()), "distributed": schema_of(DISTRIBUTED), "gate": schema_of(GATE)}
    top = schema_of(TOP, nested)
    # A gate lab has no pipeline: no workload, results or speed-up of its own
    top["required"] = [k for k in top["required"] if k not in ("workload", "results")]
    top["if"] = {"not": {"required": ["gate"]}}
    top["then"] = {"required": ["workload", "results"]}
    # (the params table is any name and value; env strings)
    nested["workload"]["properties"]["params"] = {"type": "object", "description": WORKLOAD.keys["params"].meaning}
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "proflab lab manifest (lab.toml)", **top}
