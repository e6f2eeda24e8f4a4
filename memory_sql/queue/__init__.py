"""When updates run: the durable debounced queue, the in-process spool in front of it for
outages, and the worker that claims and runs due rows."""

from __future__ import annotations

from .manage import QueueChange as QueueChange
from .manage import QueuedUpdate as QueuedUpdate
from .manage import UpdateKey as UpdateKey
from .pending import PendingUpdate as PendingUpdate
from .pending import UpdateQueue as UpdateQueue
from .pending import make_owner as make_owner
from .spool import Spool as Spool
from .worker import RunOutcome as RunOutcome
from .worker import UpdateWorker as UpdateWorker
