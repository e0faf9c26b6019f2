"""Unique and debounced publishes (docs/control.md): at most one message per key.

- :mod:`.store`: the key store's protocol, the debounce decision (pure), and where an
  app's store becomes its key store;
- :mod:`.keys_pg`, :mod:`.keys_redis`: the two key stores, beside the app's others;
- :mod:`.steps`: the publish steps ``unique`` and ``debounce``;
- :mod:`.superseded`: the delivery stage that acks a superseded debounced message;
- :mod:`.setup`: what ``App(debounce=...)`` and the app's store add to an app;
- :mod:`.release`: keys freed when their dead letter is purged.
"""
