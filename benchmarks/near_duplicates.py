"""What the near-duplicate check across splits finds and costs (``--near_duplicates``).

On the first ``--count`` photos of ``benchmarks/photos.py`` (each a crop of
one of 17 photographs, resized, colour-jittered, sharpened, with grain):

- found: each photo's copy resized to 90% (bicubic) and saved at JPEG
  quality 80, against the photo: the distance between their hashes;
- false pairs: every pair of unrelated photos (cut from different
  photographs, or from one photograph but mirrored, or with crops
  overlapping less than ``RELATED_IOU``; scikit-image's motorcycle_left
  and motorcycle_right are one scene, a stereo pair): how many lie within
  each distance. Pairs of overlapping crops of one photograph are
  near-duplicates by any measure and are counted apart;
- the distance chosen: the smallest that finds every copy, and the false
  pairs there;
- cost: ``bucket_pairs`` over a full bucket (``DEFAULT_BUCKET_CAP``
  random hashes, a tenth of them in validation); ``inspect_image`` of every photo with and without the hash, one
  thread, alternating rounds (microseconds per image, seconds per GB, ratio),
  and whole builds (``--split_fractions train=0.9,validation=0.1``) with
  ``--near_duplicates off`` and ``report``, alternating, in one process
  each (wall and CPU seconds, ratio).

    python benchmarks/near_duplicates.py [--count 1000] [--rounds 3] [--photos DIR]

It prints a table and one JSON line.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
from PIL import Image

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, _ROOT)

from benchmarks import photos  # noqa: E402
from transforms.images.inspection import inspect_image  # noqa: E402
from transforms.images.items import SourceImage  # noqa: E402
from transforms.images.choices import DEFAULT_NEAR_DUPLICATE_DISTANCE  # noqa: E402
from transforms.images.near_duplicates import DEFAULT_BUCKET_CAP, HashedImage, bucket_pairs  # noqa: E402
from transforms.images.perceptual import perceptual_hash, popcount  # noqa: E402
from transforms.images.records import EncodeSettings  # noqa: E402

RELATED_IOU = 0.25
_SCENES = {"motorcycle_right.png": "motorcycle_left.png"}  # one scene, two cameras


def _files(folder: str, count: int) -> list[str]:
    found = []
    for dirpath, _, names in os.walk(folder):
        found += [os.path.join(dirpath, n) for n in names if n.endswith(".jpg")]
    found.sort(key=lambda p: int(os.path.basename(p)[4:-4]))  # img_0000123.jpg
    if len(found) < count:
        raise SystemExit(f"{folder} holds {len(found)} photos, fewer than --count {count}")
    return found[:count]


def _copy(data: bytes) -> bytes:
    """The photo resized to 90% and saved at JPEG quality 80."""
    with Image.open(io.BytesIO(data)) as image:
        w, h = image.size
        small = image.convert("RGB").resize((int(w * 0.9), int(h * 0.9)), Image.Resampling.BICUBIC)
    out = io.BytesIO()
    small.save(out, format="JPEG", quality=80)
    return out.getvalue()


def _iou(a: tuple, b: tuple) -> float:
    ix = max(0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def related_matrix(indexes: list[int]) -> np.ndarray:
    """True where two photos are overlapping crops of one photograph (or scene), unmirrored alike."""
    recipes = [photos.recipe(i) for i in indexes]
    n = len(recipes)
    related = np.zeros((n, n), dtype=bool)
    for i in range(n):
        a = recipes[i]
        for j in range(i + 1, n):
            b = recipes[j]
            same = _SCENES.get(a.source, a.source) == _SCENES.get(b.source, b.source)
            if same and a.flip == b.flip and _iou(a.box, b.box) >= RELATED_IOU:
                related[i, j] = related[j, i] = True
    return related


def quality(datas: list[bytes], indexes: list[int]) -> dict:
    hashes = np.array([perceptual_hash(d) for d in datas], dtype=np.uint64)
    copies = np.array([perceptual_hash(_copy(d)) for d in datas], dtype=np.uint64)
    found = popcount(hashes ^ copies).astype(int)
    apart = popcount(hashes[:, None] ^ hashes[None, :]).astype(int)
    upper = np.triu(np.ones(apart.shape, dtype=bool), 1)
    related = related_matrix(indexes)
    unrelated = apart[upper & ~related]
    near_related = apart[upper & related]
    chosen = int(found.max())
    return {"photos": len(datas), "copy_distance_max": chosen,
            "copy_distance_hist": np.bincount(found).tolist(),
            "unrelated_pairs": int(unrelated.size), "unrelated_min": int(unrelated.min()),
            "unrelated_within": {k: int((unrelated <= k).sum()) for k in range(0, 17, 2)},
            "related_pairs": int(near_related.size),
            "related_within": {k: int((near_related <= k).sum()) for k in range(0, 17, 2)},
            "smallest_distance_finding_every_copy": chosen,
            "false_pairs_at_default": int((unrelated <= DEFAULT_NEAR_DUPLICATE_DISTANCE).sum())}


def inspect_cost(datas: list[bytes], rounds: int) -> dict:
    settings = EncodeSettings()
    source = SourceImage("p.jpg", "p.jpg", "train", "a")
    times = {False: [], True: []}
    for _ in range(rounds):
        for hashed in (False, True):
            start = time.process_time()
            for data in datas:
                inspect_image(source, data, {"a": 0}, None, settings, 0, {}, hashed)
            times[hashed].append(time.process_time() - start)
    gb = sum(map(len, datas)) / 1e9
    plain, hashed = min(times[False]), min(times[True])
    return {"plain_us_per_image": plain / len(datas) * 1e6, "hashed_us_per_image": hashed / len(datas) * 1e6,
            "added_us_per_image": (hashed - plain) / len(datas) * 1e6,
            "plain_cpu_s_per_gb": plain / gb, "added_cpu_s_per_gb": (hashed - plain) / gb,
            "ratio": hashed / plain}


def compare_cost(rounds: int) -> dict:
    """``bucket_pairs`` over a full bucket (``DEFAULT_BUCKET_CAP`` random hashes, 90% train, 10% validation)."""
    rng = np.random.default_rng(0)
    values = rng.integers(0, 2**63, DEFAULT_BUCKET_CAP, dtype=np.int64).astype(np.uint64) * np.uint64(2)
    members = [HashedImage(f"{i:064x}", int(v), "validation" if i % 10 == 0 else "train", f"{i}.jpg", f"{i}.jpg")
               for i, v in enumerate(values)]
    best = min(_timed(bucket_pairs, members, DEFAULT_NEAR_DUPLICATE_DISTANCE) for _ in range(rounds))
    return {"members": len(members), "ms_per_full_bucket": best * 1e3}


def _timed(fn, *args) -> float:
    start = time.process_time()
    fn(*args)
    return time.process_time() - start


def _build(folder: str, out: str, mode: str) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "beam_jobs.build_shards", "--input", folder, "--output_dir", out,
                    "--split_fractions", "train=0.9,validation=0.1", "--near_duplicates", mode,
                    "--max_bad_fraction", "1"], cwd=_ROOT, check=True, capture_output=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    shutil.rmtree(out)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def build_cost(files: list[str], rounds: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        folder = os.path.join(tmp, "in")
        for path in files:  # one class folder each: the build reads exactly these photos
            target = os.path.join(folder, os.path.basename(os.path.dirname(path)), os.path.basename(path))
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.link(path, target) if os.stat(path).st_dev == os.stat(tmp).st_dev else shutil.copy(path, target)
        runs = {"off": [], "report": []}
        for _ in range(rounds):
            for mode in runs:
                runs[mode].append(_build(folder, os.path.join(tmp, "out"), mode))
    gb = sum(os.path.getsize(p) for p in files) / 1e9
    best = {mode: (min(w for w, _ in r), min(c for _, c in r)) for mode, r in runs.items()}
    return {"gb": gb, "off_wall_s": best["off"][0], "report_wall_s": best["report"][0],
            "off_cpu_s": best["off"][1], "report_cpu_s": best["report"][1],
            "wall_ratio": best["report"][0] / best["off"][0], "cpu_ratio": best["report"][1] / best["off"][1],
            "added_cpu_s_per_gb": (best["report"][1] - best["off"][1]) / gb}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--photos", default=None, help="A folder of photos.py's photos (default: made here).")
    parser.add_argument("--skip_builds", action="store_true")
    args = parser.parse_args()
    folder = args.photos or photos.dataset(args.count * photos.MEAN_BYTES / 1e6 * 1.2).root
    files = _files(folder, args.count)
    indexes = [int(os.path.basename(p)[4:-4]) for p in files]
    datas = [open(p, "rb").read() for p in files]
    result = {"quality": quality(datas, indexes), "inspect": inspect_cost(datas, args.rounds),
              "compare": compare_cost(args.rounds)}
    if not args.skip_builds:
        result["build"] = build_cost(files, args.rounds)
    q, c = result["quality"], result["inspect"]
    print(f"copies (90% + JPEG q80) of {q['photos']} photos: distance max {q['copy_distance_max']}, "
          f"histogram {q['copy_distance_hist']}")
    print(f"unrelated pairs: {q['unrelated_pairs']}, min distance {q['unrelated_min']}, within k: "
          f"{q['unrelated_within']}")
    print(f"overlapping crops of one photograph: {q['related_pairs']}, within k: {q['related_within']}")
    print(f"default distance {DEFAULT_NEAR_DUPLICATE_DISTANCE}: false pairs {q['false_pairs_at_default']}")
    print(f"inspect_image: {c['plain_us_per_image']:.0f} -> {c['hashed_us_per_image']:.0f} us/image "
          f"(+{c['added_us_per_image']:.0f}; {c['plain_cpu_s_per_gb']:.2f} + {c['added_cpu_s_per_gb']:.2f} "
          f"CPU s/GB; {c['ratio']:.2f}x)")
    print(f"a full bucket of {result['compare']['members']} hashes (90% train) compared in "
          f"{result['compare']['ms_per_full_bucket']:.0f} ms")
    if "build" in result:
        b = result["build"]
        print(f"build of {b['gb'] * 1e3:.0f} MB: off {b['off_wall_s']:.1f} s wall / {b['off_cpu_s']:.1f} CPU s, "
              f"report {b['report_wall_s']:.1f} s / {b['report_cpu_s']:.1f} CPU s "
              f"({b['wall_ratio']:.2f}x wall, {b['cpu_ratio']:.2f}x CPU; +{b['added_cpu_s_per_gb']:.1f} CPU s/GB)")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
