"""A user's project outside this repo: their own model file, their own photos, their own settings.

Shared by the golden lifecycle, plugin and user-project tests. Everything is real and offline:
the model is trained here on scikit-learn's bundled digits, the photos are scikit-image's bundled
samples saved in the awkward formats users have (grayscale, 16-bit, RGBA, palette, JPEG, odd sizes).
"""

from __future__ import annotations

import functools
import json
import shutil
import textwrap
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# The user's architecture, written into their folder as netdef.py; export-check imports it by path.
NETDEF = textwrap.dedent(
    '''
    import torch
    from torch import nn


    class SmallNet(nn.Module):
        """A small digit classifier on 16x16 RGB inputs."""

        def __init__(self, num_classes: int = 10, width: int = 8) -> None:
            super().__init__()
            self.body = nn.Sequential(
                nn.Conv2d(3, width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                nn.Conv2d(width, 2 * width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
            )
            self.head = nn.Sequential(nn.Linear(2 * width * 16, 32), nn.ReLU(), nn.Linear(32, num_classes))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.body(x))


    class DigitsMLP(nn.Module):
        """A classifier of raw 64-float digit vectors (no images): golden inputs are .npy tensors."""

        def __init__(self, hidden: int = 32) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 10))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.net(x)
    '''
).lstrip()

PREPROCESS = {"size": [16, 16], "mode": "RGB", "mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5]}


def write_netdef(folder: Path) -> Path:
    path = folder / "netdef.py"
    path.write_text(NETDEF)
    return path


def _factory(folder: Path, name: str):
    from export_check.checkpoint import resolve_factory

    return resolve_factory(f"{folder / 'netdef.py'}:{name}")


@functools.lru_cache(maxsize=1)
def _digit_tensors():
    """Every other digit of the train split (718) as 16x16 RGB inputs through the tool's own preprocessing."""
    from export_check.golden.inputs import Preprocess, preprocess_image
    from models.digits import digit_to_image, digits_split, load_digits_arrays

    images, labels = load_digits_arrays()
    train_idx = digits_split(labels)[0][::2]
    spec = Preprocess.from_json(PREPROCESS)
    x = np.stack([preprocess_image(digit_to_image(images[i]), spec) for i in train_idx])
    return x, labels[train_idx]


def _fit(model, x: np.ndarray, y: np.ndarray, epochs: int, seed: int) -> None:
    import torch

    torch.manual_seed(seed)
    xs, ys = torch.from_numpy(x.astype(np.float32)), torch.from_numpy(y)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(epochs):
        order = torch.randperm(len(xs))
        for start in range(0, len(xs), 64):
            batch = order[start : start + 64]
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(xs[batch]), ys[batch]).backward()
            opt.step()
    model.eval()


def train_smallnet(folder: Path, out: Path, epochs: int, seed: int = 0, start_from: Path | None = None) -> Path:
    """Train SmallNet from the user's netdef.py for ``epochs`` and save its state_dict to ``out``.

    ``start_from`` continues training an earlier checkpoint: a real retrain of the same model.
    """
    import torch

    torch.manual_seed(seed)
    model = _factory(folder, "SmallNet")()
    if start_from is not None:
        model.load_state_dict(torch.load(start_from, weights_only=True))
    x, y = _digit_tensors()
    _fit(model, x, y, epochs, seed)
    torch.save(model.state_dict(), out)
    return out


def train_mlp(folder: Path, out: Path, epochs: int, seed: int = 0, start_from: Path | None = None) -> Path:
    import torch

    from models.digits import digits_split, load_digits_arrays

    images, labels = load_digits_arrays()
    train_idx, _ = digits_split(labels)
    torch.manual_seed(seed)
    model = _factory(folder, "DigitsMLP")()
    if start_from is not None:
        model.load_state_dict(torch.load(start_from, weights_only=True))
    _fit(model, images[train_idx].reshape(-1, 64) / 16.0, labels[train_idx], epochs, seed)
    torch.save(model.state_dict(), out)
    return out


def write_digit_vectors(folder: Path, count: int = 12) -> dict[str, int]:
    """Test-split digits as raw 64-float32 ``.npy`` vectors plus labels.json; returns the labels."""
    from models.digits import digits_split, load_digits_arrays

    images, labels = load_digits_arrays()
    _, test_idx = digits_split(labels)
    folder.mkdir(parents=True, exist_ok=True)
    names = {}
    for n, index in enumerate(test_idx[:count]):
        name = f"digit{n:02d}.npy"
        np.save(folder / name, (images[index].reshape(64) / 16.0).astype(np.float32))
        names[name] = int(labels[index])
    (folder / "labels.json").write_text(json.dumps(names))
    return names


def _cutout(rgb: np.ndarray):
    from PIL import Image

    h, w = rgb.shape[:2]
    yy, xx = np.mgrid[:h, :w]
    inside = ((yy - h / 2) / (h / 2)) ** 2 + ((xx - w / 2) / (w / 2)) ** 2 <= 1
    rgba = np.zeros((h, w, 4), np.uint8)
    rgba[inside, :3] = rgb[inside]
    rgba[..., 3] = np.where(inside, 255, 0)
    return Image.fromarray(rgba, mode="RGBA")


def write_photos(folder: Path) -> list[str]:
    """scikit-image's bundled photos saved as a user's folder would hold them; returns the file names."""
    import skimage.data as data
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    photos = {
        # RGB JPEG at an odd size
        "astronaut.jpg": Image.fromarray(data.astronaut()).resize((131, 97)),
        # RGB JPEG, full size and landscape
        "coffee.jpg": Image.fromarray(data.coffee()),
        # 8-bit grayscale PNG, odd size
        "camera.png": Image.fromarray(data.camera()).resize((75, 61)),
        # 16-bit grayscale PNG
        "moon16.png": Image.fromarray(data.moon().astype(np.uint16) * 257),
        # RGBA PNG with real transparency: a round cut-out, black under the transparent corners
        "cutout.png": _cutout(data.astronaut()[::4, ::4]),
        # palette PNG
        "chelsea.png": Image.fromarray(data.chelsea()).quantize(colors=32),
        # grayscale JPEG, a thin strip
        "rocket.jpg": Image.fromarray(data.rocket()).convert("L").resize((300, 7)),
        # grayscale with alpha
        "coins.png": Image.fromarray(data.coins()).convert("LA").resize((97, 77)),
    }
    for name, img in photos.items():
        img.save(folder / name)
    return sorted(photos)


def write_settings(folder: Path, extra: str = "", pytest_ini: str = "") -> Path:
    """The user's pyproject.toml: export-check settings, and optionally pytest's."""
    preprocess = ", ".join(f"{k} = {json.dumps(v)}" for k, v in PREPROCESS.items())
    text = (
        '[project]\nname = "user-models"\nversion = "0"\n\n'
        "[tool.export-check]\n"
        'arch = "netdef.py:SmallNet"\n'
        'golden = "golden"\n'
        'inputs = "photos"\n'
        'out = "build/export-check"\n'
        f"{extra}"
        f"preprocess = {{ {preprocess} }}\n"
    )
    if pytest_ini:
        text += f"\n[tool.pytest.ini_options]\n{pytest_ini}"
    path = folder / "pyproject.toml"
    path.write_text(text)
    return path


def eager_logits(netdef: Path, factory: str, checkpoint: Path, inputs: list[np.ndarray]) -> np.ndarray:
    """The model's logits computed here, directly with torch, to check what the tool stored or printed."""
    import torch

    from export_check.checkpoint import resolve_factory

    model = resolve_factory(f"{netdef}:{factory}")()
    model.load_state_dict(torch.load(checkpoint, weights_only=True))
    with torch.inference_mode():
        return model.eval()(torch.from_numpy(np.stack(inputs).astype(np.float32))).numpy()


@dataclass(frozen=True)
class UserModels:
    folder: Path  # holds netdef.py
    v1: Path  # SmallNet trained 2 epochs
    v2: Path  # v1 retrained 2 more epochs (another shuffle): the same model, changed weights
    photos: Path
    photo_names: tuple[str, ...]

    def project(self, dest: Path, checkpoint: Path | None = None) -> Path:
        """A fresh copy of the user's folder: netdef.py, model.pth (``checkpoint``, default v1) and photos/."""
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copy(self.folder / "netdef.py", dest / "netdef.py")
        shutil.copy(checkpoint or self.v1, dest / "model.pth")
        shutil.copytree(self.photos, dest / "photos", dirs_exist_ok=True)
        return dest
