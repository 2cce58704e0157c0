"""The schema of ``decision.json``: every key, its type and meaning, in one place.

:func:`zoorank.decide.verdict.write_decision` checks a document against it before writing, and
the reference page ``docs/reference/decision-json.md`` is generated from it
(``docs/_hooks/zoorank_docs.py``), so a documented field and a written one cannot differ.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: (section title, introduction, rows of (dotted key, type, meaning), text after the table)
SECTIONS: tuple[tuple[str, str, tuple[tuple[str, str, str], ...], str], ...] = (
    ('Top-level keys',
     '',
     (
         ('schema_version', 'integer',
          "The schema's version: `1`."),
         ('zoorank_version', 'string',
          'The zoorank version that wrote the file.'),
         ('created', 'string',
          'When RANK wrote it: UTC, ISO 8601 (`2026-11-29T03:05:13+00:00`).'),
         ('store', 'string',
          "The store's path or URI, credentials removed."),
         ('leaderboard_fingerprint', 'string',
          ('Fingerprint of the metric rows and rank settings the leaderboard was built '
           "from; equal to the leaderboard's `metrics_fingerprint` setting when the file "
           'belongs to the current leaderboard.')),
         ('pick', 'object or null',
          'The model to ship (below); null when no model could be ranked.'),
         ('verdict', 'object',
          ('The model to take and on what grounds (below): after `zoorank label`, the few-'
           'label pick first with the label-free pick beside it.')),
         ('counts', 'object',
          'Models configured (after globs), ranked and failed (below).'),
         ('failed', 'list of objects',
          ('Every (model, dataset) that failed or is missing, with its reason (below); '
           '`[]` when none.')),
         ('shortlist', 'object',
          "The models to read first and the rule's measured record (below)."),
         ('expected_regret_pp', 'object',
          "The pick's measured regret on held-out validation zoos (below)."),
         ('record', 'object or null',
          ('The measured record of the metric that orders this kind of board, from the '
           "calibration record (below): held-out units with their n, the pick's regret on "
           'them beside the all-unit figures, the baselines, `guaranteed`; null when no '
           'record covers the board.')),
         ('disagreement', 'string',
          ('One line: how many label-free metrics put the pick first, how many a '
           "shortlisted model, and their concordance (Kendall's W).")),
         ('next_step', 'object or null',
          'The labels to ask for next (below); null when no model could be ranked.'),
         ('top_set', 'object',
          ('The Model Confidence Set of the metric that orders the board (below): a '
           'detail, not the recommendation.')),
         ('few_label', 'object',
          ('Per dataset, the few-label pick after `zoorank label` (below); `{}` before any'
           ' label.')),
         ('caveats', 'list of strings',
          ("Every caveat of the verdict, one sentence or paragraph each: the metric's "
           'record against labels and where it is weak, the top set and its measured '
           "level, health flags, the metrics' consensus, the label oracle's own top set, "
           'the width confound, confounds a prior explains, a zoo of a kind no validation '
           'zoo covers, flagged models the pick passed over.')),
     ),
     ''),
    ('`pick`',
     ('The first model of the leaderboard (sorted by `rank`) without a health flag. When '
      'every ranked model carries a flag, the first without a blocking flag (`non_finite`,'
      ' `collapsed`, `dim_collapsed`); `caveats` then names the flagged models ranked '
      'above it.'),
     (
         ('pick.model_id', 'string',
          "The model's id, as in `leaderboard.csv`."),
         ('pick.checkpoint', 'string or null',
          ("The checkpoint file (path or URI, redacted) of the model's zoo entry; null for"
           ' a model without a checkpoint file (a timm or transformers model by name, a '
           'python model without weights).')),
         ('pick.metric', 'string or null',
          ("The metric that orders the board on `pick.dataset` (the heads' estimated "
           'accuracy for a classifier on a board that mixes heads and encoders).')),
         ('pick.value', 'number or null',
          "The pick's value of `pick.metric` on `pick.dataset`."),
         ('pick.dataset', 'string or null',
          'The first dataset (config order) on which the pick has a value.'),
         ('pick.rank', 'number or null',
          "The pick's place on the board (1 = best; ties averaged)."),
         ('pick.source', 'string or null',
          "The zoo entry's `source` (`timm`, `transformers`, `torchscript`, `python`)."),
         ('pick.name', 'string or null',
          ("The zoo entry's `name` (architecture, directory or `module:function`), "
           'redacted.')),
         ('pick.signal', 'string or null',
          "What ranked it: `embedding`, or `head` (its classifier's estimated accuracy)."),
         ('pick.values', 'object',
          ("Per dataset: `{metric, value}`, the pick's value of the metric that orders "
           'that dataset.')),
     ),
     ''),
    ('`verdict`',
     '',
     (
         ('verdict.model_id', 'string or null',
          ('The model to take: the few-label pick after `zoorank label`, else the label-'
           'free pick.')),
         ('verdict.basis', 'string',
          '`labels` (the few-label pick) or `label-free`.'),
         ('verdict.p_best', 'number or null',
          "The few-label pick's p(best | labels); null for a label-free verdict."),
         ('verdict.labels', 'integer or null',
          'Labels the few-label pick rests on.'),
         ('verdict.dataset', 'string or null',
          'The dataset the verdict is about.'),
         ('verdict.label_free', 'string or null',
          'The label-free pick (`pick.model_id`), shown beside the few-label one.'),
     ),
     ''),
    ('`counts`',
     '',
     (
         ('counts.configured', 'integer',
          'Models the config names, each glob expanded.'),
         ('counts.ranked', 'integer',
          'Models with a rank on the board.'),
         ('counts.failed', 'integer',
          ('Configured models ranked nowhere, each with entries in `failed`. `zoorank run '
           '--strict` exits 1 when it is not 0.')),
     ),
     ''),
    ('`failed`',
     'A list, one object per (model, dataset) entry that failed or is missing, sorted:',
     (
         ('failed.model_id', 'string',
          "The model's id."),
         ('failed.dataset', 'string or null',
          'The dataset.'),
         ('failed.stage', 'string or null',
          'Where it failed: `load`, `embed`, `score` or `oracle`.'),
         ('failed.reason', 'string',
          'The reason, as recorded (credentials removed).'),
     ),
     ''),
    ('`record`',
     ('The entry of the calibration record (`zoorank calibrate`, or the one zoorank ships)'
      ' for this kind of board, with its protocol by unit: a unit is a set of checkpoints '
      "trained independently of every other unit's."),
     (
         ('record.metric', 'string or null',
          'The label-free metric the protocol chose (leave one unit out).'),
         ('record.candidates', 'list of strings',
          'The candidates it chose among, best first.'),
         ('record.shortlist_fraction', 'number',
          "The shortlist's share of the board."),
         ('record.conformal', 'object',
          ('The split-conformal choice of that share: `alpha`, `max_fraction`, `n`, '
           '`order_statistic`, `guaranteed`.')),
         ('record.units', 'object',
          'The calibration units: `n`, `names`.'),
         ('record.held_out_units', 'object',
          ('The held-out units: `n`, `hits`, `names`, `hit_rate`, `cp_lower_90` '
           '(Clopper–Pearson 90% lower bound), `wilson_90`, `protocol`.')),
         ('record.regret_pp', 'object',
          ("The pick's regret in pp: `held_out` and `all_units`, each `{median, p90, mean,"
           ' n}`.')),
         ('record.baselines', 'object',
          ('The same figures for a random pick, the longest-trained (name and metadata), '
           'the lowest final training loss and the best single metric chosen by leave-one-'
           'unit-out.')),
         ('record.paired', 'object',
          ("Per baseline, the pick's mean paired difference in pp with a bootstrap "
           'interval over units.')),
         ('record.guaranteed', 'boolean',
          ('Whether the shortlist carries the split-conformal guarantee; false when the '
           'units are too few or the share is capped.')),
         ('record.statement', 'string',
          "The record in one sentence (the card's)."),
         ('record.source', 'string',
          "The record's file, or `built-in`."),
         ('record.board', 'string',
          "The record's entry used (`encoders`, `heads`, or `<board>/<kind>`)."),
     ),
     ''),
    ('`shortlist`',
     ('The set a user reads first: the rule that chooses it was measured on held-out '
      "validation zoos (how often it held a model within 0.5 pp of the labels' most "
      'accurate one). Until that record exists the figures are null and the card says "not'
      ' measured yet".'),
     (
         ('shortlist.models', 'list of strings',
          'The shortlisted model ids, best first.'),
         ('shortlist.metric', 'string or null',
          "The metric the rule reads (the board's order)."),
         ('shortlist.rule', 'object',
          ('The rule, machine-readable: `kind` and its parameters (e.g. `{"kind": '
           '"rank_fraction", "fraction": 0.25}`).')),
         ('shortlist.text', 'string',
          'The rule in words.'),
         ('shortlist.hits', 'integer or null',
          ("Held-out units (or zoos) on which the rule's set held a model within 0.5 pp of"
           ' the best; calibration zoos never count.')),
         ('shortlist.zoos', 'integer or null',
          'Held-out units (or zoos) the record was measured on.'),
         ('shortlist.hit_rate', 'number or null',
          '`hits / zoos`.'),
         ('shortlist.mean_size', 'number or null',
          'Mean number of models in the set on those zoos.'),
         ('shortlist.mean_size_fraction', 'number or null',
          'Mean share of the zoo in the set.'),
         ('shortlist.held_out_zoos', 'list of strings',
          ('The names of those held-out units or zoos, kept out of every choice of the '
           'rule.')),
         ('shortlist.all_hits', 'integer or null',
          ('Hits over every validation zoo, calibration zoos included (for comparison '
           'only).')),
         ('shortlist.all_zoos', 'integer or null',
          'Every validation zoo of the record, calibration zoos included.'),
         ('shortlist.pick_regret_pp', 'object',
          'Same as `expected_regret_pp`.'),
         ('shortlist.kind', 'string or null',
          ('The kind of zoo this board was matched to (SSL encoders, supervised '
           'classifiers, ...).')),
         ('shortlist.kind_covered', 'boolean or null',
          'Whether a validation zoo of that kind exists.'),
         ('shortlist.coverage_note', 'string or null',
          'One line when no validation zoo covers this kind of zoo.'),
     ),
     ''),
    ('`expected_regret_pp`',
     '',
     (
         ('expected_regret_pp.median', 'number or null',
          ("Median, over held-out validation zoos, of the labels' best accuracy minus the "
           "pick's (percentage points).")),
         ('expected_regret_pp.p90', 'number or null',
          'Its 90th percentile.'),
         ('expected_regret_pp.zoos', 'integer or null',
          'The number of held-out zoos behind both.'),
     ),
     ''),
    ('`next_step`',
     ('Ask for labels: `zoorank ask CONFIG --budget N`, with N the labels that settled the'
      " pick in the project's measurements (`benchmarks/results/head_stopping.md` for "
      'classifier zoos, `benchmarks/results/active_labels.md` for embedding zoos), less '
      'the labels already given back, and never more than the images left without a label:'
      " where every image of the pick's dataset already has one (a labelled test set, "
      "scikit-learn's digits), there is nothing to ask and `command` is null. The command "
      "names the run config's path as you typed it to `zoorank run`, `rank`, `report` or "
      '`label` (or gave to `zoorank.run`); `CONFIG` stands for it where the path is not '
      'known (a config built in Python).'),
     (
         ('next_step.command', 'string or null',
          ('The command to run; null when the measured budget is spent or every image '
           'already has a label.')),
         ('next_step.budget', 'integer or null',
          'N, the images to label.'),
         ('next_step.basis', 'string',
          'What N rests on, with its figures.'),
         ('next_step.short', 'string',
          "The basis in a few words (the console's)."),
         ('next_step.kind', 'string',
          '`classifier` (the pick is ranked by its head) or `encoder`.'),
         ('next_step.source', 'string',
          'The results file the figure comes from.'),
         ('next_step.measured_budget', 'integer',
          'The measured labels-to-settle for this kind of zoo.'),
         ('next_step.labelled', 'integer',
          "Labels already given back on the pick's dataset."),
         ('next_step.config', 'string or null',
          'The config path the command names; null when not known.'),
         ('next_step.unlabelled', 'integer or null',
          ("Images of the pick's dataset without a label when RANK ran (the most `zoorank "
           'ask` can ask for: N never exceeds it, and at 0 there is no command); null when'
           ' not known.')),
     ),
     ''),
    ('`top_set`',
     '',
     (
         ('top_set.models', 'list of strings',
          ('The models the ordering metric cannot tell apart from its best under '
           'resampling of the evaluation images.')),
         ('top_set.size', 'integer',
          'Their number.'),
         ('top_set.of', 'integer',
          'Models on the board.'),
         ('top_set.metric', 'string or null',
          'The metric that orders the board.'),
         ('top_set.level', 'string',
          ('The level to read it at: the measured coverage (e.g. `94%`) at the settings it'
           ' was measured at, else `nominal 95%`.')),
         ('top_set.nominal', 'number or null',
          'The configured confidence (`rank.confidence`).'),
         ('top_set.rule', 'string or null',
          '`mcs`, or the point rule used without resampled rows.'),
         ('top_set.sentence', 'string',
          'What the set guarantees, and its measured level.'),
     ),
     ''),
    ('`few_label`',
     'Written by `zoorank label` for the dataset it labelled (`few_label.<dataset>`):',
     (
         ('few_label.<dataset>.model_id', 'string',
          'The few-label pick: the most probable best model given the labels.'),
         ('few_label.<dataset>.p_best', 'number',
          'Its p(best | labels).'),
         ('few_label.<dataset>.labels', 'integer',
          'Labels it rests on.'),
         ('few_label.<dataset>.updated', 'string',
          'When it was recorded (UTC, ISO 8601).'),
     ),
     ("`zoorank label` adds more keys (the posterior's name, the stopping rule's verdict, "
      '...); see [the few-label pick](../concepts/few-label-pick.md).')),
)


def _tree() -> dict[str, set[str]]:
    """'' → the top-level keys, 'pick' → the keys of ``pick``, ... (``failed`` describes the
    objects of its list; ``few_label.<dataset>`` rows are left out: the datasets are the run's)."""
    keys: dict[str, set[str]] = {"": set()}
    for _, _, rows, _ in SECTIONS:
        for key, _, _ in rows:
            if "<dataset>" in key:
                continue
            parent, _, leaf = key.rpartition(".")
            keys.setdefault(parent, set()).add(leaf)
    return keys


#: the documented keys by parent ('' for the top level)
KEYS: dict[str, set[str]] = _tree()
#: the keys whose values are objects (or, for ``failed``, lists of objects) with keys of their own
NESTED: tuple[str, ...] = tuple(k for k in KEYS if k and k not in ("record",))


def check(doc: Mapping[str, Any]) -> None:
    """``ValueError`` naming the keys where ``doc`` and the schema differ: a decision.json is only
    written with exactly the documented top-level keys, and no undocumented key inside an object
    (``record``'s own keys may grow; a null object is fine)."""
    problems = []
    if set(doc) != KEYS[""]:
        problems.append(f"top level: {sorted(set(doc) ^ KEYS[''])}")
    for parent in NESTED:
        value = doc.get(parent)
        for item in (value if isinstance(value, list) else [value]):
            if isinstance(item, Mapping) and set(item) - KEYS[parent]:
                problems.append(f"{parent}: undocumented {sorted(set(item) - KEYS[parent])}")
    if problems:
        raise ValueError("decision.json differs from its schema (zoorank/decide/decision_schema.py): "
                         + "; ".join(problems))


def reference() -> str:
    """The reference page's generated part: one section per object, one table row per key."""
    out = []
    for title, intro, rows, after in SECTIONS:
        out += [f"## {title}", ""]
        out += [intro, ""] if intro else []
        out += ["| key | type | meaning |", "|---|---|---|"]
        out += [f"| `{k}` | {t} | {m.replace('|', chr(92) + '|')} |" for k, t, m in rows]
        out += ["", after, ""] if after else [""]
    return "\n".join(out)
