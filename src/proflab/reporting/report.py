"""Where a check's report is shown: a short terminal summary, or JSON.

For each check: what was checked, what was expected, what was measured, and
where to look next. The JSON form carries everything, raw timings included,
for instructors' tools.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .. import paths
from ..measuring import stats
from ..grading.verdicts import FAILED, INCONCLUSIVE, PASSED, SKIPPED, Report
from ..quiet import printable

_MARK = {PASSED: "[green]✓[/]", FAILED: "[red]✗[/]", INCONCLUSIVE: "[yellow]?[/]", SKIPPED: "[dim]–[/]"}


def to_json(report: Report) -> str:
    return json.dumps(report.as_dict(), indent=2)


_WORD = {PASSED: "passed", FAILED: "**failed**", INCONCLUSIVE: "**inconclusive**", SKIPPED: "skipped"}


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ") or " "


# Runs of the same version that disagree by more than this (MAD/median) mean a busy machine.
BUSY_NOISE = 0.15


def busy_note(report: Report) -> str:
    """A sentence on a busy machine, when the timings were noisy; empty otherwise."""
    cmp = report.comparison or {}
    if cmp.get("noise", 0.0) <= BUSY_NOISE:
        return ""
    held = {PASSED: "the verdict holds: the speed-up's whole interval is above the threshold",
            FAILED: "the verdict holds: the speed-up's whole interval is below the threshold"}.get(
        report.verdict, "too noisy to call")
    return (f"The machine was busy: runs of the same version disagreed by ±{cmp['noise']:.0%} "
            f"over {cmp['rounds']} rounds; {held}.")


def peak_share(report: Report) -> str:
    """A lab graded on memory: the learner's peak as a share of the original's, and the lab's limit; else ""."""
    cmp, share = report.comparison or {}, (report.memory or {}).get("share")
    if not share or not cmp.get("speedup"):
        return ""
    return f"peak {1 / cmp['speedup']:.0%} of the original's (at most {share:.0%})"


def evidence_table(report: Report) -> str:
    """A lab with several bottlenecks: each figure, the original's and the learner's, and whether it is gone."""
    from ..labs import format_value

    lines = ["Each bottleneck's figure, per profiled step:", "",
             f"| bottleneck | original | {_cell(report.label)} | expected | |", "|---|---|---|---|---|"]
    for ev in report.evidences:
        o, m = (format_value(ev[k]["value"], ev.get("unit", "")) for k in ("original", "learner"))
        lines.append(f"| {_cell(ev['label'])} | {o} | {m} | {_cell(ev.get('expected', ''))} | "
                     f"{'gone' if ev.get('met') else '**still left**'} |")
    return "\n".join(lines)


def to_markdown(report: Report) -> str:
    """The report as Markdown, for TensorBoard's Text dashboard."""
    from ..measuring.breakdown import HOST_PARTS, LABELS

    verdict = {PASSED: "PASSED", FAILED: "FAILED", INCONCLUSIVE: "INCONCLUSIVE"}.get(report.verdict, "NOT GRADED")
    lines = [f"## Lab {report.number} · {report.title}: {verdict}", "",
             f"`{Path(report.file).name}` (run `{report.label}`) "
             + ("against the original (run `original`), " if report.against == "against the original" else
                f"{report.against}, ") + f"on {report.device}, in {report.duration_s:.0f} s.", ""]
    if report.error:
        return "\n".join(lines + [f"**Cannot grade:** {report.error}"])
    lines += ["| check | verdict | expected | measured |", "|---|---|---|---|"]
    for c in report.checks:
        measured = c.actual if c.status != SKIPPED else c.skipped_because()
        lines.append(f"| {c.title} | {_WORD[c.status]} | {_cell(c.expected)} | {_cell(measured)} |")
    if report.comparison and peak_share(report):
        m = report.memory
        rounds = ", ".join(f"{o:.0f} → {n:.0f}" for o, n in zip(m["original"], m["learner"]))
        lines += ["", f"**Peak memory:** {peak_share(report).removeprefix('peak ')} · per round {rounds} MB · {m.get('measured', '')}"]
    elif report.comparison:
        cmp = report.comparison
        interval = (stats.uncertainty(cmp["rounds"], (cmp["ci_low"], cmp["ci_high"]), (cmp["ratio_low"], cmp["ratio_high"]),
                                      lambda low, high: f"{low:.2f}–{high:.2f}×") + " · " if cmp.get("ci_high") else "")
        lines += ["", f"**Speed-up:** {cmp['speedup']:.2f}× (threshold {report.threshold:g}×) · {interval}"
                  f"rounds {cmp['ratio_low']:.2f}–{cmp['ratio_high']:.2f}× · noise ±{cmp['noise']:.0%} · "
                  f"{cmp['rounds']} paired rounds"]
        if busy_note(report):
            lines += ["", f"*{busy_note(report)}*"]
    if len(report.evidences) > 1:
        lines += ["", evidence_table(report)]
    if report.breakdown:
        names = [n for n in ("original", "learner") if n in report.breakdown]
        header = ["original" if n == "original" else report.label for n in names]
        lines += ["", "Where a profiled step's time went (host timeline, ms per step):", "",
                  "| part | " + " | ".join(header) + " |", "|---" * (len(names) + 1) + "|"]
        for part in HOST_PARTS:
            cells = []
            for n in names:
                b = report.breakdown[n]
                share = b["host_ms"][part] / b["step_ms"] if b["step_ms"] else 0.0
                cells.append(f"{b['host_ms'][part]:.1f} ({share:.0%})")
            lines.append(f"| {LABELS[part]} | " + " | ".join(cells) + " |")
        lines.append("| device busy | " + " | ".join(f"{report.breakdown[n]['device_busy_ms']:.1f}" for n in names) + " |")
        lines.append("| **step** | " + " | ".join(f"**{report.breakdown[n]['step_ms']:.1f}**" for n in names) + " |")
    failed = next((c for c in report.checks if c.status in (FAILED, INCONCLUSIVE)), None)
    if failed and failed.help:
        lines += ["", f"**Where to look next:** {failed.help}"]
    return "\n".join(lines)


def shown(text: str) -> str:
    """Text from a learner's program (its messages, its output, its file names), as the terminal should show it:
    no rich markup, no escape sequence or control character that would act on the terminal."""
    return escape(printable(text))


def render(report: Report, console: Console, verbose: bool = False) -> None:
    console.print(f"[bold]Lab {report.number} · {escape(report.title)}[/]")
    what = ("the lab's reference fix, " if report.label == "reference" else "") + shown(paths.display(report.file))
    where = f" on {shown(report.device)}" if report.device and report.device != "?" else ""
    console.print(f"[dim]checking {what} {escape(report.against)}{where}[/]")
    console.print()
    if report.error:
        console.print(f"[red]✗ Cannot grade:[/] {shown(report.error)}")
        if verbose and report.traceback:
            console.print(shown(report.traceback))
        return

    shown_in_full = lambda c: c.status in (FAILED, INCONCLUSIVE) or (  # noqa: E731
        c.status == PASSED and c.pays in ("evidence", "faster"))
    console.print(check_grid(report.checks, shown_in_full, min_width=26))

    if verbose and report.traceback:
        console.print("\n[bold]Full traceback[/]")
        console.print(shown(report.traceback))
    if report.output.strip() and (verbose or report.verdict != PASSED):
        console.print("\n[dim]Your program printed (last lines):[/]")
        console.print(shown("\n".join(printable(report.output).strip().splitlines()[-8:])))

    if busy_note(report):
        style = "yellow" if report.verdict == INCONCLUSIVE else "dim"
        console.print(f"\n[{style}]{escape(busy_note(report))}[/]")
    console.print()
    word = {PASSED: "[bold green]PASSED[/]", INCONCLUSIVE: "[bold yellow]INCONCLUSIVE[/] (too noisy to call)"}.get(
        report.verdict, "[bold red]FAILED[/]")
    console.print(f"{word} · lab {report.number} ({report.lab}) in {report.duration_s:.0f} s")
    for note in report.notes:
        console.print(f"[yellow]![/] {shown(note)}")
    if report.traces:
        runs = sorted({_run_name(p, report.runs_dir) for p in report.traces.values()})
        console.print(f"Traces: {shown(paths.display(report.runs_dir))}/ (runs: {', '.join(runs)})")
        console.print("Open them side by side: [bold]proflab tensorboard[/]")


def check_grid(checks, in_full, min_width: int) -> Table:
    """The checks, one a row: mark, title, rationale; for those ``in_full`` says, their details, what was
    expected and measured, and (failed or inconclusive) where to look."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(width=1)
    grid.add_column(style="bold", min_width=min_width)
    grid.add_column(overflow="fold")
    for c in checks:
        text = shown(c.rationale) if c.status != SKIPPED else f"[dim]skipped: {shown(c.skipped_because())}[/]"
        grid.add_row(_MARK[c.status], c.title, text)
        if c.status == SKIPPED or not in_full(c):
            continue
        for line in c.details:
            grid.add_row("", "", f"[dim]{shown(line)}[/]")
        if c.expected:
            grid.add_row("", "[dim]  expected[/]", shown(c.expected))
        if c.actual:
            grid.add_row("", "[dim]  measured[/]", shown(c.actual))
        if c.help and c.status in (FAILED, INCONCLUSIVE):
            grid.add_row("", "[dim]  look at[/]", shown(c.help))
    return grid


def _run_name(trace_path: str, runs_dir: str = "") -> str:
    """A trace's run, named from ``runs_dir`` (the folder the report prints) as TensorBoard names it from
    there: ``yours`` in ``runs/01-dataloader/``, ``07-gate/unchanged/baseline`` in ``runs/`` (lab 7)."""
    run = Path(trace_path).parent
    try:
        return run.relative_to(runs_dir).as_posix() if runs_dir else run.name
    except ValueError:
        return run.name


def console_for(stream=None) -> Console:
    return Console(file=stream or sys.stdout, highlight=False, soft_wrap=False)
