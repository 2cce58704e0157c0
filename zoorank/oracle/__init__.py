"""The label oracle, a shared layer below the stages: reads the catalog's labelled datasets, the
samples table and the clean embeddings shards; writes the ``oracle`` table (labelled metrics per
model and dataset); defines the ``resamples`` and ``health`` tables SCORE writes and RANK reads.

- :mod:`~zoorank.oracle.label_oracle`: one Ray task per model and dataset, rows committed in batches;
- :mod:`~zoorank.oracle.measures`: what a task measures (kNN / linear-probe accuracy, R@1, R-AUROC,
  the loss-data costs), on arrays;
- :mod:`~zoorank.oracle.budget`: the label-budget curve (how many labels settle the ranking);
- :mod:`~zoorank.oracle.resample`: the label-free suite on seeded folds (rank uncertainty) and
  embedding health.
"""
