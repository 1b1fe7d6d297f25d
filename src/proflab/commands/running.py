"""``proflab run``: a lab file profiled once, its table, and what to look at in TensorBoard."""

from __future__ import annotations

from pathlib import Path

from rich.markup import escape

from .. import errors, paths, progress
from ..grading import checks
from ..measuring import stats, traces
from ..reporting import report, summaries
from ..running import execute, slots
from .common import UsageError, _lab, _lab_and_file, _label, _status, _summaries, err, out

PRINTED_LINES_SHOWN = 10  # the tail of what a profiled lab file printed


# Two single runs of one file, made minutes apart on a shared machine, differ by more than their steps' spread
# says: the machine's load moves every step of a run alike. A learner's lab 6 fix, 1.9x faster in paired
# rounds, printed 166.9 -> 213.4 ms (1.28x slower) in one such pair. `proflab run` calls a difference
# between two runs real only beyond this factor, and its steps' interval.
BETWEEN_RUNS = 1.5
RUN_OUTPUT_CHARS = 256_000  # what `proflab run` keeps of a program's output (a table with every row fits)


def cmd_run(args) -> int:
    lab, file = _lab_and_file(args.lab, args.file, args.version)
    if lab.kind == "gate":
        target = _lab(lab.gating.lab)
        # the lab's own copy of the fix it gates, where it brings one; else the gated lab's exercise
        pipeline = lab.folder / lab.gating.pipeline if lab.gating.pipeline else target.exercise
        raise UsageError(f"lab {lab.number}'s {file.name} holds a gate's settings, not a pipeline to profile; "
                         f"try them: proflab gate {paths.display(pipeline)} --baseline "
                         f"{paths.display(target.original)} --config {paths.display(file)}")
    label = _label(lab, file)
    w = lab.workload
    doing = (f"Running {file.name}: {w.warmup_steps + w.timed_steps} steps, profiled by your own code…"
             if lab.profiling else f"Profiling {file.name}: {w.warmup_steps} warm-up, {w.timed_steps} timed, "
                                   f"{w.profile_steps} profiled steps…")
    with _status(doing) as update, checks.workspace("run-") as work, slots.turn(update):
        copy = checks.snapshot(file, work / "file")  # what is profiled, even if the file is saved meanwhile
        outcome = execute.run(lab, copy, label, device=args.device, trace_dir=work / "trace", table=True,
                              # a distributed lab's shapes give the bytes each all-reduce sends
                              record_shapes=args.record_shapes or lab.kind == "job",
                              # a lab about memory profiles it always
                              profile_memory=args.profile_memory or bool(lab.leaner),
                              with_stack=args.with_stack, timeout_s=args.timeout, workdir=file.parent,
                              shown_as=file, output_chars=RUN_OUTPUT_CHARS)
        for key in ("traceback", "message", "file"):
            if isinstance(outcome.result.get(key), str):
                outcome.result[key] = outcome.result[key].replace(str(copy), str(file))
        if outcome.ok and outcome.result.get("rank_traces"):  # a torchrun job: every rank's, one worker each
            published = traces.publish_all([t for t in outcome.result["rank_traces"] if t], checks.trace_dir(lab, label))
            outcome.result["rank_traces"] = [str(t) for t in published]
            outcome.result["trace"] = str(published[0])
        elif outcome.ok and outcome.result.get("trace"):
            outcome.result["trace"] = str(traces.publish(outcome.result["trace"], checks.trace_dir(lab, label)))
    if outcome.status == "kit":
        raise errors.KitError(outcome.result["message"])
    r = outcome.result
    if outcome.ok:
        out.print(f"[bold]Lab {lab.number} · {escape(lab.title)}[/] — {escape(paths.display(file))} on "
                  f"{r['device']} [dim](torch {r['torch']}, {r['threads']} threads)[/]", soft_wrap=True)
    printed = outcome.stdout.rstrip().splitlines()
    if printed:
        # Lab 0's output is the learner's own table: all of it; elsewhere the tail, or all with --verbose.
        shown = len(printed) if lab.profiling or args.verbose else PRINTED_LINES_SHOWN
        hidden = len(printed) - shown
        out.print("[dim]Your program printed" + (f" ({hidden} earlier lines not shown; --verbose shows them):[/]"
                                                 if hidden > 0 else ":[/]"))
        out.print(escape("\n".join(printed[-shown:])), soft_wrap=True)
    if not outcome.ok:
        check = checks.Check("runs", "It runs", "")
        checks.runtime_failure(check, outcome, lab, args.timeout or w.timeout_s)
        err.print(f"[red]✗[/] {report.shown(check.rationale)}")
        for line in check.details:
            err.print(f"  [dim]{report.shown(line)}[/]")
        if check.actual:
            err.print(f"  {report.shown(check.actual)}")
        if args.verbose and outcome.result.get("traceback"):
            err.print(report.shown(outcome.result["traceback"]))
        elif outcome.result.get("traceback"):
            err.print("  [dim](--verbose shows the full traceback)[/]")
        return 1
    table = r.get("table") or {}
    if table:
        of_rank = f" of rank 0 (of {r['ranks']})" if r.get("ranks") else ""
        out.print(f"\n[dim]prof.key_averages().table(sort_by=\"{table['sort_by']}\") over the profiled steps"
                  f"{of_rank}:[/]")
        out.print(escape(table["text"]), soft_wrap=True)
        if r.get("rank_traces"):
            _communication(r["rank_traces"])
        elif r.get("trace"):
            _memory_kept(r["trace"]) if lab.leaner else _host_reads(r["trace"])
    if r.get("memory"):
        m = r["memory"]
        peak = f"{m['peak_mb']:.0f} MB" if m.get("peak_mb") is not None else "not readable here"
        out.print(f"[dim]Peak memory of the run, read from outside it ({escape(m.get('measured', ''))}):[/] {peak}",
                  soft_wrap=True)
    times = r["step_times"]
    out.print(f"Step time over {len(times)} timed steps: median {stats.median(times) * 1000:.1f} ms, "
              f"half of the steps within {stats.quantile(times, 0.25) * 1000:.1f}–"
              f"{stats.quantile(times, 0.75) * 1000:.1f} ms (mean {r['mean_step_s'] * 1000:.1f} ms) "
              + ("(profiler off while timing)" if not lab.profiling else
                 "(with your profiler, as your file runs it)" if r.get("traces_found") else
                 "(no profiler ran: your code wrote no trace yet)"))
    cpu_ms = 1000 * r["cpu_window_s"] / len(times) if r.get("cpu_window_s") is not None and times else None
    if cpu_ms is not None:
        out.print(f"[dim]CPU time of the run's processes and threads (from /proc): {cpu_ms:.1f} ms per step"
                  + (" — what this lab's check compares on this device" if lab.figure(r["device"]) == "cpu_time"
                     else "") + "[/]")
    _against_original(lab, label, r, cpu_ms)
    _summaries(lambda: summaries.write_step_times(lab, label, r["step_times"]))
    progress.safely(lambda: progress.remember_run(lab.slug, label),
                    "the run was not remembered for proflab tensorboard")
    if r.get("rank_traces"):
        for rank, trace in enumerate(r["rank_traces"]):
            size = Path(trace).stat().st_size / 1e6
            out.print(f"Trace of rank {rank}: {escape(paths.display(trace))} ({size:.1f} MB)")
        out.print(f"Open them: [bold]proflab tensorboard[/]   [dim](run '{lab.slug}/{label}', one worker per "
                  "rank)[/]")
    elif r.get("trace"):
        size = Path(r["trace"]).stat().st_size / 1e6
        out.print(f"Trace: {escape(paths.display(r['trace']))} ({size:.1f} MB)")
        out.print(f"Open it: [bold]proflab tensorboard[/]   [dim](run '{lab.slug}/{label}')[/]")
    return 0


def _against_original(lab, label: str, r: dict, cpu_ms: float | None) -> None:
    """Remember this run's steps, and, for a version other than the original, say how it compares with the
    original's last run on the same device: by how much, and whether that is beyond the two runs' noise."""
    figures = {"step_times": list(r["step_times"]), "device": r["device"], "cpu_ms": cpu_ms}
    progress.safely(lambda: progress.remember_steps(lab.slug, label, figures),
                    "this run's step times were not remembered")
    if label == "original" or lab.profiling:
        return
    before = progress.remembered_steps(lab.slug, "original")
    if not before or before.get("device") != r["device"] or not before["step_times"] or not r["step_times"]:
        out.print(f"[dim]To compare: proflab run {lab.name} --version original, then this file again; "
                  f"proflab check {lab.name} measures both in paired rounds.[/]")
        return
    ratio = stats.median(before["step_times"]) / max(stats.median(r["step_times"]), 1e-12)
    low, high = stats.ratio_interval(before["step_times"], r["step_times"])
    how = f"{ratio:.2f}× the original's speed" if ratio >= 1 else f"{1 / ratio:.2f}× slower than the original"
    if (low > 1 or high < 1) and not 1 / BETWEEN_RUNS < ratio < BETWEEN_RUNS:
        verdict = "beyond the noise of two runs"
    else:
        verdict = (f"within the noise: two runs made at different times differ by up to {BETWEEN_RUNS:g}× on a "
                   "busy machine, whatever their steps' spread; proflab check measures both in paired rounds")
    out.print(f"Against the original's last run: {_spread(before['step_times'])} → {_spread(r['step_times'])} "
              f"per step: {how} (95% interval of the two runs' steps {low:.2f}–{high:.2f}×), {verdict}",
              soft_wrap=True)
    if cpu_ms and before.get("cpu_ms") and lab.figure(r["device"]) == "cpu_time":
        out.print(f"[dim]In CPU time: {before['cpu_ms']:.1f} → {cpu_ms:.1f} ms per step "
                  f"({before['cpu_ms'] / cpu_ms:.2f}×)[/]")


def _spread(times: list[float]) -> str:
    """A run's steps as the comparison shows them: median and the middle half."""
    return (f"median {stats.median(times) * 1000:.1f} ms (half within {stats.quantile(times, 0.25) * 1000:.1f}–"
            f"{stats.quantile(times, 0.75) * 1000:.1f})")


def _communication(rank_traces: list[str]) -> None:
    """Under the table of a distributed job: each rank's all-reduce calls and time spent talking per step."""
    from ..measuring import breakdown, evidence

    for rank, path in enumerate(rank_traces):
        try:
            trace = evidence.load(path)
        except (evidence.TraceError, OSError):
            continue
        calls, b = evidence.allreduce_calls(trace), breakdown.of(trace)
        share = b.comm_ms / b.step_ms if b.step_ms else 0.0
        out.print(f"[dim]Rank {rank}, per profiled step:[/] {escape(calls.summary)}; communication "
                  f"{b.comm_ms:.1f} ms of {b.step_ms:.1f} ms ({share:.0%})  [dim](TensorBoard › Profile › "
                  "Overview, each rank)[/]", soft_wrap=True)


def _host_reads(trace_path: str) -> None:
    """One line under the table for what its first rows may leave out: the host reads per step, those of the
    training step apart from those inside data loading (the data set's own code) and optimizer.step()."""
    from ..measuring import evidence

    try:
        reads = evidence.host_reads(evidence.load(trace_path))
    except (evidence.TraceError, OSError):
        return

    if reads.in_step:
        out.print(f"[dim]Host reads per profiled step, outside data loading:[/] {reads.in_step_per_step:g} "
                  f"({escape(evidence.counts_text(reads.in_step))})  [dim](every row: TensorBoard › Profile › Operators)[/]",
                  soft_wrap=True)
    if reads.in_loading:
        out.print(f"[dim]Inside data loading (the DataLoader's __next__: the data set's own code, not a sync of "
                  f"the training step):[/] {reads.in_loading_per_step:g} per step "
                  f"({escape(evidence.counts_text(reads.in_loading))})", soft_wrap=True)
    if reads.in_optimizer:
        out.print(f"[dim]Inside optimizer.step() (the optimizer's own: AdamW reads each parameter's step count):[/] "
                  f"{reads.in_optimizer_per_step:g} per step ({escape(evidence.counts_text(reads.in_optimizer))})",
                  soft_wrap=True)


def _memory_kept(trace_path: str) -> None:
    """One line under the table of a lab about memory: what each profiled step leaves allocated."""
    from ..measuring import evidence, memory

    try:
        kept = memory.growth(evidence.load(trace_path))
    except (evidence.TraceError, OSError) as e:
        out.print(f"[dim]Memory per profiled step: none recorded ({escape(str(e))})[/]", soft_wrap=True)
        return
    out.print(f"[dim]Memory left allocated per profiled step:[/] {escape(kept.summary)}  "
              "[dim](the curve: TensorBoard › Profile › Memory)[/]", soft_wrap=True)
