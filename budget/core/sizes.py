"""Memory budgets: parse what users write, format what we print.

A budget is either a fraction ``b`` in [0, 1] of the saved-activation range (PyTorch's
``activation_memory_budget`` semantics) or an absolute size of saved activation memory
written with a unit ("512MiB", "2GB", "123456B"). Anything else is a ValueError that
says what is allowed; nothing is clamped or guessed.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

_UNITS = {
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
    "TIB": 2**40,
}
_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([A-Za-z]+)\s*$")

ALLOWED = (
    "a fraction in [0, 1] (e.g. 0.5) or an absolute size with a unit "
    "(e.g. '512MiB', '2GB', '1.5GiB', '123456B'; units: B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)"
)


@dataclass(frozen=True)
class MemoryBudget:
    """A validated budget: exactly one of ``fraction`` and ``nbytes`` is set."""

    fraction: float | None = None
    nbytes: int | None = None

    def __str__(self) -> str:
        if self.fraction is not None:
            return f"{self.fraction:g}"
        return format_bytes(self.nbytes or 0)

    def to_json(self) -> float | str:
        return self.fraction if self.fraction is not None else f"{self.nbytes}B"


def parse_budget(value: object) -> MemoryBudget:
    """Validate ``value`` and return a :class:`MemoryBudget`; raise ValueError otherwise."""
    if isinstance(value, MemoryBudget):
        return value
    if isinstance(value, bool):
        raise ValueError(f"memory budget must be {ALLOWED}; got the bool {value!r}")
    if isinstance(value, (int, float)):
        f = float(value)
        if math.isnan(f) or not 0.0 <= f <= 1.0 or (f == 0.0 and math.copysign(1, f) < 0):
            raise ValueError(f"memory budget must be {ALLOWED}; got {value!r}")
        return MemoryBudget(fraction=f)
    if isinstance(value, str):
        m = _SIZE_RE.match(value)
        if m is None:
            raise ValueError(f"memory budget must be {ALLOWED}; got {value!r}")
        number, unit = m.groups()
        scale = _UNITS.get(unit.upper())
        # "mb" is ambiguous with millibits; accept the common spellings only.
        if scale is None or unit not in {unit.upper(), unit.upper().replace("I", "i")}:
            raise ValueError(f"memory budget {value!r} has an unknown unit {unit!r}; {ALLOWED}")
        nbytes = float(number) * scale
        if scale == 1 and not float(number).is_integer():
            raise ValueError(f"memory budget {value!r}: a size in bytes must be whole")
        return MemoryBudget(nbytes=int(math.floor(nbytes)))
    raise ValueError(f"memory budget must be {ALLOWED}; got {type(value).__name__} {value!r}")


PEAK_ALLOWED = (
    "an absolute size with a unit (e.g. '6GiB', '512MiB', '2GB'): the most memory the "
    "training step may use at its peak"
)


def parse_peak_budget(value: object) -> int:
    """A peak memory budget in bytes; ValueError for anything but a size with a unit (a
    fraction has no meaning here: a fraction of what?)."""
    if isinstance(value, str):
        try:
            parsed = parse_budget(value)
        except ValueError:
            parsed = None
        if parsed is not None and parsed.nbytes is not None:
            return parsed.nbytes
    raise ValueError(f"peak memory budget must be {PEAK_ALLOWED}; got {value!r}")


def format_bytes(n: float) -> str:
    """Human-readable binary size: '36.00 MiB'. A unit is used from 1000 of the one below
    it ('0.99 MiB', not '1012.00 KiB'), so that a size up to 1000 GiB fits a table's
    10-character column."""
    n = float(n)
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= scale * 999.995 / 1024:  # what would print as 1000.00 of the unit below
            return f"{n / scale:.2f} {unit}"
    return f"{int(n)} B"
