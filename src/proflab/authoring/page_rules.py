"""The rules a lab's page keeps, in one place: the kit's tests hold every page to them, and
``proflab validate-lab`` holds a new lab's page to them the same day a rule is added.

- **figures** (``handwritten``): a measured-looking figure (a time, a size, a share, a ratio, a count of
  calls or steps, a schedule's arguments) comes from ``docs/figures`` (``{{ name }}`` or ``--8<--``) or
  from a cited results file (``<!-- figures from benchmarks/results/FILE.md -->`` above its block), never
  typed by hand; the few figures that are not measurements are listed in ``ALLOWED``, each with its reason.
- **which time counts** (``time_rule``): a lab page says, in a paragraph that starts with **Which time
  counts.**, which figure decides the lab's speed (the clock or the CPU time), as its ``[timing]`` does.
- **the fix stays behind the hints** (``fix_rule``, ``hint_rule``): the page names none of the lab's
  ``fix_words``; the lab's last hint names one, its first none.
- **what is for after a pass is not in the site** (``debrief_rule``): no line the reference fix adds to the
  original (``solution_lines``), no figure or output of a reference fix's run or check
  (``{{ labN.check-solution.* }}``, ``--8<-- "labN/run-solution.txt"``), and no ``After you pass`` block: a
  collapsed block is still in the page's HTML. That material is the lab's debrief (``debrief.md`` in its
  folder), which ``proflab debrief N`` shows once the lab is passed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..reporting.figures import PLACEHOLDER  # a figure's name on a page, {{ name }}, as the site substitutes it

# A measured-looking figure: a number with a unit of time, size, a share or a ratio; a count of calls;
# a count of steps of a phase; a schedule's arguments.
UNIT = r"(?:ms|µs|us|ns|s|secs?|seconds?|minutes?|min|MB|MiB|GB|GiB|KB|kB|KiB)\b"
MEASURED = re.compile(
    r"(?<![\w.])[-+−]?\d[\d,]*(?:\.\d+)?(?:\s?[–-]\s?[-+−]?\d[\d,]*(?:\.\d+)?)?(?:\s?(?:%|×(?!\s?\d)|x\b(?!\s?\d)|" + UNIT + r")"
    r"|\s+(?:all-reduce\s+)?calls\b"
    r"|\s+(?:timed|profiled|warm-up|recorded|active)\b)"
    r"|\b(?:wait|warmup|active|repeat)=\d+"
)
# Figures that are not measurements, each with its reason. (page, exact text, reason)
ALLOWED = [
    ("*", "10–30%", "a common estimate of the profiler's overhead, quoted as such, not measured here"),
    ("*", "95%", "the checker's confidence level (src/proflab/measuring/stats.py), a constant"),
    ("*", "100%", "a definition: the whole of a total"),
    ("reading-a-profile.md", "wait=0", "the kit's own schedule's wait (KIT_SCHEDULE, tested against the runner)"),
    ("reading-a-profile.md", "wait=1", "the example schedule of the page's own example loop"),
    ("reading-a-profile.md", "warmup=1", "the example schedule of the page's own example loop"),
    ("reading-a-profile.md", "active=3", "the example schedule of the page's own example loop"),
    ("reading-a-profile.md", "repeat=1", "the example schedule of the page's own example loop"),
    ("reading-a-profile.md", "3 calls", "the example loop's count, from its own schedule (active=3)"),
    ("labs/07-gate.md", "1%", "the exercise's own comment on its max_slowdown = 1.01, a setting, not measured"),
]
# The instructor guide states the checker's own constants, each set in the code (not measured), and the
# factors the guide's class of five is built with (docs/gen_figures.py --page instructor).
ALLOWED += [("instructor.md", text, reason) for text, reason in [
    ("5 s", "progress.py LOCK_READ_WAIT_S"), ("30 s", "progress.py LOCK_WAIT_S"),
    ("20 ms", "the slack of the first step (grading/measures.py), of the trace's steps, the memory sampling, "
              "the calibration lab's step_ms"),
    ("2×", "the trace's steps against the stamped ones"), ("25%", "running/marks.py CLOCK_SLACK"),
    ("30 ms", "the background work floor, running/marks.py"), ("0.25 s", "running/launch.py POLL_S"),
    ("100 ms", "running/memory.py DEVICE_SAMPLE_S"), ("0.9×", "labs/keys.py min_work_vs_original"),
    ("5×", "grading/checks/evidence.py PROFILED_SLOWDOWN_MAX"),
    ("0.2×", "grading/checks/evidence.py PROFILED_SHORTER_MAX"),
    ("10 ms", "grading/checks/evidence.py PROFILED_SHORTER_MIN_S"),
    ("5%", "measuring/answers.py FOREIGN_SHARE, grading/measures.py FIRST_STEP_SLACK"),
    ("10%", "measuring/answers.py CALLS_SLACK, the host peak's slack; bob's factor in the guide's class"),
    ("3×", "measuring/answers.py STEP_FACTOR"), ("50 ms", "measuring/answers.py STEP_SLACK_S"),
    ("80%", "measuring/answers.py NEAR_TOP"),
    ("8 timed", "tests/test_labs.py's minimum"), ("2 profiled", "tests/test_labs.py's minimum"),
    ("1.6×", "alice's factor in the guide's class"), ("1.45×", "erin's factors in the guide's class"),
    ("1.0×", "erin's factors in the guide's class"),
    ("3 GB", "the Gradescope machine size the guide recommends (a setting to pick, not a measured figure)"),
]]
BENCH_BLOCK = re.compile(r"<!--\s*figures from (benchmarks/results/[\w.\-]+\.md)\s*-->\n(.*?)(?:\n\s*\n|\Z)", re.S)
SNIPPET = re.compile(r"^\s*--8<--\s+\"([^\"]+)\"\s*$", re.M)

AFTER_YOU_PASS = re.compile(r'^[?!]{3}\+? *\w+ *"After you pass[^"]*"', re.M)
# A figure or an output of a reference fix's run or check: {{ lab2.check-solution.spread }}, lab2/run-solution.txt
SOLUTION_FIGURE = re.compile(r"\blab\d+[./](?:check|run)-solution\b")
SHORTEST_LINE = 10  # a line of the reference fix shorter than this (``else:``, ``)``) names nothing


def allowed(page: str, text: str) -> bool:
    return any((where == "*" or where == page) and text == ok for where, ok, _ in ALLOWED)


def handwritten(page: str, markdown: str) -> list[str]:
    """The measured-looking figures of a page that come from neither the figures nor a cited results file."""
    found = []
    markdown = PLACEHOLDER.sub("FIGURE", markdown)
    markdown = SNIPPET.sub("", markdown)
    markdown = BENCH_BLOCK.sub("", markdown)
    for line in markdown.splitlines():
        for m in MEASURED.finditer(line):
            text = m.group(0).strip()
            if not allowed(page, text):
                found.append(f"{page}: {text!r} in {line.strip()[:100]!r}")
    return found


def _code_of(line: str, suffix: str) -> str:
    """A source line's code, its comment left out and its spaces made single."""
    code = line
    if suffix in (".py", ".toml"):
        quoted, kept = None, []
        for ch in line:  # a '#' outside quotes starts the comment
            if quoted:
                quoted = None if ch == quoted else quoted
            elif ch in "\"'":
                quoted = ch
            elif ch == "#":
                break
            kept.append(ch)
        code = "".join(kept)
    return " ".join(code.split())


def solution_lines(lab) -> list[str]:
    """The code lines the lab's reference fix adds to its original (docstrings and comments left out), each
    long enough to name something: what no page may show."""
    original, solution = Path(lab.original), Path(lab.solution)
    if not original.is_file() or not solution.is_file():
        return []
    # handed out already: a line of any lab's original (``with torch.no_grad():`` is no lab's secret)
    before = {_code_of(line, path.suffix) for path in (original, *original.parent.parent.glob("*/original.*"))
              for line in path.read_text(encoding="utf-8").splitlines()}
    added, in_docstring = [], False
    for line in solution.read_text(encoding="utf-8").splitlines():
        quotes = line.count('"""') + line.count("\'\'\'")
        if in_docstring or (quotes and line.strip().startswith(('"""', "\'\'\'"))):
            in_docstring = (in_docstring + quotes) % 2 == 1
            continue
        code = _code_of(line, solution.suffix)
        if len(code) >= SHORTEST_LINE and code not in before and code not in added and not _public(lab, code):
            added.append(code)
    return added


# The profiler's own calls: a lab graded on the learner's profile (lab 0) is solved with them, and the site
# teaches them everywhere (how to profile a model of one's own is the point of the kit)
PROFILER_API = ("prof.", "profile(", "schedule(", "record_function", "tensorboard_trace_handler", "ProfilerActivity",
                "activities", "key_averages", "export_chrome_trace", "on_trace_ready")


def _public(lab, code: str) -> bool:
    """A line of a reference fix that is no lab's secret: the profiler's API in a lab graded on the profile; a
    gate's setting at its default (``proflab gate --help`` and the reference print the defaults)."""
    if lab.kind == "own_profile" and any(word in code for word in PROFILER_API):
        return True
    if lab.kind == "gate" and "=" in code:
        import tomllib

        from ..grading import gate_config

        try:
            (key, value), = tomllib.loads(code).items()
        except (tomllib.TOMLDecodeError, ValueError):
            return False
        known = gate_config.KEYS.get(key)
        return known is not None and known.default == value
    return False


def debrief_rule(lab, page: str) -> list[Broken]:
    broken = []
    if AFTER_YOU_PASS.search(page):
        broken.append(Broken("after a pass", "an \"After you pass\" block: collapsed, it is still in the page's HTML",
                             f"move it to {lab.folder.name}/debrief.md, which proflab debrief {lab.number} shows "
                             "once the lab is passed"))
    figures = sorted({m.group(0) for m in SOLUTION_FIGURE.finditer(page)})
    if figures:
        broken.append(Broken("after a pass", f"the page quotes the reference fix's own run or check: {figures}",
                             f"quote it in {lab.folder.name}/debrief.md instead (the same {{{{ names }}}} work there)"))
    flat = " ".join(page.split())
    shown = [line for line in solution_lines(lab) if line in flat]
    if shown:
        broken.append(Broken("after a pass", f"the page shows lines of the reference fix: {shown[:3]}",
                             f"leave them to the hints and to {lab.folder.name}/debrief.md"))
    return broken


@dataclass(frozen=True)
class Broken:
    """A rule a page breaks: which, what was found, and what to change."""

    rule: str
    found: str
    change: str


def figure_rule(name: str, page: str) -> list[Broken]:
    found = handwritten(name, page)
    return [Broken("figures", f"{len(found)} figure(s) written by hand: " + "; ".join(found[:3]),
                   "quote them from docs/figures ({{ labN.name }} or --8<-- \"labN/FILE.txt\"), or mark their block "
                   "<!-- figures from benchmarks/results/FILE.md -->")] if found else []


def time_rule(lab, page: str) -> list[Broken]:
    if lab.kind == "gate":
        return []
    title = "**Which time counts.**"
    if not lab.timing_why:
        return [Broken("which time counts", f"lab {lab.number}'s [timing] has no why",
                       "say in [timing] why = \"...\" why its step's time is the clock or the CPU time")]
    if title not in page:
        return [Broken("which time counts", f"no paragraph that starts with {title}",
                       "say there which figure decides the lab's speed (the clock or the CPU time), and why")]
    said = page[page.index(title):].split("\n\n", 1)[0]
    missing = []
    if "cpu_time" in lab.timing.values() and not ("CPU time" in said and "/proc" in said):
        missing.append("'CPU time' and '/proc' (the lab's [timing] is cpu_time)")
    if "wall_time" in lab.timing.values() and lab.leaner == {} and "clock" not in said:
        missing.append("'clock' (the lab's [timing] is wall_time)")
    return [Broken("which time counts", f"{title} does not say {' nor '.join(missing)}",
                   "say which figure decides, as the lab's [timing] does")] if missing else []


def fix_rule(lab, page: str) -> list[Broken]:
    named = [w for w in lab.fix_words if w in page]
    return [Broken("the fix stays behind the hints", f"the page names the fix: {named}",
                   f"move it to the hints (lab.toml), or to {lab.folder.name}/debrief.md (proflab debrief, "
                   "once passed)")] if named else []


def hint_rule(lab) -> list[Broken]:
    if not lab.fix_words:
        return []
    hints = lab.hints
    if len(hints) < 2:
        return [Broken("hints", f"{len(hints)} hint(s)", "write at least two: from the symptom to the fix")]
    broken = []
    if not any(w in hints[-1] for w in lab.fix_words):
        broken.append(Broken("hints", "the last hint names none of the lab's fix_words",
                             "end the hints with the fix, in the words fix_words lists"))
    if any(w in hints[0] for w in lab.fix_words):
        broken.append(Broken("hints", "the first hint gives the fix away",
                             "start from the symptom: where to look in the profile"))
    return broken


def check(lab, name: str, page: str) -> list[Broken]:
    """Every rule a lab's page (``name``, relative to docs/) and its hints break."""
    return [*figure_rule(name, page), *time_rule(lab, page), *fix_rule(lab, page), *debrief_rule(lab, page),
            *hint_rule(lab)]
