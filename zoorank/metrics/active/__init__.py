"""Active model selection: which image to label next and which model is best given the labels so
far — CODA (``coda``, ``coda_eig``, ``coda_weighted``), the kNN committee on embeddings
(``knn_committee``), p(best | labels) (``label_posterior``) and the baselines CODA is measured
against (``model_selection``). Pure functions on arrays; :mod:`zoorank.labels` orchestrates them.
"""
