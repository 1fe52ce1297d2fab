"""WebDataset shards: brace ranges of shard names, members grouped into samples, and their labels.

Adjacent members sharing a key (the path up to the first ``.`` of the file name) form one sample, one
input; docs/inputs.md says which members give its image, label and features.
"""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Sequence

from braceexpand import UnbalancedBracesError, braceexpand

from transforms.archives.members import WEBDATASET, MemberRef, member_name, unsafe_member
from transforms.archives.tar_index import TarMember
from transforms.example.features import FeatureValueError, ManifestTyping
from transforms.images.annotations import row_annotations
from transforms.images.class_labels import class_label, class_labels_of
from transforms.images.inputs import LabelRules, check_label, is_hidden, shown_name
from transforms.images.items import SourceImage
from transforms.images.objects import BoxError
from transforms.shardset.dead_letters import DeadLetter
from transforms.shardset.naming import check_split_name
from transforms.errors import PlanError

__all__ = ["IMAGE_EXTENSIONS", "LABEL_EXTENSIONS", "expand_braces", "key_and_extension", "Sample", "samples_of",
           "ambiguity", "sample_entry"]

IMAGE_EXTENSIONS = ("jpg", "jpeg", "png", "webp")
LABEL_EXTENSIONS = ("cls", "json")
# Label members are read during listing; larger ones are not labels.
MAX_LABEL_BYTES = 1 << 20


def expand_braces(pattern: str) -> list[str]:
    """``shard-{000..002}.tar`` -> ``shard-000.tar``, ``shard-001.tar``, ``shard-002.tar``.

    Braces are read as webdataset reads them (the ``braceexpand`` package, bash's rules).

    Raises:
        PlanError: Braces that do not pair up (``{`` not closed, ``}`` without ``{``).
    """
    try:
        return list(braceexpand(pattern))
    except UnbalancedBracesError:
        raise PlanError(f"{pattern!r}: braces do not pair up (a '{{' not closed or a '}}' without '{{')") from None


def key_and_extension(name: str) -> tuple[str, str]:
    """A member's sample key (its path up to the first ``.`` of its file name) and extension (lower case)."""
    folder, base = posixpath.split(name)
    stem, dot, ext = base.partition(".")
    return posixpath.join(folder, stem), ext.lower() if dot else ""


@dataclass
class Sample:
    """The members of one key: extension -> ``TarMember`` (the first of an extension), and the names of
    members whose extension came again (``twice``)."""

    key: str
    members: dict[str, TarMember] = field(default_factory=dict)
    twice: list[str] = field(default_factory=list)


def samples_of(members: Iterable[TarMember]) -> Iterator[Sample]:
    """Groups a shard's members into samples, in order: adjacent members sharing a key.

    Folders, hidden members and members that are not files are left out; a member whose path is
    unsafe is kept, for its sample's dead letter.
    """
    current: Sample | None = None
    for member in members:
        if not member.is_file or (is_hidden(member.name) and unsafe_member(member.name) is None):
            continue
        key, ext = key_and_extension(member.name)
        if current is None or current.key != key:
            if current is not None:
                yield current
            current = Sample(key)
        if ext in current.members:
            current.twice.append(member.name)
        else:
            current.members[ext] = member
    if current is not None:
        yield current


def ambiguity(sample: Sample) -> str | None:
    """Why a sample has no one image or label: a member named twice (``000017.jpg`` appended again,
    two ``.cls``) or images of two extensions (``.jpg`` and ``.png``); None when it has not."""
    problems = []
    for name in dict.fromkeys(sample.twice):
        first = sample.members[key_and_extension(name)[1]].name  # the same name, or its case differs
        problems.append(f"{name} twice" if first == name else f"{first} and {name}")
    images = [sample.members[ext].name for ext in IMAGE_EXTENSIONS if ext in sample.members]
    if len(images) > 1:
        problems.append(f"{len(images)} images ({', '.join(images)})")
    if not problems:
        return None
    return f"sample is ambiguous: {'; '.join(problems)}; which member is meant is not known"


def sample_entry(shard: str, sample: Sample, read: Callable[[TarMember], bytes], rules: LabelRules,
                 typing: ManifestTyping, class_names: Sequence[str] | None) -> SourceImage | DeadLetter:
    """The input of one sample: its image member, label and features, or the dead letter saying why not.

    Args:
        shard: The shard (path or URI) holding ``sample``.
        read: Reads a (small) member's bytes: its ``cls`` or ``json``.
        typing: The build's feature types, shared by the samples of a shard.
        class_names: ``--class_names``/``--labels_file``, naming integer class indices.
    """
    if ambiguous := ambiguity(sample):
        return DeadLetter(shown_name(member_name(shard, sample.key)), "ambiguous_sample", ambiguous)
    ext = next((e for e in IMAGE_EXTENSIONS if e in sample.members), None)
    if ext is None:
        shown = ", ".join(sorted(sample.members)) or "none"
        return DeadLetter(shown_name(member_name(shard, sample.key)), "no_image",
                          f"sample has no {'/'.join(IMAGE_EXTENSIONS)} member (its members: {shown})")
    image = sample.members[ext]
    name = shown_name(member_name(shard, image.name))
    ref = MemberRef(shard, WEBDATASET, image.offset, image.size, image.size)
    labels, features, objects, split = None, (), None, ""
    for label_ext in LABEL_EXTENSIONS:
        member = sample.members.get(label_ext)
        if member is not None and member.size > MAX_LABEL_BYTES:
            return DeadLetter(name, "no_label", f"sample's {label_ext} member has {member.size} bytes; "
                                                f"a label is at most {MAX_LABEL_BYTES}")
    if "cls" in sample.members:
        data = read(sample.members["cls"])
        try:
            text = data.decode("utf-8").strip()
        except UnicodeDecodeError as err:
            return DeadLetter(name, "bad_label", f"sample's cls member is not UTF-8 text (byte {err.start}: "
                                                 f"{data[err.start:err.start + 1]!r}); a label is a class index "
                                                 "or a class name")
        label, why = class_label(text, class_names)
        why = why and f"sample's cls member: {why}"
    elif "json" in sample.members:
        try:
            row = json.loads(read(sample.members["json"]))
        except (ValueError, RecursionError) as err:
            return DeadLetter(name, "no_label", f"sample's json member is not valid JSON: {err}")
        if not isinstance(row, dict):
            return DeadLetter(name, "no_label", "sample's json member is not a JSON object")
        row = {k: v for k, v in row.items() if k != "path"}
        try:
            labels, features, objects = row_annotations(row, False, typing, rules.multi_label, rules.bbox_format)
        except FeatureValueError as err:
            return DeadLetter(name, "bad_feature", str(err))
        except BoxError as err:
            return DeadLetter(name, "bad_box", str(err))
        split = row.get("split") or ""
        if labels is not None:
            labels, why = class_labels_of(labels, class_names)
            label = None if why else labels[0] if labels else ""
        else:
            label, why = class_label(row.get("label"), class_names)
    else:
        return DeadLetter(name, "no_label", "sample has no cls or json member to give its label")
    if label is None:
        return DeadLetter(name, "bad_label", why)
    if problem := next(filter(None, map(check_label, labels or (label,))), None):
        return DeadLetter(name, "bad_label", problem)
    if split:
        try:
            check_split_name(split)
        except (PlanError, TypeError) as err:
            return DeadLetter(name, "bad_split", str(err))
    rel = f"{posixpath.basename(shard)}!{image.name}"
    return SourceImage(path=name, relpath=rel, split=split or rules.unsplit(), label=label,
                       labels=labels, features=features, objects=objects, member=ref)

