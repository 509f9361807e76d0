"""The reply routing between os-ken's app thread and the reconciler thread."""

import threading
from types import SimpleNamespace

from controller.southbound.switches import CallTable


def test_replies_reach_their_call_and_a_dead_switch_wakes_every_waiter():
    table = CallTable()
    a, b = table.next_xid(), table.next_xid()
    first = table.open(1, [a])
    second = table.open(1, [b])
    other = table.open(2, [table.next_xid()])
    assert table.deliver(1, SimpleNamespace(xid=a))
    assert not table.deliver(1, SimpleNamespace(xid=12345))  # not ours: left to os-ken
    reply = first.replies.get_nowait()
    assert reply is not None and reply.xid == a

    woken = []
    waiter = threading.Thread(target=lambda: woken.append(second.replies.get(timeout=5)))
    waiter.start()
    table.fail_switch(1)  # two pending calls on switch 1 (regression: Call must be hashable)
    waiter.join(timeout=5)
    assert woken == [None] and first.replies.get_nowait() is None
    assert other.replies.empty()
    table.close(1, first)
    assert not table.deliver(1, SimpleNamespace(xid=a))
