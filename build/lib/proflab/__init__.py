"""proflab: learn torch.profiler by fixing slow pipelines."""

__version__ = "0.1.0"


def profile_file(path: str) -> None:
    """``python labs/NN_name/exercise.py``: profile this lab file like ``proflab run``."""
    import os
    import sys

    if "TORCHELASTIC_RUN_ID" in os.environ:  # started by torchrun: the kit starts the job itself
        if os.environ.get("RANK", "0") == "0":
            print(f"{os.path.basename(path)} starts its own torchrun job: run it as `python {path}` "
                  "(or `proflab run`), not under torchrun.", file=sys.stderr)
        raise SystemExit(2)
    from .cli import main

    raise SystemExit(main(["run", path, *sys.argv[1:]]))
