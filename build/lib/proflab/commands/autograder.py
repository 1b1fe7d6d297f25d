"""``proflab autograder``: a class graded on Gradescope or Classroom 50, or feedback from a GitHub Actions workflow
(``grading.engines``)."""

from __future__ import annotations

from pathlib import Path

from rich.markup import escape

from .. import labs, outputs, paths
from .common import UsageError, _lab, err, out


def _graded(numbers: list[str]) -> list[labs.Lab]:
    graded = []
    for n in numbers:
        lab = _lab(n)
        if lab not in graded:
            graded.append(lab)
    return sorted(graded, key=lambda lab: lab.number)


def cmd_autograder(args) -> int:
    return {"gradescope": _gradescope, "classroom": _classroom, "classroom50": _classroom50,
            "run": _run}[args.engine](args)


def _classroom50(args) -> int:
    from ..grading.engines import classroom, classroom50

    graded = _graded(args.labs)
    ref = args.kit_ref or classroom.head_commit(paths.root())
    if not ref:
        raise UsageError("name the kit's commit or tag the autograder pins (--kit-ref v1.0): this kit is not a git "
                         "checkout, so its commit cannot be taken")
    try:
        made = classroom50.files(graded, args.kit_url, ref, slug=args.slug,
                                 torch_index="" if args.torch_index == "pypi" else args.torch_index)
    except classroom.ClassroomError as e:
        raise UsageError(str(e)) from None
    folder = outputs.check(args.out, folder=True, option="--out")
    for name in made:  # all or nothing: a file there already (a script, a setting) is never written over
        outputs.check(folder / name, exists_ok=False, option="--out")
    outputs.folder(folder, option="--out")
    for name, text in made.items():
        outputs.write_text(folder / name, text, exists_ok=False)
    out.print(f"Wrote [bold]{escape(paths.display(folder))}[/]: {', '.join(made)}; checks labs "
              f"{' '.join(str(lab.number) for lab in graded)} for each submission, with the kit pinned at "
              f"{escape(ref)}. Its README.md says where it goes and the steps, from gh teacher to a graded "
              "submission.")
    return 0


def _gradescope(args) -> int:
    from ..grading.engines import gradescope

    graded = _graded(args.labs)
    target = outputs.check(args.out, option="--out")
    try:
        names = gradescope.bundle(graded, target, torch_index=args.torch_index, torch_version=args.torch_version)
    except gradescope.BundleError as e:
        raise UsageError(str(e)) from None
    kit = sum(1 for n in names if n.startswith(gradescope.KIT + "/"))
    out.print(f"Wrote [bold]{escape(paths.display(target))}[/]: setup.sh, run_autograder, README.md and the kit "
              f"({kit} files), for labs {' '.join(str(lab.number) for lab in graded)}.")
    out.print("Upload it in Gradescope (Configure Autograder › Zip file upload); its README.md says which "
              "machine size to pick and how long a submission takes.")
    return 0


def _classroom(args) -> int:
    from ..grading.engines import classroom

    graded = _graded(args.labs)
    ref = args.kit_ref or classroom.head_commit(paths.root())
    if not ref:
        raise UsageError("name the kit's commit or tag the workflow pins (--kit-ref v1.0): this kit is not a git "
                         "checkout, so its commit cannot be taken")
    target = Path(args.out)
    if target.is_file() and not target.is_symlink() and not args.force:
        raise UsageError(f"{target} exists: it is left as it is (--force writes over it)")
    outputs.check(target, option="--out", exists_ok=False, force=args.force)  # --force: only a workflow of ours
    try:
        text = classroom.workflow(graded, args.kit_url, ref)
    except classroom.ClassroomError as e:
        raise UsageError(str(e)) from None
    outputs.write_text(target, text, exists_ok=False, force=args.force)
    out.print(f"Wrote [bold]{escape(paths.display(target))}[/]: checks labs "
              f"{' '.join(str(lab.number) for lab in graded)} on every push, with the kit pinned at "
              f"{escape(ref)}.")
    for i, step in enumerate(classroom.instructor_steps(args.kit_url, ref, target), 1):
        out.print(f"  {i}. {escape(step)}")
    return 0


def _run(args) -> int:
    from ..grading.engines import gradescope

    if args.format == "classroom50":
        import os

        from ..grading.engines import classroom50

        if not args.labs:
            raise UsageError("--format classroom50 needs --labs: the labs the autograder grades")
        target = outputs.folder(args.results, option="--results")
        return classroom50.run(Path(args.submission), target, _graded(args.labs), dict(os.environ),
                               say=lambda line: err.print(escape(line), soft_wrap=True))
    metadata = Path(args.metadata) if args.metadata and Path(args.metadata).is_file() else None
    outputs.check(args.results, [args.submission, args.metadata], option="--results")
    return gradescope.run(Path(args.submission), Path(args.results), metadata,
                          say=lambda line: err.print(escape(line), soft_wrap=True))
