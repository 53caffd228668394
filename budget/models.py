"""Built-in example models: a training step to plan without downloading anything.

``budget solve`` and the benchmarks need real training steps to plan: a small GPT-style
decoder (attention, LayerNorm, GELU MLP, cross-entropy), a small ResNet (convolutions,
BatchNorm with running-stat buffers) and an MLP. Each factory returns an :class:`Example`:
the module, seeded example inputs and a ``step(*args) -> loss`` that runs the model and
computes the scalar training loss, so ``budget.plan(ex.step, *ex.args)`` and
``torch.compile(ex.step)`` work as they are. Sizes are keyword options
(:func:`builtin_defaults` lists them); ``ex.options`` records the ones used.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class Example:
    """A model, example inputs, and the training step ``step(*args) -> scalar loss``."""

    name: str
    model: nn.Module
    args: tuple
    step: Callable[..., torch.Tensor]
    options: dict[str, int | float] = field(default_factory=dict)  # the sizes it was built with

    def describe(self) -> str:
        """'builtin:gpt vocab=1024 d=256 ...': the target string and its sizes."""
        return " ".join([f"builtin:{self.name}"] + [f"{k}={v}" for k, v in self.options.items()])


# --------------------------------------------------------------------------- GPT


@dataclass
class GPTConfig:
    vocab: int = 1024
    d: int = 256
    heads: int = 4
    layers: int = 4
    seq: int = 256
    batch: int = 4
    dropout: float = 0.0


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        if cfg.d % cfg.heads:
            raise ValueError(f"d={cfg.d} must be divisible by heads={cfg.heads}")
        self.heads = cfg.heads
        self.dropout = cfg.dropout
        self.qkv = nn.Linear(cfg.d, 3 * cfg.d)
        self.proj = nn.Linear(cfg.d, cfg.d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        p = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d)
        self.attn = CausalSelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.d)
        self.mlp = nn.Sequential(
            nn.Linear(cfg.d, 4 * cfg.d),
            nn.GELU(),
            nn.Linear(4 * cfg.d, cfg.d),
            nn.Dropout(cfg.dropout),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """A small GPT-style decoder: pre-LayerNorm blocks, causal attention, LM head."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab, cfg.d)
        self.pos = nn.Embedding(cfg.seq, cfg.d)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.ln_f = nn.LayerNorm(cfg.d)
        self.head = nn.Linear(cfg.d, cfg.vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok(idx) + self.pos(pos)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def gpt(**opts: int | float) -> Example:
    """GPT language model; options: the fields of :class:`GPTConfig`."""
    cfg = GPTConfig(**opts)  # type: ignore[arg-type]
    torch.manual_seed(0)
    model = GPT(cfg)
    gen = torch.Generator().manual_seed(1)
    idx = torch.randint(cfg.vocab, (cfg.batch, cfg.seq), generator=gen)
    targets = torch.randint(cfg.vocab, (cfg.batch, cfg.seq), generator=gen)

    def step(idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = model(idx)
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))

    return Example("gpt", model, (idx, targets), step, asdict(cfg))


# --------------------------------------------------------------------------- ResNet


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.short = nn.Identity()
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + self.short(x))


class ResNet(nn.Module):
    """A small residual convnet: conv stem, BasicBlock stages, global pool, linear."""

    def __init__(self, width: int = 32, blocks: int = 2, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU()
        )
        layers, cin = [], width
        for stage in range(3):
            cout = width * 2**stage
            for i in range(blocks):
                layers.append(BasicBlock(cin, cout, 2 if stage > 0 and i == 0 else 1))
                cin = cout
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def resnet(
    *, batch: int = 8, size: int = 64, width: int = 32, blocks: int = 2, classes: int = 10
) -> Example:
    """ResNet image classifier on ``batch x 3 x size x size`` inputs."""
    torch.manual_seed(0)
    model = ResNet(width, blocks, classes)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(batch, 3, size, size, generator=gen)
    y = torch.randint(classes, (batch,), generator=gen)

    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(model(x), y)

    options = {"batch": batch, "size": size, "width": width, "blocks": blocks, "classes": classes}
    return Example("resnet", model, (x, y), step, options)


# --------------------------------------------------------------------------- MLP


class MLP(nn.Module):
    """Linear + GELU layers, then a linear classifier."""

    def __init__(self, d_in: int = 256, d: int = 1024, layers: int = 4, classes: int = 10) -> None:
        super().__init__()
        dims = [d_in] + [d] * layers
        body: list[nn.Module] = []
        for a, b in zip(dims[:-1], dims[1:], strict=True):
            body += [nn.Linear(a, b), nn.GELU()]
        self.body = nn.Sequential(*body)
        self.out = nn.Linear(dims[-1], classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.body(x))


def mlp(
    *, batch: int = 64, d_in: int = 256, d: int = 1024, layers: int = 4, classes: int = 10
) -> Example:
    """MLP classifier on ``batch x d_in`` inputs."""
    torch.manual_seed(0)
    model = MLP(d_in, d, layers, classes)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(batch, d_in, generator=gen)
    y = torch.randint(classes, (batch,), generator=gen)

    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(model(x), y)

    options = {"batch": batch, "d_in": d_in, "d": d, "layers": layers, "classes": classes}
    return Example("mlp", model, (x, y), step, options)


BUILTINS: dict[str, Callable[..., Example]] = {"gpt": gpt, "resnet": resnet, "mlp": mlp}


def get_builtin(name: str, **opts: int | float) -> Example:
    """The built-in example ``name`` with size options; ValueError lists the names."""
    factory = BUILTINS.get(name)
    if factory is None:
        raise ValueError(f"unknown built-in model {name!r}; available: {', '.join(BUILTINS)}")
    allowed = builtin_options(name)
    unknown = sorted(set(opts) - set(allowed))
    if unknown:
        raise ValueError(
            f"built-in model {name!r} has no option {', '.join(unknown)}; "
            f"options: {', '.join(allowed)}"
        )
    return factory(**opts)


def builtin_options(name: str) -> list[str]:
    """The size options the built-in ``name`` accepts."""
    return list(builtin_defaults(name))


def builtin_defaults(name: str) -> dict[str, int | float]:
    """The size options of the built-in ``name`` and their default values."""
    if name == "gpt":
        return {f.name: f.default for f in fields(GPTConfig)}  # type: ignore[misc]
    params = inspect.signature(BUILTINS[name]).parameters.values()
    return {p.name: p.default for p in params}
