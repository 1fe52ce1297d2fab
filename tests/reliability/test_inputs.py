"""Reliability: every input is accounted for, and no input can take the job down.

Unreadable folders, unusable manifest headers, file names and manifest rows that
are not UTF-8, files that are not regular files, huge files that are not images,
and thousands of manifest rows naming one file. In every run that publishes,
``records + dead letters == inputs``; a manifest whose header cannot work fails
before any image is read.
"""

from __future__ import annotations

import errno
import io
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from tests import imagegen
from tests.shard_fixtures import dead_letters, examples, load_manifest, make_class_tree, run_build, shard_files, write
from transforms.errors import ManifestError
from transforms.storage.files import open_for_read
from transforms.storage.paths import path_problem
from transforms.images.image_codec import could_be_image, has_image_magic
from transforms.images.inputs import check_manifest_head

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _accounted(out: str, inputs: int) -> dict:
    """The published manifest, after checking that written + dead-lettered == inputs."""
    manifest = load_manifest(out)
    assert manifest["dead_letters"] == len(dead_letters(out))
    assert manifest["records"] + manifest["dead_letters"] == inputs
    return manifest


def _filenames(out: str) -> set[str]:
    return {ex["image/filename"].decode() for n in shard_files(out) for ex in examples(os.path.join(out, n))}


# --- unreadable folders -------------------------------------------------------------------------

# Root reads every folder whatever its mode (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH). The job runs
# without those two capabilities, so a mode-000 folder is unreadable to it as to any other user.
# (`setpriv --reuid=65534` would do the same, but here the interpreter lives below /root, mode
# 700, where nobody cannot reach it.)
_NO_DAC = ["setpriv", "--bounding-set=-dac_override,-dac_read_search",
           "--inh-caps=-dac_override,-dac_read_search"]


def _run_unprivileged(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([*_NO_DAC, sys.executable, "-m", "beam_jobs.build_shards", *argv],
                          capture_output=True, text=True, cwd=REPO, timeout=300)


@pytest.fixture
def locked_folder(tmp_path):
    """A class tree whose ``tulip/`` folder has mode 000; returns (root, number of readable files)."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to run a job that cannot read a mode-000 folder")
    root = tmp_path / "in"
    expected = make_class_tree(str(root), per_class=4, broken=False)
    os.chmod(root / "tulip", 0)
    probe = subprocess.run([*_NO_DAC, sys.executable, "-c", f"import os; os.listdir({str(root / 'tulip')!r})"],
                           capture_output=True, text=True)
    assert probe.returncode != 0 and "PermissionError" in probe.stderr, probe.stderr
    yield root, sum(1 for rel in expected if not rel.startswith("tulip/"))
    os.chmod(root / "tulip", 0o755)


@pytest.mark.slow
def test_unreadable_class_folder_is_a_dead_letter_and_keeps_its_class(locked_folder, tmp_path) -> None:
    root, readable = locked_folder
    out = tmp_path / "out"
    proc = _run_unprivileged("--input", str(root), "--output_dir", str(out), "--max_bad_fraction", "1")
    assert proc.returncode == 0, proc.stderr
    manifest = _accounted(str(out), readable + 1)  # the folder counts as one input
    assert manifest["labels"] == ["daisy", "rose", "tulip"]  # no index shifted
    assert manifest["records"] == readable
    (dead,) = dead_letters(str(out))
    assert dead["path"] == str(root / "tulip") and dead["reason"] == "unreadable"
    assert "PermissionError" in dead["error"]
    assert "Traceback" not in proc.stderr

    # Under the default threshold the lost folder fails the run: 1 of 9 inputs is over 1 %.
    proc = _run_unprivileged("--input", str(root), "--output_dir", str(tmp_path / "strict"))
    assert proc.returncode == 1
    *_, cause, kept = proc.stderr.strip().splitlines()
    assert cause.startswith("build_shards: failed:") and kept.startswith("build_shards: staged work kept in ")
    assert not os.path.exists(tmp_path / "strict" / "manifest.json")


# --- manifest headers ---------------------------------------------------------------------------

_ROWS = "".join(f"imgs/{i}.jpg,rose\n" for i in range(1000))
BAD_MANIFESTS = {
    "wrong_case.csv": ("Path,Label\n" + _ROWS).encode(),
    "missing_label.csv": ("path,class\n" + _ROWS).encode(),
    "repeated_column.csv": ("path,label,label\n" + _ROWS.replace("rose\n", "rose,tulip\n")).encode(),
    "header_not_utf8.csv": b"path,lab\xe9l\n" + _ROWS.encode(),
    "header_only.csv": b"path,label\n",
    "empty.csv": b"",
    "blank.jsonl": b"\n\n",
    "first_line_not_utf8.jsonl": b'{"path": "a\xff.jpg", "label": "rose"}\n',
}


@pytest.mark.parametrize("name", sorted(BAD_MANIFESTS))
def test_unusable_manifest_header_fails_at_once(tmp_path, capsys, name) -> None:
    folder = tmp_path / "folder"
    make_class_tree(str(folder), per_class=4, broken=False)
    manifest = tmp_path / name
    manifest.write_bytes(BAD_MANIFESTS[name])
    out = tmp_path / "out"
    status, stdout, err = run_build(capsys, "--input", str(folder), "--input", str(manifest),
                                    "--output_dir", str(out))
    assert status == 2, (stdout, err)
    (line,) = err.strip().splitlines()
    assert line.startswith(f"build_shards: error: --input {manifest}:"), line
    assert not out.exists()  # refused before the pipeline ran


@pytest.mark.parametrize("head, whole, problem", [
    (b"path,label\na.jpg,rose\n", True, None),
    (b"\xef\xbb\xbfpath,label,split\na.jpg,rose,train\n", True, None),
    (b"label,path\r\na.jpg,rose\r\n", True, None),
    (b'"path","label"\n"a,b.jpg",rose\n', True, None),
    (b"path,label\n" + b"a.jpg,rose\n" * 10 + b"b.jpg,ro", False, None),  # head cut inside a row
    (b"path,label\na\xff.jpg,rose\n", True, None),  # a bad byte in a row: that row's dead letter
    (b"Path,Label\na.jpg,rose\n", True, "x.csv:1: CSV header must name path and label"),
    (b"path,label,path\na.jpg,rose,b.jpg\n", True, "x.csv:1: CSV header names the column 'path' more"),
    (b"pa\xefth,label\na.jpg,rose\n", True, "x.csv:1: CSV header is not valid UTF-8"),
    (b"path,label\n", True, "x.csv:2: manifest has a header but no rows"),
    (b"path,label\n\n\n", True, "x.csv:2: manifest has a header but no rows"),
    (b"", True, "x.csv:1: manifest is empty"),
    (b"path,la", False, "x.csv:1: CSV header line is too long"),
])
def test_manifest_head_check(head: bytes, whole: bool, problem: str | None) -> None:
    if problem is None:
        check_manifest_head(head, "x.csv", whole)
        return
    with pytest.raises(ManifestError) as err:
        check_manifest_head(head, "x.csv", whole)
    assert str(err.value).startswith(problem), str(err.value)


@pytest.mark.parametrize("head, whole, problem", [
    (b'{"path": "a.jpg", "label": "rose"}\n', True, None),
    (b'\n\n{"path": "a.jpg", "label": "rose"}\n', True, None),
    (b"not json\n", True, None),  # a bad row: a dead letter, as before
    (b"\n" * 10, False, None),  # more may follow
    (b"\n \n", True, "x.jsonl:3: manifest has no rows"),
    (b'\n{"path": "\xff"}\n', True, "x.jsonl:2: line is not valid UTF-8"),
])
def test_jsonl_manifest_head_check(head: bytes, whole: bool, problem: str | None) -> None:
    if problem is None:
        check_manifest_head(head, "x.jsonl", whole)
        return
    with pytest.raises(ManifestError) as err:
        check_manifest_head(head, "x.jsonl", whole)
    assert str(err.value).startswith(problem), str(err.value)


# --- names and bytes that are not UTF-8 ---------------------------------------------------------

def test_file_and_folder_names_that_are_not_utf8_are_one_dead_letter_each(tmp_path, capsys) -> None:
    root = tmp_path / "in"
    expected = make_class_tree(str(root), per_class=4, broken=False)
    raw_root = os.fsencode(str(root))
    write(raw_root + b"/rose/caf\xe9.png", imagegen.png("RGB", size=(9, 7)))
    write(raw_root + b"/cr\xe8me/a.jpg", imagegen.jpeg("RGB", size=(10, 6)))
    out = tmp_path / "out"
    status, stdout, err = run_build(capsys, "--input", str(root), "--output_dir", str(out),
                                    "--max_bad_fraction", "1")
    assert status == 0, err
    assert "Traceback" not in err
    manifest = _accounted(str(out), len(expected) + 2)
    assert manifest["labels"] == ["daisy", "rose", "tulip"]
    assert _filenames(str(out)) == set(expected)
    with open(out / "dead_letters.jsonl", "rb") as fh:
        text = fh.read().decode("utf-8")  # valid UTF-8
    got = sorted((json.loads(line)["path"], json.loads(line)["reason"]) for line in text.splitlines())
    assert got == [(f"{root}/cr\\xe8me/a.jpg", "bad_file_name"), (f"{root}/rose/caf\\xe9.png", "bad_file_name")]


@pytest.mark.slow
@pytest.mark.parametrize("name, bad_row, bad_line", [
    ("list.csv", b"imgs/bad\xff.jpg,rose\n", 4),
    ("list.csv", b"imgs/3.jpg,ros\xe9\n", 4),
    ("list.jsonl", b'{"path": "imgs/bad\xff.jpg", "label": "rose"}\n', 3),
    ("list.jsonl", b'{"path": "imgs/3.jpg", "label": "\\udce9"}\n', 3),  # an escaped lone surrogate
])
def test_one_bad_byte_in_one_manifest_row_is_one_dead_letter(tmp_path, capsys, name, bad_row, bad_line) -> None:
    rows = []
    for i in range(6):
        write(str(tmp_path / "imgs" / f"{i}.jpg"), imagegen.jpeg("RGB", size=(8 + i, 8)))
        if name.endswith(".csv"):
            rows.append(f"imgs/{i}.jpg,{'rose' if i % 2 else 'tulip'}\n".encode())
        else:
            rows.append(json.dumps({"path": f"imgs/{i}.jpg", "label": "rose" if i % 2 else "tulip"}).encode() + b"\n")
    first = 2 if name.endswith(".csv") else 1  # the line of rows[0]
    rows.insert(bad_line - first, bad_row)
    manifest = tmp_path / name
    manifest.write_bytes((b"path,label\n" if name.endswith(".csv") else b"") + b"".join(rows))
    out = tmp_path / "out"
    status, stdout, err = run_build(capsys, "--input", str(manifest), "--output_dir", str(out),
                                    "--max_bad_fraction", "1")
    assert status == 0, err
    _accounted(str(out), 7)
    (dead,) = dead_letters(str(out))
    assert (dead["path"], dead["reason"]) == (f"{manifest}:{bad_line}", "bad_manifest_row")
    assert _filenames(str(out)) == {f"imgs/{i}.jpg" for i in range(6)}


@pytest.mark.slow
@pytest.mark.parametrize("name, bad_row", [
    ("list.csv", "file://{root}/imgs/0.jpg,rose"),  # no file system of Beam's reads file://
    ("list.jsonl", '{{"path": "file://{root}/imgs/0.jpg", "label": "rose"}}'),
    ("list.csv", "imgs/bad\x00.jpg,rose"),  # a NUL byte: no file system can open the path
    ("list.jsonl", '{{"path": "imgs/bad\\u0000.jpg", "label": "rose"}}'),
])
def test_a_row_whose_path_no_file_system_can_open_is_one_dead_letter(tmp_path, capsys, name,
                                                                     bad_row) -> None:
    # Before, such a row failed the whole job: "Unable to get filesystem" / "embedded null byte".
    rows = []
    for i in range(4):
        write(str(tmp_path / "imgs" / f"{i}.jpg"), imagegen.jpeg("RGB", size=(8 + i, 8)))
        path, label = f"imgs/{i}.jpg", "rose" if i % 2 else "tulip"
        rows.append(f"{path},{label}" if name.endswith(".csv") else json.dumps({"path": path, "label": label}))
    rows.insert(2, bad_row.format(root=tmp_path))
    first = 2 if name.endswith(".csv") else 1  # the line of rows[0]
    manifest = tmp_path / name
    manifest.write_text(("path,label\n" if name.endswith(".csv") else "") + "\n".join(rows) + "\n")
    out = tmp_path / "out"
    status, _, err = run_build(capsys, "--input", str(manifest), "--output_dir", str(out),
                               "--max_bad_fraction", "1")
    assert status == 0, err
    _accounted(str(out), 5)
    (dead,) = dead_letters(str(out))
    assert (dead["path"], dead["reason"]) == (f"{manifest}:{first + 2}", "bad_manifest_row"), dead
    assert _filenames(str(out)) == {f"imgs/{i}.jpg" for i in range(4)}


@pytest.mark.parametrize("path, problem", [
    ("file:///data/a.jpg", "no file system reads file:// paths"),
    ("http://host/a.jpg", "no file system reads http:// paths"),
    ("imgs/a\x00.jpg", "path holds a NUL byte"),
    ("/data/a.jpg", None),
    ("imgs/a.jpg", None),
    ("s3://bucket/a.jpg", None),
    ("gs://bucket/a.jpg", None),
])
def test_path_problem_and_open_for_read(path: str, problem: str | None) -> None:
    if problem is None:
        assert path_problem(path) is None
        return
    assert path_problem(path).startswith(problem)
    with pytest.raises(OSError) as err:  # not Beam's ValueError, which failed the job
        open_for_read(path)
    assert err.value.errno == errno.EINVAL and problem in str(err.value)


# --- files that are not regular, or too large ----------------------------------------------------

@pytest.mark.slow
def test_fifo_device_and_folder_in_a_manifest_are_unreadable_dead_letters(tmp_path) -> None:
    for i in range(4):
        write(str(tmp_path / "imgs" / f"{i}.jpg"), imagegen.jpeg("RGB", size=(8 + i, 8)))
    os.mkfifo(tmp_path / "pipe.jpg")  # no writer: opening it for reading would block for good
    (tmp_path / "folder.jpg").mkdir()
    rows = [f"imgs/{i}.jpg,rose" for i in range(4)] + ["pipe.jpg,rose", "/dev/zero,rose", "folder.jpg,rose"]
    manifest = tmp_path / "list.csv"
    manifest.write_text("path,label\n" + "\n".join(rows) + "\n")
    tree = tmp_path / "tree"
    write(str(tree / "rose" / "a.jpg"), imagegen.jpeg("RGB", size=(20, 8)))
    os.mkfifo(tree / "rose" / "pipe.png")  # a FIFO in a folder input is listed like any file
    out = tmp_path / "out"
    # A subprocess with a time limit and an address-space limit: before, /dev/zero was read until
    # memory ran out and the FIFO blocked the worker for ever.
    probe = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30)); "
             "from beam_jobs import build_shards; sys.exit(build_shards.run(sys.argv[1:]))")
    proc = subprocess.run([sys.executable, "-c", probe, "--input", str(manifest), "--input", str(tree),
                           "--output_dir", str(out), "--max_bad_fraction", "1"],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    _accounted(str(out), 9)
    got = {d["path"]: (d["reason"], d["error"]) for d in dead_letters(str(out))}
    assert sorted(got) == sorted([str(tmp_path / "pipe.jpg"), "/dev/zero", str(tmp_path / "folder.jpg"),
                                  str(tree / "rose" / "pipe.png")])
    assert got[str(tree / "rose" / "pipe.png")][0] == "unreadable"
    assert got[str(tmp_path / "pipe.jpg")][0] == "unreadable" and "not a regular file (a FIFO)" in got[str(tmp_path / "pipe.jpg")][1]
    assert got["/dev/zero"][0] == "unreadable" and "not a regular file (a character device)" in got["/dev/zero"][1]
    assert got[str(tmp_path / "folder.jpg")][0] == "unreadable"


def _tree_with_a_big_png(root) -> tuple[dict[str, str], object]:
    """A class tree plus rose/big.png, a real image of about 75 KiB; the others are under 30 KiB."""
    expected = make_class_tree(str(root), per_class=3, broken=False)
    noise = np.random.default_rng(0).integers(0, 256, (160, 160, 3), dtype=np.uint8)
    big = root / "rose" / "big.png"
    Image.fromarray(noise).save(big)
    assert big.stat().st_size > 0.05 * 1024 * 1024
    return expected, big


def test_file_over_max_image_mb_is_too_large(tmp_path, capsys) -> None:
    expected, big = _tree_with_a_big_png(tmp_path / "in")
    out = tmp_path / "out"
    status, _, err = run_build(capsys, "--input", str(tmp_path / "in"), "--output_dir", str(out),
                               "--max_bad_fraction", "1", "--max_image_mb", "0.05")
    assert status == 0, err
    _accounted(str(out), len(expected) + 1)
    (dead,) = dead_letters(str(out))
    assert (dead["path"], dead["reason"]) == (str(big), "too_large")
    assert f"file has {big.stat().st_size} bytes" in dead["error"]


def test_the_same_file_without_the_cap_is_an_image_like_any_other(tmp_path, capsys) -> None:
    expected, _ = _tree_with_a_big_png(tmp_path / "in")
    again = tmp_path / "again"
    status, _, err = run_build(capsys, "--input", str(tmp_path / "in"), "--output_dir", str(again))
    assert status == 0, err
    assert _filenames(str(again)) == set(expected) | {"rose/big.png"}


_PEAK_PROBE = r"""
import json, sys
from beam_jobs import build_shards
status = build_shards.run(sys.argv[1:])
with open("/proc/self/status") as fh:  # VmHWM: this process's own peak RSS
    peak = next(int(line.split()[1]) for line in fh if line.startswith("VmHWM:"))
print(json.dumps({"status": status, "peak_kib": peak}))
"""


def _peak_kib(*argv: str) -> int:
    proc = subprocess.run([sys.executable, "-c", _PEAK_PROBE, *argv], capture_output=True, text=True,
                          cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["status"] == 0, proc.stderr
    return result["peak_kib"]


@pytest.mark.slow
def test_a_huge_file_that_is_not_an_image_is_rejected_from_its_head(tmp_path) -> None:
    root = tmp_path / "in"
    expected = make_class_tree(str(root), per_class=4, broken=False)
    plain = _peak_kib("--input", str(root), "--output_dir", str(tmp_path / "plain"))
    video = root / "rose" / "clip.mp4"
    with open(video, "wb") as fh:  # 200 MB (under --max_image_mb), sparse: an MP4 box header, then zeros
        fh.write(b"\x00\x00\x00\x20ftypisom\x00\x00\x02\x00isomiso2avc1mp41")
        fh.truncate(200 * 1000 * 1000)
    out = tmp_path / "out"
    peak = _peak_kib("--input", str(root), "--output_dir", str(out), "--max_bad_fraction", "1")
    _accounted(str(out), len(expected) + 1)
    (dead,) = dead_letters(str(out))
    assert (dead["path"], dead["reason"]) == (str(video), "not_an_image")
    # Read whole, the file alone adds 191 MiB; recognised from its head, well under 64 MiB.
    assert peak - plain < 64 * 1024, (plain, peak)


# --- many rows naming one file -------------------------------------------------------------------

DUPLICATE_ROWS = 20_000


@pytest.mark.slow
def test_many_rows_naming_one_file_give_dead_letters_of_bounded_size(tmp_path, capsys) -> None:
    write(str(tmp_path / "imgs" / "a.jpg"), imagegen.jpeg("RGB", size=(9, 9)))
    write(str(tmp_path / "imgs" / "b.jpg"), imagegen.jpeg("RGB", size=(10, 9)))
    manifest = tmp_path / "list.csv"
    manifest.write_text("path,label\nimgs/b.jpg,rose\n" + "imgs/a.jpg,rose\n" * DUPLICATE_ROWS)
    out = tmp_path / "out"
    status, _, err = run_build(capsys, "--input", str(manifest), "--output_dir", str(out),
                               "--max_bad_fraction", "1")
    assert status == 0, err
    _accounted(str(out), DUPLICATE_ROWS + 1)
    size = os.path.getsize(out / "dead_letters.jsonl")
    assert size < DUPLICATE_ROWS * 600, size  # each names a few others, not all 19,999
    letters = dead_letters(str(out))
    assert {d["reason"] for d in letters} == {"duplicate_path"}
    rows = sorted(int(d["error"].split(f"{manifest}:", 1)[1].split(")", 1)[0]) for d in letters)
    assert rows == list(range(3, DUPLICATE_ROWS + 3))  # each names its own manifest line
    assert all(f"also comes from {DUPLICATE_ROWS - 1} other inputs" in d["error"] for d in letters)
    assert all(f"and {DUPLICATE_ROWS - 4} more" in d["error"] for d in letters)


def _tga(size: tuple[int, int]) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, (1, 2, 3)).save(out, format="TGA")  # TGA has no magic number
    return out.getvalue()


@pytest.mark.parametrize("head, magic, image", [
    (imagegen.jpeg("RGB", size=(16, 12)), True, True),
    (imagegen.png("RGBA", size=(10, 7)), True, True),
    (imagegen.webp(size=(6, 4)), True, True),
    (imagegen.tiff(size=(6, 4)), True, True),
    (_tga((300, 300))[:64 * 1024], None, True),  # TGA has no magic number: its header decides
    (b"\x00\x00\x00\x20ftypisom\x00\x00\x02\x00isomiso2avc1mp41" + bytes(64 * 1024), False, False),
    (bytes(64 * 1024), False, False),
    (b"just some text\n" * 5000, False, False),
    (b"PK\x03\x04" + bytes(64 * 1024), False, False),
])
def test_could_be_image_from_the_head(head: bytes, magic: bool | None, image: bool) -> None:
    if magic is not None:
        assert has_image_magic(head) == magic
    assert could_be_image(head) == image


# --- too many rejected inputs ---------------------------------------------------------------------

@pytest.mark.slow
def test_too_many_rejected_inputs_refuse_before_any_shard_is_written(tmp_path) -> None:
    # A wrong --class_names rejects a third of the inputs. Before, every shard was
    # read, encoded and written to staging (a "wrote shard ..." line each), and only then refused.
    root = tmp_path / "in"
    make_class_tree(str(root), per_class=4, broken=False)
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "beam_jobs.build_shards", "--input", str(root),
                           "--output_dir", str(out), "--class_names", "daisy,rose", "--num_shards", "2"],
                          capture_output=True, text=True, cwd=REPO, timeout=300)
    assert proc.returncode == 1, proc.stderr
    assert "wrote shard" not in proc.stderr, proc.stderr
    *_, cause, kept = proc.stderr.strip().splitlines()
    assert cause.startswith(
        "build_shards: failed: 4 of 12 inputs (33.3%) were rejected, more than --max_bad_fraction 0.01; "
        "nothing was published"), proc.stderr
    assert kept.startswith("build_shards: staged work kept in "), proc.stderr
    assert sorted(os.listdir(out)) == [".staging", "dead_letters.jsonl"]  # staging kept for a rerun; no lock
    assert len(dead_letters(str(out))) == 4


# --- labels: integers are class indices in every input kind ------------------------------------


def _error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("build_shards: error:")]
    assert len(lines) == 1, err
    return lines[0]


def test_a_mix_of_integer_and_text_labels_is_refused_before_any_image_is_read(tmp_path, capsys) -> None:
    rows = [f"{name}.jpg,{name}" for name in ("n01440764", "n01443537")] + [f"i{i}.jpg,{i}" for i in range(5)]
    manifest = write(str(tmp_path / "m.csv"), ("path,label\n" + "\n".join(rows) + "\n").encode())
    out = str(tmp_path / "out")
    status, _, err = run_build(capsys, "--input", manifest, "--output_dir", out)  # no image exists: none is read
    assert status == 2, err
    line = _error_line(err)
    assert "labels mix class indices and class names (e.g. 0 and 'n01440764')" in line and "--class_names" in line
    assert not os.path.exists(os.path.join(out, "manifest.json"))
    # Refused before any image was read: no staged work to keep, and the error is the last line.
    assert err.strip().splitlines()[-1] == line and not os.path.exists(os.path.join(out, ".staging"))


def _one_sample_shard(path: str, label_member: str, label: bytes) -> str:
    import tarfile

    from tests.archive_fixtures import add_bytes

    with tarfile.open(path, "w") as archive:
        add_bytes(archive, "a.png", imagegen.encode(imagegen.image("RGB", 8, 8, salt=1), "PNG"))
        add_bytes(archive, f"a.{label_member}", label)
        add_bytes(archive, "b.png", imagegen.encode(imagegen.image("RGB", 8, 8, salt=2), "PNG"))
        add_bytes(archive, "b.cls", b"1")
    return path


@pytest.mark.parametrize("kind, index", [("cls", 50_000_000), ("json", 40_000_000), ("parquet", 60_000_000)])
def test_a_huge_class_index_is_refused_in_one_line(kind, index, tmp_path, capsys) -> None:
    if kind == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        path = str(tmp_path / "rows.parquet")
        pq.write_table(pa.table({"image": pa.array([imagegen.encode(imagegen.image("RGB", 8, 8), "PNG")] * 2),
                                 "label": pa.array([1, index], pa.int64())}), path)
    else:
        label = str(index).encode() if kind == "cls" else json.dumps({"label": index}).encode()
        path = _one_sample_shard(str(tmp_path / "shard.tar"), kind, label)
    status, _, err = run_build(capsys, "--input", path, "--output_dir", str(tmp_path / "out"))
    assert status == 2, err
    assert f"class index {index} is far above the 2 inputs listed" in _error_line(err)


def test_one_class_written_with_and_without_a_space_in_a_csv_is_refused_before_any_image_is_read(
        tmp_path, capsys) -> None:
    # A hand-written CSV: "a.jpg,cat" and "b.jpg, cat" would make two classes, "cat" and " cat".
    manifest = write(str(tmp_path / "m.csv"), b"path,label\na.jpg,cat\nb.jpg, cat\nc.jpg,dog\n")
    status, _, err = run_build(capsys, "--input", manifest, "--output_dir", str(tmp_path / "out"))
    assert status == 2, err
    line = _error_line(err)
    assert "class names ' cat' and 'cat' differ only in the white space around them" in line
    assert err.strip().splitlines()[-1] == line and not os.path.exists(tmp_path / "out" / ".staging")
    assert not os.path.exists(tmp_path / "out" / "manifest.json")


def test_mixed_cls_labels_are_refused(tmp_path, capsys) -> None:
    mixed = _one_sample_shard(str(tmp_path / "mixed.tar"), "cls", b"cat")
    status, _, err = run_build(capsys, "--input", mixed, "--output_dir", str(tmp_path / "out1"))
    assert status == 2 and "labels mix class indices and class names (e.g. 1 and 'cat')" in _error_line(err)


def test_a_cls_that_is_not_utf8_is_a_dead_letter(tmp_path, capsys) -> None:
    bad = _one_sample_shard(str(tmp_path / "bad.tar"), "cls", b"caf\xe9")
    out = str(tmp_path / "out2")
    status, _, err = run_build(capsys, "--input", bad, "--output_dir", out, "--max_bad_fraction", "0.5")
    assert status == 0, err
    _accounted(out, 2)
    assert [(d["path"], d["reason"]) for d in dead_letters(out)] == [(f"{bad}!a.png", "bad_label")]
    assert open(os.path.join(out, "labels.txt")).read().split() == ["0", "1"]


def test_hugging_face_class_label_names_given_twice_are_refused(tmp_path, capsys) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    features = {"image": {"_type": "Image"}, "label": {"_type": "ClassLabel", "names": ["cat", "cat", "dog"]}}
    table = pa.table({"image": pa.array([imagegen.encode(imagegen.image("RGB", 8, 8), "PNG")]),
                      "label": pa.array([2], pa.int64())})
    path = str(tmp_path / "rows.parquet")
    pq.write_table(table.replace_schema_metadata({"huggingface": json.dumps({"info": {"features": features}})}), path)
    status, _, err = run_build(capsys, "--input", path, "--output_dir", str(tmp_path / "out"))
    assert status == 2
    assert "'cat' twice (at 0 and 1)" in _error_line(err)
