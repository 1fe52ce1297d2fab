"""What a build takes from what it read before its pipeline (transforms/images/build_survey.py)."""

from __future__ import annotations

import dataclasses

import pytest

from transforms.errors import UsageError
from transforms.images.build_survey import BuildSurvey, fixed_class_names, image_threads, survey_build
from transforms.images.inputs import FolderTask

_TASK = FolderTask("in", "in/", True, "classes")


def _survey(**given) -> BuildSurvey:
    plain = dict(fixed=None, parquet_names=None, only_parquet=False, append_to=None, folder_tasks=(),
                 parquet_folders=(), near_duplicates=False, one_split=False, threads=(1, 1))
    return survey_build(**{**plain, **given})


@pytest.mark.parametrize("requested, workers, cores, remote, decodes, expected", [
    (0, None, 8, False, False, (1, 1)),  # elsewhere than the local runner, header checks: one thread
    (0, None, 8, True, False, (0, 0)),  # elsewhere, gs:// inputs: each worker counts its own cores
    (0, 2, 8, False, True, (4, 1)),  # decoding on 2 local workers: a share of the cores to inspect
    (0, 2, 8, True, False, (4, 4)),  # remote inputs: reading and writing wait on the network
    (0, 16, 8, False, True, (1, 1)),  # more workers than cores: at least one thread
    (5, 2, 8, False, False, (5, 5)),  # asked for: both steps
])
def test_image_threads_go_where_they_pay(requested, workers, cores, remote, decodes, expected) -> None:
    assert image_threads(requested, workers, cores, remote, decodes) == expected


@pytest.mark.parametrize("names, problem", [
    (["a", "a"], "names a class twice"),
    (["a", ""], "bad class name"),
    (["1", "0"], "--class_names/--labels_file: "),
])
def test_a_wrong_fixed_class_list_is_one_usage_error(names, problem) -> None:
    with pytest.raises(UsageError, match=problem):
        fixed_class_names(names)


def test_a_fixed_class_list_is_kept_in_order() -> None:
    assert fixed_class_names(["rose", "daisy"]) == ("rose", "daisy")
    assert fixed_class_names(None) is None


@pytest.mark.parametrize("given, labels", [
    ({"fixed": ("b", "a"), "parquet_names": ("x",), "only_parquet": True}, ("b", "a")),  # the flag wins
    ({"parquet_names": ("x", "y"), "only_parquet": True}, ("x", "y")),  # Parquet's ClassLabel indices stay
    ({"parquet_names": ("x", "y"), "only_parquet": False}, None),  # other inputs too: from the listing
    ({"parquet_names": ("x", "y"), "only_parquet": True, "append_to": ("z",)}, None),  # an append keeps the set's
    ({"parquet_names": ("x", "y"), "only_parquet": True, "append_to": ()}, None),
])
def test_the_class_list_a_build_fixes_before_listing(given, labels) -> None:
    assert _survey(**given).labels == labels


@pytest.mark.parametrize("near, one_split, hashes", [(True, False, True), (True, True, False), (False, False, False)])
def test_images_are_hashed_only_when_they_may_fall_in_two_splits(near, one_split, hashes) -> None:
    assert _survey(near_duplicates=near, one_split=one_split).near_hashes is hashes


def test_the_survey_is_one_frozen_value_of_plain_values() -> None:
    found = _survey(folder_tasks=[_TASK], parquet_folders=[("p", ("p/a.parquet",))], append_to=["a"],
                    threads=(3, 2))
    assert found == BuildSurvey(labels=None, folder_tasks=(_TASK,), parquet_folders=(("p", ("p/a.parquet",)),),
                                append_to=("a",), inspect_threads=3, write_threads=2, near_hashes=False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        found.labels = ("x",)  # type: ignore[misc]
