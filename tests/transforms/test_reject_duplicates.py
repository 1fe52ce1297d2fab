"""Copies of one image resolved with a combine: the tally, the choice, each copy's dead letter, and the step."""

from __future__ import annotations

import random

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from transforms.images.image_codec import ImageInfo
from transforms.images.duplicates import CopyTally, PublishedCopy, copy_choice_key, copy_letter
from tests.helpers import copy_choice
from transforms.images.items import ImageMeta, SourceImage
from transforms.reject_duplicates import RejectDuplicateImages
from transforms.shardset.dead_letters import DEAD_LETTERS

_INFO = ImageInfo("png", 2, 2, 3)
_SPLITS = ("train", "test", "validation", "extra")


def _meta(path: str, split: str, sha: str = "ab" * 32) -> ImageMeta:
    return ImageMeta(SourceImage(path, path.rsplit("/", 1)[-1], split, "cat"), 0, sha, _INFO, 100, 1)


def _copies(seed: int, count: int, published: int) -> list:
    rng = random.Random(seed)
    values = [_meta(f"d{rng.randrange(9)}/{i:03d}.png", rng.choice(_SPLITS)) for i in range(count)]
    values += [PublishedCopy(rng.choice(_SPLITS)) for _ in range(published)]
    rng.shuffle(values)
    return values


def _tally(values) -> CopyTally:
    tally = CopyTally()
    for value in values:
        tally = tally.add(value)
    return tally


@pytest.mark.parametrize("seed, count, published, written", [
    (0, 1, 0, None), (1, 2, 0, None), (2, 30, 0, None), (3, 30, 2, ["train"]),
    (4, 30, 3, list(_SPLITS)), (5, 0, 2, None), (6, 200, 1, ["train", "test"]),
])
def test_tallies_merged_in_any_pieces_choose_what_the_whole_list_chose(seed, count, published, written) -> None:
    values = _copies(seed, count, published)
    pieces = [values[i::5] for i in range(5)]
    tally = CopyTally.merged(_tally(piece) for piece in pieces)
    assert tally == _tally(values)
    assert tally.copies == count
    kept, dead = copy_choice(values, written)
    assert tally.kept(written) == kept
    choice = tally.choice(written)
    letters = [] if choice is None else [copy_letter(v, choice) for v in values if isinstance(v, ImageMeta)]
    assert sorted((d for d in letters if d is not None), key=lambda d: d.path) == sorted(dead, key=lambda d: d.path)
    assert len(dead) + (kept is not None) == count  # every copy kept or dead-lettered


def test_the_step_keeps_one_copy_and_letters_every_other(monkeypatch) -> None:
    copies = [_meta(f"in/{i:04d}.png", "train", "cc" * 32) for i in range(300)]
    others = [_meta(f"in/u{i}.png", "train", f"{i:064x}") for i in range(5)]
    with TestPipeline() as p:
        out = p | beam.Create(copies[::-1] + others) | RejectDuplicateImages()
        assert_that(out["main"] | "Paths" >> beam.Map(lambda m: m.source.path),
                    equal_to(["in/0000.png"] + [m.source.path for m in others]), label="Kept")
        assert_that(out[DEAD_LETTERS] | "Letters" >> beam.Map(lambda d: (d.path, d.reason)),
                    equal_to([(f"in/{i:04d}.png", "duplicate_image") for i in range(1, 300)]), label="Dead")


def test_no_step_groups_the_copies_of_an_image() -> None:
    """The copies are tallied with a combine: the only grouping is the combine's own."""
    p = beam.Pipeline()
    _ = p | beam.Create([_meta("a.png", "train")]) | "Reject" >> RejectDuplicateImages()
    kinds = []

    class Visitor(beam.pipeline.PipelineVisitor):
        def enter_composite_transform(self, node):
            kinds.append((node.full_label, type(node.transform).__name__))

        def visit_transform(self, node):
            kinds.append((node.full_label, type(node.transform).__name__))

    p.visit(Visitor())
    grouping = [label for label, kind in kinds if kind == "GroupByKey"]
    assert grouping and all(label.startswith("Reject/TallyCopies/") for label in grouping), grouping
    assert ("Reject/TallyCopies", "CombinePerKey") in kinds


class _CountedLookups(dict):
    """The choices side input, counting the keys looked up (each is a request to the runner)."""

    looked_up: list

    def __getitem__(self, key):
        self.looked_up.append(key)
        return self.get(key, [])


def test_a_copy_is_looked_up_only_when_its_image_has_copies_to_reject() -> None:
    from transforms.reject_duplicates import _LetterCopiesFn

    kept, other = _meta("in/a.png", "train", "cc" * 32), _meta("in/b.png", "train", "cc" * 32)
    tally = _tally([kept, other])
    choices = _CountedLookups({"cc" * 32: [tally.choice()]})
    choices.looked_up = []
    fn = _LetterCopiesFn()
    fn.start_bundle()
    metas = [_meta(f"in/u{i}.png", "train", f"{i:064x}") for i in range(50)] + [other, kept]
    letters = [letter for keyed in _packed_refs(metas)
               for letter in fn.process(keyed, choices, [copy_choice_key("cc" * 32)])]
    assert [(d.path, d.reason) for d in letters] == [("in/b.png", "duplicate_image")]
    assert choices.looked_up == ["cc" * 32, "cc" * 32]  # the 50 unique images cost no request


def _packed_refs(metas) -> list:
    """The ``(None, pack)`` elements ``_PackCopyRefsFn`` makes of ``metas`` in one bundle."""
    from apache_beam.utils.windowed_value import WindowedValue

    from transforms.reject_duplicates import _PackCopyRefsFn

    fn = _PackCopyRefsFn()
    fn.start_bundle()
    out = [keyed for meta in metas for keyed in fn.process(meta) or ()]
    out += [w.value if isinstance(w, WindowedValue) else w for w in fn.finish_bundle()]
    return out


def test_the_copies_cross_to_their_letters_packed_and_compressed() -> None:
    # What each copy's dead letter needs leaves the reading step in compressed packs of ~1 MiB of
    # refs: a runner holds a few elements and a fraction of the refs' bytes, not one element a copy.
    from transforms.reject_duplicates import _LetterCopiesFn

    metas = [_meta(f"/data/images/cat/copy-{i:07d}.png", "train", "cc" * 32) for i in range(20_000)]
    packed = _packed_refs(metas)
    refs_bytes = sum(len(f"{m.sha256}{m.source.path}{m.source.relpath}{m.source.split}") for m in metas)
    assert 2 <= len(packed) <= 4 and all(key is None for key, _ in packed)
    assert sum(len(pack) for _, pack in packed) * 4 < refs_bytes
    fn = _LetterCopiesFn()
    fn.start_bundle()
    choice = _tally(metas).choice()
    letters = [d for keyed in packed for d in fn.process(keyed, {"cc" * 32: [choice]}, [copy_choice_key("cc" * 32)])]
    assert sorted(d.path for d in letters) == [m.source.path for m in metas[1:]]  # each copy once, but the kept


def test_published_keys_come_from_the_keys_file_or_else_from_the_shard(tmp_path) -> None:
    import hashlib
    import os

    from tests.helpers import encode_example
    from transforms.reject_duplicates import _crc32c_of, _shard_keys
    from transforms.tfrecord.framing import frame_record

    keys = [hashlib.sha256(bytes([n])).hexdigest() for n in range(3)]
    shard = tmp_path / "train-00000-of-00001.tfrecord"
    shard.write_bytes(b"".join(frame_record(encode_example({"image/key/sha256": [k.encode()]})) for k in keys))
    os.makedirs(tmp_path / "index")
    listed = [keys[2], keys[0]]  # not the shard's: tells which source was read
    data = b"".join(bytes.fromhex(k) for k in listed)
    (tmp_path / "index" / (shard.name + ".keys")).write_bytes(data)
    copies = lambda crc: [key for key, copy in _shard_keys(("train", str(shard), crc), "none")]  # noqa: E731
    assert copies(_crc32c_of(data)) == listed  # the keys file, 32 bytes a record
    assert copies(None) == keys  # no keys file listed (an older set): the records
    assert copies("AAAAAA==") == keys  # not the listed keys file: the records
    os.remove(tmp_path / "index" / (shard.name + ".keys"))
    assert copies(_crc32c_of(data)) == keys  # gone: the records
