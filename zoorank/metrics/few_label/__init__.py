"""Metrics that read embeddings and labels: the label oracle (kNN accuracy, the linear probe,
recall@1, R-AUROC, few-label kNN: ``label_oracle``), the loss-data curve and its costs (SDL, εSC,
MDL), and the few-label transferability scores (``logme``, ``h_score``, ``nleep``, ``gbc``,
``sfda_etran``, ``ncti``). A new module here is found without an import line
(:mod:`zoorank.metrics._discover`).
"""
