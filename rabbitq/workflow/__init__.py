"""Workflows: ``chain``, ``group`` and ``chord`` (docs/workflows.md).

``wire`` (pure: the headers a workflow travels in, ids, bounds), ``canvas`` (the objects
a producer publishes), ``chords`` (the chord store protocol), ``chords_pg`` and
``chords_redis`` (its stores), ``steps`` (the worker's side).
"""

from .canvas import Chain, Chord, Group, chain, chord, group

__all__ = ["Chain", "Chord", "Group", "chain", "chord", "group"]
