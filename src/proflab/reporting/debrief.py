"""A lab's debrief: what the lab's page keeps back until the learner's fix has passed.

The reference fix and its check, why it works, every sound fix measured: on the site, even in a collapsed
block, a learner reads it before profiling (a text dump of the page shows it all). So it lives beside the
lab's files (``labs/NN_name/debrief.md``), and ``proflab debrief N`` shows it once ``proflab check N`` has
passed, as rustlings shows a solution after success.

A debrief is Markdown with the site's figures (``{{ lab2.check-solution.spread }}``,
``reporting.figures``) and the site's inclusions of what a command printed (``--8<-- "lab2/check-solution.txt"``,
a file under ``docs/figures/``), both put in place here.
"""

from __future__ import annotations

import re
from pathlib import Path

from .. import paths
from . import figures

INCLUDE = re.compile(r'^(?P<indent>[ \t]*)--8<--\s+"(?P<name>[^"]+)"\s*$', re.M)


class Missing(Exception):
    """A figure or an included file the debrief names is not there (run python docs/gen_figures.py)."""


def text(path: Path, root: Path | None = None) -> str:
    """The debrief at ``path``, its inclusions and figures in place (``Missing`` names what is not there)."""
    root = root or paths.root()
    base = figures.figures_file(root).parent
    markdown = path.read_text(encoding="utf-8")

    def include(m: re.Match) -> str:
        name = m.group("name")
        source = (base / name).resolve()
        if not source.is_relative_to(base.resolve()) or not source.is_file():
            raise Missing(f"{paths.display(path)} includes {name!r}, which is not a file in docs/figures/ "
                          "(run python docs/gen_figures.py)")
        body = source.read_text(encoding="utf-8").rstrip("\n")
        return "\n".join(m.group("indent") + line for line in body.splitlines())

    markdown = INCLUDE.sub(include, markdown)
    try:
        return figures.substitute(markdown, figures.all_figures(root), paths.display(path))
    except KeyError as e:
        raise Missing(str(e.args[0])) from None
