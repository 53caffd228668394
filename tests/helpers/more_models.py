"""More real models from small configs, for the whole grid only (``-m full``): one of each
architecture the default set (real_models.FACTORIES) does not have. transformers decoders
(grouped-query attention, sliding windows, logit soft-capping, partial rotary embeddings,
parallel attention and MLP), encoders trained as masked LMs (labels -100 off the masked
positions; ALBERT's layer shared across depth), a state-space model, an encoder-decoder; transformers and timm vision models
(depthwise convolutions with squeeze-excitation, grouped convolutions, dense concatenation,
stochastic depth).

Each factory returns a :class:`~helpers.real_models.RealModel` with dropout off and, where
the model has one, its KV cache off (as transformers trains under checkpointing).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch
import torch.nn as nn

from helpers.real_models import RealModel, import_torchvision, timm_model, vision

V = 128  # vocabulary
TOKENS = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2)
# the decoders' shared shape: 2 layers of width 64, 4 heads over 2 key-value heads
DECODER = dict(
    vocab_size=V, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, **TOKENS,
)  # fmt: skip


def _lm(name: str, kind: str, model: nn.Module, *, masked: bool = False) -> RealModel:
    """A language model's step on (2, 32) token ids (special tokens left out); a masked LM
    predicts about 15% of the positions (the first always), the rest labelled -100."""
    ids = torch.randint(3, V, (2, 32))
    labels = ids
    if masked:
        keep = torch.rand(2, 32) < 0.15
        keep[:, 0] = True
        labels = ids.masked_fill(~keep, -100)
    if getattr(getattr(model, "config", None), "use_cache", None) is not None:
        model.config.use_cache = False

    def step(ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return model(input_ids=ids, labels=labels).loss

    return RealModel(name, kind, model.train(), (ids, labels), step)


def qwen2() -> RealModel:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    return _lm("qwen2", "decoder", Qwen2ForCausalLM(Qwen2Config(**DECODER)))


def qwen3() -> RealModel:
    """Qwen3: RMS norms on the queries and keys."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    return _lm("qwen3", "decoder", Qwen3ForCausalLM(Qwen3Config(**DECODER, head_dim=16)))


def gemma2() -> RealModel:
    """Gemma 2: sliding-window layers, attention and final logit soft-capping."""
    from transformers import Gemma2Config, Gemma2ForCausalLM

    cfg = Gemma2Config(
        **DECODER, head_dim=16, sliding_window=16, attn_logit_softcapping=50.0,
        final_logit_softcapping=30.0, attention_dropout=0.0,
    )  # fmt: skip
    return _lm("gemma2", "decoder", Gemma2ForCausalLM(cfg))


def gemma3() -> RealModel:
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    cfg = Gemma3TextConfig(**DECODER, head_dim=16, sliding_window=16, attention_dropout=0.0)
    return _lm("gemma3", "decoder", Gemma3ForCausalLM(cfg))


def mistral() -> RealModel:
    from transformers import MistralConfig, MistralForCausalLM

    return _lm(
        "mistral", "decoder", MistralForCausalLM(MistralConfig(**DECODER, sliding_window=16))
    )


def phi3() -> RealModel:
    """Phi-3: fused QKV and gate-up projections."""
    from transformers import Phi3Config, Phi3ForCausalLM

    cfg = Phi3Config(
        **DECODER, original_max_position_embeddings=64, resid_pdrop=0.0, embd_pdrop=0.0,
        attention_dropout=0.0,
    )  # fmt: skip
    return _lm("phi3", "decoder", Phi3ForCausalLM(cfg))


def gpt_neox() -> RealModel:
    """GPT-NeoX: rotary embeddings on a quarter of each head, parallel attention and MLP."""
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    cfg = GPTNeoXConfig(
        vocab_size=V, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, max_position_embeddings=64, rotary_pct=0.25,
        hidden_dropout=0.0, attention_dropout=0.0, **TOKENS,
    )  # fmt: skip
    return _lm("gpt_neox", "decoder", GPTNeoXForCausalLM(cfg))


def opt() -> RealModel:
    from transformers import OPTConfig, OPTForCausalLM

    cfg = OPTConfig(
        vocab_size=V, hidden_size=64, ffn_dim=128, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=64, word_embed_proj_dim=64, dropout=0.0,
        attention_dropout=0.0, layerdrop=0.0, **TOKENS,
    )  # fmt: skip
    return _lm("opt", "decoder", OPTForCausalLM(cfg))


def falcon() -> RealModel:
    """Falcon: multi-query attention, parallel attention and MLP."""
    from transformers import FalconConfig, FalconForCausalLM

    cfg = FalconConfig(
        vocab_size=V, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        hidden_dropout=0.0, attention_dropout=0.0, max_position_embeddings=64, **TOKENS,
    )  # fmt: skip
    return _lm("falcon", "decoder", FalconForCausalLM(cfg))


def roberta() -> RealModel:
    from transformers import RobertaConfig, RobertaForMaskedLM

    cfg = RobertaConfig(
        vocab_size=V, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=128, max_position_embeddings=66, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0, pad_token_id=1, bos_token_id=0, eos_token_id=2,
    )  # fmt: skip
    return _lm("roberta", "encoder", RobertaForMaskedLM(cfg), masked=True)


def deberta_v2() -> RealModel:
    """DeBERTa-v2: disentangled relative-position attention (content-to-position and back)."""
    from transformers import DebertaV2Config, DebertaV2ForMaskedLM

    cfg = DebertaV2Config(
        vocab_size=V, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=128, max_position_embeddings=64, relative_attention=True,
        pos_att_type=["p2c", "c2p"], position_buckets=16, max_relative_positions=-1,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, pad_token_id=0,
    )  # fmt: skip
    return _lm("deberta_v2", "encoder", DebertaV2ForMaskedLM(cfg), masked=True)


def albert() -> RealModel:
    """ALBERT: one layer shared across depth, run four times a step (each run a region of
    budget.apply's), factorised embeddings."""
    from transformers import AlbertConfig, AlbertForMaskedLM

    cfg = AlbertConfig(
        vocab_size=V, embedding_size=32, hidden_size=64, num_hidden_layers=4,
        num_attention_heads=4, intermediate_size=128, max_position_embeddings=64,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **TOKENS,
    )  # fmt: skip
    return _lm("albert", "encoder", AlbertForMaskedLM(cfg), masked=True)


def modernbert() -> RealModel:
    """ModernBERT: alternating local and global attention, gated MLPs, no biases."""
    from transformers import ModernBertConfig, ModernBertForMaskedLM

    cfg = ModernBertConfig(
        vocab_size=V, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, max_position_embeddings=64, local_attention=16,
        global_attn_every_n_layers=2, embedding_dropout=0.0, attention_dropout=0.0,
        mlp_dropout=0.0, classifier_dropout=0.0, cls_token_id=1, sep_token_id=2, **TOKENS,
    )  # fmt: skip
    if hasattr(cfg, "reference_compile"):
        cfg.reference_compile = False  # its own torch.compile of the MLP: budget's to do
    return _lm("modernbert", "encoder", ModernBertForMaskedLM(cfg), masked=True)


def mamba() -> RealModel:
    """Mamba: a selective state-space scan (a Python loop over the sequence, without the
    CUDA kernels), a causal depthwise 1-d convolution."""
    from transformers import MambaConfig, MambaForCausalLM

    cfg = MambaConfig(
        vocab_size=V, hidden_size=64, state_size=8, num_hidden_layers=2, expand=2,
        conv_kernel=4, use_cache=False, **TOKENS,
    )  # fmt: skip
    # at b=1 one layer's saved scan state, a slice of a concatenation, is compact under Inductor
    return replace(_lm("mamba", "ssm", MambaForCausalLM(cfg)), inductor_saves_fewer=2 * 128 * 8 * 4)


def bart() -> RealModel:
    from transformers import BartConfig, BartForConditionalGeneration

    cfg = BartConfig(
        vocab_size=V, d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
        max_position_embeddings=64, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
        decoder_start_token_id=2, forced_eos_token_id=None, **TOKENS,
    )  # fmt: skip
    return _lm("bart", "encoder-decoder", BartForConditionalGeneration(cfg))


def _image_classifier(name: str, kind: str, model: nn.Module) -> RealModel:
    """A transformers image classifier's step on (2, 3, 32, 32) pixels and 10 labels."""
    x, y = torch.randn(2, 3, 32, 32), torch.randint(0, 10, (2,))

    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return model(pixel_values=x, labels=y).loss

    return RealModel(name, kind, model.train(), (x, y), step)


def hf_vit() -> RealModel:
    from transformers import ViTConfig, ViTForImageClassification

    cfg = ViTConfig(
        image_size=32, patch_size=8, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=128, num_labels=10, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )  # fmt: skip
    return _image_classifier("hf_vit", "vit", ViTForImageClassification(cfg))


def hf_swin() -> RealModel:
    from transformers import SwinConfig, SwinForImageClassification

    cfg = SwinConfig(
        image_size=32, patch_size=4, embed_dim=32, depths=[1, 1], num_heads=[2, 2],
        window_size=4, num_labels=10, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0, drop_path_rate=0.0,
    )  # fmt: skip
    return _image_classifier("hf_swin", "vit", SwinForImageClassification(cfg))


def densenet_tiny() -> RealModel:
    """A DenseNet of four blocks of two layers (every layer reads the concatenation of all
    before it) on 2 images of 64x64 pixels."""
    import_torchvision()
    from timm.models.densenet import DenseNet

    model = DenseNet(growth_rate=8, block_config=(2, 2, 2, 2), num_classes=10, drop_rate=0.0)
    return vision("timm:densenet_tiny", "conv", model, size=64)


MORE: dict[str, Callable[[], RealModel]] = {
    f.__name__: f
    for f in (qwen2, qwen3, gemma2, gemma3, mistral, phi3, gpt_neox, opt, falcon, roberta)
}
MORE |= {f.__name__: f for f in (deberta_v2, albert, modernbert, mamba, bart, hf_vit, hf_swin)}
# timm: (kind, timm_model's keywords), by default 2 images of 64x64 pixels
_TIMM: dict[str, tuple[str, dict[str, Any]]] = {
    "regnetx_002": ("conv", {}),
    "deit_tiny_patch16_224": ("vit", dict(size=32, img_size=32, patch_size=8, depth=2)),
}
MORE |= {
    f"timm:{arch}": (lambda arch=arch, kind=kind, kw=kw: timm_model(arch, kind, **kw))
    for arch, (kind, kw) in _TIMM.items()
}
# EfficientNet's last BatchNorms normalise 2x2 pixels: over 2 images its stem's gradient
# varies with the order of sums by more than the suite's Inductor tolerance (torch's own
# Inductor step against its own eager step); over 8 images by less than 1e-3
MORE["timm:efficientnet_b0"] = lambda: replace(
    timm_model("efficientnet_b0", "conv", batch=8), inductor_atol=1e-3
)
MORE["timm:densenet_tiny"] = densenet_tiny
MORE["timm:resnet10t-drop-path"] = lambda: replace(
    timm_model("resnet10t", "conv", size=32, drop_path_rate=0.1),
    name="timm:resnet10t-drop-path",
    random=True,
)
