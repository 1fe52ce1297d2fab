"""The disk space a build needs where its output lies, and what to say when there is too little (pure).

A build stages each record in a run file, then copies the records into shards, staged there too,
and publishes them by renames: at its peak it needs free space for about twice its records where
``--output_dir`` lies. With ``--staging_dir`` each place needs about its records once.
"""

from __future__ import annotations

from dataclasses import dataclass

from transforms.shardset.planning import MIB

__all__ = ["DiskNeed", "build_disk_need", "size_text", "shortfall", "shortfall_clause", "apart_shortfall_clause"]


@dataclass(frozen=True)
class DiskNeed:
    """The free space a build needs at its peak.

    Attributes:
        staged: Bytes of its records staged in run files.
        shards: Bytes of the shards it writes (staged, then published by renames).
    """

    staged: int
    shards: int

    @property
    def peak(self) -> int:
        """Free bytes needed at the peak: the staged records and the shards at once."""
        return self.staged + self.shards


def build_disk_need(record_bytes: int) -> DiskNeed:
    """What a build writing ``record_bytes`` of records needs (each record staged once, then copied)."""
    return DiskNeed(record_bytes, record_bytes)


def size_text(nbytes: int) -> str:
    """``635 MiB``, ``1.24 GiB``: a size as the disk lines say it."""
    if nbytes >= 1024 * MIB:
        return f"{nbytes / (1024 * MIB):.2f} GiB"
    if nbytes >= MIB:
        return f"{nbytes / MIB:.0f} MiB"
    return f"{nbytes / 1024:.0f} KiB"


def shortfall(need: int, free: int | None) -> int | None:
    """Bytes to free before the run fits (0 when it fits), or None when the free space is not known."""
    return None if free is None else max(0, need - free)


def shortfall_clause(input_bytes: int, free: int | None, kept: int = 0) -> str:
    """What a build that ran out of space says of its need: the estimate, the free space, the difference.

    Args:
        input_bytes: Bytes of its inputs (its records are about as large).
        free: Free bytes where its output lies now, or None.
        kept: Bytes of the staging it kept for the rerun to resume (they count toward the peak).
    """
    need = build_disk_need(input_bytes).peak
    text = f"this build needs about {size_text(need)} free there at its peak (twice its inputs' {size_text(input_bytes)})"
    if free is None:
        return text
    more = shortfall(need - kept, free)
    besides = f" besides the {size_text(kept)} it staged" if kept else ""
    return text + (f" and {size_text(free)} are free now{besides}: free about {size_text(more)} more" if more
                   else f" and {size_text(free)} are free now{besides}")


def _free_text(need: int, free: int | None, kept: int = 0) -> str:
    if free is None:
        return ""
    more = shortfall(need - kept, free)
    besides = f" besides the {size_text(kept)} it staged" if kept else ""
    return (f" ({size_text(free)} free now{besides}: free about {size_text(more)} more)" if more
            else f" ({size_text(free)} free now{besides})")


def apart_shortfall_clause(input_bytes: int, staging_dir: str, staging_free: int | None, output_dir: str,
                           output_free: int | None, kept: int = 0) -> str:
    """``shortfall_clause`` for a build with ``--staging_dir``: what each place needs against what is free.

    Args:
        input_bytes: Bytes of its inputs (its records are about as large).
        staging_dir: ``--staging_dir``, where its run files lie.
        staging_free: Free bytes there now, or None.
        output_dir: ``--output_dir``, where its shards are staged and published.
        output_free: Free bytes there now, or None.
        kept: Bytes of run files it kept in ``staging_dir`` for the rerun (they count toward its need).
    """
    need = build_disk_need(input_bytes)
    return (f"this build needs about {size_text(need.staged)} free in {staging_dir} for its run files"
            f"{_free_text(need.staged, staging_free, kept)} and about {size_text(need.shards)} in {output_dir} "
            f"for its shards{_free_text(need.shards, output_free)}")
