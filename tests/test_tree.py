"""Draft trees (qwen/tree.py): shapes, a chain-shaped tree equal to the chain bit for bit, every node's state
equal to the recurrence run along its own path, and tree speculative decoding equal to plain decoding."""
import pytest
import torch

from qwen.cache import State, copy_state, keep_step_states
from qwen.mtp import generate_mtp
from qwen.sample import generate
from qwen.scripted import ScriptedHead
from qwen.tree import Tree, parse_tree
from qwen.weights import find_model
from test_mtp import prompts, random_pair

SHAPES = ["2", "2+1", "1+2", "2x2", "3+1+1", "2x1x2", [0, 0, 1, 1, 2]]


def test_shapes_parse_into_parents():
    assert parse_tree("2x2").parents == (-1, 0, 0, 1, 1, 2, 2)
    assert parse_tree("2+1").parents == (-1, 0, 0, 1)
    assert parse_tree("1+1+1").parents == (-1, 0, 1, 2) and parse_tree("1x1x1").is_chain()
    assert parse_tree([0, 0, 1]).parents == (-1, 0, 0, 1)
    tree = parse_tree("2x2")
    assert tree.depth == 2 and tree.size == 7 and tree.children[0] == (1, 2) and tree.ancestors(5) == [0, 2, 5]
    for bad in ["", "2x", "0+1", "2x2+1", "a", [1], [0, 2], "17", None]:
        with pytest.raises(ValueError):
            parse_tree(bad)


def tree_pass(model, tokens, state, tree):
    """The model's pass over a tree's rows, as the round runs it -> (logits, [per DeltaNet layer: (conv windows,
    memories) after each row])."""
    keep_step_states(state, tree.size)
    logits, _ = model.forward_hidden(tokens, state, tree=tree)
    kept = [(s.conv_steps[:tree.size].clone(), s.memories(tree.parents)) for s in state.deltanet_layers()]
    keep_step_states(state, on=False)
    return logits, kept


def final_state(model, ids, tokens):
    """The state plain decoding leaves after the prompt and these tokens (all but the last run)."""
    state = State(model)
    model.hidden(torch.cat([ids, torch.tensor([tokens[:-1]])], dim=1), state)
    return state


@pytest.mark.parametrize("sampling", [{}, dict(temperature=0.8, seed=3)])
@pytest.mark.parametrize("rollback", ["select", "recompute"])
@pytest.mark.parametrize("k", [1, 2, 3])
def test_a_chain_shaped_tree_gives_the_chain_tokens_bit_for_bit(k, rollback, sampling):
    model, head = random_pair("small", seed=1)
    ids = prompts(model.cfg.vocab_size, n=1, seed=2)[0]
    plain = generate(model, ids, max_new_tokens=24, **sampling)
    for drafter in (lambda: head, lambda: ScriptedHead(head, ids[0].tolist() + plain, 0.7)):   # a fresh one each
        chain = generate_mtp(model, drafter(), ids, max_new_tokens=24, k=k, rollback=rollback, **sampling)
        tree = generate_mtp(model, drafter(), ids, max_new_tokens=24, rollback=rollback, tree="+".join(["1"] * k),
                            **sampling)
        assert tree == chain                                # tokens, rounds and accepted drafts alike
        assert tree[0] == plain


def path_state(model, prefix_state, tokens):
    """The reference: the plain model run along one path from a copy of the state before the round."""
    state = copy_state(prefix_state)
    logits = model(torch.tensor([tokens], dtype=torch.long), state) if tokens else None
    return (logits[0] if tokens else None), state


@pytest.mark.parametrize("shape", ["2x2", "3+1+1", [0, 0, 1, 2, 2, 0]])
def test_every_node_sees_exactly_its_own_path(shape):
    model, _ = random_pair("untied_conv3", seed=4)
    tree = parse_tree(shape)
    ids = prompts(model.cfg.vocab_size, n=1, seed=5)[0]
    state = State(model, 64)
    model.hidden(ids, state)
    before = path_state(model, state, [])[1]                 # a copy of the state at the round's start
    g = torch.Generator().manual_seed(6)
    tokens = torch.randint(0, model.cfg.vocab_size, (1, tree.size), generator=g)
    logits, kept = tree_pass(model, tokens, state, tree)
    for node in range(tree.size):
        path = tree.ancestors(node)
        want_logits, want = path_state(model, before, tokens[0, path].tolist())
        torch.testing.assert_close(logits[0, node], want_logits[-1], rtol=1e-4, atol=1e-4)
        for (conv_after, S_after), layer in zip(kept, want.deltanet_layers()):
            torch.testing.assert_close(conv_after[node], layer.conv, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(S_after[node], layer.S, rtol=1e-4, atol=1e-4)


def test_the_recurrence_in_row_order_mixes_siblings():
    """The pitfall the tree avoids: row 2 (the root's second child) run after row 1 in sequence sees row 1."""
    model, _ = random_pair("small", seed=4)
    tree = parse_tree("2")
    ids = prompts(model.cfg.vocab_size, n=1, seed=5)[0]
    state = State(model, 64)
    model.hidden(ids, state)
    before = path_state(model, state, [])[1]
    tokens = torch.tensor([[3, 7, 9]])
    logits, kept = tree_pass(model, tokens, state, tree)
    row_order = path_state(model, before, [3, 7, 9])[1]
    own_path = path_state(model, before, [3, 9])[1]
    S_tree, S_rows, S_path = kept[0][1][2], row_order.deltanet_layers()[0].S, own_path.deltanet_layers()[0].S
    torch.testing.assert_close(S_tree, S_path, rtol=1e-4, atol=1e-4)
    assert (S_rows - S_path).abs().max() > 1e-3


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("rollback", ["select", "recompute"])
@pytest.mark.parametrize("model_shape", ["small", "untied_conv3"])
def test_tree_speculative_decoding_equals_plain_greedy(shape, rollback, model_shape):
    model, head = random_pair(model_shape, seed=7)
    for ids in prompts(model.cfg.vocab_size, n=3, seed=8):
        plain = generate(model, ids, max_new_tokens=30)
        for drafter in (head, ScriptedHead(head, ids[0].tolist() + plain, 0.6, seed=1)):
            spec, rounds, hits = generate_mtp(model, drafter, ids, max_new_tokens=30, rollback=rollback, tree=shape)
            assert spec == plain, (shape, rollback)
            assert 0 <= hits <= rounds * parse_tree(shape).depth


@pytest.mark.parametrize("shape", ["2+1", "2x2", "3"])
@pytest.mark.parametrize("rollback", ["select", "recompute"])
def test_tree_speculative_sampling_with_a_seed_equals_plain_sampling(shape, rollback):
    model, head = random_pair("small", seed=9)
    for seed, ids in enumerate(prompts(model.cfg.vocab_size, n=3, seed=10)):
        plain = generate(model, ids, max_new_tokens=30, temperature=0.9, seed=seed)
        spec = generate_mtp(model, head, ids, max_new_tokens=30, rollback=rollback, tree=shape, temperature=0.9,
                            seed=seed, top_k=20)[0]
        spec_unfiltered = generate_mtp(model, head, ids, max_new_tokens=30, rollback=rollback, tree=shape,
                                       temperature=0.9, seed=seed)[0]
        assert spec_unfiltered == plain
        assert spec == generate(model, ids, max_new_tokens=30, temperature=0.9, seed=seed, top_k=20)


def test_skipping_the_restore_keeps_a_sibling_branchs_memory_and_goes_wrong():
    model, head = random_pair("small", seed=7)
    wrong = 0
    for ids in prompts(model.cfg.vocab_size, n=4, seed=8):
        plain = generate(model, ids, max_new_tokens=30)
        spec = generate_mtp(model, ScriptedHead(head, ids[0].tolist() + plain, 0.6, seed=1), ids, max_new_tokens=30,
                            rollback="none", tree="2x2")[0]
        wrong += spec != plain
    assert wrong >= 2


@pytest.mark.parametrize("shape", ["2+1", "2x2"])
def test_the_embedded_model_decodes_the_same_with_a_tree(shape):
    from qwen.mtp import MTP
    from qwen.model import Model
    path = find_model(None)
    model = Model.from_pretrained(path)
    head = MTP.from_pretrained(model.cfg, path, lm_head=model.lm_head)
    ids = torch.tensor([[int(t) for t in torch.randint(5, 200, (12,), generator=torch.Generator().manual_seed(3))]])
    plain = generate(model, ids, max_new_tokens=40)
    spec, rounds, hits = generate_mtp(model, head, ids, max_new_tokens=40, tree=shape)
    assert spec == plain and hits > 0
    sampled = generate(model, ids, max_new_tokens=40, temperature=0.5, seed=0)
    assert generate_mtp(model, head, ids, max_new_tokens=40, tree=shape, temperature=0.5, seed=0)[0] == sampled


def test_a_tree_refuses_what_it_cannot_do():
    model, head = random_pair("small")
    ids = prompts(model.cfg.vocab_size, n=1)[0]
    with pytest.raises(ValueError, match="seed"):
        generate_mtp(model, head, ids, max_new_tokens=5, tree="2", temperature=0.8)
    with pytest.raises(ValueError, match="Watch"):
        generate_mtp(model, head, ids, max_new_tokens=5, tree="2", trace=[])
    assert isinstance(parse_tree(Tree((-1, 0))), Tree)


def test_the_tree_benchmark_compares_trees_with_chains_on_the_embedded_model(capsys):
    from tools.tree_bench import main
    main(["--ks", "1", "--shapes", "2,2+1", "--repeats", "1", "--new-tokens", "12", "--max-rows", "3"])
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith(("| chain", "| tree"))]
    assert [r.split("|")[1].strip() for r in rows] == ["chain 1", "tree 2", "tree 2+1"]
    assert all(r.rstrip(" |").endswith("True") for r in rows), rows          # identical to plain decoding
    assert "where it was wrong, the second was right in" in out and "| 3 |" in out
