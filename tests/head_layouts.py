"""Python models with their classifiers where people put them (``source: python``,
``name: head_layouts:...``), for the tests of :mod:`zoorank.zoo.heads`.

Small seeded nets for each layout, and the UvA CIFAR-10 classifiers' module code
(``benchmarks/uva_models.py``, trained checkpoints in ``../shared/zoos/uva_cifar10``) rewritten in
the torchvision layouts: the classifier as ``fc``, as the last Linear of a Sequential
``classifier``, or behind a ``head()`` method, each ``forward`` returning the logits.
:func:`convert_uva` renames a checkpoint's keys to match. ``tests/`` is on ``sys.path`` under
pytest, and Ray workers inherit it.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import torch
from torch import nn

REPO = Path(__file__).resolve().parents[1]


def _trunk(width: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(3, width, 3, padding=1), nn.ReLU(),
                         nn.Conv2d(width, width, 3, stride=2, padding=1), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten())


class MethodHead(nn.Module):
    """``head`` is a method (features → logits) and ``forward`` returns ``head(trunk(x))``."""

    def __init__(self, width: int = 8, classes: int = 10) -> None:
        super().__init__()
        self.trunk = _trunk(width)
        self.linear = nn.Linear(width, classes)

    def head(self, z: torch.Tensor) -> torch.Tensor:
        return self.linear(z)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.trunk(x))


class FeaturesThenMethodHead(MethodHead):
    """``forward`` returns the features; the ``head()`` method is called apart (an SSL-style
    module with a probe)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.trunk(x)


class SequentialClassifier(nn.Module):
    """``forward`` returns the logits of ``classifier = Sequential(Dropout, Linear, ReLU,
    Dropout, Linear)`` (VGG/MobileNet style: the last Linear is the head)."""

    def __init__(self, width: int = 8, classes: int = 10) -> None:
        super().__init__()
        self.features = _trunk(width)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(width, 12), nn.ReLU(),
                                        nn.Dropout(0.2), nn.Linear(12, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


class FirstLayerFc(nn.Module):
    """An MLP whose first layer is named ``fc`` and whose classifier is ``out``: ``fc`` is no
    head (its output is not what ``forward`` returns)."""

    def __init__(self, size: int = 16, classes: int = 10) -> None:
        super().__init__()
        self.fc = nn.Linear(3 * size * size, 32)
        self.out = nn.Linear(32, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.fc(x.flatten(1))))


class UnusedProjector(nn.Module):
    """A self-supervised encoder: ``forward`` returns the features; its ``head`` is a projector
    that only training calls (no classifier)."""

    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.trunk = _trunk(width)
        self.head = nn.Sequential(nn.Linear(width, 16), nn.ReLU(), nn.Linear(16, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.trunk(x)


def unused_projector(width: int = 8) -> nn.Module:
    return UnusedProjector(width)


def method_head(width: int = 8, classes: int = 10) -> nn.Module:
    return MethodHead(width, classes)


def features_then_method_head(width: int = 8, classes: int = 10) -> nn.Module:
    return FeaturesThenMethodHead(width, classes)


def sequential_classifier(width: int = 8, classes: int = 10) -> nn.Module:
    return SequentialClassifier(width, classes)


def first_layer_fc(size: int = 16, classes: int = 10) -> nn.Module:
    return FirstLayerFc(size, classes)


# -- the UvA classifiers, as torchvision would write them --------------------------------------------


def uva_models():
    """``benchmarks/uva_models.py`` (wherever the benchmarks' layout puts it), imported by path."""
    if "uva_models" in sys.modules:
        return sys.modules["uva_models"]
    (path,) = sorted(REPO.glob("benchmarks/**/uva_models.py"))[:1]
    spec = importlib.util.spec_from_file_location("uva_models", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["uva_models"] = module
    spec.loader.exec_module(module)
    return module


class UvaResNetFc(nn.Module):
    """Tutorial 5's ResNet with torchvision's names: the classifier is ``fc`` and ``forward``
    returns its logits (keys ``output_net.2.*`` → ``fc.*``)."""

    def __init__(self, preact: bool = False) -> None:
        super().__init__()
        base = uva_models()._ResNet(preact)
        self.input_net, self.blocks = base.input_net, base.blocks
        self.pool = nn.Sequential(nn.AdaptiveAvgPool2d((1, 1)), nn.Flatten())
        self.fc = base.output_net[2]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.pool(self.blocks(self.input_net(x))))


class UvaDenseNetClassifier(nn.Module):
    """Tutorial 5's DenseNet with torchvision's names: ``norm`` then a Sequential ``classifier``
    (Dropout, Linear) whose logits ``forward`` returns (keys ``output_net.0.*`` → ``norm.*``,
    ``output_net.4.*`` → ``classifier.1.*``)."""

    def __init__(self) -> None:
        super().__init__()
        base = uva_models()._DenseNet()
        self.input_net, self.blocks = base.input_net, base.blocks
        self.norm = base.output_net[0]
        self.classifier = nn.Sequential(nn.Dropout(0.1), base.output_net[4])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = torch.relu(self.norm(self.blocks(self.input_net(x))))
        return self.classifier(z.mean(dim=(2, 3)))


def _uva_method_class():
    base = uva_models()._ResNet

    class UvaResNetMethod(base):
        """Tutorial 5's ResNet (keys unchanged) whose ``forward`` returns ``self.head(features)``,
        ``head`` a method."""

        def head(self, z: torch.Tensor) -> torch.Tensor:
            return self.output_net[2](z)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.output_net[:2](self.blocks(self.input_net(x))))

    return UvaResNetMethod


def uva_resnet_fc(preact: bool = False) -> nn.Module:
    return UvaResNetFc(preact)


def uva_densenet_classifier() -> nn.Module:
    return UvaDenseNetClassifier()


def uva_resnet_method(preact: bool = True) -> nn.Module:
    return _uva_method_class()(preact)


def uva_googlenet() -> nn.Module:
    """The UvA GoogleNet as written (``forward`` returns the features; its head: ``output_net.2``)."""
    return uva_models().googlenet()


#: key renames from a UvA checkpoint (prefix ``model.`` stripped) to the layouts above.
UVA_RENAMES = {
    "uva_resnet_fc": {"output_net.2.": "fc."},
    "uva_densenet_classifier": {"output_net.0.": "norm.", "output_net.4.": "classifier.1."},
}


def convert_uva(checkpoint: Path, factory: str, out: Path) -> Path:
    """The UvA ``checkpoint``'s weights under the key names of ``factory`` (:data:`UVA_RENAMES`),
    saved as safetensors at ``out``."""
    from safetensors.torch import save_file

    from zoorank.zoo.checkpoints import read_checkpoint

    state = read_checkpoint(str(checkpoint), state_dict_prefix="model.")
    renamed = {}
    for key, value in state.items():
        for old, new in UVA_RENAMES.get(factory, {}).items():
            if key.startswith(old):
                key = new + key.removeprefix(old)
        renamed[key] = value.contiguous()
    save_file(renamed, str(out))
    return out
