"""The source audit: the kit's own lab files pass it, and each construct that tampering needs is refused, line named."""

import re
from pathlib import Path

import pytest

from proflab.labs import discover
from proflab.grading.audit import ALLOWANCES, RULES, Finding, audit_file, audit_source

REPO = Path(__file__).resolve().parents[1]
# Each lab's allowances and extra refusals, as its manifest states them: a new lab is audited here
# the moment its folder exists.
LABS = {lab.number: lab for lab in discover(REPO / "labs")}
NOT_AUDITED_AS_PASSING = {"lab1_crashes.py", "lab1_syntax_error.py"}


def _lab_files():
    for number, lab in sorted(LABS.items()):
        rules = (list(lab.audit.allow), list(lab.audit.refuse))
        for path in sorted(lab.folder.glob("*.py")):
            yield pytest.param(path, *rules, id=f"labs/{lab.folder.name}/{path.name}")
    for path in sorted((REPO / "tests" / "learner_files").glob("lab*_*.py")):
        if path.name not in NOT_AUDITED_AS_PASSING:
            lab = LABS[int(re.match(r"lab(\d+)_", path.name).group(1))]
            rules = (list(lab.audit.allow), list(lab.audit.refuse))
            yield pytest.param(path, *rules, id=f"learner_files/{path.name}")
    for path in sorted((REPO / "tests" / "calibration").glob("*.py")):
        yield pytest.param(path, ["os", "files"], [], id=f"calibration/{path.name}")


def test_every_lab_is_audited():
    assert sorted(LABS) == sorted(int(f.name[:2]) for f in (REPO / "labs").glob("[0-9][0-9]_*"))


@pytest.mark.parametrize("path, allow, refuse", list(_lab_files()))
def test_the_kits_lab_files_pass(path, allow, refuse):
    assert audit_file(path, allow=allow, refuse=refuse) == []


def test_the_learner_file_that_crashes_through_ctypes_is_refused():
    findings = audit_file(REPO / "tests" / "learner_files" / "lab1_crashes.py", allow=["threads"])
    assert [(f.line, f.rule, f.code) for f in findings] == [(1, "import", "import ctypes")]


def test_a_file_that_does_not_parse_raises_syntax_error():
    with pytest.raises(SyntaxError):
        audit_file(REPO / "tests" / "learner_files" / "lab1_syntax_error.py", allow=["threads"])


# (source, a line refused, its rule[, the lab's allowances])
REFUSED = [
    ('import os\nos.environ["X"] = "0"', 2, "patch"),
    ('import os\nos.environ["X"] = "0"', 2, "patch"),
    ("import sys\nsys.modules['torch'].x = 1", 2, "patch"),
    ("import subprocess", 1, "import"),
    ("import torch\ntorch.save = None", 2, "patch"),
    ("import time\ntime.perf_counter = lambda: 0", 2, "patch"),
    ("import time\nfrom time import monotonic\ntime.monotonic += 1", 3, "patch"),
    ("import ctypes", 1, "import"),
    ("import gc", 1, "import"),
    # Where gc is open for gc.collect (lab 5), the rest of it is not: it reaches every object of the process.
    ("import gc\ngc.collect()\ngc.get_objects()", 3, "builtin", ["gc_collect"]),
    ("from gc import get_referrers", 1, "builtin", ["gc_collect"]),
    ("import gc\ng = gc\ng.freeze()", 2, "builtin", ["gc_collect"]),
    ("import gc\ndef f(m):\n    return m.get_objects()\nf(gc)", 4, "builtin", ["gc_collect"]),
    ("import gc\n[gc][0].get_referrers(1)", 2, "builtin", ["gc_collect"]),
    # Where torch.distributed is open (lab 6, a torchrun job), what starts processes or reaches other machines is not.
    ("import torch.distributed as dist\ndist.all_reduce(x)", 1, "processes"),
    ("from torch.distributed.run import main", 1, "processes", ["distributed"]),
    ("import torch.distributed.elastic.multiprocessing as mp", 1, "processes", ["distributed"]),
    ("import torch.distributed as dist\ndist.rpc.init_rpc('w')", 2, "processes", ["distributed"]),
    ("import torch.multiprocessing as mp", 1, "processes", ["distributed"]),
    ("import inspect", 1, "import"),
    ("import atexit", 1, "import"),
    ("import signal", 1, "import"),
    ("import _thread", 1, "import"),
    ("import threading", 1, "threads"),
    ("import queue", 1, "threads"),
    ("from concurrent.futures import ThreadPoolExecutor", 1, "threads"),
    ("from concurrent.futures import ProcessPoolExecutor", 1, "processes", ["threads"]),
    ("import importlib", 1, "import"),
    ("import importlib.util", 1, "import"),
    ("def f():\n    import subprocess", 2, "import"),
    ("import socket", 1, "import"),
    ("import multiprocessing", 1, "processes"),
    ("import torch.multiprocessing as mp", 1, "processes"),
    ("import torch\ntorch.multiprocessing.Process", 2, "processes"),
    ("import helper_module", 1, "import"),
    ("from . import x", 1, "import"),
    ("from .helpers import x", 1, "import"),
    ("from torch import *", 1, "import"),
    ('__import__("os")', 1, "builtin"),
    ('eval("1")', 1, "builtin"),
    ('exec("x=1")', 1, "builtin"),
    ('compile("x", "f", "exec")', 1, "builtin"),
    ("g = globals()", 1, "builtin"),
    ("v = vars()", 1, "builtin"),
    ("b = __builtins__", 1, "builtin"),
    ("breakpoint()", 1, "builtin"),
    ("exit(0)", 1, "builtin"),
    ('x = input("?")', 1, "builtin"),
    ("import torch\ngetattr(torch, name)", 2, "builtin"),
    ("get = getattr", 1, "builtin"),
    ('import torch\nsetattr(torch, "x", 1)', 2, "builtin"),
    ("import operator\nf = operator.attrgetter(name)", 2, "builtin"),
    ("x.__class__.__subclasses__()", 1, "dunder"),
    ("f.__globals__", 1, "dunder"),
    ("m.__dict__", 1, "dunder"),
    ('getattr(x, "__class__")', 1, "dunder"),
    ("def f(x):\n    match x:\n        case object(__class__=c):\n            return c", 3, "dunder"),
    ("def f(g):\n    return g.gi_frame.f_back.f_globals", 2, "frame"),
    ("from proflab.labkit import photos\nphotos._FORMAT", 2, "private"),
    ("import proflab.labkit.photos as p\np._draw(1)", 2, "private"),
    ("from proflab.labkit.photos import _draw", 1, "private"),
    ("import proflab.running.runner", 1, "import"),
    ("from proflab import checks", 1, "import"),
    ("import proflab", 1, "import"),
    ("from proflab import profile_file", 1, "import"),
    ('if __name__ == "__main__":\n    from proflab import runner', 2, "import"),
    ('if __name__ == "__main__":\n    import proflab\n    proflab.running.runner._clock = 0', 3, "patch"),
    ("from proflab.labkit import photos\nphotos.STORAGE_LATENCY_MS = 0", 2, "patch"),
    ("from proflab.labkit.photos import PhotoDataset\nPhotoDataset.__getitem__ = f", 2, "patch"),
    ("import torch\nt = torch\nt.foo = 1", 3, "patch"),
    ("import torch\ndef f(m=torch.nn):\n    m.Module = None", 3, "patch"),
    ("import torch\nfor m in (torch, torch.nn):\n    m.x = 1", 3, "patch"),
    ("import torch\ntorch.nn.Module.__call__ = f", 2, "patch"),
    ("import torch.nn.functional as F\nF.gelu = g", 2, "patch"),
    ("import torch\ndel torch.nn", 2, "patch"),
    ("import torch\nfor torch.x in range(3):\n    pass", 2, "patch"),
    ("import torch\nwith f() as torch.x:\n    pass", 2, "patch"),
    ("def f(x):\n    type(x).forward = f", 2, "patch"),
    ("import contextlib\nwith contextlib.redirect_stdout(None):\n    pass", 2, "patch"),
    ("import torch\ntorch.set_num_threads(4)", 2, "threads_setting"),
    ("from torch import set_num_interop_threads", 1, "threads_setting"),
    ("from torch.profiler import profile", 1, "profiler"),
    ("import torch\ntorch.profiler.schedule(wait=1, warmup=1, active=1)", 2, "profiler"),
    ("import torch.profiler as tp\nwith tp.profile():\n    pass", 2, "profiler"),
    ("from torch import profiler\nprofiler.tensorboard_trace_handler('x')", 2, "profiler"),
    ("import torch\ntorch.autograd.profiler.emit_nvtx()", 2, "profiler"),
    ("import torch\ntorch.cuda.profiler.stop()", 2, "profiler"),
    ('import torch\ntorch.ops.load_library("x.so")', 2, "native"),
    ("from torch.utils.cpp_extension import load_inline", 1, "native"),
    ("import torch.library", 1, "native"),
    ("import torch\nclass T(torch.Tensor):\n    def __torch_function__(cls, func, types, args=(), kwargs=None):\n"
     "        return 1", 3, "override"),
    ("from torch.overrides import TorchFunctionMode", 1, "override"),
    ("def f(x: \"__import__('os')\"):\n    pass", 1, "builtin"),
]


def _finding_at(source, line, rule, allow=()):
    findings = audit_source(source, allow=allow)
    assert (line, rule) in {(f.line, f.rule) for f in findings}, findings
    return next(f for f in findings if (f.line, f.rule) == (line, rule))


@pytest.mark.parametrize("case", REFUSED, ids=[c[0].splitlines()[-1].strip()[:60] for c in REFUSED])
def test_refused(case):
    source, line, rule, *allow = case
    finding = _finding_at(source, line, rule, *allow)
    assert finding.code == source.splitlines()[line - 1].strip()
    assert finding.message and "\n" not in finding.message
    assert str(finding).startswith(f"line {line}: `{finding.code}`: ")


ALLOWED = [
    # Natural code, open since every run is sandboxed (the audit is a teacher, not the wall).
    ("import os\nfrom torch.utils.data import DataLoader\nDataLoader(d, num_workers=os.cpu_count())", []),
    ("import json, pathlib\nconfig = json.loads(pathlib.Path('config.json').read_text())", []),
    ("import json\nwith open('config.json') as f:\n    config = json.load(f)", []),
    ("import torch\ntorch._foreach_add_(params, grads, alpha=-0.1)", []),
    ("import torch\ntorch._foreach_mul_(params, 0.9)\nfrom torch import _foreach_add_", []),
    ("import torch._dynamo\ntorch._dynamo.reset()", []),
    ("import torch\ntorch.backends.cuda.matmul.allow_tf32 = True", []),
    ("import torch\ntorch.backends.cudnn.conv.fp32_precision = \"ieee\"", []),
    ('import torch, tempfile\ntorch.save(x, tempfile.gettempdir() + "/x.pt")\ny = torch.load("x.pt")', []),
    ("import sys, time\nprint(time.perf_counter(), file=sys.stderr)", []),
    ("from concurrent.futures import ThreadPoolExecutor\nwith ThreadPoolExecutor(8) as pool:\n"
     "    list(pool.map(load, range(4)))", ["threads"]),
    ("import threading, queue\nq = queue.Queue()\nthreading.Thread(target=q.get).start()", ["threads"]),
    ("import multiprocessing\nimport torch.multiprocessing as mp\nmp.Process", ["processes"]),
    ("import torch\nblock = torch.compile(block)", []),
    ("import torch.nn.functional as F\nF.embedding_bag(ids, weight, offsets, mode='mean')", []),
    ("import torch\ntorch.backends.cudnn.benchmark = True\ntorch.backends.cudnn.deterministic = True", []),
    ("from torch.backends import cudnn\ncudnn.benchmark = True", []),
    ("from torch.utils.data import Dataset\n"
     "class Cached(Dataset):\n"
     "    def __init__(self, data):\n"
     "        super().__init__()\n"
     "        self._cache = {}\n"
     "        self._data = data\n"
     "    def __len__(self):\n"
     "        return len(self._data)\n"
     "    def __getitem__(self, i):\n"
     "        if i not in self._cache:\n"
     "            self._cache[i] = self._data[i]\n"
     "        return self._cache[i]\n", []),
    ("import math\nmath.sqrt(2)", []),
    ("from __future__ import annotations\nfrom collections import deque\nfrom collections.abc import Iterator", []),
    ("from time import perf_counter\nstart = perf_counter()", []),
    ("import time\ntime.sleep(0.01)", []),
    ("from torch.profiler import record_function\nwith record_function('step'):\n    pass", []),
    ("import torch\nwith torch.autograd.profiler.record_function('x'):\n    pass", []),
    ("import torch\nwith torch.profiler.record_function('x'):\n    pass", []),
    ('if __name__ == "__main__":\n    import proflab\n\n    proflab.profile_file(__file__)', []),
    ('if __name__ == "__main__":\n    from proflab import profile_file\n    profile_file(__file__)', []),
    ("from proflab.labkit.photos import PhotoDataset, SmallCNN\nfrom proflab import labkit", []),
    ('lr = getattr(cfg, "lr", 0.1)', []),
    ('ok = hasattr(cfg, "device")', []),
    ("import numpy as np\nimport PIL.Image\nimport torchvision.transforms as T", []),
    ("values = x.tolist()\nx._version", []),
    ("def forward(self, input):\n    return input * 2", []),
    ("import torch\nfrom torch import nn\nclass M(nn.Module):\n    def forward(self, x: 'torch.Tensor') -> 'torch.Tensor':\n"
     "        return type(self).__name__, x", []),
    ("import torch\nt = torch.nn\nlayer = t.Linear(3, 3)\nlayer.weight = None\nF = None", []),
    ("import torch\nwith torch.profiler.profile() as prof:\n    pass\nprof.export_chrome_trace('t.json')", ["profiler"]),
    ("from pathlib import Path\nwith open(Path('f')) as f:\n    f.read()\nimport torch\ntorch.save(x, 'f')", ["files"]),
    ("import os, sys, os.path\nos.environ['X']\nsys.argv", ["os"]),
    ("import gc\nfrom gc import collect\ngc.collect()\ncollect()", ["gc_collect"]),
    ("import torch.distributed as dist\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
     "dist.init_process_group('gloo')\ndist.all_reduce(x)\ndist.destroy_process_group()", ["distributed"]),
]


@pytest.mark.parametrize("source, allow", ALLOWED, ids=[c[0].splitlines()[-1].strip()[:60] for c in ALLOWED])
def test_allowed(source, allow):
    assert audit_source(source, allow=allow) == []


def test_findings_are_sorted_and_one_per_line_and_rule():
    source = "import os, ctypes\nimport proflab.labkit.photos as p\np._x = p._y\neval('1')\n"
    findings = audit_source(source)
    assert [(f.line, f.rule) for f in findings] == [(1, "import"), (3, "private"), (3, "patch"), (4, "builtin")]
    assert all(isinstance(f, Finding) for f in findings)
    assert findings == sorted(findings, key=lambda f: (f.line, f.col))


def test_an_unknown_allowance_raises():
    with pytest.raises(ValueError, match="threadz"):
        audit_source("import math", allow=["threadz"])


def test_every_rule_a_finding_carries_is_explained():
    rules = {case[2] for case in REFUSED}
    assert rules <= RULES.keys()
    assert all(RULES[r] for r in rules)
    assert set(ALLOWANCES) == {"threads", "processes", "os", "files", "profiler", "gc_collect", "distributed"}
    assert all(ALLOWANCES.values())
