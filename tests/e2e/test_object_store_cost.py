"""What a build costs on an object store grows linearly with its images (S3: moto's server on loopback).

The build runs twice, with ``SMALL`` and ``LARGE`` images, every request
through a counting proxy (``benchmarks.object_store``, where the
full table is made). Reading a record back from a run file must be one bounded
request: a range open to the end of the run file has the store send the rest
of it for every record, so the bytes downloaded per input byte grow with the
build's size.
"""

from __future__ import annotations

import collections
import contextlib

import pytest

from benchmarks.object_store import PER_SHARD, gs_kind, measure_gs, measure_s3
from tests.fault_proxy import FaultProxy
from transforms.tfrecord.framing import frame_record

pytest.importorskip("boto3", reason="needs apache-beam[aws] (pip install -e '.[test]')")

SMALL, LARGE = 30, 300
# Requests per added image: one GET to read it, one to copy its record from its run file; and some slack.
MAX_REQUESTS_PER_IMAGE = 2.5


@pytest.mark.slow
def test_a_build_on_s3_downloads_and_requests_linearly_in_its_images(s3_server, monkeypatch):
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    small = measure_s3(s3_server.port, SMALL, steps=("build",), seed=1)[0]
    large = measure_s3(s3_server.port, LARGE, steps=("build",), seed=2)[0]
    assert large.down_per_byte <= 1.2 * small.down_per_byte, (small, large)
    added = (large.total - small.total) / (LARGE - SMALL)
    assert added <= MAX_REQUESTS_PER_IMAGE, (small, large)
    assert large.total <= MAX_REQUESTS_PER_IMAGE * LARGE + PER_SHARD * large.shards, large
    assert large.written_per_output <= 2.1, large  # run files and shards, once each


@pytest.fixture()
def proxied_s3(s3_server, monkeypatch):
    """The counting proxy in front of moto, with Beam's file systems pointed at it; a bucket made."""
    import boto3
    from apache_beam.options.pipeline_options import PipelineOptions

    from benchmarks.object_store import BUCKET, s3_flags
    from transforms.filesystems import set_options

    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    client = boto3.client("s3", endpoint_url=s3_server.url, aws_access_key_id="testing",
                          aws_secret_access_key="testing", region_name="us-east-1")
    with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
        client.create_bucket(Bucket=BUCKET)
    with FaultProxy(s3_server.port) as proxy:
        set_options(PipelineOptions(s3_flags(proxy.url)))
        yield client, proxy, f"s3://{BUCKET}"
    set_options(PipelineOptions([]))


@pytest.mark.slow
def test_a_range_of_an_object_is_one_bounded_request(proxied_s3):
    from transforms.storage.files import RangeReader

    client, proxy, base = proxied_s3
    data = bytes(range(256)) * (8 << 12)  # 8 MiB
    client.put_object(Bucket="cost", Key="ranges/big.bin", Body=data)
    reader = RangeReader()
    for i in range(10):
        assert reader.read(f"{base}/ranges/big.bin", i * 700_001, 65536) == data[i * 700_001:i * 700_001 + 65536]
    assert reader.read(f"{base}/ranges/big.bin", len(data) - 10, 100) == data[-10:]  # the end comes first
    assert reader.read(f"{base}/ranges/big.bin", len(data), 100) == b""
    proxy.settle()
    assert [e.method for e in proxy.traffic] == ["GET"] * 12  # no HEAD first
    assert sum(e.down_body for e in proxy.traffic) <= 10 * 65536 + 10 + 1000  # the 416's body
    assert sum(e.down for e in proxy.traffic) < 1 << 20


@pytest.mark.slow
def test_neighbouring_records_of_a_run_file_are_copied_in_one_request(proxied_s3):
    from transforms.storage.runs import BundleRunFile, RecordCopier

    _, proxy, base = proxied_s3
    run = BundleRunFile(f"{base}/copies", "c" * 32)
    records = [bytes([i]) * (1000 + i) for i in range(20)]
    where = [run.append([record]) for record in records]
    run.close()
    copier = RecordCopier(batch_bytes=12_000)
    wanted = where[:15] + where[16:]  # 15 lies elsewhere (another shard's)
    copier.plan(wanted)
    proxy.settle()
    before = len(proxy.traffic)
    copied = [copier.copy(w, "a test record") for w in reversed(wanted)]  # in any order
    proxy.settle()
    gets = [e for e in proxy.traffic[before:]]
    assert [c.data for c in copied] == [frame_record(r) for r in reversed(records[:15] + records[16:])]
    # 0-14 in batches of at most 12,000 bytes (two), 16-19 in one: three requests, not nineteen
    assert [e.method for e in gets] == ["GET"] * 3
    copier.close()


@pytest.mark.slow
def test_an_s3_file_is_read_in_bounded_ranges_and_one_closed_early_costs_one_chunk(proxied_s3):
    from transforms.storage.files import STORE_READ_CHUNK, file_size, open_for_read

    client, proxy, base = proxied_s3
    data = bytes(range(256)) * (9 << 12)  # 9 MiB: three chunks
    client.put_object(Bucket="cost", Key="ranges/nine.bin", Body=data)
    with open_for_read(f"{base}/ranges/nine.bin") as fh:
        assert file_size(fh) == len(data)
        assert fh.read() == data
    with open_for_read(f"{base}/ranges/nine.bin") as fh:
        assert fh.read(100) == data[:100]
    proxy.settle()
    assert [e.method for e in proxy.traffic] == ["GET"] * 4  # no HEAD; 3 for the whole, 1 for the start
    assert proxy.traffic[-1].down_body == STORE_READ_CHUNK  # the early close cost one chunk, not the object
    with pytest.raises(FileNotFoundError):
        open_for_read(f"{base}/ranges/missing.bin")


@pytest.mark.slow
def test_the_splits_of_an_indexed_shard_on_s3_download_the_shard_once(proxied_s3):
    from tests.helpers import format_index
    from transforms.tfrecord_source import _ReadSettings, _TFRecordSource

    client, proxy, base = proxied_s3
    records = [bytes([i % 251]) * 100_000 for i in range(90)]  # about 9 MB
    framed = [frame_record(r) for r in records]
    data = b"".join(framed)
    client.put_object(Bucket="cost", Key="splits/shard.tfrecord", Body=data)
    client.put_object(Bucket="cost", Key="splits/index/shard.tfrecord.idx", Body=format_index([len(f) for f in framed]))
    (bundle,) = _TFRecordSource((f"{base}/splits/shard.tfrecord",), _ReadSettings()).split(1 << 40)
    splits = list(bundle.source.split(len(data) // 6))  # six readers of one shard, as a reshard's workers
    assert len(splits) == 6
    proxy.settle()
    before = len(proxy.traffic)
    read = [r for split in splits for r in split.source.read(split.source.get_range_tracker(split.start_position,
                                                                                           split.stop_position))]
    assert read == records
    proxy.settle()
    shard = [e.down_body for e in proxy.traffic[before:] if e.method == "GET" and e.down_body > 10_000]
    # Each split reads its own records, ending at its range's end or its last record's: not the shard's
    # first 4 MiB too (4.2x the shard in all before), nor a chunk of the next split's records.
    assert sum(shard) <= len(data) + 6 * 2 * 100_016, sum(shard) / len(data)


@pytest.mark.slow
def test_the_splits_of_an_unindexed_shard_on_s3_fetch_little_past_their_ranges(proxied_s3):
    from transforms.tfrecord_source import _ReadSettings, _TFRecordSource

    client, proxy, base = proxied_s3
    records = [bytes([i % 251]) * 100_000 for i in range(90)]  # about 9 MB, no .idx: record starts are scanned for
    framed = [frame_record(r) for r in records]
    data = b"".join(framed)
    client.put_object(Bucket="cost", Key="unindexed/shard.tfrecord", Body=data)
    (bundle,) = _TFRecordSource((f"{base}/unindexed/shard.tfrecord",), _ReadSettings()).split(1 << 40)
    splits = list(bundle.source.split(len(data) // 6))
    assert len(splits) == 6
    read, per_split = [], []
    for split in splits:
        proxy.settle()
        before = len(proxy.traffic)
        read += split.source.read(split.source.get_range_tracker(split.start_position, split.stop_position))
        proxy.settle()
        per_split.append(sum(e.down_body for e in proxy.traffic[before:] if e.method == "GET"))
    assert read == records
    # A split reads its range, the end of its last record, and the headers that confirm a record start
    # (CONFIRM_RECORDS of them past its start and past its end): a few KiB each, not 64 KiB each.
    for split, got in zip(splits, per_split):
        assert got <= split.stop_position - split.start_position + 100_016 + 2 * 16 * 4096 + 1000, per_split


@pytest.fixture()
def proxied_gs(gcs_server, monkeypatch):
    """The counting proxy in front of gcp-storage-emulator, the jobs' GCS client pointed at it; a bucket made."""
    from apache_beam.options.pipeline_options import PipelineOptions

    from beam_jobs.cli.harness import prepare_options
    from benchmarks.object_store import _GcsBucket
    from transforms.filesystems import set_options

    with FaultProxy(gcs_server.port) as proxy:
        # written through the proxy: the emulator names an object's media link by the host it was written to
        bucket = _GcsBucket(proxy.port)
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy.url)
        prepare_options(PipelineOptions([]), no_auth=True)
        yield bucket, proxy, "gs://cost"
    set_options(PipelineOptions([]))


@pytest.mark.slow
def test_the_splits_of_an_indexed_shard_on_gs_download_the_shard_once(proxied_gs):
    from tests.helpers import format_index
    from transforms.tfrecord_source import _ReadSettings, _TFRecordSource

    bucket, proxy, base = proxied_gs
    records = [bytes([i % 251]) * 100_000 for i in range(90)]  # about 9 MB
    framed = [frame_record(r) for r in records]
    data = b"".join(framed)
    bucket.put("splits/shard.tfrecord", data)
    bucket.put("splits/index/shard.tfrecord.idx", format_index([len(f) for f in framed]))
    (bundle,) = _TFRecordSource((f"{base}/splits/shard.tfrecord",), _ReadSettings()).split(1 << 40)
    splits = list(bundle.source.split(len(data) // 6))
    assert len(splits) == 6
    proxy.settle()
    before = len(proxy.traffic)
    read = [r for split in splits for r in split.source.read(split.source.get_range_tracker(split.start_position,
                                                                                           split.stop_position))]
    assert read == records
    proxy.settle()
    traffic = proxy.traffic[before:]
    shard = sum(e.down_body for e in traffic if gs_kind(e) == "GET" and e.down_body > 10_000)
    # Beam's reader reads 16 MiB ahead from each split's start: the rest of the shard, 3.5x the shard in all.
    assert shard <= len(data) + 6 * 2 * 100_016, shard / len(data)
    # No metadata request per split to open the shard: its size came with the match (one per split for
    # its .idx's existence at most).
    assert sum(gs_kind(e) == "HEAD" for e in traffic) <= 6, [e.target for e in traffic]


@pytest.mark.slow
def test_a_build_on_gs_downloads_and_requests_linearly_in_its_images(proxied_gs, gcs_server):
    small = measure_gs(gcs_server.port, SMALL, steps=("build",), seed=1)[0]
    large = measure_gs(gcs_server.port, LARGE, steps=("build",), seed=2)[0]
    assert large.down_per_byte <= 1.2 * small.down_per_byte, (small, large)
    added = (large.total - small.total) / (LARGE - SMALL)
    assert added <= MAX_REQUESTS_PER_IMAGE, (small, large)
    assert large.total <= MAX_REQUESTS_PER_IMAGE * LARGE + PER_SHARD * large.shards, large
    assert large.written_per_output <= 2.1, large


@pytest.mark.slow
def test_telling_a_prefix_on_s3_is_a_folder_lists_one_key_not_all_below_it(proxied_s3):
    from transforms.storage.listing import is_folder

    client, proxy, base = proxied_s3
    for i in range(200):
        client.put_object(Bucket="cost", Key=f"folder/{i:04d}.jpg", Body=b"x")
    proxy.settle()
    before = len(proxy.traffic)
    assert is_folder(f"{base}/folder")
    assert not is_folder(f"{base}/folder/0001.jpg")  # a file
    assert not is_folder(f"{base}/fold")  # a prefix of names, not a folder
    proxy.settle()
    traffic = proxy.traffic[before:]
    # A listing of every key below the folder grows with the data (about 300 bytes a key); one key is enough.
    assert sum(e.down_body for e in traffic) < 8_000, [(e.method, e.target, e.down_body) for e in traffic]


@pytest.mark.slow
def test_an_append_on_s3_reads_the_keys_files_and_the_shard_it_merges_into_once(proxied_s3):
    import json

    from beam_jobs import append_shards, build_shards
    from benchmarks.object_store import _S3Bucket, s3_flags, small_images, upload

    client, proxy, base = proxied_s3
    bucket = _S3Bucket(int(proxy.url.rpartition(":")[2]))
    raw = upload(bucket, "merge/raw", list(small_images(100, 3)))
    added = upload(bucket, "merge/more", list(small_images(10, 4)))
    settings = ["--shard_size_mb", f"{raw * 1.1 / 5 / 2 ** 20:.4f}", "--seed", "5", *s3_flags(proxy.url)]
    assert build_shards.run(["--input", f"{base}/merge/raw", "--output_dir", f"{base}/merge/set", *settings]) == 0
    shards = [json.loads(line) for line in bucket.get("merge/set/shards.jsonl").splitlines()]
    proxy.settle()
    before = len(proxy.traffic)
    assert append_shards.run(["--input", f"{base}/merge/more", "--output_dir", f"{base}/merge/set", *settings]) == 0
    proxy.settle()
    read, keys = collections.Counter(), collections.Counter()
    for e in proxy.traffic[before:]:
        if e.method == "GET" and e.target.startswith("/cost/merge/set/train-"):
            read[e.target.rpartition("/")[2]] += e.down_body
        if e.method == "GET" and e.target.startswith("/cost/merge/set/index/") and e.target.endswith(".keys"):
            keys[e.target.rpartition("/")[2]] += e.down_body
    published = {s["file"]: s["bytes"] for s in shards}
    assert all("keys_crc32c" in s for s in shards)
    # The published images' keys come from the keys files, 32 bytes a record, each read once; no
    # published shard is read for them. Only the one merged with the new records (its records begin
    # two new shards here) is read, each new shard reading only the records that begin it (found from
    # its .idx), not the shard from its start each time (3x the merged shard before).
    assert keys == {s["file"] + ".keys": 32 * s["records"] for s in shards}, keys
    assert sum(read.values()) <= max(published.values()) + (16 << 10), (read, published)
    # In all: the added images and their run files (about 2.1x what they add), the keys files, the merged
    # shard (its two readers each read a little past their share), and the set's small files (manifest,
    # shard list, listings, the publish's records: about 75 KB here): nothing grows with the published set.
    down = sum(e.down_body for e in proxy.traffic[before:])
    by_target = collections.Counter()
    for e in proxy.traffic[before:]:
        by_target[f"{e.method} {e.target.split('?')[0]}"] += e.down_body
    assert down <= 2.1 * added + sum(keys.values()) + 1.1 * max(published.values()) + (96 << 10), (
        down, added, "; ".join(f"{k} {v}" for k, v in by_target.most_common(12)))


@pytest.mark.slow
def test_telling_files_lie_below_a_prefix_on_s3_lists_one_key(proxied_s3):
    from transforms.storage.listing import has_files_below

    client, proxy, base = proxied_s3
    for i in range(200):
        client.put_object(Bucket="cost", Key=f"below/class/{i:04d}.jpg", Body=b"x")
    proxy.settle()
    before = len(proxy.traffic)
    assert has_files_below(f"{base}/below")  # a build's --input checked before its pipeline
    assert not has_files_below(f"{base}/belo")
    proxy.settle()
    traffic = proxy.traffic[before:]
    # Beam's match with limit=1 still lists the whole prefix (48.7 KB here; a build's input listed twice)
    assert sum(e.down_body for e in traffic) < 4_000, [(e.method, e.target, e.down_body) for e in traffic]


@pytest.mark.slow
def test_a_scan_of_a_level_on_s3_stopped_at_its_first_file_downloads_one_small_page(proxied_s3):
    from transforms.storage.listing import scan_store

    client, proxy, base = proxied_s3
    for i in range(200):
        client.put_object(Bucket="cost", Key=f"scan/daisy/{i:04d}.jpg", Body=b"x")
    proxy.settle()
    before = len(proxy.traffic)
    # What planning a build's folders does with each class folder: is there a file in it?
    assert next(iter(scan_store(f"{base}/scan/daisy/"))) == (f"{base}/scan/daisy/0000.jpg", False)
    proxy.settle()
    first = sum(e.down_body for e in proxy.traffic[before:])
    assert first < 8_000, first  # not a page of 200 keys (49 KB; 1,000 keys a page at most)
    assert [path for path, _ in scan_store(f"{base}/scan/daisy/")] == [
        f"{base}/scan/daisy/{i:04d}.jpg" for i in range(200)]  # read to its end: every key, once
