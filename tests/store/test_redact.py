"""The redaction rules of ``zoorank.store.redact``, one per kind of secret, and where they apply."""

from __future__ import annotations

import logging
from urllib.parse import quote

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from zoorank.errors import InputError
from zoorank.store import Store
from zoorank.store import redact as R
from zoorank.store.uris import redact as uris_redact
from zoorank.store.uris import resolve

SECRET = "wJal/rXUtn+FEMI/K7MDENG=bPx=="


@pytest.mark.parametrize("text", [
    f"s3://AKIDEXAMPLE:{SECRET}@bucket/store",
    f"s3://AKIDEXAMPLE:{quote(SECRET, safe='')}@bucket/store?region=eu",
    f"error: cannot open 's3://AKIDEXAMPLE:{SECRET}@bucket/x' (reason)",
    f"gs://user:{SECRET}@bucket/a/b",
])
def test_user_info_is_masked_whatever_the_secret_holds(text):
    out = R.redact(text)
    assert SECRET not in out and quote(SECRET, safe="") not in out and "AKIDEXAMPLE" not in out
    assert "***@bucket/" in out


@pytest.mark.parametrize("param", ["access_token", "X-Goog-Signature", "X-Amz-Signature",
                                   "X-Amz-Credential", "X-Amz-Security-Token", "sig", "token",
                                   "secret_key", "session_token", "password", "api_key"])
def test_secret_query_parameters_are_masked_and_others_kept(param):
    url = f"https://host/obj?region=eu&{param}={SECRET}&endpoint_override=127.0.0.1:9000"
    out = R.redact(url)
    assert SECRET not in out and f"{param}=***" in out
    assert "region=eu" in out and "endpoint_override=127.0.0.1:9000" in out


def test_secret_environment_values_are_masked_anywhere_raw_or_encoded(monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("MY_SERVICE_TOKEN", "tok-123456789")
    monkeypatch.setenv("HOME_DIR_NAME", "not-a-secret-value")
    text = f"a {SECRET} b {quote(SECRET, safe='')} c tok-123456789 d not-a-secret-value"
    assert R.redact(text) == "a *** b *** c *** d not-a-secret-value"


def test_a_secret_seen_in_a_uri_is_masked_where_it_reappears_alone():
    secret = "Learned/Secret+Value=="
    R.redact(f"s3://key:{quote(secret, safe='')}@bucket/x")
    assert R.redact(f"pyarrow says: bad credential {secret}") == "pyarrow says: bad credential ***"


def test_paths_with_at_signs_and_endpoints_are_left_alone():
    for text in ("s3://bucket/models/org/model@rev", "http://127.0.0.1:9000/bucket",
                 "/home/user/runs/lr0.3-s0/last.ckpt", "rankme 12.5 (n=300)"):
        assert R.redact(text) == text


def test_uris_redact_is_the_same_redaction():
    uri = f"s3://AKID:{SECRET}@bucket/store?secret_key={SECRET}"
    assert uris_redact(uri) == R.redact(uri) == "s3://***@bucket/store?secret_key=***"
    assert uris_redact(None) == ""


def test_pyarrows_cannot_parse_uri_error_is_redacted():
    with pytest.raises(InputError) as err:
        resolve(f"s3://AKID:{SECRET}@bucket/store?endpoint_override=127.0.0.1:1")
    assert "Cannot parse URI" in str(err.value) and SECRET not in str(err.value)
    assert "s3://***@" in str(err.value)


def test_safe_join_appends_before_the_query():
    assert R.safe_join("s3://b/store?endpoint_override=h:1&scheme=http", "tune", "exp") == \
        "s3://b/store/tune/exp?endpoint_override=h:1&scheme=http"
    assert R.safe_join("/local/store/", "tune") == "/local/store/tune"


def test_tables_are_redacted_in_their_strings_and_metadata():
    frame = pd.DataFrame({"model_id": ["a", "b"], "error": [f"s3://k:{SECRET}@b/x bad", None],
                          "n": [1, 2]})
    clean = R.redact_table(frame)
    assert clean["error"].iloc[0] == "s3://***@b/x bad" and clean["error"].isna().iloc[1]
    assert clean["n"].tolist() == [1, 2] and clean["error"].dtype == frame["error"].dtype
    assert R.redact_table(clean) is clean  # nothing left to change: no copy
    table = pa.Table.from_pandas(frame, preserve_index=False).replace_schema_metadata(
        {b"zoorank": f'{{"store": "s3://k:{SECRET}@b"}}'.encode()})
    out = R.redact_table(table)
    assert SECRET not in str(out.to_pylist()) and SECRET.encode() not in out.schema.metadata[
        b"zoorank"]


def test_every_text_file_and_table_the_store_writes_is_redacted(tmp_path):
    store = Store(tmp_path / "store")
    leak = f"failed reading s3://k:{SECRET}@bucket/ckpt.pt"
    store.write_text("leaderboard.md", leak)
    store.write_json("tune/x/tune_config.json", {"store": f"s3://k:{SECRET}@bucket/s"})
    store.write_parquet("failed.parquet", pd.DataFrame({"error": [leak]}))
    store.write_bytes("report/plot.png", SECRET.encode())  # binary files are not text: as given
    for rel in ("leaderboard.md", "tune/x/tune_config.json", "failed.parquet"):
        assert SECRET.encode() not in (tmp_path / "store" / rel).read_bytes()
    assert pq.read_table(tmp_path / "store" / "failed.parquet").column("error").to_pylist() == [
        "failed reading s3://***@bucket/ckpt.pt"]


def test_the_logging_filter_redacts_messages_and_exceptions(caplog):
    logger = logging.getLogger("zoorank.test_redact")
    logger.addFilter(R.RedactingFilter())
    with caplog.at_level(logging.INFO, logger="zoorank.test_redact"):
        logger.info("opening %s", f"s3://k:{SECRET}@b/x")
        try:
            raise OSError(f"reset reading s3://k:{SECRET}@b/x")
        except OSError:
            logger.exception("read failed")
    assert SECRET not in caplog.text and "s3://***@b/x" in caplog.text
