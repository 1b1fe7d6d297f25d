"""Check a lab file's results against the lab's original, step by step, without the checker.

    .venv/bin/python tests/learner_files/verify_results.py LAB FILE [FILE ...] [--steps N]

Imports the lab's original.py and each FILE by path, builds the cfg the kit's
runner builds (``proflab.running.runner.run``: the device, the batch size, the seed,
the data folder and the lab's ``[workload.params]``), sets the lab's thread
count, and runs the two pipelines side by side for N steps (by default every
step the checker takes: warm-up, timed and profiled). Every yielded value is
kept and encoded as the runner keeps and encodes it, then compared with the
lab's ``[results]`` tolerances by ``proflab.grading.compare``. One line per file: OK,
or the first difference.

No timing, no profiler, no storage service: with ``PROFLAB_STORAGE`` unset,
lab 1's dataset waits its latency locally and reads the same bytes. This is
for checking that a learner file computes the same thing as the original
before it is graded; the verdict on speed and trace evidence is the checker's.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import traceback
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[2]


def load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def make_cfg(lab, torch):
    w = lab.workload
    return SimpleNamespace(device=torch.device("cpu"), batch_size=w.batch_size, seed=w.seed,
                           data_dir=REPO / "data", **w.params)


def verify(lab, file: Path, steps: int, index: int) -> tuple[bool, str]:
    import torch

    from proflab.grading.compare import compare
    from proflab.running.runner import _encode, _keep  # the runner's own way to keep and encode a step

    original = load(lab.original, f"verify_original_{index}")
    try:
        learner = load(file, f"verify_learner_{index}")
    except Exception as e:  # noqa: BLE001
        return False, f"import failed: {type(e).__name__}: {e}"
    if not callable(getattr(learner, "pipeline", None)):
        return False, "defines no pipeline(cfg)"

    want_gen = original.pipeline(make_cfg(lab, torch))
    got_gen = learner.pipeline(make_cfg(lab, torch))
    want: list[dict] = []
    got: list[dict] = []
    try:
        for step in range(steps):
            want.append(_encode([_keep(next(want_gen), step, torch)], torch)[0])
            try:
                out = next(got_gen)
            except StopIteration:
                return False, f"stopped after {step} steps (wanted {steps})"
            except Exception as e:  # noqa: BLE001
                tb = traceback.extract_tb(e.__traceback__)[-1]
                return False, f"step {step} raised {type(e).__name__}: {e} ({tb.filename}:{tb.lineno})"
            got.append(_encode([_keep(out, step, torch)], torch)[0])
            extra = sorted(set(got[-1]) - set(want[-1]))
            if extra:
                return False, f"step {step} yields keys the original does not: {extra}"
            diff = compare(want, got, lab.results)
            if diff is not None:
                return False, diff.message
    finally:
        for gen in (got_gen, want_gen):
            try:
                gen.close()
            except Exception:  # noqa: BLE001 - shutting down is best effort
                pass
    return True, f"{steps} steps"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("lab", help="the lab's number or name")
    parser.add_argument("files", nargs="+", type=Path, metavar="FILE")
    parser.add_argument("--steps", type=int, default=None,
                        help="steps to compare (default: the lab's warm-up + timed + profiled steps)")
    args = parser.parse_args(argv)

    os.environ.setdefault("PROFLAB_ROOT", str(REPO))
    from proflab import labs

    lab = labs.resolve(args.lab)
    for key, value in lab.workload.env.items():  # the environment the kit gives every run
        os.environ.setdefault(key, value)
    import torch

    if lab.workload.threads:
        torch.set_num_threads(lab.workload.threads)
    steps = args.steps or lab.workload.total_steps

    failed = 0
    for i, file in enumerate(args.files):
        ok, message = verify(lab, file.resolve(), steps, i)
        failed += not ok
        print(f"{'OK  ' if ok else 'DIFF'} lab {lab.number} {file}: {message}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
