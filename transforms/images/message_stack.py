"""Each thread's open captures of the image library's messages: the one place messages go.

``library_messages.captured_messages`` opens a capture on the calling thread's stack; the routes
that catch a library's messages hand each to ``note_message``.
"""

from __future__ import annotations

import threading

__all__ = ["note_message", "open_captures"]

_local = threading.local()


def open_captures() -> list[list[str]]:
    """The calling thread's stack of open captures, innermost last."""
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    return stack


def note_message(text: str) -> bool:
    """Adds ``text`` to the calling thread's innermost capture; False if none is open."""
    stack = open_captures()
    if not stack:
        return False
    stack[-1].append(text)
    return True
