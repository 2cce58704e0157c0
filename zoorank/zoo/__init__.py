"""The model zoo: model specs → torch modules + preprocessing, with safe checkpoint loading.

``resolve_models(config)`` turns the config's ``models`` into concrete :class:`ResolvedModel` rows
(globs expanded, ``from_tune`` zoo files read, preprocessing resolved, fingerprints computed)
without building a network or reading weights into memory; ``load_model`` builds one on a device.

Conventions
-----------
* **Input and output.** A loaded model maps a *normalized* float tensor ``(B, 3, H, W)`` (the clean
  view of :class:`Geometry` followed by :class:`Normalization`) to float32 features ``(B, dim)``.
* **Sources.** ``timm``: ``timm.create_model(name, pretrained=False, num_classes=0,
  **model_kwargs)``, i.e. timm's pooled pre-logits features. ``transformers``: ``name`` is a local
  model directory (never ``trust_remote_code``); multimodal configs with a ``vision_config`` (CLIP,
  SigLIP, ...) load their ``<Name>VisionModel``; ``pooling`` is ``cls`` (token 0 of
  ``last_hidden_state``), ``mean`` (mean over *all* tokens of ``last_hidden_state``) or ``pooler``
  (the model's ``pooler_output``); a 4-D ``last_hidden_state`` (conv nets) is global-average-pooled
  for ``cls`` and ``mean``. ``torchscript``: the scripted file is ``checkpoint`` when given, else
  ``name``. ``python``: ``name`` is ``"package.module:function"``, called with ``model_kwargs``; it
  returns an ``nn.Module``.
* **Outputs other than (B, dim)** (a python/torchscript model's output, or a ``layer:``'s) are
  pooled: the first tensor of a tuple/dict; 4-D maps ``(B, C, H, W)`` are global-average-pooled,
  3-D token sequences ``(B, N, C)`` are averaged over tokens, anything else is flattened.
* **Models without a checkpoint** are initialised under torch seed 0, so every actor that builds
  the same spec holds the same weights.
* **Checkpoints.** ``.safetensors`` via ``safetensors.torch.load_file``; anything else through
  ``torch.load(weights_only=True)``: tensors and plain containers only, so a pickle that would run
  code is refused (:class:`CheckpointError`) before anything in it runs. ``trust_checkpoint: true``
  switches to ``weights_only=False`` (arbitrary code from the file runs!). The state dict is the top
  level when every value is a tensor, else the entry named ``state_dict_key``, else the first of
  ``state_dict``/``model``/``module`` (searched a few levels deep; a pickled ``nn.Module`` gives its
  ``state_dict()``). A prefix of ``strip_prefixes`` is removed while every key carries it and the
  model's own keys do not. For timm, checkpoint keys under the architecture's classifier
  (``pretrained_cfg["classifier"]``, e.g. ``fc.*``, ``head.*``) that the headless model lacks are
  dropped, so a checkpoint saved with its classifier loads into the ``num_classes=0`` backbone.
  Missing ``num_batches_tracked`` buffers are ignored. With ``strict`` any other missing or
  unexpected key is an error listing them; a shape mismatch, or a checkpoint sharing no key with the
  model, is an error either way.
* **Fingerprint** = ``fingerprint(zoorank version, digest of the weight bytes, spec)``; the weight
  bytes are the checkpoint file (plus, for transformers, every file of the model directory; for
  torchscript, the scripted file), so a renamed or moved checkpoint keeps its fingerprint. The
  spec part leaves out what does not change the features: ``id``, ``group``, ``family``, the
  checkpoint path and, for transformers/torchscript, ``name`` (a path whose bytes are hashed).
  The code of a ``python`` factory is not hashed: bump a ``model_kwargs`` entry when it changes.
"""

from zoorank.zoo.build import FeatureExtractor, check_features, load_model, pool_features
from zoorank.zoo.checkpoints import CheckpointError, read_checkpoint
from zoorank.zoo.memory import estimate_model_bytes
from zoorank.zoo.preprocessing import (
    DEFAULT_GEOMETRY,
    DEFAULT_NORMALIZATION,
    IMAGENET_MEAN,
    IMAGENET_STD,
    Geometry,
    Normalization,
)
from zoorank.zoo.resolve import ResolvedModel, resolve_models
from zoorank.zoo.zoofile import ZOO_FILE_NAME, read_zoo_file, write_zoo_file

__all__ = [
    "CheckpointError",
    "DEFAULT_GEOMETRY",
    "DEFAULT_NORMALIZATION",
    "FeatureExtractor",
    "Geometry",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "Normalization",
    "ResolvedModel",
    "ZOO_FILE_NAME",
    "check_features",
    "estimate_model_bytes",
    "load_model",
    "pool_features",
    "read_checkpoint",
    "read_zoo_file",
    "resolve_models",
    "write_zoo_file",
]
