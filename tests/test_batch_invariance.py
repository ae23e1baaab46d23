"""Batch invariance of the compiled CPU passes: a verify pass's row i gives, bit for bit, the logits a one-row step
gives at that position, so speculative decoding picks what plain decoding picks even at a near tie (docs/design.md,
the same text from every pass). Checked in float32, the dtype the host plan runs on CPU (in bfloat16 the rows still
part: the plan's reason), on the streamed graphs it compiles for a wide model (hidden 1024: the 0.8B's width), two
layers (one DeltaNet, one attention), against steps of the same compiled model; and the pieces that made rows
differ before, each against its one-row pass."""
import pytest
import torch
import torch.nn.functional as F

from qwen.cache import State, keep_step_states, restore_state, snapshot_state
from qwen.compiled import host, steps
from qwen.compiled.streamed import rowwise_attention
from qwen.config import Config
from qwen.deltanet import taps_sum
from qwen.model import Model
from qwen.norm import RMSNorm

pytestmark = [pytest.mark.compile,
              pytest.mark.skipif(host.compiler_missing() is not None, reason="no C++ compiler")]
WIDE = dict(vocab_size=2048, hidden_size=1024, intermediate_size=3584, num_hidden_layers=2,
            layer_types=["linear_attention", "full_attention"], num_attention_heads=8, num_key_value_heads=2,
            head_dim=256, linear_num_key_heads=16, linear_num_value_heads=16, linear_key_head_dim=128,
            linear_value_head_dim=128, linear_conv_kernel_dim=4, rms_norm_eps=1e-6, tie_word_embeddings=True,
            max_position_embeddings=4096)
OPTIONS = steps.ROW_INVARIANT                          # as a wide model's streamed graphs compile


def rows_against_steps(fn, x, rowdim):
    """fn compiled, on all of x's rows at once and on its first row alone -> whether row 0 agrees bit for bit."""
    compiled = torch.compile(fn, dynamic=False, options=OPTIONS)
    one = compiled(x.narrow(rowdim, 0, 1))
    many = compiled(x).narrow(rowdim, 0, 1)
    return torch.equal(one, many)


def test_each_piece_gives_a_row_what_a_one_row_pass_gives_it():
    torch.manual_seed(0)
    norm = RMSNorm(1024, 1e-6)
    norm.weight.data.normal_(0, 0.02)
    assert rows_against_steps(lambda x: norm(x), torch.randn(1, 3, 1024), 1)        # not split between threads
    weight, window = torch.randn(6144, 1, 4), torch.randn(1, 3, 6144)

    def conv(x):                                                                    # channels innermost, silu
        full = torch.cat([window, x], dim=1)
        return F.silu(taps_sum([full[:, j:j + x.shape[1]] for j in range(4)], weight))
    assert rows_against_steps(conv, torch.randn(1, 3, 6144), 1)
    k, v = torch.randn(1, 2, 40, 256), torch.randn(1, 2, 40, 256)
    bias = torch.zeros(1, 1, 3, 40)
    assert rows_against_steps(lambda q: rowwise_attention(q, k, v, bias[:, :, :q.shape[2]]),
                              torch.randn(1, 8, 3, 256), 2)


def test_a_verify_pass_rows_equal_steps_bit_for_bit():
    torch.manual_seed(0)
    model = Model(Config.from_dict(WIDE))
    with torch.no_grad():                                   # bfloat16 values, as a checkpoint holds them
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).float())
    model = model.eval().requires_grad_(False)
    fast = steps.compile_model(model, ks=(1, 3), freeze=False)     # the streamed graphs a wide model gets on CPU
    prompt = torch.randint(0, 2000, (1, 24), generator=torch.Generator().manual_seed(5))
    drafts = torch.randint(0, 2000, (1, 4), generator=torch.Generator().manual_seed(6))
    with torch.inference_mode():
        state = State(fast)
        fast(prompt, state, last_only=True)
        before = snapshot_state(state)
        one_by_one = [fast(drafts[:, i:i + 1], state)[0, 0].clone() for i in range(4)]
        for T in (2, 4):                                    # verify of k = 1 and k = 3 drafts, keeping step states
            restore_state(state, before)
            keep_step_states(state, T, on=True)
            rows = fast(drafts[:, :T], state)[0]
            keep_step_states(state, T, on=False)
            assert fast.steps.lookup(T, keep=True) is not None                    # it ran compiled
            for i in range(T):
                assert torch.equal(rows[i], one_by_one[i]), (T, i, (rows[i] - one_by_one[i]).abs().max().item())
    assert fast.steps.lookup(1) is not None
