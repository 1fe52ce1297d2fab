"""Our ``index/*.idx`` files with the PyTorch ``tfrecord`` package, the reader DALI's format comes from.

The package's ``example_pb2`` registers ``tensorflow.Example`` in protobuf's
default pool, as TensorFlow does, so it cannot be imported into a process that
has TensorFlow loaded (other tests load it): it runs in a child process here.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from tests.shard_fixtures import load_manifest, make_class_tree, run_build

# find_spec, not importorskip: importing the package here would clash with TensorFlow.
pytestmark = pytest.mark.skipif(importlib.util.find_spec("tfrecord") is None,
                                reason="the tfrecord package is not installed")

_CHILD = r"""
import json, os, sys, tempfile
from tfrecord.reader import tfrecord_loader
from tfrecord.tools.tfrecord2idx import create_index

out, shards = sys.argv[1], json.loads(sys.argv[2])
result = {"same_index": [], "filenames": []}
for name in shards:
    path = os.path.join(out, name)
    ours = os.path.join(out, "index", name + ".idx")
    theirs = os.path.join(tempfile.mkdtemp(), name + ".idx")
    create_index(path, theirs)
    result["same_index"].append(open(ours, "rb").read() == open(theirs, "rb").read())
    for part in range(3):  # the index splits the file into three parts by record
        for ex in tfrecord_loader(path, ours, {"image/filename": "byte", "image/class/label": "int"},
                                  shard=(part, 3)):
            result["filenames"].append(bytes(ex["image/filename"]).decode())
print(json.dumps(result))
"""


def test_tfrecord_package_reads_every_record_with_our_indexes(tmp_path, capsys):
    src, out = str(tmp_path / "src"), str(tmp_path / "out")
    expected = make_class_tree(src, per_class=4, broken=False)
    status, _, err = run_build(capsys, "--input", src, "--output_dir", out, "--num_shards", "2")
    assert status == 0, err
    shards = [s["file"] for s in load_manifest(out)["splits"]["train"]["shards"]]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    child = subprocess.run([sys.executable, "-c", _CHILD, out, json.dumps(shards)], env=env,
                           capture_output=True, text=True, timeout=120, check=False)
    assert child.returncode == 0, child.stderr
    result = json.loads(child.stdout)
    assert result["same_index"] == [True, True]
    assert sorted(result["filenames"]) == sorted(expected)
