"""Messages the image library prints about an input, caught and given to that input's dead letter.

Pillow reports some problems of a file it still opens as Python warnings and others on its loggers,
naming no input; libtiff prints them to file descriptor 2. Within ``captured_messages()`` they are
collected for the calling thread: ``naming_library_messages`` adds them to an ``ImageError``'s detail;
they are dropped when the image turns out fine. Pillow's warnings are set to ``always`` so none is swallowed.
libtiff's handlers are installed through ctypes in the libtiff Pillow loaded
(``TIFFSetWarningHandler``, ``TIFFSetErrorHandler``), checked with Pillow 12.3's wheels (libtiff 4.7)
on Linux x86-64; where the library cannot be set up, libtiff prints as before.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import logging
import os
import threading
import warnings
from typing import Callable, Iterator, TypeVar

from PIL import Image

from transforms.errors import ImageError

__all__ = ["captured_messages", "naming_library_messages"]

_F = TypeVar("_F", bound=Callable)

_LOG = logging.getLogger("transforms.images")
_install_lock = threading.Lock()
_previous_showwarning = None
_filtered_loggers: set[str] = set()
_logger_count = -1  # loggers that existed when Pillow's were last filtered
_TIFF_HANDLER = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p)
_tiff_handlers: list = []  # the callbacks, kept alive for as long as libtiff may call them
_tiff_tried = False


class _Captures(threading.local):
    """``stack``: the calling thread's open captures, innermost last."""

    def __init__(self) -> None:
        self.stack: list[list[str]] = []


_local = _Captures()


def _note_message(text: str) -> bool:
    """Adds ``text`` to the calling thread's innermost capture; False if none is open."""
    stack = _local.stack
    if not stack:
        return False
    stack[-1].append(text)
    return True


def _route_warning(message, category, filename, lineno, file=None, line=None):
    if _note_message(f"{category.__name__}: {message}"):
        return
    if _previous_showwarning is not None:
        _previous_showwarning(message, category, filename, lineno, file, line)


def _route_record(record: logging.LogRecord) -> bool:
    """Takes one of Pillow's log records into the thread's capture, if one is open (a logger filter)."""
    return not _note_message(f"{record.levelname.lower()}: {record.getMessage()}")


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


def _libtiff() -> ctypes.CDLL | None:
    """The libtiff Pillow loaded (its wheels bundle one), else the system's."""
    import PIL

    libs = os.path.join(os.path.dirname(os.path.dirname(PIL.__file__)), "pillow.libs")
    candidates = sorted(os.path.join(libs, n) for n in os.listdir(libs)
                        if n.startswith("libtiff")) if os.path.isdir(libs) else []
    system = ctypes.util.find_library("tiff")
    for path in candidates + ([system] if system else []):
        try:
            return ctypes.CDLL(path)
        except OSError:
            continue
    return None


def _formatter():
    libc_name = ctypes.util.find_library("c")
    if not libc_name:
        return None
    vsnprintf = ctypes.CDLL(libc_name).vsnprintf
    vsnprintf.argtypes = (ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_void_p)
    vsnprintf.restype = ctypes.c_int
    return vsnprintf


def _make_tiff_handler(level: str, vsnprintf):
    def handle(module: bytes | None, fmt: bytes | None, args: int | None) -> None:
        buffer = ctypes.create_string_buffer(1024)
        text = fmt or b""
        if vsnprintf is not None and fmt:
            if vsnprintf(buffer, len(buffer), fmt, args) >= 0:
                text = buffer.value
        message = f"libtiff {level}: {text.decode('utf-8', 'replace').strip()}"
        if not _note_message(message):
            _LOG.debug("%s (module %s)", message, (module or b"").decode("utf-8", "replace"))

    return _TIFF_HANDLER(handle)


def _route_libtiff_messages() -> None:
    """Installs libtiff's handlers once per process, where the library can be found."""
    global _tiff_tried
    with _install_lock:
        if _tiff_tried:
            return
        _tiff_tried = True
        lib = _libtiff()
        if lib is None or not hasattr(lib, "TIFFSetWarningHandler"):
            return
        vsnprintf = _formatter()
        for setter, level in ((lib.TIFFSetWarningHandler, "warning"), (lib.TIFFSetErrorHandler, "error")):
            setter.argtypes = (_TIFF_HANDLER,)
            setter.restype = ctypes.c_void_p
            handler = _make_tiff_handler(level, vsnprintf)
            setter(handler)
            _tiff_handlers.append(handler)


@contextlib.contextmanager
def captured_messages() -> Iterator[list[str]]:
    """Collects the image library's messages raised in this thread while the block runs."""
    _install()
    _route_libtiff_messages()
    messages: list[str] = []
    stack = _local.stack
    stack.append(messages)
    try:
        yield messages
    finally:
        stack.pop()


def naming_library_messages(fn: _F) -> _F:
    """Makes the image library's messages about an image part of the ImageError ``fn`` raises."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with captured_messages() as messages:
            try:
                return fn(*args, **kwargs)
            except ImageError as err:
                if not messages:
                    raise
                said = "; ".join(dict.fromkeys(messages))
                raise ImageError(err.reason, f"{err.detail} (image library said: {said})") from err

    return wrapper  # type: ignore[return-value]
