"""One redaction for every text that leaves the process (layer L1: no zoorank imports).

zoorank never needs a secret in a message, so every boundary where text leaves the process (the
console, logs, error strings stored in tables, the report, Tune's files) passes it through
:func:`redact`, which replaces with ``***``

* the user-info of any URI in the text (``s3://KEY:SECRET@bucket`` → ``s3://***@bucket``), whatever
  the secret holds (``/``, ``+``, ``=``, percent escapes);
* the values of secret-looking query parameters (``secret_key``, ``access_token``, ``token``,
  ``sig``, ``X-Amz-Signature``, ``X-Goog-Signature``, ``X-Amz-Credential``, ...);
* the values of secret-looking environment variables (``AWS_SECRET_ACCESS_KEY``,
  ``AWS_SESSION_TOKEN``, ``HF_TOKEN``, ``*_PASSWORD``, ...) and every secret seen in a URI so far,
  wherever they occur in the text, raw or percent-encoded (pyarrow's "Cannot parse URI" repeats a
  URI decoded or in part);
* AWS access key ids (``AKIA...``).

:func:`safe_join` appends a path to a URI without disturbing its query (``s3://b/store?x=1`` +
``tune`` → ``s3://b/store/tune?x=1``).
"""

from __future__ import annotations

import logging
import os
import re
import threading
from typing import Any
from urllib.parse import quote, unquote

MASK = "***"

#: query parameter names whose value is a secret (matched case-insensitively, whole name).
SECRET_PARAMS = re.compile(
    r"(?i)(?:[\w.\-]*(?:token|secret|password|passwd|credential|signature|api[_\-]?key"
    r"|access[_\-]?key|private[_\-]?key|account[_\-]?key|sas)[\w.\-]*|key|sig|pwd|x-amz-[\w\-]+"
    r"|x-goog-[\w\-]+)")
#: environment variable names whose value is a secret.
SECRET_ENV = re.compile(r"(?i)(SECRET|TOKEN|PASSWORD|PASSWD|CREDENTIAL|PRIVATE_KEY|ACCESS_KEY"
                        r"|ACCOUNT_KEY|API_KEY|SAS|_KEY$|^KEY$)")
#: values shorter than this are not treated as secrets (``1``, ``true`` would mask everything).
MIN_SECRET_LEN = 8

_END = r"\s'\"<>`|\\"
_SCHEME = r"[A-Za-z][A-Za-z0-9+.\-]*://"
# user-info: up to the first "@" of the authority; with a ":" (user:secret) the secret may hold
# "/", "+", "=" (an AWS secret), else it is the single segment before "@"
_USERINFO = re.compile(rf"({_SCHEME})([^{_END}@:/]*:[^{_END}@]*@|[^{_END}@/:]+@)")
_QUERY = re.compile(rf"([?&;])([\w.\-]+)=([^&#;{_END}]*)")
_AWS_KEY_ID = re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b")

_learned: set[str] = set()
_lock = threading.Lock()


def _variants(secret: str) -> set[str]:
    """The forms a secret takes in text: raw, percent-decoded, percent-encoded."""
    forms = {secret, unquote(secret), quote(secret, safe=""), quote(unquote(secret), safe="")}
    return {f for f in forms if len(f) >= MIN_SECRET_LEN}


def learn(secret: str) -> None:
    """Mask ``secret`` (and its encoded forms) in every later :func:`redact` of this process."""
    if secret and len(secret) >= MIN_SECRET_LEN:
        with _lock:
            _learned.update(_variants(secret))


def env_secrets(environ: os._Environ[str] | dict[str, str] | None = None) -> set[str]:
    """The values of the secret-looking environment variables (and their encoded forms)."""
    env = os.environ if environ is None else environ
    out: set[str] = set()
    for name, value in list(env.items()):
        if value and SECRET_ENV.search(name):
            out |= _variants(value)
    return out


def _mask_userinfo(match: re.Match[str]) -> str:
    info = match.group(2)[:-1]
    if ":" in info:
        learn(info.split(":", 1)[1])
    return f"{match.group(1)}{MASK}@"


def _mask_query(match: re.Match[str]) -> str:
    sep, name, value = match.groups()
    if not SECRET_PARAMS.fullmatch(name) or not value:
        return match.group(0)
    learn(value)
    return f"{sep}{name}={MASK}"


def redact(text: object, environ_secrets: set[str] | None = None) -> str:
    """``text`` (any object: its ``str``) with every secret replaced by ``***`` (module docstring).
    ``environ_secrets``: :func:`env_secrets` computed once by a caller that redacts many values.

    >>> redact("s3://AKIA:a/b+c=d@bucket/store?region=eu&secret_key=x/y+z=")
    's3://***@bucket/store?region=eu&secret_key=***'
    """
    if text is None:
        return ""
    out = str(text)
    if not out:
        return out
    out = _USERINFO.sub(_mask_userinfo, out)
    out = _QUERY.sub(_mask_query, out)
    with _lock:
        known = set(_learned)
    from_env = env_secrets() if environ_secrets is None else environ_secrets
    for secret in sorted(known | from_env, key=len, reverse=True):
        if secret in out:
            out = out.replace(secret, MASK)
    return _AWS_KEY_ID.sub(MASK, out)


def safe_join(uri: str, *parts: str) -> str:
    """``uri`` with path ``parts`` appended before its query (``?...``) and fragment."""
    base, sep, query = str(uri).partition("?")
    base = base.rstrip("/")
    for part in parts:
        base = f"{base}/{part.strip('/')}"
    return base + (sep + query if sep else "")


class RedactingFilter(logging.Filter):
    """A logging filter that redacts each record's message (args are formatted in first)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = redact(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and record.exc_info[1] is not None:
            # the formatted traceback repeats the exception's text; keep only a redacted line
            err = record.exc_info[1]
            record.msg = f"{record.msg}: {type(err).__name__}: {redact(err)}"
            record.args, record.exc_info, record.exc_text = None, None, None
        return True


_FILTER = RedactingFilter()


def install_logging_filter(*loggers: str) -> None:
    """Redact every record handled by the root logger's handlers and by ``loggers``' handlers."""
    targets = [logging.getLogger()] + [logging.getLogger(name) for name in loggers]
    for logger in targets:
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
        for handler in logger.handlers:
            if _FILTER not in handler.filters:
                handler.addFilter(_FILTER)


#: store files holding text for people or programs (redacted as text when written).
TEXT_SUFFIXES = (".md", ".csv", ".html", ".json", ".yaml", ".yml", ".txt", ".log", ".svg")


def redact_table(table: Any) -> Any:
    """A ``pyarrow.Table`` (or ``pandas.DataFrame``) with every string value and the schema's
    metadata redacted; the same object when nothing changes (the usual case, no copy)."""
    import pandas as pd
    import pyarrow as pa

    env = env_secrets()  # once per table, not per value (a scan of os.environ each)

    def redact(value: object) -> str:
        return _redact(value, env)

    if isinstance(table, pd.DataFrame):
        frame = table
        changed = {}
        for name in frame.columns:
            col = frame[name]
            if col.dtype == object or pd.api.types.is_string_dtype(col.dtype):
                values = pd.Series([redact(v) if isinstance(v, str) else v for v in col],
                                   index=col.index, dtype=col.dtype, name=name)
                if not values.equals(col):
                    changed[name] = values
        return frame.assign(**changed) if changed else frame
    columns, changed = [], False
    for col in table.columns:
        if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
            values = col.to_pylist()
            clean = [redact(v) if v is not None else None for v in values]
            if clean != values:
                col, changed = pa.chunked_array([pa.array(clean, type=col.type)]), True
        columns.append(col)
    meta = table.schema.metadata
    clean_meta = ({k: redact(v.decode("utf-8", "replace")).encode() for k, v in meta.items()}
                  if meta else meta)
    if clean_meta != meta:
        changed = True
    if not changed:
        return table
    return pa.Table.from_arrays(columns, schema=table.schema.with_metadata(clean_meta))


_redact = redact


def redact_file(relpath: str, data: bytes) -> bytes:
    """What a store file may hold: text files and Parquet tables redacted, other bytes as given."""
    if relpath.endswith(TEXT_SUFFIXES):
        text = data.decode("utf-8", "surrogateescape")
        clean = redact(text)
        return data if clean == text else clean.encode("utf-8", "surrogateescape")
    if relpath.endswith(".parquet") and data:
        import io

        import pyarrow.parquet as pq

        schema = pq.read_schema(io.BytesIO(data))
        if not any(str(t) in ("string", "large_string") for t in schema.types) and \
                redact(str(schema.metadata)) == str(schema.metadata):
            return data
        table = pq.read_table(io.BytesIO(data))
        clean = redact_table(table)
        if clean is table:
            return data
        buf = io.BytesIO()
        pq.write_table(clean, buf)
        return buf.getvalue()
    return data
