"""The site's figures: ``{{ name }}`` in a page becomes the figure of that name when the site is built.

The names, and how each is found (``docs/figures/figures.json`` from real runs, a lab's manifest, a fact of the
kit's code), are ``proflab.reporting.figures``'s: ``proflab debrief`` substitutes a lab's debrief with the same
functions. An unknown name fails the build (``mkdocs build --strict``, and ``mkdocs serve`` says why).
``tests/test_page_figures.py`` uses the same functions. Not a page of the site (``exclude_docs``).
"""

from __future__ import annotations

from pathlib import Path

from proflab.reporting import figures as _figures
from proflab.reporting.figures import KIT_SCHEDULE, PLACEHOLDER, substitute  # noqa: F401

DOCS = Path(__file__).resolve().parent
REPO = DOCS.parent
FIGURES = DOCS / "figures" / "figures.json"


def code_facts() -> dict[str, str]:
    return _figures.code_facts(REPO)


def measured() -> dict[str, str]:
    return _figures.measured(REPO)


def all_figures() -> dict[str, str]:
    return _figures.all_figures(REPO)


_cache: dict[str, str] | None = None


def on_config(config, **kwargs):
    global _cache
    _cache = all_figures()
    return config


def on_page_markdown(markdown, page, config, files, **kwargs):
    from mkdocs.exceptions import PluginError

    figures = _cache if _cache is not None else all_figures()
    try:
        return substitute(markdown, figures, page.file.src_path)
    except KeyError as e:
        raise PluginError(str(e.args[0])) from None
