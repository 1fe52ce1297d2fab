"""What the whole listing of a build's inputs says, known before any image is read."""

from __future__ import annotations

import collections
from dataclasses import dataclass, field, replace
from typing import Iterable, Mapping, Sequence

from transforms.errors import UsageError
from transforms.images.annotations import (DEFAULT_OBJECT_OFFSET, ObjectClasses, RecordLayout, layout_of, merge_layouts,
                                           object_label_map, with_optional_features)
from transforms.images.class_labels import class_list, is_index, refuse_white_space_twins
from transforms.images.items import SourceImage

__all__ = ["ListingFacts", "ListingTally", "appended_classes"]


@dataclass(frozen=True)
class ListingFacts:
    """What the whole listing says.

    Attributes:
        inputs: Inputs listed, the listing's dead letters included (an unreadable folder is one).
        classes: Image class names in index order: ``fixed`` when given, else ``class_list``'s.
        layout: The ``RecordLayout`` every record follows.
        splits: The splits the listed inputs name, sorted.
    """

    inputs: int
    classes: tuple[str, ...]
    layout: RecordLayout
    splits: tuple[str, ...] = ()


@dataclass
class ListingTally:
    """Gathers ``ListingFacts`` from ``SourceImage``, ``DeadLetter``, class names (``str``) and
    ``ObjectClasses``; ``add`` changes this tally and returns it.

    Attributes:
        layout: The union of the inputs' layouts.
        declared: ``(id, name)`` of the object classes COCO files declare.
        images: ``SourceImage``s added (inputs that are not dead letters).
        present: Extra feature name -> ``SourceImage``s that give it.
    """

    inputs: int = 0
    classes: set[str] = field(default_factory=set)
    layout: RecordLayout = field(default_factory=RecordLayout)
    object_names: set[str] = field(default_factory=set)
    declared: set[tuple[int | None, str]] = field(default_factory=set)
    splits: set[str] = field(default_factory=set)
    images: int = 0
    present: collections.Counter = field(default_factory=collections.Counter)

    def add(self, item) -> "ListingTally":
        """Counts one listed item."""
        if isinstance(item, str):  # the class of an unreadable class folder: not an input
            self.classes.add(item)
            return self
        if isinstance(item, ObjectClasses):
            self.declared.update(item.classes)
            return self
        self.inputs += 1
        if isinstance(item, SourceImage):
            self.splits.add(item.split)
            self.classes.update(item.class_names())
            self.object_names.update(item.object_names())
            self.images += 1
            self.present.update(name for name, _, _ in item.features)
            layout = layout_of(item)
            if layout != self.layout:
                self.layout = merge_layouts((self.layout, layout))
        return self

    @classmethod
    def merged(cls, tallies: Iterable["ListingTally"]) -> "ListingTally":
        """One tally of what all of ``tallies`` gathered."""
        tallies = list(tallies)
        return cls(sum(t.inputs for t in tallies), set().union(*(t.classes for t in tallies)),
                   merge_layouts(t.layout for t in tallies), set().union(*(t.object_names for t in tallies)),
                   set().union(*(t.declared for t in tallies)), set().union(*(t.splits for t in tallies)),
                   sum(t.images for t in tallies), sum((t.present for t in tallies), collections.Counter()))

    def facts(self, multi_label: bool = False, label_offset: int | None = None,
              fixed: Sequence[str] | None = None, boxes_outside: str = "skip",
              declared: Mapping[str, str] | None = None) -> ListingFacts:
        """The facts gathered, with the build's flags: ``--multi_label``, ``--label_offset`` (None:
        ``DEFAULT_OBJECT_OFFSET``), ``--class_names``/``--labels_file``, ``--boxes_outside`` and the
        ``--feature`` types.

        Raises:
            UsageError: Without ``fixed``, labels that ``class_labels.class_list`` refuses.
        """
        offset = DEFAULT_OBJECT_OFFSET if label_offset is None else label_offset
        objects = object_label_map(self.object_names, self.declared, offset, fixed) if (
            self.layout.objects or self.declared) else ()
        classes = tuple(fixed) if fixed is not None else class_list(self.classes, self.inputs)
        layout = with_optional_features(self.layout, self.present, self.images, declared)
        layout = replace(layout, multi_label=layout.multi_label or multi_label, label_offset=offset,
                         object_labels=objects, boxes_outside=boxes_outside)
        return ListingFacts(self.inputs, classes, layout, tuple(sorted(self.splits)))


def appended_classes(published: Sequence[str], listed: Iterable[str]) -> list[str]:
    """The class list of a set that new inputs are appended to: the published classes keep their
    indexes, new ones follow, sorted; a set of indices ``0`` to ``k`` grows to the largest new index.

    Raises:
        UsageError: New inputs name classes by text while the set's are indices, or name a class with
            other white space around it than the set (``class_labels.refuse_white_space_twins``).
    """
    known = set(published)
    new = {name for name in listed if name not in known}
    refuse_white_space_twins(known | new)
    if published and all(name == str(i) for i, name in enumerate(published)) and new:
        words = sorted(name for name in new if not is_index(name))
        if words:
            raise UsageError(f"--append: the set's classes are indices 0 to {len(published) - 1} (integer labels); "
                             f"the new inputs name a class {words[0]!r}: label them by index")
        top = max(len(published) - 1, *(int(name) for name in new))
        return [str(i) for i in range(top + 1)]
    return list(published) + sorted(new)
