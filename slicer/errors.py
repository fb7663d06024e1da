"""Structured reasons for not slicing a function (a performance event, never a user error)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Refusal(Exception):
    """Why a function (or a variant of it) cannot be sliced.

    kind: a short fixed word ("unsupported-statement", "no-source", ...);
    explanation: what was found; hint: what the user can do; filename/lineno: where.
    """

    kind: str
    explanation: str
    hint: str = ""
    filename: str = "<unknown>"
    lineno: int = 0

    def __str__(self) -> str:
        text = f"{self.filename}:{self.lineno}: {self.kind}: {self.explanation}"
        return f"{text} ({self.hint})" if self.hint else text
