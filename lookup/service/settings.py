"""``lookup serve``'s settings, in one place: ``Settings``, each field with its default, its help
and its command-line option (``lookup/cli/commands.py`` builds the ``lookup serve`` options from
these fields).  The application's fields (``lookup/service/app.py``) and the server's
(``lookup/service/serve.py``: uvicorn and ``GuardedH11``) are one object, handed to every server
process as JSON in ``$SHUFFLE_EPS_SERVE_SETTINGS``.  Standard library only: the command line
imports it without the serve extra."""

from __future__ import annotations

import json
import os
from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Any

ENV_SETTINGS = "SHUFFLE_EPS_SERVE_SETTINGS"  # JSON of Settings, for uvicorn's server processes


def default_live_workers() -> int:
    """Live work (live answers, rounds) takes at most all cores but one: the event loop and the
    refinements' worker keep one (2 cores: 1 live worker)."""
    return max(1, (os.cpu_count() or 2) - 1)


def _setting(default: Any, help_text: str, option: str | None = None, *, factory: Any = None) -> Any:
    """A field of ``Settings``: its default (or ``factory``), the help of its command-line option
    and the option's name (None: no option; the command line keeps the default)."""
    metadata = {"help": help_text, "option": option}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass(frozen=True)
class Settings:
    """What ``lookup serve`` runs with: the server's address and uvicorn's limits, and what the
    application is built from.  Fields in the order of ``lookup serve --help``."""

    host: str = _setting("127.0.0.1", "address to listen on", "--host")
    port: int = _setting(8080, "port (0: any free port, one worker)", "--port")
    table: str | None = _setting(None, "table store (default: the shipped table)", "--table")
    workers: int = _setting(1, "server processes (each with its own pool)", "--workers")
    live_workers: int = _setting(None, "worker processes for live work and rounds [default: cores - 1, at least 1]",
                                 "--live-workers", factory=default_live_workers)
    refine_workers: int = _setting(2, "worker processes reserved for refinements (a few ms each; never live work)",
                                   "--refine-workers")
    # a refinement worker's address space is about 505 MB at rest, 235 MB of it the table's rows mapped
    # from the server's sealed memfd (lookup/service/shared.py); with one BLAS thread the limit bounds the
    # worker's memory, and a task past it fails alone (a refinement: the table's answer stands; a slice: not kept)
    refine_memory_mb: int = _setting(1024, "address-space limit of each refinement and slice worker, MiB (0: none)",
                                     "--refine-memory-mb")
    background_workers: int = _setting(1, "worker processes computing eps0 slices (lowest priority)",
                                       "--slice-workers")
    queue: int = _setting(8, "live tasks admitted at once, running or waiting (more: 503 with Retry-After)",
                          "--queue")
    live_timeout: float = _setting(30.0, "seconds a live task may run (more: 503, its workers replaced)",
                                   "--live-timeout")
    memory_mb: int = _setting(4096, "address-space limit of each live worker, MiB (0: none)", "--memory-mb")
    cache_size: int = _setting(4096, "live answers kept (LRU)", "--cache-size")
    retry_after: int = _setting(5, "Retry-After of a 503, seconds", "--retry-after")
    max_connections: int = _setting(4096, "connections open at once per server process (more: JSON 503 with "
                                    "Retry-After)", "--limit-concurrency")
    timeout_keep_alive: float = _setting(75.0, "seconds an idle keep-alive connection stays open (above the load "
                                         "balancer's idle timeout)", "--timeout-keep-alive")
    h11_max_incomplete_event_size: int = _setting(16384, "largest request line plus headers "
                                                  "(h11_max_incomplete_event_size)", "--max-header-bytes")
    backlog: int = _setting(2048, "connections waiting to be accepted", "--backlog")
    timeout_graceful_shutdown: float = _setting(30.0, "seconds SIGTERM waits for requests in flight",
                                                "--graceful-timeout")
    header_timeout: float = _setting(5.0, "seconds a request's line and headers may take to arrive (then the "
                                     "connection is closed)", "--header-timeout")
    refine_budget: float = _setting(0.03, 'seconds a table answer waits for its refinement (then answered with '
                                    '"refined": false)', "--refine-budget")
    access_log: bool = _setting(True, "one log line per request", "--access-log/--no-access-log")
    slice_cache: int = _setting(64, "eps0 slices kept (LRU, lookup/answer/slices.py; 0: none computed)")
    slice_timeout: float = _setting(120.0, "seconds of run time an eps0 slice may take")
    refine_queue: int = _setting(32, "refinements admitted at once (more: answered unrefined, the refinement not "
                                 "started)")

    def check(self) -> Settings:
        """``self``, or a ValueError naming the settings out of their ranges."""
        if not 0 <= self.port <= 65535:
            raise ValueError(f"--port must be in 0..65535 (0: any free port), got {self.port}")
        counts = (self.live_workers, self.queue, self.background_workers, self.refine_workers, self.refine_queue)
        sizes = (self.cache_size, self.memory_mb, self.refine_memory_mb, self.retry_after, self.slice_cache)
        if min(counts) < 1 or min(sizes) < 0 or not (self.live_timeout > 0 and self.slice_timeout > 0
                                                     and self.refine_budget >= 0):
            raise ValueError("live_workers, background_workers, refine_workers, refine_queue and queue must be >= 1, "
                             "live_timeout and slice_timeout > 0, memory_mb, refine_memory_mb, cache_size, "
                             "retry_after, refine_budget, slice_cache >= 0")
        if self.workers < 1 or self.max_connections < 1 or self.backlog < 1 or \
                self.h11_max_incomplete_event_size < 1024 or not self.header_timeout > 0:
            raise ValueError("--workers, --limit-concurrency and --backlog must be >= 1, --max-header-bytes >= 1024, "
                             "--header-timeout > 0")
        return self


def options() -> list[tuple[str, str, str, Any, str]]:
    """``(field name, its type's name, its option, its command-line default, its help)`` of each
    field with an option, in order; the default None where the field's is computed
    (``default_factory``)."""
    return [(f.name, str(f.type), f.metadata["option"], None if f.default is MISSING else f.default,
             f.metadata["help"]) for f in fields(Settings) if f.metadata["option"]]


def settings_env(settings: Settings) -> str:
    return json.dumps(asdict(settings))


def settings_from_env() -> Settings:
    """The settings ``lookup serve`` left in ``$SHUFFLE_EPS_SERVE_SETTINGS`` (defaults where none)."""
    return Settings(**json.loads(os.environ.get(ENV_SETTINGS, "{}")))


__all__ = ["ENV_SETTINGS", "Settings", "default_live_workers", "options", "settings_env", "settings_from_env"]
