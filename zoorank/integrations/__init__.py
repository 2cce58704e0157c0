"""Where people train: a Ray Tune wrapper for a plain PyTorch loop and a Lightning callback.

Both score the user's model on a :class:`zoorank.probe.ProbeSet` with :func:`zoorank.probe.evaluate`
and, inside a Ray Tune trial, report the metrics with a checkpoint that ``zoorank run`` reads
(``backbone.safetensors``; :func:`zoorank.integrations.ray_tune.export_zoo` lists them in a
``zoo.yaml``).

Layer: beside :mod:`zoorank.probe` (imports probe, zoo, config, metrics; Ray and Lightning only
inside functions), so the TUNE stage can build on it.
"""
