"""budget.apply on transformers models built from small configs (random weights).

Hugging Face models take other code paths on fake tensors when attention is ``sdpa``
(their mask helpers skip data-dependent checks while tracing), so the planned op calls
would not be the ones eager runs: budget refuses such a plan at the first step
(PlanMismatchError). With ``attn_implementation="eager"`` the paths agree.
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

tf = pytest.importorskip("transformers")

# Bytes the real step keeps that the trace does not see (constant, in the unmodified model
# too; not found yet): measured - predicted, per model.
UNSEEN = {"gpt2": 64, "llama": 16}


def _model(kind: str):
    torch.manual_seed(0)
    if kind == "gpt2":
        cfg = tf.GPT2Config(
            n_layer=2,
            n_embd=64,
            n_head=4,
            n_positions=64,
            vocab_size=128,
            use_cache=False,
            attn_implementation="eager",
        )
        return tf.GPT2LMHeadModel(cfg).train()
    cfg = tf.LlamaConfig(
        num_hidden_layers=2,
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=128,
        max_position_embeddings=64,
        use_cache=False,
        attn_implementation="eager",
    )
    return tf.LlamaForCausalLM(cfg).train()


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_plans_bytes_flops_and_gradients(kind):
    model = _model(kind)
    ref = copy.deepcopy(model)
    ids = torch.randint(128, (2, 32), generator=torch.Generator().manual_seed(1))

    def step(m):
        return lambda: m(input_ids=ids, labels=ids).loss

    torch.manual_seed(0)
    base = measure_eager(step(ref))
    for b in (0.5, 0.0):
        plan = budget.apply(model, ids, labels=ids, memory_budget=b)  # the model's own loss
        layers = "transformer.h" if kind == "gpt2" else "model.layers"
        assert plan.checkpointed == [f"{layers}.0", f"{layers}.1"]
        torch.manual_seed(0)
        m = measure_eager(step(model))
        assert m.retained_bytes - plan.saved_bytes == UNSEEN[kind]
        assert base.retained_bytes - plan.max_bytes == UNSEEN[kind]
        assert m.backward_flops - base.backward_flops == plan.recompute_flops
        for a in (model, ref):
            a.zero_grad(set_to_none=True)
            torch.manual_seed(5)
            step(a)().backward()
        for p, q in zip(model.parameters(), ref.parameters(), strict=True):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6)
        budget.unapply(model)
