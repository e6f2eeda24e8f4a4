"""Intake: a finished conversation taken in, once.

In: chat messages of any shape a host hands over (OpenAI, LangChain). Out: a
:class:`KeptConversation`, the normalised turns worth learning from and their signals, which the
queue stores and the updater reads as they are.
"""

from __future__ import annotations

from .conversation import KeptConversation as KeptConversation
from .conversation import take_conversation as take_conversation
from .filter import filter_messages_for_memory as filter_messages_for_memory
from .filter import has_minimum_dialogue as has_minimum_dialogue
from .messages import Message as Message
from .messages import normalize_messages as normalize_messages
from .signals import Signals as Signals
from .signals import detect_signals as detect_signals
