"""Archives, WebDataset shards and Parquet files as build inputs.

The same images as a folder, a tar, a ``.tar.gz``, a zip, a tar of class
tars, WebDataset shards and Parquet files give records with the same image
bytes and labels (compared by content hash and label); each member is one
input, named ``ARCHIVE!MEMBER`` when it is a dead letter.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import tarfile
import zipfile
import zlib

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests import hostile_tars
from tests.archive_fixtures import (CLASSES, add_bytes, files_of, make_parquet, make_shards, make_tar,
                                    make_tar_of_tars, make_zip)
from tests.shard_fixtures import dead_letters, examples, load_manifest, make_class_tree, run_build, shard_files
from tests.trees import Part
from transforms.archives.members import MemberRef, archive_kind, is_parquet_pattern, is_shard_pattern, label_path
from transforms.archives.parquet_rows import class_names_of, columns_problem
from transforms.archives.tar_index import member_path, tar_members
from transforms.archives.webdataset import expand_braces, samples_of
from transforms.archives.zip_index import member_bytes, zip_members
from transforms.errors import ImageError, PlanError
from transforms.images.items import ImageMeta, SourceImage
from transforms.images.image_codec import ImageInfo
from transforms.storage.member_reads import read_member

import pickle


def _records(out: str) -> dict[str, tuple[str, int]]:
    """sha256 of each record's image -> (class name, class index)."""
    got = {}
    for name in shard_files(out):
        for ex in examples(os.path.join(out, name)):
            got[hashlib.sha256(ex["image/encoded"]).hexdigest()] = (ex["image/class/text"].decode(),
                                                                   ex["image/class/label"])
    return got


def _filenames(out: str) -> list[str]:
    return sorted(ex["image/filename"].decode() for name in shard_files(out)
                  for ex in examples(os.path.join(out, name)))


TREE = (Part(per_class=5, broken=True),)  # 15 images, 3 broken files


@pytest.fixture(scope="module")
def folder_build(tree, tmp_path_factory):
    from beam_jobs import build_shards

    out = str(tmp_path_factory.mktemp("folder_out"))
    assert build_shards.run(["--input", tree, "--output_dir", out, "--max_bad_fraction", "0.5"]) == 0
    return out


def _container(kind: str, root: str, where: str) -> tuple[str, list[str]]:
    """The container input of ``kind`` holding ``root``'s files, and the build's extra flags."""
    if kind == "tar":
        return make_tar(root, os.path.join(where, "photos.tar")), []
    if kind == "tar.gz":
        return make_tar(root, os.path.join(where, "photos.tar.gz"), "w:gz"), []
    if kind == "zip":
        return make_zip(root, os.path.join(where, "photos.zip")), []
    if kind == "tar_of_tars":
        return make_tar_of_tars(root, os.path.join(where, "train.tar")), []
    if kind == "webdataset":
        return make_shards(root, os.path.join(where, "shards")), ["--class_names", ",".join(CLASSES)]
    if kind == "webdataset_glob":
        make_shards(root, os.path.join(where, "shards"))
        return os.path.join(where, "shards", "shard-*.tar"), ["--class_names", ",".join(CLASSES)]
    if kind == "parquet":
        return make_parquet(root, os.path.join(where, "train-00000-of-00001.parquet")), []
    if kind == "parquet_strings":
        return make_parquet(root, os.path.join(where, "plain.parquet"), hugging_face=False), []
    raise AssertionError(kind)


KINDS = ("tar", "tar.gz", "zip", "tar_of_tars", "webdataset", "webdataset_glob", "parquet", "parquet_strings")


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_each_container_gives_the_folders_records(kind, tree, folder_build, tmp_path, capsys):
    source, flags = _container(kind, tree, str(tmp_path))
    out = str(tmp_path / "out")
    status, stdout, err = run_build(capsys, "--input", source, "--output_dir", out, "--max_bad_fraction", "0.5",
                                    *flags)
    assert status == 0, err
    assert _records(out) == _records(folder_build)
    assert len(_records(out)) == 15
    assert open(os.path.join(out, "labels.txt")).read() == "daisy\nrose\ntulip\n"
    # Every member is one input: the three broken files are dead letters named in the container.
    dead = dead_letters(out)
    assert sorted(d["reason"] for d in dead) == sorted(d["reason"] for d in dead_letters(folder_build))
    container = source.split("{")[0].rsplit("/", 1)[0] if kind.startswith("webdataset") else source
    assert all(d["path"].startswith(container) and "!" in d["path"] for d in dead), dead
    manifest = load_manifest(out)
    assert manifest["records"] + manifest["dead_letters"] == 18
    assert "written + dead-lettered = 18 inputs" in stdout
    # image/filename is the member named in its container, as the dead letters name it.
    names = _filenames(out)
    assert all("!" in name for name in names)
    if kind in ("tar", "tar.gz", "zip"):
        base = os.path.basename(source)
        assert names == sorted(f"{base}!{rel}" for rel in files_of(tree)
                               if rel.rsplit("/", 1)[1] not in ("cut.jpg", "notes.jpg", "empty.png"))
        assert sorted(d["path"] for d in dead) == [f"{source}!daisy/cut.jpg", f"{source}!rose/empty.png",
                                                  f"{source}!rose/notes.jpg"]
    if kind == "tar_of_tars":
        assert f"{source}!daisy.tar!cut.jpg" in [d["path"] for d in dead]
        assert "train.tar!tulip.tar!tulip_004.jpg" in names


def _hugging_face_export(tree: str, folder) -> list[str]:
    """``tree`` as a Hugging Face export: two Parquet files, a dataset card and a hidden file."""
    folder.mkdir()
    rels = files_of(tree)
    make_parquet(tree, str(folder / "train-00000-of-00002.parquet"), rels=rels[::2])
    make_parquet(tree, str(folder / "train-00001-of-00002.parquet"), rels=rels[1::2])
    (folder / "README.md").write_text("# a dataset card\n")
    (folder / ".gitattributes").write_text("*.parquet filter=lfs\n")
    return rels


@pytest.mark.slow
@pytest.mark.parametrize("given", ["*.parquet", "train-{00000,00001}-of-00002.parquet", ""])
def test_parquet_files_by_pattern_or_folder_give_the_folders_records(given, tree, folder_build, tmp_path, capsys):
    rels = _hugging_face_export(tree, tmp_path / "hf")
    source = str(tmp_path / "hf" / given) if given else str(tmp_path / "hf")
    out = str(tmp_path / "out")
    status, stdout, err = run_build(capsys, "--input", source, "--output_dir", out, "--max_bad_fraction", "0.5")
    assert status == 0, err
    assert _records(out) == _records(folder_build)
    assert open(os.path.join(out, "labels.txt")).read() == "daisy\nrose\ntulip\n"
    assert "written + dead-lettered = 18 inputs" in stdout
    broken = ("cut.jpg", "notes.jpg", "empty.png")
    assert sorted(d["path"] for d in dead_letters(out)) == sorted(
        f"{tmp_path / 'hf'}/train-0000{i % 2}-of-00002.parquet!{i // 2}"
        for i, rel in enumerate(rels) if rel.rsplit("/", 1)[1] in broken)
    # Hugging Face's path (the file's base name) is kept in image/filename, after the row that keeps it unique.
    expected = {f"train-0000{i % 2}-of-00002.parquet!{i // 2}!{rel.rsplit('/', 1)[1]}" for i, rel in enumerate(rels)}
    assert set(_filenames(out)) <= expected and len(_filenames(out)) == 15


@pytest.mark.slow
def test_an_archive_of_split_folders_gives_each_member_its_split(tmp_path, capsys):
    root = tmp_path / "tree"
    make_class_tree(str(root / "train"), classes=("cat", "dog"), per_class=3, broken=False)
    make_class_tree(str(root / "validation"), classes=("cat", "dog"), per_class=2, seed=1, broken=False)
    source = make_zip(str(root), str(tmp_path / "splits.zip"))
    status, _, err = run_build(capsys, "--input", source, "--output_dir", str(tmp_path / "out"))
    assert status == 0, err
    manifest = load_manifest(str(tmp_path / "out"))
    assert {split: info["records"] for split, info in manifest["splits"].items()} == {"train": 6, "validation": 4}


def test_webdataset_indices_without_names_are_the_class_list_in_numeric_order(tmp_path, capsys):
    root = tmp_path / "tree"
    classes = tuple(f"c{i}" for i in range(12))
    make_class_tree(str(root), classes=("c0", "c2", "c11"), per_class=2, broken=False)
    pattern = make_shards(str(root), str(tmp_path / "shards"), shards=1, classes=classes)
    out = str(tmp_path / "out")
    status, _, err = run_build(capsys, "--input", pattern, "--output_dir", out)
    assert status == 0, err
    # cls 0, 2 and 11: index 11 stays 11 (not "11" sorted before "2"), the gaps are named too.
    assert open(os.path.join(out, "labels.txt")).read().split() == [str(i) for i in range(12)]
    assert sorted(set(_records(out).values())) == [("0", 0), ("11", 11), ("2", 2)]


def test_webdataset_json_labels_and_features_and_incomplete_samples(tmp_path, capsys):
    from tests.shard_fixtures import image_bytes
    import random

    rng = random.Random(3)
    shard = tmp_path / "data.tar"
    with tarfile.open(shard, "w") as archive:
        add_bytes(archive, "a.jpg", image_bytes("x", "JPEG", rng))
        add_bytes(archive, "a.json", b'{"label": "cat", "caption": "a cat", "score": 0.5}')
        add_bytes(archive, "b.png", image_bytes("y", "PNG", rng))
        add_bytes(archive, "b.json", b'{"label": "dog", "caption": "a dog", "score": 1.5}')
        add_bytes(archive, "c.jpg", image_bytes("z", "JPEG", rng))  # no label
        add_bytes(archive, "d.cls", b"cat")  # no image
    out = str(tmp_path / "out")
    status, _, err = run_build(capsys, "--input", str(shard), "--output_dir", out, "--max_bad_fraction", "0.6",
                               "--feature", "caption:bytes")
    assert status == 0, err
    got = {ex["image/filename"]: ex for name in shard_files(out) for ex in examples(os.path.join(out, name))}
    assert set(got) == {b"data.tar!a.jpg", b"data.tar!b.png"}
    assert got[b"data.tar!a.jpg"]["caption"] == b"a cat" and got[b"data.tar!b.png"]["score"] == 1.5
    assert got[b"data.tar!b.png"]["image/class/text"] == b"dog"
    assert sorted((d["path"], d["reason"]) for d in dead_letters(out)) == [
        (f"{shard}!c.jpg", "no_label"), (f"{shard}!d", "no_image")]


def test_a_webdataset_sample_with_a_member_twice_is_an_ambiguous_dead_letter(tmp_path, capsys):
    from tests.shard_fixtures import image_bytes
    import random

    rng = random.Random(5)
    shard = tmp_path / "data.tar"
    with tarfile.open(shard, "w") as archive:
        add_bytes(archive, "s1.jpg", image_bytes("a", "JPEG", rng))
        add_bytes(archive, "s1.cls", b"0")
        add_bytes(archive, "s2.jpg", image_bytes("b", "JPEG", rng))
        add_bytes(archive, "s2.jpg", image_bytes("c", "JPEG", rng))  # appended again: which is s2?
        add_bytes(archive, "s2.cls", b"1")
        add_bytes(archive, "s3.png", image_bytes("d", "PNG", rng))
        add_bytes(archive, "s3.cls", b"0")
        add_bytes(archive, "s3.cls", b"1")  # two labels
        add_bytes(archive, "s4.jpg", image_bytes("e", "JPEG", rng))
        add_bytes(archive, "s4.png", image_bytes("f", "PNG", rng))  # two images
        add_bytes(archive, "s4.cls", b"1")
        add_bytes(archive, "s5.jpg", image_bytes("g", "JPEG", rng))
        add_bytes(archive, "s5.cls", b"1")
        add_bytes(archive, "s6.jpg", image_bytes("h", "JPEG", rng))
        add_bytes(archive, "s6.JPG", image_bytes("i", "JPEG", rng))  # one extension in two cases
        add_bytes(archive, "s6.cls", b"1")
    out = str(tmp_path / "out")
    status, stdout, err = run_build(capsys, "--input", str(shard), "--output_dir", out, "--max_bad_fraction", "0.9")
    assert status == 0, err
    assert sorted(_filenames(out)) == ["data.tar!s1.jpg", "data.tar!s5.jpg"]
    dead = {d["path"]: d for d in dead_letters(out)}
    assert sorted(dead) == [f"{shard}!s2", f"{shard}!s3", f"{shard}!s4", f"{shard}!s6"]
    assert {d["reason"] for d in dead.values()} == {"ambiguous_sample"}
    assert "s2.jpg twice" in dead[f"{shard}!s2"]["error"], dead
    assert "s3.cls twice" in dead[f"{shard}!s3"]["error"], dead
    assert "s4.jpg" in dead[f"{shard}!s4"]["error"] and "s4.png" in dead[f"{shard}!s4"]["error"], dead
    assert "s6.jpg and s6.JPG" in dead[f"{shard}!s6"]["error"], dead
    assert "written + dead-lettered = 6 inputs" in stdout


def test_a_damaged_tar_keeps_the_members_before_and_is_one_dead_letter(tree, tmp_path, capsys):
    whole = make_tar(tree, str(tmp_path / "whole.tar"))
    data = open(whole, "rb").read()
    cut = tmp_path / "cut.tar"
    cut.write_bytes(data[:len(data) // 2] + b"\xff" * 512)  # a header that is not one, half way through
    out = str(tmp_path / "out")
    status, stdout, err = run_build(capsys, "--input", str(cut), "--output_dir", out, "--max_bad_fraction", "0.9")
    assert status == 0, err
    manifest = load_manifest(out)
    dead = dead_letters(out)
    assert any(d["path"] == str(cut) and d["reason"] == "unreadable" and "after member" in d["error"] for d in dead)
    assert 0 < manifest["records"] < 15
    assert f"written + dead-lettered = {manifest['records'] + manifest['dead_letters']} inputs" in stdout


def test_a_member_twice_and_links_are_dead_letters_as_files_would_be(tree, tmp_path, capsys):
    path = tmp_path / "twice.tar"
    jpg = open(os.path.join(tree, "rose", "rose_000.jpg"), "rb").read()
    png = open(os.path.join(tree, "rose", "rose_002.png"), "rb").read()
    with tarfile.open(path, "w") as archive:
        add_bytes(archive, "rose/a.jpg", jpg)
        add_bytes(archive, "rose/a.jpg", png)  # appended again: one name, two members
        add_bytes(archive, "tulip/.hidden.jpg", jpg)
        link = tarfile.TarInfo("tulip/link.jpg")
        link.type, link.linkname = tarfile.SYMTYPE, "../rose/a.jpg"
        archive.addfile(link)
        add_bytes(archive, "tulip/b.jpg", open(os.path.join(tree, "tulip", "tulip_000.jpg"), "rb").read())
    out = str(tmp_path / "out")
    status, stdout, err = run_build(capsys, "--input", str(path), "--output_dir", out, "--max_bad_fraction", "0.9")
    assert status == 0, err
    assert sorted((d["path"], d["reason"]) for d in dead_letters(out)) == [
        (f"{path}!rose/a.jpg", "duplicate_path"), (f"{path}!rose/a.jpg", "duplicate_path"),
        (f"{path}!tulip/link.jpg", "unreadable")]
    assert "written + dead-lettered = 4 inputs" in stdout  # the hidden member is no input


def test_a_member_over_max_image_mb_is_refused_unread(tree, tmp_path, capsys):
    path = tmp_path / "big.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("rose/big.jpg", b"\xff\xd8\xff" + b"\0" * 300_000)
        archive.write(os.path.join(tree, "rose", "rose_000.jpg"), "rose/small.jpg")
    out = str(tmp_path / "out")
    status, _, err = run_build(capsys, "--input", str(path), "--output_dir", out, "--max_image_mb", "0.2",
                               "--max_bad_fraction", "0.5")
    assert status == 0, err
    assert [(d["path"], d["reason"]) for d in dead_letters(out)] == [(f"{path}!rose/big.jpg", "too_large")]


def test_usage_errors_name_the_input(tmp_path, capsys):
    make_parquet_dir = tmp_path / "p"
    make_parquet_dir.mkdir()
    table = pa.table({"picture": pa.array([b"x"], pa.binary()), "label": ["a"]})
    pq.write_table(table, make_parquet_dir / "x.parquet")
    status, _, err = run_build(capsys, "--input", str(make_parquet_dir / "x.parquet"), "--output_dir",
                               str(tmp_path / "out"))
    assert status == 2 and "has no column 'image' (--image_column); its columns: picture, label" in err, err
    status, _, err = run_build(capsys, "--input", str(tmp_path / "shard-{000..009}.tar"), "--output_dir",
                               str(tmp_path / "out"))
    assert status == 2 and "no shard" in err and "shard-000.tar" in err, err
    status, _, err = run_build(capsys, "--input", str(tmp_path / "none.zip"), "--output_dir", str(tmp_path / "out"))
    assert status == 2 and "none.zip does not exist" in err, err
    status, _, err = run_build(capsys, "--input", str(tmp_path / "hf" / "*.parquet"), "--output_dir",
                               str(tmp_path / "out"))
    assert status == 2 and "*.parquet matches no Parquet file" in err, err


# Pure parts.

@pytest.mark.parametrize("pattern, expected", [
    ("a.tar", ["a.tar"]),
    ("s-{00..02}.tar", ["s-00.tar", "s-01.tar", "s-02.tar"]),
    ("s-{8..10}.tar", ["s-8.tar", "s-9.tar", "s-10.tar"]),
    ("{a,b}-{0..1}.tar", ["a-0.tar", "a-1.tar", "b-0.tar", "b-1.tar"]),
    # As webdataset (braceexpand) reads them: steps, letters, nested groups, ranges that count down.
    ("s-{0..10..5}.tar", ["s-0.tar", "s-5.tar", "s-10.tar"]),
    ("{a..c}.tar", ["a.tar", "b.tar", "c.tar"]),
    ("s-{x,{1..2}}.tar", ["s-x.tar", "s-1.tar", "s-2.tar"]),
    ("s-{3..1}.tar", ["s-3.tar", "s-2.tar", "s-1.tar"]),
])
def test_brace_ranges_expand(pattern, expected):
    assert expand_braces(pattern) == expected


@pytest.mark.parametrize("pattern", ["s-{0..1.tar", "s-}.tar", "s-{{0..1}.tar"])
def test_bad_brace_ranges_are_refused(pattern):
    with pytest.raises(PlanError):
        expand_braces(pattern)


@pytest.mark.parametrize("path, kind, pattern", [
    ("a.tar", "tar", False), ("A.TGZ", "tgz", False), ("x.tar.gz", "tgz", False), ("x.zip", "zip", False),
    ("t-00000.parquet", "parquet", False), ("s-{0..9}.tar", "tar", True), ("s-*.tar", "tar", True),
    ("folder", None, False), ("list.csv", None, False), ("hf/*.parquet", "parquet", False)])
def test_container_kinds(path, kind, pattern):
    assert archive_kind(path) == kind
    assert is_shard_pattern(path) == pattern
    assert is_parquet_pattern(path) == (kind == "parquet" and "*" in path)


def test_member_names_and_label_paths():
    assert member_path("./a/b.jpg") == "a/b.jpg" and member_path("/abs/x.jpg") == "/abs/x.jpg"
    assert label_path("n01440764.tar!x.JPEG") == "n01440764/x.JPEG"
    assert label_path("train/n01.tar!x.JPEG") == "train/n01/x.JPEG"
    assert label_path("daisy/x.jpg") == "daisy/x.jpg"


@pytest.mark.parametrize("name, unsafe", [
    ("rose/a.jpg", False), ("rose/..a.jpg", False), ("a/", False), ("../escape/", False),
    ("../escape/evil.jpg", True), ("dog/../../up.jpg", True), ("cat/./x/../y.jpg", True), ("a/./b.jpg", True),
    ("/etc/x.jpg", True), ("..", True),
])
def test_member_paths_that_are_absolute_or_have_dot_parts_are_unsafe(name, unsafe):
    from transforms.archives.members import listed_member, unsafe_member

    assert (unsafe_member(name) is not None) == unsafe
    assert not (unsafe and listed_member(name))


def test_tar_offsets_point_at_the_members_bytes_also_inside_an_inner_tar(tree, tmp_path):
    path = make_tar_of_tars(tree, str(tmp_path / "t.tar"))
    data = open(path, "rb").read()
    with open(path, "rb") as fh:
        outer = list(tar_members(fh))
        inner = outer[0]
        members = list(tar_members(fh, start=inner.offset, size=inner.size))
    assert [m.name for m in outer] == ["daisy.tar", "rose.tar", "tulip.tar"]
    first = sorted(os.listdir(os.path.join(tree, "daisy")))[0]
    found = next(m for m in members if m.name == first)
    assert data[found.offset:found.offset + found.size] == open(os.path.join(tree, "daisy", first), "rb").read()


def test_a_zip_member_is_inflated_and_its_crc_checked(tmp_path):
    payload = b"image bytes " * 100
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("a/b.jpg", payload)
    data = buffer.getvalue()
    (member,) = zip_members(io.BytesIO(data))
    raw = data[member.header_offset:]
    assert member_bytes(raw, member.compressed, member.size, member.method, member.crc) == payload
    assert member_bytes(raw[:20], member.compressed, member.size, member.method, member.crc) == 30
    with pytest.raises(ImageError, match="CRC-32"):
        member_bytes(raw, member.compressed, member.size, member.method, zlib.crc32(b"other"))


def test_webdataset_samples_group_adjacent_members_by_key():
    from transforms.archives.tar_index import TarMember

    members = [TarMember(n, i, 1, True) for i, n in enumerate(
        ["a/1.jpg", "a/1.cls", "a/1.seg.png", "2.png", "2.json", "a/.x.jpg"])]
    samples = list(samples_of(members))
    assert [(s.key, sorted(s.members)) for s in samples] == [("a/1", ["cls", "jpg", "seg.png"]),
                                                              ("2", ["json", "png"])]


def test_parquet_columns_and_class_label_names():
    schema = pa.schema([("image", pa.struct([("bytes", pa.binary()), ("path", pa.string())])),
                        ("label", pa.int64())], metadata={"huggingface": '{"info": {"features": {"label": '
                                                                          '{"_type": "ClassLabel", "names": ["b", "a"]}}}}'})
    assert columns_problem(schema, "image", "label") is None
    assert class_names_of(schema, "label") == ("b", "a")
    assert "not image bytes" in columns_problem(pa.schema([("image", pa.string()), ("label", pa.int64())]),
                                                "image", "label")
    assert "no column 'y'" in columns_problem(schema, "image", "y")
    assert class_names_of(pa.schema([("label", pa.int64())]), "label") is None


def test_a_member_travels_with_its_input_through_a_pickle():
    ref = MemberRef("a.zip", "zip", 10, 20, 30, 8, 1234)
    source = SourceImage("a.zip!x/y.jpg", "a.zip!x/y.jpg", "train", "x", member=ref)
    assert pickle.loads(pickle.dumps(source)) == source
    meta = ImageMeta(source, 0, "ab", ImageInfo("jpeg", 1, 1, 3), 100, 5)
    assert pickle.loads(pickle.dumps(meta)).source.member == ref


def test_read_member_refuses_a_truncated_tar_member(tree, tmp_path):
    path = make_tar(tree, str(tmp_path / "a.tar"))
    with open(path, "rb") as fh:
        member = next(m for m in tar_members(fh) if m.is_file)
    ref = MemberRef(path, "tar", member.offset, member.size, member.size)
    assert len(read_member(ref, 1 << 20)) == member.size
    os.truncate(path, member.offset + 10)
    with pytest.raises(ImageError, match="archive ends inside the member"):
        read_member(ref, 1 << 20)


@pytest.mark.slow
def test_plan_lists_each_kind_of_input(tree, tmp_path, capsys):
    from beam_jobs import plan_build

    tar = make_tar_of_tars(tree, str(tmp_path / "train.tar"))
    shards = make_shards(tree, str(tmp_path / "shards"))
    rows = make_parquet(tree, str(tmp_path / "rows.parquet"))
    capsys.readouterr()
    status = plan_build.run(["--input", tar, "--input", shards, "--input", rows, "--input", tree,
                             "--output_dir", str(tmp_path / "out"), "--class_names", ",".join(CLASSES),
                             "--plan_json", str(tmp_path / "plan.json")])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "    from: 18 Parquet rows, 18 WebDataset samples, 18 files, 18 tar members" in out, out
    import json
    kinds = json.loads(open(tmp_path / "plan.json").read())["found"]["kinds"]
    assert kinds == {"Parquet row": 18, "WebDataset sample": 18, "file": 18, "tar member": 18}


def test_a_tar_whose_name_holds_a_bracket_is_an_archive_not_a_pattern(tree, tmp_path, capsys):
    source = make_tar(tree, str(tmp_path / "photos[1].tar"))
    out = str(tmp_path / "out")
    status, _, err = run_build(capsys, "--input", source, "--output_dir", out, "--max_bad_fraction", "0.5")
    assert status == 0, err
    assert len(_records(out)) == 15
    assert f"{source}!daisy/cut.jpg" in [d["path"] for d in dead_letters(out)]


def test_local_archives_count_toward_the_size_that_chooses_workers(tree, tmp_path):
    from transforms.storage.listing import local_bytes_at_least

    source = make_tar(tree, str(tmp_path / "a.tar"))
    size = os.path.getsize(source)
    assert local_bytes_at_least([], 1 << 40, [source]) == size
    assert local_bytes_at_least([tree], 1 << 40, [source]) > size
    assert local_bytes_at_least([], 1 << 40, ["s3://bucket/a.tar"]) is None


@pytest.mark.parametrize("fmt", [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
def test_tar_headers_are_read_as_tarfile_reads_them(fmt, tmp_path):
    path = tmp_path / "t.tar"
    deep = "/".join(["folder" * 3] * 6) + "/" + "n" * 90 + ".jpg"  # over 100 bytes: prefix, L or pax
    with tarfile.open(path, "w", format=fmt) as archive:
        for name, data in (("a.jpg", b"x" * 700), ("classes/café/ü.png", b"y" * 512), (deep, b""),
                           ("z" * 96 + ".jpg", b"z")):
            add_bytes(archive, name, data)
        folder = tarfile.TarInfo("classes/")
        folder.type = tarfile.DIRTYPE
        archive.addfile(folder)
        link = tarfile.TarInfo("classes/link.jpg")
        link.type, link.linkname = tarfile.SYMTYPE, "a.jpg"
        archive.addfile(link)
    with tarfile.open(path) as archive:
        expected = [(m.name + ("/" if m.isdir() else ""), m.offset_data, m.size, m.isfile()) for m in archive]
    with open(path, "rb") as fh:
        assert [tuple(m) for m in tar_members(fh)] == expected
    assert [tuple(m) for m in tar_members(io.BytesIO(gzip.compress(path.read_bytes())), stream=True)] == expected
    assert len(expected) == 6 and expected[2][0] == deep


def test_a_tar_header_with_a_wrong_checksum_is_damage_naming_the_member_before(tmp_path):
    path = tmp_path / "t.tar"
    with tarfile.open(path, "w") as archive:
        add_bytes(archive, "a.jpg", b"x" * 10)
        add_bytes(archive, "b.jpg", b"y" * 10)
    data = bytearray(path.read_bytes())
    data[1024 + 5] ^= 0xFF  # the second header's name
    with pytest.raises(ImageError, match="after member 'a.jpg': header checksum"):
        list(tar_members(io.BytesIO(bytes(data))))
    with pytest.raises(ImageError, match="not a tar"):
        list(tar_members(io.BytesIO(b"PK\3\4 not a tar")))


class _Bounded(io.BytesIO):
    """A file that fails the test past ``reads`` reads: a walk that goes back or stands still is caught."""

    def __init__(self, data: bytes, reads: int = 100) -> None:
        super().__init__(data)
        self.reads = reads
        self.offsets: list[int] = []

    def read(self, size=-1):
        self.reads -= 1
        assert self.reads >= 0, f"the walk did not end; offsets read: {self.offsets[-6:]}"
        self.offsets.append(self.tell())
        return super().read(size)


def _walk_bounded(data: bytes, how: str) -> list[str]:
    """The names ``tar_members`` gives for a tar's bytes read as a tar, a ``.tar.gz`` or an inner tar."""
    names = []
    if how == "gz":
        members = tar_members(_Bounded(gzip.compress(data)), stream=True)
    elif how == "inner":
        outer = _Bounded(b"\0" * 1024 + data + b"\0" * 1024)
        members = tar_members(outer, start=1024, size=len(data))
    else:
        members = tar_members(_Bounded(data))
    for member in members:
        names.append(member.name)
        assert len(names) < 10, names
    return names


@pytest.mark.parametrize("how", ["tar", "gz", "inner"])
@pytest.mark.parametrize("pax_size", [False, True], ids=["base256", "pax"])
def test_a_negative_member_size_is_that_members_damage_and_the_walk_ends(pax_size, how):
    data = hostile_tars.negative_size_tar(pax_size)
    names = []
    with pytest.raises(ImageError, match="negative size, -512 bytes") as raised:
        names.extend(_walk_bounded(data, how))
    assert raised.value.reason == "unreadable" and raised.value.member == "rose/bad.jpg"


@pytest.mark.parametrize("how", ["tar", "gz", "inner"])
@pytest.mark.parametrize("size", ["9" * 20, "9" * 5000, "1" + "0" * 30])
def test_a_pax_size_past_the_archives_end_is_that_members_damage(size, how):
    data = (hostile_tars.member("rose/a.jpg", b"x" * 700) + hostile_tars.pax({"size": size})
            + hostile_tars.header("rose/huge.jpg", 0) + hostile_tars.padded(b"y" * 10) + hostile_tars.end())
    with pytest.raises(ImageError) as raised:
        _walk_bounded(data, how)
    assert raised.value.reason == "unreadable", raised.value
    if len(size) < 100:  # 5,000 digits are no number Python reads: damage after the member before
        assert raised.value.member == "rose/huge.jpg" and "past the archive's end" in raised.value.detail


def test_a_size_field_past_the_archives_end_names_the_member():
    data = hostile_tars.member("a.jpg", b"x" * 10) + hostile_tars.header("b.jpg", 1 << 32) + b"y" * 100
    with pytest.raises(ImageError, match="claims 4294967296 bytes, past the archive's end \\(100 bytes") as raised:
        _walk_bounded(data, "tar")
    assert raised.value.member == "b.jpg"


def test_a_pax_header_over_its_bound_is_damage_not_read():
    body = b"x" * (2 << 20)
    data = (hostile_tars.member("a.jpg", b"x" * 10) + hostile_tars.header("././@PaxHeader", len(body), b"x")
            + body + hostile_tars.member("b.jpg", b"y") + hostile_tars.end())
    with pytest.raises(ImageError, match="after member 'a.jpg': a pax or long-name header of 2097152 bytes"):
        _walk_bounded(data, "tar")


def test_tar_gz_members_read_in_any_order(tmp_path):
    path = tmp_path / "a.tar.gz"
    payloads = {f"c/{i}.jpg": bytes([i]) * (1000 + i) for i in range(5)}
    with tarfile.open(path, "w:gz") as archive:
        for name, data in payloads.items():
            add_bytes(archive, name, data)
    with open(path, "rb") as fh:
        members = list(tar_members(fh, stream=True))
    refs = {m.name: MemberRef(str(path), "tgz", m.offset, m.size, m.size) for m in members}
    for name in ("c/3.jpg", "c/4.jpg", "c/0.jpg", "c/2.jpg"):  # forwards, then back to the start
        assert read_member(refs[name], 1 << 20) == payloads[name]


def test_a_zip_member_with_a_long_local_header_takes_a_second_read(tmp_path):
    path = tmp_path / "a.zip"
    info = zipfile.ZipInfo("c/a.jpg")
    info.extra = b"\xca\xfe" + (4000).to_bytes(2, "little") + b"\0" * 4000  # an unknown 4 KB extra field
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(info, b"jpeg bytes" * 50)
    with open(path, "rb") as fh:
        (member,) = zip_members(fh)
    ref = MemberRef(str(path), "zip", member.header_offset, member.compressed, member.size, member.method,
                    member.crc)
    assert read_member(ref, 1 << 20) == b"jpeg bytes" * 50


def test_parquet_rows_come_from_their_row_group(tmp_path):
    path = tmp_path / "r.parquet"
    pq.write_table(pa.table({"image": [{"bytes": bytes([i]) * 10, "path": None} for i in range(7)] +
                                      [{"bytes": None, "path": "x.jpg"}],
                             "label": list(range(8))}), path, row_group_size=3)
    for group, row, value in ((0, 2, 2), (2, 0, 6), (1, 1, 4), (0, 0, 0)):
        assert read_member(MemberRef(str(path), "parquet", group, row, -1, column="image"), 100) == bytes([value]) * 10
    with pytest.raises(ImageError, match="no image bytes \\(only a path: 'x.jpg'\\)"):
        read_member(MemberRef(str(path), "parquet", 2, 1, -1, column="image"), 100)
    with pytest.raises(ImageError, match="too_large|over --max_image_mb"):
        read_member(MemberRef(str(path), "parquet", 0, 0, -1, column="image"), 5)


@pytest.mark.parametrize("name, data, why", [
    ("a.tar", b"not a tar at all " * 40, "archive is not a tar: its first 512 bytes are no tar header"),
    ("a.zip", b"PK\3\4 and nothing else", "is not a zip archive"),
    ("a.tgz", b"not gzip" * 100, "archive cannot be read"),
])
def test_an_archive_that_cannot_be_read_at_all_is_a_usage_error(name, data, why, tmp_path, capsys):
    (tmp_path / name).write_bytes(data)
    status, _, err = run_build(capsys, "--input", str(tmp_path / name), "--output_dir", str(tmp_path / "out"))
    assert status == 2 and f"--input {tmp_path / name}: " in err and why in err, err
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_worker_processes_read_members_as_one_process_does(tree, folder_build, tmp_path, capsys):
    source = make_tar_of_tars(tree, str(tmp_path / "train.tar"))
    out = str(tmp_path / "out")
    status, _, err = run_build(capsys, "--input", source, "--output_dir", out, "--max_bad_fraction", "0.5",
                               "--direct_num_workers", "2", "--direct_running_mode", "multi_processing")
    assert status == 0, err
    assert _records(out) == _records(folder_build)


def test_class_indices_outside_the_names_given_are_bad_labels():
    from transforms.images.class_labels import class_label

    assert class_label(2, ("a", "b", "c")) == ("c", "")
    assert class_label(3, ("a", "b", "c"))[0] is None
    assert class_label(-1, None)[0] is None
    assert class_label(7, None) == ("7", "")
