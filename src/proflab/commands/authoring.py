"""``proflab new-lab`` and ``proflab validate-lab``: writing a lab, and telling whether it is ready."""

from __future__ import annotations

from pathlib import Path

from rich.markup import escape

from .. import paths
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
        from .. import labs

        number = next((lab.number for lab in labs.discover(root / "labs") if lab.name == args.lab), -1)
    out.print(f"[bold]Validating lab {number}[/] [dim](each check grades real runs: minutes, not seconds)[/]")
    failed = 0
    for result in validate.validate(root, number, times=args.times, quick=args.quick):
        out.print(f" {MARKS[result.ok]} [bold]{result.name:<12}[/] {escape(result.measured)}")
        if result.ok is False:
            failed += 1
            out.print(f"   [red]change:[/] {escape(result.change)}")
    if failed:
        err.print(f"\n[red]{failed} check(s) failed:[/] change what each says, then run proflab validate-lab "
                  f"{number} again.")
        return 1
    out.print(f"\n[green]Lab {number} is ready.[/]" if not args.quick else
              f"\n[green]Lab {number} passes the quick checks;[/] proflab validate-lab {number} runs them all.")
    return 0
