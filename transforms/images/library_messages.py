"""Messages the image library prints about an input, caught and given to that input's dead letter.

Pillow reports some problems of a file it still opens as Python warnings and others on its loggers,
naming no input; libtiff prints them (``libtiff.py``). Within ``captured_messages()`` they are collected
for the calling thread (``message_stack``): ``collected`` adds them to an ``ImageError``'s detail; they
are dropped when the image turns out fine. Pillow's warnings are set to ``always`` so none is swallowed.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import warnings
from typing import Iterator

from PIL import Image

from transforms.errors import ImageError
from transforms.images.libtiff import route_libtiff_messages
from transforms.images.message_stack import note_message, open_captures

__all__ = ["captured_messages", "collected", "note_message"]

_install_lock = threading.Lock()
_previous_showwarning = None
_filtered_loggers: set[str] = set()
_logger_count = -1  # loggers that existed when Pillow's were last filtered


def _route_warning(message, category, filename, lineno, file=None, line=None):
    if note_message(f"{category.__name__}: {message}"):
        return
    if _previous_showwarning is not None:
        _previous_showwarning(message, category, filename, lineno, file, line)


def _route_record(record: logging.LogRecord) -> bool:
    """Takes one of Pillow's log records into the thread's capture, if one is open (a logger filter)."""
    return not note_message(f"{record.levelname.lower()}: {record.getMessage()}")


def _install() -> None:
    # Runs for every image: the check is two lookups, the walk over every logger happens only
    # when a logger was added (or a harness swapped ``showwarning``) since the last one.
    global _previous_showwarning, _logger_count
    if warnings.showwarning is _route_warning and len(logging.root.manager.loggerDict) == _logger_count:
        return
    with _install_lock:
        if warnings.showwarning is not _route_warning:
            _previous_showwarning = warnings.showwarning
            warnings.showwarning = _route_warning
            warnings.filterwarnings("always", module=r"PIL(\.|$)")
        Image.init()  # imports the format plugins, which make their loggers
        for name in list(logging.root.manager.loggerDict):
            if (name == "PIL" or name.startswith("PIL.")) and name not in _filtered_loggers:
                logging.getLogger(name).addFilter(_route_record)
                _filtered_loggers.add(name)
        _logger_count = len(logging.root.manager.loggerDict)


@contextlib.contextmanager
def captured_messages() -> Iterator[list[str]]:
    """Collects the image library's messages raised in this thread while the block runs."""
    _install()
    route_libtiff_messages()
    messages: list[str] = []
    stack = open_captures()
    stack.append(messages)
    try:
        yield messages
    finally:
        stack.pop()


def collected(err: ImageError, messages: list[str]) -> ImageError:
    """Returns ``err`` with the library's messages about the same input added to its detail."""
    if not messages:
        return err
    seen = list(dict.fromkeys(messages))
    return ImageError(err.reason, f"{err.detail} (image library said: {'; '.join(seen)})")
