"""The label oracle, a shared layer below the stages: reads the catalog's labelled datasets, the
samples table and the clean embeddings shards; writes the ``oracle`` table (labelled metrics per
model and dataset) and the folds SCORE and RANK resample.

- :mod:`~zoorank.oracle.label_oracle`: kNN / linear-probe / loss-data accuracy per model, as Ray tasks;
- :mod:`~zoorank.oracle.budget`: the label-budget curve (how many labels settle the ranking);
- :mod:`~zoorank.oracle.resample`: the seeded fold resampling of the label-free suite.
"""
