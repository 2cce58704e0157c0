"""Evidence on third-party checkpoints (issue 17): the UvA CIFAR-10 zoo ranked end to end.

``../shared/zoos/uva_cifar10`` (see its README) holds supervised classifiers and unsupervised
autoencoders trained by someone else. This script ranks all eight with the module code of
``benchmarks/zoos/uva_models.py`` (ResNet, ResNetPreAct: 64-d; GoogleNet: 128-d; DenseNet: 184-d; four
autoencoders: 64-, 128-, 256-, 384-d latents; a zoo that mixes widths) on CIFAR-10 test images
with the label oracle (kNN and linear probe), and writes a markdown table: Kendall τ of every
label-free metric against each oracle, whether the oracle's best model is in the top set, the top
set's size, the consensus and the width warning. Prints, never asserts::

    .venv/bin/python benchmarks/science/validate_uva.py --images 1000
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness
import harness
import yaml
from harness import table, timed

import zoorank.runtime  # noqa: F401  (loopback Ray environment)
from zoorank.config import DEFAULT_METRICS

ROOT = Path(__file__).resolve().parents[2]
#: ../shared beside the checkout (a worktree under /work/wt/<name> finds /work/shared too)
SHARED = next((p / "shared" for p in (ROOT.parent, ROOT.parent.parent) if (p / "shared").is_dir()),
              ROOT.parent / "shared")
ZOO = SHARED / "zoos" / "uva_cifar10"
CIFAR = SHARED / "data" / "cifar10" / "test.parquet"
CLASSIFIER_NORM = {"mean": [0.49139968, 0.48215841, 0.44653091],
                   "std": [0.24703223, 0.24348513, 0.26158784]}


def config(out: Path, images: int, aug: int) -> dict:
    models = [{"id": name.lower(), "source": "python", "name": f"uva_models:{fn}",
               "checkpoint": str(ZOO / "classifiers" / f"{name}.ckpt"),
               "state_dict_prefix": "model.", "input_size": 32, "crop_pct": 1.0,
               "family": "classifier", **CLASSIFIER_NORM}
              for name, fn in (("ResNet", "resnet"), ("ResNetPreAct", "resnet_preact"),
                               ("GoogleNet", "googlenet"), ("DenseNet", "densenet"))]
    models += [{"id": f"ae-{d}", "source": "python", "name": "uva_models:autoencoder_encoder",
                "model_kwargs": {"latent_dim": d},
                "checkpoint": str(ZOO / "autoencoders" / f"cifar10_{d}.ckpt"),
                "state_dict_prefix": "encoder.", "input_size": 32, "crop_pct": 1.0,
                "mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5], "family": "autoencoder"}
               for d in (64, 128, 256, 384)]
    return {
        "store": str(out / "store"), "seed": 0,
        "datasets": [{"name": "cifar10", "source": "parquet", "path": str(CIFAR),
                      "image_column": "image", "label_column": "label", "limit": images}],
        "models": models,
        "views": [{"name": "clean"}, {"name": "simclr", "samples": aug, "per_sample": 4}],
        # every label-free metric a default config computes (NC has no seed ensemble here: its
        # rows are NaN with the reason), so the zoo informs the choice of the default primary
        "metrics": list(DEFAULT_METRICS),
        "oracle": {"knn": True, "linear_probe": True},
        "rank": {"bootstrap": 500},
    }


def summary(store: Path) -> str:
    from zoorank.store import Store

    s = Store(str(store))
    board = s.read_frame("leaderboard")
    agree = s.read_frame("agreement")
    unc = s.read_frame("uncertainty")
    from zoorank.decide.leaderboard import read_leaderboard_settings

    settings = read_leaderboard_settings(s)
    d = settings["decision"]
    lines = []
    a = agree[(agree["family"] == "all")]
    for o_name in ("knn_accuracy", "linear_probe_accuracy"):
        col = f"cifar10/{o_name}"
        if col not in board:
            continue
        best = board.loc[board[col].idxmax(), "model_id"]
        rows = []
        for r in a[a["oracle_metric"] == o_name].sort_values("kendall_tau", ascending=False).itertuples():
            m = unc[unc["metric"] == r.metric]
            top = sorted(m.loc[m["in_top_set"].astype(bool), "model_id"]) if len(m) else []
            if r.metric == "leaderboard_rank":
                top = list(d["top_set"])
            ok = "yes" if best in top else ("—" if not top else "no")
            rows.append([r.metric, f"{r.kendall_tau:+.2f} [{r.kendall_ci_low:+.2f}, "
                         f"{r.kendall_ci_high:+.2f}]", ", ".join(top) or "—", len(top) or "—", ok])
        lines += [f"### against {o_name} (oracle's best: `{best}`)", "",
                  table(["metric", "τ [95% CI over models]", "top set (this metric)", "size",
                         "oracle's best in it"], rows, "lllll"), ""]
    cols = ["rank", "rank_low", "rank_high", "p_best", "in_top_set", "model_id", "flags",
            "cifar10/knn_accuracy", "cifar10/linear_probe_accuracy"]
    from zoorank.rank.markdown import markdown_table

    lines += ["### leaderboard", "", markdown_table(board[[c for c in cols if c in board]]), "",
              f"* ordered by `{settings['ordered_by']}`; top set: {', '.join(d['top_set'])} "
              f"({len(d['top_set'])} of {len(board)})",
              f"* consensus: {d['consensus_sentence']}",
              f"* width warning: {d['width_warning']}"]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--images", type=int, default=1000)
    p.add_argument("--aug", type=int, default=200)
    p.add_argument("--out", default="/tmp/zoorank-validate-uva")
    harness.results_option(p, "validate_uva")
    p.add_argument("--report-only", action="store_true",
                   help="only rewrite the markdown from <out>/store (e.g. after `zoorank rank`)")
    p.add_argument("--note", default="", help="a sentence printed under the command line")
    args = p.parse_args()
    out = Path(args.out)
    if not args.report_only:
        from zoorank.config.loading import load_config
        from zoorank.pipeline import run_all

        out.mkdir(parents=True, exist_ok=True)
        path = out / "run.yaml"
        path.write_text(yaml.safe_dump(config(out, args.images, args.aug), sort_keys=False))
        _, seconds = timed(run_all, load_config(path))
        (out / "timing.json").write_text(json.dumps({"seconds": seconds, "commit": harness.commit(),
                                                     "command": harness.command_line()}))
    timing = json.loads((out / "timing.json").read_text()) if (out / "timing.json").exists() else {}
    took = (f"`zoorank run` took {timing['seconds']:.0f} s at commit `{timing['commit']}`"
            if "commit" in timing else "time not recorded")
    md = [f"{took}." + (" Markdown rewritten from the store by `--report-only`."
                        if args.report_only else ""),
          *([args.note] if args.note else []), "",
          "Zoo: the eight checkpoints of ../shared/zoos/uva_cifar10 — four supervised "
          "classifiers (ResNet and ResNetPreAct 64-d, GoogleNet 128-d, DenseNet 184-d pooled "
          "features; module code in benchmarks/zoos/uva_models.py, loaded strictly; top-1 checked by "
          "benchmarks/science/uva_accuracy.py) and four convolutional autoencoders (64/128/256/384-d "
          "latents). "
          f"{args.images} CIFAR-10 test images (JPEG q75), oracle kNN and linear probe on them.",
          "", summary(out / "store")]
    harness.write_results(args.markdown, "validate_uva — third-party CIFAR-10 checkpoints",
                          "\n".join(md), command=timing.get("command"))


if __name__ == "__main__":
    main()
