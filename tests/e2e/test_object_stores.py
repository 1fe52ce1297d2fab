"""The build job on object stores: S3 (moto's server) and GCS (gcp-storage-emulator) on loopback.

Each store gets a small class-folder tree uploaded under ``raw/``; the job runs
with ``--input <store>://bucket/raw --output_dir <store>://bucket/shards`` and
the published objects must be the bytes a local build of the same tree writes,
and the verify job must pass them where they lie.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pickle
import subprocess
import sys

import apache_beam as beam
import crc32c
import pytest
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions

from tests.shard_fixtures import run_build
from tests.trees import Part
from transforms import beam_compat
from transforms import filesystems as clients
from transforms.storage import folders
from transforms.filesystems import naming_s3_errors
from transforms.storage.files import open_for_read
from transforms.tfrecord.file_hash import crc32c_text
from transforms.images.inputs import LabelRules, is_hidden
from tests.helpers import tree_entries
from transforms.images.items import SourceImage
from transforms.shardset.dead_letters import DeadLetter

boto3 = pytest.importorskip("boto3", reason="needs apache-beam[aws] (pip install -e '.[test]')")
gcs = pytest.importorskip("google.cloud.storage", reason="needs apache-beam[gcp] (pip install -e '.[test]')")

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUCKET = "shards-test"
BUILD_FLAGS = ("--num_shards", "3", "--seed", "5")


def read_bytes(path: str) -> bytes:
    """Reads a whole file as the product opens it (``open_for_read``)."""
    with open_for_read(path) as fh, naming_s3_errors(path):
        return fh.read()


def _s3_flags(url: str) -> list[str]:
    return ["--s3_endpoint_url", url, "--s3_access_key_id", "testing",
            "--s3_secret_access_key", "testing", "--s3_region_name", "us-east-1"]


class _S3Bucket:
    """The test bucket through boto3."""

    def __init__(self, url: str) -> None:
        self.client = boto3.client("s3", endpoint_url=url, aws_access_key_id="testing",
                                   aws_secret_access_key="testing", region_name="us-east-1")
        self.client.create_bucket(Bucket=BUCKET)

    def put(self, key: str, data: bytes) -> None:
        self.client.put_object(Bucket=BUCKET, Key=key, Body=data)

    def get(self, key: str) -> bytes:
        return self.client.get_object(Bucket=BUCKET, Key=key)["Body"].read()

    def keys(self, prefix: str) -> list[str]:
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
        return sorted(o["Key"] for page in pages for o in page.get("Contents", []))


class _GcsBucket:
    """The test bucket through google-cloud-storage (anonymous, on the emulator)."""

    def __init__(self) -> None:
        from google.auth.credentials import AnonymousCredentials

        self.client = gcs.Client(project="my-project-123", credentials=AnonymousCredentials())
        self.bucket = self.client.create_bucket(BUCKET)

    def put(self, key: str, data: bytes) -> None:
        self.bucket.blob(key).upload_from_string(data)

    def get(self, key: str) -> bytes:
        return self.bucket.blob(key).download_as_bytes()

    def keys(self, prefix: str) -> list[str]:
        return sorted(b.name for b in self.client.list_blobs(BUCKET, prefix=prefix))


def _upload_tree(bucket, root: str, prefix: str) -> None:
    for folder, _, files in os.walk(root):
        for name in files:
            path = os.path.join(folder, name)
            with open(path, "rb") as fh:
                bucket.put(f"{prefix}/{os.path.relpath(path, root)}", fh.read())


TREE = (Part(per_class=4),)  # the module's input tree (tests/trees.py)


@pytest.fixture(scope="module")
def local_out(tree, tmp_path_factory):
    """The same tree built on local disk: the bytes every store must hold."""
    from beam_jobs import build_shards

    out = str(tmp_path_factory.mktemp("local_out") / "shards")  # named as the stores' prefix: tfds's name
    assert build_shards.run(["--input", tree, "--output_dir", out, *BUILD_FLAGS]) == 0
    return out


@pytest.fixture(scope="module")
def s3_bucket(s3_server, tree):
    bucket = _S3Bucket(s3_server.url)
    _upload_tree(bucket, tree, "raw")
    return bucket


@pytest.fixture(scope="module")
def gcs_bucket(gcs_server, tree):
    bucket = _GcsBucket()
    _upload_tree(bucket, tree, "raw")
    return bucket


def _assert_same_as_local(bucket, prefix: str, local_out: str) -> None:
    names = sorted(os.path.relpath(os.path.join(folder, name), local_out).replace(os.sep, "/")
                   for folder, _, files in os.walk(local_out) for name in files)
    assert bucket.keys(prefix + "/") == [f"{prefix}/{n}" for n in names]  # no .staging left
    manifest = json.loads(bucket.get(f"{prefix}/manifest.json"))
    with open(os.path.join(local_out, "manifest.json"), "rb") as fh:
        local_manifest = json.load(fh)
    assert manifest["options"]["input"] == [manifest["splits"]["train"]["built_from"][0]]  # the bucket's raw/
    assert manifest["splits"]["train"]["built_from"][0].endswith("/raw")
    for splits in (manifest["splits"], local_manifest["splits"]):  # built from other --input values
        for split in splits.values():
            del split["built_from"]
    assert manifest["splits"] == local_manifest["splits"]
    assert manifest["labels"] == local_manifest["labels"] == ["daisy", "rose", "tulip"]
    assert bucket.get(f"{prefix}/shards.jsonl") == open(os.path.join(local_out, "shards.jsonl"), "rb").read()
    shards = [json.loads(line) for line in bucket.get(f"{prefix}/shards.jsonl").splitlines()]
    assert [s["file"] for s in shards] == [f"train-0000{i}-of-00003.tfrecord" for i in range(3)]
    for shard in shards:
        data = bucket.get(f"{prefix}/{shard['file']}")
        assert (len(data), crc32c_text(crc32c.crc32c(data))) == (shard["bytes"], shard["crc32c"])
    for name in names:
        if name != "manifest.json":  # the manifest names the input, which differs
            with open(os.path.join(local_out, name), "rb") as fh:
                assert bucket.get(f"{prefix}/{name}") == fh.read(), name
    assert bucket.get(f"{prefix}/dead_letters.jsonl") == b""  # an empty object, written


def _verify(capsys, *argv: str) -> tuple[int, str, str]:
    from beam_jobs import verify_shards

    capsys.readouterr()
    status = verify_shards.run(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


@pytest.mark.slow
def test_s3_filesystem_does_what_the_sink_needs(s3_server, s3_bucket):
    FileSystems.set_options(PipelineOptions(_s3_flags(s3_server.url)))
    base = f"s3://{BUCKET}/fs"
    for name, data in [("stage/a.tmp", b"a"), ("stage/sub/b.tmp", b"bb"), ("top", b"t")]:
        fh = FileSystems.create(f"{base}/{name}")
        fh.write(data)
        clients.close_written_file(fh)
    fh = FileSystems.create(f"{base}/empty")
    clients.close_written_file(fh)  # Beam alone cannot close an empty S3 upload
    assert s3_bucket.get("fs/empty") == b""
    assert [m.path for m in FileSystems.match([f"{base}/**"])[0].metadata_list] == [
        f"{base}/empty", f"{base}/stage/a.tmp", f"{base}/stage/sub/b.tmp", f"{base}/top"]
    assert [m.path for m in FileSystems.match([f"{base}/*"])[0].metadata_list] == [
        f"{base}/empty", f"{base}/top"]
    FileSystems.rename([f"{base}/stage/a.tmp"], [f"{base}/a"])
    assert s3_bucket.get("fs/a") == b"a" and not FileSystems.exists(f"{base}/stage/a.tmp")
    assert not FileSystems.exists(f"{base}/stage")  # no folder objects on S3
    folders.delete_tree(f"{base}/stage")
    assert s3_bucket.keys("fs/") == ["fs/a", "fs/empty", "fs/top"]


def test_s3_reads_share_one_client_per_thread(s3_server, s3_bucket):
    options = PipelineOptions(_s3_flags(s3_server.url))
    FileSystems.set_options(options)
    s3_bucket.put("reads/a.bin", b"x" * 70_000)
    assert read_bytes(f"s3://{BUCKET}/reads/a.bin") == b"x" * 70_000
    first = clients.shared_s3io()
    client = clients.store_client("s3")
    assert read_bytes(f"s3://{BUCKET}/raw/daisy/daisy_000.jpg") == s3_bucket.get("raw/daisy/daisy_000.jpg")
    assert clients.shared_s3io() is first  # one client, not one per file
    assert clients.store_client("s3") is client and first.client.client is client  # one boto3 client
    with pytest.raises(FileNotFoundError):
        read_bytes(f"s3://{BUCKET}/reads/missing.bin")
    FileSystems.set_options(PipelineOptions(_s3_flags(s3_server.url)))
    assert clients.shared_s3io() is not first  # new options, new client


@pytest.mark.slow
@pytest.mark.parametrize("listing", [[], ["--list_key_ranges", "4"]], ids=["by_folder", "key_ranges"])
def test_build_on_s3_matches_a_local_build(s3_server, s3_bucket, local_out, capsys, listing):
    prefix = "ranges/shards" if listing else "shards"  # the key ranges change no byte (same set name)
    status, out, err = run_build(capsys, "--input", f"s3://{BUCKET}/raw",
                                 "--output_dir", f"s3://{BUCKET}/{prefix}", *BUILD_FLAGS,
                                 *_s3_flags(s3_server.url), *listing)
    assert status == 0, err
    assert f"Published 12 records to s3://{BUCKET}/{prefix}" in out
    _assert_same_as_local(s3_bucket, prefix, local_out)
    status, out, err = _verify(capsys, "--output_dir", f"s3://{BUCKET}/{prefix}", "--decode_images",
                               *_s3_flags(s3_server.url))
    assert status == 0 and "12 records" in out, out + err  # read back in place, in ranges


@pytest.mark.slow
def test_renames_handed_out_on_s3_give_the_same_objects_and_may_be_done_again(s3_server, s3_bucket, local_out,
                                                                              capsys, monkeypatch):
    from transforms import shard_sink

    monkeypatch.setattr(shard_sink, "PARALLEL_MOVES", 0)  # every rename to MoveStaged, two a chunk
    monkeypatch.setattr(shard_sink, "RENAME_CHUNK", 2)
    status, out, err = run_build(capsys, "--input", f"s3://{BUCKET}/raw", "--output_dir",
                                 f"s3://{BUCKET}/handed/shards", *BUILD_FLAGS, *_s3_flags(s3_server.url))
    assert status == 0, err
    _assert_same_as_local(s3_bucket, "handed/shards", local_out)
    base = f"s3://{BUCKET}/handed/moves"
    for name in ("a.tmp", "b.tmp"):
        s3_bucket.put(f"handed/moves/{name}", name.encode())
    moves = [(f"{base}/{n}.tmp", f"{base}/{n}", hashlib.sha256(f"{n}.tmp".encode()).hexdigest()) for n in "ab"]
    assert folders.move_chunk(moves) == 2
    assert folders.move_chunk(moves) == 2  # a retried chunk: the sources are gone, the objects in place
    assert s3_bucket.keys("handed/moves/") == ["handed/moves/a", "handed/moves/b"]


def _forget_gcp_credentials() -> None:
    """Makes the next GCS client of this process look its credentials up again."""
    from apache_beam.internal.gcp import auth

    auth._Credentials._credentials_init = False
    auth._Credentials._credentials = None


@pytest.mark.slow
def test_build_on_gcs_matches_a_local_build(gcs_server, gcs_bucket, local_out, capsys, caplog):
    _forget_gcp_credentials()
    with caplog.at_level(logging.WARNING):
        status, out, err = run_build(capsys, "--input", f"gs://{BUCKET}/raw",
                                     "--output_dir", f"gs://{BUCKET}/shards", *BUILD_FLAGS,
                                     "--no_auth")
    assert status == 0, err
    assert f"Published 12 records to gs://{BUCKET}/shards" in out
    # --no_auth: no credential lookup (and its ~24 s of retries) before going anonymous.
    assert "credentials" not in caplog.text.lower(), caplog.text
    _assert_same_as_local(gcs_bucket, "shards", local_out)
    status, out, err = _verify(capsys, "--output_dir", f"gs://{BUCKET}/shards", "--decode_images",
                               "--no_auth")
    assert status == 0 and "12 records" in out, out + err


@pytest.mark.slow
def test_refused_publish_on_gcs_clears_staging(gcs_server, gcs_bucket, capsys):
    for i in range(5):  # 5 bad of 17 inputs: more than --max_bad_fraction
        gcs_bucket.put(f"bad_raw/rose/bad_{i}.jpg", b"not an image %d" % i)
    status, _, err = run_build(capsys, "--input", f"gs://{BUCKET}/raw", "--input",
                               f"gs://{BUCKET}/bad_raw", "--output_dir", f"gs://{BUCKET}/refused",
                               "--num_shards", "2", "--max_bad_fraction", "0.1", "--no_auth")
    assert status == 1 and "--max_bad_fraction" in err, err
    # The 12 good images were staged before publishing was refused; nothing of them is left.
    assert gcs_bucket.keys("refused/") == ["refused/dead_letters.jsonl"]
    assert len(gcs_bucket.get("refused/dead_letters.jsonl").splitlines()) == 5


# Folders below class folders, hidden files, a file in the root, and folder names Beam's match
# would read as wildcards: each level is listed as its own element, by prefix, never matched.
_NESTED = ["rose/a.jpg", "rose/deep/b.jpg", "rose/deep/er/c.jpg", "tulip/.DS_Store", ".git/x", "stray.jpg",
           "we[ird]*/d.jpg", "we[ird]*/s?/e.jpg", "we[ird]*/s?/f/g.jpg"]


def _keep_listed(items: list, path: str) -> None:
    with open(path, "wb") as fh:
        pickle.dump(items, fh)


def _discover_on_store(root: str, flags: list[str], tmp_path, **listing) -> tuple[list, list, dict]:
    from tests.helpers import discover_images_of

    p = beam.Pipeline(runner=beam_compat.local_runner(PipelineOptions(flags)), options=PipelineOptions(flags))
    listed = p | discover_images_of([root], LabelRules(), **listing)
    for name, kind in (("main", SourceImage), ("dead", DeadLetter)):
        (listed
         | f"Only{name}" >> beam.Filter(lambda entry, kind=kind: isinstance(entry, kind))
         | f"Collect{name}" >> beam.combiners.ToList()
         | f"Keep{name}" >> beam.Map(_keep_listed, str(tmp_path / name)))
    result = p.run()
    result.wait_until_finish()
    counters: dict[str, int] = {}
    for counter in result.metrics().query(MetricsFilter().with_namespace("build"))["counters"]:
        counters[counter.key.metric.name] = counters.get(counter.key.metric.name, 0) + counter.committed
    with open(tmp_path / "main", "rb") as fh, open(tmp_path / "dead", "rb") as dh:
        return pickle.load(fh), pickle.load(dh), counters


def _expected_listing(root: str) -> tuple[list, list]:
    entries = list(tree_entries(root, [r for r in _NESTED if not is_hidden(r)], LabelRules()))
    return ([e for e in entries if not isinstance(e, DeadLetter)],
            [e for e in entries if isinstance(e, DeadLetter)])


@pytest.mark.slow
@pytest.mark.parametrize("listing", [{}, {"key_ranges": 3, "first_keys": 1}], ids=["whole", "key_ranges"])
@pytest.mark.parametrize("store", ["s3", "gs"])
def test_a_nested_tree_on_a_store_is_listed_by_level(store, listing, request, tmp_path) -> None:
    """Listed by level; with key ranges (past each class folder's first key), the same entries."""
    if store == "s3":
        server = request.getfixturevalue("s3_server")
        bucket, flags = request.getfixturevalue("s3_bucket"), _s3_flags(server.url)
    else:
        request.getfixturevalue("gcs_server")
        bucket, flags = request.getfixturevalue("gcs_bucket"), []
        beam_compat.use_anonymous_gcp_credentials()
    for rel in _NESTED:
        bucket.put(f"nested/{rel}", b"x")
    root = f"{store}://{BUCKET}/nested"
    entries, dead, counters = _discover_on_store(root, flags, tmp_path, **listing)
    want_entries, want_dead = _expected_listing(root)
    assert sorted(entries, key=repr) == sorted(want_entries, key=repr)
    assert sorted(dead, key=repr) == sorted(want_dead, key=repr) and dead  # stray.jpg: no_label
    assert counters["hidden_files_skipped"] == 2
    # The input's own objects, then each of its 4 top prefixes (class folders) with everything below.
    assert counters["folders_listed"] == 1 + 4
    # rose and we[ird]* hold 3 keys each: 1 listed first, the other 2 in at most 3 ranges each.
    assert (counters.get("key_ranges_cut", 0) >= 2) == bool(listing)


@pytest.mark.parametrize("store", ["s3", "gs"])
def test_a_large_prefix_is_listed_in_key_ranges_by_several_elements(store, request, tmp_path) -> None:
    """Past its first first_keys keys, a class folder is cut into key ranges listed apart."""
    from transforms.storage.listing import list_store_range

    if store == "s3":
        server = request.getfixturevalue("s3_server")
        bucket, flags = request.getfixturevalue("s3_bucket"), _s3_flags(server.url)
        clients.set_options(PipelineOptions(flags))
    else:
        request.getfixturevalue("gcs_server")
        bucket, flags = request.getfixturevalue("gcs_bucket"), []
        beam_compat.use_anonymous_gcp_credentials()
    names = [f"{i:03d}.jpg" for i in range(60)] + ["[x]*.jpg", "é.jpg", ".hidden.jpg"]
    for name in names:
        bucket.put(f"flat/cat/{name}", b"x")
    bucket.put("flat/dog/a.jpg", b"x")
    bucket.put("flat/cat0.jpg", b"x")  # beside the prefix, never in its ranges
    root = f"{store}://{BUCKET}/flat"
    prefix = f"{root}/cat/"
    assert [p[len(prefix):] for p in list_store_range(prefix, "010.jpg", "013.jpg")] == [
        "011.jpg", "012.jpg", "013.jpg"]
    entries, dead, counters = _discover_on_store(root, flags, tmp_path, key_ranges=4, first_keys=5)
    want = [name for name in names if name != ".hidden.jpg"]
    assert sorted(e.relpath for e in entries if e.label == "cat") == sorted(f"cat/{n}" for n in want)
    assert [e.relpath for e in entries if e.label == "dog"] == ["dog/a.jpg"]
    assert len(entries) == len(want) + 1 and [d.reason for d in dead] == ["no_label"]  # cat0.jpg
    assert counters["key_ranges_cut"] == 4 and counters["hidden_files_skipped"] == 1


def test_key_ranges_add_a_step_only_for_a_store_folder() -> None:
    """The ranges' shuffle is wired only when asked for and a task lists below a gs:// or s3:// prefix."""
    from transforms.discover_images import DiscoverImages
    from transforms.images.inputs import FolderTask

    def labels(task: FolderTask, key_ranges: int) -> set[str]:
        p = beam.Pipeline()
        _ = p | "Discover" >> DiscoverImages(LabelRules(), [task], key_ranges=key_ranges)
        return {t.unique_name for t in p.to_runner_api().components.transforms.values()}

    store = FolderTask(f"s3://{BUCKET}/in", f"s3://{BUCKET}/in/cat/", True, "classes")
    local = FolderTask("/data/in", "/data/in/cat", True, "classes")
    assert "Discover/SpreadKeyRanges" in labels(store, 16)
    assert labels(store, 0) == labels(local, 16) and "Discover/SpreadKeyRanges" not in labels(local, 16)


@pytest.mark.slow
def test_an_unreachable_s3_row_is_an_unreadable_dead_letter(tmp_path) -> None:
    """A manifest row on an S3 endpoint nothing listens on: one ``unreadable`` dead letter, and the run ends.

    Before, Beam's S3 reader retried the object's HEAD 7 times with exponential
    backoff (about 10 minutes, each try itself retried by botocore); the job's
    time limit here ended it. Reads of inputs now give up after
    ``clients.S3_READ_ATTEMPTS`` tries of bounded time each.
    """
    from tests.imagegen import jpeg
    from tests.servers import HOST, free_port
    from tests.shard_fixtures import dead_letters, load_manifest, write

    for i in range(3):
        write(str(tmp_path / "imgs" / f"{i}.jpg"), jpeg("RGB", size=(8 + i, 8)))
    manifest = tmp_path / "list.csv"
    remote = f"s3://{BUCKET}/raw/daisy/daisy_000.jpg"
    manifest.write_text("path,label\n" + "".join(f"imgs/{i}.jpg,rose\n" for i in range(3)) + f"{remote},rose\n")
    out = tmp_path / "out"
    dead_port = free_port()  # nothing listens on it: every connection is refused
    env = {**os.environ, "AWS_EC2_METADATA_DISABLED": "true"}
    proc = subprocess.run([sys.executable, "-m", "beam_jobs.build_shards", "--input", str(manifest),
                           "--output_dir", str(out), "--max_bad_fraction", "1",
                           *_s3_flags(f"http://{HOST}:{dead_port}")],
                          capture_output=True, text=True, cwd=REPO, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    published = load_manifest(str(out))
    assert (published["records"], published["dead_letters"]) == (3, 1)
    (dead,) = dead_letters(str(out))
    assert (dead["path"], dead["reason"]) == (remote, "unreadable"), dead
    assert str(dead_port) in dead["error"]  # names the endpoint it could not reach


@pytest.mark.slow
@pytest.mark.parametrize("where", ["local", "s3"])
def test_a_build_to_s3_with_staging_dir_matches_a_local_build(s3_server, s3_bucket, local_out, capsys, tmp_path,
                                                             where):
    # The run files lie in --staging_dir (a local SSD, or another prefix of a bucket); the shards are
    # staged and published in the output folder as ever; the run's own folder goes once it published.
    stage = str(tmp_path / "stage") if where == "local" else f"s3://{BUCKET}/tmp_{where}"
    s3_bucket.put(f"tmp_{where}/other.txt", b"not the build's")
    prefix = f"staged_{where}/shards"
    status, out, err = run_build(capsys, "--input", f"s3://{BUCKET}/raw", "--output_dir", f"s3://{BUCKET}/{prefix}",
                                 "--staging_dir", stage, *BUILD_FLAGS, *_s3_flags(s3_server.url))
    assert status == 0, err
    _assert_same_as_local(s3_bucket, prefix, local_out)
    assert s3_bucket.keys(f"tmp_{where}/") == [f"tmp_{where}/other.txt"]
    if where == "local":
        assert os.listdir(stage) == []


@pytest.mark.slow
@pytest.mark.parametrize("store", ["s3", "gcs"])
def test_array_record_build_on_a_store_holds_the_local_builds_files(store, request, tree, tmp_path, capsys):
    # ArrayRecord's writer takes local paths: each shard is written to a local file, then copied up.
    from beam_jobs import build_shards

    local = str(tmp_path / "shards")
    assert build_shards.run(["--input", tree, "--output_dir", local, *BUILD_FLAGS, "--format", "array_record"]) == 0
    if store == "s3":
        server = request.getfixturevalue("s3_server")
        bucket, flags, scheme = request.getfixturevalue("s3_bucket"), _s3_flags(server.url), "s3"
    else:
        request.getfixturevalue("gcs_server")
        _forget_gcp_credentials()
        bucket, flags, scheme = request.getfixturevalue("gcs_bucket"), ["--no_auth"], "gs"
    out = f"{scheme}://{BUCKET}/array_record/shards"
    status, _, err = run_build(capsys, "--input", tree, "--output_dir", out, *BUILD_FLAGS, *flags,
                               "--format", "array_record")
    assert status == 0, err
    shards = [json.loads(line) for line in bucket.get("array_record/shards/shards.jsonl").splitlines()]
    assert [s["file"] for s in shards] == [f"train-0000{i}-of-00003.array_record" for i in range(3)]
    assert bucket.get("array_record/shards/shards.jsonl") == open(os.path.join(local, "shards.jsonl"), "rb").read()
    for shard in shards:
        assert bucket.get(f"array_record/shards/{shard['file']}") == open(os.path.join(local, shard["file"]), "rb").read()
    assert not [key for key in bucket.keys("array_record/shards/") if "/.staging/" in key]
    for shard in shards:  # no .idx; each shard's keys file, as the local build's
        assert bucket.get(f"array_record/shards/index/{shard['file']}.keys") == open(
            os.path.join(local, "index", shard["file"] + ".keys"), "rb").read()
    assert len([key for key in bucket.keys("array_record/shards/") if "/index/" in key]) == len(shards)
    status, out_text, err = _verify(capsys, "--output_dir", out, "--decode_images", *flags)
    assert status == 0 and "12 records" in out_text, out_text + err
