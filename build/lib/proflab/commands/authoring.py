"""``proflab new-lab`` and ``proflab validate-lab``: writing a lab, and telling whether it is ready."""

from __future__ import annotations

import time
from pathlib import Path

from rich.markup import escape

from .. import labs, paths
from ..authoring import new_lab, validate
from .common import UsageError, err, out

MARKS = {True: "[green]✓[/]", False: "[red]✗[/]", None: "[dim]–[/]"}


def _checkout() -> Path:
    try:
        return new_lab.checkout(paths.root())
    except new_lab.AuthoringError as e:
        raise UsageError(str(e)) from None


def cmd_new_lab(args) -> int:
    if not args.name and not args.metric:
        raise UsageError("name the lab (proflab new-lab serving) or the metric (proflab new-lab --metric bn_calls)")
    root = _checkout()
    try:
        done = [new_lab.new_lab(root, args.name, args.title or "", args.number)] if args.name else []
        if args.metric:
            done.append(new_lab.new_metric(root, args.metric, args.unit))
    except new_lab.AuthoringError as e:
        raise UsageError(str(e)) from None
    for written in done:
        for rel in written.files:
            out.print(f"  [green]wrote[/]  {escape(rel)}")
        for rel in written.edited:
            out.print(f"  [yellow]added to[/] {escape(rel)}")
    out.print("\n[bold]Next[/]")
    steps = new_lab.next_steps(done)
    for i, step in enumerate(steps, 1):
        out.print(f"  {i}. {escape(step)}")
    return 0


def cmd_validate_lab(args) -> int:
    root = _checkout()
    try:
        number = int(args.lab)
    except ValueError:
        number = next((lab.number for lab in labs.discover(root / "labs") if lab.name == args.lab), -1)
    out.print(f"[bold]Validating lab {number}[/] [dim](each check grades real runs: minutes, not seconds)[/]")
    failed, started, waited = 0, time.perf_counter(), 0.0
    for result in validate.validate(root, number, times=args.times, quick=args.quick):
        took = ""
        if result.seconds >= 1:
            waiting = f", {result.waited_s:.0f} s of it waiting for other checks" if result.waited_s >= 1 else ""
            took = f" [dim]({result.seconds:.0f} s{waiting})[/]"
        out.print(f" {MARKS[result.ok]} [bold]{result.name:<12}[/] {escape(result.measured)}{took}")
        waited += result.waited_s
        if result.name == "manifest" and result.ok:
            lab = next(lab for lab in labs.discover(root / "labs") if lab.number == number)
            out.print("   [dim]It grades, with the checker, as a learner's check is graded:[/]")
            for line in validate.plan(root, lab, args.times, args.quick):
                out.print(f"   [dim]· {escape(line)}[/]")
        if result.ok is False:
            failed += 1
            out.print(f"   [red]change:[/] {escape(result.change)}")
    total = time.perf_counter() - started
    out.print(f"[dim]{total:.0f} s in all" + (f"; {waited:.0f} s of it waiting for other checks on this machine "
                                               "(their turn, not this lab's time)" if waited >= 1 else "") + "[/]")
    if failed:
        err.print(f"\n[red]{failed} check(s) failed:[/] change what each says, then run proflab validate-lab "
                  f"{number} again.")
        return 1
    out.print(f"\n[green]Lab {number} is ready.[/]" if not args.quick else
              f"\n[green]Lab {number} passes the quick checks;[/] proflab validate-lab {number} runs them all.")
    return 0
