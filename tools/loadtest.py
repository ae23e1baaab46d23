"""A load test on loopback: many gradio_client sessions at once through the race and the stepper.

    python -m tools.loadtest                            # 8 sessions for 60 s, the app served in-process
    python -m tools.loadtest --sessions 4 --seconds 20 --max-new 24
    python -m tools.loadtest --url http://127.0.0.1:7860/ --pid 1234     # an app already running here

Each session has a prompt of its own. Before the load, every prompt is run once alone (the
reference); under load each session loops race (/race) -> Start (/step_start) -> three Next
(/step_next) until the time is up, and every output is compared with its prompt's reference: the
race's token ids (plain and speculative) and the stepper's status, phase and text. A difference is
reported as a mismatch (one session seeing another's output, or a run that is not reproducible).

Reported: calls and errors per endpoint, p50 / p95 latency per endpoint, mismatches, and the server
process's memory (RSS) before the load, after it, and after every client has closed and the server
has dropped their sessions. Greedy decoding only; the embedded checkpoint unless --model says otherwise.

Bounded: at most MAX_SESSIONS sessions and MAX_SECONDS seconds; it stops by itself. Loopback only:
in-process it listens on 127.0.0.1 on a free port; a --url whose host is not a loopback address is
refused.
"""
import argparse
import ipaddress
import json
import socket
import sys
import threading
import time
from urllib.parse import urlparse

MAX_SESSIONS, MAX_SECONDS = 32, 600
PROMPTS = ["In the beginning God created the heaven and the earth.", "床前明月光，", "My favourite pizza topping is",
           ":mod:`json` --- JSON encoder and decoder", "Transformer 模型的核心是", "The river flows to the sea because",
           "def fibonacci(n):", "北京是", "Once upon a time, in a small village,", "The capital of France is",
           "Dear Sir or Madam,", "To be, or not to be"]


def prompts(n):
    """n distinct prompts (the base list, then numbered variants)."""
    return [PROMPTS[i % len(PROMPTS)] + (f" ({i // len(PROMPTS) + 1})" if i >= len(PROMPTS) else "") for i in range(n)]


def loopback_only(url):
    """Refuse a URL whose host does not resolve to loopback addresses only. -> the URL"""
    host = urlparse(url).hostname
    if not host:
        raise SystemExit(f"{url}: no host")
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except socket.gaierror as e:
        raise SystemExit(f"{url}: cannot resolve {host} ({e})")
    if not addresses or not all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addresses):
        raise SystemExit(f"{url}: refused, the load test only runs against this machine (loopback), "
                         f"and {host} is {', '.join(sorted(addresses))}")
    return url


def rss_mb(pid="self"):
    """(resident MB, peak resident MB) of a process, from /proc; (None, None) where unreadable."""
    try:
        with open(f"/proc/{pid}/status") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
        return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024
    except (OSError, KeyError, ValueError):
        return None, None


def give_back_memory():
    """Collect garbage and ask glibc to return freed heap pages to the OS, so the RSS after the clients
    closed shows what is still held rather than what the allocator kept for reuse. -> bool (trimmed)"""
    import ctypes
    import gc
    gc.collect()
    try:
        return bool(ctypes.CDLL("libc.so.6").malloc_trim(0))
    except (OSError, AttributeError):
        return False


def percentile(values, p):
    """Nearest-rank percentile of a list (None when empty)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(round(p / 100 * len(ordered) + 0.5)) - 1))]


class Stats:
    """Latencies, errors and mismatches per endpoint, shared by the session threads."""

    def __init__(self):
        self.lock = threading.Lock()
        self.latency, self.errors, self.mismatches, self.examples = {}, {}, 0, []

    def error(self, name, e):
        with self.lock:
            self.errors[name] = self.errors.get(name, 0) + 1
            self.latency.setdefault(name, [])
            if len(self.examples) < 10:
                self.examples.append(f"{name}: {type(e).__name__}: {str(e)[:200]}")

    def call(self, name, fn, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            out = fn(*args, **kwargs)
        except Exception as e:
            self.error(name, e)
            return None
        with self.lock:
            self.latency.setdefault(name, []).append(time.perf_counter() - t0)
        return out

    def mismatch(self, what):
        with self.lock:
            self.mismatches += 1
            if len(self.examples) < 10:
                self.examples.append(f"mismatch: {what}")


def visit(client, prompt, settings, stats=None):
    """One round of a session: race, Start, three Next. -> what it saw (comparable), or None on error."""
    call = stats.call if stats else (lambda name, fn, *a, **k: fn(*a, **k))
    model, max_new = settings["model"], settings["max_new"]
    race = call("/race", client.predict, prompt, max_new, 2, "select", 0.0, 0, True, False, model, "English",
                api_name="/race")
    start = call("/step_start", client.predict, model, prompt, 1, "select", max_new, 0.0, 0, 0, 0, True, "", False, "English",
                 False, False, api_name="/step_start")
    steps = [call("/step_next", client.predict, "English", False, False, api_name="/step_next") for _ in range(3)]
    if race is None or start is None or any(s is None for s in steps):
        return None
    summary = race[-1]
    return {"race": (summary.get("plain", {}).get("ids"), summary.get("speculative", {}).get("ids"),
                     summary.get("error")),
            "stepper": (start[0], start[1], start[2], [s[:2] for s in steps])}


def session(url, prompt, reference, settings, deadline, stats, counts):
    import gradio_client
    try:
        client = gradio_client.Client(url, verbose=False)
    except Exception as e:
        stats.error("connect", e)
        return
    try:
        while time.monotonic() < deadline:
            seen = visit(client, prompt, settings, stats)
            with stats.lock:
                counts[prompt] = counts.get(prompt, 0) + 1
            if seen is None:
                continue
            for part in ("race", "stepper"):
                if seen[part] != reference[part]:
                    stats.mismatch(f"{part} for {prompt[:30]!r}: got {str(seen[part])[:120]} "
                                   f"expected {str(reference[part])[:120]}")
    finally:
        client.close()


def launch_in_process():
    """Build and serve the app's page (demo.page, as app.py does) on 127.0.0.1, a free port, in this
    process. -> (url, demo)"""
    from demo import environment, models, page
    environment.notice_closed_pages_within(2)                          # seconds
    store = models.ModelStore.from_environment()
    demo = page.build_app(store)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    page.serve(demo, store, prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True)
    return f"http://127.0.0.1:{port}/", demo


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=8, help=f"simultaneous sessions (1..{MAX_SESSIONS})")
    parser.add_argument("--seconds", type=float, default=60, help=f"how long the load lasts (1..{MAX_SECONDS})")
    parser.add_argument("--max-new", type=int, default=32, help="max new tokens per race and per recorded run")
    parser.add_argument("--model", default="Embedded demo checkpoint", help="model key (as in the page's menu)")
    parser.add_argument("--url", help="an app already running on this machine (loopback only)")
    parser.add_argument("--pid", type=int, help="with --url: the server's process id, to read its memory")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    sessions = max(1, min(args.sessions, MAX_SESSIONS))
    seconds = max(1.0, min(args.seconds, MAX_SECONDS))
    settings = {"model": args.model, "max_new": max(1, min(args.max_new, 256))}

    blocks = None
    if args.url:
        url, pid = loopback_only(args.url), args.pid
    else:
        url, blocks = launch_in_process()
        pid = "self"
    import gradio_client
    from demo import serving

    def sessions_on_server():
        return serving.session_count(blocks) if blocks is not None else None

    try:
        texts = prompts(sessions)
        print(f"{url}: {sessions} sessions, {seconds:g} s, max {settings['max_new']} new tokens, {args.model}")
        reference = {}
        client = gradio_client.Client(url, verbose=False)
        try:
            t0 = time.perf_counter()
            for text in texts:
                reference[text] = visit(client, text, settings)
                if reference[text] is None or reference[text]["race"][2]:
                    raise SystemExit(f"the reference run for {text!r} failed: {reference[text]}")
            print(f"references: {len(texts)} prompts run alone in {time.perf_counter() - t0:.1f} s")
        finally:
            client.close()
        distinct = len({json.dumps(r["race"][:2]) for r in reference.values()})
        if distinct < len(texts):
            print(f"note: only {distinct} of {len(texts)} prompts give distinct race outputs; a leak between "
                  f"sessions with the same output would not show")
        serving.wait_until(lambda: sessions_on_server() in (0, None), seconds=10)
        before = rss_mb(pid)
        sessions_before = sessions_on_server()

        stats, counts, samples = Stats(), {}, []
        deadline = time.monotonic() + seconds

        def sample():                                  # the server's RSS every 5 s while the load runs
            start = time.monotonic()
            while time.monotonic() < deadline:
                samples.append((round(time.monotonic() - start), rss_mb(pid)[0]))
                time.sleep(5)
        threading.Thread(target=sample, daemon=True).start()
        threads = [threading.Thread(target=session, args=(url, text, reference[text], settings, deadline, stats, counts),
                                    daemon=True) for text in texts]
        t0 = time.perf_counter()
        for th in threads:
            th.start()
        for th in threads:
            th.join(max(1.0, deadline - time.monotonic() + 120))       # a round in flight may finish; no more
        elapsed = time.perf_counter() - t0
        hung = sum(th.is_alive() for th in threads)
        after = rss_mb(pid)
        sessions_after_load = sessions_on_server()
        drained = serving.wait_until(lambda: sessions_on_server() in (0, None), seconds=30)
        time.sleep(1)
        closed = rss_mb(pid)
        trimmed = rss_mb(pid) if blocks is not None and give_back_memory() else (None, None)

        report = {
            "url": url, "sessions": sessions, "seconds": round(elapsed, 1), "max_new_tokens": settings["max_new"],
            "rounds": sum(counts.values()), "mismatches": stats.mismatches, "hung_sessions": hung,
            "endpoints": {name: {"calls": len(lat) + stats.errors.get(name, 0), "errors": stats.errors.get(name, 0),
                                 "p50_s": round(percentile(lat, 50), 3) if lat else None,
                                 "p95_s": round(percentile(lat, 95), 3) if lat else None}
                          for name, lat in sorted(stats.latency.items())},
            "rss_mb": {"before": before[0], "after_load": after[0], "after_close": closed[0],
                       "after_close_trimmed": trimmed[0], "peak": closed[1], "during_load": samples},
            "server_sessions": {"before": sessions_before, "after_load": sessions_after_load,
                                "after_close": sessions_on_server(), "drained": bool(drained)},
            "problems": stats.examples,
        }
        print_report(report)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(report, f, indent=1)
        ok = not stats.mismatches and not hung and not any(stats.errors.values())
        return 0 if ok else 1
    finally:
        if blocks is not None:
            blocks.close()


def print_report(r):
    mb = lambda x: "?" if x is None else f"{x:.0f} MB"                  # noqa: E731
    print(f"\n{r['sessions']} sessions for {r['seconds']} s: {r['rounds']} rounds (race + Start + 3 Next each), "
          f"{r['mismatches']} mismatches, {r['hung_sessions']} hung sessions")
    print(f"{'endpoint':<14}{'calls':>7}{'errors':>8}{'p50':>9}{'p95':>9}")
    for name, e in r["endpoints"].items():
        p50 = "-" if e["p50_s"] is None else f"{e['p50_s']:.2f}s"
        p95 = "-" if e["p95_s"] is None else f"{e['p95_s']:.2f}s"
        print(f"{name:<14}{e['calls']:>7}{e['errors']:>8}{p50:>9}{p95:>9}")
    m, s = r["rss_mb"], r["server_sessions"]
    print(f"server RSS: before {mb(m['before'])}, after the load {mb(m['after_load'])}, after the clients closed "
          f"{mb(m['after_close'])}" + (f" ({mb(m['after_close_trimmed'])} once freed heap pages are returned, "
                                       f"malloc_trim)" if m["after_close_trimmed"] else "") + f", peak {mb(m['peak'])}")
    if m["during_load"]:
        print("server RSS during the load: " + ", ".join(f"{t}s {mb(v)}" for t, v in m["during_load"]))
    if s["before"] is not None:
        print(f"server sessions held: before {s['before']}, at the end of the load {s['after_load']}, "
              f"after the clients closed {s['after_close']}")
    for line in r["problems"]:
        print("  !", line)


if __name__ == "__main__":
    sys.exit(main())
