"""The ``budget`` command: entry point (:mod:`.main`), argument grammar (:mod:`.args`),
targets (:mod:`.targets`), plots (:mod:`.plots`)."""

from .main import main

__all__ = ["main"]
