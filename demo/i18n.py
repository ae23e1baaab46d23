"""Every English and Chinese word of the page (race, stepper, figures) in one table, and the language switch.

    t("run", "中文")                          -> "开始比赛"
    t("round_of", "English", r=3, n=20)       -> "round 3 of 20"
    notice_text(Notice("clamped", {...}), lang)

The language radio (demo.frame.Shared.lang) holds one of LANGS; every label and message is looked up here
at the moment it is shown, so switching language relabels the page and later messages alike.
A missing Chinese string falls back to English; a missing key is shown as the key itself.
"""
LANGS = ("English", "中文")
DEFAULT_LANG = LANGS[0]

STRINGS = {
    # the frame
    "title": ("Speculative decoding, live: Qwen3.5 with its own draft head",
              "投机解码现场演示：Qwen3.5 与它自带的草稿头"),
    "subtitle": ("The same prompt twice, side by side, taking turns on the CPU: plain decoding and MTP "
                 "speculative decoding, sampled with the same seed. Same tokens, fewer passes of the main model; "
                 "faster where a pass over a few tokens costs about one step.",
                 "同一个提示词跑两遍，并排轮流使用 CPU：普通解码与 MTP 投机解码，用同一个种子采样。输出相同，"
                 "主模型前向更少；在一次处理几个词元的前向约等于一步的机器上才更快。"),
    "language": ("Language", "语言"),
    "presenter": ("Presenter mode", "演示模式"),
    "presenter_info": ("Bigger type, higher contrast", "更大字号，更高对比度"),
    "model": ("Model", "模型"),
    "model_info": ("Hub models download on first use (0.8B ≈ 2 GB)", "Hub 模型首次使用时下载（0.8B 约 2 GB）"),
    "model_ready": ("**{model}** ready ({plan}, context {context} tokens{mtp})",
                    "**{model}** 已就绪（{plan}，上下文 {context} 个词元{mtp}）"),
    "plan_threads": ("{n} thread", "{n} 个线程"),
    "plan_threads_many": ("{n} threads", "{n} 个线程"),
    # a qwen.compiled.host.Strategy in words: English as the command line prints it (Strategy's value)
    "plan_eager": ("eager", "普通 PyTorch（未编译）"),
    "plan_STREAMED": ("streamed graphs", "流式权重的编译图"),
    "plan_FROZEN": ("frozen graphs", "冻结权重的编译图"),
    "plan_CUDA": ("CUDA graphs", "CUDA 图"),
    "plan_AHEAD": ("ahead-of-time graphs", "预先构建的编译图"),
    "why_NO_COMPILER": ("no C++ compiler (install g++)", "没有 C++ 编译器（请安装 g++）"),
    "why_FAILED": ("compiling failed", "编译失败"),
    "why_WRONG": ("the compiled pass computes something else", "编译后的前向算出的结果不同"),
    "why_SLOWER": ("not faster than plain PyTorch on this host", "在这台机器上不比普通 PyTorch 快"),
    "why_NOT_WARMED": ("not warmed up (only greedy decoding was asked for)", "未预热（只要求了贪心解码）"),
    "model_no_mtp": (", no draft head: the race needs one", "，没有草稿头：比赛需要它"),
    "model_compiling": (" · compiling the decoding steps into optimized graphs… (plain PyTorch meanwhile)",
                        " · 正在把解码步骤编译成优化的计算图…（期间用普通 PyTorch 运行）"),
    "model_compiled": (" · compiled: the decoding steps run as optimized graphs",
                       " · 已编译：解码步骤以优化的计算图运行"),
    "model_compiled_more": (" · compiled: the decoding steps run as optimized graphs (the stepper's and "
                            "sampling's still compiling…)",
                            " · 已编译：解码步骤以优化的计算图运行（步进器与采样所用的仍在编译…）"),
    "model_eager": (" · eager: plain PyTorch, one operation at a time ({reason})",
                    " · 未编译：普通 PyTorch，逐个运算执行（{reason}）"),
    "model_failed": ("Could not load that model ({error}). Still using {model}.",
                     "无法加载该模型（{error}）。仍在使用 {model}。"),
    "hub_unreachable": ("Can't reach the Hugging Face hub to download {model}; {current} keeps working.",
                        "无法连接 Hugging Face Hub 下载 {model}；{current} 照常可用。"),
    "tab_race": ("The race", "赛跑"),
    "tab_stepper": ("Step through", "逐步查看"),
    # race controls
    "prompt": ("Prompt", "提示词"),
    "prompt_placeholder": ("Type a prompt, or pick an example below", "输入提示词，或从下方选择示例"),
    "run": ("Run the race", "开始比赛"),
    "stop": ("Stop", "停止"),
    "settings": ("Settings", "设置"),
    "k": ("Draft tokens per round (k)", "每轮草稿词元数（k）"),
    "k_info": ("The draft head guesses k tokens; the main model checks them in one pass",
               "草稿头一次猜 k 个词元，主模型一次前向就能验证"),
    "rollback": ("Rollback after a rejected draft", "草稿被拒后的回滚方式"),
    "rollback_select": ("select: keep each token's write, apply the accepted ones (no re-run)",
                        "select：保留每个词元的写入，只写入被接受的（不重算）"),
    "rollback_recompute": ("recompute: snapshot, restore, re-run the accepted tokens",
                           "recompute：快照、恢复、重算已接受的词元"),
    "rollback_both": ("compare both (3 lanes): plain, recompute and select, taking turns",
                      "两种都比（三栏）：普通、recompute、select 轮流运行"),
    "tree_lane": ("Draft-tree lane", "草稿树赛道"),
    "tree_lane_info": ("A third lane whose head guesses a tree each round (its top guesses where it is unsure), "
                       "checked in one pass beside the chain of k. Every lane then runs eagerly.",
                       "第三条赛道：草稿头每轮猜一棵树（不确定处给出多个候选），主模型一次前向验证整棵树，与 k 链并排比较。"
                       "此时所有赛道都以 eager 方式运行。"),
    "tree_off": ("off", "关闭"),
    "temperature": ("Temperature (0 = greedy)", "温度（0 = 贪心）"),
    "seed": ("Seed (used when temperature > 0)", "随机种子（温度 > 0 时使用）"),
    "rule": ("Speculative sampling rule (temperature > 0)", "投机采样规则（温度 > 0 时）"),
    "rule_shared": ("shared noise: the same text as plain sampling", "共享噪声：与普通采样文本相同"),
    "rule_rejection": ("rejection sampling: the same distribution", "拒绝采样：分布相同"),
    "max_new_tokens": ("Max new tokens", "最多生成词元数"),
    "raw": ("Raw completion (no chat template)", "纯续写（不用对话模板）"),
    "thinking": ("Thinking on", "开启思考"),
    "examples": ("Examples", "示例"),
    "examples_note": ("The embedded model is a 4M-parameter toy trained on the King James Bible, Python's docs and "
                      "classical Chinese poems: it continues text in those styles (and often repeats itself), which "
                      "its draft head guesses well; it cannot really chat. Each label gives the share of the head's "
                      "drafts the model kept on that prompt, measured (k = 2, temperature 0.5).",
                      "内置模型是个 4M 参数的小玩具，只学过英王钦定本圣经、Python 文档和中国古典诗词：它会按这些风格"
                      "续写（常常重复），草稿头也猜得准；它并不会真正对话。每个标签给出在该提示词上草稿被保留的比例，"
                      "为实测值（k = 2，温度 0.5）。"),
    "kind": ("Kind", "类型"),
    "kind_bible": ("Bible (KJV) · raw", "圣经（KJV）· 续写"),
    "kind_docs": ("Python docs · raw", "Python 文档 · 续写"),
    "kind_poem": ("Classical poem · raw", "古诗 · 续写"),
    "kind_chat": ("Chat", "对话"),
    "guess_easy": ("easy to guess ({kept:.0%} kept)", "好猜（保留 {kept:.0%}）"),
    "guess_hard": ("harder to guess ({kept:.0%} kept)", "较难猜（保留 {kept:.0%}）"),
    "embedded_model": ("Embedded demo model (4M, offline)", "内置演示模型（4M，离线）"),
    # the two lanes
    "plain": ("Plain decoding", "普通解码"),
    "plain_sub": ("one forward pass per token", "每个词元一次前向计算"),
    "spec": ("Speculative decoding (MTP)", "投机解码（MTP）"),
    "spec_sub": ("the draft head guesses, the main model checks k + 1 tokens per pass",
                 "草稿头先猜，主模型一次前向验证 k + 1 个词元"),
    "spec_with": ("Speculative decoding (MTP) · {rollback}", "投机解码（MTP）· {rollback}"),
    "spec_short": ("Speculative · {rollback}", "投机解码 · {rollback}"),
    "spec_sub_recompute": ("after a rejected draft: restore the DeltaNet memory's snapshot, re-run the accepted "
                           "tokens",
                           "草稿被拒后：用快照恢复 DeltaNet 记忆，再重算已接受的词元"),
    "spec_sub_select": ("after a rejected draft: apply only the accepted tokens' DeltaNet writes, kept aside "
                        "during verify (no re-run)",
                        "草稿被拒后：只把验证时暂存的、被接受词元的写入写进 DeltaNet 记忆（不重算）"),
    "lane_off": ("runs only with “compare both” or a draft-tree lane", "仅在“两种都比”或开启草稿树赛道时运行"),
    "tree_setup": ("tree {tree} · {rollback}", "树 {tree} · {rollback}"),
    "spec_tree": ("Speculative · tree {tree}", "投机解码 · 树 {tree}"),
    "spec_sub_tree": ("the head's top guesses as a tree; one pass checks every branch, the longest accepted path "
                      "is kept",
                      "草稿头的多个候选组成一棵树；一次前向验证所有分支，保留最长的被接受路径"),
    "spec_setup": ("k = {k} · {rollback}", "k = {k} · {rollback}"),
    "k_auto": ("auto (0-{k})", "自动（0-{k}）"),
    "auto_kept": ("rounds by drafts kept: {counts}", "各轮保留的草稿数：{counts}"),
    "auto_k": ("Choose k each round (auto)", "每轮自动选择 k（auto）"),
    "step_auto_info": ("Each round drafts 0 to 3 tokens, as far as they pay here; the what-if shows each round's choice",
                       "每轮起草 0 到 3 个词元，只在划算时继续；“假如”图改为显示每轮的选择"),
    "auto_k_info": ("Each round drafts 0 to 3 tokens: as far as the head's guesses pay for their cost here",
                    "每轮起草 0 到 3 个词元：只在草稿头的猜测能抵消其开销时继续"),
    "waiting": ("waiting for its turn…", "等待轮到它…"),
    "elapsed": ("seconds", "秒"),
    "tokens": ("tokens", "词元"),
    "speed": ("tok/s", "词元/秒"),
    "rounds": ("rounds", "轮"),
    "hits": ("accepted drafts", "接受的草稿"),
    "acceptance": ("acceptance", "接受率"),
    "ended_stop": ("end of text", "生成结束"),
    "ended_length": ("max tokens reached", "达到最大词元数"),
    "ended_time": ("time limit ({seconds:.0f} s) reached", "达到时间上限（{seconds:.0f} 秒）"),
    # legend
    "legend": ("Legend", "图例"),
    "legend_sample": ("Abc", "文字"),
    "origin_main": ("the main model's own token (the prompt's pass, or a plain step)", "主模型自己的词元（提示词前向或普通的一步）"),
    "origin_draft": ("accepted draft", "被接受的草稿"),
    "origin_correction": ("correction: main model replaced a rejected draft", "修正：主模型替换被拒草稿"),
    "origin_bonus": ("bonus: all drafts accepted, one extra token", "奖励：草稿全中，多得一个词元"),
    # how each origin is marked (demo/static/app.css); "full" with the full-marks switch on
    "mark_draft": ("(faint tint)", "（淡色底）"),
    "mark_full_draft": ("(underlined)", "（下划线）"),
    "mark_correction": ("(wavy underline)", "（波浪线）"),
    "mark_bonus": ("(bold)", "（粗体）"),
    "full_marks": ("Full marks", "完整标记"),
    "full_marks_info": ("Underline every accepted draft and show where each token ends",
                        "给每个被接受的草稿加下划线，并标出每个词元的边界"),
    # status and verdict
    "status_ready": ("Ready: press **Run the race**, or pick an example.", "准备就绪：点 **开始比赛**，或选一个示例。"),
    "status_racing": ("Racing: plain and speculative decoding take turns on the CPU, each turn to the one "
                      "that has used the least time so far…",
                      "比赛中：普通解码与投机解码轮流使用 CPU，每次轮到目前用时最少的一方…"),
    "status_racing_3": ("Racing: plain decoding and speculative decoding with recompute and with select take "
                        "turns on the CPU, each turn to the one that has used the least time so far…",
                        "比赛中：普通解码、recompute 投机解码与 select 投机解码轮流使用 CPU，每次轮到目前用时最少的一方…"),
    "status_racing_tree": ("Racing: plain decoding, the chain of k and the draft tree take turns on the CPU, each "
                           "turn to the one that has used the least time so far (all eager)…",
                           "比赛中：普通解码、k 链与草稿树轮流使用 CPU，每次轮到目前用时最少的一方（全部 eager）…"),
    "status_measuring": ("Measuring what a round costs on this machine…", "正在测量这台机器上一轮的耗时…"),
    "status_done": ("Done.", "完成。"),
    "status_stopped": ("Stopped. Press **Run the race** to start again.", "已停止。点 **开始比赛** 重新开始。"),
    "status_queued_n": ("Busy: {running} run(s) in progress, you are number {n} in line. Yours starts by itself; "
                        "keep this page open.",
                        "忙碌中：正在运行 {running} 个任务，你排在第 {n} 位。轮到你时会自动开始，请保持页面打开。"),
    "status_full": ("The server is full right now ({waiting} runs waiting). Please try again in a minute.",
                    "服务器现在已满（{waiting} 个任务在排队）。请一分钟后再试。"),
    "status_error": ("Something went wrong ({error}). The page still works: try again.",
                     "出错了（{error}）。页面仍可使用，请重试。"),
    "verdict_identical": ("Identical output ✓: both runs produced the same {n} tokens.",
                          "输出完全相同 ✓：两次运行生成了相同的 {n} 个词元。"),
    "verdict_identical_all": ("Identical output ✓: all {lanes} runs produced the same {n} tokens.",
                              "输出完全相同 ✓：{lanes} 次运行生成了相同的 {n} 个词元。"),
    "verdict_prefix": ("Identical as far as both went ✓: the first {n} tokens match; one run stopped early at the "
                       "time limit.",
                       "在两者都生成的范围内相同 ✓：前 {n} 个词元一致；其中一次因时间上限提前停止。"),
    "verdict_diverged": ("Outputs diverge at token {index}: plain chose {plain}, speculative chose {spec}.",
                         "输出在第 {index} 个词元处分叉：普通解码选了 {plain}，投机解码选了 {spec}。"),
    "verdict_diverged_lane": ("Outputs diverge at token {index}: plain chose {plain}, speculative with {rollback} "
                              "chose {spec}.",
                              "输出在第 {index} 个词元处分叉：普通解码选了 {plain}，{rollback} 投机解码选了 {spec}。"),
    "verdict_shared_noise": ("Identical output ✓, sampled: both runs produced the same {n} tokens at temperature "
                             "{temperature}, seed {seed}. Shared noise: every position's random numbers come from "
                             "the seed, and a draft is kept only where the main model, with the same noise, picks "
                             "it too ({acceptance} of drafts kept).",
                             "输出完全相同 ✓（采样）：温度 {temperature}、种子 {seed} 下两次运行生成了相同的 {n} 个词元。"
                             "共享噪声：每个位置的随机数都由种子决定，只有当主模型用同样的噪声也选中草稿时才保留它"
                             "（保留了 {acceptance} 的草稿）。"),
    "verdict_shared_noise_all": ("Identical output ✓, sampled: all {lanes} runs produced the same {n} tokens at "
                                 "temperature {temperature}, seed {seed} (shared noise; {acceptance} of drafts kept).",
                                 "输出完全相同 ✓（采样）：温度 {temperature}、种子 {seed} 下 {lanes} 次运行生成了相同的 "
                                 "{n} 个词元（共享噪声；保留了 {acceptance} 的草稿）。"),
    "verdict_sampled": ("Rejection sampling (temperature {temperature}): the texts differ, as expected "
                        "({acceptance} of drafts kept). This rule keeps the *distribution* of the output the same "
                        "as plain sampling, not the text: the two runs draw different random numbers even with "
                        "the same seed. Choose shared noise for the same text.",
                        "拒绝采样（温度 {temperature}）：两段文本不同，这是预期的（保留了 {acceptance} 的草稿）。"
                        "该规则保证输出的*概率分布*与普通采样相同，而不是文本相同：即使种子相同，两次运行消耗的"
                        "随机数也不同。选择共享噪声可得到相同文本。"),
    "verdict_sampled_same": ("Rejection sampling (temperature {temperature}): this time the texts happen to match "
                             "({acceptance} of drafts kept). What this rule guarantees is the same *distribution*, "
                             "not the same text.",
                             "拒绝采样（温度 {temperature}）：这次文本碰巧相同（保留了 {acceptance} 的草稿）。该规则"
                             "保证的是*分布*相同，而非文本相同。"),
    "speedup": ("{speedup:.2f}× {faster} — speculative {spec:.1f} tok/s vs plain {plain:.1f} tok/s",
                "{speedup:.2f}× {faster} —— 投机 {spec:.1f} 词元/秒，普通 {plain:.1f} 词元/秒"),
    "speedup_lane": ("{rollback}: {speedup:.2f}× {faster} — {spec:.1f} tok/s vs plain {plain:.1f} tok/s",
                     "{rollback}：{speedup:.2f}× {faster} —— {spec:.1f} 词元/秒，普通 {plain:.1f} 词元/秒"),
    "lane_recompute": ("{rolled} of {rounds} rounds rolled back: each restored the DeltaNet memory from the snapshot "
                       "taken before verify and re-ran the accepted tokens.",
                       "{rounds} 轮中有 {rolled} 轮回滚：每次都用验证前的快照恢复 DeltaNet 记忆，再重算已接受的词元。"),
    "lane_select": ("{rolled} of {rounds} rounds rolled back: each applied only the accepted tokens' DeltaNet "
                    "writes, kept aside during verify, with no re-run.",
                    "{rounds} 轮中有 {rolled} 轮回滚：每次只把验证时暂存的、被接受词元的写入写进 DeltaNet 记忆，不重算。"),
    "lane_costs": ("Here a round costs {round:.2f} plain tokens ({passes:.2f} in model passes, {around:.2f} around "
                   "them): predicted {predicted:.2f}×.",
                   "在这里一轮耗时相当于 {round:.2f} 个普通词元（模型前向 {passes:.2f}，前向之外 {around:.2f}）："
                   "预测加速 {predicted:.2f}×。"),
    "cost_plain_token": ("On this machine a plain token costs {total:.3f} ms: its model pass {step:.3f} ms and "
                         "{around:.3f} ms around it (picking the token, the loop).",
                         "在这台机器上，普通解码一个词元耗时 {total:.3f} 毫秒：模型前向 {step:.3f} 毫秒，前向之外 "
                         "{around:.3f} 毫秒（选词、循环）。"),
    "cost_round": ("A round costs {total:.3f} ms: its model passes {passes:.3f} ms ({what}{one_call}) and {around:.3f} ms "
                   "around them; it yields {per_round:.2f} tokens, {per_token:.3f} ms each.",
                   "一轮耗时 {total:.3f} 毫秒：模型前向 {passes:.3f} 毫秒（{what}{one_call}），前向之外 {around:.3f} "
                   "毫秒；一轮产出 {per_round:.2f} 个词元，每个 {per_token:.3f} 毫秒。"),
    "cost_draft_vocab": ("A head pass scores its guess over {scored:,} of the {vocab:,} tokens (a draft vocabulary), "
                         "which hold {cover:.0%} of this lane's tokens.",
                         "草稿头每次前向只给 {vocab:,} 个词元中的 {scored:,} 个打分（草稿词表），它们占本道词元的 {cover:.0%}。"),
    "cost_draft_outside": (" {n} correction(s) fell outside it: tokens the head could not have guessed.",
                           "其中 {n} 次纠正落在词表之外：草稿头不可能猜中的词元。"),
    "round_passes": ("{k} head passes, the verify of {n} tokens", "{k} 次草稿头前向、一次验证 {n} 个词元"),
    "round_passes_auto": ("its head passes and the verify of the round's token with its drafts (0 to {k}; "
                          "{mean:.2f} on average)", "草稿头前向与一次验证（本轮词元加其草稿：0 到 {k} 个，平均 {mean:.2f} 个）"),
    "round_passes_rollback": (", snapshot and rollback", "、快照与回滚"),
    "round_passes_tree": ("the head's guesses for tree {tree}, the verify of {rows} rows, selecting the path",
                          "为树 {tree} 猜测、一次验证 {rows} 行、选出路径"),
    "one_call": (", run as one call", "，合为一次调用"),
    "cost_predict": ("With each lane's prompt pass ({prefill:.1f} ms plain, {prefill_spec:.1f} ms speculative), these "
                     "terms predict {predicted:.2f}×; measured {measured:.2f}×.",
                     "加上两边各自的提示词前向（普通 {prefill:.1f} 毫秒，投机 {prefill_spec:.1f} 毫秒），这些分项预测"
                     " {predicted:.2f}×；实测 {measured:.2f}×。"),
    "differs_token": ("The prediction misses: in this race a plain token took {race:.3f} ms, against {alone:.3f} ms "
                      "measured on its own ({off:+.0%}); this machine was busier during one of them.",
                      "预测有偏差：这场比赛里普通解码每个词元用了 {race:.3f} 毫秒，单独测得 {alone:.3f} 毫秒"
                      "（{off:+.0%}）；其中一次测量时机器更忙。"),
    "differs_round": ("The prediction misses: in this race a round took {race:.3f} ms, against {alone:.3f} ms measured "
                      "on its own ({off:+.0%}); this machine was busier during one of them.",
                      "预测有偏差：这场比赛里每轮用了 {race:.3f} 毫秒，单独测得 {alone:.3f} 毫秒（{off:+.0%}）；"
                      "其中一次测量时机器更忙。"),
    "tg_title": ("Where the time goes, per token, on this machine", "时间花在哪里：每个词元，在这台机器上"),
    "tg_plain": ("plain: one token", "普通：一个词元"),
    "tg_spec": ("k = {k} · {rollback}: a round ÷ {m:.2f} tokens", "k = {k} · {rollback}：一轮 ÷ {m:.2f} 个词元"),
    "tg_tree": ("tree {tree}: a round ÷ {m:.2f} tokens", "树 {tree}：一轮 ÷ {m:.2f} 个词元"),
    "tg_flat": ("assumed: a pass over {n} tokens costs one step", "假设：一次前向 {n} 个词元只花一步"),
    "tg_predicts": (" → {x:.2f}×", " → {x:.2f}×"),
    "tg_ms": ("{ms:.3f} ms", "{ms:.3f} 毫秒"),
    "tg_passes": ("model passes", "模型前向"),
    "tg_around": ("work around them", "前向之外的工作"),
    "tg_note": ("The last row is an assumption, not a measurement: where a pass over {n} tokens costs about one step "
                "(a GPU, or a model whose weights outrun the cache, so that a pass pays for reading them), the "
                "same rounds would be worth that much. On this CPU each extra row costs.",
                "最后一行是假设，不是测量：如果一次前向 {n} 个词元只花大约一步（GPU，或权重大到放不进缓存、一次前向"
                "主要花在读权重上的模型），同样的轮次就值这么多。在这台 CPU 上每多一行都要多花时间。"),
    "faster": ("faster", "更快"),
    "slower": ("(slower)", "（更慢）"),
    "tree_vs_chain": ("Tree {tree}: {tree_x:.2f}× plain; chain of k = {k}: {chain_x:.2f}× plain (medians of {n} "
                      "races).",
                      "树 {tree}：普通解码的 {tree_x:.2f} 倍；k = {k} 的链：{chain_x:.2f} 倍（{n} 场比赛的中位数）。"),
    "tree_vs_chain_one": ("Tree {tree}: {tree_x:.2f}× plain; chain of k = {k}: {chain_x:.2f}× plain (one race).",
                          "树 {tree}：普通解码的 {tree_x:.2f} 倍；k = {k} 的链：{chain_x:.2f} 倍（一场比赛）。"),
    "tree_why": ("In the race shown the tree carried {tree_pass:.2f} tokens per main-model pass against the chain's "
                 "{chain_pass:.2f} ({gain:.2f}×), and a tree round took {cost:.2f}× a chain round's time ({rows} "
                 "verify rows instead of {n}, more guesses to draft, a memory kept per node): a tree is faster only "
                 "when the first ratio beats the second.",
                 "在展示的这场比赛中，树每次主模型前向带来 {tree_pass:.2f} 个词元，链为 {chain_pass:.2f}（{gain:.2f} 倍）；"
                 "而一轮树耗时是一轮链的 {cost:.2f} 倍（验证 {rows} 行而不是 {n} 行，要多猜几个候选，每个节点都保存一份记忆）："
                 "只有前一个倍数超过后一个，树才更快。"),
    "winner_tree": ("Over the races run, the tree wins.", "综合所有比赛，树赢了。"),
    "winner_chain": ("Over the races run, the chain wins: the extra tokens do not pay for the dearer rounds.",
                     "综合所有比赛，链赢了：多出的词元抵不上更贵的轮次。"),
    "winner_level": ("Over the races run they come out level (within 2%): the extra tokens just pay for the "
                     "dearer rounds.",
                     "综合所有比赛，两者打平（相差不到 2%）：多出的词元刚好抵上更贵的轮次。"),
    "per_pass_line": ("{per_round:.2f} tokens per main-model pass (plain decoding: 1). This number does not depend "
                      "on the machine.",
                      "主模型每次前向产出 {per_round:.2f} 个词元（普通解码：1 个）。这个数字与机器无关。"),
    "why_slower": ("Why slower: a round yields {per_round:.2f} tokens but costs {round:.2f} plain tokens here. On a "
                   "GPU a pass over {n} tokens costs about one step; on this CPU it costs {verify:.2f} plain tokens.",
                   "为什么更慢：一轮产出 {per_round:.2f} 个词元，在这里却要花 {round:.2f} 个普通词元的时间。GPU 上一次"
                   "处理 {n} 个词元的前向约等于一步；在这台 CPU 上是 {verify:.2f} 个普通词元。"),
    # the race's verdict headline, its replay and timeline (demo.race_html)
    "slower_word": ("slower", "更慢"),
    "races_range": ("median of {n} races: {lo:.2f}–{hi:.2f}×", "{n} 场比赛的中位数：{lo:.2f}–{hi:.2f}×"),
    "races_one": ("one race", "一场比赛"),
    "races_one_busy": ("one race: others were waiting, so it ran no repeats", "一场比赛：有人在排队，所以没有重复比赛"),
    "per_pass_fact": ("{per_pass:.2f} tokens per main-model pass", "主模型每次前向 {per_pass:.2f} 个词元"),
    "identical_fact": ("identical text ✓", "文本完全相同 ✓"),
    "differ_fact": ("text differs ✗", "文本不同 ✗"),
    "speedup_shown": ("The race shown: speculative {spec:.1f} tok/s vs plain {plain:.1f} tok/s ({speedup:.2f}×); the "
                      "headline is the median of every race run with these settings.",
                      "上面这场：投机 {spec:.1f} 词元/秒，普通 {plain:.1f} 词元/秒（{speedup:.2f}×）；标题是同样设置下"
                      "所有比赛的中位数。"),
    "within_noise": ("The races ranged from {lo:.2f}× to {hi:.2f}×, on both sides of 1×: on this machine the "
                     "difference is within its noise, so call it a tie.",
                     "各场比赛在 {lo:.2f}× 到 {hi:.2f}× 之间，跨过了 1×：在这台机器上差别在噪声之内，算作平手。"),
    "loop_note": ("Repeating text: the output loops, and drafts are easy there, so tokens per pass is higher than "
                  "on text that does not repeat.",
                  "文本在重复：输出陷入循环，草稿很容易猜中，所以每次前向的词元数比不重复的文本要高。"),
    "replay_speed": ("Replay", "回放"),
    "replay_auto": ("auto", "自动"),
    "replay_button": ("↻ Replay", "↻ 重放"),
    "replay_clock": ("Replay of the measured times, {slow}× slower: {now} s of {total} s", 
                     "按实测时间回放，放慢 {slow} 倍：{now} 秒 / {total} 秒"),
    "replay_live": ("Measured times: {total} s of engine time in the slower lane. ↻ Replay plays it again.",
                    "实测时间：较慢的一方用了 {total} 秒引擎时间。点 ↻ 重放 再看一遍。"),
    "tl_title": ("Main-model passes over time (engine seconds)", "主模型前向随时间分布（引擎秒）"),
    "tl_plain": ("plain", "普通"),
    "tl_spec": ("speculative", "投机"),
    "tl_chain": ("chain k={k}", "k={k} 链"),
    "tl_tree": ("tree {tree}", "树 {tree}"),
    "tl_prefill": ("prompt", "提示词"),
    "tl_step": ("step: 1 token", "一步：1 个词元"),
    "tl_draft": ("draft (MTP head)", "草稿（MTP 头）"),
    "tl_verify": ("verify: the number is the tokens it kept", "验证：数字是它留下的词元数"),
    "tl_round": ("round (draft + verify)", "一轮（草稿 + 验证）"),
    "tl_split": ("A round's draft share is drawn from this machine's measured costs.",
                 "一轮中草稿所占的长度按这台机器实测的耗时画出。"),
    "tl_pass_title": ("{n} token(s) in {ms:.1f} ms", "{ms:.1f} 毫秒产出 {n} 个词元"),
    "tl_tick_ms": ("{x:.0f} ms", "{x:.0f} 毫秒"),
    "tl_tick_s": ("{x:g} s", "{x:g} 秒"),
    "summary_json": ("Summary (what the API returns)", "汇总（API 返回的内容）"),
    "no_mtp": ("{model} has no MTP draft head, so it cannot race. Pick another model.",
               "{model} 没有 MTP 草稿头，无法比赛。请换一个模型。"),
    # input notices (demo.validate)
    "empty_prompt": ("The prompt is empty: type some text first.", "提示词为空：请先输入一些文字。"),
    "prompt_too_long": ("The prompt does not fit the model's context.", "提示词超出了模型的上下文长度。"),
    "timing_while_compiling": ("The decoding steps are still compiling in the background and share the CPU with "
                               "this race, so its timings are disturbed. Run it again once the model line says just "
                               "compiled.",
                               "解码步骤仍在后台编译，与这次比赛争用 CPU，计时会受干扰。等模型一栏只显示“已编译”后再跑一次。"),
    "removed_chars": ("{n} invisible or invalid character(s) were removed from the prompt.",
                      "已从提示词中删除 {n} 个不可见或无效字符。"),
    "truncated_chars": ("The prompt had {n} characters; only the last {kept} were kept.",
                        "提示词有 {n} 个字符，只保留了最后 {kept} 个。"),
    "truncated_tokens": ("The prompt was {n} tokens, more than fits; it was cut to its last {kept} tokens.",
                         "提示词有 {n} 个词元，超出可用长度，已截为最后 {kept} 个词元。"),
    "not_a_number": ("{name} = {value!s} is not a number; using {default}.", "{name} = {value!s} 不是数字，改用 {default}。"),
    "clamped": ("{name} = {value!s} is outside {lo}–{hi}; using {used}.",
                "{name} = {value!s} 超出范围 {lo}–{hi}，改用 {used}。"),
    "rounded": ("{name} = {value!s} is not a whole number; using {used}.", "{name} = {value!s} 不是整数，改用 {used}。"),
    "bad_choice": ("{name} = {value!s} is not an option; using {default}.", "{name} = {value!s} 不是可选项，改用 {default}。"),
    "tree_takes_third_lane": ("A draft-tree lane ({tree}) takes the third lane: rollback “compare both” became "
                              "select.",
                              "草稿树赛道（{tree}）占用第三栏：回滚方式由“两种都比”改为 select。"),
    "tree_shared_noise": ("A draft tree ({tree}) samples with shared noise only: the rule became shared noise.",
                          "草稿树（{tree}）只支持共享噪声采样：规则已改为共享噪声。"),
    "tree_eager": ("The draft-tree lane runs eagerly, so every lane of this race runs eagerly too (a fair race).",
                   "草稿树赛道以 eager 方式运行，因此本场比赛的所有赛道也都以 eager 方式运行（保证公平）。"),
    "no_template": ("This model has no chat template: the prompt is used as raw text.",
                    "该模型没有对话模板：提示词按纯文本续写。"),
    # the step-through view
    "summary": (
        "**Speculative decoding in three sentences.** A cheap guesser — here the draft head that ships inside "
        "the checkpoint — proposes the next few tokens, and the big model checks all of them in a single "
        "pass, keeping the longest run it agrees with plus one token of its own. Because the big model has "
        "the last word at every position, the text is exactly what it would have written alone (token for "
        "token when greedy; the same distribution when sampling). The catch in this hybrid model: attention "
        "layers roll back by cutting their KV cache, but a DeltaNet layer's memory is a running sum that "
        "every guessed token would write into, so it must be restored from a copy, or left unwritten until the "
        "check: each token's write kept aside, and only the accepted ones applied.",
        "**三句话讲清投机解码。** 一个便宜的猜测者（这里是权重里自带的草稿头）先猜接下来几个词元，大模型"
        "一次前向把它们全部检查一遍，保留它认同的最长前缀，再补上一个自己的词元。因为每个位置都由大模型"
        "拍板，输出和它单独生成的完全一样（贪心时逐词元相同，采样时分布相同）。这个混合模型的难点在于："
        "注意力层回滚只需截断 KV 缓存，而 DeltaNet 层的记忆是累加出来的，猜错的词元已经写了进去，"
        "只能从副本恢复，或者先不写：把每个词元的写入暂存起来，检查之后只写入被接受的。"),
    "step_title": ("Step through it: guess, verify, accept or roll back", "逐步查看：猜测、验证、接受或回滚"),
    "keys": ("Keys: → next · ← back · space play/pause", "按键：→ 下一步 · ← 上一步 · 空格 播放/暂停"),
    "start": ("Start", "开始"),
    "next": ("Next ▶", "下一步 ▶"),
    "prev": ("◀ Back", "◀ 上一步"),
    "play": ("▶ Play", "▶ 播放"),
    "pause": ("⏸ Pause", "⏸ 暂停"),
    "reset": ("⟲ Reset", "⟲ 回到开头"),
    "step_speed": ("Auto-play: seconds per step", "自动播放：每步秒数"),
    "step_rollback": ("Rollback", "回滚方式"),
    "max_new": ("Max new tokens", "最多生成词元数"),
    "step_seed": ("Seed", "随机种子"),
    "watch_layer": ("Watched layer, numbered as on the layer map (L0 = 0; an attention layer: its nearest "
                    "DeltaNet layer; −1: the one whose memory shows most clearly)",
                    "观察的层，编号同层级图（L0 = 0；注意力层取最近的 DeltaNet 层；−1：记忆显示最清楚的那层）"),
    "watch_head": ("Watched value head (−1: the one whose memory shows most clearly)",
                   "观察的值头（−1：记忆显示最清楚的那个）"),
    "no_run": ("Press **Start** to record a run, or load a trace file.", "按 **开始** 录制一次运行，或载入一个轨迹文件。"),
    "recording": ("Recording…", "正在录制…"),
    "recorded": ("Recorded {tokens} tokens in {rounds} rounds with {model} ({ended}).",
                 "用 {model} 录制了 {tokens} 个词元、{rounds} 轮（{ended}）。"),
    "replayed": ("Replaying a trace file: {tokens} tokens in {rounds} rounds, recorded with {model}. No model runs.",
                 "回放轨迹文件：{tokens} 个词元、{rounds} 轮，录制模型 {model}。不运行模型。"),
    "step_ended_stop": ("ended at a stop token", "遇到结束词元"),
    "step_ended_length": ("max new tokens reached", "达到最多词元数"),
    "step_ended_time": ("time limit reached", "达到时间上限"),
    "step_ended_rounds": ("round limit reached", "达到轮数上限"),
    "done": ("Done: the end of the run. Back (←) or Reset to look again.", "结束：已到最后一步。按 ← 或“回到开头”重看。"),
    "error": ("Could not record: {error}", "无法录制：{error}"),
    # phases
    "phase_prefill": ("⓪ Prefill", "⓪ 预填充"),
    "phase_guess": ("① Guess", "① 猜测"),
    "phase_verify": ("② Verify", "② 验证"),
    "phase_accept": ("③ Accept", "③ 接受"),
    "phase_rollback": ("③ Roll back", "③ 回滚"),
    "round_of": ("round {r} of {n}", "第 {r} 轮 / 共 {n} 轮"),
    "step_of": ("step {s} of {n}", "第 {s} 步 / 共 {n} 步"),
    "explain_prefill": (
        "The whole prompt runs through the main model once. Every attention layer fills its KV cache, one "
        "column per token; every DeltaNet layer folds the prompt into its fixed-size memory. The main model "
        "picks the first token, and the draft head makes its first guess.",
        "整个提示词先在主模型里跑一遍。每个注意力层把每个词元存成 KV 缓存的一列；每个 DeltaNet 层把提示词"
        "累加进它固定大小的记忆。主模型选出第一个词元，草稿头做出第一个猜测。"),
    "explain_guess": (
        "The draft head looks at the main model's last hidden state and the token just chosen, and guesses "
        "the next {k} token(s). It is one small layer, so guessing is cheap. Nothing in the main model has "
        "changed yet.",
        "草稿头看着主模型最后一层的输出和刚选出的词元，猜出接下来的 {k} 个词元。它只有一层，猜得很便宜。"
        "主模型的状态还没有任何变化。"),
    "explain_guess_vocab": (
        " The head scores {scored:,} of the {vocab:,} tokens (a draft vocabulary, {source}), which cover {cover:.0%} "
        "of this text: reading only their rows of the output layer ({share:.0%} of it) makes a guess cheaper still, "
        "and a token outside them can never be guessed.",
        "草稿头只给 {vocab:,} 个词元中的 {scored:,} 个打分（草稿词表，{source}），它们覆盖这段文字的 {cover:.0%}："
        "只读输出层中这些行（占 {share:.0%}），猜测更便宜；词表之外的词元永远猜不中。"),
    "draft_shipped": ("shipped with the engine for the {what} tokenizer", "随引擎附带，与分词器匹配"),
    "draft_own": ("the checkpoint's own", "检查点自带"),
    "draft_by_hand": ("set by hand", "手动设定"),
    "miss_outside": (
        "The head could not have guessed {token}: it lies outside the {scored:,} tokens its drafts score.",
        "草稿头不可能猜中 {token}：它不在草稿打分的 {scored:,} 个词元之内。"),
    "explain_guess_none": (
        "k = auto: this round drafts nothing (the figure below says why). It is a plain step: the main model "
        "alone picks the next token.",
        "k = 自动：本轮不起草（原因见下图）。这是普通的一步：由主模型独自选出下一个词元。"),
    "explain_verify_none": (
        "The main model runs the current token alone, as plain decoding does: one position, one prediction, "
        "nothing to check.",
        "主模型只处理当前词元，与普通解码相同：一个位置，一个预测，没有需要核对的猜测。"),
    "explain_accept_none": (
        "A plain step: the main model's own token is kept. No guess was verified, so nothing is undone.",
        "普通的一步：保留主模型自己的词元。没有验证任何猜测，也就不用撤销任何东西。"),
    "explain_verify": (
        "The main model runs the current token plus the {k} guess(es) in one pass, so it predicts every "
        "position at once. ✓ means it would have chosen the guess itself; the first ✗ ends the run of "
        "accepted guesses. This pass already wrote the guesses into every layer's state.",
        "主模型把当前词元和 {k} 个猜测放进一次前向，一次算出每个位置的预测。✓ 表示它自己也会选这个词元；"
        "第一个 ✗ 之后的猜测都作废。这次前向已经把猜测写进了每一层的状态。"),
    "explain_verify_select": (
        "The main model runs the current token plus the {k} guess(es) in one pass, so it predicts every "
        "position at once. ✓ means it would have chosen the guess itself; the first ✗ ends the run of "
        "accepted guesses. This pass wrote the guesses into the KV caches, but no DeltaNet memory: each "
        "token's write (a decay, a key and a delta per head) is kept aside until the check is done.",
        "主模型把当前词元和 {k} 个猜测放进一次前向，一次算出每个位置的预测。✓ 表示它自己也会选这个词元；"
        "第一个 ✗ 之后的猜测都作废。这次前向把猜测写进了 KV 缓存，但没有写任何 DeltaNet 记忆：每个词元的写入"
        "（每个头一个衰减、一个键和一个增量）先暂存起来，等核对完再说。"),
    "explain_accept_select": (
        "All guesses were right: they are kept, and the main model's prediction after the last one comes "
        "free as a bonus token. The KV caches already hold exactly these tokens; every kept DeltaNet write "
        "is applied, in order.",
        "猜测全部正确：全部保留，主模型在最后一个猜测之后的预测还白送一个奖励词元。KV 缓存里正好就是这些词元；"
        "暂存的 DeltaNet 写入全部按顺序写入。"),
    "explain_accept": (
        "All guesses were right: they are kept, and the main model's prediction after the last one comes "
        "free as a bonus token. The states already hold exactly these tokens, so nothing is undone.",
        "猜测全部正确：全部保留，主模型在最后一个猜测之后的预测还白送一个奖励词元。状态里正好就是这些词元，"
        "不用撤销任何东西。"),
    "lead_none": ("No guess was right: only the main model's own token (the correction) is kept. ",
                  "一个都没猜中：只保留主模型自己的词元（修正词元）。"),
    "lead_some": ("Guess {m} was wrong: keep the {n} guess(es) before it and the main model's correction. ",
                  "第 {m} 个猜测错了：保留它之前的 {n} 个猜测和主模型的修正词元。"),
    "explain_rollback_select": (
        "The KV caches are simply cut back by position. The DeltaNet memory cannot be cut — so verify did not "
        "write it: it kept each token's write (a decay, a key and a delta per head, far smaller than the memory), "
        "and now only the accepted tokens' writes are applied, in order. No re-run.",
        "KV 缓存按位置截断即可。DeltaNet 的记忆没法截断——所以验证时不写记忆，只保留每个词元的写入（每个头一个衰减、"
        "一个键和一个增量，比记忆本身小得多），现在按顺序只写入被接受词元的那几份，不用重算。"),
    "explain_rollback_recompute": (
        "The KV caches are simply cut back by position. The DeltaNet memory cannot be cut, so it is put back "
        "from the snapshot taken before verify, and the accepted tokens are run again.",
        "KV 缓存按位置截断即可。DeltaNet 的记忆没法截断，只能用验证前拍的快照恢复，再把被接受的词元重算一遍。"),
    "explain_rollback_none": (
        "This run skips the restore on purpose: the KV caches are cut, but the DeltaNet memory keeps what the "
        "rejected guesses wrote. From here on the model reads a polluted memory.",
        "这次故意跳过恢复：KV 缓存截断了，DeltaNet 的记忆却留着被拒猜测写进去的内容。从此模型读到的是被污染的记忆。"),
    "stop_mid_round": ("A stop token ended the text inside this round; the tokens after it are dropped.",
                       "本轮中途出现了结束词元，其后的词元被丢弃。"),
    "max_mid_round": ("The token budget ran out inside this round; the rest is dropped.",
                      "本轮中途用完了词元额度，其余的被丢弃。"),
    # phase panel
    "draft_head_guesses": ("The draft head's guesses", "草稿头的猜测"),
    "alternatives": ("alternatives", "备选"),
    "position_after": ("after", "在此之后"),
    # the stepper's tree mode (demo.stepper.treeview)
    "step_tree": ("Draft: a chain of k, or a tree", "草稿：k 链，或一棵树"),
    "step_tree_info": ("A tree drafts the head's top guesses where it is unsure; the stepper then shows its tree "
                       "mode (k follows the tree's depth)",
                       "树在草稿头不确定处给出多个候选；此时单步视图进入树模式（k 取树的深度）"),
    "tree_chain": ("chain of k", "k 链"),
    "tree_main_after": ("main model after it: {token}", "主模型在它之后选：{token}"),
    "tree_row": ("row {r}", "第 {r} 行"),
    "tree_v_root": ("the round's first token", "本轮第一个词元"),
    "tree_v_guess": ("a guess, not checked yet", "猜测，尚未验证"),
    "tree_v_accepted": ("accepted", "接受"),
    "tree_v_rejected": ("rejected: the main model picked another token", "拒绝：主模型选了别的词元"),
    "tree_v_unchecked": ("not reached: its parent was not accepted", "未到达：它的父节点没有被接受"),
    "tree_next": ("row {row} wins; the main model's next token: {token} ({origin})",
                  "第 {row} 行获胜；主模型的下一个词元：{token}（{origin}）"),
    "tree_depth": ("depth {d}", "深度 {d}"),
    "fig_tree": ("Draft tree {shape}: {rows} rows in one verify pass", "草稿树 {shape}：一次验证前向共 {rows} 行"),
    "fig_tree_guess": ("The head's top guesses (q: its probability); ? = not checked yet",
                       "草稿头的候选（q：它给出的概率）；? = 尚未验证"),
    "fig_tree_verify": ("✓ the main model picks this token after its parent · ✗ it picks another · – parent "
                        "not accepted",
                        "✓ 主模型在父节点之后也选这个词元 · ✗ 选了别的 · – 父节点未被接受"),
    "fig_tree_accept": ("The walk: the longest accepted path (thick) to the winning node (ringed)",
                        "路径：最长的被接受路径（粗线），直到获胜节点（圆圈）"),
    "fig_mask": ("Who sees whom in the verify pass", "验证前向中谁能看到谁"),
    "fig_mask_sub": ("✓ seen · ✗ a sibling branch that running the rows in order would wrongly mix in",
                     "✓ 可见 · ✗ 按行顺序计算时会被错误混入的兄弟分支"),
    "mask_chain": ("chain of k = {k}: causal", "k = {k} 的链：因果掩码"),
    "mask_tree": ("tree: ancestor mask", "树：祖先掩码"),
    "fig_nodes": ("Each node's memory · DeltaNet layer L{layer}, head {head}", "每个节点的记忆 · DeltaNet 层 L{layer}，头 {head}"),
    "fig_nodes_sub": ("what the node's own path wrote (its memory − the memory before the round)",
                      "该节点自身路径写入的内容（它的记忆 − 本轮开始前的记忆）"),
    "nodes_tree_row": ("Tree: each node from its parent's memory", "树：每个节点从父节点的记忆出发"),
    "nodes_tree_row_short": ("Tree", "树"),
    "nodes_row_order_short": ("Row order ✗", "按行顺序 ✗"),
    "nodes_row_order": ("Pitfall: the rows run in order (a chain engine)", "陷阱：按行顺序计算（链式引擎的做法）"),
    "tree_no_memory": ("This model has no DeltaNet layer: no memory to show.", "该模型没有 DeltaNet 层：没有记忆可展示。"),
    "tree_selected": ("selected", "被选用"),
    "tree_recomputed": ("recomputed", "重算得到"),
    "tree_same": ("same (its rows come in order)", "相同（它的行本来就按顺序）"),
    "tree_same_short": ("same", "相同"),
    "tree_wrong": ("wrong: off by {x:.0%}", "错误：偏差 {x:.0%}"),
    "fig_windows": ("Each row's conv window ({k} inputs, oldest first)", "每一行的卷积窗口（{k} 个输入，最旧的在左）"),
    "fig_windows_sub": ("grey: before the round · sky blue: an ancestor's row · blue: its own · ✗ what row order "
                        "would read there",
                        "灰：本轮之前 · 天蓝：祖先行 · 蓝：它自己 · ✗ 按行顺序时这里会读到的词元"),
    "window_col": ("t{i}", "t{i}"),
    "window_self": ("itself", "自身"),
    "window_own": ("its own input", "它自己的输入"),
    "window_row": ("an ancestor's row", "祖先行"),
    "window_before": ("from before the round", "来自本轮之前"),
    "fig_slots": ("KV slots of every attention layer", "每个注意力层的 KV 槽位"),
    "fig_slots_sub": ("verify writes row r at slot P + r; the walk moves the winning path to P, P+1, … and cuts the "
                      "rest",
                      "验证把第 r 行写到槽位 P + r；之后把获胜路径移到 P、P+1、…，其余截掉"),
    "slots_verify": ("after verify", "验证后"),
    "slots_accept": ("after the walk", "选定路径后"),
    "slot_cut": ("cut", "截掉"),
    "slot_position": ("position", "位置"),
    "tree_row_h": ("row", "行"),
    "tree_parent_h": ("after", "接在"),
    "tree_rank_h": ("head's rank", "草稿头排名"),
    "tree_guesses": ("The draft head's {n} guesses, as a tree", "草稿头的 {n} 个猜测，组成一棵树"),
    "tree_path_h": ("its path", "它的路径"),
    "tree_roworder_h": ("in row order", "按行顺序"),
    "tree_same_pick": ("same", "相同"),
    "tree_walk_h": ("accepted path", "被接受的路径"),
    "tree_kv_moved": ("rows {rows} moved to positions {p}…; {cut} slots cut", "第 {rows} 行移到位置 {p}…；截掉 {cut} 个槽位"),
    "tree_mem_select": ("every DeltaNet layer applies the writes on the path to row {row} and takes the conv "
                        "window kept there (no re-run)",
                        "每个 DeltaNet 层写入通往第 {row} 行的路径上的写入，并选用那里保存的卷积窗口（不重算）"),
    "tree_mem_recompute": ("snapshot restored, the path's {n} tokens run again", "恢复快照，再重算路径上的 {n} 个词元"),
    "tree_explain_guess": (
        "**Guess, as a tree ({shape}).** Where the head is unsure, one guess per position wastes the round when "
        "it is wrong. A tree keeps its top guesses as siblings: {n} guesses, each under the token it follows. "
        "Every one of them will be checked in the same single pass.",
        "**以树的形式猜测（{shape}）。** 草稿头不确定时，每个位置只猜一个，猜错就浪费整轮。树把它排名靠前的几个候选"
        "并列为兄弟节点：共 {n} 个猜测，各自挂在它所接续的词元下面。它们会在同一次前向里全部得到验证。"),
    "tree_explain_verify": (
        "**Verify {rows} rows in one pass.** The rows are no longer a sequence. Attention: each row sees the "
        "cache plus its ancestors only (the ancestor mask), rotated at its depth. DeltaNet: each node's memory "
        "is its parent's memory updated with its own token (one batched step per depth), and its conv window "
        "holds its ancestors' inputs.",
        "**一次前向验证 {rows} 行。** 这些行不再是一条序列。注意力层：每行只能看到缓存和它的祖先（祖先掩码），并按"
        "它的深度做旋转位置编码。DeltaNet 层：每个节点的记忆是父节点的记忆再写入它自己的词元（每一层深度一次批量更新），"
        "卷积窗口里放的是它祖先的输入。"),
    "tree_explain_pitfall": (
        "*The pitfall:* run the rows in order, as a chain engine would, and a sibling's token ends up in the "
        "memory of the rows after it: up to {x:.0%} off here (the second row of memory panels).",
        "*陷阱：* 如果像链式引擎那样按行顺序计算，兄弟节点的词元就会混进后面各行的记忆：这里最多偏差 {x:.0%}"
        "（记忆图第二行）。"),
    "tree_explain_bonus": (
        "**Accept: the walk reached a leaf.** {n} guesses accepted along one path, and the main model's next "
        "token comes free (bonus): {m} tokens from one pass. The winning node is row {row}.",
        "**接受：路径走到了叶子。** 一条路径上接受了 {n} 个猜测，主模型的下一个词元白送（奖励）：一次前向得到 {m} 个"
        "词元。获胜节点是第 {row} 行。"),
    "tree_explain_correction": (
        "**Accept and roll back.** From the root, follow the child whose token the main model picks: {n} "
        "accepted, then no child matches and the main model's own token corrects it ({m} tokens). The "
        "winning node is row {row}; every other branch is dropped.",
        "**接受并回滚。** 从根出发，沿着主模型选中的子节点往下走：接受 {n} 个后，没有子节点匹配，由主模型自己的词元"
        "修正（共 {m} 个词元）。获胜节点是第 {row} 行；其余分支全部丢弃。"),
    "tree_explain_select": (
        "KV: the winning path's slots are moved into place and the rest cut. DeltaNet: every node's write was "
        "kept, so each layer applies the writes along the winner's path (select, extended to trees).",
        "KV：把获胜路径的槽位移到正确位置，其余截掉。DeltaNet：每个节点的写入都保留着，所以每层沿获胜路径依次写入"
        "（select 推广到树）。"),
    "tree_explain_recompute": (
        "KV is cut back; DeltaNet: the snapshot is restored and the winning path run again.",
        "KV 截回；DeltaNet：恢复快照，再把获胜路径重算一遍。"),
    "main_choice": ("main model's choice", "主模型的选择"),
    "prob": ("p", "概率"),
    "draft_p": ("p(guess)", "p(猜测)"),
    "guess": ("guess", "猜测"),
    "accept_prob": ("accept with probability min(1, p/q) = {a:.2f}", "以概率 min(1, p/q) = {a:.2f} 接受"),
    "noise_title": ("Shared noise: each side picks its largest log-probability + G, with the same G per token and "
                    "position (★: the pick). Where both pick the same token, the draft is kept.",
                    "共享噪声：双方各自选出 对数概率 + G 最大的词元，同一位置同一词元的 G 相同（★：选中）。两边选中同一词元时，"
                    "草稿被保留。"),
    "noise_draft": ("draft: log q + G", "草稿：log q + G"),
    "noise_main": ("main model: log p + G", "主模型：log p + G"),
    "emitted": ("Emitted this round", "本轮输出"),
    "state_kv": ("KV caches ({n} attention layers)", "KV 缓存（{n} 个注意力层）"),
    "state_memory": ("DeltaNet memory + conv window ({n} layers)", "DeltaNet 记忆 + 卷积窗口（{n} 层）"),
    "state_head": ("MTP head's KV cache", "MTP 头的 KV 缓存"),
    "kv_grow": ("{a} → {b} positions", "{a} → {b} 个位置"),
    "kv_cut": ("{a} → {b} → {c}: cut by {d}", "{a} → {b} → {c}：截掉 {d} 个"),
    "memory_snapshot": ("snapshot copied before verify ({size})", "验证前复制快照（{size}）"),
    "memory_restored": ("restored from the snapshot, {n} token(s) re-run ({ms:.1f} ms)",
                        "从快照恢复，重算 {n} 个词元（{ms:.1f} 毫秒）"),
    "memory_selected": ("applied the writes of {n} of {m} tokens, kept aside during verify (no re-run)",
                        "写入验证时暂存的 {m} 个词元中前 {n} 个的写入（不重算）"),
    "memory_plain": ("one token written, as plain decoding writes it (no guess to undo)", "写入一个词元，与普通解码相同（没有要撤销的猜测）"),
    "head_rests": ("nothing written this step; it catches up on these tokens in one pass when it next guesses",
                   "这一步什么也不写；下次猜测时用一次前向补上这些词元"),
    "memory_kept": ("kept as verify left it (all guesses accepted)", "保持验证后的样子（猜测全中）"),
    "memory_dirty": ("left dirty: the rejected guesses stay in the memory", "保持脏状态：被拒猜测仍留在记忆里"),
    "head_cut": ("dropped its guesses, learned the {n} accepted position(s)", "丢掉猜测部分，学入 {n} 个被接受的位置"),
    # origins
    "short_origin_main": ("main model", "主模型"),
    "short_origin_draft": ("accepted guess", "接受的猜测"),
    "short_origin_correction": ("correction", "修正"),
    "short_origin_bonus": ("bonus", "奖励"),
    # proof
    "skip_restore": ("Skip the restore (proof that it is needed)", "跳过恢复（证明恢复是必要的）"),
    "proof_running": ("Running three greedy decodes of {n} tokens…", "正在做三次 {n} 个词元的贪心解码…"),
    "proof_plain": ("Plain greedy decoding", "普通贪心解码"),
    "proof_restored": ("Speculative, with the restore ({rollback})", "投机解码，带恢复（{rollback}）"),
    "proof_skipped": ("Speculative, restore skipped", "投机解码，跳过恢复"),
    "proof_same": ("identical to plain decoding ✓", "与普通解码完全一致 ✓"),
    "proof_differs": ("departs from plain decoding at token {i} ✗", "在第 {i} 个词元处偏离普通解码 ✗"),
    "proof_never": ("Over {n} tokens the dirty memory did not change a single choice this time (every "
                    "guess accepted, or the pollution too small). Try a longer run or another prompt.",
                    "这次 {n} 个词元内，脏记忆没有改变任何一个选择（猜测全中，或污染太小）。"
                    "试试更长的生成或换个提示词。"),
    "proof_verdict": ("Without the restore the model reads a memory polluted by rejected guesses, and the "
                      "text goes wrong at token {i}.",
                      "不做恢复，模型读到的是被拒猜测污染过的记忆，文本在第 {i} 个词元处出错。"),
    "proof_needs_model": ("The proof runs the model; load a model first.", "证明需要运行模型；请先加载模型。"),
    # record / replay
    "export": ("Export trace (JSON)", "导出轨迹（JSON）"),
    "trace_file": ("Trace file", "轨迹文件"),
    "import": ("Load a trace file (JSON, ≤ {mb} MB)", "载入轨迹文件（JSON，≤ {mb} MB）"),
    "import_failed": ("Trace file rejected: {error}", "轨迹文件被拒绝：{error}"),
    "nothing_to_export": ("Nothing to export yet: press Start first.", "还没有可导出的内容：请先按开始。"),
    # figure words
    "fig_layers": ("Layer map: what each state does", "层级图：每种状态在做什么"),
    "fig_memory": ("DeltaNet memory S of L{layer}, value head {head}", "L{layer} 的 DeltaNet 记忆 S，值头 {head}"),
    "fig_conv": ("Conv window of L{layer}<br><sub>columns = the last {n} tokens, newest right</sub>",
                 "L{layer} 的卷积窗口<br><sub>列 = 最近 {n} 个词元，最新在右</sub>"),
    "fig_change": ("Where this round wrote: ‖ΔS‖ per DeltaNet layer", "本轮写在哪里：每个 DeltaNet 层的 ‖ΔS‖"),
    "change_verify": ("written by verify (② − ①)", "验证写入的（② − ①）"),
    "change_removed": ("taken back: the rejected drafts' writes", "撤回的：被拒草稿写入的"),
    "change_verify_writes": ("verify's kept writes (② − ①)", "验证暂存的写入（② − ①）"),
    "change_removed_writes": ("never applied: the rejected drafts' writes", "从未写入的：被拒草稿的写入"),
    "change_norm": ("‖ΔS‖, all heads", "‖ΔS‖，全部头"),
    "fig_kv": ("KV cache length", "KV 缓存长度"),
    "fig_cost": ("Cost of each round", "每轮耗时"),
    "fig_acceptance": ("Acceptance over the run", "全程接受情况"),
    "fig_whatif": ("What if: speed-up against acceptance rate", "假如：加速比与接受率的关系"),
    "fig_drift": ("How far the skipped run's memory drifts", "跳过恢复后记忆偏离多远"),
    "decision_steps": ("a round of 0, 1, 2 … drafts: {costs} plain steps", "起草 0、1、2……个的一轮：{costs} 个普通步"),
    "decision_how": ("k = auto: before each round drafts anything, it chooses how many tokens to draft. How often the "
                     "head's draft at each position was right lately (when those before it were) is learned from the "
                     "latest rounds; drafting one more pays when the chance that it and those before it are right "
                     "(what it adds, in tokens) is worth what it adds to the round's time on this machine, measured "
                     "once ({steps}). The round then runs exactly as a fixed k's does: compiled, in one call, where "
                     "the engine can.",
                     "k = 自动：每轮起草之前，先决定起草几个词元。草稿头在每个位置最近猜对的频率（在之前的都对的前提下）"
                     "从最近几轮中学得；再多起草一个是否划算，要看它与之前的都对的概率（它平均带来的词元数）是否抵得上它在"
                     "本机给这一轮增加的时间（只测一次：{steps}）。之后这一轮与固定 k 的一轮完全相同：引擎能编译时，一次调用完成。"),
    "fig_decision": ("This round: how far to draft (k = auto)", "本轮：起草多远（k = 自动）"),
    "decision_guess": ("draft {j}", "草稿 {j}"),
    "decision_kept": ("drafted: the chance it and those before it are right", "已起草：它与之前的草稿都对的概率"),
    "decision_dropped": ("not drafted: the same chance", "未起草：同样的概率"),
    "decision_pays": ("pays above", "高于此才划算"),
    "decision_head": ("right at this position lately", "最近在此位置的猜对率"),
    "decision_axis": ("chance", "概率"),
    "decision_none": ("no guess this round", "本轮没有猜测"),
    "decision_rest_short": ("the head rests: a plain step", "草稿头休息：普通的一步"),
    "decision_rested": ("The head rests: a plain step, no guess. After a round that kept no guess it sits out 1, "
                        "2, 4 … up to 16 steps while it stays unsure, then catches up in one pass and guesses again.",
                        "草稿头休息：普通的一步，不猜。一轮没有保留猜测后，它依次歇 1、2、4……最多 16 步（只要它仍没有把握），"
                        "然后用一次前向补上错过的词元，再次猜测。"),
    "decision_probe": ("Back from a rest: the round drafts {m} whatever the rule says (the first right {chance:.0%} of "
                       "the time lately; it adds {cost:.2f} of a step), so the run keeps learning how often the head "
                       "is right.",
                       "休息后的试探：不论规则如何，这一轮都起草 {m} 个（第一个最近猜对率 {chance:.0%}；多花 {cost:.2f} 步），"
                       "以便继续了解草稿头猜对的频率。"),
    "decision_plain": ("A plain step: a first draft, right {chance:.0%} of the time lately, would add {cost:.2f} of a "
                       "step for {tokens:.2f} of a token on average; it pays only above {even:.2f}.",
                       "普通的一步：第一个草稿最近的猜对率为 {chance:.0%}，验证它要多花 {cost:.2f} 步，平均只换来 "
                       "{tokens:.2f} 个词元；高于 {even:.2f} 才划算。"),
    "decision_stopped": ("Drafts {m}: a draft {j}, right with those before it {chance:.0%} of the time lately, would "
                         "add {cost:.2f} of a step for {tokens:.2f} of a token on average; it pays only above "
                         "{even:.2f}.",
                         "起草 {m} 个：第 {j} 个草稿连同之前的最近都对的概率为 {chance:.0%}，验证它要多花 "
                         "{cost:.2f} 步，平均只换来 {tokens:.2f} 个词元；高于 {even:.2f} 才划算。"),
    "decision_all_max": ("Drafts {m}, the most k = auto drafts: the last, right with those before it {chance:.0%} of "
                         "the time lately, adds {cost:.2f} of a step for {tokens:.2f} of a token (it pays above "
                         "{even:.2f}).",
                         "起草 {m} 个（k = 自动 的上限）：最后一个连同之前的最近都对的概率为 {chance:.0%}，"
                         "多花 {cost:.2f} 步，换来 {tokens:.2f} 个词元（高于 {even:.2f} 即划算）。"),
    "before": ("before", "验证前"),
    "after_verify": ("after verify", "验证后"),
    "after": ("after", "回滚后"),
    "after_accept": ("after", "接受后"),
    "after_rollback": ("after rollback", "回滚后"),
    "after_none": ("after (left dirty)", "之后（未恢复）"),
    "mem_before": ("① before verify", "① 验证前"),
    "mem_snapshot": ("① snapshot<br>(taken before verify)", "① 快照<br>（验证前拍下）"),
    "mem_verify": ("② after verify", "② 验证后"),
    "mem_polluted": ("② after verify: polluted<br>by {r} rejected draft(s) ×", "② 验证后：被 {r} 个<br>被拒草稿污染 ×"),
    "mem_verify_writes": ("② if every kept write<br>were applied", "② 假如写入全部<br>暂存的写入"),
    "mem_polluted_writes": ("② if every kept write were<br>applied: {r} rejected draft(s) ×",
                            "② 假如全部写入：含 {r} 个<br>被拒草稿 ×"),
    "mem_restored": ("③ restored<br>from the snapshot", "③ 从快照<br>恢复"),
    "mem_no_restore": ("③ no restore needed<br>(all drafts accepted)", "③ 无需恢复<br>（草稿全中）"),
    "mem_rerun": ("④ after re-running<br>{n} accepted token(s)", "④ 重算 {n} 个<br>被接受词元之后"),
    "mem_kept": ("{i} kept as verify<br>left it", "{i} 保持验证后的<br>样子"),
    "mem_selected": ("③ {n} of {m} kept writes<br>applied (no re-run)", "③ 写入 {m} 份中的<br>前 {n} 份（不重算）"),
    "mem_dirty": ("③ after: left dirty<br>(restore skipped)", "③ 之后：未恢复<br>（跳过恢复）"),
    "mem_prefill": ("after prefill", "预填充之后"),
    "diff_verify": ("② − ①: what verify wrote", "② − ①：验证写入的"),
    "diff_verify_writes": ("② − ①: the kept writes, together", "② − ①：暂存的全部写入"),
    "diff_restore": ("③ − ①: restored − snapshot<br>= 0 everywhere ✓", "③ − ①：恢复 − 快照<br>处处为 0 ✓"),
    "diff_restore_differs": ("③ − ①: restored − snapshot<br>max |Δ| {d:.2g} ✗", "③ − ①：恢复 − 快照<br>最大 |Δ| {d:.2g} ✗"),
    "diff_kept": ("③ − ①: what this round kept", "③ − ①：本轮保留的"),
    "diff_removed": ("② − {last}: written by the<br>rejected drafts, removed", "② − {last}：被拒草稿写入、<br>已撤销的"),
    "diff_removed_writes": ("② − ③: the rejected drafts'<br>writes, never applied",
                            "② − ③：被拒草稿的写入，<br>从未写入"),
    "diff_not_removed": ("② − ③: nothing removed", "② − ③：没有撤销任何东西"),
    "diff_none_rejected": ("② − {last}: no draft rejected,<br>nothing to remove", "② − {last}：没有被拒草稿，<br>无需撤销"),
    "not_needed": ("not needed", "不需要"),
    "clipped": ("clipped at the<br>{q}th percentile,<br>±{x:.2g}", "在第 {q} 百分位<br>处截断，<br>±{x:.2g}"),
    "max_change": ("max |Δ| {d:.2g}", "最大 |Δ| {d:.2g}"),
    "key_dim": ("key dim", "键维度"),
    "value_dim": ("value dim", "值维度"),
    "fig_memory_sub": ("rows: key dimension, columns: value dimension; one colour scale for the whole run, clipped "
                       "at the 99th percentile of |value|",
                       "行：键维度，列：值维度；整次运行使用同一色阶，在 |值| 的第 99 百分位处截断"),
    "slots": ("Per-token writes kept during verify (select applies the accepted ones, no re-run):",
              "验证时保留的每个词元的写入（select 只写入被接受的，不重算）："),
    "slot_after": ("{token}'s write", "{token} 的写入"),
    "slot_selected": ("applied", "写入"),
    "not_yet": ("next phase", "下一阶段"),
    "bytes": ("state size (bytes)", "状态大小（字节）"),
    "positions": ("positions", "位置数"),
    "mtp_head": ("MTP head", "MTP 头"),
    "deltanet": ("DeltaNet", "DeltaNet"),
    "attention": ("attention", "注意力"),
    "round": ("round", "轮"),
    "ms": ("milliseconds", "毫秒"),
    "accepted_per_round": ("accepted guesses", "接受的猜测"),
    "acceptance_rate": ("acceptance so far", "累计接受率"),
    "rate_a": ("acceptance rate a (per guess)", "接受率 a（每个猜测）"),
    "axis_speedup": ("speed-up over plain decoding", "相对普通解码的加速比"),
    "break_even": ("break-even a = {a:.2f}", "盈亏平衡 a = {a:.2f}"),
    "no_break_even": ("no break-even: slower at every a", "无盈亏平衡点：任何 a 下都更慢"),
    "this_run": ("this run: a = {a:.2f}, predicted {s:.2f}×", "本次：a = {a:.2f}，预测 {s:.2f}×"),
    "whatif_costs_race": ("the race's costs on this machine: a plain token {tok:.3f} ms (its pass {ms:.3f} ms); a round {round:.2f} plain tokens (verify {verify:.2f}, head pass {draft:.2f}, work around the round {around:.2f})",
        '比赛在本机测得的耗时：普通一个词元 {tok:.3f} 毫秒（其中前向 {ms:.3f} 毫秒）；一轮 {round:.2f} 个普通词元（验证 {verify:.2f}、草稿头一次 {draft:.2f}、前向之外 {around:.2f}）'),
    "whatif_costs_race_whole": ("the race's costs on this machine: a plain token {tok:.3f} ms (its pass {ms:.3f} ms); a round, run as one call, {round:.2f} plain tokens (taken apart: verify {verify:.2f}, head pass {draft:.2f}; work around the round {around:.2f})",
        '比赛在本机测得的耗时：普通一个词元 {tok:.3f} 毫秒（其中前向 {ms:.3f} 毫秒）；一轮合为一次调用，{round:.2f} 个普通词元（拆开看：验证 {verify:.2f}、草稿头一次 {draft:.2f}；前向之外 {around:.2f}）'),
    "whatif_costs_recording": ("this recording's own times (no measurement of the race's path in this trace): verify {verify:.2f}, head pass {draft:.2f}, round {round:.2f} plain tokens (a plain token: {tok:.3f} ms)",
        '本次录制自身的耗时（此轨迹里没有比赛路径的测量）：验证 {verify:.2f}、草稿头一次 {draft:.2f}、一轮 {round:.2f} 个普通词元（普通一个词元 {tok:.3f} 毫秒）'),
    "whatif_costs_recording_whole": ("this recording's own times: a round {round:.2f} plain tokens (a plain token: {tok:.3f} ms)",
        '本次录制自身的耗时：一轮 {round:.2f} 个普通词元（普通一个词元 {tok:.3f} 毫秒）'),
    "whatif_caption": ("The curve is the speed-up over plain decoding that the race predicts at each acceptance rate a, for a run of this length (each lane's prompt pass included): the tokens a round yields (its accepted guesses, plus one of the main model's) divided by what the round costs in plain tokens of {plain:.3f} ms (a plain token: its model pass and the work around it): the head's guesses, one verify pass, the copies a rollback needs, the rollback itself in the rounds that miss a guess, and the work around the round; with {how}.",
        '曲线是比赛在每个接受率 a 下、对这样长度的一次运行（含两边的提示词前向）预测的、相对普通解码的加速比：一轮产出的词元数（被接受的猜测，再加主模型自己的一个）除以这一轮的耗时，以普通词元（每个 {plain:.3f} 毫秒：模型前向加前向之外的工作）计：草稿头的猜测、一次验证前向、回滚所需的状态副本、猜错时的回滚本身，以及这一轮前向之外的工作。{how}。'),
    "whatif_caption_whole": ("The curve is the speed-up over plain decoding that the race predicts at each acceptance rate a, for a run of this length (each lane's prompt pass included): the tokens a round yields (its accepted guesses, plus one of the main model's) divided by what the round costs in plain tokens of {plain:.3f} ms (a plain token: its model pass and the work around it). The race runs a round's passes as one call (greedy select), so they cost the same at every a; with {how}.",
        '曲线是比赛在每个接受率 a 下、对这样长度的一次运行（含两边的提示词前向）预测的、相对普通解码的加速比：一轮产出的词元数（被接受的猜测，再加主模型自己的一个）除以这一轮的耗时，以普通词元（每个 {plain:.3f} 毫秒：模型前向加前向之外的工作）计。比赛把一轮的前向合为一次调用（贪心 select），所以其耗时与 a 无关。{how}。'),
    "whatif_from_race": ("this host's cost terms as the race measures them (once per model and settings, in lanes run for them, medians), not the recording's own slower times",
        '本机的各项耗时按比赛的方式测得（每个模型与设置测一次，在专门运行的跑道里，取中位数），而非录制自身较慢的耗时'),
    "whatif_from_recording": ("costs from this recording's own instrumented times (the trace holds no measurement "
                              "of the race's path): slower than the race",
                              "耗时取自本次录制自身的插桩时间（轨迹里没有比赛路径的测量）：比赛跑中的慢"),
    "prefill_ms": ("(prefill {ms:.1f} ms)", "（预填充 {ms:.1f} 毫秒）"),
    "cost_recording": ("this recording, with snapshots for the views: slower than the race",
                       "本次录制，含为各视图拍下的状态：比赛跑中的慢"),
    "cost_raced": ("each round as the race runs it (timed again, without the views' snapshots)",
                   "每轮按比赛的方式运行（不带视图的快照，重新计时）"),
    "cost_raced_differs": ("These rounds, timed again as the race runs them, took {rec:.1f} ms on average, {x:.2f}× "
                           "the {race:.1f} ms the race's measurement gives a round: timings on a shared machine vary "
                           "from moment to moment.",
                           "这些轮按比赛的方式重新计时，平均 {rec:.1f} 毫秒，是比赛测得一轮 {race:.1f} 毫秒的 {x:.2f} 倍："
                           "共享机器上的计时时快时慢。"),
    "cost_fused": ("the whole round, one call", "整轮，一次调用"),
    "whatif_sub_race": ("from the race's costs on this machine (below)", "依据比赛在本机测得的耗时（见下）"),
    "whatif_sub_recording": ("from this recording's own times (below)", "依据本次录制自身的耗时（见下）"),
    "cost_slower": ("The recording's rounds took {rec:.1f} ms on average, {x:.1f}× the {race:.1f} ms the race's measurement "
                    "gives a round (the chart of each round's cost shows the recording's times): the recording "
                    "times each phase apart and copies the watched states for the views.",
                    "录制的每轮平均 {rec:.1f} 毫秒，是比赛测得一轮 {race:.1f} 毫秒的 {x:.1f} 倍：录制分阶段计时，"
                    "并为各视图复制所观察的状态。"),
    "cost_slower_whole": ("The recording's rounds took {rec:.1f} ms on average, {x:.1f}× the {race:.1f} ms the race's "
                          "measurement gives a round (the chart of each round's cost shows the recording's times): the race "
                          "runs a round as one call, the recording runs each phase apart and copies the watched "
                          "states for the views.",
                          "录制的每轮平均 {rec:.1f} 毫秒，是比赛测得一轮 {race:.1f} 毫秒的 {x:.1f} 倍：比赛把一轮合为"
                          "一次调用，录制则分阶段运行，并为各视图复制所观察的状态。"),
    "cost_faster": ("The recording's rounds took {rec:.1f} ms on average, {x:.2f}× the {race:.1f} ms the race's measurement "
                    "gives a round (the chart of each round's cost shows the recording's times): timings on a shared "
                    "machine vary from moment to moment.",
                    "录制的每轮平均 {rec:.1f} 毫秒，是比赛测得一轮 {race:.1f} 毫秒的 {x:.2f} 倍：共享机器上的计时"
                    "时快时慢。"),
    "cost_draft": ("draft (head passes)", "草稿（草稿头前向）"), "cost_verify": ("verify", "验证"),
    "cost_catch_up": ("the head catches up, guesses d1", "草稿头追赶并猜下一个 d1"),
    "cost_snapshot": ("snapshot", "快照"),
    "cost_select_snapshot": ("set up a slot per token", "为每个词元准备槽位"),
    "cost_select_restore": ("accept + apply the kept writes", "接受 + 写入保留的写入"),
    "cost_recompute_restore": ("accept + restore the snapshot", "接受 + 从快照恢复"),
    "cost_none_restore": ("accept + cut the KV caches", "接受 + 截断 KV 缓存"),
    "cost_rerun": ("re-run the accepted tokens", "重算被接受的词元"),
    "status_untouched": ("untouched", "未动"),
    "status_written": ("written", "写入"),
    "status_snapshot_written": ("snapshot, then written", "先快照再写入"),
    "status_steps_kept": ("writes kept aside", "写入暂存"),
    "status_truncated": ("truncated", "截断"),
    "status_restored": ("restored + re-run", "恢复 + 重算"),
    "status_selected": ("accepted writes applied", "写入被接受的部分"),
    "status_kept": ("kept", "保留"),
    "status_dirty": ("left dirty", "留下脏状态"),
    "token_index": ("token", "词元"),
    "max_abs_diff": ("max |memory − correct|", "最大 |记忆 − 正确值|"),
    # the stepper: memory panels said in words, the change chart's sizes, the stepper's own subtitle (issue #50)
    "panel_zero": ("0 everywhere: nothing to draw", "处处为 0：没有可画的"),
    "panel_faint_memory": ("nearly empty: every value is under {p}% of the colour scale (the gate has all but "
                           "erased this head's memory)",
                           "几乎为空：所有值都不到色阶的 {p}%（门控几乎抹掉了这个头的记忆）"),
    "panel_faint_change": ("too small to see: every change is under {p}% of the colour scale",
                           "小到看不见：所有变化都不到色阶的 {p}%"),
    "change_more_back": ("more taken back than written in {layers}: these are sizes of changes, which do not add up "
                         "(the rejected drafts' change partly cancelled what the accepted tokens wrote)",
                         "{layers} 撤回的多于写入的：这些是变化的大小，不能相加（被拒草稿的改动部分抵消了被接受词元写入的）"),
}


def is_zh(lang):
    return lang in ("中文", "zh", "zh-CN")


class _Unknown:
    """A parameter the caller did not give: reads as "?" whatever its format."""

    def __format__(self, spec):
        return "?"

    def __str__(self):
        return "?"


class _Params(dict):
    def __missing__(self, key):
        return _Unknown()


def t(key, lang=DEFAULT_LANG, **params):
    """The string for `key` in `lang`, with `params` filled in (str.format); a parameter missing from
    `params` reads as "?", one it does not use is ignored. Without params: the template itself."""
    en, zh = STRINGS.get(key, (key, None))
    text = zh if is_zh(lang) and zh else en
    try:
        return text.format_map(_Params(params)) if params else text
    except (AttributeError, IndexError, TypeError, ValueError):
        return text


def notice_text(notice, lang=DEFAULT_LANG):
    """A demo.validate Notice (or InputError) in words."""
    return t(notice.key, lang, **notice.params)
