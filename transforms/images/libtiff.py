"""libtiff's own messages, routed to the input being decoded instead of file descriptor 2.

libtiff's default handlers print straight to stderr, naming no input, and Pillow offers no way to
change that. ``route_libtiff_messages`` installs handlers through ctypes in the libtiff Pillow
loaded (``TIFFSetWarningHandler``, ``TIFFSetErrorHandler``): each message goes to the calling
thread's capture (``message_stack.note_message``), else to the ``transforms.images`` logger at
DEBUG. Checked with Pillow 12.3's wheels (libtiff 4.7) on Linux x86-64; where the library cannot be
set up, libtiff prints as before.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import threading

from transforms.images.message_stack import note_message

__all__ = ["route_libtiff_messages"]

_LOG = logging.getLogger("transforms.images")
_HANDLER = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p)
_lock = threading.Lock()
_installed: list = []  # the callbacks, kept alive for as long as libtiff may call them
_tried = False


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


def _make_handler(level: str, vsnprintf):
    def handle(module: bytes | None, fmt: bytes | None, args: int | None) -> None:
        buffer = ctypes.create_string_buffer(1024)
        text = fmt or b""
        if vsnprintf is not None and fmt:
            if vsnprintf(buffer, len(buffer), fmt, args) >= 0:
                text = buffer.value
        message = f"libtiff {level}: {text.decode('utf-8', 'replace').strip()}"
        if not note_message(message):
            _LOG.debug("%s (module %s)", message, (module or b"").decode("utf-8", "replace"))

    return _HANDLER(handle)


def route_libtiff_messages() -> bool:
    """Installs the handlers once per process; returns True if they are in place."""
    global _tried
    with _lock:
        if _tried:
            return bool(_installed)
        _tried = True
        lib = _libtiff()
        if lib is None or not hasattr(lib, "TIFFSetWarningHandler"):
            return False
        vsnprintf = _formatter()
        for setter, level in ((lib.TIFFSetWarningHandler, "warning"), (lib.TIFFSetErrorHandler, "error")):
            setter.argtypes = (_HANDLER,)
            setter.restype = ctypes.c_void_p
            handler = _make_handler(level, vsnprintf)
            setter(handler)
            _installed.append(handler)
        return True
