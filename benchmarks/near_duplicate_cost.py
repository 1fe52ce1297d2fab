"""What the near-duplicate check adds to a build, in CPU seconds per added GB of JPEG photos.

Builds two photo sets of ``benchmarks/photos.py`` (``--small_mb`` and
``--large_mb``, the smaller a prefix of the larger) into two splits
(``--split_fractions train=0.9,validation=0.1``: with one split nothing is
hashed), each build one process (``--direct_num_workers 1``), the cases
interleaved round by round:

- ``off``: ``--near_duplicates off``;
- ``report, full decode``: the default check with Pillow's ``draft`` turned
  off in the build's process, so each JPEG is decoded whole (the cost of a
  hash without a reduced decode);
- ``report, 1/8 decode``: ``perceptual.DRAFT_SIDE`` set to 1, so each JPEG is
  decoded at libjpeg's smallest scale (DC only);
- ``report`` (the default): decoded at the smallest scale leaving both sides
  >= ``DRAFT_SIDE`` (64) pixels.

The marginal cost per GB is (CPU at ``large`` - CPU at ``small``) / (GB
between them), median of the rounds: the fixed cost of a process (imports,
pipeline) cancels out. Beside it, ``perceptual_hash`` alone over the small
set's photos with each decode, one thread, best of the rounds (CPU seconds
per GB and microseconds per photo): the figure least moved by a loaded
machine.

    python benchmarks/near_duplicate_cost.py [--small_mb 150] [--large_mb 450] [--rounds 3]

It prints a table and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, _ROOT)

from benchmarks.measure import checkout_env, interleaved_rounds, machine, medians  # noqa: E402

# Case -> the patch its build process runs before the build (see --child).
CASES = {"off": "off", "report, full decode": "full", "report, 1/8 decode": "eighth", "report": "default"}


def _child(patch: str, argv: list[str]) -> int:
    """Runs the build in this process, the decode patched as ``patch`` says."""
    if patch == "full":
        from PIL import JpegImagePlugin

        JpegImagePlugin.JpegImageFile.draft = lambda self, mode, size: None  # each JPEG decoded whole
    elif patch == "eighth":
        from transforms.images import perceptual

        perceptual.DRAFT_SIDE = 1  # libjpeg's 1/8 scale for any image
    from beam_jobs import build_shards

    return build_shards.run(argv)


def _command(folder: str, patch: str):
    mode = "off" if patch == "off" else "report"
    return lambda out: [sys.executable, os.path.abspath(__file__), "--child", patch, "--",
                        "--input", folder, "--output_dir", out, "--split_fractions", "train=0.9,validation=0.1",
                        "--near_duplicates", mode, "--direct_num_workers", "1",
                        "--direct_running_mode", "in_memory"]


def _patched(patch: str):
    """The patch as a context for this process: draft off (``full``) or DC only (``eighth``)."""
    import contextlib

    from PIL import JpegImagePlugin

    from transforms.images import perceptual

    @contextlib.contextmanager
    def applied():
        draft, side = JpegImagePlugin.JpegImageFile.draft, perceptual.DRAFT_SIDE
        if patch == "full":
            JpegImagePlugin.JpegImageFile.draft = lambda self, mode, size: None
        elif patch == "eighth":
            perceptual.DRAFT_SIDE = 1
        try:
            yield
        finally:
            JpegImagePlugin.JpegImageFile.draft, perceptual.DRAFT_SIDE = draft, side
    return applied()


def hash_cost(folder: str, rounds: int) -> dict:
    """CPU seconds per GB of ``perceptual_hash`` alone over the photos of ``folder``, each decode, one
    thread, best of ``rounds`` (the cases alternating): the check's per-image work without a build."""
    import time

    from transforms.images.perceptual import perceptual_hash

    datas = []
    for d, _, names in os.walk(folder):
        for n in sorted(names):
            if not n.endswith(".jpg"):
                continue
            with open(os.path.join(d, n), "rb") as fh:
                datas.append(fh.read())
    gb = sum(map(len, datas)) / 1e9
    best: dict[str, float] = {}
    for _ in range(rounds):
        for name, patch in CASES.items():
            if patch == "off":
                continue
            with _patched(patch):
                start = time.process_time()
                for data in datas:
                    perceptual_hash(data)
                spent = time.process_time() - start
            best[name] = min(best.get(name, spent), spent)
    return {name: {"cpu_s_per_gb": spent / gb, "us_per_image": spent / len(datas) * 1e6}
            for name, spent in best.items()}


def _size_gb(folder: str) -> float:
    return sum(os.path.getsize(os.path.join(d, n)) for d, _, names in os.walk(folder) for n in names) / 1e9


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        raise SystemExit(_child(sys.argv[2], sys.argv[4:]))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small_mb", type=float, default=150)
    parser.add_argument("--large_mb", type=float, default=450)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    from benchmarks import photos  # here: it needs the bench extra's packages

    folders = {"small": photos.dataset(args.small_mb).root, "large": photos.dataset(args.large_mb).root}
    gb = {size: _size_gb(folder) for size, folder in folders.items()}
    cases = {f"{name} @ {size}": _command(folder, patch)
             for size, folder in folders.items() for name, patch in CASES.items()}
    hashing = hash_cost(folders["small"], args.rounds)
    with tempfile.TemporaryDirectory() as tmp:
        found = interleaved_rounds(cases, args.rounds, tmp, checkout_env())
    median = medians(found)
    added_gb = gb["large"] - gb["small"]
    rows = {}
    for name in CASES:
        (wall_s, cpu_s), (wall_l, cpu_l) = median[f"{name} @ small"], median[f"{name} @ large"]
        rows[name] = {"cpu_small": cpu_s, "cpu_large": cpu_l, "wall_small": wall_s, "wall_large": wall_l,
                      "cpu_s_per_added_gb": (cpu_l - cpu_s) / added_gb}
    base = rows["off"]["cpu_s_per_added_gb"]
    print(f"| case | CPU s @ {gb['small'] * 1e3:.0f} MB | CPU s @ {gb['large'] * 1e3:.0f} MB | "
          "CPU s per added GB | added to off's |")
    print("|---|---:|---:|---:|---:|")
    for name, row in rows.items():
        print(f"| {name} | {row['cpu_small']:.1f} | {row['cpu_large']:.1f} | {row['cpu_s_per_added_gb']:.2f} | "
              f"{row['cpu_s_per_added_gb'] - base:+.2f} |")
    for name, row in hashing.items():
        print(f"perceptual_hash alone, {name}: {row['us_per_image']:.0f} us per photo, "
              f"{row['cpu_s_per_gb']:.2f} CPU s/GB")
    print(json.dumps({"machine": machine(), "gb": gb, "rounds": args.rounds, "cases": rows,
                      "hash_alone": hashing, "runs": found}))


if __name__ == "__main__":
    main()
