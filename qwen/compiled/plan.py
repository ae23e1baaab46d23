"""How this host runs a model, decided once at load: the strategy of its compiled graphs
(choose_strategy), the passes decoding makes (variants_for), and the HostPlan that sums them up.

    plan = host_plan(model, "float32: a small model on CPU")
    str(plan)          # "cpu · float32 · streamed graphs · 1 thread"
    plan.why           # the dtype's reason, then the strategy's
"""
import enum
from dataclasses import dataclass

import torch

from qwen.compiled import host
from qwen.compiled.host import compiler_missing, is_wide
from qwen.compiled.streamed import stream_dtype


class Strategy(enum.Enum):
    """How a host's graphs get their weights (docs/design.md, compiled passes): its value in a few words."""
    STREAMED = "streamed graphs"    # CPU: one copy of each weight (bfloat16 where exact), read in the graphs' own loops
    FROZEN = "frozen graphs"        # CPU: the weights frozen into each graph, packed for its GEMMs
    CUDA = "CUDA graphs"
    AHEAD = "ahead-of-time graphs"  # any device: exported and built into package files (ahead.py); ZeroGPU's way


def freeze_fits(modules, graphs, available=None):
    """Whether freezing `graphs` graphs over these modules' weights fits in memory: each frozen graph
    holds its own packed copy of the weights, and we allow them half of what is available.
    -> (bool, reason)"""
    weights = sum(p.numel() * p.element_size() for m in modules for p in m.parameters())
    available = host.memory_available() if available is None else available
    if available is None:
        return False, "free memory unknown"
    need = weights * graphs
    return need <= available // 2, (f"{graphs} packed weight copies need {need / 2**30:.1f} GB, "
                                    f"{available / 2**30:.1f} GB available")


def choose_strategy(modules, freeze=None, graphs=1, ahead=False):
    """-> (Strategy, why). AHEAD where asked (ahead=True: ZeroGPU, which refuses torch.compile). CUDA on a
    GPU. On CPU, streamed, except frozen where asked (freeze=True) or, with freeze=None, for a wide model (host.is_wide) run in bfloat16 (default_dtype's choice
    where bfloat16 is native) where `graphs` frozen copies fit in memory: there frozen decoded
    speculatively faster (docs/design.md, frozen weights where bfloat16 is native)."""
    if ahead:
        return Strategy.AHEAD, "built ahead of time, as ZeroGPU allows"
    if next(modules[0].parameters()).device.type == "cuda":
        return Strategy.CUDA, "on a GPU"
    if freeze is not None:
        return (Strategy.FROZEN if freeze else Strategy.STREAMED), "as asked"
    if not is_wide(modules[0]):
        return Strategy.STREAMED, "a small model: streamed graphs are saved whole on disk"
    weights = [m.weight for module in modules for m in module.modules() if isinstance(m, torch.nn.Linear)]
    if all(stream_dtype(w) == torch.bfloat16 and w.dtype == torch.float32 for w in weights):
        return Strategy.STREAMED, "float32 weights bfloat16 holds exactly: half the bytes, one copy for every graph"
    fits, why = freeze_fits(modules, graphs)
    return (Strategy.FROZEN, why) if fits else (Strategy.STREAMED, f"no memory to freeze: {why}")


def variants_for(ks, rollbacks=("select",), one_token=True):
    """The passes decoding with k drafts makes, as (T, keeps step states): one-token decode and
    draft steps (unless one_token=False), and verify / head catch-up of 1+k tokens (verify keeps
    step states for `select`). -> (the main model's, the head's as (T, False))"""
    verify = {1 + int(k) for k in ks}
    keeps = {rollback == "select" for rollback in rollbacks}
    one = {1} if one_token else set()
    return {(T, False) for T in one} | {(T, keep) for T in verify for keep in keeps}, \
        {(T, False) for T in one | verify}


@dataclass(frozen=True)
class HostPlan:
    """How this host runs a model: device, dtype, the compiled graphs' strategy (None: eager), torch's
    threads, and why (the dtype's reason; the strategy's, or why eager)."""
    device: str
    dtype: torch.dtype
    strategy: Strategy | None
    threads: int
    why: str

    def __str__(self):
        how = self.strategy.value if self.strategy is not None else "eager"
        return (f"{self.device} · {str(self.dtype).replace('torch.', '')} · {how} · "
                f"{self.threads} thread{'s' if self.threads != 1 else ''}")


def host_plan(model, dtype_reason="", compile=True, ks=(2,), eager_why="compiling not asked for", ahead=False):
    """The HostPlan for this model (loaded in the dtype it runs in) on this host, with compiling or
    without (then eager_why says why); its strategy is the one compile_model picks for these k (the same
    choose_strategy call). On a GPU the device names it: "cuda (NVIDIA H200)"."""
    weight = model.embed_tokens.weight
    device = weight.device.type
    missing = compiler_missing(device)
    if not compile or missing:
        strategy, why = None, (eager_why if not compile else missing)
    else:
        strategy, why = choose_strategy([model], None, len(variants_for(ks)[0]), ahead)
    if device == "cuda":
        device = f"cuda ({torch.cuda.get_device_name(weight.device)})"
    return HostPlan(device, weight.dtype, strategy, torch.get_num_threads(),
                    "; ".join(part for part in (dtype_reason, why) if part))
