"""DataError lives here, not in evaluator.data, so that modules data.py itself imports
(the kernel tables) can raise it without an import cycle."""
from __future__ import annotations

__all__ = ["DataError"]


class DataError(ValueError):
    """Malformed or missing ground truth; the message names the file and field."""
