"""Serving many visitors from one process: the compute queue, per-session memory, request size.

    serving.attach(demo)                       # in demo.page.build_app, inside `with gr.Blocks() as demo:`
    demo.launch(**page.launch_options())       # theme's, drawn's and serving's launch_options()
    serving.queue_message(demo, "English")     # "busy, you are number 3 in line", "full", or None

Compute (the race, Start in the stepper, the skip-the-restore proof) shares one Gradio concurrency
group, "compute", sized by $QWEN_CONCURRENCY (read by demo.environment, like every setting named here);
everything else is cheap. The queue holds at most $QWEN_QUEUE_SIZE waiting events; a newcomer is told
where they stand.

Per-session memory. Gradio keeps a SessionState per browser tab (and per gradio_client or raw API
session): the gr.State values *and* the last value of every component an event read or wrote (the
race's lanes and summary, the stepper's figures). By itself Gradio frees only the gr.State values,
an hour after the page closes, and keeps the rest until 10 000 sessions have come and gone. Here:

  * closing the page (the heartbeat drops; gradio_client.Client.close() too) drops the whole
    SessionState at once (an unload event);
  * a sweep every SWEEP_SECONDS drops sessions unused for $QWEN_SESSION_TTL seconds (default 3600):
    raw HTTP callers have no heartbeat, so their sessions never "close";
  * at most $QWEN_MAX_SESSIONS sessions (default 100) are kept; beyond that Gradio drops the least
    recently used one (launch(state_session_capacity=...)).

A stepper session holds one recorded run (at most stepper.MAX_ROUNDS rounds, about 20 MB of Python
objects for a 256-token run with k = 1) and the race keeps nothing beyond its last outputs, so the
worst case is about 100 x 20 MB; a default 48-token run holds about 2.3 MB.

Requests: bodies over $QWEN_MAX_REQUEST_MB (default 16) are refused with HTTP 413 before they are
read, and uploads over traceio.MAX_BYTES by Gradio itself (launch(max_file_size=...)). So a pasted
novel is cut to its end (demo.validate) and a gigabyte POST never reaches memory.

Both the sweep and the unload handler run on the server's event loop, the only thread that touches
Gradio's session table.
"""
import asyncio
import contextlib
import json
import logging
import time
from typing import NamedTuple

import gradio as gr

from demo import environment
from demo.i18n import t

log = logging.getLogger(__name__)

SWEEP_SECONDS = 30.0
COMPUTE = "compute"


# --- where a newcomer stands ----------------------------------------------------------------------------

class QueuePlace(NamedTuple):
    """Where a concurrency group of a launched app stands (queue_place)."""
    running: int = 0
    waiting: int = 0
    limit: int = 1
    waiting_all: int = 0            # every group's waiting events (Gradio's max_size is for all of them)
    max_size: int = None


def queue_place(blocks, concurrency_id=COMPUTE):
    """A QueuePlace (running, waiting, limit, waiting_all, max_size) for a concurrency group of a launched
    app; zeros before launch."""
    queue = getattr(blocks, "_queue", None)
    try:                                    # Gradio's queue internals (6.x); anything else reads as idle
        group = queue.event_queue_per_concurrency_id.get(concurrency_id) if queue is not None else None
        if group is None:
            return QueuePlace(waiting_all=len(queue) if queue is not None else 0,
                              max_size=getattr(queue, "max_size", None))
        return QueuePlace(running=group.current_concurrency, waiting=len(group.queue),
                          limit=group.concurrency_limit or 1, waiting_all=len(queue), max_size=queue.max_size)
    except (AttributeError, TypeError):
        return QueuePlace()


def queue_message(blocks, lang, concurrency_id=COMPUTE):
    """What to tell a visitor who just pressed Run: None when a slot is free, else their place in line,
    or that the queue is full and they should come back."""
    running, waiting, limit, waiting_all, max_size = queue_place(blocks, concurrency_id)
    if max_size is not None and waiting_all >= max_size:
        return t("status_full", lang, waiting=waiting_all)
    if running < limit:
        return None
    return t("status_queued_n", lang, n=waiting + 1, running=running)


# --- per-session memory ---------------------------------------------------------------------------------

def forget_session(holder, session_hash):
    """Drop everything Gradio keeps for one session (gr.State values, component values). -> bool"""
    state = holder.session_data.pop(session_hash, None)
    holder.time_last_used.pop(session_hash, None)
    if state is None:
        return False
    for component, value, _ in list(state.state_components):
        try:
            component.delete_callback(value)
        except Exception:                       # a callback's failure must not keep the rest alive
            log.exception("delete_callback of %s failed", component)
    state.state_data.clear()
    return True


def sweep(holder, ttl, now=None):
    """Forget the sessions unused for more than `ttl` seconds. -> how many were dropped"""
    import datetime
    now = now or datetime.datetime.now()
    idle = [sid for sid, used in list(holder.time_last_used.items()) if (now - used).total_seconds() > ttl]
    return sum(forget_session(holder, sid) for sid in idle)


def session_count(blocks):
    holder = getattr(blocks, "state_holder", None)
    return len(holder.session_data) if holder is not None else 0


def attach(demo):
    """Wire session cleanup into `demo` (call inside `with gr.Blocks() as demo:`)."""

    async def on_unload(request: gr.Request):
        session_hash = getattr(request, "session_hash", None)
        holder = getattr(demo, "state_holder", None)
        if holder is None or not session_hash:
            return
        forget_session(holder, session_hash)
        try:                # Gradio's queue keeps an (emptied) set of event ids per session it ever saw
            pending = demo._queue.pending_event_ids_session
            if not pending.get(session_hash, True):
                del pending[session_hash]
        except (AttributeError, KeyError, TypeError):
            pass

    demo.unload(on_unload)


@contextlib.asynccontextmanager
async def lifespan(app):
    """The server's lifetime: sweep idle sessions every SWEEP_SECONDS on the server's own event loop."""
    async def loop():
        while True:
            await asyncio.sleep(SWEEP_SECONDS)
            try:
                holder = getattr(app, "state_holder", None)
                if holder is not None:
                    dropped = sweep(holder, environment.session_ttl())
                    if dropped:
                        log.info("dropped %d idle session(s)", dropped)
            except Exception:                   # never let the sweep die
                log.exception("session sweep failed")

    task = asyncio.create_task(loop())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


# --- request size ---------------------------------------------------------------------------------------

class BodyLimit:
    """ASGI middleware: refuse request bodies over `limit` bytes (413) before they fill memory."""

    def __init__(self, app, limit):
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.limit:
            return await self._refuse(send)
        seen = 0

        async def counted():
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:                    # chunked and too long: end it as a disconnect
                    return {"type": "http.disconnect"}
            return message

        return await self.app(scope, counted, send)

    async def _refuse(self, send):
        body = json.dumps({"error": f"Request too large: the limit is {self.limit // 2**20} MB."}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


def launch_options(max_file_size):
    """The keyword arguments of demo.launch() that keep a busy server healthy (see the module docstring);
    max_file_size: the largest upload, in bytes."""
    from fastapi.middleware import Middleware

    return {"state_session_capacity": environment.max_sessions(), "max_file_size": max_file_size,
            "app_kwargs": {"lifespan": lifespan,
                           "middleware": [Middleware(BodyLimit, limit=environment.max_request_bytes())]}}


def wait_until(predicate, seconds=5.0, every=0.05):
    """Poll `predicate` until it is true or `seconds` pass. -> its last value (for tests and the load script)."""
    end = time.monotonic() + seconds
    while True:
        value = predicate()
        if value or time.monotonic() > end:
            return value
        time.sleep(every)
