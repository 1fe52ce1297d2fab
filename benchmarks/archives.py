"""Building from an archive against building from the same photos extracted.

    python -m benchmarks.archives [--photos FOLDER] [--rounds 2]

The photos (``benchmarks/photos.py``, ~4,000 photos of ~110 KB in class
folders; default: the 440 MB dataset) and their first quarter are each
packed, once, into a tar (``tar -cf``: class folders), a tar of class tars
(ImageNet's layout) and a stored zip, in a scratch folder. Each input is then
built by ``beam_jobs.build_shards`` in a fresh process (one process: below
1 GiB of input), rounds interleaved, and measured: wall and CPU seconds, peak
RSS, and the bytes the process wrote to disk (``/proc/self/io``
``write_bytes``, read by the child as it ends: the shards, run files and
manifest, and any copy of the archive it would make).

Prints a Markdown table of medians: per input, whole-process wall and CPU
seconds and the marginal ones per added GB (full less quarter), each with its
ratio to the folder build's, peak RSS at both sizes, and MB written per MB of
input; then one JSON line with every run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tarfile
import tempfile
import zipfile

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from benchmarks import photos  # noqa: E402
from benchmarks.measure import checkout_env, run_measured  # noqa: E402

__all__ = ["run"]

KINDS = ("folder", "tar", "tar_of_tars", "zip")


def _classes(root: str) -> list[str]:
    return sorted(name for name in os.listdir(root) if not name.startswith(".")
                  and os.path.isdir(os.path.join(root, name)))


def _files(folder: str) -> list[str]:
    return sorted(name for name in os.listdir(folder) if not name.startswith("."))


def pack(root: str, kind: str, path: str) -> str:
    """``root``'s class folders as one input of ``kind`` at ``path`` (made once)."""
    if kind == "folder" or os.path.exists(path):
        return root if kind == "folder" else path
    partial = path + ".partial"
    if kind == "tar":
        with tarfile.open(partial, "w") as archive:
            for label in _classes(root):
                for name in _files(os.path.join(root, label)):
                    archive.add(os.path.join(root, label, name), arcname=f"{label}/{name}")
    elif kind == "tar_of_tars":
        inner = partial + ".inner"
        with tarfile.open(partial, "w") as outer:
            for label in _classes(root):
                with tarfile.open(inner, "w") as archive:
                    for name in _files(os.path.join(root, label)):
                        archive.add(os.path.join(root, label, name), arcname=name)
                outer.add(inner, arcname=f"{label}.tar")
        os.remove(inner)
    else:
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_STORED) as archive:  # JPEGs do not deflate
            for label in _classes(root):
                for name in _files(os.path.join(root, label)):
                    archive.write(os.path.join(root, label, name), f"{label}/{name}")
    os.rename(partial, path)
    return path


def _child(argv: list[str]) -> int:
    """Runs the build in this process, then prints the bytes it wrote to disk."""
    from beam_jobs import build_shards

    status = build_shards.run(argv)
    with open("/proc/self/io") as fh:
        io = dict(line.split(": ") for line in fh.read().splitlines())
    print(f"WRITE_BYTES {int(io['write_bytes'])}")
    return status


def _quarter(root: str, where: str) -> str:
    """The first quarter of each class folder's photos, hard-linked into ``where`` (made once)."""
    if not os.path.isdir(where):
        partial = where + ".partial"
        shutil.rmtree(partial, ignore_errors=True)
        for label in _classes(root):
            os.makedirs(os.path.join(partial, label))
            names = _files(os.path.join(root, label))
            for name in names[:len(names) // 4]:
                os.link(os.path.join(root, label, name), os.path.join(partial, label, name))
        os.rename(partial, where)
    return where


def _input_bytes(root: str) -> int:
    return sum(os.path.getsize(os.path.join(folder, name)) for folder, _, names in os.walk(root)
               for name in names if not name.startswith("."))


def run(full_root: str, quarter_root: str, rounds: int, scratch: str) -> dict:
    sizes = {"full": _input_bytes(full_root), "quarter": _input_bytes(quarter_root)}
    inputs = {(size, kind): pack(root, kind, os.path.join(scratch, f"{size}.{kind}.{'zip' if kind == 'zip' else 'tar'}"))
              for size, root in (("full", full_root), ("quarter", quarter_root)) for kind in KINDS}
    runs = []
    env = checkout_env()
    for r in range(rounds):
        for (size, kind), source in inputs.items():
            out = os.path.join(scratch, "out")
            shutil.rmtree(out, ignore_errors=True)
            cmd = [sys.executable, "-m", "benchmarks.archives", "--child", "--input", source, "--output_dir", out]
            m = run_measured(cmd, _ROOT, os.path.join(scratch, f"log-{size}-{kind}-{r}.txt"), env)
            if m.returncode != 0:
                raise SystemExit(f"{kind} {size} build failed:\n{m.output[-3000:]}")
            written = int(m.output.rsplit("WRITE_BYTES ", 1)[1].split()[0])
            records = json.load(open(os.path.join(out, "manifest.json")))["records"]
            runs.append({"round": r, "size": size, "kind": kind, "seconds": m.seconds, "cpu": m.cpu_seconds,
                         "rss": m.rss_process, "written": written, "records": records})
            print(json.dumps(runs[-1]), file=sys.stderr, flush=True)
    return {"input_bytes": sizes, "runs": runs}


def table(result: dict) -> str:
    sizes = result["input_bytes"]
    gb = (sizes["full"] - sizes["quarter"]) / 1e9

    def med(kind: str, size: str, key: str) -> float:
        return statistics.median(r[key] for r in result["runs"] if r["kind"] == kind and r["size"] == size)

    def figures(kind: str) -> dict[str, float]:
        return {"wall": med(kind, "full", "seconds"), "cpu": med(kind, "full", "cpu"),
                "wall_gb": (med(kind, "full", "seconds") - med(kind, "quarter", "seconds")) / gb,
                "cpu_gb": (med(kind, "full", "cpu") - med(kind, "quarter", "cpu")) / gb}

    base = figures("folder")
    lines = ["| input | records | wall s (x folder) | CPU s (x folder) | wall s per added GB (x folder) | "
             "CPU s per added GB (x folder) | peak RSS quarter / full | MB written per MB in |",
             "|---|---|---|---|---|---|---|---|"]
    for kind in KINDS:
        f = figures(kind)
        cells = [f"{f[key]:.2f} ({f[key] / base[key]:.2f})" for key in ("wall", "cpu", "wall_gb", "cpu_gb")]
        lines.append(f"| {kind} | {med(kind, 'full', 'records'):.0f} | " + " | ".join(cells) + " | "
                     f"{med(kind, 'quarter', 'rss') / 2**20:.0f} / {med(kind, 'full', 'rss') / 2**20:.0f} MiB | "
                     f"{med(kind, 'full', 'written') / sizes['full']:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        return _child(argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--photos", default=None, help="Folder of class folders (default: the 440 MB photos).")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--scratch", default=None, help="Where the archives are packed (default: a temp folder).")
    args = parser.parse_args(argv)
    root = args.photos.rstrip("/") if args.photos else photos.dataset(440).root
    scratch = args.scratch or tempfile.mkdtemp(prefix="archives-bench-")
    os.makedirs(scratch, exist_ok=True)
    result = run(root, _quarter(root, os.path.join(scratch, "quarter")), args.rounds, scratch)
    print(table(result))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
