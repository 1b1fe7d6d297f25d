"""proflab: learn torch.profiler by fixing slow pipelines."""

__version__ = "0.1.0"


def profile_file(path: str) -> None:
    """``python labs/NN_name/exercise.py``: profile this lab file like ``proflab run``."""
    import sys

    from .cli import main

    raise SystemExit(main(["run", path, *sys.argv[1:]]))
