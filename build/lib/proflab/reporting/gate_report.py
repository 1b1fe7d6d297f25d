"""Where a gate's verdict is shown: the terminal, JSON, and JUnit XML for CI.

Each says the verdict, the slowdown with its interval, and what changed: the
names whose self time or calls moved most per step, and where each version's
profiled step went (DataLoader wait, host reads and syncs, CPU operators,
Python between operators).
"""

from __future__ import annotations

import io
import json
import xml.etree.ElementTree as ET
from datetime import datetime, timezone
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .. import paths
from ..grading.verdicts import FAILED, INCONCLUSIVE, PASSED, SKIPPED
from ..grading.gate import CHECKS, GateReport
from ..measuring.breakdown import HOST_PARTS, LABELS
from .grade_formats import _seconds, _x
from .report import check_grid, shown

VERDICT_WORDS = {PASSED: "NO REGRESSION", FAILED: "REGRESSION", INCONCLUSIVE: "INCONCLUSIVE (too noisy to call)",
                 "error": "NOT GATED"}


def to_json(report: GateReport) -> str:
    from .. import __version__

    return json.dumps({"proflab": __version__, **report.as_dict()}, indent=2)


def _ms(us: float) -> str:
    return f"{us / 1000:.2f}"


def _calls(row: dict | None) -> str:
    return f"{row['calls']:g}" if row else "–"


def changes_table(report: GateReport) -> Table | None:
    if not report.changes:
        return None
    table = Table(title="What changed, per profiled step (self time, ms)", title_justify="left", box=None,
                  padding=(0, 1), header_style="bold")
    for column, justify in (("name", "left"), ("baseline", "right"), ("candidate", "right"), ("Δ", "right"),
                            ("calls", "right"), ("", "left")):
        table.add_column(column, justify=justify, overflow="fold")
    for c in report.changes:
        before, after = c["before"], c["after"]
        table.add_row(shown(c["name"]), _ms(before["self_cpu_us"]) if before else "–",
                      _ms(after["self_cpu_us"]) if after else "–", f"{c['self_delta_us'] / 1000:+.2f}",
                      f"{_calls(before)} → {_calls(after)}", c["status"])
    return table


def breakdown_table(report: GateReport) -> Table | None:
    names = [v for v in ("baseline", "candidate") if v in report.breakdown]
    if len(names) < 2:
        return None
    table = Table(title="Where a profiled step went (ms per step)", title_justify="left", box=None,
                  padding=(0, 1), header_style="bold")
    table.add_column("part")
    for n in names:
        table.add_column(n, justify="right")
    for part in HOST_PARTS:
        cells = []
        for n in names:
            b = report.breakdown[n]
            share = b["host_ms"][part] / b["step_ms"] if b["step_ms"] else 0.0
            cells.append(f"{b['host_ms'][part]:.1f} ({share:.0%})")
        table.add_row(LABELS[part], *cells)
    if any(report.breakdown[n]["device_busy_ms"] for n in names):
        table.add_row("device busy", *(f"{report.breakdown[n]['device_busy_ms']:.1f}" for n in names))
    table.add_row("[bold]step[/]", *(f"[bold]{report.breakdown[n]['step_ms']:.1f}[/]" for n in names))
    return table


def render(report: GateReport, console: Console, verbose: bool = False) -> None:
    against = f" ({report.commit[:12]})" if report.commit else ""
    console.print(f"[bold]proflab gate[/] · {shown(paths.display(report.candidate))} against "
                  f"{shown(report.baseline)}{against}"
                  + (f" on {shown(report.device)}" if report.device != "?" else ""))
    console.print()
    if report.error:
        console.print(f"[red]✗ Cannot gate:[/] {shown(report.error)}")
        if verbose and report.traceback:
            console.print(shown(report.traceback))
        return
    console.print(check_grid(report.checks, lambda c: c.status != PASSED or c.name == "no_regression",
                             min_width=16))
    for table in (changes_table(report), breakdown_table(report)):
        if table is not None:
            console.print()
            console.print(table)
    if verbose and report.traceback:
        console.print("\n[bold]Full traceback[/]")
        console.print(shown(report.traceback))
    if report.output.strip() and (verbose or report.verdict == FAILED and report.check("runs").status == FAILED):
        console.print("\n[dim]The candidate printed (last lines):[/]")
        console.print(shown("\n".join(report.output.strip().splitlines()[-8:])))
    console.print()
    style = {PASSED: "bold green", INCONCLUSIVE: "bold yellow"}.get(report.verdict, "bold red")
    console.print(f"[{style}]{VERDICT_WORDS.get(report.verdict, 'NOT GATED')}[/] · exit {report.exit_code} · "
                  f"{report.duration_s:.0f} s")
    if report.traces:
        folder = paths.display(str(_common_folder(report)))
        console.print(f"Traces: {shown(folder)}/ (runs: {', '.join(sorted(report.traces))}); "
                      f"side by side: [bold]proflab tensorboard --logdir {escape(folder)}[/], then Profile › Diff")


def _common_folder(report: GateReport) -> Path:
    return Path(next(iter(report.traces.values()))).parent.parent


def text(report: GateReport) -> str:
    """The terminal report as plain text (JUnit's system-out)."""
    console = Console(record=True, width=110, file=io.StringIO(), highlight=False)
    render(report, console)
    return "\n".join(line.rstrip() for line in console.export_text().splitlines()) + "\n"


def to_junit(report: GateReport) -> str:
    """One test suite, a test case per check; a regression is a failure, too noisy and not gated errors."""
    now = datetime.now(timezone.utc).replace(microsecond=0, tzinfo=None).isoformat()
    root = ET.Element("testsuites", name="proflab gate", time=_seconds(report.duration_s))
    suite = ET.SubElement(root, "testsuite", name=_x(f"gate {paths.display(report.candidate)} against "
                                                      f"{report.baseline}"),
                          timestamp=now, time=_seconds(report.duration_s))
    props = ET.SubElement(suite, "properties")
    shownp = {"verdict": report.verdict, "exit_code": str(report.exit_code), "device": report.device,
              "max_slowdown": f"{report.max_slowdown:g}", "baseline": report.baseline}
    if report.commit:
        shownp["commit"] = report.commit
    if report.slowdown:
        shownp.update({"slowdown": f"{report.slowdown['median']:.4f}",
                       "slowdown_low": f"{report.slowdown['low']:.4f}",
                       "slowdown_high": f"{report.slowdown['high']:.4f}",
                       "rounds": str((report.comparison or {}).get("rounds", 0))})
    for which, path in sorted(report.traces.items()):
        shownp[f"trace.{which}"] = paths.display(path)
    for key, value in shownp.items():
        ET.SubElement(props, "property", name=key, value=_x(value))
    counts = {"failures": 0, "errors": 0, "skipped": 0}
    for name, title, _ in CHECKS:
        c = report.check(name)
        case = ET.SubElement(suite, "testcase", name=_x(f"{name}: {title}"), classname="proflab.gate",
                             time=_seconds(report.duration_s if name == "no_regression" else 0.0))
        body = "\n".join(x for x in (c.rationale, c.expected and f"expected: {c.expected}",
                                     c.actual and f"measured: {c.actual}", c.help and f"look at: {c.help}") if x)
        if report.verdict == "error":
            if name == "runs":
                ET.SubElement(case, "error", type="not-gated", message=_x(report.error)).text = _x(report.error)
                counts["errors"] += 1
            else:
                ET.SubElement(case, "skipped", message="not gated: the baseline or the kit failed")
                counts["skipped"] += 1
        elif c.status == FAILED:
            ET.SubElement(case, "failure", type=name, message=_x(c.rationale)).text = _x(body)
            counts["failures"] += 1
        elif c.status == INCONCLUSIVE:
            ET.SubElement(case, "error", type="inconclusive", message=_x(c.rationale)).text = _x(body)
            counts["errors"] += 1
        elif c.status == SKIPPED:
            ET.SubElement(case, "skipped", message="not run: an earlier check failed")
            counts["skipped"] += 1
        if name == "no_regression":
            ET.SubElement(case, "system-out").text = _x(text(report))
    suite.set("tests", str(len(CHECKS)))
    for key, value in counts.items():
        suite.set(key, str(value))
    root.set("tests", str(len(CHECKS)))
    root.set("failures", str(counts["failures"]))
    root.set("errors", str(counts["errors"]))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
