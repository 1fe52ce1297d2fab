"""Every reading recipe of README.md and docs/*.md, run as written against one small build.

The recipes are taken from the pages themselves (``tests/recipes.py``); only their output
folder, ``out/flowers``, is replaced by the build's. The build is the default one (3 classes of
8 images, 3 shards, so a recipe over several shards of unequal record counts shows it).
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
import types

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before TensorFlow is imported

import pytest

from tests.recipes import ROOT, pages, python_blocks, recipe
from tests.shard_fixtures import load_manifest
from tests.trees import Part


TREE = (Part(per_class=8),)  # the module's one build (tests/trees.py), in a folder named as the recipes'
BUILD = ("--num_shards", "3")
BUILD_FOLDER = "flowers"


def test_every_python_block_is_a_recipe_or_a_fragment() -> None:
    blocks = [block for page in pages() for block in python_blocks(page)]
    assert len(blocks) >= 8
    assert [f"{b.page}:{b.line}" for b in blocks if b.mark is None] == []
    names = [b.name for b in blocks if b.name]
    assert len(names) == len(set(names)), names


def test_every_block_compiles() -> None:
    for page in pages():
        for block in python_blocks(page):
            compile(block.code, f"{block.page}:{block.line}", "exec")


@pytest.mark.slow
def test_tfds_recipe_reads_the_set_with_its_class_names(built) -> None:
    out, expected = built.out, built.expected
    scope: dict = {}
    exec(compile(recipe("tfds", out), "README.md", "exec"), scope)  # noqa: S102 - the README's own code
    builder = scope["builder"]
    assert builder.info.features["image/class/label"].names == ["daisy", "rose", "tulip"]
    assert 0 < len(list(scope["ds"])) <= len(expected) // 10 + 1  # train[:10%]
    rows = [(ex["image/filename"].numpy().decode(), int(ex["image/class/label"]))
            for ex in builder.as_dataset(split="train")]
    assert sorted(rows) == sorted((path, ["daisy", "rose", "tulip"].index(label)) for path, label in expected.items())


def _stub_dali(calls: list[tuple[str, tuple, dict]]) -> dict[str, types.ModuleType]:
    """Modules standing in for DALI's, whose functions take only the arguments DALI documents.

    The names are those of DALI's operator reference (docs.nvidia.com/deeplearning/dali, 1.x):
    ``fn.readers.tfrecord`` (keyword-only; ``path``, ``index_path`` and ``features`` required),
    ``fn.decoders.image`` (one input; ``device`` "cpu" or "mixed"), ``pipeline_def``'s pipeline
    arguments, ``tfrecord.FixedLenFeature(shape, dtype, default_value)`` and
    ``VarLenFeature(dtype, default_value)`` with the dtypes ``string``, ``int64``, ``float32``.
    """
    reader_args = {"device", "name", "bytes_per_sample_hint", "dont_use_mmap", "features", "index_path",
                   "initial_fill", "lazy_init", "num_shards", "pad_last_batch", "path", "prefetch_queue_depth",
                   "preserve", "random_shuffle", "read_ahead", "seed", "shard_id", "shuffle_after_epoch",
                   "shuffle_after_epoch_seed", "skip_cached_images", "stick_to_shard", "tensor_init_bytes",
                   "use_o_direct"}
    decoder_args = {"device", "name", "output_type", "bytes_per_sample_hint", "hw_decoder_load",
                    "hybrid_huffman_threshold", "device_memory_padding", "host_memory_padding",
                    "preallocate_height_hint", "preallocate_width_hint", "preserve", "use_fast_idct",
                    "affine", "split_stages", "memory_stats", "jpeg_fancy_upsampling", "adjust_orientation"}
    pipeline_args = {"batch_size", "num_threads", "device_id", "seed", "exec_pipelined", "prefetch_queue_depth",
                     "exec_async", "bytes_per_sample", "set_affinity", "max_streams",
                     "default_cuda_stream_priority", "enable_memory_stats", "enable_checkpointing",
                     "py_num_workers", "py_start_method", "py_callback_pickler", "output_dtype", "output_ndim",
                     "exec_dynamic", "enable_conditionals"}

    def checked(name, documented, required=(), positional=0):
        def call(*args, **kwargs):
            unknown = set(kwargs) - documented
            assert not unknown, f"{name} has no argument {sorted(unknown)}"
            assert not set(required) - set(kwargs), f"{name} needs {sorted(set(required) - set(kwargs))}"
            assert len(args) <= positional, f"{name} takes {positional} positional arguments"
            calls.append((name, args, kwargs))
            if name == "fn.readers.tfrecord":
                return {key: f"<{key}>" for key in kwargs["features"]}
            return f"<{name}>"
        return call

    def pipeline_def(fn=None, **kwargs):
        checked("pipeline_def", pipeline_args)(**kwargs)
        return fn if fn is not None else (lambda f: f)

    def feature(kind, names):
        def make(*args, **kwargs):
            params = dict(zip(names, args), **kwargs)
            assert set(params) <= set(names) and len(args) <= len(names), (kind, args, kwargs)
            assert params.get("dtype") in ("string", "int64", "float32"), params
            return (kind, params)
        return make

    fn = types.ModuleType("nvidia.dali.fn")
    fn.readers = types.SimpleNamespace(tfrecord=checked("fn.readers.tfrecord", reader_args,
                                                        ("path", "index_path", "features")))
    fn.decoders = types.SimpleNamespace(image=checked("fn.decoders.image", decoder_args, positional=1))
    tfrecord = types.ModuleType("nvidia.dali.tfrecord")
    tfrecord.string, tfrecord.int64, tfrecord.float32 = "string", "int64", "float32"
    tfrecord.FixedLenFeature = feature("FixedLenFeature", ("shape", "dtype", "default_value"))
    tfrecord.VarLenFeature = feature("VarLenFeature", ("dtype", "default_value"))
    dali = types.ModuleType("nvidia.dali")
    dali.fn, dali.tfrecord, dali.types, dali.pipeline_def = fn, tfrecord, types.ModuleType("nvidia.dali.types"), \
        pipeline_def
    nvidia = types.ModuleType("nvidia")
    nvidia.dali = dali
    return {"nvidia": nvidia, "nvidia.dali": dali, "nvidia.dali.fn": fn, "nvidia.dali.tfrecord": tfrecord,
            "nvidia.dali.types": dali.types}


@pytest.mark.slow
def test_dali_recipe_passes_dali_documented_arguments_naming_every_shard_and_index(built, monkeypatch) -> None:
    # DALI cannot be installed here: its modules are stood in for by functions that accept only
    # the argument names DALI documents, and what the recipe passes them is checked against the set.
    out = built.out
    calls: list = []
    for name, module in _stub_dali(calls).items():
        monkeypatch.setitem(sys.modules, name, module)
    scope: dict = {}
    exec(compile(recipe("dali", out), "docs/reading.md", "exec"), scope)  # noqa: S102 - the page's own code
    scope["train"]()
    by_name = {name: kwargs for name, _, kwargs in calls}
    assert by_name["pipeline_def"]["batch_size"] > 0
    reader = by_name["fn.readers.tfrecord"]
    shards = [os.path.join(out, s["file"]) for s in load_manifest(out)["splits"]["train"]["shards"]]
    assert reader["path"] == shards
    assert reader["index_path"] == [os.path.join(out, "index", os.path.basename(s) + ".idx") for s in shards]
    assert all(os.path.isfile(path) for path in reader["index_path"])
    spec = load_manifest(out)["feature_spec"]
    dali_type = {"bytes": "string", "int64": "int64", "float": "float32"}
    for key, (_, params) in reader["features"].items():
        assert dali_type[spec[key]] == params["dtype"], key
    assert by_name["fn.decoders.image"]["device"] in ("cpu", "mixed")


# The tfrecord package registers TensorFlow's Example message in protobuf's default pool, as
# TensorFlow does, so it runs in a child process without TensorFlow. Its torch dataset needs
# only torch.utils.data's IterableDataset and get_worker_info (no worker: None): a stand-in gives them.
_TORCH_STUB = "class IterableDataset:\n    pass\n\ndef get_worker_info():\n    return None\n"
_PYTORCH_CHILD = r"""
import itertools, json, sys
scope = {}
exec(compile(sys.argv[1], "docs/reading.md", "exec"), scope)
rows = [(bytes(ex["image/filename"]).decode() if "image/filename" in ex else None, int(ex["image/class/label"][0]))
        for ex in itertools.islice(iter(scope["ds"]), 1000)]
print(json.dumps({"rows": rows, "splits": scope["splits"]}))
"""


@pytest.mark.slow
def test_pytorch_recipe_reads_every_record_once_in_an_epoch_with_shards_weighted_by_records(built, tmp_path) -> None:
    out, expected = built.out, built.expected
    stub = tmp_path / "stub" / "torch" / "utils"
    stub.mkdir(parents=True)
    (stub.parent / "__init__.py").write_text("from . import utils\n")
    (stub / "__init__.py").write_text("from . import data\n")
    (stub / "data.py").write_text(_TORCH_STUB)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(tmp_path / "stub")
    child = subprocess.run([sys.executable, "-c", _PYTORCH_CHILD, recipe("pytorch", out)], env=env,
                           capture_output=True, text=True, timeout=120, check=False)
    assert child.returncode == 0, child.stderr[-3000:]
    result = json.loads(child.stdout)
    assert len(result["rows"]) == len(expected)  # the epoch ends, each record read once
    labels = sorted(label for _, label in result["rows"])
    assert labels == sorted(["daisy", "rose", "tulip"].index(c) for c in expected.values())
    shards = load_manifest(out)["splits"]["train"]["shards"]
    assert {name + ".tfrecord": weight for name, weight in result["splits"].items()} == \
        {s["file"]: s["records"] for s in shards}


@pytest.mark.slow
def test_beam_recipe_counts_every_record(built, capsys) -> None:
    out, expected = built.out, built.expected
    exec(compile(recipe("beam", out), "docs/reading.md", "exec"), {})  # noqa: S102 - the page's own code
    assert capsys.readouterr().out.split() == [str(len(expected))]


def _install_requires() -> list[str]:
    """setup.py's install_requires: what ``pip install -e .`` brings."""
    tree = ast.parse((ROOT / "setup.py").read_text(encoding="utf-8"))
    call = next(node for node in ast.walk(tree) if isinstance(node, ast.Call)
                and any(k.arg == "install_requires" for k in node.keywords))
    return ast.literal_eval(next(k.value for k in call.keywords if k.arg == "install_requires"))


@pytest.mark.slow
def test_beam_recipe_runs_with_what_pip_install_brings(built) -> None:
    # Beam's ReadFromTFRecord needs a CRC32C module (python-snappy, google-crc32c or crcmod) that
    # apache-beam itself does not require: each not named by install_requires is hidden from the run.
    out, expected = built.out, built.expected
    named = {requirement.split(">")[0].split("<")[0].split("=")[0].strip().lower()
             for requirement in _install_requires()}
    hidden = [module for module, dist in (("snappy", "python-snappy"), ("google_crc32c", "google-crc32c"),
                                          ("crcmod", "crcmod")) if dist not in named]
    child = textwrap.dedent(f"""
        import sys
        class Hide:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in {hidden!r}:
                    raise ImportError(f"{{name}} is not installed")
        sys.meta_path.insert(0, Hide())
        exec(compile(sys.argv[1], "docs/reading.md", "exec"), {{}})
    """)
    done = subprocess.run([sys.executable, "-c", child, recipe("beam", out)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, check=False, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-1] == str(len(expected))


@pytest.mark.slow
def test_splittable_source_recipe_reads_every_record_with_its_offset(built, capsys) -> None:
    out, expected = built.out, built.expected
    exec(compile(recipe("splittable-source", out), "docs/reading.md", "exec"), {})  # noqa: S102
    assert capsys.readouterr().out.split() == [str(len(expected))]
