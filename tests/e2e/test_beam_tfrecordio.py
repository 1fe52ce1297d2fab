"""Beam's own TFRecord reader (``apache_beam.io.tfrecordio``) reads the build job's shards."""

from __future__ import annotations

import os

import apache_beam as beam
import pytest
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.tfrecordio import ReadAllFromTFRecord
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to

from tests.shard_fixtures import load_manifest, records, run_build
from tests.trees import Part
from transforms.beam_compat import local_runner


TREE = (Part(per_class=3),)  # the module's input tree (tests/trees.py)


# Beam's "deflate" is a zlib stream (zlib.decompressobj()), what the job writes as .zz.
@pytest.mark.slow
@pytest.mark.parametrize("compression, beam_compression", [
    ("none", CompressionTypes.AUTO), ("gzip", CompressionTypes.AUTO),
    ("zlib", CompressionTypes.DEFLATE)])
def test_read_from_tfrecord_reads_every_record_of_every_shard(tree, tmp_path, capsys, compression,
                                                              beam_compression):
    out = str(tmp_path)
    status, _, err = run_build(capsys, "--input", tree, "--output_dir", out, "--num_shards", "2",
                               "--compression", compression)
    assert status == 0, err
    paths = [os.path.join(out, s["file"]) for s in load_manifest(out)["splits"]["train"]["shards"]]
    expected = [(path, data) for path in paths for _, data in records(path)]
    assert len(expected) == 9 and len({p for p, _ in expected}) == 2

    options = PipelineOptions([])
    with beam.Pipeline(runner=local_runner(options), options=options) as p:
        read = (p
                | "Shards" >> beam.Create(paths)
                | "Read" >> ReadAllFromTFRecord(compression_type=beam_compression,
                                                with_filename=True))  # (file, record)
        assert_that(read, equal_to(expected))
