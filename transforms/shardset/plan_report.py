"""A build's plan: what a run would find, reject and write, and what it would do to the output folder (pure).

Everything is an estimate: inputs are checked from their headers only (``images.survey``).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Mapping, Sequence

from transforms.progress.report import plural
from transforms.shardset.dead_letters import DeadLetter, in_appended_set, rejection_verdict
from transforms.shardset.disk_needs import DiskNeed, build_disk_need, shortfall, size_text
from transforms.shardset.manifest import Manifest
from transforms.shardset.ownership import (PublishPolicy, kept_split_problem, kept_splits, labels_conflict,
                                           merge_labels, unlisted_problem, unlisted_shard_files)
from transforms.shardset.planning import MIB, lay_out_split
from transforms.shardset.replacing import replace_problem

__all__ = ["START_UP_SECONDS", "SECONDS_PER_INPUT", "PlanTally", "SplitPlan", "FolderChange", "BuildRate",
           "Plan", "make_plan", "folder_change", "folder_problems", "DEFAULT_RATE", "DUPLICATE_REASONS",
           "BY_CONTENT", "PLAN_VERSION"]

PLAN_VERSION = 1
# How many rejected inputs a plan names per reason.
_EXAMPLES = 3
# The tally's mappings keyed by a string, as ``PlanTally.to_dict`` writes them.
_MAPPINGS = ("kinds", "record_bytes", "largest", "formats", "converted", "feature_spec")
# The tally's counts, summed when tallies merge.
_COUNTS = ("in_set", "files_read", "bytes_read", "estimated_sizes")
# Dead-letter reasons that mean "the same input twice" (reject_duplicates' checks).
DUPLICATE_REASONS = ("duplicate_path", "duplicate_image", "cross_split_duplicate")
# The split shown for inputs whose split their bytes choose (--split_fractions).
BY_CONTENT = "(by content)"


# A build's cost whatever its input (start-up to summary), and per input beyond its bytes:
# BENCHMARKS.md, "A small build's start-up".
START_UP_SECONDS = 4.0
SECONDS_PER_INPUT = 0.001


@dataclass(frozen=True)
class BuildRate:
    """How fast a build runs: a fixed start-up cost, plus seconds per input and per GiB of input."""

    seconds_per_gib: float
    fixed_seconds: float
    source: str
    seconds_per_input: float = 0.0

    def __post_init__(self) -> None:
        if not (self.seconds_per_gib > 0 and self.fixed_seconds >= 0 and self.seconds_per_input >= 0):
            raise ValueError(f"a build rate needs seconds_per_gib > 0, fixed_seconds >= 0 and seconds_per_input "
                             f">= 0, got {self.seconds_per_gib}, {self.fixed_seconds} and {self.seconds_per_input}")

    @classmethod
    def of_mib_per_second(cls, rate_mib_s: float) -> "BuildRate":
        """A rate a person gives (``--rate_mb_s``): MiB of input per second, after ``START_UP_SECONDS``."""
        return cls(1024.0 / rate_mib_s, START_UP_SECONDS, f"--rate_mb_s {rate_mib_s:g}")

    def seconds(self, input_bytes: int, inputs: int = 0) -> float:
        """The estimated seconds of a build reading ``input_bytes`` bytes of ``inputs`` inputs."""
        return (self.fixed_seconds + self.seconds_per_input * inputs
                + self.seconds_per_gib * input_bytes / (1024 * MIB))


# The build on the 2-core benchmark machine, one process, default flags, photos of about 100 KB:
# BENCHMARKS.md, "Plan before running".
DEFAULT_RATE = BuildRate(seconds_per_gib=4.8, fixed_seconds=START_UP_SECONDS, seconds_per_input=SECONDS_PER_INPUT,
                         source='BENCHMARKS.md "Plan before running": one process, 2 cores, '
                                "--image_mode tf --validate structure")


class PlanTally:
    """What the plan's pipeline saw; a combine's accumulator (``add`` facts, ``merge`` tallies).

    Every fact is a tuple whose first item says what it is:

    - ``("found", split, label[, kind])``: one input listed (split ``""``: chosen by content),
      and what kind of input it is (``file``, ``manifest row``, ``tar member``, ...; default ``file``);
    - ``("rejected", reason, path, detail)``: one input a build would reject;
    - ``("read", nbytes, exact)``: one file read, and whether its record size is exact;
    - ``("record", split, label, source_format, converted, record_bytes)``: one record a
      build would write (``converted``: stored in another format than its source's);
    - ``("listing", inputs, classes, feature_spec)``: the listing's totals (once).
    """

    def __init__(self) -> None:
        self.found: dict[tuple[str, str], int] = {}
        self.kinds: dict[str, int] = {}  # kind of input -> inputs of that kind listed
        self.rejected: dict[str, list] = {}  # reason -> [count, [(path, detail)]]
        self.in_set = 0  # rejected as already in the set an append adds to (in_appended_set)
        self.files_read = 0
        self.bytes_read = 0
        self.estimated_sizes = 0
        self.records: dict[tuple[str, str], int] = {}
        self.record_bytes: dict[str, int] = {}
        self.largest: dict[str, int] = {}
        self.formats: dict[str, int] = {}
        self.converted: dict[str, int] = {}
        self.inputs: int | None = None
        self.classes: tuple[str, ...] = ()
        self.feature_spec: dict[str, str] = {}

    def add(self, fact: Sequence) -> "PlanTally":
        """Adds one fact (see the class docstring); returns the tally."""
        kind = fact[0]
        if kind == "found":
            _add(self.found, (fact[1], fact[2]))
            _add(self.kinds, fact[3] if len(fact) > 3 else "file")
        elif kind == "rejected":
            self._reject(fact[1], 1, [(fact[2], fact[3])])
            self.in_set += in_appended_set(DeadLetter(fact[2], fact[1], fact[3]))
        elif kind == "read":
            self.files_read += 1
            self.bytes_read += fact[1]
            self.estimated_sizes += 0 if fact[2] else 1
        elif kind == "record":
            _, split, label, source_format, converted, size = fact
            _add(self.records, (split, label))
            _add(self.record_bytes, split, size)
            self.largest[split] = max(self.largest.get(split, 0), size)
            _add(self.formats, source_format)
            if converted:
                _add(self.converted, source_format)
        elif kind == "listing":
            self.inputs, self.classes, self.feature_spec = fact[1], tuple(fact[2]), dict(fact[3])
        else:
            raise ValueError(f"unknown plan fact {kind!r}")
        return self

    def merge(self, others: Iterable["PlanTally"]) -> "PlanTally":
        """Adds every other tally into this one; returns it."""
        for other in others:
            for name in ("found", "kinds", "records", "record_bytes", "formats", "converted"):
                for key, count in getattr(other, name).items():
                    _add(getattr(self, name), key, count)
            for name in _COUNTS:
                setattr(self, name, getattr(self, name) + getattr(other, name))
            for reason, (count, examples) in other.rejected.items():
                self._reject(reason, count, examples)
            for split, size in other.largest.items():
                self.largest[split] = max(self.largest.get(split, 0), size)
            if other.inputs is not None:
                self.inputs, self.classes = other.inputs, other.classes
                self.feature_spec = dict(other.feature_spec)
        return self

    def _reject(self, reason: str, count: int, examples: Iterable[tuple[str, str]]) -> None:
        entry = self.rejected.setdefault(reason, [0, []])
        entry[0] += count
        entry[1] = sorted(entry[1] + list(examples))[:_EXAMPLES]

    def to_dict(self) -> dict[str, Any]:
        """The tally as JSON-ready values (``from_dict`` reads them back)."""
        return {**{name: [[s, label, n] for (s, label), n in sorted(getattr(self, name).items())]
                   for name in ("found", "records")},
                **{name: dict(sorted(getattr(self, name).items())) for name in _MAPPINGS},
                "rejected": {r: [n, [list(e) for e in ex]] for r, (n, ex) in sorted(self.rejected.items())},
                **{name: getattr(self, name) for name in _COUNTS}, "inputs": self.inputs, "classes": list(self.classes)}

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> "PlanTally":
        tally = cls()
        tally.found, tally.records = ({(s, label): n for s, label, n in obj[name]} for name in ("found", "records"))
        for name in _MAPPINGS:  # a tally without "kinds" has none
            setattr(tally, name, dict(obj.get(name, {}) if name == "kinds" else obj[name]))
        tally.rejected = {r: [n, [tuple(e) for e in ex]] for r, (n, ex) in obj["rejected"].items()}
        for name in _COUNTS:  # a tally without "in_set" has none
            setattr(tally, name, obj.get(name, 0) if name == "in_set" else obj[name])
        tally.inputs, tally.classes = obj["inputs"], tuple(obj["classes"])
        return tally

    def dumps(self) -> bytes:
        return json.dumps(self.to_dict(), sort_keys=True).encode("utf-8")

    @classmethod
    def loads(cls, data: bytes) -> "PlanTally":
        return cls.from_dict(json.loads(data))


def _add(counts: dict, key: Any, count: int = 1) -> None:
    counts[key] = counts.get(key, 0) + count


@dataclass(frozen=True)
class SplitPlan:
    """The records (class name -> records), framed bytes, largest record and shards one split would get."""

    name: str
    records: int
    classes: Mapping[str, int]
    record_bytes: int
    largest: int
    num_shards: int

    @property
    def shard_bytes(self) -> int:
        """The average shard's bytes."""
        return self.record_bytes // self.num_shards


@dataclass(frozen=True)
class FolderChange:
    """What a run would do to the shard set published in its output folder (``published``: split ->
    records there now): the splits it adds, replaces (``appending``: adds records to), keeps and drops
    (``--drop_other_splits``), and why it would refuse to start or to publish, one line each."""

    published: Mapping[str, int]
    new: tuple[str, ...]
    replaced: tuple[str, ...]
    kept: tuple[str, ...]
    dropped: tuple[str, ...]
    problems: tuple[str, ...] = ()
    appending: bool = False


def folder_change(published: Mapping[str, int], written: Iterable[str], kept: Iterable[str],
                  problems: Sequence[str] = (), appending: bool = False) -> FolderChange:
    """Compares the splits a run writes with those published (``kept``: ``ownership.kept_splits``)."""
    written, kept = set(written), set(kept)
    return FolderChange(dict(published), tuple(sorted(written - set(published))),
                        tuple(sorted(written & set(published))), tuple(sorted(kept & set(published))),
                        tuple(sorted(set(published) - written - kept)), tuple(problems), appending)


def folder_problems(output_dir: str, present: Mapping[str, int], manifest: Manifest | None,
                    manifest_problem: str | None, owned: set[str], policy: PublishPolicy,
                    written: Iterable[str], compression: str, feature_spec: Mapping[str, str],
                    labels: Sequence[str], inputs: Sequence[str]) -> list[str]:
    """Why a build would refuse to start or to publish into its output folder, one line each.

    ``present``, ``manifest``, ``manifest_problem`` and ``owned`` are as ``output_folder.FolderState``
    says; the rest are the run's, as publishing checks them.
    """
    problems = []
    unlisted = unlisted_problem(output_dir, unlisted_shard_files(present, owned), manifest_problem)
    if unlisted and not policy.overwrite_unlisted:
        problems.append(unlisted)
    if manifest_problem and not policy.drop_other_splits:
        problems.append(f"its manifest.json cannot be read ({manifest_problem}), so its splits cannot "
                        "be kept; pass --drop_other_splits to replace the whole set")
    written = set(written)
    replacing = None if policy.replace or policy.append else replace_problem(output_dir, manifest, written, inputs)
    if replacing:
        problems.append(replacing)
    kept = kept_splits(manifest, written, policy)
    for split in sorted(kept.values(), key=lambda s: s.name):
        problem = kept_split_problem(split, present, manifest, compression, feature_spec)
        if problem:
            problems.append(problem)
            break  # publishing names the first
    if kept and not problems and not policy.append and merge_labels(manifest.labels, labels) is None:
        problems.append(labels_conflict(labels, kept, manifest.labels))
    return problems


@dataclass(frozen=True)
class Plan:
    """What a build with these flags would do, estimated (see the module docstring).

    Attributes:
        splits: Split -> its ``SplitPlan``, for the splits with records.
        shard_rule: The sharding flags, as the plan names them.
        change: What the run would do to the output folder; None when it holds no shard set.
        free_bytes: Free bytes in the file system of ``output_dir`` (None: not known).
        staging: The folder the build stages its records and shards in.
        staging_dir: ``--staging_dir``, where the build's run files lie instead ('': in ``staging``).
        staging_free: Free bytes where ``staging_dir`` lies (None: not known).
    """

    inputs: tuple[str, ...]
    output_dir: str
    tally: PlanTally
    splits: Mapping[str, SplitPlan]
    shard_rule: str
    change: FolderChange | None
    output_exists: bool
    rate: BuildRate
    max_bad_fraction: float | None
    plan_seconds: float = 0.0
    notes: tuple[str, ...] = ()
    validate: str = "structure"
    free_bytes: int | None = None
    staging: str = ""
    staging_dir: str = ""
    staging_free: int | None = None

    @property
    def inputs_found(self) -> int:
        """Inputs the build would count: files and manifest rows, and the listing's rejects."""
        return self.tally.inputs if self.tally.inputs is not None else sum(self.tally.found.values())

    def found_by_split(self) -> dict[str, dict[str, int]]:
        """Split (``BY_CONTENT`` for inputs their bytes place) -> class -> inputs listed."""
        found: dict[str, dict[str, int]] = {}
        for (split, label), count in sorted(self.tally.found.items()):
            found.setdefault(split or BY_CONTENT, {})[label] = count
        return found

    def rejected(self, duplicates: bool) -> dict[str, int]:
        """Reason -> inputs rejected, for the duplicate reasons or for the others."""
        return {reason: count for reason, (count, _) in sorted(self.tally.rejected.items())
                if (reason in DUPLICATE_REASONS) == duplicates}

    @property
    def disk(self) -> DiskNeed:
        """The free space the build needs where its output lies, at its peak."""
        return build_disk_need(sum(s.record_bytes for s in self.splits.values()))

    @property
    def build_seconds(self) -> float:
        return self.rate.seconds(self.tally.bytes_read, self.inputs_found)

    def refusals(self) -> list[str]:
        """Why the build would stop, one line each (empty: none is foreseen)."""
        lines = list(self.change.problems) if self.change is not None else []
        rejected = sum(n for n, _ in self.tally.rejected.values())
        appending = self.change is not None and self.change.appending
        # The rule publishing follows: copies of the set's images are no inputs of an append.
        verdict = rejection_verdict(self.inputs_found, rejected, self.tally.in_set if appending else 0,
                                    self.max_bad_fraction)
        inputs, bad = verdict.inputs, verdict.bad
        new = " new" if appending and self.tally.in_set else ""
        if verdict.kind == "no_inputs":
            lines.append("no input files or rows were found; check --input")
        elif verdict.kind == "all_rejected":
            lines.append(f"all {inputs}{new} inputs would be rejected: nothing would be published")
        elif verdict.kind == "too_many":
            lines.append(f"{bad} of {inputs}{new} inputs ({100.0 * bad / inputs:.1f}%) would be "
                         f"rejected, more than --max_bad_fraction {self.max_bad_fraction:g}: the build "
                         "would publish nothing")
        return lines

    def to_json(self) -> bytes:
        """The plan as JSON (what ``--plan_json`` writes)."""
        tally = self.tally
        found = self.found_by_split()
        change = self.change or FolderChange({}, tuple(sorted(self.splits)), (), (), ())
        obj = {
            "plan_version": PLAN_VERSION,
            "estimate": True,
            "inputs": list(self.inputs), "output_dir": self.output_dir,
            "found": {"inputs": self.inputs_found, "images_listed": sum(tally.found.values()),
                      "splits": found, "kinds": dict(sorted(tally.kinds.items()))},
            "input_bytes": tally.bytes_read, "files_read": tally.files_read,
            "formats": dict(tally.formats), "converted_to_png": dict(tally.converted),
            "rejected": {"total": sum(n for n, _ in tally.rejected.values()),
                         "checks": "header", "build_validate": self.validate,
                         "reasons": {r: {"count": n, "examples": [{"path": p, "detail": d} for p, d in ex]}
                                     for r, (n, ex) in sorted(tally.rejected.items())}},
            "duplicates": self.rejected(duplicates=True),
            "splits": {name: {"records": s.records, "classes": dict(s.classes),
                              "record_bytes": s.record_bytes, "largest_record": s.largest,
                              "num_shards": s.num_shards, "shard_bytes": s.shard_bytes}
                       for name, s in sorted(self.splits.items())},
            "record_sizes_estimated": tally.estimated_sizes,
            "shard_rule": self.shard_rule,
            "output_folder": {"exists": self.output_exists, "published": dict(change.published),
                              "new": list(change.new), "kept": list(change.kept), "dropped": list(change.dropped),
                              "replaced": [] if change.appending else list(change.replaced),
                              **({"appended": list(change.replaced)} if change.appending else {})},
            "disk": {"staged_bytes": self.disk.staged, "shard_bytes": self.disk.shards, "free_bytes": self.free_bytes,
                     **({"peak_bytes": self.disk.peak, "more_bytes": shortfall(self.disk.peak, self.free_bytes)}
                        if not self.staging_dir else
                        {"staging_dir": self.staging_dir, "staging_free_bytes": self.staging_free,
                         "staging_more_bytes": shortfall(self.disk.staged, self.staging_free),
                         "more_bytes": shortfall(self.disk.shards, self.free_bytes)})},
            "refusals": self.refusals(),
            "build_seconds": round(self.build_seconds, 1),
            "rate": asdict(self.rate),
            "plan_seconds": round(self.plan_seconds, 2),
            "notes": list(self.notes),
        }
        return (json.dumps(obj, indent=1, sort_keys=True) + "\n").encode("utf-8")

    def text(self) -> str:
        """The summary a person reads."""
        tally = self.tally
        lines = [f"Plan of a build of {', '.join(self.inputs)} into {self.output_dir}, in {self.plan_seconds:.1f} s "
                 "(an estimate; nothing was written)"]
        found = self.found_by_split()
        listing_rejects = self.inputs_found - sum(tally.found.values())
        lines.append(f"  inputs: {self.inputs_found} found"
                     + (f" ({listing_rejects} of them rejected by the listing)" if listing_rejects else "")
                     + f", {size_text(tally.bytes_read, 1)} read in {plural(tally.files_read, 'file')}")
        if set(tally.kinds) - {"file"}:  # say where they are when not all are files of their own
            lines.append("    from: " + ", ".join(plural(n, kind) for kind, n in sorted(tally.kinds.items())))
        for split, classes in found.items():
            lines.append(f"    {split}: {sum(classes.values())} in {plural(len(classes), 'class')}: "
                         + _counts(classes))
        if tally.formats:
            lines.append(f"  formats: {_counts(tally.formats)} (records)"
                         + (f"; converted to PNG: {_counts(tally.converted)}" if tally.converted else ""))
        others = self.rejected(duplicates=False)
        deeper = ("the build's --validate header makes the same checks" if self.validate == "header"
                  else f"the build's --validate {self.validate} checks more and may reject more")
        lines.append(f"  rejected: {sum(others.values())} (an estimate from header checks only; {deeper})"
                     + (":" if others else ""))
        for reason, count in others.items():
            named = tally.rejected[reason][1]
            more = f" and {count - len(named)} more" if count > len(named) else ""
            lines.append(f"    {reason} {count}: {', '.join(path for path, _ in named)}{more}")
        duplicates = self.rejected(duplicates=True)
        lines.append(f"  duplicates (same bytes, or the same path in a split): {sum(duplicates.values())}"
                     + (f" ({_counts(duplicates)})" if duplicates else ""))
        lines.append("  records and shards (sizes approximate"
                     + (f", {plural(tally.estimated_sizes, 'record')} estimated from the image's size"
                        if tally.estimated_sizes else "") + f"; {self.shard_rule}):")
        for name, split in sorted(self.splits.items()):
            lines.append(f"    {name}: {plural(split.records, 'record')}, ~{size_text(split.record_bytes, 1)} -> "
                         f"{plural(split.num_shards, 'shard')} of ~{size_text(split.shard_bytes, 1)}")
        if not self.splits:
            lines.append("    none: no record would be written")
        lines += self._folder_lines()
        lines.append(self._disk_line())
        per_input = self.rate.seconds_per_input
        lines.append(f"  build time: ~{_duration(self.build_seconds)} ({size_text(tally.bytes_read, 1)} at "
                     f"{self.rate.seconds_per_gib:.3g} s/GiB"
                     + (f" + {plural(self.inputs_found, 'input')} at {per_input * 1000:g} ms" if per_input else "")
                     + (f" + {self.rate.fixed_seconds:g} s start-up" if self.rate.fixed_seconds else "")
                     + f"; {self.rate.source})")
        lines += [f"  the build would refuse: {line}" for line in self.refusals()]
        lines += [f"  note: {note}" for note in self.notes]
        return "\n".join(lines)

    def _disk_line(self) -> str:
        need, free = self.disk, self.free_bytes
        if self.staging_dir:
            return (f"  disk: about {size_text(need.staged)} free needed in the file system of {self.staging_dir} "
                    f"(--staging_dir: records staged in run files){_free_clause(need.staged, self.staging_free)}, "
                    f"and about {size_text(need.shards)} in that of {self.output_dir} (shards staged in "
                    f"{self.staging or 'its staging'}, then published){_free_clause(need.shards, free)}")
        line = (f"  disk: about {size_text(need.peak)} free needed in the file system of {self.output_dir} at "
                f"the build's peak ({size_text(need.staged)} of records staged in {self.staging or 'its staging'}, then "
                f"{size_text(need.shards)} of shards)")
        return line + _free_clause(need.peak, free)

    def _folder_lines(self) -> list[str]:
        change = self.change
        if change is None:
            state = "exists and holds no shard set" if self.output_exists else "does not exist yet"
            return [f"  output folder {self.output_dir}: {state}; the build would publish "
                    f"{', '.join(sorted(self.splits)) or 'no split'}"]
        lines = [f"  output folder {self.output_dir}: holds a published set ({_counts(change.published)} records)"]
        if change.new:
            lines.append(f"    gains: {', '.join(f'{s} (~{self.splits[s].records})' for s in change.new)}")
        if change.replaced:  # an append keeps the published records: they count in the records after
            kept = change.published if change.appending else dict.fromkeys(change.published, 0)
            lines.append(("    appends to (its shards kept): " if change.appending else "    replaces: ") + ", ".join(
                f"{s} ({change.published[s]} -> ~{kept[s] + self.splits[s].records} records)" for s in change.replaced))
        lines.append("    keeps: " + (", ".join(f"{s} ({change.published[s]} records)" for s in change.kept)
                                      or "nothing else"))
        if change.dropped:
            lines.append("    loses (--drop_other_splits): "
                         + ", ".join(f"{s} ({change.published[s]} records)" for s in change.dropped))
        return lines


def _free_clause(need: int, free: int | None) -> str:
    """``; 1 GiB free there`` or ``; only 10 MiB free there: free about 20 MiB more first``; '' when not known."""
    if free is None:
        return ""
    more = shortfall(need, free)
    return (f"; only {size_text(free)} free there: free about {size_text(more)} more first" if more
            else f"; {size_text(free)} free there")


def make_plan(tally: PlanTally, *, inputs: Sequence[str], output_dir: str, target_bytes: int,
              num_shards: int | None, change: FolderChange | None, output_exists: bool, rate: BuildRate,
              max_bad_fraction: float | None, plan_seconds: float = 0.0,
              notes: Sequence[str] = (), validate: str = "structure", free_bytes: int | None = None,
              staging: str = "", staging_dir: str = "", staging_free: int | None = None) -> Plan:
    """Turns a tally into a plan: shards per split by the build's rule (``--shard_size_mb`` in bytes,
    ``--num_shards`` or None), and the rest as ``Plan``'s attributes."""
    classes: dict[str, dict[str, int]] = {}
    for (split, label), count in sorted(tally.records.items()):
        classes.setdefault(split, {})[label] = count
    splits = {}
    for name, by_class in classes.items():
        records, size = sum(by_class.values()), tally.record_bytes.get(name, 0)
        largest = tally.largest.get(name, 0)
        layout = lay_out_split(name, [(0, records, size, largest)], target_bytes, num_shards, bucket_bits=0)
        splits[name] = SplitPlan(name, records, by_class, size, largest, layout.totals.num_shards)
    rule = (f"--num_shards {num_shards}" if num_shards
            else f"--shard_size_mb {target_bytes / MIB:.4g}: shards of 2/3 to 4/3 of it")
    return Plan(tuple(inputs), output_dir, tally, splits, rule, change, output_exists, rate,
                max_bad_fraction, plan_seconds, tuple(notes), validate, free_bytes, staging, staging_dir,
                staging_free)


def _counts(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{name or '(none)'} {count}" for name, count in counts.items())


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
