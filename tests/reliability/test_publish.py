"""Reliability: what publishing may touch in the output folder, and runs that must not start.

Cases of RELIABILITY.md ("Your data is never touched"; "Disk full, permissions,
concurrent runs"): shard-named files the tool did not write, one split at a time into one
folder, an output folder overlapping the input, a disk that fills up, two runs
into one folder at once, and output folders or flags that cannot work.
"""

from __future__ import annotations

import io
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile

import pytest
from PIL import Image

from tests.reliability_support import assert_only_shard_set, manifest_problems, tree_state
from tests.shard_fixtures import load_manifest, make_class_tree, run_build, write
from tests.reliability.test_kill import REPO, _log_tail, _start, _wait_for
from tests.trees import Part
from transforms.shardset.run_lock import LOCK_NAME, LockInfo
from transforms.shardset.disk_needs import size_text
from transforms.storage.run_lock_files import pid_space

FLAGS = ["--num_shards", "2", "--seed", "3"]
WAIT_S = 180.0


def _one_line(err: str, job: str = "build_shards") -> str:
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.startswith(f"{job}:")
             and not line.startswith(f"{job}: staged work kept in ")]  # what a failed build left, last
    assert len(lines) == 1, err
    return lines[0]


def _published(state: str | dict) -> dict:
    """``tree_state`` of a folder (or a state) without its ``.staging``, which a failed build keeps."""
    state = tree_state(state) if isinstance(state, str) else state
    return {path: what for path, what in state.items() if path.split(os.sep)[0] != ".staging"}


def _verify(capsys, folder: str) -> tuple[int, str]:
    from beam_jobs import verify_shards

    capsys.readouterr()
    status = verify_shards.run(["--output_dir", folder])
    out, err = capsys.readouterr()
    return status, out + err


def _reshard(capsys, *argv: str) -> tuple[int, str, str]:
    from beam_jobs import reshard

    capsys.readouterr()
    status = reshard.run(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def _listed(folder: str) -> dict[str, list[str]]:
    return {name: [s["file"] for s in split["shards"]]
            for name, split in load_manifest(folder)["splits"].items()}


TREE = (Part(per_class=4),)  # the module's input tree (tests/trees.py)


# ---------------------------------------------------------------------------------------------
# 1. Publishing deletes only files the tool wrote.

@pytest.mark.slow
def test_a_users_shard_named_file_stops_the_run_and_stays(tree, tmp_path, capsys):
    out = str(tmp_path / "out")
    mine = write(os.path.join(out, "validation-00000-of-00001.tfrecord"), b"the user's own records")
    write(os.path.join(out, "test-00000-of-00002.tfrecord.gz"), b"more")
    write(os.path.join(out, "notes.txt"), b"keep me")
    before = tree_state(out)
    status, _, err = run_build(capsys, "--input", tree, "--output_dir", out, *FLAGS)
    line = _one_line(err)
    assert status == 2
    assert "test-00000-of-00002.tfrecord.gz and 1 more" in line and "--overwrite_unlisted_shards" in line
    assert tree_state(out) == before  # nothing written, nothing removed, no lock left

    status, _, err = run_build(capsys, "--input", tree, "--output_dir", out, *FLAGS,
                               "--overwrite_unlisted_shards")
    assert status == 0, err
    assert not os.path.exists(mine)  # asked for: replaced
    assert open(os.path.join(out, "notes.txt"), "rb").read() == b"keep me"
    assert _verify(capsys, out)[0] == 0


def test_shard_named_files_a_manifest_does_not_list_stop_the_run(tree, tmp_path, capsys):
    out = str(tmp_path / "out")
    assert run_build(capsys, "--input", tree, "--output_dir", out, *FLAGS)[0] == 0
    stray = write(os.path.join(out, "train-00000-of-00009.tfrecord"), b"not from this tool")
    status, _, err = run_build(capsys, "--input", tree, "--output_dir", out, "--num_shards", "3")
    assert status == 2 and "train-00000-of-00009.tfrecord" in _one_line(err)
    assert open(stray, "rb").read() == b"not from this tool"
    assert _listed(out) == {"train": [f"train-0000{i}-of-00002.tfrecord" for i in range(2)]}


def test_an_unreadable_manifest_does_not_make_its_shards_the_tools(tree, tmp_path, capsys):
    out = str(tmp_path / "out")
    write(os.path.join(out, "manifest.json"), b'{"format": "someone-elses"}')
    write(os.path.join(out, "train-00000-of-00001.tfrecord"), b"theirs")
    status, _, err = run_build(capsys, "--input", tree, "--output_dir", out, *FLAGS)
    line = _one_line(err)
    assert status == 2 and "cannot be read" in line and "train-00000-of-00001.tfrecord" in line


# ---------------------------------------------------------------------------------------------
# 2. One split at a time into one folder.

@pytest.mark.slow
def test_reshard_one_split_at_a_time_keeps_the_other(tree, tmp_path, capsys):
    old, new = str(tmp_path / "old"), str(tmp_path / "new")
    status, _, err = run_build(capsys, "--input", tree, "--output_dir", old, "--num_shards", "2",
                               "--split_fractions", "train=0.5,validation=0.5", "--seed", "3")
    assert status == 0, err
    for split in ("train", "validation"):  # README's recipe
        status, _, err = _reshard(capsys, "--input", os.path.join(old, f"{split}-*"), "--output_dir", new,
                                  "--split", split, "--num_shards", "2")
        assert status == 0, err
    listed = _listed(new)
    assert sorted(listed) == ["train", "validation"]
    assert load_manifest(new)["labels"] == ["daisy", "rose", "tulip"]
    assert manifest_problems(new, open(os.path.join(new, "manifest.json"), "rb").read()) == []
    assert_only_shard_set(new)
    status, report = _verify(capsys, new)
    assert status == 0, report


@pytest.mark.slow
def test_build_one_split_at_a_time_keeps_the_other(tmp_path, capsys):
    train, val, out = str(tmp_path / "train"), str(tmp_path / "val"), str(tmp_path / "out")
    make_class_tree(train, per_class=3, broken=False, seed=1)
    make_class_tree(val, per_class=2, broken=False, seed=2)
    assert run_build(capsys, "--input", train, "--output_dir", out, "--split", "train", *FLAGS)[0] == 0
    first = _listed(out)["train"]
    train_bytes = {n: open(os.path.join(out, n), "rb").read() for n in first}
    status, out_text, err = run_build(capsys, "--input", val, "--output_dir", out, "--split", "validation",
                                      *FLAGS)
    assert status == 0, err
    listed = _listed(out)
    assert listed["train"] == first and len(listed["validation"]) == 2
    assert {n: open(os.path.join(out, n), "rb").read() for n in first} == train_bytes
    manifest = load_manifest(out)
    assert manifest["records"] == 15 and manifest["splits"]["train"]["records"] == 9
    assert_only_shard_set(out)
    assert _verify(capsys, out)[0] == 0

    # Rebuilding train replaces train only; --drop_other_splits removes validation.
    assert run_build(capsys, "--input", train, "--output_dir", out, "--split", "train",
                     "--num_shards", "3")[0] == 0
    assert sorted(_listed(out)) == ["train", "validation"] and len(_listed(out)["train"]) == 3
    assert_only_shard_set(out)
    assert run_build(capsys, "--input", train, "--output_dir", out, "--split", "train",
                     "--num_shards", "3", "--drop_other_splits")[0] == 0
    assert sorted(_listed(out)) == ["train"]
    assert_only_shard_set(out)


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["append", "flip"])
def test_a_kept_split_that_changed_stops_the_run(tmp_path, capsys, damage):
    train, val, out = str(tmp_path / "train"), str(tmp_path / "val"), str(tmp_path / "out")
    make_class_tree(train, per_class=2, broken=False, seed=1)
    make_class_tree(val, per_class=1, broken=False, seed=2)
    assert run_build(capsys, "--input", train, "--output_dir", out, *FLAGS)[0] == 0
    victim = os.path.join(out, "train-00001-of-00002.tfrecord")
    data = bytearray(open(victim, "rb").read())
    if damage == "append":
        data += b"x"
    else:
        data[40] ^= 0x01
    open(victim, "wb").write(bytes(data))
    before = tree_state(out)
    status, _, err = run_build(capsys, "--input", val, "--output_dir", out, "--split", "validation", *FLAGS)
    line = _one_line(err)
    assert status == 1
    assert "train-00001-of-00002.tfrecord" in line and "--drop_other_splits" in line
    assert _published(out) == _published(before)  # refused before the set changed; its staging is kept


@pytest.mark.slow
def test_a_kept_split_with_other_classes_stops_the_run(tmp_path, capsys):
    train, val, out = str(tmp_path / "train"), str(tmp_path / "val"), str(tmp_path / "out")
    make_class_tree(train, per_class=2, broken=False, seed=1)  # daisy, rose, tulip
    make_class_tree(val, classes=("rose", "tulip"), per_class=2, broken=False, seed=2)
    assert run_build(capsys, "--input", train, "--output_dir", out, *FLAGS)[0] == 0
    before = tree_state(out)
    status, _, err = run_build(capsys, "--input", val, "--output_dir", out, "--split", "validation", *FLAGS)
    line = _one_line(err)
    assert status == 1 and "index two meanings" in line
    assert _published(out) == _published(before)
    # The same class list for both: accepted.
    status, _, err = run_build(capsys, "--input", val, "--output_dir", out, "--split", "validation",
                               "--class_names", "daisy,rose,tulip", *FLAGS)
    assert status == 0, err
    assert load_manifest(out)["labels"] == ["daisy", "rose", "tulip"]
    assert _verify(capsys, out)[0] == 0


# ---------------------------------------------------------------------------------------------
# 6. The output folder may not overlap a folder input.

@pytest.mark.parametrize("output", ["{in}", "{in}/out", "{in}/x/../out", "{link}/out", "{base}"],
                         ids=["same", "inside", "dotdot", "symlink", "contains"])
def test_an_output_folder_overlapping_the_input_is_refused(tmp_path, capsys, output):
    base = tmp_path / "data"
    src = str(base / "in")
    make_class_tree(src, per_class=2, broken=False)
    os.symlink(src, str(tmp_path / "link"))
    before = tree_state(str(tmp_path))
    out = output.format(**{"in": src, "link": str(tmp_path / "link"), "base": str(base)})
    status, _, err = run_build(capsys, "--input", src, "--output_dir", out)
    assert status == 2 and "choose an output folder outside" in _one_line(err)
    assert tree_state(str(tmp_path)) == before


def test_overlapping_urls_are_refused():
    from beam_jobs.cli.values import overlap_problem

    assert "lies inside" in overlap_problem("gs://b/raw", "gs://b/raw/../raw/shards")
    assert "is the --input" in overlap_problem("s3://b/raw/", "s3://b/raw")
    assert "contains" in overlap_problem("s3://b/raw/cats", "s3://b/raw")
    assert overlap_problem("gs://b/raw", "gs://b/raw2") is None
    assert overlap_problem("gs://b/raw", "s3://b/raw/x") is None


# ---------------------------------------------------------------------------------------------
# 7. A full disk: the error says how much is needed, and the next run is not poisoned.

def _noise_tree(root: str, classes: int, per_class: int, side: int, seed: int) -> None:
    rng = random.Random(seed)
    for c in range(classes):
        for i in range(per_class):
            img = Image.frombytes("RGB", (side, side), rng.randbytes(side * side * 3))
            buf = io.BytesIO()
            img.save(buf, format="PNG")
            write(os.path.join(root, f"class{c}", f"{i}.png"), buf.getvalue())


@pytest.fixture
def small_disk():
    """A 2 MiB tmpfs, mounted for the test and unmounted after."""
    folder = tempfile.mkdtemp(prefix="small_disk_")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", folder],
                          capture_output=True, text=True)
    if done.returncode != 0:
        os.rmdir(folder)
        pytest.fail(f"cannot mount a tmpfs (this test needs root): {done.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", folder], check=True)
        os.rmdir(folder)


@pytest.mark.slow
def test_a_full_disk_fails_with_the_space_needed_and_does_not_poison_the_next_run(tmp_path, small_disk,
                                                                                   capsys):
    big, small = str(tmp_path / "big"), str(tmp_path / "small")
    _noise_tree(big, classes=3, per_class=9, side=200, seed=1)  # about 3.2 MB
    _noise_tree(small, classes=2, per_class=3, side=200, seed=2)  # about 0.7 MB
    out = os.path.join(small_disk, "out")
    status, _, err = run_build(capsys, "--input", big, "--output_dir", out, "--num_shards", "1")
    line = _one_line(err)
    assert status == 1
    # The records are staged first (run files), so the disk fills there, before any shard.
    assert f"no space left in {out}" in line and "MiB were free" in line and "twice its shards" in line, line
    assert sorted(os.listdir(out)) == [".staging"]  # lock released; its staging kept for a rerun
    assert err.strip().splitlines()[-1] == (f"build_shards: staged work kept in {out}/.staging; run again to "
                                            "resume, or --fresh to start over")
    # The line ends with what the build needs there against what is free besides what it staged.
    inputs = sum(os.path.getsize(os.path.join(where, name)) for where, _, names in os.walk(big) for name in names)
    kept = sum(os.path.getsize(os.path.join(where, name))
               for where, _, names in os.walk(os.path.join(out, ".staging")) for name in names)
    free = shutil.disk_usage(small_disk).free
    assert line.endswith(f"; this build needs about {size_text(2 * inputs)} free there at its peak (twice its "
                         f"inputs' {size_text(inputs)}) and {size_text(free)} are free now besides the "
                         f"{size_text(kept)} it staged: free about {size_text(2 * inputs - kept - free)} more"), line

    # The failed run's staging fills the disk; the next run, with other inputs, resumes none of it:
    # it clears it when it starts.
    status, _, err = run_build(capsys, "--input", small, "--output_dir", out, "--num_shards", "1")
    assert status == 0, err
    assert_only_shard_set(out)
    assert load_manifest(out)["records"] == 6


# ---------------------------------------------------------------------------------------------
# 8. Two runs into one folder at once.

def _paused_build(tmp_path, op: str, pattern: str, argv: list[str]):
    marker, log = str(tmp_path / "stopped.json"), str(tmp_path / "job.log")
    proc = _start(["-m", "tests.pause_at", op, pattern, "1", marker, "--", *argv], log)
    stopped = _wait_for(marker, proc, log)
    assert stopped["pid"] == proc.pid
    return proc, marker, log


@pytest.mark.slow
def test_a_second_run_into_a_busy_folder_stops_and_the_first_publishes(tree, tmp_path, capsys):
    out = str(tmp_path / "out")
    proc, marker, log = _paused_build(tmp_path, "create", r"/\.staging/",
                                      ["--input", tree, "--output_dir", out, *FLAGS])
    try:
        lock = os.path.join(out, LOCK_NAME)
        status, _, err = run_build(capsys, "--input", tree, "--output_dir", out, "--num_shards", "3")
        line = _one_line(err)
        assert status == 2 and lock in line and f"pid {proc.pid}" in line and f"delete {lock}" in line
        open(marker + ".go", "w").close()
        assert proc.wait(timeout=WAIT_S) == 0, _log_tail(log)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert _listed(out) == {"train": [f"train-0000{i}-of-00002.tfrecord" for i in range(2)]}  # the first's
    assert_only_shard_set(out)  # and the lock is gone
    assert _verify(capsys, out)[0] == 0


@pytest.mark.slow
def test_a_run_that_lost_its_lock_does_not_write_a_manifest(tree, tmp_path):
    out = str(tmp_path / "out")
    proc, marker, log = _paused_build(tmp_path, "create", r"/labels\.txt(\.next)?\.[0-9a-f]+\.tmp$",
                                      ["--input", tree, "--output_dir", out, *FLAGS])
    lock = os.path.join(out, LOCK_NAME)
    other = LockInfo("f" * 32, "build_shards", "elsewhere", 1).dumps()
    try:
        with open(lock, "wb") as fh:  # another run took the folder (e.g. a lock cleared by hand)
            fh.write(other)
        open(marker + ".go", "w").close()
        assert proc.wait(timeout=WAIT_S) == 1
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = _log_tail(log)
    assert "Traceback" not in text
    line = [l for l in text.splitlines() if l.startswith("build_shards: failed:")]
    assert len(line) == 1 and "no longer holds this run" in line[0] and "f" * 32 in line[0], text
    assert not os.path.exists(os.path.join(out, "manifest.json"))
    assert open(lock, "rb").read() == other  # not ours: left alone


def test_a_stale_lock_of_this_pid_namespace_is_broken_and_another_hosts_is_not(tree, tmp_path, capsys):
    out = str(tmp_path / "out")
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                           text=True, check=True)
    lock = write(os.path.join(out, LOCK_NAME),
                 LockInfo("a" * 32, "build_shards", socket.gethostname(), int(ended.stdout),
                          pid_space=pid_space()).dumps())
    status, _, err = run_build(capsys, "--input", tree, "--output_dir", out, *FLAGS)
    assert status == 0, err
    assert_only_shard_set(out)

    write(lock, LockInfo("b" * 32, "reshard", "some-other-host", os.getpid()).dumps())
    status, _, err = run_build(capsys, "--input", tree, "--output_dir", out, *FLAGS)
    line = _one_line(err)
    assert status == 2 and "some-other-host" in line and f"delete {lock}" in line


def test_a_lock_of_another_machine_with_this_host_name_is_not_broken(tree, tmp_path, capsys):
    """Containers and cloned machines share host names: a pid there means nothing here."""
    out = str(tmp_path / "out")
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                           text=True, check=True)
    lock = write(os.path.join(out, LOCK_NAME),
                 LockInfo("c" * 32, "build_shards", socket.gethostname(), int(ended.stdout),
                          pid_space="another-boot/4026531836").dumps())
    status, _, err = run_build(capsys, "--input", tree, "--output_dir", out, *FLAGS)
    line = _one_line(err)
    assert status == 2 and "c" * 32 in line and f"delete {lock}" in line
    assert not os.path.exists(os.path.join(out, "manifest.json"))


# ---------------------------------------------------------------------------------------------
# 13. Output folders and flags that cannot work fail at once.

@pytest.mark.parametrize("flags, message", [
    (["--shard_size_mb", "inf"], "must be between"),
    (["--shard_size_mb", "nan"], "must be between"),
    (["--shard_size_mb", "1e-9"], "must be between"),
    (["--shard_size_mb", "1e12"], "must be between"),
    (["--seed", str(2**63)], "64 bits"),
    (["--seed", str(-2**63 - 1)], "64 bits"),
    (["--image_mode", "reencode", "--resize", "99999999x99999999"], "at most 65535"),
    (["--image_mode", "reencode", "--resize", "20000x20000"], "decompression-bomb limit"),
])
def test_flags_out_of_range_fail_at_once(tree, tmp_path, capsys, flags, message):
    out = str(tmp_path / "out")
    status, _, err = run_build(capsys, "--input", tree, "--output_dir", out, *flags)
    assert status == 2 and message in _one_line(err)
    assert not os.path.exists(out)


@pytest.mark.slow
def test_extreme_seeds_in_range_work(tree, tmp_path, capsys):
    for seed in (str(2**63 - 1), str(-2**63)):
        status, _, err = run_build(capsys, "--input", tree, "--output_dir", str(tmp_path / seed),
                                   "--seed", seed, "--num_shards", "1")
        assert status == 0, err


def test_output_folders_that_cannot_work_fail_at_once(tree, tmp_path, capsys):
    a_file = write(str(tmp_path / "file"), b"x")
    empty = str(tmp_path / "empty")
    os.makedirs(empty)
    for argv, message in [
        (["--input", tree, "--output_dir", a_file], "is a file"),
        (["--input", tree, "--output_dir", os.path.join(a_file, "below")], "lies below"),
        (["--input", empty, "--output_dir", str(tmp_path / "out")], "is an empty folder"),
    ]:
        status, _, err = run_build(capsys, *argv)
        assert status == 2 and message in _one_line(err), (argv, err)
    assert open(a_file, "rb").read() == b"x" and not os.path.exists(tmp_path / "out")


@pytest.mark.slow
def test_an_output_folder_the_user_cannot_write_fails_at_once(tmp_path):
    # Run the job as nobody on a root-owned folder. CAP_DAC_READ_SEARCH lets nobody read the
    # interpreter (under /root, mode 0700) and the inputs; it grants no right to write.
    base = tempfile.mkdtemp(prefix="not_writable_")
    try:
        os.chmod(base, 0o755)
        src, out = os.path.join(base, "in"), os.path.join(base, "out")
        make_class_tree(src, per_class=1, broken=False)
        os.makedirs(out)
        before = tree_state(base)
        done = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
             "--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search",
             sys.executable, "-m", "beam_jobs.build_shards", "--input", src, "--output_dir", out],
            cwd=REPO, capture_output=True, text=True, timeout=WAIT_S,
            env={**os.environ, "HOME": base})
        assert done.returncode == 2, done.stderr
        line = _one_line(done.stderr)
        assert f"--output_dir {out} cannot be written: Permission denied" in line
        assert tree_state(base) == before
    finally:
        shutil.rmtree(base)


# ---------------------------------------------------------------------------------------------
# 8 (object stores). The lock on s3:// (moto) and gs:// (gcp-storage-emulator) on loopback.

LOCK_BUCKET = "lock-test"


def _s3_options(url: str) -> list[str]:
    return ["--s3_endpoint_url", url, "--s3_access_key_id", "testing", "--s3_secret_access_key", "testing",
            "--s3_region_name", "us-east-1"]


@pytest.fixture
def s3_store(s3_server):
    import boto3
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions

    client = boto3.client("s3", endpoint_url=s3_server.url, aws_access_key_id="testing",
                          aws_secret_access_key="testing", region_name="us-east-1")
    client.create_bucket(Bucket=LOCK_BUCKET)
    FileSystems.set_options(PipelineOptions(_s3_options(s3_server.url)))
    return client


@pytest.fixture
def gcs_store(gcs_server):
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions
    from google.api_core.exceptions import Conflict
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    from transforms import beam_compat

    client = storage.Client(project="my-project-123", credentials=AnonymousCredentials())
    try:
        client.create_bucket(LOCK_BUCKET)
    except Conflict:
        pass
    FileSystems.set_options(PipelineOptions(["--no_auth"]))
    beam_compat.use_anonymous_gcp_credentials()
    return client


def _lock_round_trip(out: str) -> None:
    from transforms.errors import PublishError, UsageError
    from transforms.storage.run_lock_files import acquire_lock, check_lock, release_lock
    from transforms.shardset.ownership import PublishPolicy

    first, second = PublishPolicy("1" * 32), PublishPolicy("2" * 32)
    acquire_lock(out, first, "build_shards")
    with pytest.raises(UsageError, match=f"{out}/{LOCK_NAME} is held by run {'1' * 32}"):
        acquire_lock(out, second, "reshard")
    check_lock(out, first.run_id)
    with pytest.raises(PublishError, match="no longer holds this run"):
        check_lock(out, second.run_id)
    assert release_lock(out, second.run_id) is False  # not its lock
    assert release_lock(out, first.run_id) is True
    acquire_lock(out, second, "reshard")  # free again
    assert release_lock(out, second.run_id) is True


@pytest.mark.slow
def test_the_lock_is_exclusive_on_s3(s3_store):
    from transforms.storage.writing import create_exclusive_s3

    out = f"s3://{LOCK_BUCKET}/shards"
    _lock_round_trip(out)
    # The conditional put itself refuses an existing object (If-None-Match: *), whatever the
    # existence check before it saw.
    assert create_exclusive_s3(f"{out}/race", b"a") is True
    assert create_exclusive_s3(f"{out}/race", b"b") is False
    assert s3_store.get_object(Bucket=LOCK_BUCKET, Key="shards/race")["Body"].read() == b"a"


def test_the_lock_is_exclusive_on_gcs(gcs_store):
    _lock_round_trip(f"gs://{LOCK_BUCKET}/shards")


@pytest.mark.slow
def test_a_build_into_a_busy_s3_folder_stops_at_once(s3_server, s3_store, tree, capsys):
    key = f"busy/{LOCK_NAME}"
    s3_store.put_object(Bucket=LOCK_BUCKET, Key=key,
                        Body=LockInfo("c" * 32, "build_shards", "another-host", 42).dumps())
    out = f"s3://{LOCK_BUCKET}/busy"
    status, _, err = run_build(capsys, "--input", tree, "--output_dir", out, *FLAGS,
                               *_s3_options(s3_server.url))
    line = _one_line(err)
    assert status == 2 and f"{out}/{LOCK_NAME}" in line and "another-host" in line
    keys = [o["Key"] for o in s3_store.list_objects_v2(Bucket=LOCK_BUCKET, Prefix="busy/").get("Contents", [])]
    assert keys == [key]  # nothing written: no probe, no staging
    # Once the stale lock is deleted (as the line says), the build runs and leaves no lock behind.
    s3_store.delete_object(Bucket=LOCK_BUCKET, Key=key)
    status, _, err = run_build(capsys, "--input", tree, "--output_dir", out, *FLAGS,
                               *_s3_options(s3_server.url))
    assert status == 0, err
    keys = [o["Key"] for o in s3_store.list_objects_v2(Bucket=LOCK_BUCKET, Prefix="busy/")["Contents"]]
    assert f"busy/{LOCK_NAME}" not in keys and "busy/manifest.json" in keys
    assert not [k for k in keys if "/." in k]  # no probe, lock, journal or staging
