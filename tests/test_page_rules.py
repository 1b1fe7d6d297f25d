"""The page rules (``proflab.authoring.page_rules``) catch what they are for, and validate-lab applies them:
a lab page with a figure typed by hand, no "Which time counts" paragraph, its fix named, or hints in the
wrong order fails validate-lab's ``page`` check, naming the rule, before any site is built."""

from __future__ import annotations

import dataclasses
import importlib.util
import shutil
from pathlib import Path

import pytest

from conftest import REPO, kit_labs

from proflab.authoring import page_rules, validate

HOOK = REPO / "docs" / "figures_hook.py"


def lab(number: int):
    return next(lab for lab in kit_labs() if lab.number == number)


def test_the_page_rules_and_the_sites_hook_read_a_figures_name_alike():
    spec = importlib.util.spec_from_file_location("figures_hook", HOOK)
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    assert hook.PLACEHOLDER.pattern == page_rules.PLACEHOLDER.pattern


@pytest.mark.parametrize("number", sorted(lab.number for lab in kit_labs() if lab.docs))
def test_every_lab_page_keeps_the_rules(number):
    found = lab(number)
    assert page_rules.check(found, found.docs, (REPO / "docs" / found.docs).read_text(encoding="utf-8")) == []


def broken(text: str, number: int = 3) -> list[str]:
    return [b.rule for b in page_rules.check(lab(number), lab(number).docs, text)]


def test_each_rule_catches_its_break():
    page = (REPO / "docs" / lab(3).docs).read_text(encoding="utf-8")
    assert broken(page) == []
    assert broken(page + "\nThe fused block ran in 12.5 ms a step.\n") == ["figures"]
    assert broken(page.replace("**Which time counts.**", "**Timing.**")) == ["which time counts"]
    assert broken(page + "\nUse `F.layer_norm`.\n") == ["the fix stays behind the hints"]
    # a collapsed block is still in the page's HTML: what it holds is the debrief's (proflab debrief, once passed)
    hidden = page + '\n??? note "After you pass: why it works"\n    `F.layer_norm` reads once.\n'
    assert broken(hidden) == ["the fix stays behind the hints", "after a pass"]
    assert broken(page + "\nThe reference fix: {{ lab3.check-solution.spread }}.\n") == ["after a pass"]
    line = page_rules.solution_lines(lab(3))[0]
    assert broken(page + f"\n```python\n{line}\n```\n") == ["after a pass"]
    swapped = dataclasses.replace(lab(3), hints=tuple(reversed(lab(3).hints)))
    assert [b.found for b in page_rules.hint_rule(swapped)] == [
        "the last hint names none of the lab's fix_words", "the first hint gives the fix away"]


def test_validate_lab_fails_a_page_that_breaks_a_rule(tmp_path):
    """validate-lab's page check, on a copy of the kit's docs with lab 3's page changed."""
    root = tmp_path / "kit"
    shutil.copytree(REPO / "docs", root / "docs", ignore=shutil.ignore_patterns("site"))
    shutil.copy2(REPO / "mkdocs.yml", root / "mkdocs.yml")
    page = root / "docs" / lab(3).docs
    page.write_text(page.read_text(encoding="utf-8").replace("**Which time counts.**", "**Timing.**")
                    + "\nThe fused block ran in 12.5 ms a step.\n", encoding="utf-8")
    result = validate.check_page(root, lab(3))
    assert not result.ok
    assert "figures: 1 figure(s) written by hand" in result.measured and "'12.5 ms'" in result.measured
    assert "which time counts: no paragraph" in result.measured
    assert "docs/figures" in result.change
