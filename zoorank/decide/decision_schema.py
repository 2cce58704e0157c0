"""The schema of ``decision.json`` (``schema_version`` 1), the one place its keys are defined.

:func:`zoorank.decide.verdict.build_decision` builds the document and validates it against
:class:`Decision` before it is written; ``docs/reference/decision-json.md`` is generated from these
models at build time (:func:`schema_tables`), so the page and the file cannot differ. Numbers are
exact here (the console, the card and ``leaderboard.md`` round them). A reader should ignore keys
it does not know.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Values(_Strict):
    metric: str = Field(description="The metric that orders that dataset.")
    value: float | None = Field(description="The pick's value of it.")


class Pick(_Strict):
    model_id: str = Field(description="The model's id, as in `leaderboard.csv`.")
    checkpoint: str | None = Field(description=(
        "The checkpoint file (path or URI, redacted) of the model's zoo entry; null for a model "
        "without a checkpoint file (a timm or transformers model by name, a python model "
        "without weights)."))
    metric: str | None = Field(description=(
        "The metric that orders the board on `pick.dataset` (the heads' estimated accuracy for "
        "a classifier on a board that mixes heads and encoders)."))
    value: float | None = Field(description="The pick's value of `pick.metric` on `pick.dataset`.")
    dataset: str | None = Field(description=(
        "The first dataset (config order) on which the pick has a value."))
    rank: float | None = Field(description="The pick's place on the board (1 = best; ties averaged).")
    source: str | None = Field(description=(
        "The zoo entry's `source` (`timm`, `transformers`, `torchscript`, `python`)."))
    name: str | None = Field(description=(
        "The zoo entry's `name` (architecture, directory or `module:function`), redacted."))
    signal: str | None = Field(description=(
        "What ranked it: `embedding`, or `head` (its classifier's estimated accuracy)."))
    values: dict[str, Values] = Field(description=(
        "Per dataset: `{metric, value}`, the pick's value of the metric that orders that dataset."))


class Regret(_Strict):
    median: float | None = Field(description=(
        "Median, over held-out zoos, of the labels' best accuracy minus the pick's (percentage "
        "points)."))
    p90: float | None = Field(description="Its 90th percentile.")
    zoos: int | None = Field(description="The number of held-out zoos behind both.")


class Shortlist(_Strict):
    models: list[str] = Field(description="The shortlisted model ids, best first.")
    metric: str | None = Field(description="The metric the rule reads (the board's order).")
    rule: dict[str, Any] = Field(description=(
        "The rule, machine-readable: `kind` and its parameters (e.g. "
        '`{"kind": "rank_fraction", "fraction": 0.25}`).'))
    text: str = Field(description="The rule in words.")
    hits: int | None = Field(description=(
        "Held-out zoos (or units) on which the rule's set held a model within 0.5 pp of the "
        "best: the one look at zoos kept out of every choice."))
    zoos: int | None = Field(description="Held-out zoos (or units) of that look.")
    hit_rate: float | None = Field(description="`hits / zoos`.")
    mean_size: float | None = Field(description="Mean number of models in the set on the zoos.")
    mean_size_fraction: float | None = Field(description="Mean share of the zoo in the set.")
    held_out_zoos: list[str] | None = Field(description=(
        "The names of the held-out zoos (or units) of that look."))
    pick_regret_pp: Regret = Field(description="Same as `expected_regret_pp`.")
    kind: str | None = Field(description=(
        "The kind of zoo this board was matched to: `SSL encoders`, `autoencoders`, `supervised "
        "classifiers`, `image encoders` (no finer kind), or `supervised classifiers and image "
        "encoders` (a board that mixes them)."))
    kind_covered: bool | None = Field(description="Whether a validation zoo of that kind exists.")
    coverage_note: str | None = Field(description=(
        "One line when no validation zoo covers this kind of zoo, or when the record carries no "
        "guarantee."))


class Summary(_Strict):
    median: float | None = Field(description="Median regret (pp).")
    p90: float | None = Field(description="Its 90th percentile (pp).")
    mean: float | None = Field(description="Mean regret (pp).")
    n: int = Field(description="Units behind the figures.")


class Units(_Strict):
    n: int = Field(description="Calibration units.")
    names: list[str] = Field(description="Their names.")


class HeldOutUnits(_Strict):
    n: int = Field(description="Held-out units: built after the protocol was fixed.")
    hits: int = Field(description="Those on which the shortlist held a near-best model.")
    names: list[str] = Field(description="Their names.")
    hit_rate: float | None = Field(description="`hits / n`.")
    cp_lower_90: float | None = Field(description="Clopper–Pearson 90% lower bound of the rate.")
    wilson_90: list[float] | None = Field(description="Wilson 90% interval of the rate, over units.")
    protocol: str | None = Field(description="How the held-out units were chosen.")


class RegretBy(_Strict):
    held_out: Summary = Field(description="The pick's regret on held-out units.")
    all_units: Summary = Field(description="The same over every unit (calibration included).")


class Paired(_Strict):
    mean_diff_pp: float | None = Field(description="Mean of the pick's regret minus the baseline's.")
    interval_90: list[float] | None = Field(description="Its 90% bootstrap interval over units.")
    n: int = Field(description="Units paired.")


class Record(_Strict):
    metric: str | None = Field(description="The metric the record chose for this board kind.")
    candidates: list[str] = Field(description="The candidates it chose from, in order.")
    shortlist_fraction: float | None = Field(description="The shortlist's share of the board.")
    conformal: dict[str, Any] = Field(description="The split-conformal choice of the fraction.")
    units: Units = Field(description="The calibration units.")
    held_out_units: HeldOutUnits = Field(description="The held-out look, with its n.")
    regret_pp: RegretBy = Field(description="The pick's regret, held-out and over all units.")
    baselines: dict[str, Summary] = Field(description=(
        "Per baseline (`random`, `name_heuristic`: the longest-trained, `final_loss`, "
        "`loo_best_metric`), its regret on the held-out units."))
    paired: dict[str, Paired] = Field(description="The pick against each baseline, paired by unit.")
    guaranteed: bool = Field(description=(
        "Whether the number of units supports a split-conformal guarantee for the shortlist."))
    statement: str = Field(description="One plain sentence for the card.")
    source: str = Field(description="The record's path, or `built-in`.")
    board: str = Field(description="The record's entry used (`encoders`, `heads`, `heads/<kind>`).")


class Counts(_Strict):
    configured: int = Field(description="Models the config lists.")
    ranked: int = Field(description="Models with a place on the board.")
    failed: int = Field(description=(
        "Models with no place or a failed entry (a model that failed on one dataset but ranked "
        "on another counts as ranked and failed)."))


class Failed(_Strict):
    model_id: str = Field(description="The model.")
    dataset: str | None = Field(description="The dataset it failed or is missing on.")
    view: str | None = Field(description="The view (`default`, a crop ...).")
    stage: str | None = Field(description="The stage that failed (`embed`, `score`, `oracle` ...).")
    error: str | None = Field(description="The reason, as recorded.")


class NextStep(_Strict):
    command: str | None = Field(description=(
        "The command to run; null when the measured budget is spent or every image already has "
        "a label."))
    budget: int | None = Field(description="N, the images to label.")
    basis: str = Field(description="What N rests on, with its figures.")
    short: str = Field(description="The basis in a few words (the console's).")
    kind: str = Field(description="`classifier` (the pick is ranked by its head) or `encoder`.")
    source: str = Field(description="The results file the figure comes from.")
    measured_budget: int = Field(description="The measured labels-to-settle for this kind of zoo.")
    labelled: int = Field(description="Labels already given back on the pick's dataset.")
    config: str | None = Field(description="The config path the command names; null when not known.")
    unlabelled: int | None = Field(description=(
        "Images of the pick's dataset without a label when RANK ran (the most `zoorank ask` can "
        "ask for: N never exceeds it, and at 0 there is no command); null when not known."))


class TopSet(_Strict):
    models: list[str] = Field(description=(
        "The models the ordering metric cannot tell apart from its best under resampling of the "
        "evaluation images."))
    size: int = Field(description="Their number.")
    of: int = Field(description="Models on the board.")
    metric: str | None = Field(description="The metric that orders the board.")
    level: str = Field(description=(
        "The level to read it at: the measured coverage (e.g. `94%`) at the settings it was "
        "measured at, else `nominal 95%`."))
    nominal: float | None = Field(description="The configured confidence (`rank.confidence`).")
    rule: str | None = Field(description="`mcs`, or the point rule used without resampled rows.")
    sentence: str = Field(description="What the set guarantees, and its measured level.")


class FewLabel(BaseModel):
    model_config = ConfigDict(extra="allow")
    model_id: str = Field(description="The few-label pick: the most probable best model given the labels.")
    p_best: float | None = Field(description="Its p(best \\| labels).")
    labels: int = Field(description="Labels it rests on.")
    updated: str | None = Field(None, description="When it was recorded (UTC, ISO 8601).")


class Decision(_Strict):
    schema_version: int = Field(description="The schema's version: `1`.")
    zoorank_version: str = Field(description="The zoorank version that wrote the file.")
    created: str = Field(description="When RANK wrote it: UTC, ISO 8601 (`2026-11-29T03:05:13+00:00`).")
    store: str = Field(description="The store's path or URI, credentials removed.")
    leaderboard_fingerprint: str | None = Field(description=(
        "Fingerprint of the metric rows and rank settings the leaderboard was built from; equal "
        "to the leaderboard's `metrics_fingerprint` setting when the file belongs to the current "
        "leaderboard."))
    pick: Pick | None = Field(description=(
        "The label-free pick, the model to ship without labels; null when no model could be "
        "ranked. After `zoorank label` the few-label pick (`few_label`) comes first on the "
        "console and the card, this one beside it."))
    shortlist: Shortlist = Field(description="The models to read first and the rule's measured record.")
    expected_regret_pp: Regret = Field(description=(
        "The pick's measured regret on held-out validation zoos."))
    record: Record | None = Field(description=(
        "The calibration record's entry for this board's kind (`zoorank calibrate`, or the one "
        "zoorank ships): held-out units with their n, the pick's regret on them and on all "
        "units, the baselines; null without a record."))
    counts: Counts = Field(description="How many models were configured, ranked and failed.")
    failed: list[Failed] = Field(description=(
        "Every failed or missing (model, dataset) entry with its stage and reason; `[]` when "
        "none (`run --strict` then exits 0)."))
    disagreement: str = Field(description=(
        "One line: how many label-free metrics put the pick first, how many a shortlisted "
        "model, and their concordance (Kendall's W)."))
    next_step: NextStep | None = Field(description=(
        "The labels to ask for next; null when no model could be ranked."))
    top_set: TopSet = Field(description=(
        "The Model Confidence Set of the metric that orders the board: a detail, not the "
        "recommendation."))
    few_label: dict[str, FewLabel] = Field(description=(
        "Per dataset, the few-label pick after `zoorank label`; `{}` before any label."))
    caveats: list[str] = Field(description="Every caveat of the verdict, one sentence or paragraph each.")


#: the object-valued keys and the models that document them (a dict of objects as `key.<name>`).
SECTIONS: dict[str, type[BaseModel]] = {
    "": Decision, "pick": Pick, "pick.values.<dataset>": Values, "shortlist": Shortlist,
    "expected_regret_pp": Regret, "record": Record, "record.units": Units,
    "record.held_out_units": HeldOutUnits, "record.regret_pp": RegretBy,
    "record.regret_pp.held_out": Summary, "record.regret_pp.all_units": Summary,
    "record.baselines.<baseline>": Summary,
    "record.paired.<baseline>": Paired, "counts": Counts, "failed[]": Failed,
    "next_step": NextStep, "top_set": TopSet, "few_label.<dataset>": FewLabel,
}


def validated(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` checked against :class:`Decision` (a ``pydantic.ValidationError`` names the key
    that differs); returned unchanged, so the JSON keeps every exact value."""
    Decision.model_validate(doc)
    return doc


def _type(annotation: Any) -> str:
    """A field's type in the page's words (``string or null``, ``list of objects`` ...)."""
    import types
    import typing

    args = typing.get_args(annotation)
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type(a) for a in args)
    if origin is list:
        inner = _type(args[0]) if args else "value"
        return f"list of {inner}s" if inner in ("string", "object", "number") else f"list of {inner}"
    if origin is dict or annotation is dict or (isinstance(annotation, type)
                                                and issubclass(annotation, BaseModel)):
        return "object"
    names = {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "null",
             Any: "any"}
    return names.get(annotation, str(annotation))


def schema_tables() -> str:
    """The reference tables of every section (markdown): key, type, meaning."""
    out = []
    for where, model in SECTIONS.items():
        title = "Top-level keys" if not where else f"`{where}`"
        out += [f"### {title}", "", "| key | type | meaning |", "|---|---|---|"]
        for name, field in model.model_fields.items():
            key = f"{where}.{name}" if where else name
            out.append(f"| `{key}` | {_type(field.annotation)} | {field.description} |")
        out.append("")
    return "\n".join(out)
