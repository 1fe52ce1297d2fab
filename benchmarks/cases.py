"""The baselines the benchmarks compare the project's jobs with, one per subcommand.

Each subcommand is run by ``benchmarks/run.py`` as its own process (so its peak
memory is its own) and ends by printing one line ``RESULT {json}`` with what it
did. Every build baseline writes the same Example schema as the build job
(``transforms.example.schema.IMAGE_FEATURES``) from the same files.

    python -m benchmarks.cases beam_build --input DIR --output_dir OUT --num_shards 8 [Beam flags]
    python -m benchmarks.cases pool_build --input DIR --output_dir OUT --processes 4
    python -m benchmarks.cases tf_build --input DIR --output_dir OUT --num_shards 8
    python -m benchmarks.cases floor --input DIR --output_dir OUT
    python -m benchmarks.cases beam_read --pattern 'OUT/*.tfrecord' [Beam flags]
    python -m benchmarks.cases tf_read --pattern 'OUT/*.tfrecord'
    python -m benchmarks.cases plan --items 1281167 --num_shards 1024 [Beam flags]
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import io
import json
import os
import sys
from typing import Sequence

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, _ROOT)

__all__ = ["main"]


def _result(**fields) -> None:
    print("RESULT " + json.dumps(fields, sort_keys=True), flush=True)


def _image_files(root: str) -> tuple[list[tuple[str, str]], list[str]]:
    """(relative path, class) of every visible file under ``root``, sorted; and the classes."""
    files = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(names):
            if not name.startswith("."):
                rel = os.path.relpath(os.path.join(folder, name), root)
                files.append((rel, rel.split(os.sep, 1)[0]))
    return files, sorted({label for _, label in files})


def _features(data: bytes, relpath: str, label: str, index: int) -> dict:
    """The image schema's features of one file, size and channels from the header (Pillow)."""
    from PIL import Image

    from transforms.images.codec import channels_of

    with Image.open(io.BytesIO(data)) as img:
        width, height = img.size
        fmt, channels = img.format.lower(), channels_of(img)
    return {"image/encoded": data, "image/format": fmt, "image/height": height,
            "image/width": width, "image/channels": channels, "image/class/label": index,
            "image/class/text": label, "image/filename": relpath,
            "image/key/sha256": hashlib.sha256(data).hexdigest()}


# -- The plain Beam pipeline a user writes ----------------------------------------------------


def _example_module():
    """``tf.train`` when TensorFlow is importable, else the project's compiled Example messages."""
    try:
        import tensorflow as tf
    except ImportError:
        from transforms.example import messages

        return messages
    return tf.train


def _plain_example(path: str, root: str, index: dict[str, int]) -> bytes:
    """One file -> a serialized ``tf.train.Example`` built with protobuf's generated classes."""
    from apache_beam.metrics import Metrics

    train = _example_module()
    relpath = os.path.relpath(path, root)
    label = relpath.split(os.sep, 1)[0]
    with open(path, "rb") as fh:
        data = fh.read()
    feature = {}
    for name, value in _features(data, relpath, label, index[label]).items():
        if isinstance(value, int):
            feature[name] = train.Feature(int64_list=train.Int64List(value=[value]))
        else:
            raw = value.encode("utf-8") if isinstance(value, str) else value
            feature[name] = train.Feature(bytes_list=train.BytesList(value=[raw]))
    Metrics.counter("bench", "records").inc()
    return train.Example(features=train.Features(feature=feature)).SerializeToString()


def _counter(result, name: str) -> int:
    from apache_beam.metrics.metric import MetricsFilter

    counters = result.metrics().query(MetricsFilter().with_name(name))["counters"]
    return sum(c.committed or c.attempted or 0 for c in counters)


def _pipeline(beam_args: Sequence[str]):
    """The project's in-process runner (``local_runner``), for the cases that are not baselines."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from transforms.beam_compat import local_runner

    options = PipelineOptions(list(beam_args))
    return beam.Pipeline(runner=local_runner(options), options=options)


def beam_build(args, beam_args: Sequence[str]) -> None:
    """``Create(paths) | Map(read + tf.train.Example) | WriteToTFRecord`` on the default DirectRunner.

    The pipeline a Beam user writes: no project transform, no project codec, Beam's
    own runner selection (``beam.Pipeline(options=...)``).
    """
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    files, classes = _image_files(args.input)
    index = {name: i for i, name in enumerate(classes)}
    os.makedirs(args.output_dir, exist_ok=True)
    p = beam.Pipeline(options=PipelineOptions(list(beam_args)))
    _ = (p
         | "Paths" >> beam.Create([os.path.join(args.input, rel) for rel, _ in files])
         | "ReadExample" >> beam.Map(_plain_example, args.input, index)  # serialized Example
         | "Write" >> beam.io.WriteToTFRecord(os.path.join(args.output_dir, "train"),
                                              file_name_suffix=".tfrecord",
                                              num_shards=args.num_shards))
    result = p.run()
    result.wait_until_finish()
    _result(records=_counter(result, "records"), example_classes=_example_module().__name__)


def _read_encode(item: tuple[str, str, int], root: str) -> bytes:
    """(relative path, class, class index) -> serialized Example, read whole from ``root``."""
    from transforms.example.codec import encode_example

    relpath, label, index = item
    with open(os.path.join(root, relpath), "rb") as fh:
        data = fh.read()
    return encode_example(_features(data, relpath, label, index))


# -- A plain multi-process loop --------------------------------------------------------------


def _write_part(part: tuple[str, str, int, list[tuple[str, str, int]]]) -> int:
    """Reads, encodes and frames one process's share of the files into its own file."""
    from transforms.tfrecord.framing import frame_record

    root, path, _, items = part
    with open(path, "wb") as out:
        for item in items:
            out.write(frame_record(_read_encode(item, root)))
    return len(items)


def pool_build(args, _beam_args: Sequence[str]) -> None:
    """``multiprocessing.Pool`` of N processes, each writing every N-th file to its own shard."""
    import multiprocessing

    files, classes = _image_files(args.input)
    index = {name: i for i, name in enumerate(classes)}
    items = [(rel, label, index[label]) for rel, label in files]
    os.makedirs(args.output_dir, exist_ok=True)
    n = args.processes
    parts = [(args.input, os.path.join(args.output_dir, f"train-{i:05d}-of-{n:05d}.tfrecord"), i,
              items[i::n]) for i in range(n)]
    pool = multiprocessing.Pool(n)
    written = sum(pool.map(_write_part, parts, chunksize=1))
    pool.close()
    pool.join()  # the processes end and are waited for: their CPU time reaches this process
    _result(records=written)


# -- TensorFlow's writer, one process ------------------------------------------------------


def tf_build(args, _beam_args: Sequence[str]) -> None:
    import tensorflow as tf

    files, classes = _image_files(args.input)
    index = {name: i for i, name in enumerate(classes)}
    os.makedirs(args.output_dir, exist_ok=True)
    writers = [tf.io.TFRecordWriter(os.path.join(
        args.output_dir, f"train-{i:05d}-of-{args.num_shards:05d}.tfrecord"))
        for i in range(args.num_shards)]

    def feature(value) -> tf.train.Feature:
        if isinstance(value, int):
            return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))
        if isinstance(value, str):
            value = value.encode("utf-8")
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))

    for i, (relpath, label) in enumerate(files):
        with open(os.path.join(args.input, relpath), "rb") as fh:
            data = fh.read()
        features = _features(data, relpath, label, index[label])
        example = tf.train.Example(features=tf.train.Features(
            feature={name: feature(value) for name, value in features.items()}))
        writers[i % args.num_shards].write(example.SerializeToString())
    for writer in writers:
        writer.close()
    _result(records=len(files))


# -- The floor: read and frame, nothing else -------------------------------------------------


def floor(args, _beam_args: Sequence[str]) -> None:
    from transforms.tfrecord.framing import frame_record

    files, _ = _image_files(args.input)
    os.makedirs(args.output_dir, exist_ok=True)
    with open(os.path.join(args.output_dir, "all.tfrecord"), "wb") as out:
        for relpath, _ in files:
            with open(os.path.join(args.input, relpath), "rb") as fh:
                out.write(frame_record(fh.read()))
    _result(records=len(files))


# -- Reading back --------------------------------------------------------------------------


def _parse(record: bytes) -> None:
    from apache_beam.metrics import Metrics

    from transforms.example.codec import decode_example

    decode_example(record)
    Metrics.counter("bench", "records").inc()


def beam_read(args, beam_args: Sequence[str]) -> None:
    import apache_beam as beam

    p = _pipeline(beam_args)
    _ = (p
         | "Read" >> beam.io.ReadFromTFRecord(args.pattern)
         | "Parse" >> beam.Map(_parse))
    result = p.run()
    result.wait_until_finish()
    _result(records=_counter(result, "records"))


def tf_read(args, _beam_args: Sequence[str]) -> None:
    import tensorflow as tf

    from transforms.example.schema import IMAGE_FEATURES

    spec = {name: tf.io.FixedLenFeature([], tf.string if kind == "bytes" else tf.int64)
            for name, kind in IMAGE_FEATURES.items()}
    files = sorted(glob.glob(args.pattern))
    ds = (tf.data.TFRecordDataset(files, num_parallel_reads=tf.data.AUTOTUNE)
          .batch(256)
          .map(lambda batch: tf.io.parse_example(batch, spec), num_parallel_calls=tf.data.AUTOTUNE)
          .prefetch(tf.data.AUTOTUNE))
    records = 0
    for batch in ds:
        records += int(batch["image/class/label"].shape[0])
    _result(records=records)


# -- Planning at ImageNet's scale ------------------------------------------------------------


def plan(args, beam_args: Sequence[str]) -> None:
    import apache_beam as beam

    from benchmarks.plan_scale import _order_of, _size_of, _split_of, chunks_of, synthetic_items
    from transforms.plan_shards import ASSIGNED, PlanShards

    p = _pipeline(beam_args)
    planned = (p
               | "Chunks" >> beam.Create(chunks_of(args.items))
               | "Spread" >> beam.Reshuffle()
               | "Items" >> beam.FlatMap(synthetic_items)
               | "Plan" >> PlanShards(split_of=_split_of, order_of=_order_of, size_of=_size_of,
                                      target_bytes=150 << 20, num_shards=args.num_shards))
    _ = (planned[ASSIGNED]
         | "Shards" >> beam.Map(lambda keyed: keyed[0][1])
         | "PerShard" >> beam.combiners.Count.PerElement()
         | "AllShards" >> beam.combiners.ToList()
         | "Report" >> beam.Map(_report_plan, args.items, args.num_shards))
    p.run().wait_until_finish()


def _report_plan(counts: list[tuple[int, int]], items: int, num_shards: int) -> None:
    total = sum(n for _, n in counts)
    if total != items or len(counts) != num_shards:
        raise RuntimeError(f"planned {total} items into {len(counts)} shards; expected "
                           f"{items} into {num_shards}")
    per_shard = [n for _, n in counts]
    _result(records=total, shards=len(counts), min_records=min(per_shard),
            max_records=max(per_shard))


_CASES = {"beam_build": beam_build, "pool_build": pool_build,
          "tf_build": tf_build, "floor": floor,
          "beam_read": beam_read, "tf_read": tf_read, "plan": plan}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("case", choices=sorted(_CASES))
    parser.add_argument("--input")
    parser.add_argument("--output_dir")
    parser.add_argument("--pattern")
    parser.add_argument("--num_shards", type=int, default=8)
    parser.add_argument("--items", type=int, default=1_281_167)
    parser.add_argument("--processes", type=int, default=os.cpu_count() or 1)
    args, beam_args = parser.parse_known_args(argv)
    _CASES[args.case](args, beam_args)


if __name__ == "__main__":
    main()
