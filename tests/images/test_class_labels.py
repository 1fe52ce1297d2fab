"""An integer label is a class index in every input kind; text that is not one is a class name."""

from __future__ import annotations

import tracemalloc

import pytest

from transforms.errors import UsageError
from transforms.images.class_labels import class_label, class_list, index_bound, index_order_problem, is_index


@pytest.mark.parametrize("value, names, expected", [
    ("7", None, ("7", "")),
    (" 7 ", None, ("7", "")),  # white space around an integer is stripped, then it is an integer
    ("\t007\n", None, ("7", "")),
    ("+7", None, ("7", "")),
    (7, None, ("7", "")),
    ("0", None, ("0", "")),
    ("-0", None, ("0", "")),
    ("cat", None, ("cat", "")),
    (" cat ", None, (" cat ", "")),  # a name is kept as written
    ("7a", None, ("7a", "")),
    ("1_000", None, ("1_000", "")),  # int() would take it; it is a name
    ("\u0663", None, ("\u0663", "")),  # an Arabic-Indic digit: a name, not an index
    (2, ("a", "b", "c"), ("c", "")),
    (" 1 ", ("a", "b", "c"), ("b", "")),
    ("cat", ("a", "b"), ("cat", "")),
])
def test_class_label(value, names, expected) -> None:
    assert class_label(value, names) == expected


@pytest.mark.parametrize("value, names, why", [
    ("-3", None, "class index -3 is negative"),
    (-1, ("a",), "class index -1 is negative"),
    (3, ("a", "b", "c"), "class index 3 is outside the 3 class names given"),
    ("9" * 5000, ("a",), "is outside the 1 class names given"),  # no int() of 5,000 digits
    (True, None, "label True is neither a class index nor a class name"),
    (1.5, None, "label 1.5 is neither"),
    (None, None, "label None is neither"),
])
def test_labels_that_name_no_class(value, names, why) -> None:
    name, problem = class_label(value, names)
    assert name is None and why in problem


def test_is_index_only_for_what_class_label_writes() -> None:
    assert [is_index(n) for n in ("0", "17", "007", " 7", "-1", "cat", "")] == [True, True, False, False, False,
                                                                               False, False]


def test_indices_are_the_class_list_in_numeric_order() -> None:
    assert class_list({"9", "11", "2"}, 3) == tuple(str(i) for i in range(12))
    assert class_list({"rose", "daisy"}, 2) == ("daisy", "rose")
    assert class_list(set(), 0) == ()


def test_a_mix_of_indices_and_names_is_refused_naming_one_of_each_and_the_flag() -> None:
    with pytest.raises(UsageError) as err:
        class_list({"2", "11", "cat"}, 3)
    message = str(err.value)
    assert "e.g. 2 and 'cat'" in message and "--class_names" in message and "\n" not in message


def test_an_index_far_above_the_inputs_is_refused_without_building_the_list() -> None:
    assert index_bound(1) == 1000 and index_bound(500) == 5000
    assert len(class_list({"999"}, 1)) == 1000
    tracemalloc.start()
    try:
        with pytest.raises(UsageError, match="class index 2000000 is far above the 1 inputs"):
            class_list({"2000000"}, 1)  # a list of 2,000,001 names would take over 100 MB
        with pytest.raises(UsageError, match="far above"):
            class_list({"9" * 5000}, 1)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20


@pytest.mark.parametrize("names, problem", [
    (("0", "1", "2"), None),
    (("cat", "1", "dog"), None),
    (("00", "01"), None),
    (("1", "2", "3"), "class '1' is at index 0"),
    (("a", "7"), "class '7' is at index 1"),
])
def test_a_class_named_by_an_integer_must_be_at_that_index(names, problem) -> None:
    found = index_order_problem(names)
    assert found == problem if problem is None else problem in found


def test_names_that_differ_only_in_the_white_space_around_them_are_refused_naming_both() -> None:
    # "a.jpg,cat" and "b.jpg, cat" in one CSV: one class written two ways, not two classes.
    with pytest.raises(UsageError) as err:
        class_list({"cat", " cat", "dog", "dog "}, 4)
    message = str(err.value)
    assert "' cat' and 'cat' differ only in the white space around them" in message and "\n" not in message
    assert class_list({" cat", " dog"}, 2) == (" cat", " dog")  # written one way each: kept as written
