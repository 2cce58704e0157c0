"""A few labels, chosen well (issue 25): ``zoorank ask`` picks the images whose labels separate the
models that may be best, ``zoorank label`` takes the labels back into ``<store>/labels/``, and a
stopping rule says when there are enough.

Modules: :mod:`~zoorank.labels.pool` (a dataset's embeddings and known labels),
:mod:`~zoorank.labels.ask` (a round's files), :mod:`~zoorank.labels.table` (reading, checking and
merging label files), :mod:`~zoorank.labels.merge` (``zoorank label``),
:mod:`~zoorank.labels.stopping` (the stopping rule as data, the few-label pick),
:mod:`~zoorank.labels.head_predictions` (classifier zoos). The maths is
:mod:`zoorank.metrics.active.knn_committee` (embedding zoos), :mod:`zoorank.metrics.active.coda` (which
images a
classifier zoo asks) and :mod:`zoorank.metrics.active.label_posterior` (p(best | labels), the pick).
"""
