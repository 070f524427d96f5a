"""Secrets out of the warehouse: credentials in a profile's text are replaced by ``<redacted>`` at ingest.

PyTorch traces capture the process environment in their metadata (``HF_TOKEN`` and the like), and any
string a program records can hold a key. Every string of every table passes :class:`Redactor` before it
is written, unless the user keeps secrets (``ingest(keep_secrets=True)``, ``--keep-secrets``):

* values of keys that name secrets: a JSON member (``"HF_TOKEN": "..."``), an environment assignment
  (``AWS_SECRET_ACCESS_KEY=...``), or a stat or arg of that name (``event_stats.stat``);
* values that look like well-known credentials wherever they are: Hugging Face ``hf_...``, GitHub
  ``ghp_...`` / ``github_pat_...``, AWS access key ids ``AKIA...`` / ``ASIA...``, OpenAI-style ``sk-...``,
  Slack ``xox?-...``, JSON Web Tokens ``eyJ....eyJ....``, and PEM private-key blocks.

A key names a secret when one of its words (split at ``_``, ``-``, ``.`` and case changes) is TOKEN,
SECRET, PASSWORD, PASSWD, CREDENTIAL(S), AUTH or APIKEY, or two words are API KEY, ACCESS KEY or
PRIVATE KEY. The number of replaced values is stored per profile (``profiles.redacted_secrets``).

Example:
    >>> Redactor().text('{"env": {"HF_TOKEN": "hf_abc", "HOME": "/root"}}')
    ('{"env": {"HF_TOKEN": "<redacted>", "HOME": "/root"}}', 1)
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["REDACTED", "Redactor", "is_secret_key"]

REDACTED = "<redacted>"

# A key names a secret when one of its words is a secret word: words split at separators (HF_TOKEN,
# aws_secret_access_key) or at a case change (accessToken). TOKENIZERS_PARALLELISM, asttokens, author: no.
_WORDS = r"token|secret|passw(?:or)?d|credential|api[_.-]?key|access[_.-]?key|private[_.-]?key|auth"
_CAMEL_WORDS = r"Token|Secret|Password|Passwd|Credential|Auth|ApiKey|AccessKey|PrivateKey"
_KEY = (rf"(?:(?:[A-Za-z0-9]+[_.-])*(?i:{_WORDS})(?i:s)?(?:[_.-][A-Za-z0-9_.-]*)?"
        rf"|[A-Za-z0-9_.-]*[a-z0-9](?:{_CAMEL_WORDS})s?(?:[_.A-Z-][A-Za-z0-9_.-]*)?)")
# Credentials by their shape (RE2 and Python agree on these).
_CREDENTIALS = (
    r"hf_[A-Za-z0-9]{20,}",
    r"github_pat_[A-Za-z0-9_]{20,}",
    r"gh[pousr]_[A-Za-z0-9]{30,}",
    r"(?:AKIA|ASIA)[0-9A-Z]{16}",
    r"sk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,}",
    r"xox[abposr]-[A-Za-z0-9-]{10,}",
    r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
    r"-----BEGIN[A-Z ]* PRIVATE KEY-----[\s\S]*?-----END[A-Z ]* PRIVATE KEY-----",
)
# (what goes, its replacement, the same already redacted: not counted again). A JSON member or an assignment
# whose key names a secret loses its value; a credential goes wherever it is.
_RULES = (
    (rf'("{_KEY}"\s*:\s*)"(?:[^"\\]|\\.)*"', rf'\1"{REDACTED}"', rf'"{_KEY}"\s*:\s*"{REDACTED}"'),
    (rf"(\b{_KEY}=)[^=\s\"',;&][^\s\"',;&]*", rf"\1{REDACTED}", rf"\b{_KEY}={REDACTED}"),
    ("|".join(f"(?:{c})" for c in _CREDENTIALS), REDACTED, None),
)
# What every rule's match holds: a secret word of _KEY (case aside) whose key ends in the quote of a JSON member or an
# assignment's "=" (a key's characters between them), or a credential's prefix. The rules, whose regular expressions
# cost a quarter of a millisecond a column to compile, search only the values that hold one: not the names that merely
# hold a word (a V100 profile's 480 `..._attention_key_...` ops).
_MAY_HOLD = ('(?i:token|secret|passw|credential|auth|key)[A-Za-z0-9_.-]*["=]'
             "|hf_|github_pat_|gh[pousr]_|AKIA|ASIA|sk-|xox[abposr]-|eyJ|-----BEGIN")
_STAT_TABLES = ("event_stats", "device_stats", "metadata_stats")


def is_secret_key(name: str) -> bool:
    """Whether a key (an environment variable, a JSON member, a stat) names a secret.

    Example:
        >>> [is_secret_key(k) for k in ("HF_TOKEN", "aws_secret_access_key", "apiKey", "TOKENIZERS_PARALLELISM")]
        [True, True, True, False]
    """
    return re.fullmatch(_KEY, name) is not None


class Redactor:
    """Replaces secrets in text and in record batches, counting what it replaced (``count``)."""

    def __init__(self) -> None:
        self.count = 0

    def text(self, value: str) -> tuple[str, int]:
        """``value`` with its secrets replaced, and how many there were."""
        values = pa.array([value], pa.string())
        holding = _holding([values])
        if not holding:
            return value, 0
        replaced, counts = self._strings(values, holding[0])
        return replaced[0].as_py(), 0 if counts is None else counts[0].as_py()

    def batch(self, table: str, batch: pa.RecordBatch) -> pa.RecordBatch:
        """``batch`` of ``table`` with every string column's secrets replaced (``count`` grows by their number)."""
        columns = []
        secret_stat = None
        if table in _STAT_TABLES and "stat" in batch.schema.names:
            stats = batch.column("stat")
            names = stats.dictionary if isinstance(stats, pa.DictionaryArray) else stats
            flags = _secret_keys(names)
            secret_stat = pc.take(flags, stats.indices) if isinstance(stats, pa.DictionaryArray) else flags
        holding = _holding(batch.columns)
        for i, (field, column) in enumerate(zip(batch.schema, batch.columns)):
            if secret_stat is not None and field.name == "str_value" and pc.any(secret_stat).as_py():
                hit = pc.and_(secret_stat, pc.fill_null(pc.not_equal(column, REDACTED), False))
                self.count += pc.sum(hit.cast(pa.int64())).as_py() or 0
                column = pc.if_else(hit, pa.scalar(REDACTED, column.type), column)
            columns.append(self._column(column, holding[i]) if i in holding else column)
        return pa.RecordBatch.from_arrays(columns, schema=batch.schema)

    def _column(self, column: pa.Array, holding: pa.Array) -> pa.Array:
        """A text column with its secrets replaced (``count`` grows by their number); ``holding``: its values that
        may hold one (``_holding``)."""
        if isinstance(column, pa.DictionaryArray):
            values, counts = self._strings(column.dictionary, holding)
            if counts is None:
                return column
            self.count += pc.sum(pc.take(counts, column.indices)).as_py() or 0
            return pa.DictionaryArray.from_arrays(column.indices, values)
        values, counts = self._strings(column, holding)
        if counts is not None:
            self.count += pc.sum(counts).as_py() or 0
        return values

    @staticmethod
    def _strings(values: pa.Array, holding: pa.Array) -> tuple[pa.Array, pa.Array | None]:
        """The values with secrets replaced, and the replacements in each (None: there were none); only the values
        in ``holding`` are searched."""
        candidates = pc.is_in(values, value_set=holding)
        replaced, found = Redactor._replaced(values.filter(candidates))
        if found is None:
            return values, None
        counts = pc.replace_with_mask(pa.repeat(pa.scalar(0, found.type), len(values)), candidates, found)
        return pc.replace_with_mask(values, candidates, replaced), counts

    @staticmethod
    def _replaced(values: pa.Array) -> tuple[pa.Array, pa.Array | None]:
        """``_strings`` by the rules themselves."""
        counts = None
        for pattern, replacement, done in _RULES:
            found = pc.count_substring_regex(values, pattern)
            if not pc.any(pc.greater(found, 0)).as_py():
                continue
            if done is not None:
                found = pc.subtract(found, pc.count_substring_regex(values, done))
            values = pc.replace_substring_regex(values, pattern, replacement)
            counts = found if counts is None else pc.add(counts, found)
        return values, (None if counts is None else pc.fill_null(counts, 0))


def _secret_keys(names: pa.Array) -> pa.Array:
    """:func:`is_secret_key` of each of ``names`` (null: False). Only the names holding a secret word, as every secret
    key does, are matched in Python: a batch's stat names are a profile's, 1,400 of a V100 profile in each of its
    batches (8 ms a profile)."""
    words = pc.fill_null(pc.match_substring_regex(names, _WORDS, ignore_case=True), False)
    flags = [False] * len(names)
    for i in pc.indices_nonzero(words).to_pylist():
        flags[i] = is_secret_key(names[i].as_py())
    return pa.array(flags, pa.bool_())


def _distinct_text(column: pa.Array) -> pa.Array | None:
    """The distinct values of a text column (a dictionary's values); None for other columns."""
    if isinstance(column, pa.DictionaryArray):
        return column.dictionary if pa.types.is_string(column.type.value_type) else None
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        return pc.unique(column)
    return None


def _holding(columns: Sequence[pa.Array]) -> dict[int, pa.Array]:
    """Per position of a text column with values that may hold a secret (the prefilter, ``_MAY_HOLD``): those values.

    The prefilter runs on the distinct values, as a stat's strings repeat (the event stats' strings of 100 profiles of
    the corpus: 0.09 s against 0.29 s for every value), and once over every text column's: a search costs a tenth of a
    millisecond even over a few values, and a profile's batches have dozens of text columns, almost none holding
    anything.
    """
    distinct = {i: values for i, column in enumerate(columns) if (values := _distinct_text(column)) is not None}
    if not distinct:
        return {}
    text = pa.string() if all(values.type == pa.string() for values in distinct.values()) else pa.large_string()
    found = pc.match_substring_regex(
        pa.concat_arrays([values if values.type == text else values.cast(text) for values in distinct.values()]), _MAY_HOLD)
    found = pc.fill_null(found, False).to_numpy(zero_copy_only=False)
    if not found.any():
        return {}
    holding = {}
    start = 0
    for i, values in distinct.items():
        mask = found[start:start + len(values)]
        start += len(values)
        if mask.any():
            holding[i] = values.filter(pa.array(mask))
    return holding
