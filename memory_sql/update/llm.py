"""The memory LLM: one synchronous chat-completions call to any OpenAI-compatible endpoint.

Settings come from :class:`~memory_sql.MemoryConfig`, each falling back to the usual OpenAI
variable when the config leaves it unset: ``model_name`` (``OPENAI_MODEL``), ``llm_base_url``
(``OPENAI_BASE_URL``, else OpenAI's own API), ``llm_api_key`` (``OPENAI_API_KEY``). An endpoint
other than OpenAI's may go without a key (local servers such as Ollama or llama.cpp ignore
it); OpenAI's own needs one.

Calls are synchronous on purpose: the updater runs them on worker threads, where they share
no event loop (nor a loop-bound connection pool) with the agent (DeerFlow issue #2615). The
``openai`` client is built at the first call and reused; it is safe to share between threads.
Each call's first try is posted on that client's own HTTP client (its kept-alive connections,
proxies and TLS, and the SDK's headers) with the body written and the reply read as plain JSON:
the SDK's per-call request building and reply validation cost a worker more CPU than the rest
of an update with a model that answers at once. Retries go through the SDK itself.

Every call sends ``max_tokens`` (``llm_max_tokens``; by default 2 048, sized to real replies:
:meth:`~memory_sql.MemoryConfig.reply_token_limit`), so a runaway reply stops there
instead of running until the server's context is full; a reply cut there comes back with
``finish_reason == "length"`` and its real token counts.

Retries and timeouts are the ``openai`` client's: ``llm_max_retries`` more tries after a
timeout, a refused connection, HTTP 408/409/429 or 5xx (with its back-off, or the server's
``retry-after``; a first try that fails so waits the same and hands the rest to the SDK), each
try limited to ``llm_timeout_seconds``. A call can therefore take up to
``(llm_max_retries + 1) × llm_timeout_seconds`` plus back-off.

Structured output (``llm_structured_output``, default ``auto``): a call given a ``schema`` sends
it as ``response_format={"type": "json_schema", "json_schema": {…, "strict": true}}``, which
OpenAI, vLLM and Ollama use to constrain decoding. An endpoint that rejects it (HTTP 400 or 422,
or a 500 whose message names ``response_format``, as llama.cpp's server answers) is asked again
one step down the ladder: ``{"type": "json_object", "schema": …}`` (llama.cpp's form), then
``{"type": "json_object"}``, then no ``response_format``. The first step that is accepted is
remembered for the (endpoint, model) for the rest of the process and logged once. Until then
each request is a probe, sent without the client's retries: a refusal goes down the ladder at
once (llama.cpp answers it with a 500, which the client would otherwise retry); any other error
on a probe is sent again with the retries. :meth:`LLMClient.probe_structured_output` walks the
ladder with a tiny request, for a check of an endpoint. ``json_schema``
sends only the schema (no ladder), ``json_object`` starts at plain JSON mode, ``off`` sends no
``response_format``; ``llm_json_mode: false`` means ``off``. A call without a schema starts at
JSON mode. The prompt asks for JSON either way.
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import random
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any

from ..errors import LLMError

if TYPE_CHECKING:
    import openai

    from ..config import MemoryConfig

logger = logging.getLogger(__name__)

OPENAI_API_URL = "https://api.openai.com/v1"
_PLACEHOLDER_KEY = "not-needed"
_MAX_DETAIL_CHARS = 300


@dataclass(frozen=True)
class Completion:
    """The text the model answered, what it cost in tokens, and which model answered.

    Token counts are 0 when the server reports no usage.
    """

    text: str
    prompt_tokens: int
    completion_tokens: int
    model: str
    finish_reason: str | None = None
    """``stop``, or ``length`` when the reply hit ``max_tokens`` (and is probably cut)."""

    @property
    def cut(self) -> bool:
        """Whether the reply stopped at its token limit."""
        return self.finish_reason == "length"


class LLMClient:
    """Sends chat messages to one model and returns its answer as a :class:`Completion`.

    Build it with :meth:`from_config`. Nothing is checked or connected until the first
    :meth:`complete`, so a service without a model configured starts and fails only when it
    first needs the LLM.
    """

    def __init__(
        self,
        *,
        model: str | None,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout_seconds: float = 60.0,
        max_retries: int = 2,
        temperature: float = 0.0,
        json_mode: bool = True,
        structured_output: str = "auto",
        max_tokens: int | None = None,
    ) -> None:
        self.model = model
        self.max_tokens = max_tokens
        self.base_url = (base_url or OPENAI_API_URL).rstrip("/")
        self.timeout_seconds = timeout_seconds
        self.max_retries = max_retries
        self.temperature = temperature
        if structured_output not in STRUCTURED_OUTPUT_MODES:
            raise ValueError(
                f"structured_output {structured_output!r} is not one of "
                f"{', '.join(STRUCTURED_OUTPUT_MODES)}"
            )
        self.structured_output = structured_output if json_mode else "off"
        self._api_key = api_key
        self._client: openai.OpenAI | None = None
        self._http: Any = None  # the client's HTTP client (httpx's), shared with the SDK
        self._plain: tuple[str, int, str] | None = None  # host, port, path: see _post
        self._connections = threading.local()
        self._opened: list[http.client.HTTPConnection] = []
        self._headers: dict[str, str] = {}
        self._timeout_error: type[BaseException] = TimeoutError
        self._lock = threading.Lock()

    @classmethod
    def from_config(
        cls, config: MemoryConfig, *, env: Mapping[str, str] | None = None
    ) -> LLMClient:
        """A client for the model ``config`` names, with the ``OPENAI_*`` fallbacks of the
        module docstring read from ``env`` (default ``os.environ``)."""
        env = os.environ if env is None else env
        key = config.llm.api_key.get_secret_value() if config.llm.api_key is not None else None
        return cls(
            model=config.llm.model or env.get("OPENAI_MODEL") or None,
            base_url=config.llm.base_url or env.get("OPENAI_BASE_URL") or None,
            api_key=key or env.get("OPENAI_API_KEY") or None,
            timeout_seconds=config.llm.timeout_seconds,
            max_retries=config.llm.max_retries,
            temperature=config.llm.temperature,
            json_mode=config.llm.json_mode,
            structured_output=config.llm.structured_output,
            max_tokens=config.reply_token_limit(),
        )

    def __repr__(self) -> str:
        return f"LLMClient(model={self.model!r}, base_url={self.base_url!r})"

    @property
    def json_mode(self) -> bool:
        """Whether a call without a schema still sends ``response_format`` (JSON mode)."""
        return self._ladder(None)[0] != _NO_FORMAT

    def complete(
        self,
        messages: list[dict[str, str]],
        *,
        schema: Mapping[str, Any] | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
    ) -> Completion:
        """The model's answer to ``messages`` (``{"role": …, "content": …}`` dicts), its
        decoding constrained to the JSON Schema ``schema`` when the endpoint allows (see the
        module docstring). ``temperature`` and ``max_tokens`` replace the client's own for
        this call.

        Raises:
            LLMError: no model or key is configured, the call timed out or could not connect,
                the server answered an error status, or the answer holds no text.
        """
        client = self._openai()
        assert self.model is not None
        options: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "temperature": self.temperature if temperature is None else temperature,
        }
        limit = self.max_tokens if max_tokens is None else max_tokens
        if limit:
            options["max_tokens"] = limit
        ladder = self._ladder(schema)
        for position, step in enumerate(ladder):
            request = dict(options)
            if step != _NO_FORMAT:
                request["response_format"] = _response_format(step, schema)
            probing = len(ladder) > 1 and not self._settled(schema is not None, step)
            try:
                if probing:
                    try:
                        completion = self._send(client, request, retries=0)
                    except LLMError as exc:
                        if _rejects_format(exc) or not exc.transient or not self.max_retries:
                            raise
                        completion = self._send(client, request, retries=self.max_retries)
                else:
                    completion = self._send(client, request, retries=self.max_retries)
            except LLMError as exc:
                if position + 1 == len(ladder) or not _rejects_format(exc):
                    raise
                logger.info(
                    "%s (model %s) refused response_format %s (%s); trying %s",
                    self.base_url,
                    self.model,
                    step,
                    exc.status,
                    ladder[position + 1],
                )
                continue
            self._settle(schema is not None, step, rejected=ladder[:position])
            return completion
        raise AssertionError("unreachable")  # pragma: no cover

    def probe_structured_output(self, schema: Mapping[str, Any] | None = None) -> str:
        """The ``response_format`` step this endpoint and model accept for a call with (or
        without) a JSON Schema: ``json_schema``, ``json_object+schema``, ``json_object`` or
        ``none``, found with one tiny request per step tried (no client retries), and
        remembered as :meth:`complete` would. ``schema`` defaults to the memory update's.

        Raises:
            LLMError: the endpoint fails for a reason other than the format.
        """
        if schema is None:
            from .parser import update_json_schema

            schema = update_json_schema()
        self._forget(schema is not None)
        probe = [{"role": "user", "content": 'Answer with the JSON object {"ok": true}.'}]
        self.complete(probe, schema=schema, max_tokens=16)
        return self._ladder(schema)[0]

    def response_format_in_use(self, *, with_schema: bool = True) -> str:
        """The ``response_format`` step a call with (or without) a schema starts at now: the
        one settled for this endpoint and model, else the first to try (see
        :meth:`probe_structured_output`)."""
        return self._ladder({} if with_schema else None)[0]

    def _settled(self, with_schema: bool, step: str) -> bool:
        with _SETTLED_LOCK:
            return _SETTLED.get((self.base_url, self.model, with_schema)) == step

    def _forget(self, with_schema: bool) -> None:
        with _SETTLED_LOCK:
            _SETTLED.pop((self.base_url, self.model, with_schema), None)

    def _ladder(self, schema: Mapping[str, Any] | None) -> tuple[str, ...]:
        """The response formats to try, best first, for a call with or without ``schema``."""
        if self.structured_output == "off":
            return (_NO_FORMAT,)
        if schema is None or self.structured_output == "json_object":
            steps: tuple[str, ...] = (_JSON_OBJECT, _NO_FORMAT)
        elif self.structured_output == "json_schema":
            return (_JSON_SCHEMA,)
        else:
            steps = _LADDER
        with _SETTLED_LOCK:
            settled = _SETTLED.get((self.base_url, self.model, schema is not None))
        if settled is not None and settled in steps:
            steps = steps[steps.index(settled) :]
        return steps

    def _settle(self, with_schema: bool, step: str, *, rejected: tuple[str, ...]) -> None:
        key = (self.base_url, self.model, with_schema)
        with _SETTLED_LOCK:
            if _SETTLED.get(key) == step:
                return
            _SETTLED[key] = step
        if rejected:
            logger.warning(
                "%s (model %s) does not accept response_format %s; sending %s from now on",
                self.base_url,
                self.model,
                " or ".join(rejected),
                step,
            )

    def close(self) -> None:
        """Close the HTTP connections; a later :meth:`complete` opens new ones."""
        with self._lock:
            client, self._client = self._client, None
            transport, self._http = self._http, None
        if client is not None:
            client.close()
        if transport is not None:
            transport.close()
        with self._lock:
            opened, self._opened = self._opened, []
        for connection in opened:
            connection.close()

    def __enter__(self) -> LLMClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # Internals ---------------------------------------------------------------------------

    def _openai(self) -> openai.OpenAI:
        with self._lock:
            if self._client is not None:
                return self._client
            if not self.model:
                raise LLMError(
                    f"no memory LLM model configured for {self.base_url}: "
                    "set model_name (or MEMORY_SQL_MODEL_NAME / OPENAI_MODEL)",
                    endpoint=self.base_url,
                )
            key = self._api_key
            if not key:
                if self.base_url == OPENAI_API_URL:
                    raise LLMError(
                        f"no API key configured for {self.base_url}: "
                        "set llm_api_key (or MEMORY_SQL_LLM_API_KEY / OPENAI_API_KEY)",
                        endpoint=self.base_url,
                    )
                key = _PLACEHOLDER_KEY
            import openai

            try:
                transport = openai.DefaultHttpxClient()
                client = openai.OpenAI(
                    api_key=key,
                    base_url=self.base_url,
                    timeout=self.timeout_seconds,
                    max_retries=self.max_retries,
                    http_client=transport,
                )
            except openai.OpenAIError as exc:
                raise self._error(f"cannot build the client: {exc}") from None
            # The SDK's own headers (its key, organization, project, user agent), sent by
            # _send's first try as the SDK would send them.
            sdk_headers = {**client.default_headers, **getattr(client, "auth_headers", {})}
            headers = {k: v for k, v in sdk_headers.items() if isinstance(v, str)}
            headers.setdefault("Authorization", f"Bearer {key}")
            self._headers = {**headers, "Content-Type": "application/json"}
            self._timeout_error = _timeout_error_of(transport)
            self._plain = _plain_http(self.base_url)
            self._http, self._client = transport, client
            return client

    def _send(self, client: openai.OpenAI, options: dict[str, Any], *, retries: int) -> Completion:
        """One call of ``options`` with up to ``retries`` more tries. The first try is posted
        on the ``openai`` client's own HTTP client (its connection pool, proxies and TLS), the
        body written and the reply read as plain JSON: the SDK's per-call request building and
        reply validation cost more CPU than the rest of a worker's update with an instant
        model. A try that fails as the SDK would retry it goes on, after the SDK's back-off
        (or the server's ``retry-after``), through the SDK with the retries left."""
        body = _body(options)
        try:
            status, reason, headers, content = self._post(body)
        except Exception as exc:
            timed_out = isinstance(exc, (self._timeout_error, TimeoutError))
            if retries:
                time.sleep(_retry_delay(None))
                return self._create(client.with_options(max_retries=retries - 1), options)
            if timed_out:
                raise self._error(
                    f"timed out after {self.timeout_seconds:g} s", transient=True
                ) from None
            raise self._error(f"connection failed ({_root_cause(exc)})", transient=True) from None
        if 200 <= status < 300:
            try:
                data = json.loads(content)
            except ValueError:
                raise self._error(f"the reply is not JSON (HTTP {status})") from None
            return self._completion(data, options)
        transient = status in (408, 409, 429) or status >= 500
        should_retry = headers.get("x-should-retry")
        if retries and (should_retry == "true" or (should_retry != "false" and transient)):
            time.sleep(_retry_delay(headers))
            return self._create(client.with_options(max_retries=retries - 1), options)
        try:
            error_body: Any = json.loads(content)
        except ValueError:
            error_body = content.decode("utf-8", "replace")
        detail = _error_detail(error_body) or reason or ""
        hint = " (check llm_api_key)" if status in (401, 403) else ""
        raise self._error(f"HTTP {status}{hint}: {detail}", status=status, transient=transient)

    def _post(self, body: bytes) -> tuple[int, str, Any, bytes]:
        """POST ``body`` to the chat-completions endpoint once: the status, its reason, the
        reply's headers (``get`` by any case) and body. To an ``http://`` endpoint reached
        without a proxy (a model server on the network: vLLM, Ollama, llama.cpp), on this
        thread's kept-alive connection of the standard library (a third of httpx's CPU a
        call); to any other, on the SDK's HTTP client."""
        if self._plain is None:
            response = self._http.post(
                f"{self.base_url}/chat/completions",
                content=body,
                headers=self._headers,
                timeout=self.timeout_seconds,
            )
            return response.status_code, response.reason_phrase, response.headers, response.content
        host, port, path = self._plain
        connection: http.client.HTTPConnection | None = getattr(self._connections, "open", None)
        for fresh in (connection is None, True):
            if connection is None:
                connection = http.client.HTTPConnection(host, port, timeout=self.timeout_seconds)
                with self._lock:
                    self._opened.append(connection)
                self._connections.open = connection
            try:
                connection.request("POST", path, body=body, headers=self._headers)
                response = connection.getresponse()
                content = response.read()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self._drop(connection)
                connection = None
                if fresh:
                    raise
                continue  # the server closed the idle connection: once more on a new one
            except BaseException:
                self._drop(connection)
                raise
            if response.will_close:
                self._drop(connection)
            return response.status, response.reason, response.headers, content
        raise AssertionError("unreachable")  # pragma: no cover

    def _drop(self, connection: http.client.HTTPConnection) -> None:
        connection.close()
        self._connections.open = None
        with self._lock:
            if connection in self._opened:
                self._opened.remove(connection)

    def _create(self, client: openai.OpenAI, options: dict[str, Any]) -> Completion:
        import openai

        # The messages and the response format go in extra_body, which the SDK sends as it
        # is: its typed-dict transform would walk them (milliseconds of CPU per call for the
        # prompt and the update's JSON Schema, neither needing it). ``messages=[]`` is only
        # the required argument; extra_body's value replaces it in the request body.
        options = dict(options)
        extra = {"messages": options.pop("messages")}
        if "response_format" in options:
            extra["response_format"] = options.pop("response_format")
        try:
            raw = client.chat.completions.with_raw_response.create(
                messages=[], **options, extra_body=extra
            )
            data = raw.http_response.json()
        except ValueError:
            raise self._error("the reply is not JSON") from None
        except openai.APITimeoutError:
            raise self._error(
                f"timed out after {self.timeout_seconds:g} s", transient=True
            ) from None
        except openai.APIConnectionError as exc:
            raise self._error(f"connection failed ({_root_cause(exc)})", transient=True) from None
        except openai.APIStatusError as exc:
            detail = _error_detail(exc.body) or exc.response.reason_phrase or ""
            hint = " (check llm_api_key)" if exc.status_code in (401, 403) else ""
            transient = exc.status_code in (408, 409, 429) or exc.status_code >= 500
            raise self._error(
                f"HTTP {exc.status_code}{hint}: {detail}",
                status=exc.status_code,
                transient=transient,
            ) from None
        except openai.OpenAIError as exc:
            raise self._error(f"{type(exc).__name__}: {exc}") from None
        return self._completion(data, options)

    def _completion(self, data: Any, options: Mapping[str, Any]) -> Completion:
        """The :class:`Completion` of a chat-completions reply body ``data`` (parsed JSON)."""
        choices = data.get("choices") if isinstance(data, dict) else None
        if not choices or not isinstance(choices, list) or not isinstance(choices[0], dict):
            raise self._error("the reply has no choices")
        choice = choices[0]
        finish_reason = choice.get("finish_reason")
        message = choice.get("message")
        text = message.get("content") if isinstance(message, dict) else None
        if not isinstance(text, str) or not text:
            if finish_reason == "length":  # all of it went to reasoning: a cut reply
                text = ""
            else:
                raise self._error(f"the reply has no text (finish_reason {finish_reason!r})")
        usage = data.get("usage")
        usage = usage if isinstance(usage, dict) else {}
        model = data.get("model")
        completion = Completion(
            text=text,
            prompt_tokens=_count(usage.get("prompt_tokens")),
            completion_tokens=_count(usage.get("completion_tokens")),
            model=model if isinstance(model, str) and model else self.model or "",
            finish_reason=finish_reason if isinstance(finish_reason, str) else None,
        )
        if completion.cut:
            logger.warning(
                "%s (model %s) stopped at its token limit (max_tokens %s, %d tokens); the reply "
                "is probably cut short",
                self.base_url,
                self.model,
                options.get("max_tokens", "not set"),
                completion.completion_tokens,
            )
        return completion

    def _error(self, cause: str, *, status: int | None = None, transient: bool = False) -> LLMError:
        message = f"LLM call to {self.base_url} (model {self.model}) failed: {cause}"
        if self._api_key:
            message = message.replace(self._api_key, "***")
        return LLMError(message, endpoint=self.base_url, status=status, transient=transient)


STRUCTURED_OUTPUT_MODES = ("auto", "json_schema", "json_object", "off")
"""The values of ``llm_structured_output``."""

_JSON_SCHEMA = "json_schema"
_JSON_OBJECT_SCHEMA = "json_object+schema"
_JSON_OBJECT = "json_object"
_NO_FORMAT = "none"
_LADDER = (_JSON_SCHEMA, _JSON_OBJECT_SCHEMA, _JSON_OBJECT, _NO_FORMAT)
# The step each (endpoint, model, with a schema) settled on, for the life of the process.
_SETTLED: dict[tuple[str, str | None, bool], str] = {}
_SETTLED_LOCK = threading.Lock()
SCHEMA_NAME = "memory_update"
# (step, id(schema)) -> (schema, its response_format, that as JSON), for _body.
_FORMATS: dict[tuple[str, int], tuple[Any, dict[str, Any], str]] = {}
_FORMATS_LOCK = threading.Lock()


def _response_format(step: str, schema: Mapping[str, Any] | None) -> dict[str, Any]:
    """The ``response_format`` of ``step``, the same object for the same step and ``schema``
    object (a few kept), its JSON written once (:func:`_body`)."""
    key = (step, id(schema))
    with _FORMATS_LOCK:
        kept = _FORMATS.get(key)
    if kept is not None and kept[0] is schema:
        return kept[1]
    form = _new_response_format(step, schema)
    with _FORMATS_LOCK:
        if len(_FORMATS) >= 16:
            _FORMATS.clear()
        _FORMATS[key] = (schema, form, json.dumps(form))
    return form


def _body(options: Mapping[str, Any]) -> bytes:
    """``options`` as a JSON request body, a ``response_format`` of :func:`_response_format`
    spliced in as the JSON it kept (the update's schema is most of a request's bytes)."""
    form = options.get("response_format")
    written = None
    if form is not None:
        with _FORMATS_LOCK:
            written = next((k[2] for k in _FORMATS.values() if k[1] is form), None)
    if written is None:
        return json.dumps(options).encode("utf-8")
    rest = json.dumps({k: v for k, v in options.items() if k != "response_format"})
    return f'{rest[:-1]}, "response_format": {written}}}'.encode()


def _new_response_format(step: str, schema: Mapping[str, Any] | None) -> dict[str, Any]:
    if step == _JSON_SCHEMA:
        return {
            "type": "json_schema",
            "json_schema": {"name": SCHEMA_NAME, "schema": dict(schema or {}), "strict": True},
        }
    if step == _JSON_OBJECT_SCHEMA:
        return {"type": "json_object", "schema": dict(schema or {})}
    return {"type": "json_object"}


def _rejects_format(exc: LLMError) -> bool:
    """Whether ``exc`` is an endpoint refusing the request's ``response_format``."""
    if exc.status in (400, 422):
        return True
    return exc.status == 500 and "response_format" in str(exc)


def _retry_delay(headers: Any) -> float:
    """The ``openai`` client's wait before its first retry: the server's ``retry-after-ms`` or
    ``retry-after`` (seconds) when given and at most 60 s, else half a second less up to a
    quarter (jitter)."""
    if headers is not None:
        for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
            try:
                seconds = float(headers.get(name) or "") * scale
            except ValueError:
                continue
            if 0 < seconds <= 60:
                return seconds
    return 0.5 * (1 - 0.25 * random.random())


def _plain_http(base_url: str) -> tuple[str, int, str] | None:
    """(host, port, path) of the chat-completions endpoint under ``base_url`` when it is
    ``http://`` and no proxy applies to it (the environment's, as httpx reads them)."""
    parts = urllib.parse.urlsplit(base_url)
    if parts.scheme != "http" or not parts.hostname:
        return None
    proxies = urllib.request.getproxies()
    if ("http" in proxies or "all" in proxies) and not urllib.request.proxy_bypass(parts.hostname):
        return None
    if parts.username or parts.password or parts.query:
        return None
    return parts.hostname, parts.port or 80, f"{parts.path}/chat/completions"


def _timeout_error_of(transport: Any) -> type[BaseException]:
    """The timeout exception of the httpx package ``transport`` (an HTTP client) comes from."""
    for kind in type(transport).__mro__:
        package = sys.modules.get(kind.__module__.split(".")[0])
        error = getattr(package, "TimeoutException", None)
        if isinstance(error, type) and issubclass(error, BaseException):
            return error
    return TimeoutError


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _error_detail(body: Any) -> str:
    """The message of an OpenAI-style error body (``{"error": {"message": …}}``), shortened."""
    if isinstance(body, Mapping):
        inner = body.get("error", body)
        message = inner.get("message") if isinstance(inner, Mapping) else inner
        text = message if isinstance(message, str) else str(message or "")
    elif isinstance(body, str):
        text = body
    else:
        text = ""
    text = " ".join(text.split())
    return text if len(text) <= _MAX_DETAIL_CHARS else text[: _MAX_DETAIL_CHARS - 1] + "…"


def _root_cause(exc: BaseException) -> str:
    """The innermost cause of a connection error, e.g. ``ConnectionRefusedError``."""
    seen = exc
    inner = seen.__cause__ or seen.__context__
    while inner is not None:
        seen = inner
        inner = seen.__cause__ or seen.__context__
    if isinstance(seen, ConnectionRefusedError) or "refused" in str(seen).lower():
        return "connection refused"
    return f"{type(seen).__name__}: {seen}" if str(seen) else type(seen).__name__


@dataclass(frozen=True)
class ProbeStep:
    """One request of :func:`probe`: the response format sent (a step of the ladder, ``none``
    for no ``response_format``), whether the endpoint answered it, and how long it took."""

    format: str
    accepted: bool
    seconds: float
    error: LLMError | None = None


def probe(llm: LLMClient, schema: Mapping[str, Any], *, max_tokens: int = 16) -> list[ProbeStep]:
    """Ask the endpoint of ``llm`` for a short reply (``max_tokens``) once per step of the
    structured-output ladder, ``schema`` first, without the client's retries, until one is
    answered: the steps tried, in order. A failure that is not a refusal of the format (a
    refused connection, a timeout, 401, an unknown model) ends the probe there: the endpoint
    does not answer, whatever the format. A reply cut at ``max_tokens`` is an answer.

    Raises:
        LLMError: no model, or no key for OpenAI's own API, is configured.
    """
    client = llm._openai()
    messages = [{"role": "user", "content": 'Reply with the JSON object {"ok": true}.'}]
    steps: list[ProbeStep] = []
    for step in _LADDER:
        request: dict[str, Any] = {
            "model": llm.model,
            "messages": messages,
            "temperature": 0.0,
            "max_tokens": max_tokens,
        }
        if step != _NO_FORMAT:
            request["response_format"] = _response_format(step, schema)
        started = time.monotonic()
        try:
            llm._send(client, request, retries=0)
        except LLMError as exc:
            cut = exc.status is None and "finish_reason 'length'" in str(exc)
            steps.append(ProbeStep(step, cut, time.monotonic() - started, None if cut else exc))
            if cut or not _rejects_format(exc):
                return steps
            continue
        steps.append(ProbeStep(step, True, time.monotonic() - started))
        return steps
    return steps
