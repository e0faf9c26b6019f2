"""Benchmarks: rabbitq against hand-written aio-pika baselines on the local broker.

Run ``python -m bench`` (``--help`` for options); see docs/benchmarks.md.
"""
