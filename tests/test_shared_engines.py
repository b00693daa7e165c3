"""Models shared by several pipelines: one call of a method at a time, different methods
side by side, attributes read and written through."""
from __future__ import annotations

import threading
import time

from stream.job.shared_models import Shared, exclusive


class Model:
    """Records how many calls of each method run at once."""

    name = "model"

    def __init__(self) -> None:
        self.calls = 0
        self.running: dict[str, int] = {"forward": 0, "paste": 0}
        self.most: dict[str, int] = {"forward": 0, "paste": 0}
        self.overlap = False  # forward and paste ran at the same time
        self._lock = threading.Lock()

    def _enter(self, name: str) -> None:
        with self._lock:
            self.running[name] += 1
            self.most[name] = max(self.most[name], self.running[name])
            if self.running["forward"] and self.running["paste"]:
                self.overlap = True

    def _leave(self, name: str) -> None:
        with self._lock:
            self.running[name] -= 1

    def forward(self, x: int) -> int:
        self._enter("forward")
        time.sleep(0.02)
        self.calls += 1
        self._leave("forward")
        return x * 2

    def paste(self) -> None:
        self._enter("paste")
        time.sleep(0.02)
        self._leave("paste")


def test_one_call_per_method_at_a_time_and_methods_overlap() -> None:
    model = Model()
    shared = Shared(model)
    results: list[int] = []

    def worker(i: int) -> None:
        for _ in range(3):
            results.append(shared.forward(i))
            shared.paste()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == sorted([2 * i for i in range(4)] * 3)
    assert model.most == {"forward": 1, "paste": 1}  # never two of a kind at once
    assert model.overlap  # but a forward and a paste did run side by side
    assert shared.calls == 12 and shared.name == "model"  # attributes read through
    shared.threshold = 0.5  # and written through
    assert model.threshold == 0.5  # type: ignore[attr-defined]


def test_exclusive_holds_a_method_of_a_shared_model() -> None:
    model = Model()
    shared = Shared(model)
    done = threading.Event()
    with exclusive(shared, "forward"):
        t = threading.Thread(target=lambda: (shared.forward(1), done.set()))
        t.start()
        time.sleep(0.1)
        assert not done.is_set()  # waits for the holder
    t.join(2.0)
    assert done.is_set()
    with exclusive(model, "forward"):  # a model that is not shared: nothing to hold
        assert model.forward(2) == 4
