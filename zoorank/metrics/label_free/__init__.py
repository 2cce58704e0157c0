"""Label-free metrics: read a model's embeddings only (clean or augmented views, or a seed ensemble).

Spectral (``rankme``, ``lidar``, ``alpha_req``, ``coding_rate``, their shared numerics in
``_spectrum``), geometry (intrinsic dimension, alignment, uniformity), cluster learnability and CLID
(``clid``), reliability (neighbourhood consistency, ``reliability``) and collapse diagnostics.
Each module registers its metrics beside their functions; a new module here is found without an
import line (:mod:`zoorank.metrics._discover`).
"""
