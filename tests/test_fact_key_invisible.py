"""Facts that differ only by invisible characters (default-ignorable code points) are one fact."""

from __future__ import annotations

import datetime as dt
import unicodedata

import pytest
import sqlalchemy as sa

from memory_sql import DuplicateFactError, Fact, fact_key
from memory_sql.models import fact_digest
from memory_sql.schema import memory_facts
from memory_sql.storage import SQLStorage, open_storage

VARIANTS = [
    "prefers Python",
    "prefers Py\u200bthon",  # ZERO WIDTH SPACE
    "pre\u00adfers python",  # SOFT HYPHEN
    "\ufeffPrefers python",  # ZERO WIDTH NO-BREAK SPACE (a byte order mark)
]

# Default_Ignorable_Code_Point in Unicode's DerivedCoreProperties.txt.
DEFAULT_IGNORABLE = [
    (0x00AD, 0x00AD),
    (0x034F, 0x034F),
    (0x061C, 0x061C),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180F),
    (0x200B, 0x200F),
    (0x202A, 0x202E),
    (0x2060, 0x206F),
    (0x3164, 0x3164),
    (0xFE00, 0xFE0F),
    (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0),
    (0xFFF0, 0xFFF8),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0000, 0xE0FFF),
]
IGNORABLE = {cp for first, last in DEFAULT_IGNORABLE for cp in range(first, last + 1)}


def test_facts_differing_by_invisible_characters_have_one_key():
    assert {fact_key(text) for text in VARIANTS} == {"prefers python"}
    assert len({fact_digest(text) for text in VARIANTS}) == 1


def test_every_default_ignorable_code_point_is_folded():
    for cp in sorted(IGNORABLE):
        assert fact_key(f"Py{chr(cp)}thon") == "python", hex(cp)


def test_no_other_code_point_is_folded():
    key = fact_key.__wrapped__  # not through the cache, which this would only churn
    for cp in range(0x110000):
        if cp in IGNORABLE or 0xD800 <= cp <= 0xDFFF or chr(cp).isspace():
            continue
        assert key(f"a{chr(cp)}b") != "ab", hex(cp)


def test_an_emoji_joined_by_zwj_or_a_variation_selector_folds():
    assert fact_key("👩\u200d💻 codes in Rust") == fact_key("👩💻 codes in rust")
    assert fact_key("❤\ufe0f jazz") == fact_key("❤ jazz")


@pytest.mark.parametrize(
    "text",
    [
        "Prefers  Python",
        "Straße",
        "用户偏好简洁沟通",
        "naïve résumé",
        "हिन्दी बोलता है",
        "مرحبا بالعالم",
        "שלום עולם",
        "ﬁle ｆｕｌｌｗｉｄｔｈ",
    ],
)
def test_ordinary_text_keeps_its_key(text):
    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())
    assert fact_key(text) == " ".join(folded.split())


def test_the_content_itself_keeps_its_invisible_characters():
    assert Fact(content="prefers Py\u200bthon").content == "prefers Py\u200bthon"


@pytest.fixture(params=["sqlite", pytest.param("pg", id="postgresql", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest):
    storage = open_storage(request.getfixturevalue(f"{request.param}_url"))
    assert isinstance(storage, SQLStorage)
    yield storage
    storage.close()


@pytest.mark.parametrize("second", VARIANTS[1:])
def test_storage_refuses_two_facts_differing_by_invisible_characters(store, scope, second):
    doc = store.load(**scope)
    doc.facts = [Fact(content=VARIANTS[0]), Fact(content=second)]
    with pytest.raises(DuplicateFactError):
        store.save(doc, **scope)
    assert store.load(**scope).version == 0

    doc.facts = [Fact(content=second)]
    store.save(doc, **scope)
    doc = store.load(**scope)
    doc.facts.append(Fact(content=VARIANTS[0]))
    with pytest.raises(DuplicateFactError):
        store.save(doc, **scope)
    assert [f.content for f in store.load(**scope).facts] == [second]


def test_the_database_refuses_them_too(store, scope):
    doc = store.load(**scope)
    doc.facts = [Fact(content=VARIANTS[0])]
    store.save(doc, **scope)
    now = dt.datetime.now(dt.timezone.utc)
    row = {
        "tenant_id": "default",
        **scope,
        "fact_id": "raw-invisible",
        "content": VARIANTS[1],
        "content_key": fact_digest(VARIANTS[1]),
        "category": "context",
        "confidence": 0.5,
        "created_at": now,
        "updated_at": now,
    }
    with pytest.raises(sa.exc.IntegrityError), store.engine.begin() as conn:
        conn.execute(sa.insert(memory_facts).values(row))
