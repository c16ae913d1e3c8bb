"""What a server is and how it speculates, asked once when connecting (no Qt).

`/v1/models` answers on every OpenAI-compatible server (and checks the API key); its `owned_by`
says "llamacpp", "vllm" or "sglang". Then, per kind:

- llama-server `/props`: `default_generation_settings.params["speculative.types"]` names the
  drafting the server was started with ("none", "draft-simple", "ngram-simple", "draft-mtp",
  …); builds that still honour per-request `speculative.n_max` list it there too.
  `endpoint_metrics` says whether `/metrics` is served (`--metrics`).
- vLLM: its `vllm:spec_decode_*` counters exist only when it runs a speculative config.
- SGLang `/get_server_info` (or `/server_info`): `speculative_algorithm`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from specchat.core.remote.client import RemoteClient
from specchat.core.remote.config import ServerKind
from specchat.core.remote.errors import RemoteError
from specchat.core.types import Mode

__all__ = ["ServerInfo", "probe_server", "speculation_mode"]

OWNED_BY = {"llamacpp": ServerKind.LLAMA_CPP, "vllm": ServerKind.VLLM, "sglang": ServerKind.SGLANG}


def speculation_mode(speculation: str) -> Mode:
    """The Mode closest to a server's drafting: n-gram kinds are lookup, the rest a draft."""
    s = speculation.strip().lower()
    if s in ("", "none", "off", "null"):
        return Mode.OFF
    if "ngram" in s or "lookup" in s or "prompt" in s:
        return Mode.LOOKUP
    return Mode.DRAFT


@dataclass(frozen=True)
class ServerInfo:
    kind: ServerKind
    model: str  # the model the engine asks for
    models: tuple[str, ...] = ()
    speculation: str = ""  # the server's drafting ("draft-simple", "EAGLE", "none"); "" unknown
    per_request: bool = False  # per-request speculation settings are honoured
    metrics: bool = False  # /metrics has speculation figures
    n_ctx: int | None = None
    version: str = ""

    @property
    def speculates(self) -> bool | None:
        """True / False when the server says; None when it does not tell."""
        if not self.speculation:
            return None
        return speculation_mode(self.speculation) is not Mode.OFF

    @property
    def mode(self) -> Mode:
        return speculation_mode(self.speculation)

    @property
    def control(self) -> str:
        """Who picks speculation per reply: "request" (SpecChat, per request) or "server"."""
        return "request" if self.per_request else "server"

    def summary(self) -> str:
        spec = self.speculation or "unknown"
        who = "set per request" if self.per_request else "chosen by the server"
        parts = [f"{self.kind.label}", f"model {self.model or '?'}", f"speculation: {spec} ({who})"]
        if self.metrics:
            parts.append("/metrics: yes")
        if self.n_ctx:
            parts.append(f"context {self.n_ctx:,}")
        if self.version:
            parts.append(f"version {self.version}")
        return ", ".join(parts)


def _optional(call: Any) -> Any:
    """An optional endpoint: None when absent or refused (the required ones already passed)."""
    try:
        return call()
    except (RemoteError, ValueError):
        return None


def probe_server(client: RemoteClient) -> ServerInfo:
    """Ask the server what it is. Raises RemoteError when it is unreachable, refuses the key
    or is not an OpenAI-compatible server; ValueError when the configured model is not there."""
    cfg = client.config
    listing = client.get_json("/v1/models")
    entries = listing.get("data") if isinstance(listing, Mapping) else None
    if not isinstance(entries, list):
        raise RemoteError(f"{cfg.label}/v1/models did not list models: not an OpenAI-style API")
    models = tuple(str(e["id"]) for e in entries if isinstance(e, Mapping) and e.get("id"))
    owners = {str(e.get("owned_by", "")).lower() for e in entries if isinstance(e, Mapping)}
    kind = cfg.kind
    if kind is ServerKind.AUTO:
        kind = next((OWNED_BY[o] for o in owners if o in OWNED_BY), ServerKind.AUTO)
    props = None
    if kind in (ServerKind.AUTO, ServerKind.LLAMA_CPP):
        props = _optional(lambda: client.get_json("/props"))
        if (
            kind is ServerKind.AUTO
            and isinstance(props, Mapping)
            and "default_generation_settings" in props
        ):
            kind = ServerKind.LLAMA_CPP
    sg_info = None
    if kind in (ServerKind.AUTO, ServerKind.SGLANG):
        sg_info = _optional(lambda: client.get_json("/get_server_info")) or _optional(
            lambda: client.get_json("/server_info")
        )
        if kind is ServerKind.AUTO and isinstance(sg_info, Mapping) and "model_path" in sg_info:
            kind = ServerKind.SGLANG
    if kind is ServerKind.AUTO:
        kind = ServerKind.OPENAI
    model = cfg.model or (models[0] if models else "")
    if cfg.model and models and cfg.model not in models and kind is not ServerKind.LLAMA_CPP:
        raise ValueError(f"{cfg.label} has no model {cfg.model!r}; it serves: {', '.join(models)}")
    base = ServerInfo(kind=kind, model=model, models=models)
    if kind is ServerKind.LLAMA_CPP:
        return _llama_cpp(client, base, props)
    if kind is ServerKind.VLLM:
        return _vllm(client, base)
    if kind is ServerKind.SGLANG:
        return _sglang(client, base, sg_info)
    return base


def _spec_types(value: object) -> str:
    """llama-server's "speculative.types" ("none,draft-simple") without the "none" entries;
    "none" when nothing else is listed, "" when the value is missing."""
    if not isinstance(value, str) or not value.strip():
        return ""
    kinds = [t.strip() for t in value.split(",") if t.strip() and t.strip() != "none"]
    return ",".join(kinds) or "none"


def llama_cpp_speculation(slots: Any, props_params: Mapping[str, Any]) -> str:
    """What llama-server drafts with. `/slots` says per slot whether it speculates and, once a
    slot has served a request, the task's "speculative.types"; `/props` lists the types only
    in builds that fill them (this one reports "none" there even with a draft model)."""
    from_props = _spec_types(props_params.get("speculative.types"))
    if isinstance(slots, list) and slots and all(isinstance(x, Mapping) for x in slots):
        if not any(x.get("speculative") for x in slots):
            return "none"
        for x in slots:
            params = x.get("params")
            name = (
                _spec_types(params.get("speculative.types")) if isinstance(params, Mapping) else ""
            )
            if name and name != "none":
                return name
        return from_props if from_props not in ("", "none") else "speculative"
    return from_props if from_props != "none" else ""


def _llama_cpp(client: RemoteClient, base: ServerInfo, props: Any) -> ServerInfo:
    if not isinstance(props, Mapping):
        return base
    settings = props.get("default_generation_settings")
    params = settings.get("params") if isinstance(settings, Mapping) else None
    params = params if isinstance(params, Mapping) else {}
    per_request = "speculative.n_max" in params
    slots = _optional(lambda: client.get_json("/slots"))
    speculation = llama_cpp_speculation(slots, params)
    n_ctx = settings.get("n_ctx") if isinstance(settings, Mapping) else None
    return ServerInfo(
        kind=base.kind,
        model=base.model,
        models=base.models,
        speculation=speculation,
        per_request=per_request,
        metrics=bool(props.get("endpoint_metrics")),
        n_ctx=n_ctx if isinstance(n_ctx, int) else None,
        version=str(props.get("build_info") or ""),
    )


def refresh_llama_cpp(client: RemoteClient, info: ServerInfo) -> ServerInfo:
    """`info` with the drafting named, once a slot has served a request (see above)."""
    slots = _optional(lambda: client.get_json("/slots"))
    name = llama_cpp_speculation(slots, {})
    if name and name not in ("speculative", info.speculation):
        return replace(info, speculation=name)
    return info


def _vllm(client: RemoteClient, base: ServerInfo) -> ServerInfo:
    text = _optional(lambda: client.get_text("/metrics"))
    version = _optional(lambda: client.get_json("/version"))
    has_metrics = isinstance(text, str) and "vllm:" in text
    speculation = ""
    if has_metrics:
        speculation = "speculative" if "vllm:spec_decode_num_drafts" in text else "none"
    return ServerInfo(
        kind=base.kind,
        model=base.model,
        models=base.models,
        speculation=speculation,
        metrics=has_metrics and speculation != "none",
        version=str(version.get("version", "")) if isinstance(version, Mapping) else "",
    )


def _sglang(client: RemoteClient, base: ServerInfo, info: Any) -> ServerInfo:
    speculation = ""
    n_ctx = None
    version = ""
    if isinstance(info, Mapping):
        algo = info.get("speculative_algorithm")
        speculation = str(algo) if algo else "none"
        ctx = info.get("context_length")
        n_ctx = ctx if isinstance(ctx, int) else None
        version = str(info.get("version") or "")
    text = _optional(lambda: client.get_text("/metrics"))
    return ServerInfo(
        kind=base.kind,
        model=base.model,
        models=base.models,
        speculation=speculation,
        metrics=isinstance(text, str) and "sglang:spec_accept_rate" in text,
        n_ctx=n_ctx,
        version=version,
    )
