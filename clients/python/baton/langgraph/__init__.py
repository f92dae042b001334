"""LangGraph on batond: `BatonSaver` (checkpoints, one writer per thread) and
`BatonStore` (long-term memory). Install with `pip install "baton-client[langgraph]"`
(from a checkout: `pip install "./clients/python[langgraph]"`)."""

from ._threads import ThreadBusyError, ThreadLostError
from .saver import BatonSaver, ThreadRun
from .store import BatonStore

__all__ = ["BatonSaver", "BatonStore", "ThreadBusyError", "ThreadLostError", "ThreadRun"]
