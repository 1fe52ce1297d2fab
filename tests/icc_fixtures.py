"""ICC profiles, PNGs that carry them, and TensorFlow's own words about them.

``HP_SRGB`` is the "sRGB IEC61966-2.1" profile Hewlett-Packard and Microsoft
published in 1998 (3,144 bytes), copied from Pillow's
``Tests/images/icc_profile.png`` (scikit-image's ``astronaut.png`` and
``chelsea.png`` carry it too): libpng's ``png_sRGB_checks`` lists it as "HP-Microsoft
sRGB v2 perceptual", and with rendering intent 1 in its header (the only byte
that differs) as "HP-Microsoft sRGB v2 media-relative", both known incorrect.
Stored here zlib-compressed.

``tensorflow_decodes`` decodes PNG files with ``tf.io.decode_png`` in a
subprocess, with TensorFlow's warnings on (libpng's reach stderr as ``PNG
warning: ...`` lines), and returns what each printed and decoded.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import subprocess
import sys
import zlib


from tests import imagegen

__all__ = ["HP_SRGB", "with_intent", "gray_profile", "iccp", "chunk", "chunks", "png_with",
           "tensorflow_decodes", "png_warnings"]

HP_SRGB = zlib.decompress(base64.b64decode(
    "eNqdlndUVNcWh8+9d3qhzTDSGXqTLjCA9C4gHQRRGGYGGMoAwwxNbIioQEQREQFFkKCAAaOhSKyIYiEoqGAPSBBQYjCKqKhk"
    "RtZKfHl57+Xl98e939pn73P32XuftS4AJE8fLi8FlgIgmSfgB3o401eFR9Cx/QAGeIABpgAwWempvkHuwUAkLzcXerrICfyL"
    "3gwBSPy+ZejpT6eD/0/SrFS+AADIX8TmbE46S8T5Ik7KFKSK7TMipsYkihlGiZkvSlDEcmKOW+Sln30W2VHM7GQeW8TinFPZ"
    "yWwx94h4e4aQI2LER8QFGVxOpohvi1gzSZjMFfFbcWwyh5kOAIoktgs4rHgRm4iYxA8OdBHxcgBwpLgvOOYLFnCyBOJDuaSk"
    "ZvO5cfECui5Lj25qbc2ge3IykzgCgaE/k5XI5LPpLinJqUxeNgCLZ/4sGXFt6aIiW5paW1oamhmZflGo/7r4NyXu7SK9Cvjc"
    "M4jW94ftr/xS6gBgzIpqs+sPW8x+ADq2AiB3/w+b5iEAJEV9a7/xxXlo4nmJFwhSbYyNMzMzjbgclpG4oL/rfzr8DX3xPSPx"
    "dr+Xh+7KiWUKkwR0cd1YKUkpQj49PZXJ4tAN/zzE/zjwr/NYGsiJ5fA5PFFEqGjKuLw4Ubt5bK6Am8Kjc3n/qYn/MOxPWpxr"
    "kSj1nwA1yghI3aAC5Oc+gKIQARJ5UNz13/vmgw8F4psXpjqxOPefBf37rnCJ+JHOjfsc5xIYTGcJ+RmLa+JrCdCAACQBFcgD"
    "FaABdIEhMANWwBY4AjewAviBYBAO1gIWiAfJgA8yQS7YDApAEdgF9oJKUAPqQSNoASdABzgNLoDL4Dq4Ce6AB2AEjIPnYAa8"
    "AfMQBGEhMkSB5CFVSAsygMwgBmQPuUE+UCAUDkVDcRAPEkK50BaoCCqFKqFaqBH6FjoFXYCuQgPQPWgUmoJ+hd7DCEyCqbAy"
    "rA0bwwzYCfaGg+E1cBycBufA+fBOuAKug4/B7fAF+Dp8Bx6Bn8OzCECICA1RQwwRBuKC+CERSCzCRzYghUg5Uoe0IF1IL3IL"
    "GUGmkXcoDIqCoqMMUbYoT1QIioVKQ21AFaMqUUdR7age1C3UKGoG9QlNRiuhDdA2aC/0KnQcOhNdgC5HN6Db0JfQd9Dj6DcY"
    "DIaG0cFYYTwx4ZgEzDpMMeYAphVzHjOAGcPMYrFYeawB1g7rh2ViBdgC7H7sMew57CB2HPsWR8Sp4sxw7rgIHA+XhyvHNeHO"
    "4gZxE7h5vBReC2+D98Oz8dn4Enw9vgt/Az+OnydIE3QIdoRgQgJhM6GC0EK4RHhIeEUkEtWJ1sQAIpe4iVhBPE68QhwlviPJ"
    "kPRJLqRIkpC0k3SEdJ50j/SKTCZrkx3JEWQBeSe5kXyR/Jj8VoIiYSThJcGW2ChRJdEuMSjxQhIvqSXpJLlWMkeyXPKk5A3J"
    "aSm8lLaUixRTaoNUldQpqWGpWWmKtKm0n3SydLF0k/RV6UkZrIy2jJsMWyZf5rDMRZkxCkLRoLhQWJQtlHrKJco4FUPVoXpR"
    "E6hF1G+o/dQZWRnZZbKhslmyVbJnZEdoCE2b5kVLopXQTtCGaO+XKC9xWsJZsmNJy5LBJXNyinKOchy5QrlWuTty7+Xp8m7y"
    "ifK75TvkHymgFPQVAhQyFQ4qXFKYVqQq2iqyFAsVTyjeV4KV9JUCldYpHVbqU5pVVlH2UE5V3q98UXlahabiqJKgUqZyVmVK"
    "laJqr8pVLVM9p/qMLkt3oifRK+g99Bk1JTVPNaFarVq/2ry6jnqIep56q/ojDYIGQyNWo0yjW2NGU1XTVzNXs1nzvhZei6EV"
    "r7VPq1drTltHO0x7m3aH9qSOnI6XTo5Os85DXbKug26abp3ubT2MHkMvUe+A3k19WN9CP16/Sv+GAWxgacA1OGAwsBS91Hop"
    "b2nd0mFDkqGTYYZhs+GoEc3IxyjPqMPohbGmcYTxbuNe408mFiZJJvUmD0xlTFeY5pl2mf5qpm/GMqsyu21ONnc332jeaf5y"
    "mcEyzrKDy+5aUCx8LbZZdFt8tLSy5Fu2WE5ZaVpFW1VbDTOoDH9GMeOKNdra2Xqj9WnrdzaWNgKbEza/2BraJto22U4u11nO"
    "WV6/fMxO3Y5pV2s3Yk+3j7Y/ZD/ioObAdKhzeOKo4ch2bHCccNJzSnA65vTC2cSZ79zmPOdi47Le5bwr4urhWuja7ybjFuJW"
    "6fbYXd09zr3ZfcbDwmOdx3lPtKe3527PYS9lL5ZXo9fMCqsV61f0eJO8g7wrvZ/46Pvwfbp8Yd8Vvnt8H67UWslb2eEH/Lz8"
    "9vg98tfxT/P/PgAT4B9QFfA00DQwN7A3iBIUFdQU9CbYObgk+EGIbogwpDtUMjQytDF0Lsw1rDRsZJXxqvWrrocrhHPDOyOw"
    "EaERDRGzq91W7109HmkRWRA5tEZnTdaaq2sV1iatPRMlGcWMOhmNjg6Lbor+wPRj1jFnY7xiqmNmWC6sfaznbEd2GXuKY8cp"
    "5UzE2sWWxk7G2cXtiZuKd4gvj5/munAruS8TPBNqEuYS/RKPJC4khSW1JuOSo5NP8WR4ibyeFJWUrJSBVIPUgtSRNJu0vWkz"
    "fG9+QzqUvia9U0AV/Uz1CXWFW4WjGfYZVRlvM0MzT2ZJZ/Gy+rL1s3dkT+S453y9DrWOta47Vy13c+7oeqf1tRugDTEbujdq"
    "bMzfOL7JY9PRzYTNiZt/yDPJK817vSVsS1e+cv6m/LGtHlubCyQK+AXD22y31WxHbedu799hvmP/jk+F7MJrRSZF5UUfilnF"
    "174y/ariq4WdsTv7SyxLDu7C7OLtGtrtsPtoqXRpTunYHt897WX0ssKy13uj9l4tX1Zes4+wT7hvpMKnonO/5v5d+z9Uxlfe"
    "qXKuaq1Wqt5RPXeAfWDwoOPBlhrlmqKa94e4h+7WetS212nXlR/GHM44/LQ+tL73a8bXjQ0KDUUNH4/wjowcDTza02jV2Nik"
    "1FTSDDcLm6eORR67+Y3rN50thi21rbTWouPguPD4s2+jvx064X2i+yTjZMt3Wt9Vt1HaCtuh9uz2mY74jpHO8M6BUytOdXfZ"
    "drV9b/T9kdNqp6vOyJ4pOUs4m3924VzOudnzqeenL8RdGOuO6n5wcdXF2z0BPf2XvC9duex++WKvU++5K3ZXTl+1uXrqGuNa"
    "x3XL6+19Fn1tP1j80NZv2d9+w+pG503rm10DywfODjoMXrjleuvyba/b1++svDMwFDJ0dzhyeOQu++7kvaR7L+9n3J9/sOkh"
    "+mHhI6lH5Y+VHtf9qPdj64jlyJlR19G+J0FPHoyxxp7/lP7Th/H8p+Sn5ROqE42TZpOnp9ynbj5b/Wz8eerz+emCn6V/rn6h"
    "++K7Xxx/6ZtZNTP+kv9y4dfiV/Kvjrxe9rp71n/28ZvkN/NzhW/l3x59x3jX+z7s/cR85gfsh4qPeh+7Pnl/eriQvLDwG/eE"
    "8/s="))

D50 = bytes.fromhex("0000f6d6000100000000d32d")


def with_intent(profile: bytes, intent: int) -> bytes:
    """``profile`` with the rendering intent (header bytes 64-67) set to ``intent``."""
    return profile[:64] + intent.to_bytes(4, "big") + profile[68:]


def gray_profile(intent: int = 0, illuminant: bytes = D50, space: bytes = b"GRAY",
                 profile_class: bytes = b"mntr") -> bytes:
    """A 132-byte ICC v2 profile header with no tags (libpng checks no more of a profile)."""
    header = bytearray(132)
    header[0:4] = (132).to_bytes(4, "big")
    header[8:12] = b"\x02\x10\x00\x00"
    header[12:16], header[16:20], header[20:24] = profile_class, space, b"XYZ "
    header[36:40] = b"acsp"
    header[64:68] = intent.to_bytes(4, "big")
    header[68:80] = illuminant
    return bytes(header)


def chunk(kind: bytes, body: bytes) -> bytes:
    """One PNG chunk, its CRC computed."""
    return len(body).to_bytes(4, "big") + kind + body + zlib.crc32(kind + body).to_bytes(4, "big")


def iccp(profile: bytes, name: bytes = b"ICC Profile", method: int = 0, stream: bytes | None = None,
         level: int = 9) -> bytes:
    """An iCCP chunk holding ``profile`` compressed at ``level`` (or ``stream`` as its compressed data).

    libpng reads a chunk of less than 92 bytes as ``too short``: ``gray_profile``
    needs ``level=0`` to be read further.
    """
    data = zlib.compress(profile, level) if stream is None else stream
    return chunk(b"iCCP", name + b"\0" + bytes((method,)) + data)


def chunks(png: bytes) -> list[tuple[bytes, bytes, bool]]:
    """(type, data, CRC valid) of every chunk of a PNG, in order."""
    out, pos = [], 8
    while pos < len(png):
        length = int.from_bytes(png[pos:pos + 4], "big")
        kind, body = png[pos + 4:pos + 8], png[pos + 8:pos + 8 + length]
        out.append((kind, body, int.from_bytes(png[pos + 8 + length:pos + 12 + length], "big")
                    == zlib.crc32(kind + body)))
        pos += 12 + length
    return out


def png_with(mode: str, *extra: bytes, after: bytes = b"IHDR", size: tuple[int, int] = (13, 7)) -> bytes:
    """A Pillow PNG of ``mode`` with the chunks ``extra`` inserted after its first ``after`` chunk."""
    out = io.BytesIO()
    img = imagegen.image("RGB", *size).convert(mode)
    img.save(out, format="PNG")
    data = out.getvalue()
    pos = 8
    while data[pos + 4:pos + 8] != after:
        pos += 12 + int.from_bytes(data[pos:pos + 4], "big")
    pos += 12 + int.from_bytes(data[pos:pos + 4], "big")
    return data[:pos] + b"".join(extra) + data[pos:]


_DECODE = r"""
import hashlib, json, os, sys, tempfile
import tensorflow as tf
capture, saved = tempfile.TemporaryFile(), os.dup(2)
for path in sys.argv[1:]:
    data = open(path, "rb").read()
    capture.seek(0); capture.truncate()
    os.dup2(capture.fileno(), 2)
    pixels = {}
    try:
        for channels in (0, 1, 3, 4):
            arr = tf.io.decode_png(data, channels=channels, dtype=tf.uint16).numpy()
            pixels[channels] = [list(arr.shape), hashlib.sha256(arr.tobytes()).hexdigest()]
        error = ""
    except tf.errors.InvalidArgumentError as err:
        error = err.message.splitlines()[0]
    finally:
        os.dup2(saved, 2)
    capture.seek(0)
    print(json.dumps({"stderr": capture.read().decode("utf-8", "replace"), "pixels": pixels,
                      "error": error}))
"""


def tensorflow_decodes(pngs: list[bytes], folder: str) -> list[dict]:
    """What ``tf.io.decode_png`` printed on stderr and decoded for each PNG, in one subprocess.

    Each result has ``stderr`` (the text the decodes printed), ``pixels``
    (channels -> [shape, sha256 of the uint16 pixels] for channels 0, 1, 3 and
    4) and ``error`` (TensorFlow's message when it refused the file).
    """
    paths = []
    for index, data in enumerate(pngs):
        paths.append(os.path.join(folder, f"{index}-{hashlib.sha256(data).hexdigest()[:12]}.png"))
        with open(paths[-1], "wb") as f:
            f.write(data)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "0"}
    done = subprocess.run([sys.executable, "-c", _DECODE, *paths], capture_output=True, text=True,
                          env=env, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    results = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(results) == len(pngs), done.stdout[-3000:]
    return results


def png_warnings(result: dict) -> list[str]:
    """The ``PNG warning`` messages in one ``tensorflow_decodes`` result, once each."""
    found = [line.split("PNG warning: ", 1)[1] for line in result["stderr"].splitlines()
             if "PNG warning: " in line]
    return sorted(set(found))
