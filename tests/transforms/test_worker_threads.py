"""Images inspected and records made on several threads: the same outputs as on one, bounded work."""

from __future__ import annotations

import dataclasses
import io
import os
import random
import threading

import apache_beam as beam
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.utils.windowed_value import WindowedValue
from PIL import Image

from tests.shard_fixtures import make_class_tree, run_build, sha256_file, shard_files, write
from transforms import inspect_images, worker_threads
from transforms.images import inspection
from transforms.inspect_images import ImageRules, InspectImages, RecordStaging, _InspectImageFn
from transforms.errors import ImageError
from transforms.images.items import ImageMeta, SourceImage
from transforms.images.records import EncodeSettings
from transforms.shardset.dead_letters import DEAD_LETTERS, DeadLetter

_MAX_BYTES = 40_000  # the noise PNG is over it, every image of the class tree under it
_LABELS = ["daisy", "rose", "tulip"]


def _noise_png(side: int) -> bytes:
    rng = random.Random(side)
    img = Image.frombytes("RGB", (side, side), bytes(rng.getrandbits(8) for _ in range(side * side * 3)))
    out = io.BytesIO()
    img.save(out, format="PNG")
    return out.getvalue()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A mixed corpus: good JPEGs and PNGs, a truncated JPEG, text, an empty file, a too-large
    PNG, a missing file, an unknown class; with the reason each bad input is expected to get."""
    root = str(tmp_path_factory.mktemp("mixed"))
    expected = make_class_tree(root, per_class=8)
    big = write(os.path.join(root, "tulip", "big.png"), _noise_png(160))
    assert os.path.getsize(big) > _MAX_BYTES
    expected["tulip/big.png"] = "dead:too_large"
    write(os.path.join(root, "lily", "lily_000.png"),
          open(os.path.join(root, "daisy", "daisy_002.png"), "rb").read())
    expected["lily/lily_000.png"] = "dead:unknown_label"
    expected["rose/gone.jpg"] = "dead:unreadable"  # listed, then removed before it was read
    sources = [SourceImage(os.path.join(root, rel), rel, "train", rel.split("/")[0])
               for rel in sorted(expected)]
    return root, sources, expected


# What the pipelines below emitted, by run: the in-memory runner pickles the steps, so an
# output is kept through a module-level function (pickled by name), not a closure.
_EMITTED: dict[tuple[int, str], list] = {}


def _keep(item, run: int, kind: str) -> None:
    _EMITTED.setdefault((run, kind), []).append(item)


@pytest.fixture
def staging(tmp_path) -> RecordStaging:
    """Where InspectImages writes each record's run file."""
    return RecordStaging(str(tmp_path / "out"), "run")


def _unstaged(meta: ImageMeta) -> ImageMeta:
    """The metadata but where its record was staged (run files are named by bundle)."""
    return dataclasses.replace(meta, run=None)


def _inspect_in_pipeline(sources, threads: int, staging: tuple[str, str, None]):
    """(ImageMeta list, DeadLetter list, counters) of InspectImages over ``sources``."""
    run = len(_EMITTED) + threads * 1000
    p = TestPipeline()
    labels = p | "Labels" >> beam.Create([_LABELS])
    out = (p | beam.Create(sources)
           | InspectImages(EncodeSettings(), 7, beam.pvalue.AsSingleton(labels),
                           ImageRules(max_bytes=_MAX_BYTES), threads=threads, staging=staging))
    out.main | "KeepMetas" >> beam.Map(_keep, run, "metas")
    out[DEAD_LETTERS] | "KeepDead" >> beam.Map(_keep, run, "dead")
    result = p.run()
    result.wait_until_finish()
    counters = {c.key.metric.name: c.committed
                for c in result.metrics().query(MetricsFilter().with_namespace("build"))["counters"]}
    return _EMITTED.pop((run, "metas"), []), _EMITTED.pop((run, "dead"), []), counters


def test_threads_give_the_same_outputs_dead_letters_and_counters(corpus, staging):
    root, sources, expected = corpus
    one = _inspect_in_pipeline(sources, threads=1, staging=staging)
    assert all(meta.run is not None for meta in one[0])  # every record staged
    for threads in (2, 3):
        many = _inspect_in_pipeline(sources, threads=threads, staging=staging)
        assert (sorted(map(_unstaged, many[0]), key=lambda m: m.source.path)
                == sorted(map(_unstaged, one[0]), key=lambda m: m.source.path))
        assert sorted(many[1], key=lambda d: d.path) == sorted(one[1], key=lambda d: d.path)
        assert many[2] == one[2]
    metas, dead, counters = one
    assert {os.path.relpath(d.path, root): f"dead:{d.reason}" for d in dead} == {
        rel: outcome for rel, outcome in expected.items() if outcome.startswith("dead:")}
    assert {m.source.relpath for m in metas} == {
        rel for rel, outcome in expected.items() if not outcome.startswith("dead:")}
    assert counters["images_rejected"] == len(dead)
    assert counters["images_read"] == len(metas) + 3  # and the truncated, text and empty files


class _Lifecycle:
    """Runs a DoFn's setup, one bundle of ``process`` calls and ``finish_bundle`` by hand."""

    def __init__(self, fn: _InspectImageFn) -> None:
        self.fn = fn
        self.emitted: list = []
        fn.setup()
        fn.start_bundle()

    def process(self, source: SourceImage) -> None:
        self.emitted.extend(self.fn.process(source, beam.transforms.window.GlobalWindow(), 0,
                                            labels=_LABELS))

    def finish(self) -> list:
        self.emitted.extend(self.fn.finish_bundle() or ())
        self.fn.teardown()
        return [o.value if isinstance(o, WindowedValue) else o.value.value for o in self.emitted]


def test_an_error_on_a_worker_thread_becomes_the_inputs_dead_letter(corpus, staging, monkeypatch):
    _, sources, _ = corpus
    good = [s for s in sources if s.relpath.endswith("_000.jpg")]
    threads_seen = set()
    real = inspection.encode_image

    def encode(data, settings):
        threads_seen.add(threading.current_thread().name)
        if data == open(good[1].path, "rb").read():
            raise ImageError("decode_error", "the fake decoder refused it")
        return real(data, settings)

    monkeypatch.setattr(inspection, "encode_image", encode)
    run = _Lifecycle(_InspectImageFn(EncodeSettings(), 7, staging=staging, threads=2))
    for source in good:
        run.process(source)
    outputs = run.finish()
    assert all(name.startswith("inspect-image") for name in threads_seen), threads_seen
    assert [type(o) for o in outputs] == [ImageMeta, DeadLetter, ImageMeta]  # in input order
    assert outputs[1] == DeadLetter(good[1].path, "decode_error", "the fake decoder refused it")


def test_finish_bundle_emits_every_input_in_its_window(corpus, staging):
    _, sources, _ = corpus
    run = _Lifecycle(_InspectImageFn(EncodeSettings(), 7, ImageRules(max_bytes=_MAX_BYTES), threads=3,
                                    staging=staging))
    for source in sources:
        run.process(source)
    in_process = len(run.emitted)
    assert in_process <= len(sources) - 1  # some were still in flight when the bundle ended
    outputs = run.finish()
    assert [o.source.path if isinstance(o, ImageMeta) else o.path for o in outputs] == \
        [s.path for s in sources]
    assert all(o.windows == (beam.transforms.window.GlobalWindow(),) for o in run.emitted
               if isinstance(o, WindowedValue))


class _LazyPool:
    """An executor that runs a call only when its result is asked for, counting the calls given."""

    def __init__(self) -> None:
        self.submitted = 0

    def submit(self, fn, *args):
        self.submitted += 1
        return _LazyFuture(fn, args)

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        pass


class _LazyFuture:
    def __init__(self, fn, args) -> None:
        self._call, self._done, self._cancelled = (fn, args), None, False

    def result(self):
        if self._done is None:
            fn, args = self._call
            self._done = fn(*args)
        return self._done

    def cancel(self) -> bool:
        self._cancelled = self._done is None
        return self._cancelled

    def cancelled(self) -> bool:
        return self._cancelled

    def exception(self):
        return None


def test_inspect_keeps_at_most_two_images_per_thread_in_flight(corpus, staging):
    _, sources, _ = corpus
    threads = 3
    fn = _InspectImageFn(EncodeSettings(), 7, ImageRules(max_bytes=_MAX_BYTES), threads=threads, staging=staging)
    run = _Lifecycle(fn)
    fn._pool.shutdown()
    fn._pool = lazy = _LazyPool()  # nothing finishes unless the step waits for it
    run.fn.start_bundle()
    most = 0
    for source in sources:
        run.process(source)
        most = max(most, lazy.submitted - len(run.emitted))
        assert lazy.submitted - len(run.emitted) <= 2 * threads
    assert most == 2 * threads
    assert len(run.finish()) == len(sources) == lazy.submitted


def test_inspect_reads_on_as_many_threads_as_asked(corpus, staging, monkeypatch):
    _, sources, _ = corpus
    threads = 2
    both_reading = threading.Barrier(threads, timeout=60)  # a guard against a hang, never waited out
    lock = threading.Lock()
    state = {"reading": 0, "most_reading": 0, "started": 0}
    real = inspect_images.read_source

    def read(path, max_bytes):
        with lock:
            state["started"] += 1
            state["reading"] += 1
            state["most_reading"] = max(state["most_reading"], state["reading"])
            first = state["started"] <= threads
        if first:  # the first two reads meet: the pool does run two at once
            both_reading.wait()
        try:
            return real(path, max_bytes)
        finally:
            with lock:
                state["reading"] -= 1

    monkeypatch.setattr(inspect_images, "read_source", read)
    run = _Lifecycle(_InspectImageFn(EncodeSettings(), 7, ImageRules(max_bytes=_MAX_BYTES), threads=threads,
                                    staging=staging))
    readable = [s for s in sources if not s.relpath.startswith(("lily/", "rose/gone"))]
    for source in readable:
        run.process(source)
    assert len(run.finish()) == len(readable) == state["started"]
    assert state["most_reading"] == threads


def test_ordered_map_draws_items_only_as_the_window_allows():
    pulled = []

    def items():
        for i in range(50):
            pulled.append(i)
            yield i

    pool = worker_threads.new_pool(3, "test")
    try:
        made = worker_threads.ordered_map(lambda i: i * i, items(), pool, window=4)
        taken = []
        for value in made:
            taken.append(value)
            assert len(pulled) <= len(taken) + 4
            if len(taken) == 10:
                break
        made.close()
        assert taken == [i * i for i in range(10)]
        assert len(pulled) <= 14
    finally:
        pool.shutdown()


def test_ordered_work_raises_a_calls_error_where_its_result_is_taken():
    pool = worker_threads.new_pool(2, "test")

    def fail_on_two(i):
        if i == 2:
            raise ValueError("two")
        return i

    try:
        work = worker_threads.OrderedWork(pool, window=8)
        for i in range(5):
            assert list(work.submit(fail_on_two, i)) == []
        results = work.drain()
        assert [next(results), next(results)] == [0, 1]
        with pytest.raises(ValueError, match="two"):
            next(results)
        work.close()
        assert len(work) == 0
    finally:
        pool.shutdown()


def test_inline_work_with_a_weight_gives_results_back_a_window_or_a_byte_bound_at_a_time():
    """Inline (no pool), each call runs when submitted; its result waits until ``window`` results or
    ``held_bytes`` bytes are held, then all come back in order; ``drain`` gives the rest, ``close``
    drops them."""
    ran = []

    def make(size):
        ran.append(size)
        return b"x" * size

    work = worker_threads.OrderedWork(None, window=3, weigh=len, held_bytes=100)
    assert list(work.submit(make, 1)) == [] and list(work.submit(make, 2)) == []
    assert ran == [1, 2] and len(work) == 2  # run at once, held
    assert [len(r) for r in work.submit(make, 3)] == [1, 2, 3]  # the window is full
    assert list(work.submit(make, 5)) == []
    assert [len(r) for r in work.submit(make, 150)] == [5, 150]  # over the byte bound: given back at once
    assert list(work.submit(make, 4)) == []
    assert [len(r) for r in work.drain()] == [4]
    assert list(work.submit(make, 6)) == []
    work.close()
    assert len(work) == 0 and list(work.drain()) == []
    # Without a weight, inline work comes back at once, as before.
    plain = worker_threads.OrderedWork(None, window=3)
    assert list(plain.submit(make, 7)) == [b"x" * 7]


def test_inspect_on_one_thread_emits_images_a_batch_at_a_time_in_input_order(corpus, staging, monkeypatch):
    """One inspect thread: images are read and inspected as they come, and emitted ``INLINE_BATCH`` at
    a time (each step's code runs several times in a row), in input order; the last ones at the bundle's end."""
    _, sources, _ = corpus
    monkeypatch.setattr(worker_threads, "INLINE_BATCH", 3)
    run = _Lifecycle(_InspectImageFn(EncodeSettings(), 7, ImageRules(max_bytes=_MAX_BYTES), threads=1,
                                     staging=staging))
    readable = [s for s in sources if not s.relpath.startswith(("lily/", "rose/gone"))][:8]
    sizes = []
    for source in readable:
        run.process(source)
        sizes.append(len(run.emitted))
    assert sizes == [0, 0, 3, 3, 3, 6, 6, 6]
    outputs = run.finish()
    assert [o.path if isinstance(o, DeadLetter) else o.source.path for o in outputs] == [s.path for s in readable]


def test_thread_count_zero_is_one_per_usable_core():
    assert worker_threads.thread_count(0) == len(os.sched_getaffinity(0))
    assert worker_threads.thread_count(3) == 3
    with pytest.raises(ValueError, match=">= 0"):
        worker_threads.thread_count(-1)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["tf", "reencode"])
def test_build_is_byte_identical_across_image_thread_counts(corpus, tmp_path, capsys, mode):
    root, _, _ = corpus
    outputs = {}
    for threads in ("1", "3"):
        out = str(tmp_path / f"t{threads}")
        status, _, err = run_build(capsys, "--input", root, "--output_dir", out, "--shard_size_mb", "0.02",
                                   "--max_bad_fraction", "0.5", "--max_image_mb", str(_MAX_BYTES / 2**20),
                                   "--class_names", ",".join(_LABELS + ["lily"]), "--image_mode", mode,
                                   "--image_threads", threads)
        assert status == 0, err
        outputs[threads] = out
    names = shard_files(outputs["1"])
    assert len(names) >= 2 and shard_files(outputs["3"]) == names
    for name in names + ["manifest.json", "dead_letters.jsonl", "labels.txt"]:
        assert sha256_file(os.path.join(outputs["1"], name)) == sha256_file(os.path.join(outputs["3"], name)), name


@pytest.mark.parametrize("flags, inputs, expected", [
    (["--validate", "decode"], "local", lambda cores: (cores, 1)),
    (["--image_mode", "reencode"], "local", lambda cores: (cores, 1)),
    (["--validate", "structure"], "local", lambda cores: (1, 1)),  # holds the GIL: threads slow it
    (["--validate", "header"], "s3", lambda cores: (cores, cores)),  # reads wait on the network
    (["--validate", "decode", "--direct_num_workers", "2", "--direct_running_mode", "multi_processing"],
     "local", lambda cores: (max(1, cores // 2), 1)),
    (["--validate", "full", "--direct_num_workers", "2", "--direct_running_mode", "multi_threading"],
     "local", lambda cores: (max(1, cores // 2), 1)),
    (["--image_threads", "5", "--direct_num_workers", "2", "--direct_running_mode", "multi_processing"],
     "local", lambda cores: (5, 5)),
    (["--runner", "DataflowRunner", "--validate", "decode"], "s3", lambda cores: (0, 0)),  # each worker's cores
])
def test_default_image_threads_go_where_they_pay_and_share_the_cores(tmp_path, flags, inputs, expected):
    from apache_beam.options.pipeline_options import PipelineOptions

    from beam_jobs import build_shards
    from beam_jobs.cli.config import BuildConfig
    from beam_jobs.quiet_beam import all_options

    root = str(tmp_path / "in") if inputs == "local" else "s3://bucket/in"
    options = PipelineOptions(["--input", root, "--output_dir", str(tmp_path / "out")] + flags)
    cfg = BuildConfig.from_flags(all_options(options))
    got = build_shards._image_threads(options, cfg.image_threads, cfg.settings, [root])
    assert got == expected(worker_threads.usable_cores())
