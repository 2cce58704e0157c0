"""Ray job entry point: label-free SSL hyperparameter search on a running Ray cluster.

    ray job submit --working-dir . -- python pipelines/tune_ssl.py CONFIG [--store URI]
"""

from __future__ import annotations

import sys

from zoorank.cli import main

if __name__ == "__main__":
    args = sys.argv[1:]
    if "--address" not in args:
        args += ["--address", "auto"]
    sys.exit(main(["tune", *args]))
