"""The model zoo: model specs → torch modules + preprocessing, with safe checkpoint loading.

``resolve_models(config)`` turns the config's ``models`` into concrete :class:`ResolvedModel` rows
(globs expanded, ``from_tune`` zoo files read, preprocessing resolved, fingerprints computed)
without building a network or reading weights into memory; ``load_model`` builds one on a device.

Conventions
-----------
* **Input and output.** A loaded model maps a *normalized* float tensor ``(B, 3, H, W)`` (the clean
  view of :class:`Geometry` followed by :class:`Normalization`) to float32 features ``(B, dim)``.
* **Sources.** ``timm``: ``timm.create_model(name, pretrained=pretrained, num_classes=...,
  **model_kwargs)``, i.e. timm's pooled pre-logits features (``num_classes`` is 0 unless a head is
  kept, see *Heads*); ``pretrained: true`` loads the hub
  weights through timm's own loader from the local Hugging Face cache (:mod:`zoorank.zoo.hub`), and
  its ``name`` may be a glob over the cached ``timm/*`` models. ``transformers``: ``name`` is a
  local model directory or a hub id in the local cache, optionally pinned as ``org/model@rev``
  (``from_pretrained(org/model, revision=rev)``, offline; never ``trust_remote_code``); multimodal
  configs with a ``vision_config`` (CLIP, SigLIP, ...) load their ``<Name>VisionModel``; ``pooling``
  is ``cls`` (token 0 of ``last_hidden_state``), ``mean`` (mean over *all* tokens of
  ``last_hidden_state``) or ``pooler`` (the model's ``pooler_output``); a 4-D ``last_hidden_state``
  (conv nets) is global-average-pooled for ``cls`` and ``mean``. ``torchscript``: the scripted file
  is ``checkpoint`` when given, else ``name``; ``torch.jit.load`` runs code from it, so it loads
  only with ``trust_checkpoint: true`` (a ConfigError naming the field otherwise). ``python``: ``name`` is
  ``"package.module:function"``, called with ``model_kwargs``; it returns an ``nn.Module``.
* **Heads** (:mod:`zoorank.zoo.label_space` for the label spaces). With ``head`` not false
  (and ``embed.heads`` true), ``FeatureExtractor.features_and_logits`` gives (features, logits) of
  one forward. ``timm``: ``num_classes`` is ``model_kwargs``' own, else the rows of the
  checkpoint's classifier weight (``pretrained_cfg["classifier"]``; a checkpoint without it is
  headless), else the hub weights' head (``pretrained``), else 0 (a seeded random init has no
  trained head); features ``forward_head(forward_features(x), pre_logits=True)``, logits
  ``forward_head`` of the same trunk output. ``transformers``: a config whose ``architectures``
  name a ``*ForImageClassification`` loads with ``AutoModelForImageClassification``; logits are
  its output, features its base model's output in that forward (hooked), pooled as without a head.
  ``python``: a module with ``forward_features`` and ``forward_head`` as timm (``pre_logits`` when
  its ``forward_head`` takes it, else the trunk output pooled), else a submodule or method found
  by name (``head``, ``fc``, ``classifier``) or named by ``head: NAME`` (:mod:`zoorank.zoo.heads`):
  features the head's input, logits its output (hooked; ``forward`` may return anything; a head
  the forward does not call takes its pooled output). ``torchscript``: only with ``head: true``,
  the module returns ``(features, logits)``.
  ``head: false`` builds exactly the headless model of before (timm ``num_classes=0``).
* **Outputs other than (B, dim)** (a python/torchscript model's output, or a ``layer:``'s) are
  pooled: the first tensor of a tuple/dict; 4-D maps ``(B, C, H, W)`` are global-average-pooled, 3-D
  token sequences ``(B, N, C)`` are averaged over tokens, anything else is flattened.
* **Models without a checkpoint** are initialised under torch seed 0, so every actor that builds the
  same spec holds the same weights.
* **Checkpoints** are local paths or ``pyarrow.fs`` URIs (``s3://``, ``gs://``; read straight from
  the URI by whoever loads them). ``.safetensors`` via safetensors; anything else through
  ``torch.load(weights_only=True)``, then, for metadata it refuses (Namespace, pathlib, omegaconf,
  numpy), the restricted unpickler of :mod:`zoorank.zoo.safe_pickle` (metadata as inert
  placeholders); a pickle that needs any other global is refused (:class:`CheckpointError`) before
  anything in it runs. ``trust_checkpoint: true`` switches to ``weights_only=False`` (arbitrary code
  from the file runs!). The state dict is the top level when every value is a tensor, else the entry
  named ``state_dict_key``, else the first of ``state_dict``/``model``/``module`` (searched a few
  levels deep; a pickled ``nn.Module`` gives its ``state_dict()``). ``state_dict_prefix`` (or a
  preset of :data:`PREFIX_PRESETS`) keeps only the keys under that prefix, stripped, looked for in
  that state dict and then in the whole checkpoint flattened to dotted keys
  (``teacher.backbone.*``). A prefix of ``strip_prefixes`` is removed while every key carries it and
  the model's own keys do not. For timm, checkpoint keys under the architecture's classifier
  (``pretrained_cfg["classifier"]``, e.g. ``fc.*``, ``head.*``) that the headless model lacks are
  dropped, so a checkpoint saved with its classifier loads into the ``num_classes=0`` backbone
  when heads are off.
  Missing ``num_batches_tracked`` buffers are ignored. With ``strict`` any other missing or
  unexpected key is an error listing them; a shape mismatch, or a checkpoint sharing no key with the
  model, is an error either way.
* **Fingerprint** = ``fingerprint(zoorank version, digest of the weight bytes, spec)``; the weight
  bytes are the cached hub file with its revision (``pretrained``), the checkpoint file (plus, for
  transformers, every file of the model directory; for torchscript, the scripted file), so a renamed
  or moved checkpoint keeps its fingerprint. The spec part leaves out what does not change the
  features: ``id``, ``group``, ``family``, ``datasets``, the checkpoint path and, for
  transformers/torchscript, ``name`` (a path whose bytes are hashed), and ``head`` / ``label_map``
  (in each embedding entry's fingerprint instead, with the dataset's label space). The code of a ``python``
  factory is not hashed: bump a ``model_kwargs`` entry when it changes.
"""

from zoorank.zoo.preprocessing import (
    DEFAULT_GEOMETRY,
    DEFAULT_NORMALIZATION,
    IMAGENET_MEAN,
    IMAGENET_STD,
    NATIVE_GEOMETRY,
    Geometry,
    Normalization,
    describe_preprocessing,
)
from zoorank.zoo.resolve import ResolvedModel, resolve_models
from zoorank.zoo.zoofile import (
    ZOO_FILE_NAME,
    read_zoo_file,
    read_zoo_objective,
    write_zoo_file,
    write_zoo_objective,
)

__all__ = [
    "CheckpointError",
    "DEFAULT_GEOMETRY",
    "DEFAULT_NORMALIZATION",
    "FeatureExtractor",
    "Geometry",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "NATIVE_GEOMETRY",
    "Normalization",
    "PREFIX_PRESETS",
    "ResolvedModel",
    "ZOO_FILE_NAME",
    "check_features",
    "describe_preprocessing",
    "estimate_model_bytes",
    "load_model",
    "pool_features",
    "read_checkpoint",
    "read_zoo_file",
    "read_zoo_objective",
    "resolve_models",
    "write_zoo_file",
    "write_zoo_objective",
]

#: names whose modules import torch, imported on first use (PEP 562): a process that only resolves
#: the zoo (the driver of ``zoorank rank``/``report``, a score worker) never imports torch (~1.5 s
#: of CPU).
_LAZY = {
    "FeatureExtractor": "zoorank.zoo.features",
    "check_features": "zoorank.zoo.features",
    "load_model": "zoorank.zoo.build",
    "pool_features": "zoorank.zoo.features",
    "PREFIX_PRESETS": "zoorank.zoo.checkpoints",
    "CheckpointError": "zoorank.zoo.checkpoints",
    "read_checkpoint": "zoorank.zoo.checkpoints",
    "estimate_model_bytes": "zoorank.zoo.memory",
}


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
