"""The README's ``tf.data`` reading snippet works, as written, for every shard compression.

The snippet is taken from README.md itself, so the test and the README cannot drift apart.
"""

from __future__ import annotations

import os
import re

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before TensorFlow is imported

import pytest

from tests.recipes import recipe
from tests.shard_fixtures import load_manifest
from tests.trees import Part

tf = pytest.importorskip("tensorflow", reason="TensorFlow is not installed (pip install -e '.[compat]')")

README = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "README.md")


def readme_snippet() -> str:
    """The README's recipe for reading the shards with tf.data (marked ``<!-- recipe: tf-data -->``)."""
    return recipe("tf-data")


TREE = (Part(per_class=3),)  # the module's input tree (tests/trees.py)


@pytest.mark.cpu_budget(5.0)  # a job run, and the first case pays the README snippet's import of TensorFlow
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


def quick_start_commands() -> list[str]:
    """The ``tfrecord-shards`` lines of the README's quick start by hand, without their comments."""
    text = open(README, encoding="utf-8").read()
    block = re.search(r"```bash\n(.*?)```", text.split("Or by hand", 1)[1], re.S).group(1)
    return [line.split("  #", 1)[0].strip() for line in block.splitlines() if line.startswith("tfrecord-shards ")]


def test_quick_start_inspects_a_shard_whatever_the_shard_count() -> None:
    # run_local.sh builds 4 shards; the quick start's append makes them 5; other images, other counts.
    from fnmatch import fnmatch

    from transforms.shardset.naming import shard_file_name

    commands = [line.split() for line in quick_start_commands()]
    output_dir = next(words[words.index("--output_dir") + 1] for words in commands if words[1] == "build")
    inspected = [words[2] for words in commands if words[1] == "inspect"]
    assert inspected
    for path in inspected:
        folder, name = os.path.split(path)
        assert folder == output_dir, path
        for count in range(1, 120):
            written = [shard_file_name("train", index, count) for index in range(count)]
            assert len([n for n in written if fnmatch(n, name)]) == 1, (path, count)  # the shell's one match


@pytest.mark.slow
def test_quick_start_runs_as_written(tmp_path) -> None:
    import subprocess
    import sys

    root = os.path.dirname(README)
    shim = tmp_path / "bin" / "tfrecord-shards"
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\nPYTHONPATH="{root}" exec "{sys.executable}" -m beam_jobs.cli.main "$@"\n')
    shim.chmod(0o755)
    script = "\n".join(["set -eu", *quick_start_commands()])
    done = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "PATH": f"{shim.parent}{os.pathsep}{os.environ['PATH']}"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "# stopped after 2 records (--limit)" in done.stdout, done.stdout[-3000:]
