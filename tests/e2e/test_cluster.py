"""The cluster recipe on a real multi-node Ray: ``ray job submit`` of a config whose checkpoints,
dataset and store are all ``s3://``, from a working directory that holds only the config.

The cluster (``tests/loopback_cluster.py``) is a head without GPUs and two worker nodes that declare
one GPU each, all on 127.0.0.1; the object store is the session's moto server (``s3_server``), and
its endpoint and credentials reach the nodes only through their environment. Torch is CPU here, so
the config sets ``embed.allow_cpu_torch`` (GPU-scheduled embedding tasks run CPU torch) and
``precision: fp32``.

The inputs are built in memory and uploaded (a small real zoo of seeded timm checkpoints with one
truncated file; 256 CIFAR-10 test images as Parquet): they never exist on the driver's disk, so a
stage that reads a driver-local path cannot succeed. The same config is then run on a single-node
local Ray (one declared GPU, so every chunk goes through one GPU in turn) into another store; the
two leaderboards and metric tables must agree.
"""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import yaml
from loopback_cluster import BIN, REPO, LoopbackCluster, base_env, end_process_group

IMAGES = 256
BUCKET = "zr-cluster"
#: timm architecture, seed: the good models (two seeds of one architecture form a NC ensemble;
#: the resnets come from a glob). Three good models and the broken one: four embedding chunks over
#: the two GPU nodes, the fewest that still spread work over both and rank more than two models.
ZOO = {"resnet/s0": ("test_resnet", 0), "resnet/s1": ("test_resnet", 1),
       "effnet": ("test_efficientnet", 0)}
GOOD = {"resnet-s0", "resnet-s1", "effnet"}
BROKEN = "resnet-broken"


def _checkpoint(arch: str, seed: int) -> bytes:
    import timm
    import torch
    from safetensors.torch import save

    torch.manual_seed(seed)
    model = timm.create_model(arch, pretrained=False, num_classes=0)
    return save({k: v.contiguous() for k, v in model.state_dict().items()})


def _upload(s3_server, key: str, data: bytes) -> str:
    s3_server.bucket(BUCKET)
    s3_server.client.put_object(Bucket=BUCKET, Key=key, Body=data)
    return f"s3://{BUCKET}/{key}"


def _read_frame(s3_server, uri: str) -> pd.DataFrame:
    """A store table (Delta) on the loopback S3, read by delta-rs as any user would."""
    from deltalake import DeltaTable

    options = {"AWS_ENDPOINT_URL": s3_server.endpoint_url, "AWS_ALLOW_HTTP": "true",
               "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
               "AWS_REGION": "us-east-1"}
    return DeltaTable(uri, storage_options=options).to_pandas()


def _config(s3_server, shared_data: Path) -> dict:
    """Upload the zoo and the dataset (from memory) and return the run config (store unset)."""
    for name, (arch, seed) in ZOO.items():
        _upload(s3_server, f"ckpt/{name}.safetensors", _checkpoint(arch, seed))
    good = _checkpoint("test_resnet", 2)
    _upload(s3_server, f"ckpt/{BROKEN}.safetensors", good[: len(good) // 2])  # truncated
    table = pq.read_table(shared_data / "cifar10" / "test.parquet", columns=["image", "label"])
    buf = io.BytesIO()
    pq.write_table(table.slice(0, IMAGES), buf)
    data = _upload(s3_server, "data/cifar10-256.parquet", buf.getvalue())
    ckpt = f"s3://{BUCKET}/ckpt"
    timm = {"source": "timm", "input_size": 32}
    return {
        "seed": 0,
        "datasets": [{"name": "cifar10", "source": "parquet", "path": data,
                      "image_column": "image", "label_column": "label"}],
        "models": [
            # a glob over the bucket: one model per file (ids resnet-s0, resnet-s1)
            {**timm, "id": "resnet", "name": "test_resnet", "group": "resnet",
             "checkpoint": f"{ckpt}/resnet/s*.safetensors"},
            {**timm, "id": "effnet", "name": "test_efficientnet",
             "checkpoint": f"{ckpt}/effnet.safetensors"},
            {**timm, "id": BROKEN, "name": "test_resnet",
             "checkpoint": f"{ckpt}/{BROKEN}.safetensors"},
        ],
        "views": [{"name": "clean"}, {"name": "simclr", "samples": 64, "per_sample": 4}],
        "metrics": ["rankme", "rankme_aug", "lidar", "twonn_id", "cluster_learnability", "clid",
                    "nc"],
        "oracle": {"knn": True},
        "rank": {"bootstrap": 50},
        "embed": {"device": "cuda", "allow_cpu_torch": True, "precision": "fp32",
                  "batch_size": 64, "models_per_actor": 1, "num_cpus_per_actor": 0.25},
        "score": {"num_cpus_per_actor": 0.5},
    }


def _tasks(cluster: LoopbackCluster, job_id: str) -> list[dict]:
    """The state API's task records of one job (Ray job id), finished ones included."""
    url = (f"{cluster.dashboard}/api/v0/tasks?limit=10000&detail=1"
           f"&filter_keys=job_id&filter_predicates=%3D&filter_values={job_id}")
    with urllib.request.urlopen(url, timeout=60) as r:
        return json.load(r)["data"]["result"]["result"]


def _all_uris(value) -> list[str]:
    if isinstance(value, dict):
        return [u for v in value.values() for u in _all_uris(v)]
    if isinstance(value, list):
        return [u for v in value for u in _all_uris(v)]
    return [value] if isinstance(value, str) and ("/" in value or "://" in value) else []


@pytest.fixture(scope="module")
def runs(s3_server, shared_data, tmp_path_factory):
    """The cluster job and the single-node reference run of the same config."""
    root = tmp_path_factory.mktemp("cluster")
    s3_env = {"AWS_ENDPOINT_URL": s3_server.endpoint_url, "AWS_ACCESS_KEY_ID": "testing",
              "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
    config = _config(s3_server, shared_data)
    work = root / "job"
    work.mkdir()
    (work / "cfg.yaml").write_text(yaml.safe_dump({**config, "store": f"s3://{BUCKET}/store"}))
    out = {"config": config, "work": work, "timings": {}}

    # The single-node reference, a local Ray (2 CPUs, one declared GPU) in a fresh process, runs
    # beside the cluster (most of both is waiting on Ray); its private RAY_TMPDIR keeps any other
    # bare ray.init() on the machine from joining it.
    ref = root / "ref"
    ref.mkdir()
    (ref / "cfg.yaml").write_text(yaml.safe_dump({**config, "store": f"s3://{BUCKET}/ref"}))
    ref_tmp = tempfile.mkdtemp(prefix="zr-", dir="/tmp")
    script = ("import sys, ray; ray.init(num_cpus=2, num_gpus=1, include_dashboard=False);"
              " from zoorank.cli import main; sys.exit(main(['run', 'cfg.yaml']))")
    t_ref = time.perf_counter()
    reference = subprocess.Popen([str(BIN / "python"), "-c", script], cwd=ref, text=True,
                                 env=base_env({**s3_env, "RAY_TMPDIR": ref_tmp}),
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 start_new_session=True)
    try:
        t0 = time.perf_counter()
        cluster = LoopbackCluster(root / "logs", head_cpus=1, workers=[(1, 1), (1, 1)],
                                  env=s3_env)
        cluster.start(timeout=300)
        out["timings"]["cluster start"] = time.perf_counter() - t0
        try:
            submission = f"zoorank-cluster-{time.time_ns()}"
            t0 = time.perf_counter()
            out["job"] = cluster.submit(work, ["python", "-m", "zoorank", "run", "cfg.yaml"],
                                        timeout=600, job_id=submission)
            out["timings"]["cluster job"] = time.perf_counter() - t0
            with urllib.request.urlopen(f"{cluster.dashboard}/api/jobs/{submission}",
                                        timeout=30) as r:
                job = json.load(r)
            out["status"] = job["status"]
            out["nodes"] = cluster.alive_nodes()
            out["tasks"] = _tasks(cluster, job["job_id"]) if job.get("job_id") else []
        finally:
            t0 = time.perf_counter()
            cluster.stop()
            out["timings"]["cluster stop"] = time.perf_counter() - t0
        out["ref_log"] = reference.communicate(timeout=600)[0]
        out["ref_rc"] = reference.returncode
        out["timings"]["single-node run"] = time.perf_counter() - t_ref
    finally:
        end_process_group(reference)
        shutil.rmtree(ref_tmp, ignore_errors=True)
    print("timings:", {k: round(v, 1) for k, v in out["timings"].items()})
    return out


def _job_log(runs) -> str:
    return runs["job"].stdout[-4000:] + runs["job"].stderr[-2000:]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_job_succeeds_and_every_good_model_is_done_and_the_broken_one_failed(runs, s3_server):
    assert runs["job"].returncode == 0 and runs["status"] == "SUCCEEDED", _job_log(runs)
    manifest = _read_frame(s3_server, f"s3://{BUCKET}/store/manifest")
    good = GOOD
    status = manifest.groupby("model_id")["status"].agg(set).to_dict()
    assert status == {**{m: {"done"} for m in good}, BROKEN: {"failed"}}, manifest
    # every (dataset, view) entry of a good model holds all its rows: 256 clean, 64 × 4 simclr
    done = manifest[manifest["status"] == "done"]
    assert sorted(done.groupby("view")["rows"].agg(set).items()) == [
        ("clean", {IMAGES}), ("simclr", {64 * 4})]
    board = _read_frame(s3_server, f"s3://{BUCKET}/store/leaderboard")
    assert set(board["model_id"]) == good


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_embedding_ran_on_both_gpu_worker_nodes_and_not_on_the_head(runs):
    gpu_nodes = {n["node_id"] for n in runs["nodes"] if n["resources_total"].get("GPU", 0) > 0}
    head = {n["node_id"] for n in runs["nodes"] if n["is_head_node"]}
    assert len(gpu_nodes) == 2 and head.isdisjoint(gpu_nodes)
    embed = [t for t in runs["tasks"] if t["name"].endswith("embed_slice")]
    assert embed, sorted({t["name"] for t in runs["tasks"]})
    assert all(t["required_resources"].get("GPU") == 1 for t in embed)
    # 4 models, one per chunk, over 2 GPUs: both nodes must have run some
    assert {t["node_id"] for t in embed} == gpu_nodes


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_the_job_reads_nothing_from_the_driver_disk(runs):
    # the working dir carried only the config, and every input the config names is on S3 (built in
    # memory and uploaded: no local copy of any checkpoint or image ever existed)
    assert [p.name for p in runs["work"].iterdir()] == ["cfg.yaml"]
    cfg = yaml.safe_load((runs["work"] / "cfg.yaml").read_text())
    uris = _all_uris({"store": cfg["store"], "datasets": cfg["datasets"], "models": cfg["models"]})
    assert len(uris) == 1 + 1 + 3 and all(u.startswith(f"s3://{BUCKET}/") for u in uris), uris
    assert all("@" not in u and "?" not in u for u in uris)  # no credentials or endpoint in URIs


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_each_entry_is_at_most_two_part_files(runs, s3_server):
    listing = s3_server.client.list_objects_v2(Bucket=BUCKET, Prefix="store/embeddings/")
    files: dict[str, int] = {}
    for obj in listing.get("Contents", []):
        entry, name = obj["Key"].rsplit("/", 1)
        if name.startswith("part-"):
            files[entry] = files.get(entry, 0) + 1
    assert len(files) == len(GOOD) * 2  # good models × views
    assert max(files.values()) <= 2, files


def _flat(frame: pd.DataFrame) -> pd.DataFrame:
    """One column per value, the JSON ``params`` spread into ``params.<key>`` columns; wall-clock
    timings (``seconds``) dropped: they are the only thing two runs may not share."""
    out = frame.drop(columns=[c for c in frame.columns if c == "seconds"])
    if "params" in out.columns:
        params = pd.json_normalize([json.loads(p) if p else {} for p in out["params"]])
        params = params.drop(columns=[c for c in params.columns
                                      if c.split(".")[-1] == "seconds"])
        out = pd.concat([out.drop(columns="params").reset_index(drop=True),
                         params.add_prefix("params.")], axis=1)
    return out


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_the_cluster_run_equals_a_single_node_run(runs, s3_server):
    assert runs["ref_rc"] == 0, runs["ref_log"][-5000:]
    for name in ("leaderboard", "metrics"):
        a = _read_frame(s3_server, f"s3://{BUCKET}/store/{name}")
        b = _read_frame(s3_server, f"s3://{BUCKET}/ref/{name}")
        assert list(a.columns) == list(b.columns) and len(a) == len(b) > 0
        keys = [c for c in ("model_id", "dataset", "metric") if c in a.columns]
        a, b = (_flat(f.sort_values(keys).reset_index(drop=True)) for f in (a, b))
        assert list(a.columns) == list(b.columns)
        numeric = [c for c in a.columns if pd.api.types.is_float_dtype(a[c])]
        others = [c for c in a.columns if c not in numeric]
        pd.testing.assert_frame_equal(a[others], b[others])
        np.testing.assert_allclose(a[numeric].to_numpy(float), b[numeric].to_numpy(float),
                                   rtol=1e-5, atol=1e-5, equal_nan=True, err_msg=name)


# -- the recipe files (fast) -----------------------------------------------------------------------
@pytest.mark.timeout(60)
def test_cluster_yaml_is_a_valid_launcher_config_with_gpu_workers_from_zero():
    from ray.autoscaler._private.util import prepare_config, validate_config

    raw = yaml.safe_load((REPO / "cluster.yaml").read_text())
    validate_config(prepare_config(raw))  # Ray's launcher schema: unknown keys are errors
    types = raw["available_node_types"]
    head = types[raw["head_node_type"]]
    workers = [t for name, t in types.items() if name != raw["head_node_type"]]
    assert head["resources"].get("GPU") == 0
    assert any("--num-gpus=0" in c for c in raw["head_start_ray_commands"])
    assert [w["min_workers"] for w in workers] == [0]
    assert workers[0]["resources"]["GPU"] >= 1 and workers[0]["max_workers"] >= 1
    assert any(".[gpu]" in c for c in raw["setup_commands"])


@pytest.mark.timeout(60)
def test_the_example_config_reads_and_writes_only_object_storage():
    from zoorank.config.loading import load_config

    path = REPO / "pipelines" / "configs" / "cifar10_zoo.yaml"
    config = load_config(path)
    uris = [config.store, *(d.path for d in config.datasets),
            *(m.checkpoint for m in config.models if getattr(m, "checkpoint", None))]
    assert len(uris) == 3 and all(str(u).startswith("s3://") for u in uris), uris
    assert config.embed.device in ("auto", "cuda") and not config.embed.allow_cpu_torch
