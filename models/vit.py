"""VisionTransformer: a small ViT.

Patch embedding (a conv with ``kernel = stride = patch_size``), a learnable class token and
position embedding, ``depth`` pre-norm encoder blocks
(``x + MHA(LN(x))`` then ``x + MLP(LN(x))`` with ``MLP = Linear -> GELU -> Linear``), a final
LayerNorm and a linear head on the class token.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class EncoderBlock(nn.Module):
    def __init__(self, dim: int, heads: int, mlp_dim: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp_dim), nn.GELU(), nn.Linear(mlp_dim, dim))

    def _self_attention(self, h: torch.Tensor) -> torch.Tensor:
        # nn.MultiheadAttention.forward takes a fused fast path (aten::_native_multi_head_attention)
        # in eval mode whenever grad is off. That path makes torch.jit.trace's sanity check fail
        # ("Graphs differed across invocations": the check re-traces under no_grad), and the legacy
        # ONNX exporter has no symbolic for it. So run the module's own unfused computation, with
        # its own parameters: same state_dict, same maths, same graph in every grad mode.
        attn = self.attn
        seq_first = h.transpose(0, 1)  # (N, B, E): the functional form is sequence-first
        out = F.multi_head_attention_forward(
            seq_first,
            seq_first,
            seq_first,
            attn.embed_dim,
            attn.num_heads,
            attn.in_proj_weight,
            attn.in_proj_bias,
            attn.bias_k,
            attn.bias_v,
            attn.add_zero_attn,
            attn.dropout,
            attn.out_proj.weight,
            attn.out_proj.bias,
            training=self.training,
            need_weights=False,
        )[0]
        return out.transpose(0, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self._self_attention(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class VisionTransformer(nn.Module):
    def __init__(
        self,
        num_classes: int = 10,
        in_channels: int = 3,
        image_size: int = 32,
        patch_size: int = 4,
        dim: int = 64,
        depth: int = 2,
        heads: int = 4,
        mlp_dim: int = 128,
    ) -> None:
        super().__init__()
        if num_classes < 1 or in_channels < 1:
            raise ValueError(f"num_classes and in_channels must be >= 1, got {num_classes} and {in_channels}")
        if patch_size < 1 or image_size < patch_size or image_size % patch_size != 0:
            raise ValueError(f"image_size ({image_size}) must be a positive multiple of patch_size ({patch_size})")
        if heads < 1 or dim % heads != 0:
            raise ValueError(f"dim ({dim}) must be divisible by heads ({heads})")
        if depth < 1 or mlp_dim < 1:
            raise ValueError(f"depth and mlp_dim must be >= 1, got {depth} and {mlp_dim}")
        self.num_classes = num_classes
        self.in_channels = in_channels
        self.image_size = image_size
        num_patches = (image_size // patch_size) ** 2
        self.patch_embed = nn.Conv2d(in_channels, dim, kernel_size=patch_size, stride=patch_size)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, num_patches + 1, dim))
        self.blocks = nn.Sequential(*[EncoderBlock(dim, heads, mlp_dim) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        nn.init.trunc_normal_(self.cls_token, std=0.02)
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.trunc_normal_(module.weight, std=0.02)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(x).flatten(2).transpose(1, 2)  # (B, N, dim)
        # Broadcast the class token against a zero slice of x instead of expand(x.shape[0], ...):
        # no batch size is read into a Python int, so a traced graph keeps the batch dynamic.
        cls = torch.zeros_like(x[:, :1, :]) + self.cls_token
        x = torch.cat([cls, x], dim=1) + self.pos_embed
        x = self.blocks(x)
        x = self.norm(x[:, 0])
        return self.head(x)
