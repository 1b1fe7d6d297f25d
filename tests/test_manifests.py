"""Every lab manifest is checked when it is read: a mistake in one is named, file, table and key.

Each broken manifest here is a real file in a private copy of the kit's labs,
and the real CLI runs against it: the message names the file and the key,
nothing prints a traceback, ``proflab list`` still lists the other labs, a
command on another lab still works, and a command on the broken one exits 3
(the kit's failure, not the learner's). No ``proflab check`` runs here: it
takes tens of seconds, and the checks of a loaded lab are other tests' work.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from conftest import REPO, Kit, kit_labs, make_kit, spare_number
from proflab import labs

LAB1 = "labs/01_dataloader/lab.toml"
# What is left when lab 1 breaks: every other lab of the kit, whichever they are.
OTHERS = [lab.number for lab in kit_labs() if lab.number != 1]
SPARE = spare_number()  # a number for a copy of lab 1 that no lab of the kit has
SPARE_FOLDER = f"{SPARE:02d}_dataloader2"
HINTS = re.compile(r"^hints = \[.*?^\]", re.S | re.M)


def one_line(text: str) -> str:
    """Output with its wrapping undone (rich breaks long lines at spaces)."""
    return " ".join(text.split())


def edit(kit: Kit, old: str, new: str, folder: str = "01_dataloader") -> Path:
    manifest = kit.root / "labs" / folder / "lab.toml"
    text = manifest.read_text(encoding="utf-8")
    assert text.count(old) == 1, f"{old!r} is not once in {manifest}"
    manifest.write_text(text.replace(old, new), encoding="utf-8")
    return manifest


def hints_as_a_string(kit: Kit) -> None:
    manifest = kit.lab1 / "lab.toml"
    text = manifest.read_text(encoding="utf-8")
    assert HINTS.search(text)
    manifest.write_text(HINTS.sub('hints = "fix it"', text), encoding="utf-8")


def a_second_lab_1(kit: Kit) -> None:
    """A copy of lab 1 under another folder and name, with the same number."""
    shutil.copytree(kit.lab1, kit.root / "labs" / SPARE_FOLDER)
    edit(kit, 'name = "dataloader"', 'name = "dataloader2"', folder=SPARE_FOLDER)


def a_syntax_error(kit: Kit) -> None:
    manifest = edit(kit, "rounds = 2\n", "rounds = = 2\n")
    line = manifest.read_text(encoding="utf-8").splitlines().index("rounds = = 2") + 1
    (kit.root / "expected-line").write_text(str(line))


# (id, how the manifest of lab 1 is broken, what the message must name besides the file)
BROKEN = [
    ("missing-timed_steps", lambda k: edit(k, "timed_steps = 8\n", ""), ["[workload] timed_steps is missing"]),
    ("unknown-key", lambda k: edit(k, "timed_steps = 8\n", "timed_steps = 8\ntimed_step = 8\n"),
     ["[workload] has unknown key(s) timed_step", "known: batch_size"]),
    ("number-abc", lambda k: edit(k, "number = 1\n", 'number = "abc"\n'), ["number must be an integer", "'abc'"]),
    ("rule-without-what", lambda k: edit(k, 'what = "the training loss"\n', ""),
     ["[results.loss] what is missing"]),
    ("threshold-0", lambda k: edit(k, "cpu = 1.5", "cpu = 0"), ["[speedup] cpu must be", "1.0 or more (got 0)"]),
    ("threshold-negative", lambda k: edit(k, "cpu = 1.5", "cpu = -1"), ["[speedup] cpu must be", "(got -1)"]),
    ("threshold-fast", lambda k: edit(k, "cuda = 2.0", 'cuda = "fast"'), ["[speedup] cuda must be", "'fast'"]),
    ("hints-a-string", hints_as_a_string, ["hints must be a list of non-empty strings (got 'fix it')"]),
    ("timeout_s-0", lambda k: edit(k, "timeout_s = 90", "timeout_s = 0"),
     ["[workload] timeout_s must be a number above 0 (got 0)"]),
    ("timed_steps-0", lambda k: edit(k, "timed_steps = 8", "timed_steps = 0"),
     ["[workload] timed_steps must be an integer, 1 or more (got 0)"]),
    ("unknown-metric", lambda k: edit(k, 'metric = "dataloader_wait"', 'metric = "data_wait"'),
     ["[evidence] metric must be one of the checker's evidence metrics", "dataloader_wait", "'data_wait'"]),
    ("duplicate-number", a_second_lab_1, [f"number 1 is also the number of labs/{SPARE_FOLDER}/lab.toml"]),
    ("toml-syntax", a_syntax_error, ["not valid TOML", "line {line}"]),
]


@pytest.fixture
def root_is(monkeypatch):
    """``labs.load`` in this process, with messages relative to ``kit``'s root as the CLI's are."""
    def use(kit: Kit) -> None:
        monkeypatch.setenv("PROFLAB_ROOT", str(kit.root))
    return use


@pytest.mark.parametrize("breaks, said", [case[1:] for case in BROKEN], ids=[case[0] for case in BROKEN])
def test_a_broken_manifest_is_named_and_blocks_no_other_lab(tmp_path, root_is, breaks, said):
    kit = make_kit(tmp_path)
    breaks(kit)
    line = kit.root / "expected-line"
    said = [s.format(line=line.read_text()) if line.exists() else s for s in said]
    root_is(kit)

    good, broken = labs.discover_all()
    assert [lab.number for lab in good] == OTHERS
    message = {b.folder: b.message for b in broken}[kit.lab1]
    assert message.startswith(f"{LAB1}: "), message
    for part in said:
        assert part in message, message
    if len(broken) == 1:  # a manifest broken by itself (not by another lab's number) does not load alone either
        with pytest.raises(labs.ManifestError) as e:
            labs.load(kit.lab1)
        assert str(e.value) == message
    assert [b.folder for b in labs.broken()] == [b.folder for b in broken]
    assert [lab.number for lab in labs.discover()] == OTHERS

    listed = kit.run("list")
    shown = one_line(listed.stdout)
    assert listed.returncode == 0, listed.stderr
    assert "Traceback" not in listed.stdout + listed.stderr
    for other in ("embeddings", "fusion", "syncs"):
        assert other in shown
    assert "01_dataloader" in shown and "broken" in shown and LAB1 in shown
    assert all(part in shown for part in said), shown

    other = kit.run("hint", "2")
    assert other.returncode == 0, other.stderr
    assert "Hint 1/3 · lab 2 (embeddings)" in other.stdout

    for name in ("1", "01_dataloader"):
        proc = kit.run("hint", name)
        stderr = one_line(proc.stderr)
        assert proc.returncode == 3, (name, proc.stdout, proc.stderr)
        assert "Traceback" not in proc.stdout + proc.stderr
        assert "a lab manifest is broken" in stderr and LAB1 in stderr, stderr
        assert all(part in stderr for part in said), stderr


def test_two_labs_with_one_number_are_both_broken_each_naming_the_other(tmp_path, root_is):
    kit = make_kit(tmp_path)
    a_second_lab_1(kit)
    root_is(kit)
    broken = {b.folder.name: b for b in labs.broken()}
    assert set(broken) == {"01_dataloader", SPARE_FOLDER}
    assert f"is also the number of labs/{SPARE_FOLDER}/lab.toml" in broken["01_dataloader"].message
    assert "is also the number of labs/01_dataloader/lab.toml" in broken[SPARE_FOLDER].message
    with pytest.raises(labs.ManifestError, match=SPARE_FOLDER):
        labs.resolve("1")
    with pytest.raises(labs.ManifestError, match=f"labs/{SPARE_FOLDER}/lab.toml: number 1"):
        labs.resolve(str(SPARE))  # the number its folder starts with
    with pytest.raises(labs.ManifestError, match=f"labs/{SPARE_FOLDER}/lab.toml: number 1"):
        labs.resolve("dataloader2")
    proc = kit.run("hint", SPARE_FOLDER)
    assert proc.returncode == 3 and "is also the number of labs/01_dataloader/lab.toml" in one_line(proc.stderr)


def test_two_labs_with_one_name_are_both_broken(tmp_path, root_is):
    kit = make_kit(tmp_path)
    again = f"{SPARE:02d}_again"
    shutil.copytree(kit.lab1, kit.root / "labs" / again)
    edit(kit, "number = 1\n", f"number = {SPARE}\n", folder=again)
    root_is(kit)
    broken = {b.folder.name: b.message for b in labs.broken()}
    assert f"name 'dataloader' is also the name of labs/{again}/lab.toml" in broken["01_dataloader"]
    assert "name 'dataloader' is also the name of labs/01_dataloader/lab.toml" in broken[again]
    assert [lab.number for lab in labs.discover()] == OTHERS


def test_every_problem_of_a_manifest_is_reported_at_once(tmp_path, root_is):
    kit = make_kit(tmp_path)
    edit(kit, "rounds = 2\n", "rounds = 0\n")
    edit(kit, 'name = "dataloader"', 'name = "Data Loader"\ncolour = "red"')
    edit(kit, 'allow = ["threads"]', 'allow = ["thread"]')
    edit(kit, "latency_ms = 8", "latency_ms = nan")
    root_is(kit)
    with pytest.raises(labs.ManifestError) as e:
        labs.load(kit.lab1)
    lines = str(e.value).splitlines()
    assert all(line.startswith(f"{LAB1}: ") for line in lines), lines
    assert len(lines) == 5, lines
    text = "\n".join(lines)
    for part in ("[workload] rounds must be an integer, 1 or more (got 0)", "name must be a lowercase name",
                 "has unknown key(s) colour; known: format, number, name", "[audit] allow must be a list of allowance names",
                 "[storage] latency_ms must be a number above 0 (got nan)"):
        assert part in text, text
    proc = kit.run("hint", "1")
    assert proc.returncode == 3 and "Traceback" not in proc.stderr
    assert all(part in one_line(proc.stderr) for part in ("rounds must be", "colour", "latency_ms")), proc.stderr


# More mistakes, each refused when the manifest is read (in this process: cheap).
REFUSED = [
    ("profile_steps = 5", "profile_steps = 1", "[workload] profile_steps must be an integer, 2 or more"),
    ("warmup_steps = 3", "warmup_steps = -1", "[workload] warmup_steps must be an integer, 0 or more"),
    ("batch_size = 32", "batch_size = 0", "[workload] batch_size must be an integer, 1 or more"),
    ("batch_size = 32", "batch_size = 32.5", "[workload] batch_size must be an integer"),
    ("rounds = 2", "rounds = true", "[workload] rounds must be an integer, 1 or more (got True)"),
    ("startup_s = 0.5", "startup_s = -0.5", "[workload] startup_s must be a number, 0 or more"),
    ("seed = 0", "seed = 0\nmemory_mb = 0", "[workload] memory_mb must be a number above 0"),
    ("seed = 0", "seed = 0\nbudget_s = inf", "[workload] budget_s must be a number above 0 (got inf)"),
    ("seed = 0", "seed = 0\nenv = { A = 1 }", "[workload] env must be a table of strings"),
    ("seed = 0", "seed = 0\nparams = 3", "[workload] params must be a table"),
    ("number = 1", "number = -1", "number must be an integer, 0 or more (got -1)"),
    ('title = "The starved DataLoader"', 'title = ""', "title must be a non-empty string"),
    ("cuda = 2.0", "cuda = 2.0\nmps = 2.0", "[speedup] has unknown key(s) mps; known: cpu, cuda"),
    ("cpu = 1.5\n", "", "[speedup] cpu is missing"),
    ("cpu = 1.5", "cpu = nan", "[speedup] cpu must be a speed-up, a number 1.0 or more (got nan)"),
    ("exact = true", 'exact = "yes"', "[results.labels] exact must be true or false"),
    ("rtol = 1e-4", "rtol = -1e-4", "[results.loss] rtol must be a number, 0 or more"),
    ("atol = 1e-5", 'atol = "tiny"', "[results.loss] atol must be a number, 0 or more"),
    ('hint = "The model must', 'colour = "red"\nhint = "The model must', "[results.loss] has unknown key(s) colour"),
    ("max_vs_original = 0.5", 'max_vs_original = "half"', "[evidence] max_vs_original must be a number"),
    ("max_vs_original = 0.5", "", "[evidence] has no bound: give it max, min or max_vs_original"),
    ("max_vs_original = 0.5", "max = 1\nmin = 2", "[evidence] min (2) is above max (1)"),
    ('label = "time each step waits on the DataLoader"\n', "", "[evidence] label is missing"),
    ('work_ops = ["aten::convolution", "aten::convolution_backward"]', 'work_ops = "aten::convolution"',
     "[evidence] work_ops must be a list of non-empty strings"),
    ('allow = ["threads"]', 'allow = ["threads"]\nrefuse = ["everything"]',
     "[audit] refuse must be a list of restriction names (untraced_reads) (got ['everything'])"),
    ('allow = ["threads"]', 'allow = "threads"', "[audit] allow must be a list of allowance names"),
    ('original = "original.py"', 'original = "gone.py"',
     "[files] original names 'gone.py', which is not a file in labs/01_dataloader/"),
    ('solution = "solution.py"', 'solution = "../02_embeddings/solution.py"',
     "[files] solution must be a file name in the lab's folder"),
    ('original_sha256 = "699bb22cc43cd1071d0a36c0c1be4f1c733c6fc3350b7c55b0068987b6da8b80"',
     'original_sha256 = "699bb22c"', "[files] original_sha256 must be the original's SHA-256, 64 hex digits"),
    ('data = "proflab.labkit.photos:ensure_photos"', 'data = "proflab.labkit.photos.ensure_photos"',
     'data must be "module:function"'),
    ("latency_ms = 8", "latency_ms = 0", "[storage] latency_ms must be a number above 0 (got 0)"),
    ('folder = "photos"\n', "", "[storage] folder is missing"),
    ("[workload]", "[workloads]", "[workload] is missing"),
    ("[speedup]", "[memory]\ncpu = 0.5\n[speedup]", "give one of [speedup] (how much faster a fix must be), "
                                                   "[overhead] (how little slower a profiled version may be) "
                                                   "or [memory]"),
    ("[speedup]\ncpu = 1.5", "[memory]\ncpu = 1.5", "[memory] cpu must be a share of the original's peak memory"),
    ("max_vs_original = 0.5", 'max_vs_original = 0.5\nnot_a_fix = { "gc.collect" = 3 }',
     "[evidence] not_a_fix must be a table of calls"),
    ("format = 1\n", "", "format is missing: it must be the manifest's format, an integer: this kit reads 1"),
    ("format = 1\n", 'format = "1"\n', "format must be the manifest's format"),
    ("format = 1\n", "format = 2\n", "format = 2: this manifest is written for a later proflab"),
    ("[storage]", "[profile]\nlabels = ['data']\nmax_steps = 3\n[distributed]\nnproc = 2\n[storage]",
     "[profile] and [distributed] cannot go together"),
]


@pytest.mark.parametrize("old, new, said", REFUSED, ids=[r[2].split(" must")[0].split(" is")[0] + f"-{i}"
                                                         for i, r in enumerate(REFUSED)])
def test_each_key_is_checked(tmp_path, root_is, old, new, said):
    kit = make_kit(tmp_path)
    edit(kit, old, new)
    root_is(kit)
    with pytest.raises(labs.ManifestError) as e:
        labs.load(kit.lab1)
    assert f"{LAB1}: {said}" in str(e.value), str(e.value)


@pytest.mark.parametrize("old, new", [
    ("number = 1\n", "number = 0\n"),  # a lab 0 is coming
    ("cpu = 1.5", "cpu = 1.0"),
    ("cpu = 1.5", "cpu = 2"),  # an integer threshold
    ("cuda = 2.0\n", ""),  # cpu is every device's fallback
    ("warmup_steps = 3", "warmup_steps = 0"),
    ("startup_s = 0.5", "startup_s = 0"),
    ("profile_steps = 5", "profile_steps = 2"),
    ('solution = "solution.py"\n', ""),
    ("seed = 0", 'seed = 0\nenv = { A = "1" }\nmax_rounds = 2'),
])
def test_what_a_manifest_may_say(tmp_path, root_is, old, new):
    kit = make_kit(tmp_path)
    edit(kit, old, new)
    root_is(kit)
    lab = labs.load(kit.lab1)
    assert lab.threshold("cuda") >= 1.0 and lab.workload.profile_steps >= 2


def test_a_missing_exercise_leaves_the_lab_loadable(tmp_path, root_is):
    """The exercise is the learner's file: proflab reset makes it again from the original."""
    kit = make_kit(tmp_path)
    (kit.lab1 / "exercise.py").unlink()
    root_is(kit)
    assert labs.load(kit.lab1).exercise == kit.lab1 / "exercise.py"


def test_the_grading_table_is_checked_with_the_rest(tmp_path, root_is):
    kit = make_kit(tmp_path)
    edit(kit, "[speedup]", "[grading]\nruns = -1\nspeed = 2\n\n[speedup]")
    edit(kit, "timed_steps = 8", "timed_steps = 0")
    root_is(kit)
    with pytest.raises(labs.ManifestError) as e:
        labs.load(kit.lab1)
    text = str(e.value)
    assert "[grading] runs must be a number of points, 0 or more (got -1)" in text
    assert "[grading] has unknown key(s) speed" in text and "[workload] timed_steps" in text


def test_when_no_lab_loads_list_shows_why_and_exits_3(tmp_path, root_is):
    kit = make_kit(tmp_path)
    every = kit_labs()
    pipelines = [lab.folder.name for lab in every if lab.gating is None]
    gates = [lab.folder.name for lab in every if lab.gating is not None]
    for folder in pipelines:
        edit(kit, "timeout_s = ", "timeout_s = -", folder=folder)
    for folder in gates:  # a gate lab has no workload of its own
        edit(kit, f'cause = "{labs.load(REPO / "labs" / folder).gating.cause}"', 'cause = ""', folder=folder)
    root_is(kit)
    with pytest.raises(labs.ManifestError, match=pipelines[-1]):
        labs.discover()
    proc = kit.run("list")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    shown = one_line(proc.stdout)
    assert all(f"labs/{f}/lab.toml: [workload] timeout_s must be a number above 0" in shown for f in pipelines), shown
    assert all(f"labs/{f}/lab.toml: [gate] cause must be a non-empty string" in shown for f in gates), shown


def test_an_unknown_name_is_still_a_usage_error(tmp_path):
    kit = make_kit(tmp_path)
    edit(kit, "timed_steps = 8", "timed_steps = 0")
    proc = kit.run("hint", "mars")
    assert proc.returncode == 2 and "no lab called 'mars'" in proc.stderr


def test_every_shipped_manifest_validates():
    good, broken = labs.discover_all(REPO / "labs")
    assert broken == [], "\n".join(b.message for b in broken)
    folders = sorted(p.parent for p in (REPO / "labs").glob("*/lab.toml"))
    assert [lab.folder for lab in good] == folders
    for folder in [*folders, REPO / "tests" / "calibration"]:
        lab = labs.load(folder)
        if lab.gating is not None:  # a gate lab: the fix it gates is the other lab's file, as shipped
            from proflab.grading.gate_config import KEYS

            target = labs.resolve(lab.gating.lab, good)
            assert labs.sha256(target.folder / lab.gating.fix) == lab.gating.fix_sha256
            assert (target.folder / lab.gating.regression).is_file()
            assert set(lab.gating.settings) <= set(KEYS)
            continue
        assert lab.results and (lab.threshold("cpu") >= 1.0 and lab.evidence.metric if lab.profiling is None
                                else 0 < lab.threshold("cpu") < 1 and lab.answers)


def test_reading_a_manifest_imports_no_torch():
    import subprocess
    import sys

    code = (f"import sys; from proflab import labs; labs.discover({str(REPO / 'labs')!r}); "
            "print('torch' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip() == "False", proc.stderr


# --- several bottlenecks at once: [[evidence]], an array of tables (lab 9) ---------------------------------

SECOND = ('[[evidence]]\nmetric = "op_count"\nlabel = "operators per step"\nunit = "ops"\nmax_vs_original = 0.9\n'
          'where = "Profile › Operators"\n\n[speedup]')


def several(kit: Kit, second: str = SECOND) -> None:
    """Lab 1's [evidence] as the first table of an array, and ``second`` after it."""
    edit(kit, "[evidence]\n", "[[evidence]]\n")
    edit(kit, "\n[speedup]", "\n" + second)


def test_an_array_of_evidence_tables_loads_each_in_order(tmp_path, root_is):
    kit = make_kit(tmp_path)
    several(kit)
    root_is(kit)
    lab = labs.load(kit.lab1)
    assert [e.metric for e in lab.evidences] == ["dataloader_wait", "op_count"]
    assert lab.evidence is lab.evidences[0] and lab.evidence.work_ops  # the work floor is the first's
    assert lab.evidences[1].max_vs_original == 0.9 and not lab.evidences[1].work_ops


def test_a_single_evidence_table_is_the_only_one():
    lab = labs.load(REPO / "labs" / "01_dataloader")
    assert lab.evidences == (lab.evidence,)


@pytest.mark.parametrize("second, said", [
    (SECOND.replace('"op_count"', '"op_counts"'), "[evidence[2]] metric must be one of the checker's evidence metrics"),
    (SECOND.replace("max_vs_original = 0.9\n", ""), "[evidence[2]] has no bound: give it max, min or max_vs_original"),
    (SECOND.replace("max_vs_original = 0.9\n", "max = 1\nmin = 2\n"), "[evidence[2]] min (2) is above max (1)"),
    (SECOND.replace('label = "operators per step"\n', ""), "[evidence[2]] label is missing"),
    (SECOND.replace("max_vs_original = 0.9\n", 'max_vs_original = 0.9\nwork_ops = ["aten::mm"]\n'),
     "[evidence[2]] work_ops belongs in the first [[evidence]] only"),
    (SECOND.replace('"op_count"', '"dataloader_wait"'),
     "[evidence[2]] metric 'dataloader_wait' is graded already by evidence[1]"),
    (SECOND.replace("unit =", "colour = 3\nunit ="), "[evidence[2]] has unknown key(s) colour"),
], ids=["metric", "no-bound", "min-above-max", "label", "work_ops", "twice", "unknown-key"])
def test_each_table_of_the_array_is_checked_and_named(tmp_path, root_is, second, said):
    kit = make_kit(tmp_path)
    several(kit, second)
    root_is(kit)
    with pytest.raises(labs.ManifestError) as e:
        labs.load(kit.lab1)
    assert f"{LAB1}: {said}" in str(e.value), str(e.value)
    assert "[evidence[1]]" not in str(e.value)  # the first table is fine, and not named


def test_an_empty_array_and_a_wrong_type_are_refused(tmp_path, root_is):
    kit = make_kit(tmp_path)
    text = (kit.lab1 / "lab.toml").read_text(encoding="utf-8")
    start, end = text.index("[evidence]\n"), text.index("\n[speedup]")
    text = text[:start] + text[end:]  # top-level keys come before the first table

    def top_level(line: str) -> str:
        return text.replace("[files]", f"{line}\n\n[files]", 1)

    (kit.lab1 / "lab.toml").write_text(top_level("evidence = []"), encoding="utf-8")
    root_is(kit)
    with pytest.raises(labs.ManifestError) as e:
        labs.load(kit.lab1)
    assert f"{LAB1}: [evidence] names no evidence" in str(e.value)
    (kit.lab1 / "lab.toml").write_text(top_level('evidence = "dataloader_wait"'), encoding="utf-8")
    with pytest.raises(labs.ManifestError) as e:
        labs.load(kit.lab1)
    assert "evidence must be a table ([evidence]), or an array of tables ([[evidence]]" in str(e.value)
