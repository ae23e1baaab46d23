"""English and Chinese words of the page, and the whole-app language switch.

    t("run", "中文")                          -> "开始比赛"
    t("tok_s", "English", value=12.5)         -> "12.5 tok/s"
    notice_text(Notice("clamped", {...}), lang)

The language radio (shared["lang"]) holds one of LANGS; every label and message is looked up here
at the moment it is shown, so switching language relabels the page and later messages alike.
A missing Chinese string falls back to English; a missing key is shown as the key itself.
"""
LANGS = ("English", "中文")
DEFAULT_LANG = LANGS[0]

STRINGS = {
    # the frame
    "title": ("Speculative decoding, live: Qwen3.5 with its own draft head",
              "投机解码现场演示：Qwen3.5 与它自带的草稿头"),
    "subtitle": ("The same prompt twice: plain greedy decoding, then MTP speculative decoding. "
                 "Same tokens, fewer steps.",
                 "同一个提示词跑两遍：先普通贪心解码，再用 MTP 投机解码。输出相同，步数更少。"),
    "language": ("Language", "语言"),
    "presenter": ("Presenter mode", "演示模式"),
    "presenter_info": ("Bigger type, higher contrast", "更大字号，更高对比度"),
    "model": ("Model", "模型"),
    "model_info": ("Hub models download on first use (0.8B ≈ 2 GB)", "Hub 模型首次使用时下载（0.8B 约 2 GB）"),
    "model_ready": ("**{model}** ready ({dtype}, context {context} tokens{mtp})",
                    "**{model}** 已就绪（{dtype}，上下文 {context} 个词元{mtp}）"),
    "model_no_mtp": (", no draft head: the race needs one", "，没有草稿头：比赛需要它"),
    "model_failed": ("Could not switch model: {error}. Still using **{model}**.",
                     "无法切换模型：{error}。仍在使用 **{model}**。"),
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
    "rollback_select": ("select: keep the state after every token, pick one (no re-run)",
                        "select：保留每个词元后的状态，直接选取（不重算）"),
    "rollback_recompute": ("recompute: snapshot, restore, re-run the accepted tokens",
                           "recompute：快照、恢复、重算已接受的词元"),
    "temperature": ("Temperature (0 = greedy)", "温度（0 = 贪心）"),
    "seed": ("Seed (used when temperature > 0)", "随机种子（温度 > 0 时使用）"),
    "max_new_tokens": ("Max new tokens", "最多生成词元数"),
    "raw": ("Raw completion (no chat template)", "纯续写（不用对话模板）"),
    "thinking": ("Thinking on", "开启思考"),
    "examples": ("Examples", "示例"),
    "examples_note": ("The embedded model learned Python's reST docs, the King James Bible and classical "
                      "Chinese poetry: text in those styles is easy to guess (high acceptance); a chat "
                      "question is not (low acceptance).",
                      "内置模型学过 Python 文档（reST）、英王钦定本圣经和中国古典诗词：这类文本容易猜中"
                      "（接受率高）；普通对话问题则不然（接受率低）。"),
    # the two lanes
    "plain": ("Plain decoding", "普通解码"),
    "plain_sub": ("one forward pass per token", "每个词元一次前向计算"),
    "spec": ("Speculative decoding (MTP)", "投机解码（MTP）"),
    "spec_sub": ("the draft head guesses, the main model checks k + 1 tokens per pass",
                 "草稿头先猜，主模型一次前向验证 k + 1 个词元"),
    "spec_setup": ("k = {k} · {rollback}", "k = {k} · {rollback}"),
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
    "origin_main": ("first token (from the prompt pass)", "首个词元（来自提示词前向）"),
    "origin_draft": ("accepted draft (underlined)", "被接受的草稿（下划线）"),
    "origin_correction": ("correction: main model replaced a rejected draft (boxed)",
                          "修正：主模型替换被拒草稿（方框）"),
    "origin_bonus": ("bonus: all drafts accepted, one extra token (bold)", "奖励：草稿全中，多得一个词元（粗体）"),
    # status and verdict
    "status_ready": ("Ready. Type a prompt and press **Run the race**.", "准备就绪。输入提示词后点 **开始比赛**。"),
    "status_plain": ("Running plain decoding…", "正在运行普通解码…"),
    "status_spec": ("Running speculative decoding…", "正在运行投机解码…"),
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
    "verdict_prefix": ("Identical as far as both went ✓: the first {n} tokens match; one run stopped early at the "
                       "time limit.",
                       "在两者都生成的范围内相同 ✓：前 {n} 个词元一致；其中一次因时间上限提前停止。"),
    "verdict_diverged": ("Outputs diverge at token {index}: plain chose {plain}, speculative chose {spec}.",
                         "输出在第 {index} 个词元处分叉：普通解码选了 {plain}，投机解码选了 {spec}。"),
    "verdict_sampled": ("Sampling (temperature {temperature}): the texts differ, as expected. Speculative "
                        "sampling keeps the *distribution* of the output the same as plain sampling, not the "
                        "text: the two runs draw different random numbers even with the same seed.",
                        "采样（温度 {temperature}）：两段文本不同，这是预期的。投机采样保证输出的*概率分布*与"
                        "普通采样相同，而不是文本相同：即使种子相同，两次运行消耗的随机数也不同。"),
    "verdict_sampled_same": ("Sampling (temperature {temperature}): this time the texts happen to match. What "
                             "speculative sampling guarantees is the same *distribution*, not the same text.",
                             "采样（温度 {temperature}）：这次文本碰巧相同。投机采样保证的是*分布*相同，而非文本相同。"),
    "speedup": ("Speculative {spec:.1f} tok/s vs plain {plain:.1f} tok/s: **{speedup:.2f}×**, "
                "{per_round:.2f} tokens per main-model pass.",
                "投机 {spec:.1f} 词元/秒 对比 普通 {plain:.1f} 词元/秒：**{speedup:.2f}×**，"
                "主模型每次前向产出 {per_round:.2f} 个词元。"),
    "summary_json": ("Summary (what the API returns)", "汇总（API 返回的内容）"),
    "no_mtp": ("{model} has no MTP draft head, so it cannot race. Pick another model.",
               "{model} 没有 MTP 草稿头，无法比赛。请换一个模型。"),
    # input notices (demo.validate)
    "empty_prompt": ("The prompt is empty: type some text first.", "提示词为空：请先输入一些文字。"),
    "prompt_too_long": ("The prompt does not fit the model's context.", "提示词超出了模型的上下文长度。"),
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
    "no_template": ("This model has no chat template: the prompt is used as raw text.",
                    "该模型没有对话模板：提示词按纯文本续写。"),
}


def is_zh(lang):
    return lang in ("中文", "zh", "zh-CN")


def t(key, lang=DEFAULT_LANG, **params):
    """The string for `key` in `lang`, with `params` filled in (str.format)."""
    en, zh = STRINGS.get(key, (key, None))
    text = zh if is_zh(lang) and zh else en
    try:
        return text.format(**params) if params else text
    except (KeyError, IndexError, ValueError):
        return text


def pick(lang, en, zh):
    """Choose between two given strings (for text that lives outside this table)."""
    return zh if is_zh(lang) else en


def notice_text(notice, lang=DEFAULT_LANG):
    """A demo.validate Notice (or InputError) in words."""
    return t(notice.key, lang, **notice.params)
