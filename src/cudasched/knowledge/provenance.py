"""Where the knowledge a decision rests on came from: which bundle (its version, the day its
newest fact was read, its digest), fetched from where, with which overlays on top.

Every :class:`~cudasched.knowledge.base.KnowledgeBase` carries one, so whatever holds the
knowledge can say how old it is: ``cudasched knowledge`` and ``report`` show it, the audit
reports knowledge older than a limit, and a follower of a published bundle says which one it
answers with. A knowledge base built from documents nobody described (the tests' planted
tables) has :data:`UNDESCRIBED`.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

__all__ = ["BUILT_IN", "UNDESCRIBED", "Provenance"]

#: The origin of the tables shipped inside cudasched.
BUILT_IN = "built-in"


@dataclass(frozen=True, slots=True)
class Provenance:
    """``version`` and ``date`` as the bundle states them (``date``: the day its newest fact
    was read; ``None`` when not known), ``digest`` the bundle's manifest digest (``""``: not
    a bundle), ``origin`` where it was read (:data:`BUILT_IN`, a registry reference, a path)
    and ``overlays`` the overlays merged on top, each as ``version (origin)``."""

    version: str
    date: datetime.date | None
    digest: str = ""
    origin: str = BUILT_IN
    overlays: tuple[str, ...] = ()

    def age_days(self, today: datetime.date) -> int | None:
        """Days from the bundle's date to ``today`` (``None`` when it has no date)."""
        return (today - self.date).days if self.date is not None else None

    def describe(self, today: datetime.date | None = None) -> str:
        """One line: ``knowledge 2026.08.17 of 2026-08-17 (112 days old), built-in``."""
        when = f" of {self.date.isoformat()}" if self.date is not None else ""
        age = self.age_days(today) if today is not None else None
        old = f" ({_days(age)} old)" if age is not None and age >= 0 else ""
        text = f"knowledge {self.version}{when}{old}, {self.origin}"
        if self.overlays:
            text += f", with overlay {', '.join(self.overlays)}"
        return text

    def to_dict(self, today: datetime.date | None = None) -> dict[str, object]:
        """The JSON form every ``-o json`` answer that names its knowledge gives."""
        return {
            "version": self.version,
            "date": self.date.isoformat() if self.date is not None else None,
            "ageDays": self.age_days(today) if today is not None else None,
            "digest": self.digest or None,
            "origin": self.origin,
            "overlays": list(self.overlays),
        }


def _days(count: int) -> str:
    return "1 day" if count == 1 else f"{count} days"


#: The provenance of a knowledge base built from documents that say nothing about themselves.
UNDESCRIBED = Provenance(version="undescribed", date=None, origin="documents")
