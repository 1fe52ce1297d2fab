"""The per-image harness (benchmarks/per_image.py): every case wired, and each runs on a few photos."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

from benchmarks import common, per_image
from tests.benchmarks.harness_checks import assert_cases_wired


def test_every_case_is_wired(capsys):
    assert_cases_wired(per_image.CASES, capsys)


def test_each_case_prints_its_figures_for_a_folder_of_photos(tmp_path, capsys):
    rng = np.random.default_rng(3)
    for index in range(3):
        folder = tmp_path / f"class_{index % 2}"
        folder.mkdir(exist_ok=True)
        out = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (40, 60, 3), dtype=np.uint8)).save(out, "JPEG")
        (folder / f"img_{index}.jpg").write_bytes(out.getvalue())
    for case, figures in (("structure", ("ms/image in cache", "cold")),
                          ("done_lines", ("input_stamp", "done_list_line", "DoneLines.append")),
                          ("meta_coding", ("encode", "decode", "bytes"))):
        assert common.run_case(per_image.CASES, [case, "--input", str(tmp_path), "--rounds", "1"]) == 0
        printed = capsys.readouterr().out
        assert printed.startswith("check_jpeg, 3 photos" if case == "structure" else "3 photos"), printed
        assert all(figure in printed for figure in figures), printed
