"""What the whole listing of a build's inputs says, known before any image is read.

``ListingTally`` gathers it one listed item at a time (a combine's
accumulator): the number of inputs, the class names and the record layout.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Sequence

from transforms.images.annotations import RecordLayout, layout_of, merge_layouts
from transforms.images.items import SourceImage

__all__ = ["ListingFacts", "ListingTally", "appended_classes"]


@dataclass(frozen=True)
class ListingFacts:
    """What the whole listing says, known before any image is read.

    Attributes:
        inputs: Inputs listed: files and manifest rows, and the listing's dead
            letters (an unreadable folder is one input).
        classes: Class names in index order (sorted): those of the listed
            inputs and of unreadable class folders. When every class is an
            integer class index of a container input (a WebDataset ``cls``, a
            Parquet label), the names are ``0`` to the largest index, in
            numeric order, so that each index stays its own.
        layout: The ``RecordLayout`` every record follows.
    """

    inputs: int
    classes: tuple[str, ...]
    layout: RecordLayout


@dataclass
class ListingTally:
    """Gathers ``ListingFacts`` from ``SourceImage``, ``DeadLetter`` and class names (``str``).

    ``add`` changes this tally and returns it. A class name is that of an
    unreadable class folder: it stays in the class list but is not an input.

    Attributes:
        inputs: Inputs added.
        classes: Class names seen.
        layout: The union of the inputs' layouts.
        numbered: The largest integer class index of a container input, or -1.
    """

    inputs: int = 0
    classes: set[str] = field(default_factory=set)
    layout: RecordLayout = field(default_factory=RecordLayout)
    numbered: int = -1

    def add(self, item) -> "ListingTally":
        """Counts one listed item."""
        if isinstance(item, str):  # the class of an unreadable class folder: not an input
            self.classes.add(item)
            return self
        self.inputs += 1
        if isinstance(item, SourceImage):
            member = item.member
            if member is not None and member.numbered:
                self.numbered = max(self.numbered, int(item.label))
                self.classes.update(box.label for box in item.objects or ())
            else:
                self.classes.update(item.class_names())
            layout = layout_of(item)
            if layout != self.layout:
                self.layout = merge_layouts((self.layout, layout))
        return self

    @classmethod
    def merged(cls, tallies: Iterable["ListingTally"]) -> "ListingTally":
        """One tally of what all of ``tallies`` gathered."""
        tallies = list(tallies)
        return cls(sum(t.inputs for t in tallies), set().union(*(t.classes for t in tallies)),
                   merge_layouts(t.layout for t in tallies), max((t.numbered for t in tallies), default=-1))

    def facts(self, multi_label: bool = False, label_offset: int = 0) -> ListingFacts:
        """The facts gathered, with the build's ``--multi_label`` and ``--label_offset``."""
        numbers = [str(i) for i in range(self.numbered + 1)]
        classes = tuple(sorted(self.classes | set(numbers))) if self.classes else tuple(numbers)
        return ListingFacts(self.inputs, classes, self.layout.with_flags(multi_label, label_offset))


def appended_classes(published: Sequence[str], listed: Iterable[str]) -> list[str]:
    """The class list of a set that new inputs are appended to.

    The published classes keep their indexes (records already written hold
    them); classes only the new inputs have follow, sorted.
    """
    known = set(published)
    return list(published) + sorted({name for name in listed if name not in known})
