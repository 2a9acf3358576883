"""Whether the Hugging Face hub may be read (the offline switch, which sets the environment *and* the flags
huggingface_hub and datasets read once at import), and whether it can be (:func:`hub_problem` probes the
host once per process, in seconds, so a machine without network stops at once, not after five retries).
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
from urllib.parse import urlsplit

from effdepth.errors import causes, one_line, spelled
from effdepth.models.quiet import errors_only

#: Seconds the reachability probe waits for name resolution and the TCP connect (each).
PROBE_TIMEOUT_S = float(os.environ.get("EFFDEPTH_HUB_PROBE_TIMEOUT", "3"))
#: The environment variables the offline switch sets (huggingface_hub, datasets).
OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
_TRUE = ("1", "ON", "YES", "TRUE")
# What httpx, requests, socket and huggingface_hub raise when the hub cannot be reached, by class name
# (none of them need be imported to recognise its errors).
_NETWORK_ERRORS = frozenset(
    "ConnectError NetworkError TransportError TimeoutException ConnectionError OfflineModeIsEnabled gaierror TimeoutError".split()
)


# --------------------------------------------------------------------------- the offline switch


def is_offline() -> bool:
    """True when only the local cache may be read (``--offline`` or ``HF_HUB_OFFLINE=1``).

    >>> with offline():
    ...     is_offline()
    True
    """
    if any(os.environ.get(v, "").strip().upper() in _TRUE for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")):
        return True
    constants = sys.modules.get("huggingface_hub.constants")
    return bool(getattr(constants, "HF_HUB_OFFLINE", False))


def set_offline(on: bool = True) -> None:
    """Switch offline mode for this process and its children: the environment for libraries imported later,
    and the flags huggingface_hub and datasets already read at import.

    >>> with offline(False):
    ...     set_offline(True); os.environ["HF_HUB_OFFLINE"], is_offline()
    ('1', True)
    """
    import huggingface_hub.constants

    for variable in OFFLINE_VARIABLES:
        if on:
            os.environ[variable] = "1"
        else:
            os.environ.pop(variable, None)
    if not on:
        os.environ.pop("TRANSFORMERS_OFFLINE", None)
    huggingface_hub.constants.HF_HUB_OFFLINE = on
    datasets_config = sys.modules.get("datasets.config")
    if datasets_config is not None:
        datasets_config.HF_HUB_OFFLINE = on
        datasets_config.HF_DATASETS_OFFLINE = on


@contextlib.contextmanager
def offline(on: bool = True):
    """Offline mode (or online with ``on=False``) inside a ``with`` block; everything restored after.

    >>> with offline():
    ...     with offline(False):
    ...         is_offline()
    False
    """
    import huggingface_hub.constants

    variables = (*OFFLINE_VARIABLES, "TRANSFORMERS_OFFLINE")
    saved_env = {v: os.environ.get(v) for v in variables}
    saved_hub = huggingface_hub.constants.HF_HUB_OFFLINE
    datasets_config = sys.modules.get("datasets.config")
    saved_datasets = (
        None if datasets_config is None else (datasets_config.HF_HUB_OFFLINE, datasets_config.HF_DATASETS_OFFLINE)
    )
    set_offline(on)
    try:
        yield
    finally:
        for variable, value in saved_env.items():
            if value is None:
                os.environ.pop(variable, None)
            else:
                os.environ[variable] = value
        huggingface_hub.constants.HF_HUB_OFFLINE = saved_hub
        if saved_datasets is not None:
            datasets_config.HF_HUB_OFFLINE, datasets_config.HF_DATASETS_OFFLINE = saved_datasets


def quiet_hub():
    """Keep huggingface_hub's retry and fallback warnings out of the terminal (errors still raise).

    >>> import logging
    >>> with quiet_hub():
    ...     logging.getLogger("huggingface_hub").getEffectiveLevel() >= logging.ERROR
    True
    """
    return errors_only("huggingface_hub")


# --------------------------------------------------------------------------- can the hub be reached?


def hub_endpoint() -> str:
    """The hub's address (``HF_ENDPOINT``, default ``https://huggingface.co``).

    >>> hub_endpoint().startswith("http")
    True
    """
    import huggingface_hub.constants

    return str(huggingface_hub.constants.ENDPOINT).rstrip("/")


def probe_address(endpoint: str | None = None) -> tuple[str, int, bool]:
    """``(host, port, through_proxy)``: what a connection to ``endpoint`` opens first.

    With ``HTTPS_PROXY`` (or ``HTTP_PROXY`` for plain http) set and the host
    not in ``NO_PROXY``, that is the proxy.

    >>> probe_address("http://127.0.0.1:9")[:2]
    ('127.0.0.1', 9)
    """
    import urllib.request

    url = urlsplit(endpoint or hub_endpoint())
    host, port = url.hostname or "", url.port or (443 if url.scheme == "https" else 80)
    proxy = urllib.request.getproxies().get(url.scheme) or urllib.request.getproxies().get("all")
    if proxy and not urllib.request.proxy_bypass(host):
        p = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        if p.hostname:
            return p.hostname, p.port or (443 if p.scheme == "https" else 80), True
    return host, port, False


def probe(host: str, port: int, timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """``None`` when a TCP connection to ``host:port`` opens within ``timeout`` seconds, else why not.

    >>> import socket
    >>> s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
    >>> probe("127.0.0.1", port)  # doctest: +ELLIPSIS
    'connection to 127.0.0.1:... refused'
    """
    infos = _resolve(host, port, timeout)
    if isinstance(infos, str):
        return infos
    reason = f"no address for {host}"
    for family, kind, proto, _, address in infos:
        sock = socket.socket(family, kind, proto)
        sock.settimeout(timeout)
        try:
            sock.connect(address)
            return None
        except ConnectionRefusedError:
            reason = f"connection to {host}:{port} refused"
        except (socket.timeout, TimeoutError):
            reason = f"no answer from {host}:{port} within {timeout:g} s"
        except OSError as exc:
            reason = f"cannot connect to {host}:{port} ({exc.strerror or exc})"
        finally:
            sock.close()
    return reason


def _resolve(host: str, port: int, timeout: float):
    """getaddrinfo with a deadline (the call itself has none); a reason string on failure."""
    box: dict = {}

    def run():
        try:
            box["infos"] = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            box["error"] = exc

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        return f"name resolution of {host} did not answer within {timeout:g} s"
    if "error" in box:
        exc = box["error"]
        return f"name resolution of {host} failed: {getattr(exc, 'strerror', None) or exc}"
    return box["infos"]


_PROBED: dict = {}


def hub_problem(timeout: float | None = None) -> str | None:
    """``None`` when the hub's host answers; else one phrase saying why not.

    Probed once per process and endpoint (name resolution and a TCP connect,
    ``PROBE_TIMEOUT_S`` each at most); later calls reuse the answer.

    >>> import huggingface_hub.constants as c, socket
    >>> s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
    >>> saved, c.ENDPOINT = c.ENDPOINT, f"http://127.0.0.1:{port}"
    >>> hub_problem().startswith("connection to 127.0.0.1")
    True
    >>> c.ENDPOINT = saved
    """
    endpoint = hub_endpoint()
    if endpoint not in _PROBED:
        host, port, proxied = probe_address(endpoint)
        reason = probe(host, port, PROBE_TIMEOUT_S if timeout is None else timeout)
        _PROBED[endpoint] = None if reason is None else (f"{reason} (the proxy for {endpoint})" if proxied else reason)
    return _PROBED[endpoint]


def forget_probe() -> None:
    """Probe again next time (after the network came back, or in tests).

    >>> forget_probe()
    """
    _PROBED.clear()


def is_network_error(exc: BaseException) -> bool:
    """Whether ``exc`` says the hub could not be reached (rather than, say, an unknown repository).

    >>> is_network_error(ConnectionRefusedError()), is_network_error(ValueError("no"))
    (True, False)
    """
    return any(k.__name__ in _NETWORK_ERRORS for k in type(exc).__mro__)


def hub_answer(exc: BaseException):
    """The huggingface_hub error ``exc`` is, or was raised from; else ``None``.

    >>> hub_answer(ValueError("no")) is None
    True
    """
    from huggingface_hub.errors import HfHubHTTPError

    return next((e for e in causes(exc) if isinstance(e, HfHubHTTPError)), None)


def is_transient(exc: BaseException) -> bool:
    """A failure a later try may not meet: no connection, a dropped one, the hub's own fault (5xx) or its rate limit.

    >>> is_transient(ConnectionResetError()), is_transient(ValueError("no"))
    (True, False)
    """
    answer = hub_answer(exc)
    status = getattr(getattr(answer, "response", None), "status_code", None)
    if status is not None:
        return status >= 500 or status in (408, 429)
    return any(
        is_network_error(e)
        or any(k.__name__ in ("RemoteProtocolError", "ReadError", "ConnectionResetError") for k in type(e).__mro__)
        for e in causes(exc)
    )


def hub_page(repo: str, kind: str = "model") -> str:
    """The hub's page of a repository (where its terms are accepted).

    >>> hub_page("acme/data", "dataset").endswith("/datasets/acme/data")
    True
    """
    return f"{hub_endpoint()}/{'datasets/' if kind == 'dataset' else ''}{repo}"


def hub_error_message(exc: BaseException, repo: str, *, kind: str = "model", revision: str | None = None) -> str | None:
    """One line for what the hub answered about ``repo`` (``kind``: model or dataset) at ``revision``: what, why,
    what to do. ``None`` when ``exc`` is neither an answer of the hub nor a failure to reach it.

    >>> hub_error_message(ValueError("no"), "o/m") is None
    True
    """
    from huggingface_hub import errors

    what = f"{kind} {repo}" + (f" at revision {revision}" if revision not in (None, "main") else "")
    answer = hub_answer(exc)
    if answer is None:
        if is_transient(exc):
            reason = one_line(exc, 160)
            return (
                f"the connection to the Hugging Face hub at {hub_endpoint()} failed while reading {what} ({reason}); "
                "check the network and run the command again (what was downloaded is kept)"
            )
        return None
    response = getattr(answer, "response", None)
    status = getattr(response, "status_code", None)
    if isinstance(answer, errors.GatedRepoError):
        return (
            f"{what} is gated: the Hugging Face hub lets only accounts that accepted its terms download it, and this "
            f"machine is not logged in as one; accept them at {hub_page(repo, kind)}, then run `hf auth login` here "
            "(or set HF_TOKEN) and try again"
        )
    if isinstance(answer, errors.RepositoryNotFoundError):
        return (
            f"there is no {kind} {repo} on the Hugging Face hub at {hub_endpoint()} (or it is private and this machine "
            f"is not logged in); check the name, or run `hf auth login` if it is private"
        )
    if isinstance(answer, errors.RevisionNotFoundError):
        return (
            f"{kind} {repo} has no revision {revision or 'main'} (no such branch, tag or commit on the Hugging Face hub)"
            f"{branch_hint(repo, kind)}; check {spelled('--revision', 'revision=') if kind == 'model' else 'the revision'}"
        )
    if isinstance(answer, errors.DisabledRepoError):
        return f"{kind} {repo} is disabled on the Hugging Face hub (its owner or the hub turned it off); choose another"
    if status is not None and (status >= 500 or status in (408, 429)):
        reason = getattr(response, "reason_phrase", "") or ""
        return (
            f"the Hugging Face hub at {hub_endpoint()} answered {status} {reason}".rstrip() + f" while reading {what} "
            "(a fault or overload on its side); run the command again in a while (what was downloaded is kept)"
        )
    if status in (401, 403):
        return (
            f"the Hugging Face hub refused access to {what} ({status}); check the token of `hf auth login` (or "
            "HF_TOKEN) and that your account may read it"
        )
    return None


def branch_hint(repo: str, kind: str = "model", shown: int = 8) -> str:
    """``"; it has 3 branches: main, step1, step2"`` from the hub (best effort: empty when it cannot tell)."""
    try:
        import huggingface_hub

        with quiet_hub():
            names = sorted(b.name for b in huggingface_hub.list_repo_refs(repo, repo_type=kind).branches)
    except Exception:  # noqa: BLE001 - a hint only
        return ""
    if not names:
        return ""
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return f"; it has {len(names)} branch{'es' if len(names) > 1 else ''}: {', '.join(names[:shown])}{more}"


def unreachable_message(problem: str, what: str, fix: str) -> str:
    """The one line for a hub that cannot be reached: where, why, what for, what to do.

    >>> import huggingface_hub.constants as c
    >>> unreachable_message("connection to h:443 refused", " to list the files of x/y", "run it elsewhere").replace(c.ENDPOINT, "URL")
    'cannot reach the Hugging Face hub at URL (connection to h:443 refused) to list the files of x/y; run it elsewhere'
    """
    return f"cannot reach the Hugging Face hub at {hub_endpoint()} ({problem}){what}; {fix}"
