"""The engine against the reference implementation (transformers' Qwen3_5ForCausalLM) on tiny random configs."""
import inspect

import pytest
import torch

from qwen.cache import State
from qwen.chunk import delta_rule_chunked
from qwen.deltanet import delta_rule_recurrent, l2_normalize
from qwen.model import Model
from qwen.sample import generate
from reference import reference_model, save_checkpoint, text_config

CONFIGS = {
    "base": {},
    "untied": dict(tie_word_embeddings=False),
    "gqa4_more_value_heads": dict(num_attention_heads=8, num_key_value_heads=2, linear_num_key_heads=2,
                                  linear_num_value_heads=6),
    "key_dim_ne_value_dim_conv3": dict(linear_key_head_dim=8, linear_value_head_dim=24, linear_conv_kernel_dim=3),
    "custom_pattern_full_rotary": dict(num_hidden_layers=5, rope_parameters=dict(partial_rotary_factor=1.0),
                                       layer_types=["full_attention", "linear_attention", "linear_attention",
                                                    "full_attention", "linear_attention"]),
    "half_rotary_mha": dict(num_key_value_heads=4, head_dim=16, rope_parameters=dict(partial_rotary_factor=0.5)),
}


def reference_logits_stepwise(ref, chunks):
    """Reference logits for a prefill then further chunks continuing from its cache.
    subtle: the pinned transformers (requirements-dev.txt) names the cache `cache`, in and out; older
    releases took any keyword silently and recomputed without a cache, so the name is checked first."""
    if "cache" not in inspect.signature(type(ref).forward).parameters:
        raise TypeError(f"{type(ref).__name__}.forward takes no `cache` argument: not the pinned transformers")
    out, cache = [], None
    with torch.no_grad():
        for ids in chunks:
            r = ref(ids, cache=cache, use_cache=True)
            cache = r.cache
            out.append(r.logits)
    return out


def test_reference_cached_steps_equal_its_own_full_sequence_logits():
    """The oracle helper really continues from the reference's cache: chunk by chunk, the logits equal
    one uncached pass over the whole sequence (a helper whose cache were dropped would differ)."""
    ref = reference_model(text_config())
    ids = torch.randint(0, ref.config.vocab_size, (1, 24), generator=torch.Generator().manual_seed(2))
    chunks = [ids[:, :16], ids[:, 16:17], ids[:, 17:18], ids[:, 18:21], ids[:, 21:]]
    stepwise = torch.cat(reference_logits_stepwise(ref, chunks), dim=1)             # (1, 24, V)
    with torch.no_grad():
        whole = ref(ids, use_cache=False).logits                                    # (1, 24, V)
    assert (stepwise - whole).abs().max().item() <= 1e-4
    with torch.no_grad():                       # and the check can fail: the same chunks without a cache
        uncached = torch.cat([ref(c, use_cache=False).logits for c in chunks], dim=1)
    assert (uncached - whole).abs().max().item() > 1e-2


@pytest.mark.parametrize("layout", ["hub", "text"])
@pytest.mark.parametrize("name", list(CONFIGS))
def test_logits_match_reference_prefill_steps_and_multi_token_step(tmp_path, name, layout):
    ref = reference_model(text_config(**CONFIGS[name]))
    path = save_checkpoint(ref, str(tmp_path / "ck"), layout)
    model = Model.from_pretrained(path)
    g = torch.Generator().manual_seed(1)
    V = ref.config.vocab_size
    chunks = [torch.randint(0, V, (1, 70), generator=g)]                 # 70: not a multiple of the chunk size
    chunks += [torch.randint(0, V, (1, 1), generator=g) for _ in range(16)]
    chunks += [torch.randint(0, V, (1, 3), generator=g)]
    expected = reference_logits_stepwise(ref, chunks)
    state = State(model)
    with torch.no_grad():
        for ids, want in zip(chunks, expected):
            got = model(ids, state)
            assert (got - want).abs().max().item() <= 1e-4
    assert state.pos == 70 + 16 + 3


def random_delta_inputs(B, H, T, Dk, Dv, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = l2_normalize(torch.randn(B, H, T, Dk, generator=g))
    k = l2_normalize(torch.randn(B, H, T, Dk, generator=g))
    v = torch.randn(B, H, T, Dv, generator=g)
    gate = -torch.rand(B, H, T, generator=g) * 0.5
    beta = torch.rand(B, H, T, generator=g)
    return q, k, v, gate, beta


@pytest.mark.parametrize("T", [1, 5, 63, 64, 65, 150])
@pytest.mark.parametrize("with_state", [False, True])
def test_chunked_delta_rule_equals_recurrent(T, with_state):
    q, k, v, g, beta = random_delta_inputs(2, 3, T, 8, 12)
    S0 = torch.randn(2, 3, 8, 12) if with_state else None
    out_r, S_r, _ = delta_rule_recurrent(q, k, v, g, beta, S0)
    out_c, S_c = delta_rule_chunked(q, k, v, g, beta, S0, chunk_size=16)
    assert torch.allclose(out_r, out_c, atol=1e-4)
    assert torch.allclose(S_r, S_c, atol=1e-4)


def test_chunked_delta_rule_is_differentiable():
    q, k, v, g, beta = random_delta_inputs(1, 2, 40, 8, 8)
    v.requires_grad_(True)
    out, S = delta_rule_chunked(q, k, v, g, beta, chunk_size=16)
    (out.sum() + S.sum()).backward()
    assert v.grad is not None and torch.isfinite(v.grad).all() and v.grad.abs().sum() > 0


@pytest.mark.parametrize("name", ["base", "untied"])
def test_greedy_generate_equals_reference_generate(tmp_path, name):
    ref = reference_model(text_config(**CONFIGS[name]), seed=3)
    model = Model.from_pretrained(save_checkpoint(ref, str(tmp_path / "ck")))
    ids = torch.randint(0, ref.config.vocab_size, (1, 11), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        want = ref.generate(ids, max_new_tokens=20, do_sample=False, min_new_tokens=20,
                            pad_token_id=0)[0, ids.shape[1]:].tolist()
    assert generate(model, ids, max_new_tokens=20) == want


def test_batch_generation_equals_one_prompt_at_a_time(tmp_path):
    from qwen.batch import generate_batch
    ref = reference_model(text_config(**CONFIGS["gqa4_more_value_heads"]), seed=4)
    model = Model.from_pretrained(save_checkpoint(ref, str(tmp_path / "ck")))
    g = torch.Generator().manual_seed(7)
    prompts = [torch.randint(0, 97, (n,), generator=g).tolist() for n in (5, 12, 1, 70)]
    together = generate_batch(model, prompts, max_new_tokens=12)
    alone = [generate(model, torch.tensor([p]), max_new_tokens=12) for p in prompts]
    assert together == alone
    stop = (alone[1][3],)                                   # rows stop independently
    assert generate_batch(model, prompts, max_new_tokens=12, stop=stop) == \
        [generate(model, torch.tensor([p]), max_new_tokens=12, stop=stop) for p in prompts]


def test_the_prompts_last_logits_come_from_a_dense_row_and_equal_the_full_pass(tmp_path):
    """last_only scores the last row through a 2-D input (a 3-D slice of a longer pass sends a bfloat16 Linear down
    a slow CPU path, 50x at the 0.8B shape), and its logits are the full pass's last row (to
    float32 rounding)."""
    ref = reference_model(text_config(**CONFIGS["base"]), seed=3)
    model = Model.from_pretrained(save_checkpoint(ref, str(tmp_path / "ck")))
    seen = []
    model.lm_head.register_forward_pre_hook(lambda module, args: seen.append(args[0].dim()))
    ids = torch.randint(0, ref.config.vocab_size, (2, 9), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        last = model(ids, State(model), last_only=True)
        full = model(ids, State(model))
    assert seen == [2, 3] and last.shape == (2, 1, ref.config.vocab_size)
    torch.testing.assert_close(last[:, 0], full[:, -1], rtol=1e-5, atol=1e-5)    # a GEMM of other rows: the order of sums
