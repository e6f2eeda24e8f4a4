"""Queue: when updates run.

In: kept conversations from intake, debounced per thread in a durable table (with a spool in
front of it for outages). Out: due rows, claimed under a lease by the worker and handed to the
runner it was given (the service's update), then completed, or retried with back-off."""

from __future__ import annotations

from .manage import QueueChange as QueueChange
from .manage import QueuedUpdate as QueuedUpdate
from .manage import UpdateKey as UpdateKey
from .pending import PendingUpdate as PendingUpdate
from .pending import UpdateQueue as UpdateQueue
from .pending import make_owner as make_owner
from .spool import Spool as Spool
from .spool import spool_directory as spool_directory
from .worker import RunOutcome as RunOutcome
from .worker import UpdateWorker as UpdateWorker
