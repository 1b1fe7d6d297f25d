"""How far each version's values drift from the original's: are a lab's tolerances set from measured drift?

For a lab, this runs the original and every version (the reference, each learner file of the lab, and any
``--also`` file) in this process, for ``--steps`` steps and each ``--rounds`` round's weights
(``labkit.set_round``, as the checker draws them), and prints, per value the lab compares
(``[results.KEY]``), the largest difference from the original's and the share of the lab's tolerance
(``atol + rtol × |original|``) it uses, element by element. A sound fix should use a small share of it;
a wrong one should be far above 1.

    python benchmarks/bench_drift.py --lab 8
    PROFLAB_CHEAT_LAB=8 python benchmarks/bench_drift.py --lab 8 --also tests/cheats/lab8_wrong_eps.py
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path
from types import SimpleNamespace

import torch

from proflab import labkit, labs, paths
from proflab.authoring import expectations


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(f"drift_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _values(path: Path, lab: labs.Lab, steps: int) -> list[dict]:
    w = lab.workload
    cfg = SimpleNamespace(device=torch.device("cpu"), batch_size=w.batch_size, seed=w.seed,
                          data_dir=paths.data_dir(), **w.params)
    out = []
    for step, values in zip(range(steps), _load(path).pipeline(cfg)):
        values = values if isinstance(values, dict) else {"value": values}
        out.append({k: v.detach().clone() for k, v in values.items() if isinstance(v, torch.Tensor)})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lab", required=True)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--rounds", type=int, nargs="+", default=[0, 1, 5], help="round seeds (0: the docs' weights)")
    parser.add_argument("--also", nargs="*", default=[], help="more files to measure (a wrong fix, a cheat)")
    args = parser.parse_args()
    lab = labs.resolve(args.lab)
    if lab.workload.threads:
        torch.set_num_threads(lab.workload.threads)
    rules = {r.key: r for r in lab.results}
    files = [lab.solution, *[e.file for e in expectations.of_lab(lab.number)], *map(Path, args.also)]
    print(f"# Drift from the original, lab {lab.number} · {lab.title}\n")
    print(f"Command: `python benchmarks/bench_drift.py --lab {args.lab} --steps {args.steps} --rounds "
          f"{' '.join(map(str, args.rounds))}{' --also ' + ' '.join(args.also) if args.also else ''}`; torch "
          f"{torch.__version__}\n")
    print("| version | value | largest difference | largest value | share of the tolerance, at most |")
    print("|---|---|---|---|---|")
    for path in files:
        worst: dict[str, list[float]] = {}
        for seed in args.rounds:
            labkit.set_round(seed)
            reference = _values(lab.original, lab, args.steps)
            try:
                mine = _values(path, lab, args.steps)
            except Exception as e:  # noqa: BLE001 - a file that fails is reported, not raised
                print(f"| `{path.name}` | – | {type(e).__name__}: {e} | | |")
                break
            for step_ref, step_mine in zip(reference, mine):
                for key, rule in rules.items():
                    if key not in step_ref or key not in step_mine or step_ref[key].shape != step_mine[key].shape:
                        continue
                    a, b = step_mine[key].double(), step_ref[key].double()
                    diff = (a - b).abs()
                    share = (diff / (rule.atol + rule.rtol * b.abs()).clamp_min(1e-300)).max().item()
                    w = worst.setdefault(key, [0.0, 0.0, 0.0])
                    w[0], w[1], w[2] = max(w[0], diff.max().item()), max(w[1], b.abs().max().item()), max(w[2], share)
        for key, (diff, big, share) in worst.items():
            print(f"| `{path.name}` | {key} | {diff:.2e} | {big:.3g} | {share:.3g} |")
    labkit.set_round(0)


if __name__ == "__main__":
    main()
