"""Runnable example services built on rabbitq; see examples/README.md.

Run them from the repository root, e.g. ``rabbitq worker examples.email_service:app``.
"""
