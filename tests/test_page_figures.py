"""Every figure a page quotes comes from a real run, and no lab page gives its fix away.

The figures: ``python docs/gen_figures.py`` runs the labs and writes ``docs/figures/`` (the outputs, and
``figures.json``, the figures read from them with the machine they came from). A page quotes an output
whole with ``--8<-- "lab6/run-exercise.txt"`` and a single figure with ``{{ name }}`` (``docs/figures_hook.py``).
These tests do not run the labs: they check that every name and file resolves, that a converted page
writes no measured-looking figure by hand (outside a short allow-list, and blocks marked as quoted from a
benchmark's results file, which must hold them), and that facts of the code the pages state (the
profiler's schedule, the steps) come from the code.

The fix: a lab page teaches where to look and what it means; the prescription stays behind
``proflab hint N``. A lab page names none of its lab's fix tokens outside a collapsed
``??? note "After you pass: …"`` block, and the lab's last hint names the fix.
"""

from __future__ import annotations

import importlib.util
import json
import re
import tomllib
from pathlib import Path

import pytest

from conftest import kit_labs

from proflab.authoring import page_rules as rules

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
FIGURES_DIR = DOCS / "figures"


def _hook():
    spec = importlib.util.spec_from_file_location("figures_hook", DOCS / "figures_hook.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


hook = _hook()

# Pages whose figures all come from docs/figures/ or a cited results file: every lab's page (its
# manifest's `docs`, found in labs/) and the kit's own pages. A page not yet converted is named in PENDING,
# so that the list is visible.
CONVERTED = ["reading-a-profile.md", "index.md", "ci.md", "instructor.md", "setup.md", "own-model.md", "next.md", "drills.md",
             *(lab.docs for lab in kit_labs())]
PENDING: list[str] = []

# Pages whose figures are not yet all generated, but whose fix already stays in the hints.
FIX_ONLY: list[str] = []

# The page rules themselves (the figures lint and its allowed figures, the fix behind the hints, which time
# counts) live in proflab.authoring.page_rules, which validate-lab applies to a new lab's page too.
MEASURED, ALLOWED, BENCH_BLOCK, SNIPPET = rules.MEASURED, rules.ALLOWED, rules.BENCH_BLOCK, rules.SNIPPET
handwritten, _allowed = rules.handwritten, rules.allowed
# The words and calls that name each lab's fix: each lab's own fix_words (lab.toml).
FIX_TOKENS = {lab.number: list(lab.fix_words) for lab in kit_labs() if lab.fix_words}


def _page(name: str) -> str:
    return (DOCS / name).read_text(encoding="utf-8")


def _pages() -> list[Path]:
    return sorted(p for p in DOCS.rglob("*.md") if FIGURES_DIR not in p.parents)


def test_every_figure_name_on_every_page_resolves():
    figures = hook.all_figures()
    for path in _pages():
        hook.substitute(path.read_text(encoding="utf-8"), figures, str(path.relative_to(REPO)))


def test_an_unknown_figure_name_fails():
    with pytest.raises(KeyError, match="no figure named lab6.nothing"):
        hook.substitute("{{ lab6.nothing }} ms", hook.all_figures(), "x.md")


def test_every_included_output_is_a_file_the_generator_wrote():
    runs = json.loads((FIGURES_DIR / "figures.json").read_text(encoding="utf-8"))["runs"]
    for path in _pages():
        for name in SNIPPET.findall(path.read_text(encoding="utf-8")):
            file, _, lines = name.partition(":")
            target = FIGURES_DIR / file
            assert target.is_file() and target.read_text(encoding="utf-8").strip(), f"{path.name}: {name}"
            assert file.removesuffix(".txt") in runs, f"{path.name}: {file} is not one of the generator's outputs"
            if lines:
                first, _, last = lines.partition(":")
                count = len(target.read_text(encoding="utf-8").splitlines())
                assert 1 <= int(first) <= count and (not last or int(first) <= int(last) <= count), \
                    f"{path.name}: {name} is outside the {count} lines of {file}"


def test_the_figures_name_the_machine_they_came_from():
    data = json.loads((FIGURES_DIR / "figures.json").read_text(encoding="utf-8"))
    machine = data["machine"]
    for key in ("cpu", "cores", "torch", "date", "load_average", "note"):
        assert machine.get(key) not in (None, ""), key
    assert re.fullmatch(r"\d{4}-\d\d-\d\d", machine["date"])
    # A page that quotes a measured figure or output names the machine of that lab's figures.
    measured = hook.measured()
    for name in CONVERTED:
        page = _page(name)
        used = {m.group(1) for m in hook.PLACEHOLDER.finditer(page) if m.group(1) in measured}
        if used or SNIPPET.search(page):
            assert re.search(r"\{\{\s*(?:(?:lab\d+|own)\.)?machine\s*\}\}", page), f"{name} quotes figures without their machine"


@pytest.mark.parametrize("name", CONVERTED)
def test_a_converted_page_writes_no_measured_figure_by_hand(name):
    found = handwritten(name, _page(name))
    assert not found, ("figures written by hand (quote them from docs/figures with {{ name }} or --8<--, or mark "
                       "the block as <!-- figures from benchmarks/results/FILE.md -->):\n" + "\n".join(found))


def test_the_lint_catches_a_handwritten_figure():
    page = ("Read the top row: `c10d::allreduce_` at 45.7%, 1.83 ms a call, 192 calls.\n"
            "It now times 8 and records 4 (12 timed, 6 profiled), `active=5`; the fix is 2.5x, 1.94× faster.\n"
            "Its graph takes about 90 MB, its step 0.5 s.\n")
    found = " ".join(handwritten("labs/06-distributed.md", page))
    for figure in ("45.7%", "1.83 ms", "192 calls", "12 timed", "6 profiled", "active=5", "2.5x", "1.94×", "90 MB",
                   "0.5 s"):
        assert repr(figure) in found, figure
    clean = "Read `{{ lab6.run-exercise.row1.name }}` at {{ lab6.run-exercise.row1.self_pct }}, 3 × 32 × 32 pixels.\n"
    assert handwritten("labs/06-distributed.md", clean) == []


@pytest.mark.parametrize("name", CONVERTED)
def test_figures_quoted_from_a_results_file_are_in_it(name):
    for source, block in BENCH_BLOCK.findall(_page(name)):
        path = REPO / source
        assert path.is_file(), f"{name}: {source} does not exist"
        text = path.read_text(encoding="utf-8").replace("−", "-")
        block = hook.PLACEHOLDER.sub("", block)
        missing = [m.group(0) for m in MEASURED.finditer(block) if not _allowed(name, m.group(0).strip())
                   and any(n not in text for n in re.findall(r"\d[\d,]*(?:\.\d+)?", m.group(0)))]
        assert not missing, f"{name}: {missing} are not in {source}"


def test_a_block_cites_a_results_file_only_where_it_holds_the_figures():
    # The check above fails on a block whose figures the file lacks.
    block = "<!-- figures from benchmarks/results/2026-11-30-cpu-2core.md -->\n| 1 · original | 999.99 ms |\n"
    source, body = BENCH_BLOCK.findall(block)[0]
    text = (REPO / source).read_text(encoding="utf-8")
    assert "999.99" not in text and MEASURED.search(body)


def test_the_kits_schedule_is_what_the_pages_say():
    """The pages name the kit's schedule as {{ labN.schedule }}: built from the runner's own call."""
    runner = (REPO / "src" / "proflab" / "running" / "runner.py").read_text(encoding="utf-8")
    assert hook.KIT_SCHEDULE in runner, ("the runner's profiler schedule changed: update KIT_SCHEDULE in "
                                         "src/proflab/reporting/figures.py and what the pages say of it")
    facts = hook.code_facts()
    for manifest in sorted((REPO / "labs").glob("*/lab.toml")):
        data = tomllib.loads(manifest.read_text(encoding="utf-8"))
        w, n = data.get("workload", {}), data["number"]
        if w.get("profile_steps", 0) >= 2:
            assert facts[f"lab{n}.schedule"] == f"schedule(wait=0, warmup=1, active={w['profile_steps'] - 1}, repeat=1)"
            assert facts[f"lab{n}.toml.workload.timed_steps"] == str(w["timed_steps"])
    # The kit's schedule is never written out by hand on a converted page.
    for name in CONVERTED:
        assert "schedule(wait=0" not in hook.PLACEHOLDER.sub("", _page(name)), name


def test_the_schedules_a_page_shows_are_the_reference_or_the_kits():
    """A schedule(...) written on a page is the kit's (a placeholder) or one a lab file or hint uses."""
    sources = "".join(p.read_text(encoding="utf-8") for p in (REPO / "labs").glob("*/*.py"))
    sources += "".join(p.read_text(encoding="utf-8") for p in (REPO / "labs").glob("*/lab.toml"))
    for name in CONVERTED:
        for m in re.finditer(r"schedule\((wait=\d+, warmup=\d+, active=\d+, repeat=\d+)\)", _page(name)):
            assert m.group(1) in sources, f"{name}: schedule({m.group(1)}) is in no lab file"


def _lab_pages():
    for manifest in sorted((REPO / "labs").glob("*/lab.toml")):
        data = tomllib.loads(manifest.read_text(encoding="utf-8"))
        if data["number"] in FIX_TOKENS:
            yield data["number"], data


@pytest.mark.parametrize("number", sorted(FIX_TOKENS))
def test_a_lab_page_does_not_name_its_fix(number):
    data = dict(_lab_pages())[number]
    name = data["docs"]
    if name not in CONVERTED + FIX_ONLY:
        pytest.skip(f"{name} is not converted yet")
    page = _page(name)
    named = [t for t in FIX_TOKENS[number] if t in page]
    assert not named, (f"{name} names its fix ({named}): move it to the hints (labs/*/lab.toml) or to the lab's "
                       "debrief.md (proflab debrief, once passed)")


@pytest.mark.parametrize("number", sorted(FIX_TOKENS))
def test_the_last_hint_names_the_fix_and_the_first_does_not(number):
    hints = dict(_lab_pages())[number]["hints"]
    assert len(hints) >= 2
    assert any(t in hints[-1] for t in FIX_TOKENS[number]), f"lab {number}'s last hint does not name the fix"
    assert not any(t in hints[0] for t in FIX_TOKENS[number]), f"lab {number}'s first hint gives the fix away"


def test_the_home_page_names_no_labs_fix():
    page = _page("index.md")
    # `.item()` is lab 4's symptom as much as lab 5's fix: the home page may name it as a host read.
    named = {n: [t for t in tokens if t in page and t != ".item()"] for n, tokens in FIX_TOKENS.items()}
    assert not any(named.values()), f"index.md names the labs' fixes: {named}"


def test_the_fix_check_fails_on_a_page_that_names_it_even_in_a_collapsed_block():
    """A collapsed block is still in the page's HTML: the fix named there is named."""
    lab6 = next(lab for lab in kit_labs() if lab.number == 6)
    page = "Wrap the micro-batches in `model.no_sync()`.\n"
    assert [b.rule for b in rules.check(lab6, lab6.docs, page)
            if b.rule != "which time counts"] == ["the fix stays behind the hints"]
    hidden = "Look at the calls.\n\n??? note \"After you pass: why the fix works\"\n    `model.no_sync()` skips it.\n"
    assert {b.rule for b in rules.check(lab6, lab6.docs, hidden)} >= {"the fix stays behind the hints", "after a pass"}


def test_every_page_is_converted_or_pending():
    names = {str(p.relative_to(DOCS)) for p in _pages()} - {"reference.md"}
    assert names <= set(CONVERTED) | set(PENDING), names - set(CONVERTED) - set(PENDING)


def test_one_labs_figures_leave_the_others_and_the_machines_as_they_were(tmp_path, monkeypatch):
    """gen_figures.py --lab N replaces lab N's keys only; the kit-wide ones (the machine, whether it was
    quiet) are replaced by a run of every lab."""
    spec = importlib.util.spec_from_file_location("gen_figures", DOCS / "gen_figures.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    figures = tmp_path / "figures.json"
    figures.write_text(json.dumps({"machine": {"quiet": True}, "runs": {"lab3/check": {"exit": 0}},
                                   "values": {"machine": "old box", "machine.cpu": "old", "lab3.x": "3",
                                              "lab10.x": "old"}}))
    monkeypatch.setattr(gen, "FIGURES", figures)
    new = {"machine": "busy box", "machine.cpu": "new", "lab3.x": "changed", "lab10.x": "new"}
    gen.write_figures(gen.made_by([10], every_lab=False), new, {"lab10/check": {"exit": 1}})
    after = json.loads(figures.read_text())
    assert after["machine"] == {"quiet": True}
    assert after["values"] == {"machine": "old box", "machine.cpu": "old", "lab3.x": "3", "lab10.x": "new"}
    assert after["runs"] == {"lab3/check": {"exit": 0}, "lab10/check": {"exit": 1}}
    gen.write_figures(gen.made_by([3, 10], every_lab=True), new, {}, {"quiet": False})
    after = json.loads(figures.read_text())
    assert after["values"] == new and after["machine"]["quiet"] is False
