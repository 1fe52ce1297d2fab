"""Object stores: requests and bytes on s3:// and gs://, appending, resuming and publishing.

    python -m benchmarks.object_store CASE [--quick] [ARG ...]

Cases:

- ``requests``: Requests and bytes on an object store: build, append, reshard and verify to s3:// or gs://, beside plain Beam.
- ``append_cost``: What appending 10% to a published set costs against rebuilding the whole set, in the same run.
- ``resume_cost``: What resuming a killed build costs against a full build, on the same photos, in the same run.
- ``publish_parallel``: Publishing many shards: renames in the one publish step against renames handed out to the workers.
- ``resync``: Benchmark: reading TFRecord files after damage, when record starts must be found by scanning.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import functools
import glob
import hashlib
import io
import json
import os
import random
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from typing import Callable, Iterator, Sequence

from benchmarks import common


# -- case requests ----------------------------------------------------------------------------------------

_REQUESTS_DOC = """Requests and bytes on an object store: build, append, reshard and verify to s3:// or gs://, beside plain Beam.

    python -m benchmarks.object_store requests [--images 300 3000] [--store s3|gs] [--json out.json]

moto's S3 server (``--store gs``: gcp-storage-emulator, anonymous) runs on
loopback, and every request of a job goes through a
counting proxy (``tests.fault_proxy.FaultProxy``, no faults: each request on a
connection of its own), which counts requests by kind and the bytes sent up
and down, on the wire (HTTP heads included) and of bodies alone (a body the
client stops reading is still counted, as a store would send it). For each size N (small images, 2-10 KB):

- ``build``: N images under ``raw/`` -> 5 shards at ``s3://bucket/set``;
- ``append``: N/10 more images appended to that set;
- ``reshard``: the set -> 10 shards at ``s3://bucket/resharded``;
- ``verify``: ``verify_shards`` of the appended set, with ``--decode_images``;
- ``reread`` (asked for by name): the build without run files, each record
  made again from its input re-read by the shard writer (what remote
  staging would cost the other way: the input read twice, no run file
  written and read back);
- ``beam``: a plain Beam pipeline, ``Create(paths) | Map(read the object) |
  WriteToTFRecord`` (5 shards), the floor for reading N objects and writing
  their bytes once.

Per row: requests by kind (S3: GET, HEAD, LIST, PUT (objects and parts,
multipart starts and ends), COPY, DELETE; GCS in the same columns
(``gs_kind``): media GET, metadata GET, LIST, uploads, rewrite/copy/compose,
DELETE and batches), requests per input (images; the
reshard's and verify's inputs are the set's records), bytes down and up per
input byte, and the process CPU seconds of the job (the proxy and moto run
in other threads and processes: their CPU is not counted). Targets: bytes
down and up per input byte <= 2.1 at every size, and requests per added
image <= 2.5 plus 20 per published shard. Written bytes are the bodies of
PUTs (objects and parts); on the wire each request and answer also carries
a head of about 300-600 bytes, which is 5-10% of a 5 KB image. A record is
its image and about 250 bytes more (name, label, sha256, sizes, framing):
"written / out" is the bytes written per byte of the shards published
(run files and shards: 2 at least).

The counting functions are used by ``tests/e2e/test_object_store_cost.py``.
"""

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


BUCKET = "cost"
KINDS = ("GET", "HEAD", "LIST", "PUT", "COPY", "DELETE", "OTHER")
# Published shards of each step: the budget of requests per shard (writing, publishing) is 20.
BUILD_SHARDS = 5
RESHARD_SHARDS = 10
PER_SHARD = 20


def s3_kind(exchange: Exchange) -> str:
    """The kind of an S3 request, from its method, its query and the copy-source header."""
    path, _, query = exchange.target.partition("?")
    keys = {part.partition("=")[0] for part in query.split("&") if part}
    if exchange.method == "HEAD":
        return "HEAD"
    if exchange.method == "GET":
        return "LIST" if "list-type" in keys or "prefix" in keys or path.strip("/").count("/") == 0 else "GET"
    if exchange.method == "PUT":
        return "COPY" if exchange.copies else "PUT"
    if exchange.method == "DELETE" or (exchange.method == "POST" and "delete" in keys):
        return "DELETE"
    if exchange.method == "POST":  # a multipart upload's start and end
        return "PUT"
    return "OTHER"


def gs_kind(exchange: Exchange) -> str:
    """The kind of a GCS JSON API request, in the columns of S3's: a media GET is ``GET``, a metadata
    GET ``HEAD``, an upload (its start and its parts) ``PUT``, a rewrite, copy or compose ``COPY``; a
    batch (Beam's deletions and copies) is counted as ``DELETE``."""
    path, _, query = exchange.target.partition("?")
    params = dict(part.partition("=")[::2] for part in query.split("&") if part)
    if exchange.method == "GET":
        if params.get("alt") == "media" or path.startswith("/download/"):
            return "GET"
        return "LIST" if path.rstrip("/").endswith("/o") else "HEAD"
    if path.startswith("/upload/") or exchange.method == "PUT":
        return "PUT"
    if exchange.method == "POST" and any(f"/{verb}/" in path or path.endswith(f"/{verb}")
                                         for verb in ("rewriteTo", "copyTo", "compose")):
        return "COPY"
    if exchange.method == "DELETE" or (exchange.method == "POST" and path.startswith("/batch/")):
        return "DELETE"
    return "OTHER"


@dataclass(frozen=True)
class Cost:
    """What one job cost on the store."""

    step: str
    inputs: int
    input_bytes: int
    requests: dict
    down: int
    up: int
    down_body: int
    written: int
    cpu_s: float
    shards: int
    output_bytes: int = 0

    @property
    def total(self) -> int:
        return sum(self.requests.values())

    @property
    def down_per_byte(self) -> float:
        return self.down / self.input_bytes

    @property
    def up_per_byte(self) -> float:
        return self.up / self.input_bytes

    @property
    def body_down_per_byte(self) -> float:
        """Bytes of the answers' bodies (the objects' bytes read, listings) per input byte."""
        return self.down_body / self.input_bytes

    @property
    def written_per_byte(self) -> float:
        """Bytes of objects written (bodies of PUTs) per input byte."""
        return self.written / self.input_bytes

    @property
    def written_per_output(self) -> float:
        """Bytes of objects written per byte of the shards published (0: none published)."""
        return self.written / self.output_bytes if self.output_bytes else 0.0

    @property
    def per_input(self) -> float:
        return self.total / self.inputs

    @property
    def per_input_less_shards(self) -> float:
        """Requests per input once ``PER_SHARD`` per published shard are set aside."""
        return max(0, self.total - PER_SHARD * self.shards) / self.inputs


def tally(traffic: Sequence[Exchange], kind: Callable[[Exchange], str] = s3_kind
          ) -> tuple[dict, int, int, int, int]:
    """Requests by kind, bytes down, bytes up (on the wire), bytes of answers' bodies, bytes of objects written."""
    kinds = [kind(e) for e in traffic]
    counts = collections.Counter(kinds)
    return ({k: counts.get(k, 0) for k in KINDS}, sum(e.down for e in traffic), sum(e.up for e in traffic),
            sum(e.down_body for e in traffic), sum(e.up_body for e, k in zip(traffic, kinds) if k == "PUT"))


@contextlib.contextmanager
def counted(proxy: FaultProxy, step: str, inputs: int, input_bytes: int, shards: int,
            into: list, kind: Callable[[Exchange], str] = s3_kind) -> Iterator[None]:
    """Counts the proxy's traffic and this process's CPU over the block; appends a ``Cost`` to ``into``."""
    proxy.settle()  # what came before is not counted
    start = len(proxy.traffic)
    cpu = resource.getrusage(resource.RUSAGE_SELF)
    yield
    after = resource.getrusage(resource.RUSAGE_SELF)
    proxy.settle()  # every request the job made is counted
    requests, down, up, body, written = tally(proxy.traffic[start:], kind)
    into.append(Cost(step, inputs, input_bytes, requests, down, up, body, written,
                     (after.ru_utime + after.ru_stime) - (cpu.ru_utime + cpu.ru_stime), shards))


def s3_flags(url: str) -> list[str]:
    return ["--s3_endpoint_url", url, "--s3_access_key_id", "testing", "--s3_secret_access_key", "testing",
            "--s3_region_name", "us-east-1"]


class _S3Bucket:
    """The benchmark's bucket on moto, written and read straight (not through the proxy)."""

    scheme = "s3"
    kind = staticmethod(s3_kind)

    def __init__(self, port: int) -> None:
        import boto3

        os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")
        self.client = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", aws_access_key_id="testing",
                                   aws_secret_access_key="testing", region_name="us-east-1")
        with contextlib.suppress(self.client.exceptions.BucketAlreadyOwnedByYou):
            self.client.create_bucket(Bucket=BUCKET)

    def put(self, key: str, data: bytes) -> None:
        self.client.put_object(Bucket=BUCKET, Key=key, Body=data)

    def get(self, key: str) -> bytes:
        return self.client.get_object(Bucket=BUCKET, Key=key)["Body"].read()

    def through(self, proxy: FaultProxy) -> "_S3Bucket":
        return self

    @contextlib.contextmanager
    def job_flags(self, proxy: FaultProxy) -> Iterator[list[str]]:
        yield s3_flags(proxy.url)


class _GcsBucket:
    """The benchmark's bucket on gcp-storage-emulator (anonymous), written and read straight."""

    scheme = "gs"
    kind = staticmethod(gs_kind)

    def __init__(self, port: int) -> None:
        from google.api_core import exceptions
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        self.url = f"http://127.0.0.1:{port}"
        self.client = storage.Client(project="cost", credentials=AnonymousCredentials(),
                                     client_options={"api_endpoint": self.url})
        try:
            self.bucket = self.client.create_bucket(BUCKET)
        except exceptions.Conflict:
            self.bucket = self.client.bucket(BUCKET)

    def through(self, proxy: FaultProxy) -> "_GcsBucket":
        """The bucket written through the proxy: the emulator names an object's media link (which
        Beam's reader downloads from) by the host the object was written to."""
        return _GcsBucket(proxy.port)

    def put(self, key: str, data: bytes) -> None:
        self.bucket.blob(key).upload_from_string(data)

    def get(self, key: str) -> bytes:
        return self.bucket.blob(key).download_as_bytes()

    @contextlib.contextmanager
    def job_flags(self, proxy: FaultProxy) -> Iterator[list[str]]:
        """The jobs' GCS clients talk to the proxy (``STORAGE_EMULATOR_HOST``), anonymously."""
        before = os.environ.get("STORAGE_EMULATOR_HOST")
        os.environ["STORAGE_EMULATOR_HOST"] = proxy.url
        try:
            yield ["--no_auth"]
        finally:
            if before is None:
                os.environ.pop("STORAGE_EMULATOR_HOST", None)
            else:
                os.environ["STORAGE_EMULATOR_HOST"] = before


def small_images(count: int, seed: int) -> Iterator[tuple[str, bytes]]:
    """``count`` small JPEG images (2-10 KB, noise) in three class folders: (relative path, bytes)."""
    from PIL import Image

    rng = random.Random(seed)
    for i in range(count):
        label = ("daisy", "rose", "tulip")[i % 3]
        side = rng.randint(44, 88)
        pixels = bytes(rng.getrandbits(8) for _ in range((side // 2) ** 2 * 3))
        img = Image.frombytes("RGB", (side // 2, side // 2), pixels).resize((side, side))
        buf = io.BytesIO()
        img.save(buf, "JPEG", quality=95)
        yield f"{label}/{seed}_{i:05d}.jpg", buf.getvalue()


def upload(bucket, prefix: str, images: Sequence[tuple[str, bytes]]) -> int:
    """Puts the images under ``prefix`` (straight to the server, not counted); returns their bytes."""
    for rel, data in images:
        bucket.put(f"{prefix}/{rel}", data)
    return sum(len(data) for _, data in images)


def published_bytes(bucket, prefix: str) -> tuple[int, int, int]:
    """Bytes, records and shards of a published set."""
    manifest = json.loads(bucket.get(f"{prefix}/manifest.json"))
    size = records = shards = 0
    for line in bucket.get(f"{prefix}/shards.jsonl").splitlines():
        entry = json.loads(line)
        size += entry["bytes"]
        records += entry["records"]
        shards += 1
    assert manifest["format_version"] >= 2
    return size, records, shards


def _checked(status: int, step: str) -> None:
    if status != 0:
        raise RuntimeError(f"{step} exited with {status}")


def plain_beam(flags: Sequence[str], paths: Sequence[str], output: str) -> None:
    """Create(paths) | Map(read the object) | WriteToTFRecord: Beam's own way, the floor."""
    import apache_beam as beam
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions

    def read(path: str) -> bytes:
        with FileSystems.open(path) as fh:
            return fh.read()

    with beam.Pipeline(options=PipelineOptions(list(flags))) as p:
        _ = (p | "Paths" >> beam.Create(list(paths)) | "Read" >> beam.Map(read)
             | "Write" >> beam.io.WriteToTFRecord(output, num_shards=BUILD_SHARDS))


@contextlib.contextmanager
def without_run_files() -> Iterator[None]:
    """The build's inspect step given no staging: the shard writer re-reads each input (``reread``)."""
    from beam_jobs import build_shards

    original = build_shards.InspectImages

    def inspect(*args, **kwargs):
        kwargs["staging"] = None
        return original(*args, **kwargs)

    build_shards.InspectImages = inspect
    try:
        yield
    finally:
        build_shards.InspectImages = original


DEFAULT_STEPS = ("build", "append", "reshard", "verify", "beam")


def measure_s3(port: int, images: int, steps: Sequence[str] = DEFAULT_STEPS, seed: int = 0) -> list[Cost]:
    """Runs the steps against the moto server on ``port`` through a counting proxy; one ``Cost`` each."""
    return measure(_S3Bucket(port), port, images, steps, seed)


def measure_gs(port: int, images: int, steps: Sequence[str] = DEFAULT_STEPS, seed: int = 0) -> list[Cost]:
    """Runs the steps against gcp-storage-emulator on ``port`` through a counting proxy; one ``Cost`` each."""
    return measure(_GcsBucket(port), port, images, steps, seed)


def measure(bucket, port: int, images: int, steps: Sequence[str], seed: int) -> list[Cost]:
    """Runs the steps against the store on ``port`` (``bucket``: read and written uncounted) through a counting proxy."""
    from tests.fault_proxy import FaultProxy

    from beam_jobs import append_shards, build_shards, reshard, verify_shards

    run = f"n{images}-{seed}-{random.Random().getrandbits(32):08x}"
    costs: list[Cost] = []
    base = f"{bucket.scheme}://{BUCKET}/{run}"
    counted_here = functools.partial(counted, kind=bucket.kind)
    with FaultProxy(port) as proxy, bucket.job_flags(proxy) as flags:
        bucket = bucket.through(proxy)  # its requests come before the counted steps
        made = list(small_images(images, seed))
        raw_bytes = upload(bucket, f"{run}/raw", made)
        added = list(small_images(max(1, images // 10), seed + 1))
        added_bytes = upload(bucket, f"{run}/more", added)
        # about BUILD_SHARDS shards by size (a set built with --num_shards refuses appends); the append's the same
        settings = ["--shard_size_mb", f"{raw_bytes * 1.1 / BUILD_SHARDS / 2 ** 20:.4f}", "--seed", "5"]
        if "build" in steps or "append" in steps or "reshard" in steps or "verify" in steps:
            with counted_here(proxy, "build", images, raw_bytes, BUILD_SHARDS, costs):
                _checked(build_shards.run(["--input", f"{base}/raw", "--output_dir", f"{base}/set", *settings,
                                           *flags]), "build")
            size, _, shards = published_bytes(bucket, f"{run}/set")
            costs[-1] = dataclasses.replace(costs[-1], output_bytes=size, shards=shards)
        if "append" in steps:
            with counted_here(proxy, "append", len(added), added_bytes, BUILD_SHARDS, costs):
                _checked(append_shards.run(["--input", f"{base}/more", "--output_dir", f"{base}/set", *settings,
                                            *flags]),
                         "append")
        if "append" in steps or "reshard" in steps or "verify" in steps:
            set_bytes, set_records, _ = published_bytes(bucket, f"{run}/set")
        if "append" in steps:
            costs[-1] = dataclasses.replace(costs[-1], output_bytes=set_bytes - costs[0].output_bytes)
        if "reshard" in steps:
            with counted_here(proxy, "reshard", set_records, set_bytes, RESHARD_SHARDS, costs):
                _checked(reshard.run(["--input", f"{base}/set/*.tfrecord", "--output_dir", f"{base}/resharded",
                                      "--num_shards", str(RESHARD_SHARDS), *flags]), "reshard")
            size, _, shards = published_bytes(bucket, f"{run}/resharded")
            costs[-1] = dataclasses.replace(costs[-1], output_bytes=size, shards=shards)
        if "verify" in steps:
            with counted_here(proxy, "verify", set_records, set_bytes, 0, costs):
                _checked(verify_shards.run(["--output_dir", f"{base}/set", "--decode_images", *flags]), "verify")
        if "reread" in steps:
            with counted_here(proxy, "reread", images, raw_bytes, BUILD_SHARDS, costs), without_run_files():
                _checked(build_shards.run(["--input", f"{base}/raw", "--output_dir", f"{base}/reread",
                                           "--num_shards", str(BUILD_SHARDS), "--seed", "5", *flags]), "reread")
            costs[-1] = dataclasses.replace(costs[-1], output_bytes=published_bytes(bucket, f"{run}/reread")[0])
        if "beam" in steps:
            with counted_here(proxy, "beam", images, raw_bytes, BUILD_SHARDS, costs):
                plain_beam(flags, [f"{base}/raw/{rel}" for rel, _ in made], f"{base}/beam/part")
    return costs


def table(rows: Sequence[tuple[int, Cost]]) -> str:
    """The Markdown table of the measured costs."""
    lines = ["| step | images | inputs | MB in | GET | HEAD | LIST | PUT | COPY | DELETE | requests | per input "
             "| per input less 20/shard | down / in (wire) | down / in (bodies) | written / in | written / out "
             "| up / in (wire) | CPU s |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for images, c in rows:
        r = c.requests
        lines.append(f"| {c.step} | {images} | {c.inputs} | {c.input_bytes / 1e6:.2f} | {r['GET']} | {r['HEAD']} "
                     f"| {r['LIST']} | {r['PUT']} | {r['COPY']} | {r['DELETE']} | {c.total} | {c.per_input:.2f} "
                     f"| {c.per_input_less_shards:.2f} | {c.down_per_byte:.3f} | {c.body_down_per_byte:.3f} "
                     f"| {c.written_per_byte:.3f} | {c.written_per_output:.3f} | {c.up_per_byte:.3f} "
                     f"| {c.cpu_s:.1f} |")
    return "\n".join(lines)


def requests_main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=_REQUESTS_DOC.splitlines()[0])
    parser.add_argument("--images", type=int, nargs="+", default=[300, 3000])
    parser.add_argument("--steps", nargs="+", default=["build", "append", "reshard", "verify", "beam"])
    parser.add_argument("--store", choices=("s3", "gs"), default="s3",
                        help="s3: moto's server; gs: gcp-storage-emulator")
    parser.add_argument("--json", help="write the rows here too")
    args = parser.parse_args(argv)
    import logging

    logging.disable(logging.WARNING)
    from tests.servers import free_port, start_server, stop_server, venv_script

    port = free_port()
    if args.store == "s3":
        command, measured = [venv_script("moto_server"), "-H", "127.0.0.1", "-p", str(port)], measure_s3
    else:
        command, measured = [venv_script("gcp-storage-emulator"), "start", "--host", "127.0.0.1", "--port",
                             str(port), "--in-memory"], measure_gs
    with tempfile.TemporaryDirectory() as tmp:
        server = start_server(command, port, os.path.join(tmp, "server.log"))
        try:
            rows = [(n, cost) for n in args.images for cost in measured(port, n, args.steps)]
        finally:
            stop_server(server.process)
    print(table(rows))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump([dict(asdict(c), images=n) for n, c in rows], fh, indent=1)
    return 0


# -- case append_cost -------------------------------------------------------------------------------------

_APPEND_COST_DOC = """What appending 10% to a published set costs against rebuilding the whole set, in the same run.

    python -m benchmarks.object_store append_cost [--size_mb 440 | --input DIR] [--rounds 3] [--new_every 10]

The photos are cut in two by hard links (no copy): ``base/`` (every photo but
each ``--new_every``-th) and ``new/`` (those), in the same class folders. A
set is built from ``base/`` once. Then, round by round, each case a fresh
process on a fresh copy of what it starts from (the copy is not timed):

- ``rebuild``: the build job from ``base/`` and ``new/`` together, into an empty folder;
- ``append``: the append job (``beam_jobs.append_shards``) of ``new/`` into a copy of the base set.

After each append, the published shards of the base set must still be there
byte for byte (under their new names). Prints a Markdown table (median wall
and CPU seconds of all processes, the ratio to the rebuild's) and one JSON line.
"""

def _split_photos(root: str, dest: str, every: int) -> tuple[str, str, int]:
    """Hard-links the photos of ``root`` into ``dest/base`` and ``dest/new``; returns both and the new bytes."""
    base, new = os.path.join(dest, "base"), os.path.join(dest, "new")
    count, new_bytes = 0, 0
    for folder, dirs, names in os.walk(root):
        dirs.sort()
        for name in sorted(names):
            if name.startswith("."):
                continue
            source = os.path.join(folder, name)
            rel = os.path.relpath(source, root)
            target = os.path.join(new if count % every == 0 else base, rel)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.link(source, target)
            if count % every == 0:
                new_bytes += os.path.getsize(source)
            count += 1
    return base, new, new_bytes


def _shard_bytes(folder: str) -> set[bytes]:
    found = set()
    for name in os.listdir(folder):
        if name.endswith(".tfrecord"):
            with open(os.path.join(folder, name), "rb") as fh:
                found.add(fh.read())
    return found


def append_cost_run(argv: Sequence[str] | None = None) -> dict:
    """Runs the benchmark; prints the table and a JSON line, and returns the figures."""
    from benchmarks.common import (add_photo_flags, checkout_env, interleaved_rounds, medians, photo_root,
                                    ratio_table, run_measured)

    parser = argparse.ArgumentParser(description=_APPEND_COST_DOC.splitlines()[0])
    add_photo_flags(parser, 440)
    parser.add_argument("--new_every", type=int, default=10, help="Every Nth photo is new (10: 10%%).")
    args = parser.parse_args(argv)
    root = photo_root(args)
    env = checkout_env()
    with tempfile.TemporaryDirectory(prefix="append_cost_", dir=os.path.dirname(os.path.abspath(root))) as tmp:
        base, new, new_bytes = _split_photos(root, tmp, args.new_every)
        published = os.path.join(tmp, "published")
        measured = run_measured([sys.executable, "-m", "beam_jobs.build_shards", "--input", base,
                                 "--output_dir", published], _ROOT, os.path.join(tmp, "log"), env=env)
        if measured.returncode != 0:
            raise SystemExit(f"the base build failed: {measured.output[-2000:]}")
        kept = _shard_bytes(published)
        cases = {
            "rebuild": lambda out: [sys.executable, "-m", "beam_jobs.build_shards", "--input", base,
                                    "--input", new, "--output_dir", out],
            "append": lambda out: [sys.executable, "-m", "beam_jobs.append_shards", "--input", new,
                                   "--output_dir", out],
        }
        rewritten = []

        def copy_published(name: str, out: str) -> None:
            if name == "append":
                shutil.copytree(published, out)

        def published_kept(name: str, out: str) -> None:
            if name == "append":
                rewritten.append(len(kept - _shard_bytes(out)))
                if rewritten[-1] > 1:
                    raise SystemExit(f"the append rewrote {rewritten[-1]} published shards")

        found = interleaved_rounds(cases, args.rounds, tmp, env, before=copy_published, after=published_kept)
        base_bytes = sum(os.path.getsize(os.path.join(f, n)) for f, _, names in os.walk(base) for n in names)
    median = medians(found)
    wall0, cpu0 = median["rebuild"]
    print(ratio_table(f"{base_bytes / 2**20:.0f} MiB published + {new_bytes / 2**20:.0f} MiB new, "
                      f"{args.rounds} rounds", median, "rebuild", "rebuild"))
    figures = {"input": root, "base_bytes": base_bytes, "new_bytes": new_bytes, "rounds": found,
               "published_shards_rewritten": rewritten,
               "append_wall_ratio": round(median["append"][0] / wall0, 3),
               "append_cpu_ratio": round(median["append"][1] / cpu0, 3),
               "load_after": round(os.getloadavg()[0], 2)}
    print(json.dumps(figures))
    return figures


# -- case resume_cost -------------------------------------------------------------------------------------

_RESUME_COST_DOC = """What resuming a killed build costs against a full build, on the same photos, in the same run.

    python -m benchmarks.object_store resume_cost [--size_mb 1320 | --input DIR] [--rounds 3] [--at 0.8]

Each round, in fresh processes, with the photos in the page cache (one warm-up build first):

- a full build (``beam_jobs.build_shards --input DIR --output_dir FULL``, default flags);
- the same build into another folder, killed with SIGKILL (its whole process group, worker
  processes included, as a crash or a preemption would) where the full build was at ``--at``
  of its wall time: once as many staged shards are finished as the full build had finished
  then (a watcher notes them every 10 ms), so that a busy machine does not move the moment;
- the same command again into the killed run's folder: the resumed run, timed. Its folder must be
  byte-identical (sha256 of every file) to the full build's, or the benchmark stops.

Prints a Markdown table (median wall and CPU seconds, the ratio to the full build's) and one JSON
line with every round and what each resumed run said it reused.
"""

def _folder_digest(folder: str) -> dict[str, str]:
    out = {}
    for parent, dirs, names in os.walk(folder):
        dirs.sort()
        for name in sorted(names):
            path = os.path.join(parent, name)
            with open(path, "rb") as fh:
                out[os.path.relpath(path, folder)] = hashlib.file_digest(fh, "sha256").hexdigest()
    return out


def _shards_done(folder: str) -> int:
    """Staged shards the run writing into ``folder`` has finished (their done records)."""
    return len(glob.glob(os.path.join(glob.escape(folder), ".staging", "*", "*.tmp.done")))


class _Watcher(threading.Thread):
    """Notes, every 10 ms, how many staged shards a run into ``folder`` has finished."""

    def __init__(self, folder: str) -> None:
        super().__init__(daemon=True)
        self._folder = folder
        self._done = threading.Event()
        self.timeline: list[tuple[float, int]] = []

    def run(self) -> None:
        started = time.perf_counter()
        while not self._done.wait(0.01):
            self.timeline.append((time.perf_counter() - started, _shards_done(self._folder)))

    def stop(self) -> None:
        self._done.set()
        self.join()


def _killed_when(command: list[str], folder: str, shards: int, log: str, env: dict) -> float | None:
    """Runs ``command`` and kills its process group once ``shards`` staged shards are finished;
    returns when (None: it ended before)."""
    with open(log, "wb") as fh:
        started = time.perf_counter()
        proc = subprocess.Popen(command, cwd=_ROOT, stdout=fh, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
        while proc.poll() is None:
            if _shards_done(folder) >= shards:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                return time.perf_counter() - started
            time.sleep(0.005)
    return None


def resume_cost_run(argv: Sequence[str] | None = None) -> dict:
    """Runs the benchmark; prints the table and a JSON line, and returns the figures."""
    from benchmarks.common import add_photo_flags, checkout_env, photo_root, run_measured

    parser = argparse.ArgumentParser(description=_RESUME_COST_DOC.splitlines()[0])
    add_photo_flags(parser, 1320)
    parser.add_argument("--at", type=float, default=0.8, help="When to kill, as a fraction of a full build.")
    args = parser.parse_args(argv)
    root = photo_root(args)
    env = checkout_env()
    build = [sys.executable, "-m", "beam_jobs.build_shards", "--input", root, "--output_dir"]
    rounds = []
    with tempfile.TemporaryDirectory(prefix="resume_cost_") as tmp:
        full, resumed, log = os.path.join(tmp, "full"), os.path.join(tmp, "resumed"), os.path.join(tmp, "log")
        warm = run_measured(build + [full], _ROOT, log, env=env)  # the photos into the page cache
        if warm.returncode != 0:
            raise SystemExit(f"the build failed: {warm.output[-2000:]}")
        for _ in range(args.rounds):
            shutil.rmtree(full, ignore_errors=True)
            shutil.rmtree(resumed, ignore_errors=True)
            watcher = _Watcher(full)
            watcher.start()
            whole = run_measured(build + [full], _ROOT, log, env=env)
            watcher.stop()
            # Where the full build was at --at of its time: the killed build stops at the same point.
            shards = max([n for t, n in watcher.timeline if t <= args.at * whole.seconds] or [0])
            if shards == 0:
                raise SystemExit(f"at {args.at:.0%} of its time the build had finished no shard: use a later --at")
            killed_after = _killed_when(build + [resumed], resumed, shards, log, env)
            if killed_after is None:
                raise SystemExit("the build ended before it was killed")
            again = run_measured(build + [resumed], _ROOT, log, env=env)
            if whole.returncode != 0 or again.returncode != 0:
                raise SystemExit(f"a build failed: {again.output[-2000:]}")
            if _folder_digest(full) != _folder_digest(resumed):
                raise SystemExit("the resumed build's folder differs from the full build's")
            said = re.search(r"resumed: .*", again.output)
            rounds.append({"full": [whole.seconds, whole.cpu_seconds], "killed_after": killed_after,
                           "shards_finished_at_kill": shards,
                           "resumed": [again.seconds, again.cpu_seconds],
                           "said": said.group(0) if said else "(nothing resumed)"})
    files = sum(len(names) for _, _, names in os.walk(root))
    size = sum(os.path.getsize(os.path.join(p, n)) for p, _, names in os.walk(root) for n in names)
    medians = {name: (statistics.median(r[name][0] for r in rounds), statistics.median(r[name][1] for r in rounds))
               for name in ("full", "resumed")}
    print(f"| {files} photos, {size / 2**20:.0f} MiB, killed at {args.at:.0%}, {args.rounds} rounds | wall s | "
          "CPU s | wall / full build's | CPU / full build's |")
    print("|---|---:|---:|---:|---:|")
    for name, label in (("full", "full build"), ("resumed", "resumed build")):
        wall, cpu = medians[name]
        print(f"| {label} | {wall:.2f} | {cpu:.2f} | {wall / medians['full'][0]:.2f} | "
              f"{cpu / medians['full'][1]:.2f} |")
    figures = {"input": root, "files": files, "bytes": size, "at": args.at, "rounds": rounds,
               "wall_ratio": round(medians["resumed"][0] / medians["full"][0], 3),
               "cpu_ratio": round(medians["resumed"][1] / medians["full"][1], 3),
               "load_after": round(os.getloadavg()[0], 2)}
    print(json.dumps(figures))
    return figures


# -- case publish_parallel --------------------------------------------------------------------------------

_PUBLISH_PARALLEL_DOC = """Publishing many shards: renames in the one publish step against renames handed out to the workers.

    python -m benchmarks.object_store publish_parallel [--shards 20000] [--rounds 1]

Each case is a fresh process that stages ``--shards`` empty gzip shard files
(no ``.idx``) in a local folder, takes its lock, and runs the real
``PublishShards`` on the DirectRunner, given one ``ShardResult`` per shard
(as ``WriteShards`` gives them; shard-list parts are written as in a build):

- ``serial``: every rename in ``PreparePublish`` (``parallel_from`` above
  the shard count: 16 threads in one worker, as before the change);
- ``parallel``: the renames handed out in chunks of ``RENAME_CHUNK`` to
  ``MoveStaged`` (the default from ``PARALLEL_MOVES`` renames);

each with 1 worker (in-process) and 2 worker processes (``multi_processing``).
The figure is the wall time of the pipeline (``PublishShards`` is all of
it: parts, prepare, renames, commit), and how many worker processes renamed
(the ``shard_sink/move_processes`` counter), and the time from the first
rename to the last (the renamed files' ctime). Prints a Markdown table and a
JSON line.

A local rename takes microseconds; on gs:// and s3:// one is a copy and a
delete (tens of ms). ``--rename_ms X`` makes every local rename of the run
(the worker processes' too) sleep X ms per file first, through a
``sitecustomize`` module put on the children's ``PYTHONPATH``.
"""

_RUN_ID = "c" * 32
_PUBLISH_CASES = [("serial", 1), ("parallel", 1), ("serial", 2), ("parallel", 2)]


def _child(mode: str, workers: int, shards: int, folder: str) -> dict:
    """Stages ``shards`` files and publishes them; returns the wall seconds and the processes that renamed."""
    import apache_beam as beam
    from apache_beam.metrics.metric import MetricsFilter
    from apache_beam.options.pipeline_options import PipelineOptions

    from transforms import shard_sink
    from transforms.shardset.naming import join_path, shard_file_name
    from transforms.shardset.ownership import PublishPolicy
    from transforms.shardset.planning import SplitTotals
    from transforms.shardset.staged import ShardResult
    from transforms.storage.run_lock_files import acquire_lock
    from transforms.tfrecord.shard_writer import ShardStats

    staging = join_path(folder, f".staging/{_RUN_ID}")
    os.makedirs(staging)
    policy = PublishPolicy(_RUN_ID)
    acquire_lock(folder, policy, "build_shards")
    results = []
    for index in range(shards):
        name = shard_file_name("train", index, shards, "gzip")
        staged = join_path(staging, f"{name}.tmp")
        open(staged, "wb").close()
        results.append(ShardResult("train", index, shards, name, staged, None,
                                   ShardStats(1, 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
                                              {"0": 1})))
    options = ["--direct_num_workers", str(workers)] + (
        ["--direct_running_mode", "multi_processing"] if workers > 1 else [])
    p = beam.Pipeline(options=PipelineOptions(options))
    fields = {"created_by": "build_shards", "options": {}, "seed": 0}
    inputs = shard_sink.PublishInputs(
        p | "Results" >> beam.Create(results),
        p | "Totals" >> beam.Create([SplitTotals("train", 0, shards, 1, shards)]), (),
        p | "Labels" >> beam.Create([["daisy"]]), p | "Inputs" >> beam.Create([shards]),
        p | "Spec" >> beam.Create([{}]))
    _ = p | "Publish" >> shard_sink.PublishShards(
        shard_sink.ShardOutput(folder, "gzip"), policy, inputs, fields,
        parallel_from=shards + 1 if mode == "serial" else None)
    start = time.perf_counter()
    result = p.run()
    result.wait_until_finish()
    seconds = time.perf_counter() - start
    found = result.metrics().query(MetricsFilter().with_namespace("shard_sink").with_name(
        shard_sink.MOVE_PROCESSES))["counters"]
    changed = [os.stat(os.path.join(folder, n)).st_ctime_ns for n in os.listdir(folder) if n.endswith(".gz")]
    assert len(changed) == shards, len(changed)
    return {"mode": mode, "workers": workers, "seconds": seconds,
            "rename_span": (max(changed) - min(changed)) / 1e9,  # first to last rename (a rename sets ctime)
            "move_processes": sum(c.committed for c in found)}


_SLOW_RENAMES = """import os, time
_ms = float(os.environ.get("PUBLISH_BENCH_RENAME_MS", "0"))
if _ms:
    from apache_beam.io import localfilesystem
    _rename = localfilesystem.LocalFileSystem.rename
    def rename(self, sources, destinations):
        time.sleep(len(sources) * _ms / 1000)
        return _rename(self, sources, destinations)
    localfilesystem.LocalFileSystem.rename = rename
"""


def publish_parallel_run(shards: int, rounds: int, rename_ms: float = 0.0) -> list[dict]:
    from benchmarks.common import checkout_env

    env, site = checkout_env(), tempfile.mkdtemp(prefix="publish-parallel-site-")
    try:
        return _runs(shards, rounds, rename_ms, env, site)
    finally:
        shutil.rmtree(site, ignore_errors=True)


def _runs(shards: int, rounds: int, rename_ms: float, env: dict[str, str], site: str) -> list[dict]:
    if rename_ms:
        with open(os.path.join(site, "sitecustomize.py"), "w", encoding="utf-8") as fh:
            fh.write(_SLOW_RENAMES)
        env = {**env, "PYTHONPATH": os.pathsep.join([site, env.get("PYTHONPATH", "")]),
               "PUBLISH_BENCH_RENAME_MS": str(rename_ms)}
    runs = []
    for _ in range(rounds):
        for mode, workers in _PUBLISH_CASES:
            folder = tempfile.mkdtemp(prefix="publish-parallel-")
            try:
                out = subprocess.run([sys.executable, "-m", "benchmarks.object_store", "publish_parallel",
                                      "--child", mode,
                                      "--workers", str(workers), "--shards", str(shards), "--folder", folder],
                                     check=True, capture_output=True, text=True, cwd=_ROOT, env=env)
                runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
            finally:
                shutil.rmtree(folder, ignore_errors=True)
    return runs


def _table(runs: list[dict], shards: int) -> str:
    rows = [f"| renames of {shards:,} shards | workers | wall s (median) | vs serial, 1 worker | "
            "first to last rename, s (median) | processes that renamed |", "|---|---:|---:|---:|---:|---:|"]
    base = statistics.median(r["seconds"] for r in runs if (r["mode"], r["workers"]) == ("serial", 1))
    for mode, workers in _PUBLISH_CASES:
        mine = [r for r in runs if (r["mode"], r["workers"]) == (mode, workers)]
        wall = statistics.median(r["seconds"] for r in mine)
        span = statistics.median(r["rename_span"] for r in mine)
        rows.append(f"| {mode} | {workers} | {wall:.1f} | {wall / base:.2f}x | {span:.2f} | "
                    f"{'/'.join(str(r['move_processes']) for r in mine)} |")
    return "\n".join(rows)


def publish_parallel_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=_PUBLISH_PARALLEL_DOC.splitlines()[0])
    parser.add_argument("--shards", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--child", choices=["serial", "parallel"])
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--folder")
    parser.add_argument("--rename_ms", type=float, default=0.0, help="sleep per renamed file (simulated store)")
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(_child(args.child, args.workers, args.shards, args.folder)))
        return 0
    runs = publish_parallel_run(args.shards, args.rounds, args.rename_ms)
    print(f"{args.rename_ms} ms slept per renamed file")
    print(_table(runs, args.shards))
    print(json.dumps(runs))
    return 0


# -- case resync ------------------------------------------------------------------------------------------

_RESYNC_DOC = """Benchmark: reading TFRecord files after damage, when record starts must be found by scanning.

Writes, under ``benchmarks/.cache/resync``, files with no ``.idx`` (so every byte
range finds its first record by scanning):

- ``zeros-{N}mb.tfrecord``: N MiB of zero bytes (no record anywhere);
- ``middle-{N}mb.tfrecord``: N MiB of ~100 KB Examples whose middle quarter is
  overwritten with zeros (one damaged stretch).

and runs ``verify_shards --files F`` and ``reshard --input F --skip_corrupt`` on
each as a fresh process on the DirectRunner (one worker), printing wall time,
exit status and, for verify, the problems reported.

    python -m benchmarks.object_store resync [--sizes 64,256] [--kinds zeros,middle]
"""

_CACHE = os.path.join(os.path.dirname(__file__), ".cache", "resync")
_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_MIB = 1 << 20


def _zeros(size_mb: int) -> str:
    path = os.path.join(_CACHE, f"zeros-{size_mb}mb.tfrecord")
    if not os.path.exists(path):
        os.makedirs(_CACHE, exist_ok=True)
        with open(path, "wb") as fh:
            fh.truncate(size_mb * _MIB)
    return path


def _middle(size_mb: int) -> str:
    from tests.tfrecord_fixtures import write_tfrecords
    from tests.helpers import encode_example

    path = os.path.join(_CACHE, f"middle-{size_mb}mb.tfrecord")
    if not os.path.exists(path):
        rng = random.Random(0)
        records, total = [], 0
        while total < size_mb * _MIB:
            records.append(encode_example({"data": rng.randbytes(rng.randint(50_000, 150_000))}))
            total += len(records[-1]) + 16
        data = bytearray(write_tfrecords(path, records, index=False))
        start, stop = len(data) * 3 // 8, len(data) * 5 // 8
        data[start:stop] = bytes(stop - start)
        with open(path, "wb") as fh:
            fh.write(data)
    return path


def _run(cmd: list[str]) -> tuple[float, int, str]:
    env = dict(os.environ, PYTHONPATH=_REPO)
    started = time.monotonic()
    done = subprocess.run(cmd, cwd=_REPO, env=env, capture_output=True, text=True)
    return time.monotonic() - started, done.returncode, (done.stdout + done.stderr).strip()


def resync_main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=_RESYNC_DOC.splitlines()[0])
    parser.add_argument("--sizes", default="64,256", help="File sizes in MiB, comma-separated.")
    parser.add_argument("--kinds", default="zeros,middle", help="Files to make: zeros, middle.")
    args = parser.parse_args(argv)
    makers = {"zeros": _zeros, "middle": _middle}
    beam = ["--direct_num_workers", "1", "--direct_running_mode", "in_memory"]
    print(f"{'file':<26} {'job':<8} {'s':>8} {'exit':>4}  problems (offset, kind) / last line")
    for size in (int(s) for s in args.sizes.split(",")):
        for path in (makers[kind](size) for kind in args.kinds.split(",")):
            name = os.path.basename(path)
            report = os.path.join(_CACHE, "report.json")
            seconds, status, _ = _run([sys.executable, "-m", "beam_jobs.verify_shards", "--files", path,
                                       "--report", report, *beam])
            with open(report) as fh:
                problems = [(p["offset"], p["kind"]) for p in json.load(fh)["problems"]]
            print(f"{name:<26} {'verify':<8} {seconds:8.1f} {status:>4}  {problems}")
            out = os.path.join(_CACHE, "out")
            shutil.rmtree(out, ignore_errors=True)
            seconds, status, text = _run([sys.executable, "-m", "beam_jobs.reshard", "--input", path,
                                          "--output_dir", out, "--split", "train", "--skip_corrupt",
                                          *beam])
            print(f"{name:<26} {'reshard':<8} {seconds:8.1f} {status:>4}  {text.splitlines()[-1][:90]}")
            sys.stdout.flush()


CASES = {
    "requests": common.Case(requests_main, _REQUESTS_DOC, ("--images", "20", "60", "--steps", "build")),
    "append_cost": common.Case(append_cost_run, _APPEND_COST_DOC, ("--size_mb", "4", "--rounds", "1")),
    "resume_cost": common.Case(resume_cost_run, _RESUME_COST_DOC, ("--size_mb", "4", "--rounds", "1")),
    "publish_parallel": common.Case(publish_parallel_main, _PUBLISH_PARALLEL_DOC,
                                    ("--shards", "200", "--rounds", "1")),
    "resync": common.Case(resync_main, _RESYNC_DOC, ("--sizes", "1,2")),
}


if __name__ == "__main__":
    sys.exit(common.run_case(CASES, sys.argv[1:]))
