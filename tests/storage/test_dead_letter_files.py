"""Dead letters in parts: staged sorted by the rejecting steps, merged at publish, refusals from counts."""

from __future__ import annotations

import json
import os
import random

import pytest

from transforms.errors import PublishError
from transforms.shardset import dead_letters as dl
from transforms.shardset.dead_letters import DeadLetter, RejectionSummary, rejection_details, rejection_problem
from transforms.storage import dead_letter_files
from transforms.storage.dead_letter_files import write_dead_letter_part, write_dead_letters

_REASONS = ("not_an_image", "truncated", "unreadable", "duplicate_image")


def _letters(count: int, seed: int = 0) -> list[DeadLetter]:
    rng = random.Random(seed)
    return [DeadLetter(f"in/{rng.randrange(count // 2 + 1):05d}.png", rng.choice(_REASONS),
                       f"error {rng.randrange(3)} ü") for _ in range(count)]


def _expected_bytes(letters: list[DeadLetter]) -> bytes:
    """What publishing wrote before parts: every letter sorted by (path, reason, error), in one piece."""
    ordered = sorted(letters, key=lambda d: (d.path, d.reason, d.error))
    return "".join(d.to_json() + "\n" for d in ordered).encode("utf-8")


def _cut(letters: list[DeadLetter], sizes: list[int]) -> list[list[DeadLetter]]:
    pieces, start = [], 0
    for size in sizes:
        pieces.append(letters[start:start + size])
        start += size
    return pieces + [letters[start:]]


@pytest.mark.parametrize("count, sizes, fan_in", [
    (0, [], 32),                 # no dead letters: an empty file
    (1, [], 32),
    (40, [40], 32),              # one part
    (200, [7, 50, 1, 0, 60], 32),  # parts of any size, one empty
    (200, [3] * 20, 4),          # 21 parts merged in rounds of 4
    (500, [17] * 29, 2),         # rounds of 2: five rounds
])
def test_merged_parts_give_the_bytes_of_one_sorted_list(tmp_path, monkeypatch, count, sizes, fan_in) -> None:
    monkeypatch.setattr(dead_letter_files, "MERGE_FAN_IN", fan_in)
    out, run = str(tmp_path / "out"), "r" * 32
    staging = os.path.join(out, ".staging", run)
    os.makedirs(staging)
    letters = _letters(count)
    parts = [write_dead_letter_part(piece, out, run) for piece in _cut(letters, sizes)]
    summary = write_dead_letters(out, staging, parts)
    assert (tmp_path / "out" / "dead_letters.jsonl").read_bytes() == _expected_bytes(letters)
    assert summary == RejectionSummary.of(letters)
    assert summary.count == count
    # Only the workers' parts are left in staging: the merge rounds' files are gone.
    assert sorted(os.listdir(staging)) == sorted(os.path.basename(p.path) for p in parts)


def test_each_part_is_sorted_and_carries_its_counts(tmp_path) -> None:
    letters = _letters(30, seed=3)
    part = write_dead_letter_part(letters, str(tmp_path), "r" * 32)
    lines = open(part.path, "rb").read().splitlines(keepends=True)
    assert [DeadLetter.from_json(line) for line in lines] == sorted(letters, key=dl.letter_order)
    assert part.summary.count == 30
    assert sum(n for _, n in part.summary.by_reason) == 30


def test_a_part_gone_or_short_refuses_the_publish(tmp_path) -> None:
    out, run = str(tmp_path / "out"), "r" * 32
    staging = os.path.join(out, ".staging", run)
    os.makedirs(staging)
    parts = [write_dead_letter_part(_letters(5, seed=s), out, run) for s in range(3)]
    os.remove(parts[1].path)
    with pytest.raises(PublishError, match="staged dead-letter part .* is gone"):
        write_dead_letters(out, staging, parts)
    parts = [write_dead_letter_part(_letters(5, seed=s), out, run) for s in range(3)]
    with open(parts[2].path, "rb+") as fh:
        fh.truncate(len(fh.readline()))  # one line left of five
    with pytest.raises(PublishError, match="hold 11 lines but 15 dead letters were counted"):
        write_dead_letters(out, staging, parts)


@pytest.mark.parametrize("seed, count, pieces", [(0, 1, 1), (1, 9, 3), (2, 60, 7), (3, 300, 11), (4, 5, 5)])
def test_summaries_of_parts_merge_into_the_summary_of_all(seed, count, pieces) -> None:
    letters = _letters(count, seed)
    rng = random.Random(seed)
    cuts = sorted(rng.randrange(count + 1) for _ in range(pieces - 1))
    parts = [letters[a:b] for a, b in zip([0, *cuts], [*cuts, count])]
    merged = RejectionSummary.merged(RejectionSummary.of(part) for part in parts)
    assert merged == RejectionSummary.of(letters)


def _details_from_the_list(dead_letters: list[DeadLetter], examples: int = 3) -> list[str]:
    """``rejection_details`` as it was computed from every dead letter in a list."""
    import collections

    dead_letters = sorted(dead_letters, key=dl.letter_order)
    counts = collections.Counter(d.reason for d in dead_letters)
    ranked = sorted(counts, key=lambda r: (-counts[r], r))
    lines = ["  rejected by reason: " + ", ".join(f"{r} {counts[r]}" for r in ranked)]
    ordered = sorted(dead_letters, key=lambda d: d.path)
    firsts = [next(d for d in ordered if d.reason == r) for r in ranked]
    chosen = (firsts + [d for d in ordered if d not in firsts])[:examples]
    return lines + [f"  e.g. {d.path}: {d.reason}: {d.error}" for d in chosen]


@pytest.mark.parametrize("seed, count", [(0, 1), (1, 2), (2, 4), (3, 50), (4, 400)])
def test_the_refusal_from_a_summary_names_what_the_whole_list_named(seed, count) -> None:
    letters = _letters(count, seed)
    one_reason = [DeadLetter(f"z/{i}", "unreadable", "gone") for i in range(count)]
    for found in (letters, one_reason):
        parts = [RejectionSummary.of(found[i::3]) for i in range(3)]
        assert rejection_details(RejectionSummary.merged(parts)) == _details_from_the_list(found)
        problem = rejection_problem(2 * count, count, RejectionSummary.merged(parts), "d.jsonl", 0.1)
        assert problem == rejection_problem(2 * count, count, RejectionSummary.of(found), "d.jsonl", 0.1)
        assert problem.startswith(f"{count} of {2 * count} inputs (50.0%) were rejected")


def _csv_of_missing(tmp_path, missing: int, present: int) -> str:
    from tests.imagegen import png

    rows = ["path,label"]
    for i in range(present):
        path = tmp_path / f"ok{i}.png"
        path.write_bytes(png(size=(8 + i, 8)))
        rows.append(f"{path},{'ab'[i % 2]}")
    rows += [f"{tmp_path / 'gone' / f'{i:04d}.png'},a" for i in range(missing)]
    (tmp_path / "list.csv").write_text("\n".join([rows[0], *reversed(rows[1:])]) + "\n")  # not in path order
    return str(tmp_path / "list.csv")


def test_a_build_stages_its_dead_letters_in_bounded_parts(tmp_path, monkeypatch) -> None:
    """No step is given every dead letter: parts of at most PART_LETTERS reach publishing."""
    from beam_jobs import build_shards
    from transforms import shard_sink

    monkeypatch.setattr(shard_sink, "PART_LETTERS", 4)
    staged = []
    real = shard_sink.write_dead_letter_part

    def recording(letters, output_dir, run_id):
        letters = list(letters)
        staged.append(len(letters))
        return real(letters, output_dir, run_id)

    monkeypatch.setattr(shard_sink, "write_dead_letter_part", recording)
    out = tmp_path / "out"
    status = build_shards.run(["--input", _csv_of_missing(tmp_path, 23, 3), "--output_dir", str(out),
                               "--max_bad_fraction", "0.95"])
    assert status == 0
    assert sum(staged) == 23 and max(staged) <= 4 and len(staged) >= 6
    lines = (out / "dead_letters.jsonl").read_bytes().splitlines()
    paths = [json.loads(line)["path"] for line in lines]
    assert paths == sorted(paths) and len(paths) == 23
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["dead_letters"] == 23
    assert not (out / ".staging").exists()


def test_a_refused_build_names_the_counts_and_examples_from_the_parts(tmp_path, capsys) -> None:
    from beam_jobs import build_shards

    out = tmp_path / "out"
    status = build_shards.run(["--input", _csv_of_missing(tmp_path, 9, 3), "--output_dir", str(out),
                               "--max_bad_fraction", "0.5"])
    assert status == 1
    err = capsys.readouterr().err
    assert "9 of 12 inputs (75.0%) were rejected, more than --max_bad_fraction 0.5" in err
    assert "rejected by reason: unreadable 9" in err
    assert f"e.g. {tmp_path / 'gone' / '0000.png'}: unreadable" in err
    assert len((out / "dead_letters.jsonl").read_bytes().splitlines()) == 9


def test_a_retried_publish_keeps_the_file_its_first_attempt_wrote(tmp_path) -> None:
    out, run = str(tmp_path / "out"), "r" * 32
    staging = os.path.join(out, ".staging", run)
    os.makedirs(staging)
    letters = _letters(40, seed=5)
    parts = [write_dead_letter_part(piece, out, run) for piece in _cut(letters, [10, 10])]
    write_dead_letters(out, staging, parts)
    for part in parts:  # the first attempt finished: staging cleared
        os.remove(part.path)
    published = (tmp_path / "out" / "dead_letters.jsonl").read_bytes()
    assert write_dead_letters(out, staging, parts).count == 40
    assert (tmp_path / "out" / "dead_letters.jsonl").read_bytes() == published
    (tmp_path / "out" / "dead_letters.jsonl").write_bytes(published.split(b"\n", 1)[1])  # one line short
    with pytest.raises(PublishError, match="parts are gone and dead_letters.jsonl does not hold the 40"):
        write_dead_letters(out, staging, parts)


def test_an_appends_letters_the_set_holds_already_are_counted_apart_and_not_written_twice(tmp_path) -> None:
    from transforms.storage.dead_letter_files import dead_lettered_inputs, repeated_letters

    out, run = str(tmp_path / "out"), "r" * 32
    staging = os.path.join(out, ".staging", run)
    os.makedirs(staging)
    published = [DeadLetter("in/a.jpg", "not_an_image", "text"), DeadLetter("in/b.jpg", "empty_file", "0 bytes")]
    with open(os.path.join(out, "dead_letters.jsonl"), "w", encoding="utf-8") as fh:
        fh.writelines(d.to_json() + "\n" for d in published)
    known = dead_lettered_inputs(os.path.join(out, "dead_letters.jsonl"))
    assert known == {("in/a.jpg", "not_an_image"), ("in/b.jpg", "empty_file")}
    assert dead_lettered_inputs(os.path.join(out, "absent.jsonl")) == set()
    letters = [DeadLetter("in/a.jpg", "not_an_image", "text"),  # the same input, the same reason: known
               DeadLetter("in/b.jpg", "not_an_image", "now text"),  # another reason: a new bad input
               DeadLetter("in/c.jpg", "duplicate_image", "x " + dl.IN_APPENDED_SET),  # in the set: not bad
               DeadLetter("in/d.jpg", "truncated", "cut")]
    parts = [write_dead_letter_part(letters[:2], out, run), write_dead_letter_part(letters[2:], out, run)]
    repeated, new_bad = repeated_letters(parts, known)
    assert repeated == 1
    assert (new_bad.count, dict(new_bad.by_reason)) == (2, {"not_an_image": 1, "truncated": 1})
    target = os.path.join(staging, "dead_letters.jsonl.next")
    write_dead_letters(out, staging, parts, target=target, before=os.path.join(out, "dead_letters.jsonl"),
                       known=known)
    with open(target, "rb") as fh:
        written = [DeadLetter.from_json(line) for line in fh]
    assert written == published + sorted(letters[1:], key=dl.letter_order)


def test_an_input_now_in_the_appended_set_is_not_also_counted_as_a_repeated_letter(tmp_path) -> None:
    # A copy the first build dead-lettered (duplicate_image) is, on the append, a copy of an image the set
    # holds (duplicate_image, in the appended set): counted once, as present, never also as repeated.
    from transforms.storage.dead_letter_files import dead_lettered_inputs, repeated_letters

    out, run = str(tmp_path / "out"), "r" * 32
    staging = os.path.join(out, ".staging", run)
    os.makedirs(staging)
    published = [DeadLetter("in/copy.jpg", "duplicate_image", "same bytes as in/a.jpg, which is kept")]
    with open(os.path.join(out, "dead_letters.jsonl"), "w", encoding="utf-8") as fh:
        fh.writelines(d.to_json() + "\n" for d in published)
    known = dead_lettered_inputs(os.path.join(out, "dead_letters.jsonl"))
    letters = [DeadLetter("in/copy.jpg", "duplicate_image", "same bytes as an image " + dl.IN_APPENDED_SET)]
    parts = [write_dead_letter_part(letters, out, run)]
    repeated, new_bad = repeated_letters(parts, known)
    assert (repeated, new_bad.count) == (0, 0)
    target = os.path.join(staging, "dead_letters.jsonl.next")
    write_dead_letters(out, staging, parts, target=target, before=os.path.join(out, "dead_letters.jsonl"),
                       known=known)
    with open(target, "rb") as fh:
        written = [DeadLetter.from_json(line) for line in fh]
    assert written == published + letters  # listed as this run's letter, as every input the set holds is
