"""The source audit: what a lab file may not do to the process that times it.

The checker imports a learner's lab file into the very process it times and
profiles, so the file could reach for that process's machinery: the
environment, the kit's modules in ``sys.modules``, the standard library the
runner reports with, the trace file, the clock, signals, threads. Before
anything runs, the checker reads the file's source (with :mod:`ast`; the file
is never imported here) and refuses, line by line, the constructs such
tampering needs: imports beyond torch, torchvision, numpy, PIL,
``proflab.labkit`` and plain-Python modules, ``eval`` and its kind, special
and private attributes, assignments to what was imported, a second profiler,
thread settings, native code, files. A lab's manifest may allow a little more
(``[audit] allow``, names from :data:`ALLOWANCES`).

This is not a sandbox, and it is not the wall: every run of a lab file runs
in a sandbox of the operating system's (``proflab.running.sandbox``), and the
verdict rests on what the checker observes from outside the run. The audit is
a teacher: it explains a lab's rules before anything runs, and refuses what
breaks them (a second profiler, thread settings, threads or processes where a
lab allows none, reads the trace cannot show where a lab counts them, the
kit's internals) or reaches past what a lab file needs (native code, the
network, other processes, code run from strings). Natural code passes:
``import os`` for ``os.cpu_count()``, ``pathlib``, ``json`` and ``open`` to
read a file, ``torch._foreach_*`` and other private torch names, ``time``.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable


@dataclass(frozen=True)
class Finding:
    """One refused construct: where it is, the line as written, which rule, and why."""

    line: int
    col: int
    code: str  # the offending source line, stripped
    rule: str  # one of RULES' keys
    message: str  # for the learner: what is not allowed here, and why

    def __str__(self) -> str:
        return f"line {self.line}: `{self.code}`: {self.message}"


RULES: dict[str, str] = {
    "import": "Lab files import torch, torchvision, numpy, PIL, proflab.labkit and plain-Python modules (os, "
              "pathlib, json and the like among them): modules that run native code, start processes, reach "
              "the network or load code by name have no place in a training step.",
    "private": "Names starting with an underscore in the kit are its internals, where the clock, the profiler "
               "and the trace the checker reads live.",
    "builtin": "eval, exec, __import__, globals, setattr and their kind run code, or reach attributes, by names "
               "the audit cannot read.",
    "dunder": "Special attributes such as __class__, __dict__ and __globals__ lead from any object to the "
              "interpreter's internals and the checker's own variables.",
    "frame": "Frames and code objects (gi_frame, f_back, f_globals, ...) lead to the checker's own variables.",
    "patch": "What a lab file imports is shared with the checker, which must time and compare every version "
             "with the same modules, classes and settings.",
    "override": "A tensor type or mode that intercepts torch calls would intercept the checker's own calls too, "
                "its comparisons included.",
    "threads_setting": "The lab sets the thread count, the same for every version, so that the timings compare.",
    "profiler": "The checker profiles the file itself; a profiler of the file's own would fight it for the trace.",
    "native": "Native code, and code loaded from other files, escapes every check the audit makes.",
    "threads": "Threads working beside the timed steps hide work from the timings, unless the lab allows them.",
    "processes": "Processes working beside the timed steps hide work from the timings, unless the lab allows them.",
    "untraced_reads": "Where a lab counts the reads of tensor values into Python, it counts them from the trace: "
                      "numpy views, storages, raw pointers and DLPack read values without leaving a trace.",
}

ALLOWANCES: dict[str, str] = {
    "threads": "threading, queue and concurrent.futures thread pools (to overlap waits on I/O)",
    "processes": "multiprocessing, torch.multiprocessing and concurrent.futures process pools",
    "os": "the os and sys modules (open to every lab file now; kept so that older manifests still load)",
    "files": "open(), pathlib and io, torch.load and torch.save (open to every lab file now; kept so that older "
             "manifests still load)",
    "profiler": "torch.profiler and torch.autograd.profiler beyond record_function",
    "gc_collect": "gc.collect(), and nothing else of gc (a lab on memory: trying it is part of the lesson)",
    "distributed": "torch.distributed's process groups and collectives (a lab run as a torchrun job), not its "
                   "launchers, elastic agents or RPC, which start processes of their own",
}

# What a lab's manifest may refuse beyond the default (``[audit] refuse``).
RESTRICTIONS: dict[str, str] = {
    "untraced_reads": "numpy, .numpy(), storages, data_ptr(), DLPack, and a tensor's bytes serialized (.save(), "
                      "pickle): reads of tensor values the trace cannot show (a lab that counts its "
                      "reads or its lookups from the trace)",
}
_UNTRACED_ATTRS = frozenset({"numpy", "untyped_storage", "storage", "data_ptr", "__array__", "__dlpack__",
                             "to_dlpack", "from_dlpack", "dlpack", "__array_interface__",
                             "save", "__reduce_ex__", "__reduce__", "__getstate__"})
_UNTRACED_MODULES = ("numpy", "torch.utils.dlpack", "pickle", "copyreg", "marshal")
_UNTRACED_MESSAGE = ("this lab reads its evidence from the trace, and `{name}` reads a tensor's values where the "
                     "profiler cannot see it: keep to torch's own operations (indexing, .item(), .tolist()), "
                     "which the trace records")

_KEEP_TO = ("keep to torch, torchvision, numpy, PIL, proflab.labkit and plain-Python modules "
            "(math, random, collections, os, pathlib, json, ...), and keep helpers of your own in this file")
_MESSAGES = {
    "import": "lab files may not import {name}: a training step has no use for native code, other processes, "
              "the network or code loaded by name, so " + _KEEP_TO,
    "private": "lab files may not use the private name `{name}`: names starting with an underscore in the kit "
               "are its internals, where the checker's clock, profiler and trace live",
    "builtin": "lab files may not use `{name}`: {reason}",
    "dunder": "lab files may not use the attribute `{name}`: special attributes lead from any object to the "
              "interpreter's internals and the checker's own variables",
    "frame": "lab files may not use `{name}`: frames and code objects lead to the checker's own variables",
    "patch": "lab files may not change `{name}`: what you import is shared with the checker, which must time "
             "and compare every version with the same modules, classes and settings",
    "override": "lab files may not use `{name}`: a tensor type or mode that intercepts torch calls would "
                "intercept the checker's own calls too",
    "threads_setting": "lab files may not call `{name}`: the lab sets the thread count, the same for every "
                       "version, so that the timings compare",
    "profiler": "lab files may not use `{name}`: the checker profiles your file itself, so keep to "
                "record_function labels",
    "native": "lab files may not use `{name}`: native code, and code loaded from other files, escapes every check",
    "threads": "lab files may not use `{name}`: this lab allows no threads of your own working beside the "
               "timed steps, where their work would escape the timings",
    "processes": "lab files may not use `{name}`: this lab allows no processes of your own working beside the "
                 "timed steps, where their work would escape the timings",
}
_KIT = "lab files may not use {name}: the kit's internals are off limits, only proflab.labkit is yours to use"
_MAIN = ("`{name}` belongs only in the `if __name__ == \"__main__\":` block at the end of the file: the rest "
         "of the kit is off limits, only proflab.labkit is yours to use")
_RELATIVE = ("lab files may not import other files: the checker audits and times this one file, so keep "
             "everything the pipeline needs in it")
_STAR = "lab files may not use `from {name} import *`: name what you import, so that the audit can follow it"
_GETATTR = ("`{name}` needs a constant string as the attribute's name here, so that the audit can check "
            "which attribute you reach")

_USE = "lab files may not use `{name}`: "
_RUNS_CODE = "it runs code the audit cannot read"
_REACHES = "it reaches namespaces, or attributes by name, past what the audit can check"
_UNATTENDED = "the checker runs your file unattended, with no one to answer it"
_BUILTINS = {
    "eval": _RUNS_CODE, "exec": _RUNS_CODE, "compile": _RUNS_CODE, "__import__": _RUNS_CODE,
    "globals": _REACHES, "locals": _REACHES, "vars": _REACHES, "setattr": _REACHES, "delattr": _REACHES,
    "__builtins__": _REACHES, "__loader__": _REACHES, "__spec__": _REACHES,
    "breakpoint": _UNATTENDED, "input": _UNATTENDED, "help": _UNATTENDED,
    "exit": "when the process ends is the checker's call", "quit": "when the process ends is the checker's call",
    "memoryview": "it reads and writes raw memory",
}

# Import roots open to every lab file (with their submodules), and plain-Python modules (exactly these).
_OPEN_ROOTS = ("torch", "torchvision", "numpy", "PIL", "proflab.labkit")
_STDLIB = frozenset({
    "__future__", "math", "cmath", "random", "statistics", "collections", "collections.abc", "itertools",
    "functools", "operator", "dataclasses", "typing", "enum", "time", "contextlib", "copy", "heapq", "bisect",
    "numbers", "abc", "warnings",
    # Open since every run is sandboxed: reading a config, counting cores, writing scratch files in /tmp.
    "os", "os.path", "sys", "pathlib", "json", "io", "re", "glob", "csv", "string", "textwrap", "tempfile",
    "shutil", "datetime", "hashlib", "struct", "pprint", "platform", "logging", "fnmatch", "array",
})
_ALLOWANCE_ROOTS = {
    "threads": ("threading", "queue", "concurrent.futures"),
    "processes": ("multiprocessing", "torch.multiprocessing", "concurrent.futures"),
    "os": ("os", "sys"),
    "files": ("pathlib", "io"),
    "profiler": (),
    "gc_collect": ("gc",),
    "distributed": (),
}

# Dotted names refused wherever they appear (imports and attribute chains): the first prefix that
# matches decides. (prefix, rule, allowances that permit it, the message when not the rule's own)
_PATHS: tuple[tuple[str, str, tuple[str, ...], str], ...] = (
    *((p, "threads_setting", (), "") for p in ("torch.set_num_threads", "torch.set_num_interop_threads")),
    *((p, "native", (), "") for p in (
        "torch.ops.load_library", "torch.classes.load_library", "torch.utils.cpp_extension", "torch.library",
        "torch.hub", "torch.package", "numpy.ctypeslib", "numpy.f2py", "numpy.distutils")),
    # torch.distributed where a lab is a torchrun job: its process groups and collectives, never what starts
    # processes (torchrun is the checker's) or reaches other machines.
    *((p, "processes", ("processes",), "") for p in (
        "torch.distributed.run", "torch.distributed.launch", "torch.distributed.launcher", "torch.distributed.elastic",
        "torch.distributed.rpc", "torch.distributed.autograd")),
    ("torch.distributed", "processes", ("processes", "distributed"), ""),
    *((p, "processes", ("processes",), "") for p in (
        "torch.multiprocessing", "multiprocessing", "concurrent.futures.ProcessPoolExecutor",
        "concurrent.futures.process")),
    *((p, "threads", ("threads",), "") for p in (
        "concurrent.futures.ThreadPoolExecutor", "concurrent.futures.thread", "threading", "queue",
        "torch.jit.fork")),
    ("concurrent.futures", "threads", ("threads", "processes"), ""),
    *((p, "builtin", (), _USE + _REACHES) for p in ("operator.attrgetter", "operator.methodcaller")),
    *((p, "builtin", (), _USE + "it evaluates strings as code the audit cannot read") for p in (
        "typing.get_type_hints", "typing.ForwardRef", "functools.singledispatch", "functools.singledispatchmethod")),
    *((p, "patch", (), _USE + "the process's output streams are shared with the checker, which reports through them")
      for p in ("contextlib.redirect_stdout", "contextlib.redirect_stderr")),
    ("torch.overrides", "override", (), ""),
    # Where gc may be imported (``gc_collect``), only gc.collect: the rest of gc reaches every object.
    ("gc.collect", "import", ("gc_collect",), ""),
    ("gc", "builtin", (), _USE + "gc reaches every object of the process, the checker's own among them; "
                            "gc.collect() is the only part of it a lab file may use"),
)
# Profiler modules: their members are refused, bar record_function where the flag says so.
_PROFILERS = {"torch.profiler": True, "torch.autograd.profiler": True, "torch.autograd.profiler_legacy": False,
              "torch.autograd.profiler_util": False, "torch.cuda.profiler": False, "torch.mps.profiler": False}

_ALLOWED_DUNDERS = frozenset({"__init__", "__name__", "__doc__", "__len__", "__getitem__", "__iter__",
                              "__next__", "__call__", "__enter__", "__exit__", "__repr__", "__str__"})
_FRAME_ATTRS = frozenset({"gi_frame", "gi_code", "cr_frame", "cr_code", "ag_frame", "ag_code", "f_back",
                          "f_globals", "f_locals", "f_builtins", "f_code", "tb_frame", "tb_next"})
_OVERRIDES = frozenset({"__torch_function__", "__torch_dispatch__"})
_SETTABLE = frozenset({"torch.backends.cudnn.benchmark", "torch.backends.cudnn.deterministic",
                       "torch.backends.cuda.matmul.allow_tf32", "torch.backends.cudnn.allow_tf32",
                       "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction",
                       "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction",
                       # torch 2.9's names for the same choices (TF32 or full float32, per backend)
                       "torch.backends.fp32_precision", "torch.backends.cuda.matmul.fp32_precision",
                       "torch.backends.cudnn.fp32_precision", "torch.backends.cudnn.conv.fp32_precision",
                       "torch.backends.cudnn.rnn.fp32_precision", "torch.backends.mkldnn.fp32_precision"})


def audit_source(source: str, filename: str = "<lab file>", allow: Iterable[str] = (),
                 refuse: Iterable[str] = ()) -> list[Finding]:
    """The refused constructs of a lab file's source, sorted by line and column (empty: nothing refused).

    ``allow`` names the lab's allowances (keys of :data:`ALLOWANCES`), ``refuse`` its extra
    restrictions (keys of :data:`RESTRICTIONS`); an unknown name raises ValueError. A file that
    does not parse raises SyntaxError.
    """
    if isinstance(refuse, str):
        raise TypeError("refuse is a list of restriction names, not one string")
    unknown_restrictions = sorted(frozenset(refuse) - RESTRICTIONS.keys())
    if unknown_restrictions:
        raise ValueError(f"unknown audit restriction {', '.join(unknown_restrictions)}: known ones are "
                         f"{', '.join(RESTRICTIONS)}")
    if isinstance(allow, str):
        raise TypeError("allow is a list of allowance names, not one string")
    allowed = frozenset(allow)
    unknown = sorted(allowed - ALLOWANCES.keys())
    if unknown:
        raise ValueError(f"unknown audit allowance {', '.join(unknown)}: known ones are {', '.join(ALLOWANCES)}")
    tree = ast.parse(source, filename)
    audit = _Audit(tree, source.splitlines(), allowed)
    audit.visit(tree)
    if "untraced_reads" in refuse:
        _untraced_reads(tree, audit)
    return sorted(audit.findings.values(), key=lambda f: (f.line, f.col))


def _untraced_reads(tree: ast.Module, audit: "_Audit") -> None:
    """The restriction ``untraced_reads``: any use of an attribute or module that reads values unseen."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in _UNTRACED_ATTRS:
            audit.add(node, "untraced_reads", f".{node.attr}", _UNTRACED_MESSAGE)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for name in names:
                if any(name == m or name.startswith(m + ".") for m in _UNTRACED_MODULES):
                    audit.add(node, "untraced_reads", name, _UNTRACED_MESSAGE)


def audit_file(path: Path, allow: Iterable[str] = (), refuse: Iterable[str] = ()) -> list[Finding]:
    """:func:`audit_source` of a file (decoded as Python decodes it); a SyntaxError propagates, for the caller
    to report."""
    from .. import sources

    path = Path(path)
    return audit_source(sources.read(path), str(path), allow, refuse)


def _under(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith(prefix + ".")


def _is_dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def _is_private(name: str) -> bool:
    return name.startswith("_") and not _is_dunder(name)


def _constant_attribute(call: ast.Call) -> str | None:
    """The attribute name of ``getattr(obj, "name"[, default])`` or ``hasattr(obj, "name")``, if constant."""
    args = call.args
    if (call.keywords or not 2 <= len(args) <= 3 or any(isinstance(a, ast.Starred) for a in args)
            or not isinstance(args[1], ast.Constant) or not isinstance(args[1].value, str)):
        return None
    return args[1].value


def _as_attribute(node: ast.AST) -> tuple[ast.AST, str] | None:
    """``(obj, name)`` for ``obj.name`` and for ``getattr(obj, "name")``, else None."""
    if isinstance(node, ast.Attribute):
        return node.value, node.attr
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
            and _constant_attribute(node) is not None):
        return node.args[0], _constant_attribute(node)
    return None


def _root(node: ast.AST) -> ast.AST:
    """The start of a chain of attributes and subscripts: ``torch`` in ``torch.nn.Module.x[0]``."""
    while True:
        if isinstance(node, ast.Subscript):
            node = node.value
        elif (pair := _as_attribute(node)) is not None:
            node = pair[0]
        else:
            return node


def _dotted(node: ast.AST, bound: dict[str, str | None]) -> str | None:
    """The dotted path of a chain rooted at an imported name (``F.gelu`` -> "torch.nn.functional.gelu")."""
    if isinstance(node, ast.Name):
        return bound.get(node.id)
    pair = _as_attribute(node)
    base = _dotted(pair[0], bound) if pair else None
    return f"{base}.{pair[1]}" if base else None


def _import_bindings(tree: ast.Module) -> dict[str, str | None]:
    """The names bound, at any scope, to what an import brought in, with its dotted path when it has one.

    ``import a.b as c`` binds c to "a.b", ``import a.b`` binds a to "a", ``from a import b as c`` binds
    c to "a.b"; then, until nothing changes, simple aliases: ``t = torch.nn`` (also as a tuple, a walrus,
    a parameter's default, or a loop over a literal list of such chains) binds t to "torch.nn".
    """
    bound: dict[str, str | None] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                bound.setdefault(a.asname or a.name.split(".")[0], a.name if a.asname else a.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom):
            for a in node.names:
                if a.name != "*":
                    bound.setdefault(a.asname or a.name, None if node.level else f"{node.module}.{a.name}")

    def aliases(node: ast.AST):
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
            for target in getattr(node, "targets", None) or [node.target]:
                if isinstance(target, ast.Name):
                    yield target.id, node.value
                elif (isinstance(target, (ast.Tuple, ast.List)) and isinstance(node.value, (ast.Tuple, ast.List))
                      and len(target.elts) == len(node.value.elts)):
                    yield from ((t.id, v) for t, v in zip(target.elts, node.value.elts) if isinstance(t, ast.Name))
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)) and isinstance(node.target, ast.Name):
            if isinstance(node.iter, (ast.Tuple, ast.List, ast.Set)):
                yield from ((node.target.id, v) for v in node.iter.elts)
        elif isinstance(node, ast.arguments):
            params = node.posonlyargs + node.args
            yield from ((p.arg, d) for p, d in zip(params[len(params) - len(node.defaults):], node.defaults))
            yield from ((p.arg, d) for p, d in zip(node.kwonlyargs, node.kw_defaults) if d is not None)

    changed = True
    while changed:
        changed = False
        for node in ast.walk(tree):
            for name, value in aliases(node):
                root = _root(value)
                if name not in bound and isinstance(root, ast.Name) and root.id in bound:
                    bound[name] = _dotted(value, bound)
                    changed = True
    return bound


def _is_main_guard(stmt: ast.stmt) -> bool:
    """``if __name__ == "__main__":`` (either way round)."""
    return isinstance(stmt, ast.If) and ast.unparse(stmt.test) in ("__name__ == '__main__'", "'__main__' == __name__")


class _Audit(ast.NodeVisitor):
    """One pass over a parsed lab file, collecting at most one finding per line and rule."""

    def __init__(self, tree: ast.Module, lines: list[str], allow: frozenset[str]):
        self.lines = lines
        self.allow = allow
        self.bound = _import_bindings(tree)
        self.main_guards = {id(s) for s in tree.body if _is_main_guard(s)}
        self.in_main = False
        self.own_names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
        self.own_names |= {n.arg for n in ast.walk(tree) if isinstance(n, ast.arg)}
        self.checked_calls: set[int] = set()  # getattr/hasattr names already checked as calls
        self.gc_collect: set[int] = set()  # names bound to gc, used as `gc.collect` (the one use of gc allowed)
        self.findings: dict[tuple[int, str], Finding] = {}

    def add(self, node: ast.AST, rule: str, name: str, template: str | None = None, reason: str = "") -> None:
        line = getattr(node, "lineno", 1)
        code = self.lines[line - 1].strip() if 0 < line <= len(self.lines) else ""
        message = (template or _MESSAGES[rule]).format(name=name, reason=reason)
        self.findings.setdefault((line, rule), Finding(line, getattr(node, "col_offset", 0), code, rule, message))

    # Imports

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            self.check_import(node, a.name, a.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            self.add(node, "import", "", _RELATIVE)
            return
        for a in node.names:
            if a.name == "*":
                self.add(node, "import", node.module, _STAR)
            else:
                self.check_import(node, f"{node.module}.{a.name}", node.module)

    def check_import(self, node: ast.AST, path: str, module: str) -> None:
        """``path`` is what the import reaches ("os.environ"), ``module`` the module it names ("os")."""
        hit = self.path_rule(path)
        if hit:
            self.add(node, hit[0], path, hit[1] or None)
        elif _under(path, "proflab") and not _under(path, "proflab.labkit"):
            if path not in ("proflab", "proflab.profile_file"):
                self.add(node, "import", path if module == "proflab" else module, _KIT)
            elif not self.in_main:
                self.add(node, "import", "import proflab" if path == "proflab" else "from proflab import profile_file",
                         _MAIN)
        elif not (self.module_allowed(module) or self.module_allowed(path)):
            self.add(node, "import", module)
        elif _under(path, "proflab") and any(_is_private(part) for part in path.split(".")):
            self.add(node, "private", path)

    def module_allowed(self, module: str) -> bool:
        roots = _OPEN_ROOTS + tuple(r for a in self.allow for r in _ALLOWANCE_ROOTS[a])
        return module in _STDLIB or any(_under(module, r) for r in roots)

    def path_rule(self, path: str) -> tuple[str, str] | None:
        """(rule, message template or "") when the dotted name ``path`` is refused in this lab, else None."""
        for module, record_ok in _PROFILERS.items():
            if path.startswith(module + ".") and "profiler" not in self.allow:
                if not (record_ok and path[len(module) + 1:].split(".")[0] == "record_function"):
                    return "profiler", ""
        if path == "gc":  # the module itself: whether it may be imported is the lab's allowance
            return None
        for prefix, rule, allowances, template in _PATHS:
            if _under(path, prefix):
                return None if self.allow.intersection(allowances) else (rule, template)
        return None

    # Names, attributes and what is stored through them

    def imported(self, node: ast.AST) -> bool:
        root = _root(node)
        return isinstance(root, ast.Name) and root.id in self.bound

    def check_attribute(self, node: ast.AST, obj: ast.AST, attr: str) -> None:
        shown = f"{ast.unparse(obj)}.{attr}"
        if attr in _OVERRIDES:
            self.add(node, "override", attr)
        elif _is_dunder(attr) and attr not in _ALLOWED_DUNDERS:
            self.add(node, "dunder", attr)
        elif attr in _FRAME_ATTRS:
            self.add(node, "frame", attr)
        if not self.imported(obj):
            return
        base = _dotted(obj, self.bound)
        path = f"{base}.{attr}" if base else None
        if _is_private(attr) and path and _under(path, "proflab"):
            self.add(node, "private", shown)
        if path and (hit := self.path_rule(path)):
            self.add(node, hit[0], shown, hit[1] or None)
        elif path and _under(path, "proflab") and not _under(path, "proflab.labkit"):
            if not (self.in_main and path == "proflab.profile_file"):
                self.add(node, "import", path, _KIT)

    def check_store(self, node: ast.AST) -> None:
        """An assignment to, or deletion of, an attribute or item."""
        root = _root(node)
        if isinstance(root, ast.Name) and root.id in self.bound:
            if _dotted(node, self.bound) not in _SETTABLE:
                self.add(node, "patch", ast.unparse(node))
        elif isinstance(root, ast.Call) and isinstance(root.func, ast.Name) and root.func.id == "type":
            self.add(node, "patch", ast.unparse(node))

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr == "collect" and isinstance(node.value, ast.Name) and self.bound.get(node.value.id) == "gc":
            self.gc_collect.add(id(node.value))
        self.check_attribute(node, node.value, node.attr)
        if not isinstance(node.ctx, ast.Load):
            self.check_store(node)
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if not isinstance(node.ctx, ast.Load):
            self.check_store(node)
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        name = node.id
        if self.bound.get(name) == "gc" and isinstance(node.ctx, ast.Load) and id(node) not in self.gc_collect:
            # gc passed along (to a function, into a list, to another name) could reach past gc.collect
            self.add(node, "builtin", name, _USE + "gc may only be used as gc.collect(); passed along, gc "
                                              "reaches every object of the process, the checker's own among them")
            return
        if name in _OVERRIDES:
            self.add(node, "override", name)
        elif not isinstance(node.ctx, ast.Load):
            pass
        elif name in _BUILTINS and not (name == "input" and name in self.own_names):
            self.add(node, "builtin", name, reason=_BUILTINS[name])
        elif name in ("getattr", "hasattr") and id(node) not in self.checked_calls:
            self.add(node, "builtin", name, _GETATTR)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Name) and func.id in ("getattr", "hasattr"):
            name = _constant_attribute(node)
            if name is not None:
                self.checked_calls.add(id(func))
                self.check_attribute(node, node.args[0], name)
        self.generic_visit(node)

    def visit_MatchClass(self, node: ast.MatchClass) -> None:
        for attr in node.kwd_attrs:  # `case C(attr=...)` reads C's attribute
            self.check_attribute(node, node.cls, attr)
        self.generic_visit(node)

    # Definitions, annotations and the main block

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        if node.name in _OVERRIDES:
            self.add(node, "override", node.name)
        a = node.args
        for arg in [*a.posonlyargs, *a.args, a.vararg, *a.kwonlyargs, a.kwarg]:
            if arg is not None and arg.annotation is not None:
                self.visit_annotation_strings(arg.annotation)
        if node.returns is not None:
            self.visit_annotation_strings(node.returns)
        self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self.visit_annotation_strings(node.annotation)
        self.generic_visit(node)

    def visit_annotation_strings(self, annotation: ast.expr) -> None:
        """Annotations written as strings are code too, once something evaluates them: audit them as such."""
        for const in ast.walk(annotation):
            if isinstance(const, ast.Constant) and isinstance(const.value, str):
                try:
                    parsed = ast.parse(const.value.strip(), mode="eval")
                except (SyntaxError, ValueError):  # not an expression: nothing can evaluate it
                    continue
                for n in ast.walk(parsed):
                    if hasattr(n, "lineno"):
                        n.lineno, n.col_offset = const.lineno, const.col_offset
                self.visit(parsed.body)

    def visit_If(self, node: ast.If) -> None:
        if id(node) not in self.main_guards:
            self.generic_visit(node)
            return
        self.visit(node.test)
        self.in_main = True
        for stmt in node.body:
            self.visit(stmt)
        self.in_main = False
        for stmt in node.orelse:
            self.visit(stmt)
