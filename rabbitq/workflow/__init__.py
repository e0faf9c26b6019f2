"""Workflows: ``chain``, ``group`` and ``chord`` (docs/workflows.md).

``wire`` (pure: the headers a workflow travels in, ids, bounds), ``canvas`` (the objects
a producer publishes), ``chords`` (the chord store protocol), ``chords_pg`` and
``chords_redis`` (its stores), ``steps`` (the worker's side). The package exports the
three functions (also ``from rabbitq import chain, group, chord``); the classes they
make live in ``canvas``.
"""

from .canvas import chain, chord, group

__all__ = ["chain", "chord", "group"]
