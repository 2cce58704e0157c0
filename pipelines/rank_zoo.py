"""Ray job entry point: rank a zoo on a running Ray cluster.

    ray job submit --working-dir . -- python pipelines/rank_zoo.py CONFIG [--store URI]

Joins the cluster the job runs in (``address="auto"``) and runs embed → score → rank → report.
"""

from __future__ import annotations

import sys

from zoorank.cli import main

if __name__ == "__main__":
    args = sys.argv[1:]
    if "--address" not in args:
        args += ["--address", "auto"]
    sys.exit(main(["run", *args]))
