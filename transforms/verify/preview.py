"""The verify job's preview: a contact sheet of sample images per class, and shard sizes.

Pure code: takes decoded record features and sizes, returns PNG bytes. A person looking at the picture should
see at once whether labels match images and whether the shards came out balanced.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Mapping, Sequence

from PIL import Image, ImageDraw, ImageFont, ImageOps

from transforms.errors import ImageError
from transforms.images.image_codec import decode_rgb
from transforms.progress.report import format_bytes
from transforms.shardset.naming import SHARD_NAME_RE

__all__ = ["PreviewSample", "preview_sample", "render_preview", "PREVIEW_CLASSES", "PREVIEW_PER_CLASS"]

PREVIEW_CLASSES = 16  # classes shown (the lowest label indexes)
PREVIEW_PER_CLASS = 6  # images shown per class
_THUMB = 96
_PAD = 8
_LABEL_WIDTH = 150
_CHART_HEIGHT = 160
_SPLIT_COLORS = [(66, 133, 244), (52, 168, 83), (251, 188, 5), (234, 67, 53), (155, 89, 182)]


@dataclass(frozen=True)
class PreviewSample:
    """One record chosen for the contact sheet: its ``image/*`` features of these names (``key`` is
    ``image/key/sha256``: samples are the smallest keys, so reruns agree)."""

    label: int
    text: str
    key: str
    encoded: bytes
    format: str
    height: int
    width: int
    channels: int


def preview_sample(features: Mapping[str, tuple[str, list]] | None,
                   max_label: int = PREVIEW_CLASSES) -> PreviewSample | None:
    """Returns the sample a record offers, or None (no image schema, or label >= max_label)."""
    if not features:
        return None
    names = ("image/class/label", "image/class/text", "image/key/sha256", "image/encoded",
             "image/format", "image/height", "image/width", "image/channels")
    found = [features.get(name, ("none", []))[1] for name in names]
    if any(len(values) != 1 for values in found):
        return None
    label, text, key, encoded, fmt, height, width, channels = (values[0] for values in found)
    if not isinstance(label, int) or not 0 <= label < max_label:
        return None
    try:
        return PreviewSample(label, text.decode("utf-8", "replace"), key.decode("ascii", "replace"),
                             encoded, fmt.decode("utf-8", "replace"), int(height), int(width),
                             int(channels))
    except (AttributeError, TypeError, ValueError):  # a feature of the wrong kind
        return None


def _thumbnail(sample: PreviewSample) -> Image.Image | None:
    try:
        if sample.format == "raw":
            mode = {1: "L", 3: "RGB", 4: "RGBA"}.get(sample.channels)
            if mode is None or len(sample.encoded) != sample.height * sample.width * sample.channels:
                return None
            img = Image.frombytes(mode, (sample.width, sample.height), sample.encoded)
        else:
            img = decode_rgb(sample.encoded)
    except ImageError:
        return None
    return ImageOps.contain(img.convert("RGB"), (_THUMB, _THUMB))


def _draw_sheet(draw: ImageDraw.ImageDraw, canvas: Image.Image, top: int,
                rows: list[tuple[int, str, list[PreviewSample]]],
                class_counts: Mapping[int, int]) -> int:
    font = ImageFont.load_default()
    y = top
    for label, text, samples in rows:
        draw.text((_PAD, y + 4), f"{label}: {text}", fill="black", font=font)
        shown = (f"{len(samples)} of {class_counts[label]} records" if label in class_counts
                 else f"{len(samples)} shown")
        draw.text((_PAD, y + 20), shown, fill=(110, 110, 110), font=font)
        x = _LABEL_WIDTH
        for sample in samples:
            thumb = _thumbnail(sample)
            draw.rectangle((x - 1, y - 1, x + _THUMB, y + _THUMB), outline=(200, 200, 200))
            if thumb is None:
                draw.line((x, y, x + _THUMB - 1, y + _THUMB - 1), fill="red", width=2)
                draw.text((x + 4, y + 4), "undecodable", fill="red", font=font)
            else:
                canvas.paste(thumb, (x + (_THUMB - thumb.width) // 2, y + (_THUMB - thumb.height) // 2))
            caption = f"{sample.width}x{sample.height} {sample.format}"
            draw.text((x, y + _THUMB + 2), caption, fill=(90, 90, 90), font=font)
            x += _THUMB + _PAD
        y += _THUMB + 18 + _PAD
    return y


def _short_names(name: str) -> list[str]:
    """Labels for a shard's bar, longest first."""
    match = SHARD_NAME_RE.match(name)
    if not match:
        return [name[:12]]
    return [f"{match['split']} {int(match['index'])}", str(int(match["index"]))]


def _draw_chart(draw: ImageDraw.ImageDraw, top: int, width: int,
                shard_sizes: Sequence[tuple[str, str, int]]) -> None:
    font = ImageFont.load_default()
    sizes = [size for _, _, size in shard_sizes]
    splits = sorted({split for split, _, _ in shard_sizes})
    colors = {split: _SPLIT_COLORS[i % len(_SPLIT_COLORS)] for i, split in enumerate(splits)}
    largest = max(sizes) if sizes else 0
    title = (f"Shard sizes: {len(sizes)} shards, smallest {format_bytes(min(sizes))}, "
             f"largest {format_bytes(largest)}" if sizes else "Shard sizes: no shards")
    draw.text((_PAD, top), title, fill="black", font=font)
    legend_x = _PAD
    for split in splits:
        draw.rectangle((legend_x, top + 18, legend_x + 10, top + 28), fill=colors[split])
        draw.text((legend_x + 14, top + 17), split, fill="black", font=font)
        legend_x += 24 + int(draw.textlength(split, font=font))
    base = top + 36 + _CHART_HEIGHT
    left, right = _PAD + 60, width - _PAD
    draw.line((left, base, right, base), fill="black")
    draw.line((left, base - _CHART_HEIGHT, left, base), fill="black")
    draw.text((_PAD, base - _CHART_HEIGHT), format_bytes(largest), fill="black", font=font)
    draw.text((_PAD, base - 10), "0", fill="black", font=font)
    if not sizes or largest <= 0:
        return
    step = (right - left) / len(sizes)
    for i, (split, name, size) in enumerate(shard_sizes):
        x0 = left + int(i * step) + (1 if step >= 3 else 0)
        x1 = max(left + int((i + 1) * step) - 1, x0)
        height = max(int(_CHART_HEIGHT * size / largest), 1)
        draw.rectangle((x0, base - height, x1, base - 1), fill=colors[split])
        if label := next((t for t in _short_names(name) if draw.textlength(t, font=font) < step - 2), None):
            draw.text((x0 + 2, base + 3), label, fill="black", font=font)
    mean = sum(sizes) / len(sizes)
    y = base - int(_CHART_HEIGHT * mean / largest)
    for x in range(left, right, 8):
        draw.line((x, y, min(x + 4, right), y), fill=(60, 60, 60))
    draw.text((right - 110, y - 14), f"mean {format_bytes(int(mean))}", fill=(60, 60, 60), font=font)


def render_preview(samples: Sequence[PreviewSample], shard_sizes: Sequence[tuple[str, str, int]],
                   title: str, class_counts: Mapping[int, int] | None = None) -> bytes:
    """Draws the preview and returns it as PNG bytes.

    Args:
        samples: Records to show; grouped by label, at most ``PREVIEW_PER_CLASS`` each (smallest keys first).
        shard_sizes: ``(split, file name, bytes)`` per shard, in display order.
        title: First line of the picture, e.g. the shard set's folder.
        class_counts: Label -> records with it (from the manifest), if known.
    """
    by_label: dict[int, list[PreviewSample]] = {}
    for sample in sorted(samples, key=lambda s: (s.label, s.key)):
        kept = by_label.setdefault(sample.label, [])
        if len(kept) < PREVIEW_PER_CLASS:
            kept.append(sample)
    rows = [(label, group[0].text, group) for label, group in sorted(by_label.items())]
    width = max(_LABEL_WIDTH + PREVIEW_PER_CLASS * (_THUMB + _PAD) + _PAD, 640)
    sheet_height = len(rows) * (_THUMB + 18 + _PAD) if rows else 20
    height = 30 + sheet_height + 20 + 36 + _CHART_HEIGHT + 24
    canvas = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(canvas)
    draw.text((_PAD, 8), title, fill="black", font=ImageFont.load_default())
    if rows:
        y = _draw_sheet(draw, canvas, 30, rows, class_counts or {})
    else:
        draw.text((_PAD, 30), "No decodable image records to show.", fill="black", font=ImageFont.load_default())
        y = 50
    _draw_chart(draw, y + 10, width, shard_sizes)
    out = io.BytesIO()
    canvas.save(out, format="PNG")
    return out.getvalue()
