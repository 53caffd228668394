"""budget.apply on transformers models built from small configs (random weights), with
``eager`` and ``sdpa`` attention.

With ``sdpa`` the mask helpers read tensor values (is the batch packed? padded?) to decide
whether to build a mask or let sdpa use ``is_causal``; on fake tensors transformers skips
those reads (``is_tracing``) and builds the mask, so the trace ran other op calls than the
real step (PlanMismatchError at the first step). The trace now answers such reads with the
real values and tells transformers it is not tracing (budget/eager/trace.py).
"""

from __future__ import annotations

import copy

# first: makes the installed torchvision importable (its CUDA build's C ops do not load
# beside the CPU torch), which transformers' model imports need
import helpers.real_models  # noqa: E402, F401
import pytest
import torch

import budget
from budget.eager.measure import measure_eager
from budget.runtime.measure import measure_peak

tf = pytest.importorskip("transformers")

# Bytes the real step keeps that the trace does not see (constant, in the unmodified model
# too): measured - predicted. They are the Python floats of ``tensor * 0.5``: autograd keeps
# the 0-dim float64 tensor made for the scalar (8 bytes) without calling the saved-tensor
# hooks the trace counts with. GPT-2's gelu_new has three per layer, eager attention's
# ``* scaling`` one; sdpa none.
UNSEEN = {
    ("gpt2", "eager"): 64,
    ("llama", "eager"): 16,
    ("gpt2", "sdpa"): 48,
    ("llama", "sdpa"): 0,
    ("mixtral", "sdpa"): 0,
}


KINDS = [("gpt2", "eager"), ("gpt2", "sdpa"), ("llama", "eager"), ("llama", "sdpa")]
KINDS.append(("mixtral", "sdpa"))  # experts through torch._grouped_mm


def _model(kind: str, attn: str = "eager"):
    torch.manual_seed(0)
    if kind == "gpt2":
        cfg = tf.GPT2Config(
            n_layer=2,
            n_embd=64,
            n_head=4,
            n_positions=64,
            vocab_size=128,
            use_cache=False,
            attn_implementation=attn,
        )
        return tf.GPT2LMHeadModel(cfg).train()
    llama = dict(
        num_hidden_layers=2,
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=128,
        max_position_embeddings=64,
        use_cache=False,
        attn_implementation=attn,
    )
    if kind == "mixtral":  # Llama's layers, with experts: torch._grouped_mm in float32
        cfg = tf.MixtralConfig(**llama, num_local_experts=4, num_experts_per_tok=2)
        return tf.MixtralForCausalLM(cfg).train()
    return tf.LlamaForCausalLM(tf.LlamaConfig(**llama)).train()


@pytest.mark.parametrize("kind,attn", KINDS)
def test_plans_bytes_flops_and_gradients(kind, attn):
    model = _model(kind, attn)
    ref = copy.deepcopy(model)
    ids = torch.randint(128, (2, 32), generator=torch.Generator().manual_seed(1))

    def step(m):
        return lambda: m(input_ids=ids, labels=ids).loss

    torch.manual_seed(0)
    base = measure_eager(step(ref))
    for b in (0.5, 0.0):
        plan = budget.apply(model, ids, labels=ids, memory_budget=b)  # the model's own loss
        layers = "transformer.h" if kind == "gpt2" else "model.layers"
        if kind == "mixtral":  # the experts' matmuls are priced: recomputing them is not free
            assert plan.recompute_flops > 0
        assert plan.checkpointed == [f"{layers}.0", f"{layers}.1"]
        torch.manual_seed(0)
        m = measure_eager(step(model))
        assert m.retained_bytes - plan.saved_bytes == UNSEEN[kind, attn]
        assert base.retained_bytes - plan.max_bytes == UNSEEN[kind, attn]
        assert m.backward_flops - base.backward_flops == plan.recompute_flops
        for a in (model, ref):
            a.zero_grad(set_to_none=True)
            torch.manual_seed(5)
            step(a)().backward()
        for p, q in zip(model.parameters(), ref.parameters(), strict=True):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6)
        budget.unapply(model)


@pytest.mark.parametrize("padded", [False, True])
def test_sdpa_mask_follows_the_real_attention_mask(padded):
    """The mask helpers read the 2D attention mask: all ones lets sdpa use ``is_causal`` (no
    mask), padding builds one. The plan follows the values it is given; a step whose values
    take the other path is refused."""
    model = _model("llama", "sdpa")
    ref = copy.deepcopy(model)
    ids = torch.randint(128, (2, 32), generator=torch.Generator().manual_seed(1))
    ones = torch.ones_like(ids)
    mask = ones.clone()
    mask[0, :5] = 0  # left padding
    given, other = (mask, ones) if padded else (ones, mask)
    budget.apply(model, ids, attention_mask=given, labels=ids, memory_budget=0.0)
    for a in (model, ref):
        a.zero_grad(set_to_none=True)
        a(input_ids=ids, attention_mask=given, labels=ids).loss.backward()
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6)
    with pytest.raises(budget.PlanMismatchError):
        model(input_ids=ids, attention_mask=other, labels=ids)
    budget.unapply(model)


@pytest.mark.parametrize("kind,attn", KINDS)
def test_predicted_peak_and_no_trace_left_on_tied_weights(kind, attn):
    """The peak of the step with the plan applied, run on fake tensors, is the measured
    one to the byte (the scalar tensors above, UNSEEN to the saved-tensor hooks, are
    counted where autograd saves them); GPT-2 ties lm_head to the embedding: the
    fake runs must not leave a fake gradient on the real, tied parameter."""
    model = _model(kind, attn)
    ids = torch.randint(128, (2, 32), generator=torch.Generator().manual_seed(1))
    for b in (1.0, 0.0):
        plan = budget.apply(model, ids, labels=ids, memory_budget=b)
        assert all(p.grad is None for p in model.parameters())
        torch.manual_seed(0)
        measured = measure_peak(lambda: model(input_ids=ids, labels=ids).loss)
        assert plan.peak_bytes == measured, (b, plan.peak_bytes - measured)
        model.zero_grad(set_to_none=True)
        budget.unapply(model)


def test_a_model_training_with_its_kv_cache_on_is_refused():
    model = _model("gpt2")
    ids = torch.randint(0, 128, (2, 16))
    model.config.use_cache = True  # the default: every layer updates the cache
    with pytest.raises(ValueError, match=r"model.config.use_cache = False"):
        budget.apply(model, input_ids=ids, labels=ids, memory_budget=0.5)
    model.config.use_cache = False
    assert budget.apply(model, input_ids=ids, labels=ids, memory_budget=0.5).checkpointed


def test_layers_given_a_cache_they_update_are_left_out_saying_why():
    """T5's decoder layers are handed an EncoderDecoderCache even with use_cache=False:
    the cross-attention keys and values are written there on the first run, so a
    recomputed layer would take another path (torch's checkpoint failed in the backward)."""
    from helpers.real_models import make

    m, ref = make("t5"), make("t5")
    for model in (m.model, ref.model):
        model.config.use_cache = False
    ref.step(*ref.args).backward()
    plan = budget.apply(m.model, *m.args, step=m.step, memory_budget=0.0)
    assert plan.checkpointed == ["encoder.block.0", "encoder.block.1"]
    for name in ("decoder.block.0", "decoder.block.1"):
        assert "EncoderDecoderCache" in plan.region(name).reason
    m.step(*m.args).backward()
    for p, q in zip(m.model.parameters(), ref.model.parameters(), strict=True):
        if q.grad is not None:
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6)
