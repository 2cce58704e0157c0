"""What the decision adds to RANK and REPORT as the zoo grows: decision.json (the pick, the
shortlist, the disagreement line, the next step, the caveats) and the report's decision card.

On ``bench_rank``'s synthetic tables (n models, 7 label-free metrics, the kNN and linear-probe
oracle, fold and health rows, few-label cells), in one process per run:

1. RANK: ``zoorank.rank.write_rank_outputs`` on a fresh local store (decision.json included);
2. the decision alone on its outputs: ``build_decision`` (the shortlist, ``shortlist_for``,
   included) and ``write_decision``;
3. REPORT's page without the decision card: the sections ``run_report`` builds for this board
   (leaderboard, every model's rank overview, agreement, the per-dataset scatter plots and heat
   map, settings) rendered by ``render_page``;
4. the first screen, ``decision_section`` from the stored document and its rendering (the card,
   the caveats, the top set with its forest plot); and the card's own work timed directly: its
   context (``card_context``) and the section's rendering, without the forest plot and the
   labels' lines, which the first screen drew before the card existed.

Each figure is the best of ``--repeat`` calls; the done-when is "the shortlist and the decision
card add under 1 s to RANK/REPORT at 1,000 models": (2) + (4) against 1 s, beside (1) and (3).
Prints, never asserts::

    .venv/bin/python benchmarks/performance/bench_decision.py --models 100,1000
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import bench_rank  # noqa: E402  (its synthetic tables)
import harness  # noqa: E402
from harness import ratio, table, timed  # noqa: E402


def one_size(n: int, bootstrap: int, repeat: int) -> dict:
    from zoorank.config.loading import parse_config
    from zoorank.decide.leaderboard import leaderboard_headline, read_rank_outputs
    from zoorank.decide.verdict import build_decision, read_decision, write_decision
    from zoorank.rank import write_rank_outputs
    from zoorank.report import _dataset_sections
    from zoorank.report.decision_screen import card_context, decision_section
    from zoorank.report.page import Plot, Section, render_page, render_section
    from zoorank.report.plots import rank_overview_figure
    from zoorank.report.sections import agreement_section, leaderboard_section, settings_section
    from zoorank.store import Store

    t = bench_rank.tables(n)
    with tempfile.TemporaryDirectory(prefix="bench-decision-") as root:
        config = parse_config({
            "store": root, "seed": 0,
            "datasets": [{"name": bench_rank.DATASET, "source": "sklearn_digits"}],
            "models": [{"id": "bench", "source": "python", "name": "bench:unused"}],
            "metrics": bench_rank.METRICS, "oracle": {"knn": True, "linear_probe": True},
            "score": {"resample_folds": bench_rank.FOLDS},
            "rank": {"bootstrap": bootstrap, "resamples": bootstrap}})
        # zoo entries with a checkpoint each (the pick's path comes from its entry)
        models = [SimpleNamespace(model_id=m, family=("simclr", "vicreg")[i % 2], group=None,
                                  datasets=None,
                                  spec=SimpleNamespace(prior={"year": 2000 + i % 20},
                                                       checkpoint=f"/zoo/{m}/last.safetensors",
                                                       source="timm", name="resnet18"))
                  for i, m in enumerate(t["ids"])]
        store = Store(root)
        _, rank_s = timed(write_rank_outputs, config, store, models, t["metrics"], t["oracle"],
                          show=False, manifest=t["manifest"], folds=t["folds"],
                          health=t["health"])
        board, settings, written = read_rank_outputs(store)
        by_id = {m.model_id: m for m in models}

        def decision() -> dict:
            doc = build_decision(board, settings, by_id, store.name, read_decision(store))
            write_decision(store, doc)
            return doc

        doc, decision_s = timed(decision, repeat=repeat)
        agree = written["agreement"]
        agree = agree[agree["labels_per_class"].isna()]
        metrics, oracle = t["metrics"], t["oracle"][~t["oracle"]["metric"].str.contains(":k")]

        def page_without_card() -> str:
            sections = [leaderboard_section(board, leaderboard_headline(board, settings),
                                            settings),
                        Section(id="ranks", title="Ranks", plots=[Plot(
                            "plot-rank-overview", rank_overview_figure(
                                board, settings["primary_metric"]), height=480)]),
                        agreement_section(agree),
                        *_dataset_sections(board, metrics, oracle, agree, bench_rank.DATASET),
                        settings_section(settings, store.name)]
            return render_page("zoorank report", sections)

        _, report_s = timed(page_without_card, repeat=repeat)

        def card() -> str:
            return render_section(decision_section(board, settings, written["agreement"], None,
                                                   read_decision(store)))

        html, card_s = timed(card, repeat=repeat)
        # the card's own work, timed directly: its context from decision.json, and the rendering
        # of the whole section (the top set's table included: an upper bound); not the forest
        # plot or the labels' lines, which the first screen computed before the card existed
        _, context_s = timed(card_context, read_decision(store), board, settings, repeat=repeat)
        section = decision_section(board, settings, written["agreement"], None,
                                   read_decision(store))
        _, render_s = timed(render_section, section, repeat=repeat)
    return {"models": n, "rank_s": rank_s, "decision_s": decision_s, "report_s": report_s,
            "card_s": card_s, "added_s": context_s + render_s,
            "shortlist": len(doc["shortlist"]["models"]),
            "caveats": len(doc["caveats"]), "card_kb": len(html) / 1024,
            "pick": doc["pick"]["model_id"]}


def main() -> None:
    args = harness.options(__doc__, "bench_decision", models="100,1000", bootstrap=1000,
                           repeat=3)
    rows = []
    for n in sorted(int(v) for v in args.models.split(",")):
        rows.append(one_size(n, args.bootstrap, args.repeat))
        r = rows[-1]
        print(f"{n} models: RANK {r['rank_s']:.2f} s, decision {r['decision_s']:.3f} s, "
              f"page {r['report_s']:.2f} s, card {r['card_s']:.3f} s; load {harness.load():.1f}",
              flush=True)
    lines = [table(["models", "RANK s (with decision.json)", "decision.json s",
                    "page without the first screen s", "first screen s", "card added s",
                    "decision.json + card s", "shortlist", "caveats", "first screen KiB"],
                   [[r["models"], f"{r['rank_s']:.2f}", f"{r['decision_s']:.3f}",
                     f"{r['report_s']:.2f}", f"{r['card_s']:.3f}", f"{r['added_s']:.3f}",
                     f"{r['decision_s'] + r['added_s']:.3f}", r["shortlist"],
                     r["caveats"], f"{r['card_kb']:.0f}"] for r in rows]), "",
             "*First screen*: the decision section as the report renders it (the card, the "
             "caveats, the top set with its forest plot). *Card added*: the card's context from "
             "decision.json plus the rendering of the whole section (its top-set table included: "
             "an upper bound), without the forest plot and the labels' lines that the first "
             "screen computed before the card existed.", ""]
    for r in rows:
        added = r["decision_s"] + r["added_s"]
        lines += [ratio(f"decision.json at {r['models']} models", r["decision_s"],
                        "RANK without it", r["rank_s"] - r["decision_s"]),
                  ratio(f"first screen at {r['models']} models", r["card_s"],
                        "the page without it", r["report_s"]),
                  f"decision.json + card at {r['models']} models: {added:.3f} s against the 1 s "
                  f"bound: {'under' if added < 1 else 'OVER'}; the whole first screen included: "
                  f"{r['decision_s'] + r['card_s']:.3f} s", ""]
    print("\n".join(lines))
    harness.write_results(args.markdown, "bench_decision — what decision.json and the decision "
                          "card add to RANK and REPORT", "\n".join(lines))


if __name__ == "__main__":
    main()
