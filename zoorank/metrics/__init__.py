"""Label-free metrics and their label oracle: pure functions on arrays.

Every function takes NumPy arrays or torch tensors (any float dtype, any device), validates them
through :func:`zoorank.metrics._checks.check_array`, and returns a Python float or a NumPy array.
Nothing here reads files or starts Ray. Each docstring states its convention and defaults, with
the paper they come from.

The metrics stand in wings by what they read: ``label_free/`` (embeddings only), ``heads/``
(a classifier's logits), ``few_label/`` (embeddings and a few labels, and the label oracle) and
``active/`` (which image to label next). The machinery sits at the top: the registry, the input
checks, the ``score:`` options, the per-model suite and the choice of the primary metric.

Importing this package imports every family module of the wings, so every metric is registered in
:mod:`zoorank.metrics.registry` (each family module registers its metrics beside their functions),
and every registered metric's function is exported here.
"""

from zoorank.metrics._discover import discover_families, metric_functions

# Every family module of the wings registers its metrics at import: import them all (in the order of
# ``zoorank.metrics._discover.ORDER``, then any other family module found in a wing). A new family
# module needs no line here.
FAMILIES: tuple[str, ...] = discover_families()

# The public functions of today's families (explicit, for readers and static tools).
# ruff: noqa: E402
from zoorank.metrics._checks import DegenerateInputWarning
from zoorank.metrics.few_label.gbc import gbc
from zoorank.metrics.few_label.h_score import h_score
from zoorank.metrics.few_label.logme import logme
from zoorank.metrics.few_label.loss_data import loss_data_curve
from zoorank.metrics.few_label.loss_data_costs import esc, mdl, sdl
from zoorank.metrics.few_label.ncti import ncti, ncti_combine
from zoorank.metrics.few_label.nleep import nleep
from zoorank.metrics.few_label.oracle_metrics import (
    knn_accuracy,
    knn_few_label,
    linear_probe_accuracy,
    r_auroc,
    recall_at_1,
)
from zoorank.metrics.few_label.sfda_etran import (
    etran,
    etran_combine,
    etran_energy,
    minmax_across_zoo,
    sfda,
)
from zoorank.metrics.heads.classifier import (
    atc_accuracy,
    average_confidence,
    consensus_agreement,
    cot_accuracy,
    dawid_skene_accuracy,
    doc_accuracy,
    nuclear_norm_accuracy,
    softmax,
)
from zoorank.metrics.label_free.alpha_req import alpha_req
from zoorank.metrics.label_free.clid import clid, cluster_learnability
from zoorank.metrics.label_free.coding_rate import coding_rate, coding_rate_reduction
from zoorank.metrics.label_free.collapse import duplicate_fraction, numerical_rank
from zoorank.metrics.label_free.geometry import alignment, mle_id, twonn_id, uniformity
from zoorank.metrics.label_free.lidar import lidar
from zoorank.metrics.label_free.rankme import rankme
from zoorank.metrics.label_free.reliability import (
    embedding_norm,
    feature_variance,
    mean_knn_distance,
    neighborhood_consistency,
)

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
    "etran_combine",
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
    "minmax_across_zoo",
    "mle_id",
    "ncti",
    "ncti_combine",
    "neighborhood_consistency",
    "nleep",
    "nuclear_norm_accuracy",
    "numerical_rank",
    "r_auroc",
    "rankme",
    "recall_at_1",
    "sdl",
    "sfda",
    "softmax",
    "twonn_id",
    "uniformity",
]

# The functions of metrics registered by family modules not listed above, exported as well.
for _name, _value in metric_functions().items():
    if _name not in globals():
        globals()[_name] = _value
        __all__.append(_name)
del _name, _value
