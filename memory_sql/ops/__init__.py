"""Operations across memories, for operators and the skins on top.

In: an engine (or a storage) and the memories' scopes. Out: what a user's memory holds or held
(search, history, reports), and changes made on purpose (fact edits, import, forget).
"""

from __future__ import annotations

from .facts import FactChange as FactChange
from .facts import add_fact as add_fact
from .facts import remove_fact as remove_fact
from .facts import update_fact as update_fact
from .forget import forget_user as forget_user
from .forget import memory_exists as memory_exists
from .forget import memory_versions as memory_versions
from .modify import SAVE_ATTEMPTS as SAVE_ATTEMPTS
from .modify import describe_validation_error as describe_validation_error
from .search import FactRecord as FactRecord
from .search import search_facts as search_facts
from .transfer import ImportResult as ImportResult
from .transfer import ScopedMemory as ScopedMemory
from .transfer import export_jsonl as export_jsonl
from .transfer import export_memory as export_memory
from .transfer import import_jsonl as import_jsonl
from .transfer import import_memory as import_memory
from .transfer import import_scoped as import_scoped
from .transfer import iter_jsonl as iter_jsonl
from .transfer import parse_memory as parse_memory
from .transfer import read_jsonl as read_jsonl
from .users import UserSummary as UserSummary
from .users import list_users as list_users
