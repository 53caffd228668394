"""Real models from small configs (random weights, nothing downloaded) for the
real-model suite: transformers language models of each kind, timm and torchvision vision
models. Each factory returns a :class:`RealModel`: the model in training mode with dropout
off, example inputs, and the training step (inputs -> scalar loss).

Needs the ``models`` extra (transformers, timm, torchvision). torchvision 0.28.0, the
release that matches torch 2.13, is on the package index only as a CUDA build whose C
extension does not load with the CPU torch: ``import torchvision`` then raises "operator
torchvision::nms does not exist" (its fake-kernel registrations assume the extension), and
timm, which imports torchvision, fails with it. :func:`import_torchvision` defines the two
schemas those registrations need when the extension is missing; the models used here call
none of torchvision's C ops.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F


def import_torchvision() -> Any:
    """``import torchvision``, with its C ops' schemas stubbed when its extension does not
    load (the CUDA wheel beside the CPU torch): the pure-Python parts then work."""
    try:
        return importlib.import_module("torchvision")
    except RuntimeError as e:
        if "torchvision::nms" not in str(e):
            raise
    for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
        del sys.modules[name]
    lib = torch.library.Library("torchvision", "DEF")  # noqa: TID251 - public API
    for op in ("nms", "qnms"):
        lib.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    _KEEP.append(lib)  # a Library's definitions last as long as the object
    return importlib.import_module("torchvision")


_KEEP: list[Any] = []

# transformers imports torchvision when it is installed (image processors), and so fails
# the same way: fix torchvision first.
if importlib.util.find_spec("torchvision") is not None:
    import_torchvision()


@dataclass
class RealModel:
    name: str
    kind: str  # "decoder", "encoder", "encoder-decoder", "moe", "conv", "vit"
    model: nn.Module
    args: tuple[Any, ...]
    step: Callable[..., torch.Tensor]
    random: bool = False  # the step draws random numbers (stochastic depth): seed to compare
    # gradients' absolute tolerance under Inductor where the model amplifies the order of sums
    # (torch's own Inductor step differs from its eager step by as much); None: the suite's
    inductor_atol: float | None = None
    # bytes Inductor may save fewer than planned: a saved slice of a concatenation it makes
    # compact rather than the concatenation (planned at the concatenation's size)
    inductor_saves_fewer: int = 0


def _lm(name: str, kind: str, model: nn.Module, vocab: int, batch: int = 2, seq: int = 32):
    ids = torch.randint(0, vocab, (batch, seq))

    def step(ids):
        return model(input_ids=ids, labels=ids).loss

    return RealModel(name, kind, model.train(), (ids,), step)


def gpt2() -> RealModel:
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(
        vocab_size=128, n_positions=64, n_embd=64, n_layer=2, n_head=4, bos_token_id=0,
        eos_token_id=0,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
    )  # fmt: skip
    return _lm("gpt2", "decoder", GPT2LMHeadModel(cfg), 128)


def gpt2_dropout() -> RealModel:
    """GPT-2 with its three dropouts at 0.1: random ops in the step."""
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(
        vocab_size=128, n_positions=64, n_embd=64, n_layer=2, n_head=4, bos_token_id=0,
        eos_token_id=0, resid_pdrop=0.1, embd_pdrop=0.1, attn_pdrop=0.1,
    )  # fmt: skip
    return _lm("gpt2-dropout", "decoder", GPT2LMHeadModel(cfg), 128)


def llama() -> RealModel:
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
    )  # fmt: skip
    return _lm("llama", "decoder", LlamaForCausalLM(cfg), 128)


def bert() -> RealModel:
    from transformers import BertConfig, BertForMaskedLM

    cfg = BertConfig(
        vocab_size=128, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=128, max_position_embeddings=64,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
    )  # fmt: skip
    return _lm("bert", "encoder", BertForMaskedLM(cfg), 128)


def t5() -> RealModel:
    from transformers import T5Config, T5ForConditionalGeneration

    cfg = T5Config(
        vocab_size=128, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_decoder_layers=2,
        num_heads=4, dropout_rate=0.0, decoder_start_token_id=0, pad_token_id=0,
    )  # fmt: skip
    return _lm("t5", "encoder-decoder", T5ForConditionalGeneration(cfg), 128)


def mixtral() -> RealModel:
    from transformers import MixtralConfig, MixtralForCausalLM

    cfg = MixtralConfig(
        vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
        num_experts_per_tok=2, max_position_embeddings=64,
    )  # fmt: skip
    return _lm("mixtral", "moe", MixtralForCausalLM(cfg), 128)


def whisper() -> RealModel:
    """An audio encoder-decoder: its encoder starts with two 1-d convolutions over the mel
    features (their workspace measured like 2-d ones: budget.estimators.conv_workspace)."""
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    cfg = WhisperConfig(
        vocab_size=128, num_mel_bins=16, d_model=64, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
        decoder_ffn_dim=128, max_source_positions=32, max_target_positions=32, dropout=0.0,
        attention_dropout=0.0, activation_dropout=0.0, pad_token_id=0, bos_token_id=1,
        eos_token_id=2, decoder_start_token_id=1, suppress_tokens=None,
        begin_suppress_tokens=None,
    )  # fmt: skip
    model = WhisperForConditionalGeneration(cfg)
    features, labels = torch.randn(2, 16, 64), torch.randint(3, 128, (2, 16))

    def step(features, labels):
        return model(input_features=features, labels=labels).loss

    return RealModel("whisper", "encoder-decoder", model.train(), (features, labels), step)


def vision(name: str, kind: str, model: nn.Module, size: int = 32, batch: int = 2):
    """An image classifier's step: cross-entropy over 10 classes of ``batch`` random
    images of ``size`` x ``size`` pixels."""
    x = torch.randn(batch, 3, size, size)
    y = torch.randint(0, 10, (batch,))

    def step(x, y):
        return F.cross_entropy(model(x), y)

    return RealModel(name, kind, model.train(), (x, y), step)


def timm_model(arch: str, kind: str, size: int = 64, batch: int = 2, **kw: Any) -> RealModel:
    import_torchvision()
    import timm

    model = timm.create_model(arch, pretrained=False, num_classes=10, drop_rate=0.0, **kw)
    return vision(f"timm:{arch}", kind, model, size, batch)


def torchvision_model(arch: str, kind: str, size: int = 64) -> RealModel:
    tv = import_torchvision()
    return vision(f"torchvision:{arch}", kind, getattr(tv.models, arch)(num_classes=10), size)


FACTORIES: dict[str, Callable[[], RealModel]] = {
    "gpt2": gpt2,
    "llama": llama,
    "bert": bert,
    "t5": t5,
    "mixtral": mixtral,
    "whisper": whisper,
    "timm:resnet10t": lambda: timm_model("resnet10t", "conv"),
    "timm:convnext_atto": lambda: timm_model("convnext_atto", "conv"),
    "timm:mobilenetv3_small_050": lambda: timm_model("mobilenetv3_small_050", "conv"),
    "timm:vit_tiny_patch16_224": lambda: timm_model(
        "vit_tiny_patch16_224", "vit", size=32, img_size=32, patch_size=8, depth=2
    ),
    # window attention, and stochastic depth on by default (drop_path_rate 0.1): an in-place
    # write (DropPath's mask, r.div_) to a tensor the block makes, read afterwards
    "timm:swin_tiny_patch4_window7_224": lambda: replace(
        timm_model(
            "swin_tiny_patch4_window7_224",
            "vit",
            size=32,
            img_size=32,
            window_size=4,
            embed_dim=32,
            depths=(1, 1),
            num_heads=(2, 2),
        ),
        random=True,
    ),
    "torchvision:resnet18": lambda: torchvision_model("resnet18", "conv"),
}


def every() -> dict[str, Callable[[], RealModel]]:
    """The default models and the whole grid's others (helpers/more_models.py)."""
    from helpers.more_models import MORE  # it builds on this module

    return FACTORIES | MORE


def make(name: str) -> RealModel:
    """A fresh model (seeded: the same weights and inputs every call), of either set."""
    torch.manual_seed(0)
    return every()[name]()
