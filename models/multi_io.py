"""Multi-input / multi-output reference models: a detector, a CTC recogniser, a token classifier, a two-input net.

Small, plain PyTorch models for exercising export-check beyond "one image in, one logits tensor out".
They are trained on scikit-learn's digits by ``models/train_multi_io.py`` (data: ``models/multi_io_data.py``).
Pixel inputs are intensities ``value / 16`` in [0, 1] with a 0 background; no batch size or sequence
length is ever read into a Python int, so traced and ONNX graphs keep those axes dynamic.

* :class:`DigitDetector` ``(x) -> (boxes, scores)`` and :class:`DigitDetectorDict` ``(x) -> {"boxes", "scores"}``
  (same parameters, one checkpoint loads into both);
* :class:`SequenceRecognizer` ``(image) -> log_probs``, time-major ``(T, N, C)`` for ``nn.CTCLoss``;
* :class:`TokenClassifier` ``(input_ids, attention_mask) -> logits`` and :class:`TokenClassifierStock`
  (same parameters, calls the stock ``nn.TransformerEncoder.forward`` instead);
* :class:`TwoInputNet` ``(image, meta) -> logits``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

BLANK = 0  # CTC blank index of SequenceRecognizer; digit d is class d + 1
PAD_ID = 17  # TokenClassifier padding token; tokens 0..16 are pixel intensities


class DigitDetector(nn.Module):
    """One digit on a 32x32 canvas -> ``(boxes (N, 4) in [0, 1] as x0, y0, x1, y1, scores (N, num_classes) logits)``.

    Three conv/ReLU/max-pool stages (32 -> 4 px), flatten (keeps where the digit is), a shared hidden
    layer, then a sigmoid box head and a class-logit head.
    """

    def __init__(self, num_classes: int = 10, image_size: int = 32, width: int = 16, hidden: int = 64) -> None:
        super().__init__()
        if image_size < 8 or image_size % 8 != 0:
            raise ValueError(f"image_size must be a positive multiple of 8 (three 2x2 max-pools), got {image_size}")
        self.num_classes = num_classes
        self.image_size = image_size
        self.features = nn.Sequential(
            nn.Conv2d(1, width, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(2 * width, 2 * width, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        side = image_size // 8
        self.hidden = nn.Sequential(nn.Linear(2 * width * side * side, hidden), nn.ReLU())
        self.box_head = nn.Linear(hidden, 4)
        self.cls_head = nn.Linear(hidden, num_classes)

    def predict(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.hidden(self.features(x).flatten(1))
        return torch.sigmoid(self.box_head(h)), self.cls_head(h)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.predict(x)


class DigitDetectorDict(DigitDetector):
    """:class:`DigitDetector` returning ``{"boxes": (N, 4), "scores": (N, num_classes)}``; same state_dict."""

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:  # type: ignore[override]
        boxes, scores = self.predict(x)
        return {"boxes": boxes, "scores": scores}


class SequenceRecognizer(nn.Module):
    """A row of digits ``(N, 1, 16, W)`` -> CTC log-probabilities ``(T = W // 4, N, num_classes + 1)``, time-major.

    Two conv/ReLU/max-pool stages (16 x W -> 4 x W/4), a ``(4, 1)`` conv that folds the height into
    channels, a bidirectional LSTM over the W/4 columns and a linear layer. Class 0 is the CTC
    blank, class ``d + 1`` is digit ``d``. Any W that is a multiple of 4 works; training uses 48, 64 and 80.
    """

    def __init__(self, num_classes: int = 10, height: int = 16, width: int = 16, channels: int = 64, hidden: int = 48) -> None:
        super().__init__()
        if height < 4 or height % 4 != 0:
            raise ValueError(f"height must be a positive multiple of 4 (two 2x2 max-pools), got {height}")
        self.num_classes = num_classes
        self.height = height
        self.features = nn.Sequential(
            nn.Conv2d(1, width, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(2 * width, channels, (height // 4, 1)),  # height -> 1
            nn.ReLU(),
        )
        self.rnn = nn.LSTM(channels, hidden, bidirectional=True)
        self.classifier = nn.Linear(2 * hidden, num_classes + 1)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        h = self.features(image).squeeze(2).permute(2, 0, 1)  # (T, N, channels)
        h, _ = self.rnn(h)
        return F.log_softmax(self.classifier(h), dim=-1)


class TokenClassifier(nn.Module):
    """Token ids ``(N, L)`` plus ``attention_mask (N, L)`` (1 = real token) -> class logits ``(N, num_classes)``.

    Token + learned position embeddings, an ``nn.TransformerEncoder`` (post-norm, ReLU, no dropout),
    and a mean over the real tokens. ``forward`` runs the encoder layers' own parameters through an
    explicit masked attention (no fused kernel, no Python ints from shapes), so trace, script and ONNX
    all keep L dynamic; :class:`TokenClassifierStock` calls the stock ``nn.TransformerEncoder.forward``
    with the same state_dict. Padded positions never reach a real token or the pool.
    """

    def __init__(
        self,
        num_classes: int = 10,
        vocab_size: int = PAD_ID + 1,
        max_len: int = 64,
        dim: int = 32,
        depth: int = 2,
        heads: int = 4,
        mlp_dim: int = 64,
        pad_id: int = PAD_ID,
    ) -> None:
        super().__init__()
        if heads < 1 or dim % heads != 0:
            raise ValueError(f"dim ({dim}) must be divisible by heads ({heads})")
        if not 0 <= pad_id < vocab_size:
            raise ValueError(f"pad_id must be in 0..{vocab_size - 1}, got {pad_id}")
        self.num_classes = num_classes
        self.max_len = max_len
        self.heads = heads
        self.token_embed = nn.Embedding(vocab_size, dim, padding_idx=pad_id)
        self.pos_embed = nn.Embedding(max_len, dim)
        layer = nn.TransformerEncoderLayer(dim, heads, mlp_dim, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.head = nn.Linear(dim, num_classes)
        for embedding in (self.token_embed, self.pos_embed):  # N(0, 1) embeddings train worse on 1437 digits
            nn.init.normal_(embedding.weight, std=0.1)
        with torch.no_grad():
            self.token_embed.weight[pad_id].zero_()

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        return self.token_embed(input_ids) + self.pos_embed(positions)

    def encode(self, h: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        # Additive key mask (N, 1, 1, L): -1e9 on padding, so exp() gives exactly 0 and no row is all -inf.
        key_bias = (attention_mask == 0).to(h.dtype)[:, None, None, :] * -1e9
        for layer in self.encoder.layers:
            attn = layer.self_attn
            qkv = F.linear(h, attn.in_proj_weight, attn.in_proj_bias).unflatten(-1, (3, self.heads, -1))
            q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each (N, heads, L, head_dim)
            scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]) + key_bias
            out = (scores.softmax(-1) @ v).transpose(1, 2).flatten(2)
            h = layer.norm1(h + attn.out_proj(out))
            h = layer.norm2(h + layer.linear2(F.relu(layer.linear1(h))))
        return h

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        h = self.encode(self.embed(input_ids), attention_mask)
        weight = attention_mask.unsqueeze(-1).to(h.dtype)
        pooled = (h * weight).sum(1) / weight.sum(1).clamp(min=1.0)
        return self.head(pooled)


class TokenClassifierStock(TokenClassifier):
    """:class:`TokenClassifier` through ``nn.TransformerEncoder.forward(src_key_padding_mask=...)``; same state_dict.

    What a typical user model does. In eval mode with grad off, PyTorch swaps in the fused
    ``aten::_transformer_encoder_layer_fwd``; see models/README.md for what that does to export.
    """

    def encode(self, h: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.encoder(h, src_key_padding_mask=attention_mask == 0)


class TwoInputNet(nn.Module):
    """``image (N, 1, 8, 8)`` and ``meta (N, 4)`` per-image statistics -> class logits ``(N, num_classes)``.

    A two-conv image branch and a one-layer meta branch, concatenated before the classifier.
    """

    def __init__(self, num_classes: int = 10, meta_features: int = 4, width: int = 16, hidden: int = 64) -> None:
        super().__init__()
        self.num_classes = num_classes
        self.image_branch = nn.Sequential(
            nn.Conv2d(1, width, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(width, 2 * width, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(2 * width * 4 * 4, hidden),
            nn.ReLU(),
        )
        self.meta_branch = nn.Sequential(nn.Linear(meta_features, 16), nn.ReLU())
        self.classifier = nn.Linear(hidden + 16, num_classes)

    def forward(self, image: torch.Tensor, meta: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.cat([self.image_branch(image), self.meta_branch(meta)], dim=1))


MULTI_IO_ARCHITECTURES: dict[str, type[nn.Module]] = {
    "digit_detector": DigitDetector,
    "sequence_recognizer": SequenceRecognizer,
    "token_classifier": TokenClassifier,
    "two_input_net": TwoInputNet,
}
