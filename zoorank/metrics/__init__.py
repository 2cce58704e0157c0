"""Label-free metrics and their label oracle: pure functions on arrays.

Every function takes NumPy arrays or torch tensors (any float dtype, any device), validates them
through :func:`zoorank.metrics._checks.check_array`, and returns a Python float or a NumPy array.
Nothing here reads files or starts Ray. Each docstring states its convention and defaults, with
the paper they come from.

Importing this package imports every family module, so every metric is registered in
:mod:`zoorank.metrics.registry` (each family module registers its metrics beside their functions).
"""

# isort: off
# Registration order is the order of `zoorank metrics`, of a config's default `metrics:` and of the
# report's columns: spectral (rankme_family, lidar_scatter, spectrum_shape), geometry,
# learnability, reliability, collapse, suite (nc), then labels.
from zoorank.metrics import registry, rankme_family, lidar_scatter, spectrum_shape  # noqa: F401
from zoorank.metrics import geometry, learnability, reliability, collapse, suite  # noqa: F401
from zoorank.metrics import oracle, loss_data, loss_data_costs, transferability  # noqa: F401
from zoorank.metrics import discriminant, classifier  # noqa: F401
from zoorank.metrics import mst_id as _mst_id_family  # noqa: F401
# isort: on
from zoorank.metrics._checks import DegenerateInputWarning
from zoorank.metrics.classifier import (
    atc_accuracy,
    average_confidence,
    consensus_agreement,
    cot_accuracy,
    dawid_skene_accuracy,
    doc_accuracy,
    nuclear_norm_accuracy,
)
from zoorank.metrics.collapse import duplicate_fraction, numerical_rank
from zoorank.metrics.discriminant import etran, etran_energy, ncti, sfda
from zoorank.metrics.geometry import alignment, mle_id, twonn_id, uniformity
from zoorank.metrics.learnability import clid, cluster_learnability
from zoorank.metrics.lidar_scatter import lidar
from zoorank.metrics.loss_data import loss_data_curve
from zoorank.metrics.loss_data_costs import esc, mdl, sdl
from zoorank.metrics.mst_id import mst_id, mst_length
from zoorank.metrics.oracle import (
    knn_accuracy,
    knn_few_label,
    linear_probe_accuracy,
    r_auroc,
    recall_at_1,
)
from zoorank.metrics.rankme_family import rankme
from zoorank.metrics.reliability import (
    embedding_norm,
    feature_variance,
    mean_knn_distance,
    neighborhood_consistency,
)
from zoorank.metrics.spectrum_shape import alpha_req, coding_rate, coding_rate_reduction
from zoorank.metrics.transferability import gbc, h_score, logme, nleep

__all__ = [
    "DegenerateInputWarning",
    "alignment",
    "alpha_req",
    "atc_accuracy",
    "average_confidence",
    "clid",
    "cluster_learnability",
    "coding_rate",
    "coding_rate_reduction",
    "consensus_agreement",
    "cot_accuracy",
    "dawid_skene_accuracy",
    "doc_accuracy",
    "duplicate_fraction",
    "embedding_norm",
    "esc",
    "etran",
    "etran_energy",
    "feature_variance",
    "gbc",
    "h_score",
    "knn_accuracy",
    "knn_few_label",
    "lidar",
    "linear_probe_accuracy",
    "logme",
    "loss_data_curve",
    "mdl",
    "mean_knn_distance",
    "mle_id",
    "mst_id",
    "mst_length",
    "ncti",
    "neighborhood_consistency",
    "nleep",
    "nuclear_norm_accuracy",
    "numerical_rank",
    "r_auroc",
    "rankme",
    "recall_at_1",
    "sdl",
    "sfda",
    "twonn_id",
    "uniformity",
]
