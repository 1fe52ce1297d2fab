"""What the benchmark harnesses share: cases and their command line, measuring, the photos.

Every harness (``benchmarks/throughput.py``, ``scaling.py``, ``object_store.py``,
``runners.py``, ``faults.py``) is a set of named cases, each run as

    python -m benchmarks.HARNESS CASE [--quick] [ARG ...]

where ``--quick`` stands for the case's small arguments (tiny sizes, one round:
checks it works, measures nothing) and later arguments override them. This
module also runs two tools of its own:

    python -m benchmarks.common photos --size_mb 150        # makes (once) and prints a photo folder
    python -m benchmarks.common child_usage USAGE_JSON [--count_stages] MODULE [ARG ...]
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import platform
import random
import resource
import runpy
import shutil
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from typing import Callable, Mapping, Sequence


# -- case cases -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One named case of a harness.

    Attributes:
        run: Takes the case's own arguments (``argv``); returns an exit status, or
            anything else for 0.
        doc: What the case measures, and how to run it (its ``--help`` text).
        quick: The arguments ``--quick`` stands for (small sizes, one round), or
            None where the case passes its arguments on untouched (a wrapper).
    """

    run: Callable[[list[str]], object]
    doc: str
    quick: tuple[str, ...] | None = ()


def run_case(cases: Mapping[str, Case], argv: Sequence[str]) -> int:
    """Runs ``CASE [--quick] [ARG ...]`` of ``cases``; returns the exit status.

    Args:
        cases: The harness's cases by name.
        argv: The command line after the module name.

    Returns:
        The case's exit status (0 when it returned something else than an int);
        2 for an unknown case.
    """
    argv = list(argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in cases:
        width = max(len(name) for name in cases)
        listing = "\n".join(f"  {name:{width}s}  {case.doc.strip().splitlines()[0]}"
                            for name, case in cases.items())
        print(f"usage: python -m {_harness_name()} CASE [--quick] [ARG ...]\n\ncases:\n{listing}",
              file=sys.stderr if argv and argv[0] not in ("-h", "--help") else sys.stdout)
        if argv and argv[0] not in ("-h", "--help"):
            print(f"unknown case {argv[0]!r}", file=sys.stderr)
            return 2
        return 0
    case, rest = cases[argv[0]], argv[1:]
    if case.quick is not None and "--quick" in rest:
        rest.remove("--quick")
        rest = list(case.quick) + rest  # arguments given after --quick override its own
    status = case.run(rest)
    return status if isinstance(status, int) else 0


def _harness_name() -> str:
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    return spec.name if spec is not None else "benchmarks.HARNESS"


# -- case measure -----------------------------------------------------------------------------------------

_MEASURE_DOC = """Run one command as a subprocess and measure its wall time and peak memory.

Two memory figures, because Beam's ``multi_processing`` mode runs its workers
as child processes:

- ``rss_tree``: the peak of the summed RSS of the process and all its
  descendants, sampled every 20 ms with psutil (a peak shorter than that can
  be missed; pages shared between processes are counted once per process);
- ``rss_process``: the largest peak RSS of any single process of the tree, as
  the kernel reports it to ``wait4`` (exact; ``/usr/bin/time -v`` reports the
  same figure).
"""

_CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_POLL_SECONDS = 0.02


@dataclass(frozen=True)
class Measurement:
    """What one run of a command took."""

    seconds: float
    cpu_seconds: float  # user + system, of the process and its waited-for descendants
    rss_tree: int  # bytes
    rss_process: int  # bytes
    returncode: int
    output: str


def _tree_rss(root: psutil.Process) -> int:
    import psutil

    total = 0
    try:
        procs = [root] + root.children(recursive=True)
    except psutil.Error:
        return 0
    for proc in procs:
        try:
            total += proc.memory_info().rss
        except psutil.Error:
            pass  # exited between listing and reading
    return total


def run_measured(cmd: Sequence[str], cwd: str, log_path: str, env: dict | None = None) -> Measurement:
    """Runs ``cmd``; its stdout and stderr go to ``log_path`` (and are returned)."""
    import psutil

    with open(log_path, "wb") as log:
        started = time.perf_counter()
        proc = subprocess.Popen(list(cmd), cwd=cwd, stdout=log, stderr=subprocess.STDOUT, env=env)
        peak = [0]
        done = threading.Event()

        def poll() -> None:
            try:
                root = psutil.Process(proc.pid)
            except psutil.Error:
                return
            while not done.is_set():
                peak[0] = max(peak[0], _tree_rss(root))
                done.wait(_POLL_SECONDS)

        poller = threading.Thread(target=poll, daemon=True)
        poller.start()
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - started
        done.set()
        poller.join()
        proc.returncode = os.waitstatus_to_exitcode(status)
    with open(log_path, "r", errors="replace") as fh:
        output = fh.read()
    return Measurement(seconds, usage.ru_utime + usage.ru_stime, peak[0], usage.ru_maxrss * 1024,
                       proc.returncode, output)


def compile_checkout() -> None:
    """Compiles the checkout's packages to bytecode (``__pycache__``), as ``pip install`` does.

    Python writes it on a module's first import, except where the environment
    says not to (``PYTHONDONTWRITEBYTECODE``): then every process measured
    would compile the project's source again, which installed packages never do.
    """
    import compileall

    for package in ("beam_jobs", "transforms", "benchmarks"):
        compileall.compile_dir(os.path.join(_CHECKOUT, package), quiet=1)


def checkout_env() -> dict[str, str]:
    """This process's environment with this checkout first on ``PYTHONPATH``.

    The commands measured, and the worker processes Beam starts for them,
    then import this checkout's code whatever is installed.
    """
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([_CHECKOUT] + [p for p in [env.get("PYTHONPATH")] if p])
    return env


def add_photo_flags(parser, size_mb: float) -> None:
    """The flags every photo benchmark takes: ``--size_mb`` (of generated photos), ``--input``, ``--rounds``."""
    parser.add_argument("--size_mb", type=float, default=size_mb)
    parser.add_argument("--input", default=None, help="A photo folder to use instead of the generated one.")
    parser.add_argument("--rounds", type=int, default=3)


def photo_root(args) -> str:
    """The photo folder a benchmark reads: ``--input``, else generated photos of ``--size_mb``."""
    if args.input:
        return args.input
    return dataset(args.size_mb).root


def machine() -> dict:
    """The machine a benchmark ran on: cores, memory, CPU model, Python, and the load when it started."""
    import psutil

    cpu = platform.machine()
    if os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo") as fh:
            names = [line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")]
        cpu = names[0] if names else cpu
    return {"cores": os.cpu_count(), "ram_gib": round(psutil.virtual_memory().total / 2**30, 1),
            "cpu": cpu, "python": platform.python_version(),
            "load_average_at_start": [round(x, 2) for x in os.getloadavg()]}


def interleaved_rounds(cases: Mapping[str, Callable[[str], list[str]]], rounds: int, tmp: str, env: dict,
                       before: Callable[[str, str], None] | None = None,
                       after: Callable[[str, str], None] | None = None) -> dict[str, list[tuple[float, float]]]:
    """Runs every case once a round, the cases interleaved, each a fresh process into an empty ``tmp/out``.

    Args:
        cases: Each case's command, given its output folder.
        rounds: Rounds.
        tmp: A scratch folder (the output folder and the log go there).
        env: The commands' environment.
        before: Called with the case's name and output folder before it runs (untimed).
        after: Called with the same after it ran (untimed; raise ``SystemExit`` to stop).

    Returns:
        Each case's (wall, CPU) seconds, a pair a round.

    Raises:
        SystemExit: A case failed (its output's end is said).
    """
    found: dict[str, list[tuple[float, float]]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, command in cases.items():
            out = os.path.join(tmp, "out")
            shutil.rmtree(out, ignore_errors=True)
            if before is not None:
                before(name, out)
            measured = run_measured(command(out), _CHECKOUT, os.path.join(tmp, "log"), env=env)
            if measured.returncode != 0:
                raise SystemExit(f"{name} failed: {measured.output[-2000:]}")
            if after is not None:
                after(name, out)
            found[name].append((measured.seconds, measured.cpu_seconds))
    return found


def medians(found: Mapping[str, Sequence[tuple[float, float]]]) -> dict[str, tuple[float, float]]:
    """Each case's median wall and median CPU seconds (of ``interleaved_rounds``'s pairs)."""
    return {name: (statistics.median(s for s, _ in runs), statistics.median(c for _, c in runs))
            for name, runs in found.items()}


def ratio_table(title: str, median: Mapping[str, tuple[float, float]], baseline: str, label: str) -> str:
    """A Markdown table of each case's median wall and CPU seconds and their ratios to ``baseline``'s.

    Args:
        title: The first header cell.
        median: Each case's (wall, CPU) seconds (``medians``).
        baseline: The case the ratios are to.
        label: What the ratio columns call the baseline ("wall / LABEL's").
    """
    wall0, cpu0 = median[baseline]
    lines = [f"| {title} | wall s | CPU s | wall / {label}'s | CPU / {label}'s |", "|---|---:|---:|---:|---:|"]
    for name, (wall, cpu) in median.items():
        lines.append(f"| {name.replace('|', chr(92) + '|')} | {wall:.2f} | {cpu:.2f} | {wall / wall0:.2f} | "
                     f"{cpu / cpu0:.2f} |")
    return "\n".join(lines)


# -- case photos ------------------------------------------------------------------------------------------

_PHOTOS_DOC = """A deterministic dataset of photo JPEGs for the benchmarks, in class folders.

Every image is derived from one of the real photographs that scikit-image
(``skimage/data``) and scikit-learn (``sklearn/datasets/images``) ship: a
random crop with a common aspect ratio, a resize, an optional mirror flip, a
small colour jitter (per-channel gain and offset), camera-like sharpening and
grain, and a JPEG quality drawn from 85..95. Each image has a target size
drawn from a log-normal distribution with a mean of 110 KB (ImageNet's mean
file size); the pixel count is corrected once after a trial encode so the file
lands near its target.

Image ``i`` depends only on ``i`` (its own seeded generators), so a smaller
dataset is a prefix of a larger one: images are generated once into a pool
under ``benchmarks/.cache/photos/`` and each dataset folder is a farm of hard
links to a prefix of the pool.

    python -m benchmarks.common photos --size_mb 150      # prints the dataset folder
"""

CACHE = os.path.join(os.path.dirname(os.path.abspath(__file__)), ".cache")
POOL = os.path.join(CACHE, "photos")
MEAN_BYTES = 110_000  # ImageNet's mean JPEG size
NUM_CLASSES = 100
_SIGMA = 0.55  # log-normal spread of file sizes
_VERSION = 1  # bump when the recipe changes: the pool is regenerated
# (source file, weight): colour photographs count more than grayscale ones.
_SKIMAGE = (("astronaut.png", 3), ("chelsea.png", 3), ("coffee.png", 3),
            ("motorcycle_left.png", 3), ("motorcycle_right.png", 3), ("rocket.jpg", 3),
            ("hubble_deep_field.jpg", 2), ("retina.jpg", 2), ("ihc.png", 2), ("camera.png", 1),
            ("coins.png", 1), ("brick.png", 1), ("grass.png", 1), ("gravel.png", 1),
            ("moon.png", 1))
_SKLEARN = (("china.jpg", 3), ("flower.jpg", 3))
_ASPECTS = ((4, 3), (3, 4), (3, 2), (2, 3), (1, 1), (16, 9), (5, 4))
_BYTES_PER_PIXEL_GUESS = 0.42


@dataclass(frozen=True)
class Dataset:
    """A generated dataset folder: ``root/<class>/<image>.jpg``."""

    root: str
    images: int
    bytes: int
    pixels: int


def _sources() -> list[tuple[str, int]]:
    import skimage  # bench-only dependencies, needed only to generate the pool
    import sklearn

    skimage_dir = os.path.join(os.path.dirname(skimage.__file__), "data")
    sklearn_dir = os.path.join(os.path.dirname(sklearn.__file__), "datasets", "images")
    found = [(os.path.join(skimage_dir, n), w) for n, w in _SKIMAGE]
    found += [(os.path.join(sklearn_dir, n), w) for n, w in _SKLEARN]
    missing = [p for p, _ in found if not os.path.exists(p)]
    if missing:
        raise SystemExit(f"source photos missing: {missing}; pip install -e '.[bench]'")
    return found


_LOADED: dict[str, Image.Image] = {}


def _source_image(path: str) -> Image.Image:
    from PIL import Image

    if path not in _LOADED:
        with Image.open(path) as img:
            _LOADED[path] = img.convert("RGB")
    return _LOADED[path]


_TILE = 2400  # the largest side an image may have
_GRAIN: list[np.ndarray] = []


def _grain_tiles() -> tuple[np.ndarray, np.ndarray]:
    """Fixed standard-normal noise (x16, int8) for luminance and chroma; made once per process."""
    import numpy as np

    if not _GRAIN:
        noise = np.random.default_rng(20240601)
        for shape in ((_TILE, _TILE, 1), (_TILE, _TILE, 3)):
            _GRAIN.append(np.clip(noise.standard_normal(shape, dtype=np.float32) * 16, -127, 127)
                          .astype(np.int8))
    return _GRAIN[0], _GRAIN[1]


def _render(src: Image.Image, box: tuple[int, int, int, int], size: tuple[int, int], flip: bool,
            gains: np.ndarray, offset: float, grain: float, sharpen: int,
            noise_at: tuple[int, int]) -> Image.Image:
    from PIL import Image
    from PIL import ImageFilter
    import numpy as np

    img = src.crop(box).resize(size, Image.Resampling.BICUBIC)
    if flip:
        img = img.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    img = img.filter(ImageFilter.UnsharpMask(radius=1, percent=sharpen, threshold=2))
    w, h = size
    luma, chroma = _grain_tiles()
    y, x = noise_at[0] % (_TILE - h + 1), noise_at[1] % (_TILE - w + 1)
    pixels = np.asarray(img, dtype=np.float32) * gains + offset
    pixels += luma[y:y + h, x:x + w] * np.float32(grain / 16)
    pixels += chroma[y:y + h, x:x + w] * np.float32(grain / 32)
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))


def _encode(img: Image.Image, quality: int) -> bytes:
    out = io.BytesIO()
    img.save(out, format="JPEG", quality=quality)
    return out.getvalue()


@dataclass(frozen=True)
class Recipe:
    """What photo ``index`` is made of: its source photograph, the crop box in it, a mirror flip."""

    source: str  # the source file's name
    box: tuple[int, int, int, int]
    flip: bool


def _recipe(index: int, sources: list[tuple[str, int]]) -> tuple[random.Random, str, float, tuple, dict]:
    """Image ``index``'s generator (left where the quality is drawn), source, target size, aspect, render args."""
    import numpy as np

    rng = random.Random(f"photo-{_VERSION}-{index}")
    path = rng.choices([p for p, _ in sources], weights=[w for _, w in sources])[0]
    src = _source_image(path)
    mu = math.log(MEAN_BYTES) - _SIGMA ** 2 / 2
    target = min(max(rng.lognormvariate(mu, _SIGMA), 12_000), 600_000)
    aw, ah = rng.choice(_ASPECTS)
    sw, sh = src.size
    fraction = rng.uniform(0.35, 1.0)  # of the largest crop with this aspect
    scale = min(sw / aw, sh / ah) * math.sqrt(fraction)
    cw, ch = max(int(aw * scale), 16), max(int(ah * scale), 16)
    x, y = rng.randint(0, sw - cw), rng.randint(0, sh - ch)
    args = dict(box=(x, y, x + cw, y + ch), flip=rng.random() < 0.5,
                gains=np.array([rng.uniform(0.9, 1.1) for _ in range(3)], dtype=np.float32),
                offset=rng.uniform(-10, 10), grain=rng.uniform(3.0, 9.0),
                sharpen=rng.randint(80, 150), noise_at=(rng.getrandbits(16), rng.getrandbits(16)))
    return rng, path, target, (aw, ah), args


def recipe(index: int) -> Recipe:
    """Which photograph image ``index`` is cut from, where, and whether it is mirrored."""
    _, path, _, _, args = _recipe(index, _sources())
    return Recipe(os.path.basename(path), args["box"], args["flip"])


def make_photo(index: int, sources: list[tuple[str, int]]) -> tuple[bytes, int]:
    """Returns image ``index`` as JPEG bytes, and its pixel count."""
    rng, path, target, (aw, ah), args = _recipe(index, sources)
    src = _source_image(path)
    quality = rng.randint(85, 95)

    def size_for(pixels: float) -> tuple[int, int]:
        side = math.sqrt(pixels / (aw * ah))
        return (min(max(int(aw * side), 32), 2400), min(max(int(ah * side), 32), 2400))

    size = size_for(target / _BYTES_PER_PIXEL_GUESS)
    data = _encode(_render(src, size=size, **args), quality)
    if abs(len(data) / target - 1) > 0.1:  # one correction: bytes scale about with pixels
        size = size_for(size[0] * size[1] * target / len(data))
        data = _encode(_render(src, size=size, **args), quality)
    return data, size[0] * size[1]


def _relpath(index: int) -> str:
    return os.path.join(f"class_{index % NUM_CLASSES:03d}", f"img_{index:07d}.jpg")


def _generate(indexes: list[int]) -> list[tuple[int, int, int]]:
    sources = _sources()
    out = []
    for index in indexes:
        data, pixels = make_photo(index, sources)
        path = os.path.join(POOL, _relpath(index))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path + ".tmp", "wb") as fh:
            fh.write(data)
        os.replace(path + ".tmp", path)
        out.append((index, len(data), pixels))
    return out


def _pool_index() -> dict:
    path = os.path.join(POOL, "index.json")
    if os.path.exists(path):
        with open(path) as fh:
            index = json.load(fh)
        if index.get("version") == _VERSION:
            return index
    return {"version": _VERSION, "sizes": [], "pixels": []}


def _grow_pool(total_bytes: int, workers: int) -> dict:
    """Generates images until the pool's prefix holds ``total_bytes``; returns the pool index."""
    index = _pool_index()
    sizes, pixels = index["sizes"], index["pixels"]
    batch = 64 * workers
    with ProcessPoolExecutor(workers) as pool:
        while sum(sizes) < total_bytes:
            start = len(sizes)
            chunks = [list(range(start + k, start + batch, workers)) for k in range(workers)]
            results = sorted(r for part in pool.map(_generate, chunks) for r in part)
            sizes.extend(size for _, size, _ in results)
            pixels.extend(px for _, _, px in results)
            print(f"  photos: {len(sizes)} images, {sum(sizes) / 1e6:.0f} MB", file=sys.stderr)
            with open(os.path.join(POOL, "index.json.tmp"), "w") as fh:
                json.dump(index, fh)
            os.replace(os.path.join(POOL, "index.json.tmp"), os.path.join(POOL, "index.json"))
    return index


def _link_farm(root: str, count: int, sizes: list[int], pixels: list[int]) -> Dataset:
    done = os.path.join(root, ".dataset.json")
    if os.path.exists(done):
        with open(done) as fh:  # the folder may have moved (another checkout's cache)
            return Dataset(**{**json.load(fh), "root": root})
    for i in range(count):
        target = os.path.join(root, _relpath(i))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if not os.path.exists(target):
            os.link(os.path.join(POOL, _relpath(i)), target)
    result = Dataset(root, count, sum(sizes[:count]), sum(pixels[:count]))
    with open(done, "w") as fh:  # a hidden file: the build job skips it
        json.dump(asdict(result), fh)
    return result


def dataset(size_mb: float, workers: int = 2) -> Dataset:
    """Returns the dataset of about ``size_mb`` MB (10**6 bytes), generating what is missing."""
    total = int(size_mb * 1e6)
    index = _grow_pool(total, workers)
    sizes, pixels = index["sizes"], index["pixels"]
    count, running = 0, 0
    while running < total:
        running += sizes[count]
        count += 1
    return _link_farm(os.path.join(CACHE, f"photos-{size_mb:g}mb"), count, sizes, pixels)


def quarter_of(full: Dataset) -> Dataset:
    """Returns the first quarter (by image index) of a dataset, as its own folder."""
    index = _pool_index()
    return _link_farm(full.root + "-quarter", full.images // 4, index["sizes"], index["pixels"])


def photos_main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=_PHOTOS_DOC.splitlines()[0])
    parser.add_argument("--size_mb", type=float, default=1000)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)
    found = dataset(args.size_mb, args.workers)
    print(f"{found.root}: {found.images} images, {found.bytes / 1e6:.1f} MB, "
          f"mean {found.bytes / found.images / 1e3:.1f} KB, "
          f"mean {found.pixels / found.images / 1e3:.0f} kpixels, "
          f"{found.bytes / found.pixels:.2f} bytes/pixel")


# -- case child_usage -------------------------------------------------------------------------------------

_CHILD_USAGE_DOC = """Run a module as ``__main__`` and write what its process used (``python -m benchmarks.scaling workers``).

    python -m benchmarks.common child_usage USAGE_JSON [--count_stages] MODULE [ARG ...]

Runs ``python -m MODULE ARG ...`` in this same process (``runpy``, so the module
sees the ``sys.argv`` and ``__name__`` it would see on its own), then writes
``USAGE_JSON`` with:

- ``self_cpu``: user + system seconds of this process, every thread
  (``getrusage(RUSAGE_SELF)``), taken after the module returned;
- ``children_cpu``: user + system seconds of every descendant that ended and
  was waited for (``getrusage(RUSAGE_CHILDREN)``: Beam's ``multi_processing``
  workers, a ``multiprocessing.Pool``'s processes, and their own children);
- ``unreaped_cpu`` and ``unreaped``: descendants still alive at that moment
  (none expected), with the CPU seconds psutil reads for them and their
  waited-for children, so nothing is lost silently;
- with ``--count_stages``, ``stages``: for each pipeline the FnApiRunner ran,
  the number of fused stages it executed (the length of the stage list
  ``FnApiRunner.run_stages`` receives, the figure Beam's runner also records as
  its ``__num_fused_stages`` counter), and ``stage_names``.

``--count_stages`` wraps ``apache_beam.runners.portability.fn_api_runner.
fn_runner.FnApiRunner.run_stages`` (checked on apache-beam 2.77.0); without it
Beam is not imported here, so a baseline without Beam pays nothing for it.
"""

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _count_stages(stages: list[dict]) -> None:
    from apache_beam.runners.portability.fn_api_runner import fn_runner

    original = fn_runner.FnApiRunner.run_stages

    def run_stages(self, stage_context, stage_list):
        stages.append({"stages": len(stage_list), "stage_names": [s.name for s in stage_list]})
        return original(self, stage_context, stage_list)

    fn_runner.FnApiRunner.run_stages = run_stages


def _cpu(usage: resource.struct_rusage) -> float:
    return usage.ru_utime + usage.ru_stime


def _unreaped() -> tuple[int, float]:
    import psutil

    alive, seconds = 0, 0.0
    for proc in psutil.Process().children(recursive=True):
        try:
            times = proc.cpu_times()
        except psutil.Error:
            continue  # ended in between; its time went to whoever waited for it
        alive += 1
        seconds += times.user + times.system + times.children_user + times.children_system
    return alive, seconds


def child_usage_main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(_CHILD_USAGE_DOC, file=sys.stderr)
        return 2
    out, rest = argv[0], argv[1:]
    stages: list[dict] = []
    if rest[0] == "--count_stages":
        _count_stages(stages)
        rest = rest[1:]
    module, args = rest[0], rest[1:]
    sys.argv = [module] + args
    status = 0
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as ended:
        code = ended.code
        if isinstance(code, str):
            print(code, file=sys.stderr)
        status = code if isinstance(code, int) else (0 if code is None else 1)
    usage = {"self_cpu": _cpu(resource.getrusage(resource.RUSAGE_SELF)),
             "children_cpu": _cpu(resource.getrusage(resource.RUSAGE_CHILDREN))}
    usage["unreaped"], usage["unreaped_cpu"] = _unreaped()
    if stages:
        usage["pipelines"] = stages
    with open(out, "w") as fh:
        json.dump(usage, fh)
    return status


CASES = {
    "photos": Case(photos_main, _PHOTOS_DOC, ("--size_mb", "2")),
    "child_usage": Case(child_usage_main, _CHILD_USAGE_DOC, None),
}


if __name__ == "__main__":
    sys.exit(run_case(CASES, sys.argv[1:]))
