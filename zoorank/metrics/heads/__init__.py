"""Label-free accuracy estimates of classifiers from their own logits (``classifier``): average
confidence, DoC, ATC, the nuclear norm, COT, agreement and Dawid–Skene over a zoo's predictions.
A new module here is found without an import line (:mod:`zoorank.metrics._discover`).
"""
