"""Running work that can fail, under one policy: reads and writes nothing of the store.

- :mod:`~zoorank.tasks.runner`: the one task runner of every stage's Ray work (done, failed,
  crashed → split or rerun; Contract 6);
- :mod:`~zoorank.tasks.retry`: the one retry policy for transient errors (object-store reads and
  commits, starting Ray).

Imports nothing of zoorank, so every layer above the store may use it.
"""
