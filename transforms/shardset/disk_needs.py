"""The disk space a build needs where its output lies, and what to say when there is too little (pure).

A build stages each record in a run file, then copies it into a shard, staged there too: at its peak
it needs about twice its records where ``--output_dir`` lies; with ``--staging_dir`` each place once.
"""

from __future__ import annotations

from dataclasses import dataclass

from transforms.shardset.planning import MIB

__all__ = ["DiskNeed", "build_disk_need", "size_text", "shortfall", "shortfall_clause", "apart_shortfall_clause"]


@dataclass(frozen=True)
class DiskNeed:
    """The free space a build needs at its peak: for its records staged in run files, and its shards."""

    staged: int
    shards: int

    @property
    def peak(self) -> int:
        """Free bytes needed at the peak: the staged records and the shards at once."""
        return self.staged + self.shards


def build_disk_need(record_bytes: int) -> DiskNeed:
    """What a build writing ``record_bytes`` of records needs (each record staged once, then copied)."""
    return DiskNeed(record_bytes, record_bytes)


def size_text(nbytes: int, places: int = 0) -> str:
    """``635 MiB``, ``1.24 GiB``: a size as the disk lines say it (``places``: digits after the point below a GiB)."""
    if nbytes >= 1024 * MIB:
        return f"{nbytes / (1024 * MIB):.2f} GiB"
    if nbytes >= MIB:
        return f"{nbytes / MIB:.{places}f} MiB"
    return f"{nbytes / 1024:.{places}f} KiB"


def shortfall(need: int, free: int | None) -> int | None:
    """Bytes to free before the run fits (0 when it fits), or None when the free space is not known."""
    return None if free is None else max(0, need - free)


def shortfall_clause(input_bytes: int, free: int | None, kept: int = 0) -> str:
    """What a build that ran out of space says of its need (about its ``input_bytes``), the ``free`` space
    now and the difference; ``kept``: bytes of the staging it kept for the rerun (they count toward the peak)."""
    need = build_disk_need(input_bytes).peak
    text = f"this build needs about {size_text(need)} free there at its peak (twice its inputs' {size_text(input_bytes)})"
    return text if free is None else f"{text} and {_free_now(need, free, kept, ' are')}"


def _free_now(need: int, free: int, kept: int = 0, are: str = "") -> str:
    """``1 GiB are free now besides the 1 GiB it staged: free about 1 GiB more``."""
    more = shortfall(need - kept, free)
    besides = f" besides the {size_text(kept)} it staged" if kept else ""
    return f"{size_text(free)}{are} free now{besides}" + (f": free about {size_text(more)} more" if more else "")


def _free_text(need: int, free: int | None, kept: int = 0) -> str:
    return "" if free is None else f" ({_free_now(need, free, kept)})"


def apart_shortfall_clause(input_bytes: int, staging_dir: str, staging_free: int | None, output_dir: str,
                           output_free: int | None, kept: int = 0) -> str:
    """``shortfall_clause`` for a build with ``--staging_dir``: what each place needs against what is free
    (``kept``: bytes of run files kept in ``staging_dir`` for the rerun)."""
    need = build_disk_need(input_bytes)
    return (f"this build needs about {size_text(need.staged)} free in {staging_dir} for its run files"
            f"{_free_text(need.staged, staging_free, kept)} and about {size_text(need.shards)} in {output_dir} "
            f"for its shards{_free_text(need.shards, output_free)}")
