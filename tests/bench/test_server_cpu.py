"""bench.server_cpu.settle: the API rows' clock starts once the server's warm-up is over."""

from __future__ import annotations

from bench.server_cpu import settle


class _Fake:
    """A clock that sleep() advances, and a CPU counter fed from a list of per-window uses."""

    def __init__(self, uses: list[float]) -> None:
        self.t = 0.0
        self.cpu_s = 0.0
        self.uses = list(uses)
        self.windows = 0

    def sleep(self, s: float) -> None:
        self.t += s
        self.windows += 1
        self.cpu_s += self.uses.pop(0) if self.uses else 0.0

    def clock(self) -> float:
        return self.t

    def cpu(self) -> float:
        return self.cpu_s


def test_waits_until_one_window_is_quiet() -> None:
    fake = _Fake([0.5, 0.4, 0.3, 0.001])
    assert settle(fake.cpu, sleep=fake.sleep, clock=fake.clock)
    assert fake.windows == 4


def test_an_idle_server_costs_one_window() -> None:
    fake = _Fake([])
    assert settle(fake.cpu, sleep=fake.sleep, clock=fake.clock)
    assert fake.windows == 1


def test_gives_up_after_the_timeout() -> None:
    fake = _Fake([0.5] * 1000)
    assert not settle(fake.cpu, timeout_s=3.0, sleep=fake.sleep, clock=fake.clock)
    assert fake.windows == 6  # 0.5 s windows until 3 s have passed
