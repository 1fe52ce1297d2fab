"""The README's ``tf.data`` reading snippet works, as written, for every shard compression.

The snippet is taken from README.md itself, so the test and the README cannot drift apart.
"""

from __future__ import annotations

import os
import re

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before TensorFlow is imported

import pytest

from tests.shard_fixtures import load_manifest, make_class_tree

tf = pytest.importorskip("tensorflow", reason="TensorFlow is not installed (pip install -e '.[compat]')")

README = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "README.md")


def readme_snippet() -> str:
    """The python block under the README's heading on reading the shards with tf.data."""
    text = open(README, encoding="utf-8").read()
    section = text.split("### Reading the shards with `tf.data`", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("images"))
    make_class_tree(root, per_class=3, broken=False)
    return root


@pytest.mark.parametrize("compression", ["none", "gzip", "zlib"])
def test_readme_snippet_reads_every_record(tree, tmp_path, compression, monkeypatch):
    from beam_jobs import build_shards

    out = tmp_path / "out" / "flowers"
    assert build_shards.run(["--input", tree, "--output_dir", str(out), "--num_shards", "2",
                             "--compression", compression]) == 0
    monkeypatch.chdir(tmp_path)  # the snippet reads out/flowers, relative to where it runs
    scope: dict = {}
    exec(compile(readme_snippet(), "README.md", "exec"), scope)  # noqa: S102 - the README's own code
    labels = [int(label) for _, label in scope["ds"]]
    manifest = load_manifest(str(out))
    assert len(labels) == manifest["splits"]["train"]["records"] == 9
    assert sorted(labels) == [0, 0, 0, 1, 1, 1, 2, 2, 2]
