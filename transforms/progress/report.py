"""Progress lines and bars (items done of total, bytes, rate, time left) and counted nouns (pure)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Stage", "progress_line", "progress_bar", "format_bytes", "format_seconds", "plural",
           "ETA_AFTER_SECONDS"]

# The time left is guessed only from a rate measured over at least this long: the first
# seconds of a stage (workers starting, the first bundles) are no guide to the rest.
ETA_AFTER_SECONDS = 5.0


def plural(count: int, noun: str) -> str:
    """Returns ``"1 shard"``, ``"2 shards"``, ``"0 classes"``: the count with its noun agreeing."""
    if count == 1:
        return f"{count} {noun}"
    return f"{count} {noun}{'es' if noun.endswith(('s', 'x', 'ch', 'sh')) else 's'}"


@dataclass(frozen=True)
class Stage:
    """Where a job is: one stage of its work (``reading images``), counting ``unit`` (``images``) and bytes,
    done of their totals when known."""

    label: str
    unit: str
    items: int
    items_total: int | None = None
    nbytes: int = 0
    bytes_total: int | None = None

    def fraction(self) -> float | None:
        """How much of the stage is done, in [0, 1], when its total is known."""
        if self.bytes_total:
            return min(self.nbytes / self.bytes_total, 1.0)
        if self.items_total:
            return min(self.items / self.items_total, 1.0)
        return None


def format_bytes(count: float) -> str:
    """``1536`` -> ``1.5 KiB``."""
    for unit in ("B", "KiB", "MiB"):
        if count < 1024:
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} GiB"


def format_seconds(seconds: float) -> str:
    """``75`` -> ``1 min 15 s``."""
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def _parts(stage: Stage, seconds: float, eta: bool = True) -> list[str]:
    total = f" of {stage.items_total:,}" if stage.items_total is not None else ""
    parts = [f"{stage.items:,}{total} {stage.unit}"]
    if stage.nbytes or stage.bytes_total:
        parts.append(format_bytes(stage.nbytes) + (f" of {format_bytes(stage.bytes_total)}"
                                                   if stage.bytes_total else ""))
    if seconds > 0 and (stage.nbytes or stage.items):
        parts.append(f"{format_bytes(stage.nbytes / seconds)}/s" if stage.nbytes
                     else f"{stage.items / seconds:,.1f} {stage.unit}/s")
    fraction = stage.fraction()
    if eta and fraction is not None and 0 < fraction < 1 and seconds >= ETA_AFTER_SECONDS:
        parts.append(f"about {format_seconds(seconds * (1 - fraction) / fraction)} left")
    return parts


def progress_line(job: str, stage: Stage, seconds: float, eta: bool = True) -> str:
    """One plain progress line, e.g. ``build: reading images: 120 of 400 images (30%), ...``.

    ``seconds`` in the stage so far (the time left is shown from ``ETA_AFTER_SECONDS`` on, with ``eta``).
    """
    fraction = stage.fraction()
    percent = f" ({100 * fraction:.0f}%)" if fraction is not None else ""
    parts = _parts(stage, seconds, eta)
    return f"{job}: {stage.label}: {parts[0]}{percent}" + "".join(f", {p}" for p in parts[1:])


def progress_bar(job: str, stage: Stage, seconds: float, width: int = 24, eta: bool = True) -> str:
    """A progress bar line for a terminal, e.g. ``build [#####.....] 50% reading images ...`` (as ``progress_line``)."""
    fraction = stage.fraction()
    if fraction is None:
        bar = "[" + "?" * width + "]"
    else:
        filled = int(round(fraction * width))
        bar = "[" + "#" * filled + "." * (width - filled) + f"] {100 * fraction:3.0f}%"
    return f"{job} {bar} {stage.label}: " + ", ".join(_parts(stage, seconds, eta))
