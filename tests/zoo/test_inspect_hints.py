"""inspect stays quiet about a classifier head for a checkpoint whose last 2-D weight is an SSL
projector's (a real safetensors file of a resnet backbone and a projector)."""

import torch
from safetensors.torch import save_file

from zoorank.zoo.inspect import format_checkpoint_report, inspect_checkpoint


def test_no_head_hint_for_a_projector_and_one_for_an_unnamed_linear(tmp_path):
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.Flatten(), torch.nn.Linear(8, 4))
    backbone = {f"backbone.{k}": v for k, v in net[0].state_dict().items()}
    ssl = {**backbone, **{f"projector.0.{k}": v for k, v in net[2].state_dict().items()}}
    other = {**backbone, **{f"output_net.2.{k}": v for k, v in net[2].state_dict().items()}}
    save_file(ssl, tmp_path / "ssl.safetensors")
    save_file(other, tmp_path / "other.safetensors")
    quiet = format_checkpoint_report(inspect_checkpoint(str(tmp_path / "ssl.safetensors")))
    assert "classifier head: none found by name" in quiet and "last 2-D weight" not in quiet
    hint = format_checkpoint_report(inspect_checkpoint(str(tmp_path / "other.safetensors")))
    assert "the last 2-D weight is output_net.2.weight (4 rows)" in hint
