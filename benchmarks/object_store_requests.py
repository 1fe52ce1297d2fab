"""Requests and bytes on an object store: build, append, reshard and verify to s3:// or gs://, beside plain Beam.

    python -m benchmarks.object_store_requests [--images 300 3000] [--store s3|gs] [--json out.json]

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

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import functools
import io
import json
import os
import random
import resource
import sys
import tempfile
from dataclasses import asdict, dataclass
from typing import Callable, Iterator, Sequence

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from tests.fault_proxy import Exchange, FaultProxy  # noqa: E402

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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
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


if __name__ == "__main__":
    sys.exit(main())
