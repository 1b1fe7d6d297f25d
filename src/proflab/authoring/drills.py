"""Diagnosis drills: a slow pipeline drawn for each learner, where the profile is the only clue.

A drill is a lab the kit writes for one learner (``proflab drill``), seeded by the learner's name, so two
learners of a class get different ones: one bottleneck of the catalogue (``drill_catalogue``: the bottlenecks
the labs teach), in a model of its own shapes and story, with no page that names it. The learner profiles it,
says in the file's ``ANSWERS`` where the profile shows the time going (a part of the step as the Overview
names it, or an operator of the table) and its milliseconds per step, then fixes it. The same checker grades
it as it grades a lab, with one more check, ``diagnosis`` (``grading/checks/diagnosis.py``): whether what the
learner said is what the original's profile, measured in the same check, shows.

A drill is written to ``drills/drill_<name>/`` in the kit (a lab folder: ``lab.toml``, ``original.py``,
``exercise.py``; the reference fix stays the kit's, ``reference_fix``), and found by ``labs`` beside the
labs. ``proflab grade`` grades a learner's ``drill.py`` against that learner's own drill, drawn again from
their name: nothing is kept but the name.
"""

from __future__ import annotations

import hashlib
import random
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from string import Template

from .. import labs, paths
from .drill_catalogue import CATALOGUE, Bottleneck

FOLDER = "drills"
FIRST_NUMBER = 100  # drills are numbered from here, after every lab


@dataclass(frozen=True)
class Drill:
    who: str  # the learner's name, as given
    slug: str  # its letters and digits: the drill's name is drill_<slug>
    bottleneck: Bottleneck
    values: dict[str, object]  # the shapes and words the bottleneck's template is filled with

    @property
    def name(self) -> str:
        return f"drill_{self.slug}"


def slug_of(who: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "_", who.strip().lower()).strip("_")
    if not slug:
        raise ValueError(f"{who!r} has no letter or digit to name a drill after")
    return slug[:40]


def shown(who: str) -> str:
    """The learner's name as the drill's files write it: printable, no quote, backslash or line break (the
    name goes into a docstring and a TOML string)."""
    return re.sub(r'["\\\x00-\x1f\x7f]', "'", who.strip())[:60]


def draw(who: str) -> Drill:
    """The learner's drill: which bottleneck, in which shapes, from their name alone (the same name, the same
    drill, on every machine)."""
    slug = slug_of(who)
    rng = random.Random(int.from_bytes(hashlib.sha256(slug.encode()).digest()[:8], "big"))
    bottleneck = CATALOGUE[rng.randrange(len(CATALOGUE))]
    values: dict[str, object] = {}
    for key, choices in sorted(bottleneck.choices.items()):
        pick = rng.choice(choices)
        values.update(pick if isinstance(pick, dict) else {key: pick})
    return Drill(who, slug, bottleneck, values)


def _header(drill: Drill) -> str:
    b = drill.bottleneck
    return (f'"""Drill for {shown(drill.who)}: {Template(b.story).substitute(drill.values)}\n\n'
            "Slow for one reason, and nothing here says which. Profile it, write in ANSWERS where the\n"
            "profile shows the step's time going and how many milliseconds of each step that is, then make it\n"
            "faster, computing the same, and check it:\n\n"
            f"    proflab run {drill.name}         profile this file\n"
            "    proflab tensorboard          look at the trace\n"
            f"    proflab check {drill.name}       grade your diagnosis and your fix\n\n"
            "The checker calls pipeline(cfg) and takes one step for each value it yields; cfg carries the\n"
            'device, the batch size, the seed and the data folder.\n"""\n')


ANSWERS = ('\n# What the original\'s profile shows: "where" is a part of the step as the Profile tab\'s Overview names\n'
           "# it (DataLoader wait, host reads and syncs, CPU operators, Python between operators) or an operator\n"
           "# of the key_averages() table (aten::...); \"ms_per_step\" is what it takes of each profiled step.\n"
           'ANSWERS = {"where": "", "ms_per_step": 0.0}\n')


def original_source(drill: Drill) -> str:
    body = Template(drill.bottleneck.original).substitute(drill.values)
    imports, rest = body.split("\n\n\n", 1)
    return _header(drill) + "\n" + imports + "\n" + ANSWERS + "\n\n" + rest


def reference_fix(drill: Drill) -> str:
    """The kit's own fix of the drill: its original with the bottleneck's lines changed (for the tests, and
    for the instructor; never written into a learner's drill)."""
    source = original_source(drill)
    for old, new in drill.bottleneck.fix:
        old, new = Template(old).substitute(drill.values), Template(new).substitute(drill.values)
        if old not in source:
            raise AssertionError(f"{drill.bottleneck.key}: the fix's line {old!r} is not in the original")
        source = source.replace(old, new)
    return source


def manifest(drill: Drill, number: int) -> str:
    b = drill.bottleneck
    digest = hashlib.sha256(original_source(drill).encode("utf-8")).hexdigest()
    text = Template(MANIFEST).substitute(number=number, name=drill.name, who=shown(drill.who),
                                         title=Template(b.title).substitute(drill.values), top=b.top,
                                         original_sha256=digest, key=b.key,
                                         parts=", ".join(f'"{p}"' for p in b.parts),
                                         words=", ".join(f'"{w}"' for w in b.operator_words))
    return text + Template(b.manifest).substitute(drill.values)


MANIFEST = """\
# A diagnosis drill, drawn for $who by `proflab drill` (authoring/drills.py): regenerated from the name, so
# do not edit it.
format = 1
number = $number
name = "$name"
title = "Drill: $title"
summary = "A pipeline drawn for $who, slow for one reason the profile shows."
${top}hints = [
    "Profile it (proflab run $name), then open the Profile tab's Overview: which part of the step is largest? Then the Operators table: which operators top it, and how many calls per step?",
    "Write what you found in ANSWERS before changing anything: proflab check grades it against the original's own profile.",
]

[files]
original = "original.py"
exercise = "exercise.py"
original_sha256 = "$original_sha256"

[drill]
bottleneck = "$key"
parts = [$parts]
operator_words = [$words]

[grading]
runs = 1
same_results = 3
diagnosis = 2
evidence = 2
faster = 2
inconclusive = 0.5
"""


def folder(root: Path | None = None) -> Path:
    return root / FOLDER if root is not None else paths.drills_dir()


def write(who: str, root: Path | None = None) -> Path:
    """Write ``who``'s drill into the kit (``drills/drill_<slug>/``), or leave it as it is if it is there
    already (the learner's exercise is theirs); the drill's folder."""
    from .. import outputs

    drill = draw(who)
    home = folder(root) / drill.name
    if (home / "lab.toml").is_file():
        return home
    taken = {lab.number for lab in labs.discover_all()[0]} if root is None else set()
    for manifest_file in folder(root).glob("*/lab.toml"):
        try:
            taken.add(tomllib.loads(manifest_file.read_text(encoding="utf-8"))["number"])
        except (OSError, KeyError, tomllib.TOMLDecodeError):
            continue
    number = next(n for n in range(FIRST_NUMBER, FIRST_NUMBER + 10_000) if n not in taken)
    source, text = original_source(drill), manifest(drill, number)  # both made before anything is written
    home.mkdir(parents=True, exist_ok=True)
    kit = root or paths.root()
    for name in ("original.py", "exercise.py"):
        if not (home / name).is_file():
            outputs.new_file(home / name, source, within=kit)
    outputs.new_file(home / "lab.toml", text, within=kit)  # last: a folder without it is no drill yet
    return home


def lab_for(who: str, root: Path | None = None) -> labs.Lab:
    """``who``'s drill as a lab, written first where it is not there."""
    return labs.load(write(who, root))
