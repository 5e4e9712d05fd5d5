"""``moto_server`` whose conditional writes are atomic, as S3's are: run as a script.

moto 5.2.5 checks ``If-Match`` / ``If-None-Match`` and then writes, two steps in a threaded
server: two conditional writes of one key that arrive together can both pass the check
and both land (both commits "succeed", the later one's reference overwrites the earlier).
S3 makes the check and the write one operation. Here every conditional PutObject,
DeleteObject and CompleteMultipartUpload holds one lock from its check to its write, so
conditional writes are atomic with respect to each other; unconditional requests are not
locked and run concurrently as before (an unconditional write of the same key could still
land between a check and its write: icechunk writes its references only conditionally).
So two coordinators committing at once are ordered by this server as S3 orders them
(``tests/store/cube/test_cooperative.py``).
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from moto.s3.responses import S3Response
from moto.server import main

_LOCK = threading.Lock()
CONDITIONAL = ("If-Match", "If-None-Match")
"""Request headers that make a write conditional."""
ATOMIC = ("put_object", "delete_object", "_key_response_post")
"""moto's handlers of PutObject, DeleteObject and CompleteMultipartUpload (a POST)."""


def _atomic(handler: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(handler)
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        if any(self.headers.get(h) for h in CONDITIONAL):
            with _LOCK:
                return handler(self, *args, **kwargs)
        return handler(self, *args, **kwargs)

    return run


WIDEN_ENV = "EARTHMEM_TEST_S3_CHECK_DELAY"
"""Seconds every object lookup waits after looking (a test's knob: it widens the window
between a conditional write's check and its write, so that a race shows; unset, no wait)."""
ATOMIC_ENV = "EARTHMEM_TEST_S3_ATOMIC"
"""``0``: leave moto's conditional writes as they are (to show the race); default ``1``."""


def patch() -> None:
    """Make moto's conditional writes atomic in this process."""
    for name in ATOMIC:
        setattr(S3Response, name, _atomic(getattr(S3Response, name)))


def _widen(delay: float) -> None:
    from moto.s3.models import S3Backend

    lookup = S3Backend.get_object

    @functools.wraps(lookup)
    def slow(self: Any, *args: Any, **kwargs: Any) -> Any:
        found = lookup(self, *args, **kwargs)
        time.sleep(delay)  # after the lookup: between a check and the write it guards
        return found

    S3Backend.get_object = slow  # type: ignore[method-assign]


if __name__ == "__main__":
    if os.environ.get(WIDEN_ENV):
        _widen(float(os.environ[WIDEN_ENV]))
    if os.environ.get(ATOMIC_ENV, "1") != "0":
        patch()
    sys.exit(main(sys.argv[1:]))
