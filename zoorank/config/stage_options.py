"""The sections of the stages: ``views:``, ``embed:``, ``score:``, ``oracle:`` and ``rank:``."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    Field,
    model_validator,
)

from zoorank.config.schema_base import (
    Name,
    Strict,
)
from zoorank.config.suggest import did_you_mean
from zoorank.metrics import registry
from zoorank.metrics.score_options import OPTIONS


class ViewSpec(Strict):
    """One view of the images (an entry of ``views:``): the clean view, or an augmentation."""

    name: Name
    """The view's name (a folder of the store; augmented metrics are reported as
    `<metric>@<view>`). Required."""
    recipe: str | None = None
    """The augmentation recipe: `clean` (no augmentation) or `simclr` (random resized crop, flip,
    colour jitter, grayscale, blur). Default: the view's name."""
    samples: int | None = Field(default=None, gt=0)
    """Augmented views: how many clean samples get views (a seeded subset shared by views with
    the same number). Default: every sample."""
    per_sample: int = Field(default=1, gt=0)
    """Augmented views: views per sample, q (LiDAR needs q >= 2). Default 1 (the clean view)."""

    @property
    def recipe_name(self) -> str:
        return self.recipe or self.name

    @property
    def is_clean(self) -> bool:
        return self.recipe_name == "clean"

    @model_validator(mode="after")
    def _augmented_views_need_q(self) -> ViewSpec:
        if not self.is_clean and self.per_sample < 2:
            raise ValueError("augmented views need per_sample >= 2 (LiDAR needs q >= 2 views)")
        return self


class EmbedOptions(Strict):
    """``embed:``: how the EMBED stage runs the models over the images."""

    batch_size: int = Field(default=64, gt=0)
    """Images per forward pass. Default 64."""
    models_per_actor: int | None = Field(default=None, gt=0)
    """Models one embedding task holds and runs on every batch it reads (one read, many models).
    Default: as many as fit in `actor_memory_gb`."""
    actor_memory_gb: float = Field(default=4.0, gt=0)
    """Memory budget of one embedding task's models, in GiB (each model's size estimated from
    its parameters); decides how many models share a task when `models_per_actor` is unset.
    Default 4.0."""
    num_actors: int | None = Field(default=None, gt=0)
    """Embedding tasks that run at once. Default: one per GPU on GPU; on CPU up to 4 sharing the
    cores."""
    num_cpus_per_actor: float = Field(default=0.5, gt=0)
    """CPUs Ray reserves for each embedding task (fractions share a core); on GPU also its torch
    threads (rounded down, at least 1). Default 0.5."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """`auto`: one GPU per embedding task when the cluster has GPUs or its autoscaler can add
    some, else the CPU. `cuda` waits for GPUs (`gpu_wait_seconds`). Default `auto`."""
    precision: Literal["auto", "fp32", "bf16", "fp16"] = "auto"
    """Forward precision. `auto`: fp32 on CPU; on GPU bf16 where the GPU supports it, else fp16
    (the manifest records what was used). Default `auto`."""
    gpu_wait_seconds: float = Field(default=600.0, gt=0)
    """With GPUs wanted and none in the cluster yet: seconds to wait for the autoscaler to add
    them before the run stops with a config error. Default 600."""
    allow_cpu_torch: bool = False
    """Run GPU-scheduled tasks on CPU torch where a worker has no CUDA (tests with fake GPU
    resources; also `ZOORANK_GPU_AS_CPU=1`). Never for real runs. Default `false`."""
    heads: bool = True
    """Keep classifier heads: each model's logits beside its features, from the same forward
    (see the models' `head`); `false` turns every head off. Default `true`."""


def _metric_option(name: str, **constraints: Any) -> Any:
    """A ``score:`` field for a metric option: its default (and meaning) from the registry."""
    opt = OPTIONS[name]
    default = list(opt.default) if isinstance(opt.default, tuple) else opt.default
    return Field(default=opt.default, description=f"{opt.doc}. Default {default}.", **constraints)


class ScoreOptions(Strict):
    """``score:``: how the SCORE stage computes the metrics. The metric options (declared beside
    their metrics in zoorank.metrics) take their defaults from the registry; this class adds their
    types and bounds."""

    max_samples: int | None = Field(default=None, gt=0)
    """Cap on the clean samples scored per model (a deterministic subset). Default: every
    sample."""
    lidar_delta: float = _metric_option("lidar_delta", ge=0)
    lidar_delta_mode: Literal["absolute", "relative"] = _metric_option("lidar_delta_mode")
    eps: float = _metric_option("eps", gt=0)
    alpha_fit_range: tuple[int, int] = _metric_option("alpha_fit_range")
    mle_k: int = _metric_option("mle_k", gt=1)
    cl_chunk_size: int = _metric_option("cl_chunk_size", gt=1)
    coding_rate_eps2: float = _metric_option("coding_rate_eps2", gt=0)
    nc_k: int = _metric_option("nc_k", gt=0)
    nc_reference_size: int = _metric_option("nc_reference_size", gt=1)
    nc_metric: Literal["cosine", "euclidean"] = _metric_option("nc_metric")
    num_cpus_per_actor: float = Field(default=0.5, gt=0)
    """CPUs Ray reserves for each scoring task (fractions share a core). Default 0.5."""
    resample_folds: int = Field(default=8, ge=0)
    """Rank uncertainty: every ranked metric is computed again on this many disjoint folds of
    the images, giving rank intervals, p(best) and the top set. 0 turns them off; 1 is refused.
    Default 8."""
    resample_fraction: float = Field(default=0.5, gt=0, le=1)
    """Share of the images the folds are dealt from (the fold bootstrap rescales the spread to
    the full sample, so a share below 1 trades interval precision for scoring time). In (0, 1].
    Default 0.5."""

    @model_validator(mode="after")
    def _folds(self) -> ScoreOptions:
        if self.resample_folds == 1:
            raise ValueError("resample_folds: use 0 (no rank intervals) or at least 2 folds")
        return self


class OracleSpec(Strict):
    """``oracle:``: label-based measures of each model, to check the label-free ranking against.
    Only datasets with labels get them; the label-free ranking never reads labels."""

    knn: bool = False
    """Weighted kNN accuracy on the oracle's test split. Default `false`."""
    knn_k: int = Field(default=20, gt=0)
    """kNN: neighbours k. Default 20."""
    knn_temperature: float = Field(default=0.07, gt=0)
    """kNN: temperature of the similarity weights. Default 0.07."""
    linear_probe: bool = False
    """Linear-probe (logistic regression) accuracy on the oracle's test split. Default `false`."""
    recall_at_1: bool = False
    """Recall@1 (the nearest neighbour has the same label). Default `false`."""
    r_auroc: bool = False
    """R-AUROC: how well each per-sample uncertainty (NC and its baselines) predicts a Recall@1
    error. Default `false`."""
    loss_data_curve: bool = False
    """The loss-data curve of a probe and its reducers (SDL, eSC, MDL). Default `false`."""
    sdl_eps: tuple[float, ...] = (0.5, 0.2)
    """Loss-data curve: the loss thresholds ε of SDL and eSC. Default [0.5, 0.2]."""
    loss_data_points: int = Field(default=8, gt=1)
    """Loss-data curve: training-set sizes, log-uniformly spaced. Default 8."""
    loss_data_seeds: int = Field(default=3, gt=0)
    """Loss-data curve: probe seeds per size. Default 3."""
    loss_data_steps: int | None = Field(default=None, gt=0)
    """Loss-data curve: optimiser updates per probe. Default: the probe's own."""
    test_fraction: float = Field(default=0.5, gt=0, lt=1)
    """Share of the labelled samples held out as the oracle's test split (stratified, seeded).
    In (0, 1). Default 0.5."""
    transferability: list[str] = []
    """Few-label transferability scores (`logme`, `h_score`, `nleep`, `gbc`, ...) and their
    label-budget curve: each score on seeded subsets of the train split with k labels per class,
    ranked against the kNN or linear-probe oracle (one of them must be on). Default: none."""
    labels_per_class: tuple[int, ...] = (5, 10, 25, 50, 100)
    """Label-budget curve: the labels per class k. Default [5, 10, 25, 50, 100]."""
    label_budget_seeds: int = Field(default=3, gt=0)
    """Label-budget curve: seeded subsets per k. Default 3."""

    @model_validator(mode="after")
    def _budget_needs_reference(self) -> OracleSpec:
        known = registry.few_label_scores()
        unknown = [t for t in self.transferability if t not in known]
        if unknown:
            raise ValueError(f"transferability: unknown score(s) {unknown}"
                             f"{did_you_mean(unknown[0], known)}; known: {list(known)}")
        if self.transferability and not (self.knn or self.linear_probe):
            raise ValueError("transferability: the label-budget curve is measured against the "
                             "kNN or linear-probe oracle; set knn: true or linear_probe: true")
        if any(k < 1 for k in self.labels_per_class):
            raise ValueError(f"labels_per_class: every entry must be >= 1, got "
                             f"{list(self.labels_per_class)}")
        return self


class RankOptions(Strict):
    """``rank:``: how the RANK stage orders the models."""

    aggregation: Literal["rank_product", "mean_rank", "borda"] = "rank_product"
    """How per-dataset ranks combine into one order: `rank_product` (weighted geometric mean),
    `mean_rank` (weighted mean) or `borda` (weighted Borda count). Default `rank_product`."""
    dataset_weights: dict[str, float] = Field(default_factory=dict)
    """Weight of each dataset in the aggregation, by name (non-negative; unnamed datasets weigh
    1). Default: equal weights."""
    primary_metric: str | None = None
    """The metric that orders the leaderboard; it must be a ranking metric this config computes.
    Default: per dataset, the first of the preference order that the config computes and that
    ranks (nearly) every model there."""
    classifier_metric: str | None = None
    """The label-free accuracy estimate that orders the models with a classifier head; DoC, ATC
    and COT need `source:`. Default: COT with `source:`, else the nuclear norm."""
    bootstrap: int = Field(default=1000, ge=0)
    """Bootstrap replicates of the metric-vs-oracle agreement's intervals (Kendall, Spearman,
    regret); 0 turns the intervals off. Default 1000."""
    top_k: int = Field(default=3, gt=0)
    """Agreement: the k of the top-k recall (how many of the oracle's top k the metric's top k
    holds). Default 3."""
    confidence: float = Field(default=0.95, gt=0, lt=1)
    """Level of the rank intervals (the share of fold-bootstrap replicates they cover) and of the
    top set (the Model Confidence Set at level 1 − confidence). In (0, 1). Default 0.95."""
    resamples: int = Field(default=1000, gt=0)
    """Fold-bootstrap replicates behind the rank intervals, p(best) and the top set.
    Default 1000."""
