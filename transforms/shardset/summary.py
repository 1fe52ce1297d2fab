"""The summary a job prints once it published a shard set, read from its manifest (no Beam)."""

from __future__ import annotations

from typing import Sequence

from transforms.progress.report import plural
from transforms.shardset.manifest import MANIFEST_NAME, Manifest
from transforms.shardset.naming import join_path
from transforms.shardset.planning import MIB
from transforms.shardset.replacing import change_line, split_changes
from transforms.shardset.tfds_metadata import tfds_problem

__all__ = ["published_summary", "reader_lines"]


def reader_lines(manifest: Manifest) -> list[str]:
    """Summary lines on what tensorflow-datasets gets: why it cannot read the set as it is, if so."""
    problem = tfds_problem(manifest.compression)
    return [f"  {problem}"] if problem else []


def published_summary(output_dir: str, manifest: Manifest, seconds: float, before: Manifest | None = None,
                      details: Sequence[str] | None = None) -> str:
    """Returns the human summary of a published shard set, from its manifest.

    Args:
        before: The folder's manifest before the run, if it had one (the splits replaced, kept or removed).
        details: The lines after the splits' (a job's own, ``images.build_summary``); None: ``reader_lines``.
    """
    changes = {change.split: change for change in split_changes(before, manifest)}
    kept = {name for name, change in changes.items() if change.kind == "kept"}
    if manifest.written_splits is not None:  # kept splits' records were not this run's inputs
        kept |= set(manifest.splits) - set(manifest.written_splits)
    written = sum(split.records - manifest.appended.get(name, 0)
                  for name, split in manifest.splits.items() if name not in kept)
    # An append's manifest counts the set's dead letters, earlier runs' too: this run's are the difference.
    dead = manifest.dead_letters - (before.dead_letters if manifest.appended and before is not None else 0)
    # An append's inputs the set had dead-lettered already: in its dead_letters.jsonl once, not again.
    known = manifest.known_dead_letters if manifest.appended else 0
    told = f", {plural(known, 'input')} already dead-lettered in the set" if known else ""
    lines = [f"Published {plural(written, 'record')} to {output_dir} in {seconds:.1f} s "
             f"({plural(dead, 'dead letter')}{told}; written + dead-lettered = {written + dead + known} inputs)"]
    lines += [f"  {line}" for line in map(change_line, changes.values()) if line]
    for name, split in sorted(manifest.splits.items()):
        sizes = [s.bytes for s in split.shards]
        lines.append(f"  {name}{' (kept)' if name in kept else ''}: {plural(split.records, 'record')} in "
                     f"{plural(len(sizes), 'shard')}, {split.bytes / MIB:.1f} MiB "
                     f"(shards {min(sizes) / MIB:.1f}-{max(sizes) / MIB:.1f} MiB)")
    lines += reader_lines(manifest) if details is None else list(details)
    lines.append(f"  labels: {plural(len(manifest.labels), 'class')}; manifest: "
                 f"{join_path(output_dir, MANIFEST_NAME)}")
    return "\n".join(lines)
