"""The measuring tools, kept out of the engine (qwen/) and the app (demo/): each runs from the repository's root
as `python -m tools.NAME` (the shell scripts as `bash tools/NAME.sh`) and prints what it measured; figures go to
docs/benchmarks.md by hand. They import qwen and demo; nothing there imports them.

The app, raced and served:
    race_bench          the race's speed-up, taking turns or one after the other; --predict: the cost model against it
    length_bench        which draft length pays, prompt by prompt: plain, k = 1..K and k="auto"
    loadtest            concurrent gradio_client sessions on loopback, the page in-process: latency and memory
    example_labels      drafts kept per example prompt -> demo/examples_measured.json (the examples table's labels)
    stepper_round_cost  the stepper's recorded round against the race's "a round costs" term

The engine, measured (A/B scripts: run them in two worktrees to compare commits):
    exact_sweep         speculative == plain on the visitor's path (the 0.8B stand-in as the app loads it), over
                        many real-text prompts, every k, rollback and sampling rule: tokens that parted
    draft_levers        two draft levers before building either: the prompt's tokens joining the draft vocabulary
                        (coverage), and 8/4-bit output-layer rows (how often their argmax is the exact one)
    tree_bench          draft trees against chains: tokens per pass, speed-ups, a verify pass of R rows in steps
    coupled_speed       speculative sampling with shared noise against greedy speculative decoding
    repetition          how repetitive the embedded model's text is, greedy against sampled
    auto_sim            k="auto"'s rule replayed in simulation against the best fixed k
    frozen_gemms        frozen graphs of the 0.8B shape with a chosen set of GEMM backends
    verify_profile      where a frozen verify pass of 2 rows spends its time, kernel by kernel
    verify_select       what a `select` round's verify pass costs at the 0.8B shape
    scripted_lanes      plain against scripted speculative lanes (frozen_gemms and verify_select end with it)
    ab_rollbacks.sh     recompute and select k=2 ÷ plain, an old commit ($OLD) against this one
    ab_warmup_spec.sh   warm-up time and `qwen.bench spec`, an old commit ($OLD) against this one

On a GPU:
    gpu-check.sh        the GPU check in one command (`bash tools/gpu-check.sh`; --dry-run: on a CPU)
    gpu_check           its steps, a JSON file each: exactness, decode, verify, race, memory, page

The engine's bench stays beside it (`python -m qwen.bench`: engine against reference, speed-ups, compile times);
the tree bench borrows its helpers.
"""
