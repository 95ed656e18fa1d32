"""Who asks, as the manager sees them: a server token's scope reduced to what admission
needs (never the token itself). Plain data, for the manager and the faces that pass it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import attrs

__all__ = ["EVERYONE", "Tenant"]


def _every_owner(owner: str) -> bool:
    return True


@attrs.frozen
class Tenant:
    """Who asks for a session or an owner's deletion, as admission sees them: a server token's
    scope reduced to what the manager needs (never the token itself).

    A spawn evicts only ended sessions of owners it `sees`, and `max_sessions` (None: no
    bound of its own) counts the sessions of those owners; the owners it deletes are
    remembered under its `name`, so that deleting many owners pushes out only its own earlier
    deletions. `EVERYONE`, the default, is the library's view and the server's own token's."""

    name: str
    sees: Callable[[str], bool] = _every_owner
    max_sessions: int | None = None


EVERYONE: Final = Tenant("")
