"""Secrets never reach the warehouse: credentials of every kind planted in real profiles are redacted at ingest.

The profiles are real (the H100 PyTorch trace, the TPU XSpace); the credentials are fake, planted by the
test where real traces carry them: the environment PyTorch captures in the trace metadata, an op's args,
a thread name, an XSpace stat.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import TEST_DATA, TPU_SAMPLE
from hypothesis import given, settings
from hypothesis import strategies as st

import xprosql
from xprosql.cli import main
from xprosql.ingest.secrets import REDACTED, Redactor, _holding, _secret_keys, is_secret_key
from xprosql.protos import xplane_pb2

# One fake credential of every kind the redactor knows by its shape.
CREDENTIALS = {
    "hugging_face": "hf_" + "aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dE3f",
    "github": "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8",
    "github_fine_grained": "github_pat_" + "11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
    "aws": "AKIA" + "IOSFODNN7EXAMPLE",
    "openai": "sk-proj-" + "Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0Fe",
    "slack": "xoxb-" + "123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
    "jwt": "eyJhbGciOiJIUzI1NiJ9." + "eyJzdWIiOiIxMjM0NTY3ODkwIn0." + "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "private_key": "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7fake\nLINEtwo\n-----END RSA PRIVATE KEY-----",
}
# Values that are secrets because of the key they are under, whatever they look like.
KEYED = {"WANDB_API_KEY": "0123456789abcdef", "DB_PASSWORD": "hunter2-Correct", "MY_SERVICE_SECRET": "s3cr3t-value",
         "OAUTH_TOKEN": "plain-looking-value-1"}
# Lookalikes that are no secrets: kept.
KEPT = {"TOKENIZERS_PARALLELISM": "false", "AUTHOR": "someone", "HF_HOME": "/root/.cache/huggingface"}
COMMAND_LINE = "python train.py AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY --lr 3e-4"
ARG_SECRET = "arg-value-under-a-secret-name"


def _planted_kineto(path: Path) -> Path:
    trace = json.loads(gzip.decompress((TEST_DATA / "kineto" / "h100_qwen1.5_0.5b.json.gz").read_bytes()))
    env = trace["metadata"]["system"]["env"]  # where this trace's harness captured the environment
    env.update({f"FAKE_{name.upper()}": value for name, value in CREDENTIALS.items()}, **KEYED, **KEPT)
    env["COMMAND"] = COMMAND_LINE
    op = next(e for e in trace["traceEvents"] if e.get("cat") == "cpu_op")
    op["args"]["auth_token"] = ARG_SECRET
    thread = next(e for e in trace["traceEvents"] if e.get("ph") == "M" and e.get("name") == "thread_name")
    thread["args"]["name"] = f"worker {CREDENTIALS['hugging_face']}"
    path.write_bytes(gzip.compress(json.dumps(trace).encode()))
    return path


def _planted_xspace(path: Path) -> Path:
    space = xplane_pb2.XSpace()
    space.ParseFromString(TPU_SAMPLE.read_bytes())
    plane = space.planes[0]
    stat_id = max(plane.stat_metadata, default=0) + 1
    plane.stat_metadata[stat_id].id, plane.stat_metadata[stat_id].name = stat_id, "launch_command"
    plane.stats.add(metadata_id=stat_id, str_value=f"run --key {CREDENTIALS['aws']} {COMMAND_LINE}")
    path.write_bytes(space.SerializeToString())
    return path


def _warehouse_text(root: Path) -> str:
    """Every string value of every table file of the warehouse."""
    parts = []
    for file in root.rglob("*.parquet"):
        table = pq.read_table(file)
        for column in table.columns:
            kind = column.type
            if hasattr(kind, "value_type"):
                kind = kind.value_type
            if str(kind) in ("string", "large_string"):
                parts.extend(str(v) for v in column.to_pylist() if v is not None)
    return "\n".join(parts)


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    folder = tmp_path_factory.mktemp("planted")
    return [_planted_kineto(folder / "h100_planted.json.gz"), _planted_xspace(folder / "tpu_planted.xplane.pb")]


def test_every_credential_kind_is_redacted_and_counted(planted: list[Path], tmp_path: Path) -> None:
    report = xprosql.ingest(planted, into=tmp_path / "run")
    assert report.ok
    text = _warehouse_text(tmp_path / "run")
    for secret in [*CREDENTIALS.values(), *KEYED.values(), ARG_SECRET, "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"]:
        assert secret not in text
    assert "MIIEowIBAAKCAQEA7fake" not in text
    for name, value in KEPT.items():
        assert f'"{name}": "{value}"' in text
    assert "AWS_SECRET_ACCESS_KEY=<redacted>" in text and REDACTED in text
    counts = dict(xprosql.load(tmp_path / "run").sql("SELECT format, redacted_secrets FROM profiles").rows())
    # Kineto: 8 credentials, 4 keyed values, the command line's key, the arg, the thread name.
    assert counts == {"kineto": len(CREDENTIALS) + len(KEYED) + 3, "xspace": 2}
    assert sorted(item.redacted_secrets for item in report.ingested) == [2, len(CREDENTIALS) + len(KEYED) + 3]


def test_keep_secrets_stores_the_files_as_they_are(planted: list[Path], tmp_path: Path) -> None:
    assert xprosql.ingest(planted, into=tmp_path / "run", keep_secrets=True).ok
    text = _warehouse_text(tmp_path / "run")
    assert all(secret in text for secret in CREDENTIALS.values() if "\n" not in secret)
    assert ARG_SECRET in text
    assert xprosql.load(tmp_path / "run").sql("SELECT count(redacted_secrets) FROM profiles").rows() == [(0,)]


def test_the_cli_says_how_many_it_redacted(planted: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ingest", str(planted[0]), "--into", str(tmp_path / "run")]) == 0
    assert f"{len(CREDENTIALS) + len(KEYED) + 3} secrets redacted" in capsys.readouterr().out


def test_secret_keys() -> None:
    for key in ("HF_TOKEN", "aws_secret_access_key", "apiKey", "accessToken", "db.password", "GITHUB_TOKEN", "X_AUTH"):
        assert is_secret_key(key), key
    for key in ("TOKENIZERS_PARALLELISM", "author", "asttokens", "tiktoken", "HOME", "keyboard", "google-authority"):
        assert not is_secret_key(key), key


def test_pip_freezes_and_redacted_values_are_left_alone() -> None:
    text = 'pkgs: google-auth==2.40.3 asttokens==3.0.0 tiktoken==0.9.0 {"HF_TOKEN": "<redacted>"}'
    assert Redactor().text(text) == (text, 0)


_KEYS = [*KEYED, *KEPT, "X_AUTH", "db.password", "apiKey", "accessToken", "aPiKeY", "PrivateKey", "Passwd", "credentials",
         "monkey"]
_FRAGMENTS = [*CREDENTIALS.values(), *KEYED.values(), *(f'"{k}": "v1"' for k in _KEYS), *(f"{k}=v2" for k in _KEYS),
              '"', ":", "=", " ", "_", "-", ".", "\n", "{", "}", ",", "abc", "Z9", "sk-", "eyJ"]


_VALUE = st.one_of(st.none(), st.lists(st.sampled_from(_FRAGMENTS), max_size=8).map("".join), st.text(max_size=12))


@settings(max_examples=300, deadline=None)
@given(st.lists(_VALUE, max_size=12))
def test_the_prefilter_changes_no_result(values: list[str | None]) -> None:
    """Only the values holding a rule's literal are searched by the rules: the same values and counts as all searched."""
    column = pa.array(values, pa.string())
    holding = _holding([column])
    replaced, counts = Redactor._strings(column, holding[0]) if holding else (column, None)
    expected, expected_counts = Redactor._replaced(column)
    assert replaced.to_pylist() == expected.to_pylist()
    as_list = [0] * len(values) if counts is None else counts.to_pylist()
    assert as_list == ([0] * len(values) if expected_counts is None else expected_counts.to_pylist())


_KEY_PARTS = [*_KEYS, "_", ".", "-", "s", "S", "x", "9", "TOKEN", "Token", "auth", "Auth", "key", "Key", "api", "passw",
              "or", "d", "credential", "secret", "private", "access", "Api"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.none(), st.lists(st.sampled_from(_KEY_PARTS), max_size=5).map("".join), st.text(max_size=10)),
                max_size=12))
def test_stat_names_found_secret_as_each_one_alone(names: list[str | None]) -> None:
    """A batch's stat names are matched in Python only where they hold a secret word: the same as every name."""
    assert _secret_keys(pa.array(names, pa.string())).to_pylist() == [n is not None and is_secret_key(n) for n in names]


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_a_batch_is_redacted_as_its_columns_are_one_by_one(data: st.DataObject) -> None:
    """A batch's text columns are prefiltered together (one search): the same values and count as the rules run on
    every value of each column, whatever the column's type."""
    rows = data.draw(st.integers(0, 6))
    arrays = []
    for kind in data.draw(st.lists(st.sampled_from(["string", "large_string", "dictionary", "int64"]), min_size=1, max_size=5)):
        if kind == "int64":
            arrays.append(pa.array(data.draw(st.lists(st.integers(-5, 5), min_size=rows, max_size=rows)), pa.int64()))
            continue
        values = data.draw(st.lists(_VALUE, min_size=rows, max_size=rows))
        arrays.append(pa.array(values, pa.string()).dictionary_encode() if kind == "dictionary"
                      else pa.array(values, pa.string() if kind == "string" else pa.large_string()))
    batch = pa.RecordBatch.from_arrays(arrays, names=[f"c{i}" for i in range(len(arrays))])
    expected_columns, expected_count = [], 0
    for column in arrays:
        if pa.types.is_integer(column.type):
            expected_columns.append(column.to_pylist())
            continue
        replaced, counts = Redactor._replaced(pa.array(column.to_pylist(), pa.string()))
        expected_columns.append(replaced.to_pylist())
        expected_count += 0 if counts is None else sum(counts.to_pylist())
    redactor = Redactor()
    redacted = redactor.batch("events", batch)
    assert [column.to_pylist() for column in redacted.columns] == expected_columns
    assert redactor.count == expected_count
