"""Reliability: hostile tars, ``.tar.gz``, tars of tars and WebDataset shards through the real build job.

Each input is a few KiB built here, claiming sizes its archive does not
have (a negative size, a pax ``size`` past the end, a ``.cls`` integer of
5,000 digits) or naming members outside the archive (``..`` parts, absolute
paths). One build reads them all in a child process with a time limit, so a
reader that loops fails the test instead of hanging the suite. Every
problem is a dead letter naming ``ARCHIVE!MEMBER``; the job publishes the
rest; ``written + dead-lettered == inputs``.
"""

from __future__ import annotations

import gzip
import io
import os
import subprocess
import sys
import zipfile

import pytest

from tests import hostile_tars as h
from tests.shard_fixtures import dead_letters, examples, load_manifest, run_build, shard_files

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_LIMIT_S = 240  # the build takes seconds; a reader that does not move forward never ends
_UNSAFE = ("../escape/evil.jpg", "rose/../../up.jpg", "rose/./x/../y.jpg", "/etc/x.jpg")


class _Images:
    """Distinct small JPEGs (no two alike, so none is a duplicate of another)."""

    def __init__(self) -> None:
        self.salt = 0

    def __call__(self) -> bytes:
        self.salt += 1
        return h.jpeg(self.salt)


def _write(folder, name: str, data: bytes) -> str:
    path = os.path.join(str(folder), name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(data)
    return path


def _zip(members: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for name, data in members.items():
            archive.writestr(zipfile.ZipInfo(name), data)
    return out.getvalue()


def _negative(image: _Images, names=("rose/a.jpg", "rose/bad.jpg", "tulip/c.jpg"), pax_size=False) -> bytes:
    first, bad, last = names
    damaged = (h.pax({"size": "-512"}) + h.header(bad, 0)) if pax_size else h.header(bad, 0, size_field=h.base256(-512))
    return h.member(first, image()) + damaged + h.padded(image()) + h.member(last, image()) + h.end()


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """One build of every hostile input: (inputs by name, output folder, exit status, stdout, stderr)."""
    folder = tmp_path_factory.mktemp("hostile")
    image = _Images()
    inputs = {
        "negative": _write(folder, "negative.tar", _negative(image)),
        "negative_pax": _write(folder, "negative-pax.tar", _negative(image, pax_size=True)),
        "negative_tgz": _write(folder, "negative.tar.gz", gzip.compress(_negative(image))),
        "tar_of_tars": _write(folder, "classes.tar", h.tar_of({
            "rose.tar": h.tar_of({"r1.jpg": image(), "r2.jpg": image()}),
            "tulip.tar": _negative(image, ("t1.jpg", "bad.jpg", "t3.jpg"))})),
        "huge_pax": _write(folder, "huge.tar", h.member("rose/a.jpg", image()) + h.pax({"size": "9" * 20})
                           + h.header("rose/huge.jpg", 0) + h.padded(image()) + h.member("tulip/c.jpg", image())
                           + h.end()),
        "unsafe": _write(folder, "unsafe.tar", h.tar_of(
            {**{f"{('rose', 'tulip')[i % 2]}/ok{i}.jpg": image() for i in range(6)},
             **{name: image() for name in _UNSAFE}})),
        "unsafe_zip": _write(folder, "unsafe.zip", _zip({"rose/z.jpg": image(), "../../evil/x.jpg": image()})),
        "shards": os.path.join(str(folder), "shards", "s-{0..1}.tar"),
    }
    # Shard 0: a sample, then an image claiming -512 bytes; shard 1: a cls of 5,000 digits, unsafe keys.
    _write(folder, "shards/s-0.tar", h.member("000.jpg", image()) + h.member("000.cls", b"0")
           + h.header("001.jpg", 0, size_field=h.base256(-512)) + h.padded(image()) + h.member("001.cls", b"1")
           + h.member("002.jpg", image()) + h.member("002.cls", b"1") + h.end())
    _write(folder, "shards/s-1.tar", h.tar_of({
        "100.jpg": image(), "100.cls": b"1", "101.jpg": image(), "101.cls": b"7" * 5000,
        "../102.jpg": image(), "../102.cls": b"0", "/abs/103.jpg": image(), "/abs/103.cls": b"0",
        "../.104.jpg": image(), "../.104.cls": b"0"}))
    out = os.path.join(str(folder), "out")
    argv = [sys.executable, "-m", "beam_jobs.cli.main", "build", "--output_dir", out, "--class_names", "rose,tulip",
            "--max_bad_fraction", "0.9"]
    for path in inputs.values():
        argv += ["--input", path]
    env = dict(os.environ, PYTHONPATH=_ROOT)
    try:
        proc = subprocess.run(argv, cwd=_ROOT, env=env, capture_output=True, text=True, timeout=_LIMIT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the build of hostile tars did not end in {_LIMIT_S} s: a reader loops")
    return inputs, out, proc.returncode, proc.stdout, proc.stderr


def _dead(out: str) -> dict[str, tuple[str, str]]:
    return {d["path"]: (d["reason"], d["error"]) for d in dead_letters(out)}


@pytest.mark.cpu_budget(6.0)  # hostile inputs stay in the fast tier; the first test pays their one build
def test_the_build_ends_and_publishes_the_rest(hostile):
    _, out, status, stdout, stderr = hostile
    assert status == 0, stderr
    manifest = load_manifest(out)
    assert f"written + dead-lettered = {manifest['records'] + manifest['dead_letters']} inputs" in stdout
    assert manifest["dead_letters"] == len(dead_letters(out))


@pytest.mark.parametrize("case, member", [
    ("negative", "rose/bad.jpg"), ("negative_pax", "rose/bad.jpg"), ("negative_tgz", "rose/bad.jpg"),
    ("tar_of_tars", "tulip.tar!bad.jpg")])
def test_a_negative_member_size_is_an_unreadable_dead_letter_naming_the_member(hostile, case, member):
    inputs, out, status, _, stderr = hostile
    assert status == 0, stderr
    reason, error = _dead(out)[f"{inputs[case]}!{member}"]
    assert reason == "unreadable" and "negative size, -512 bytes" in error, error


def test_a_negative_size_in_a_webdataset_shard_keeps_the_sample_before(hostile):
    inputs, out, status, _, stderr = hostile
    shard = os.path.join(os.path.dirname(inputs["shards"]), "s-0.tar")
    dead = _dead(out)
    assert dead[f"{shard}!001.jpg"][0] == "unreadable" and "negative size" in dead[f"{shard}!001.jpg"][1]
    names = {e["image/filename"] for path in shard_files(out) for e in examples(os.path.join(out, path))}
    assert b"s-0.tar!000.jpg" in names  # the sample before the damage, ended by it


def test_a_pax_size_past_the_end_is_that_members_dead_letter(hostile):
    inputs, out, status, _, stderr = hostile
    reason, error = _dead(out)[f"{inputs['huge_pax']}!rose/huge.jpg"]
    assert reason == "unreadable" and "claims 99999999999999999999 bytes, past the archive's end" in error


def test_a_cls_of_5000_digits_is_that_samples_bad_label(hostile):
    inputs, out, _, _, _ = hostile
    shard = os.path.join(os.path.dirname(inputs["shards"]), "s-1.tar")
    reason, error = _dead(out)[f"{shard}!101.jpg"]
    assert reason == "bad_label" and "cls" in error, error


def test_members_with_dot_dot_parts_or_absolute_paths_are_unsafe_path_dead_letters(hostile):
    inputs, out, _, _, _ = hostile
    dead = _dead(out)
    shard = os.path.join(os.path.dirname(inputs["shards"]), "s-1.tar")
    expected = ([f"{inputs['unsafe']}!{name}" for name in _UNSAFE] + [f"{inputs['unsafe_zip']}!../../evil/x.jpg"]
                + [f"{shard}!../102", f"{shard}!/abs/103", f"{shard}!../"])
    for name in expected:
        assert dead.get(name, ("missing",))[0] == "unsafe_path", (name, sorted(dead))
    names = {e["image/filename"] for path in shard_files(out) for e in examples(os.path.join(out, path))}
    assert {n for n in names if n.startswith(b"unsafe.tar!")} == {
        f"unsafe.tar!{('rose', 'tulip')[i % 2]}/ok{i}.jpg".encode() for i in range(6)}


@pytest.mark.parametrize("data", [b"", bytes(10240)], ids=["empty", "zeros"])
def test_an_empty_or_all_zero_tar_is_a_usage_error_before_the_pipeline(data, tmp_path, capsys):
    path = _write(tmp_path, "empty.tar", data)
    status, _, err = run_build(capsys, "--input", path, "--output_dir", str(tmp_path / "out"))
    assert status == 2 and err.strip().count("\n") == 0, err
    assert f"--input {path}: archive holds no members" in err, err
    assert not (tmp_path / "out").exists()
    status, _, err = run_build(capsys, "--input", _write(tmp_path, "empty.tar.gz", gzip.compress(data)),
                               "--output_dir", str(tmp_path / "out"))
    assert status == 2 and "archive holds no members" in err, err
