"""A lab file's source, read as Python reads it.

Python decodes a source file by its coding line (PEP 263: ``# -*- coding: latin-1 -*-``) or its UTF-8
byte-order mark, and as UTF-8 otherwise; a file the interpreter runs is a file the kit reads, so every
reading of a learner's source goes through here, never through a bare ``read_text()``.
"""

from __future__ import annotations

import io
import tokenize
from pathlib import Path


class Unreadable(ValueError):
    """The file's bytes are not text in the encoding it declares (or in UTF-8): Python would refuse it too."""


def read(path: Path | str) -> str:
    """The file's text, decoded as the interpreter would; ``Unreadable`` when it cannot be."""
    raw = Path(path).read_bytes()
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)
        return raw.decode(encoding).removeprefix("\ufeff")
    except (SyntaxError, LookupError, UnicodeDecodeError) as e:
        raise Unreadable(f"{Path(path).name} is not readable as Python source: {e}") from None
