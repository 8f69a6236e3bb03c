"""Device leases across real processes, as xdist workers hold them, against a fake
cluster: a choice and its reservation are one step, so no device is ever reserved twice,
and the tests running together never hold more device units than the pool has."""

import json
import multiprocessing
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from fixtures.leases import DeviceLeases

WORKERS = 6
ROUNDS = 5
HOLD_SECONDS = 0.05


@dataclass(frozen=True)
class FakeDevice:
    pool: str
    name: str


# The worst fake cluster: it never shows a reservation as allocated, so only the leases
# keep two workers apart.
CLUSTER = [FakeDevice(node, f"nvme-{i}") for node in ("node01", "node02") for i in range(2)]


def _log(path: Path, record: dict) -> None:
    with path.open("a") as out:
        out.write(json.dumps(record) + "\n")


def _reserving_worker(folder: str, log: str) -> None:
    leases = DeviceLeases(Path(folder), units=len(CLUSTER))
    for _ in range(ROUNDS):
        with ExitStack() as stack:
            device = leases.reserve(lambda: CLUSTER, stack, "a device", wait=True)
            start = time.monotonic()
            time.sleep(HOLD_SECONDS)
            _log(Path(log), {"device": f"{device.pool}/{device.name}", "start": start,
                             "end": time.monotonic()})


def _unit_worker(folder: str, log: str, count: int) -> None:
    leases = DeviceLeases(Path(folder), units=len(CLUSTER))
    for _ in range(ROUNDS):
        with leases.device_units(count):
            start = time.monotonic()
            time.sleep(HOLD_SECONDS)
            _log(Path(log), {"units": count, "start": start, "end": time.monotonic()})


def _run(target, *args) -> None:
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=target, args=args) for _ in range(WORKERS)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
        assert worker.exitcode == 0


def _records(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_concurrent_workers_never_reserve_one_device_twice(tmp_path):
    log = tmp_path / "holds.jsonl"
    _run(_reserving_worker, str(tmp_path / "leases"), str(log))
    holds = _records(log)
    assert len(holds) == WORKERS * ROUNDS
    for a in holds:
        for b in holds:
            if a is not b and a["device"] == b["device"]:
                assert a["end"] <= b["start"] or b["end"] <= a["start"], (a, b)
    assert len({h["device"] for h in holds}) > 1  # the workers used the pool, not one


def test_tests_running_together_never_hold_more_units_than_the_pool_has(tmp_path):
    log = tmp_path / "units.jsonl"
    _run(_unit_worker, str(tmp_path / "leases"), str(log), 2)
    holds = _records(log)
    for moment in (h["start"] for h in holds):
        held = sum(h["units"] for h in holds if h["start"] <= moment < h["end"])
        assert held <= len(CLUSTER), f"{held} units held at once"


def test_alone_a_reservation_that_finds_nothing_free_says_so_at_once(tmp_path):
    leases = DeviceLeases(tmp_path, units=1)
    with ExitStack() as first, ExitStack() as second:
        assert leases.reserve(lambda: CLUSTER[:1], first, "a device", wait=False) == CLUSTER[0]
        assert leases.reserve(lambda: CLUSTER[:1], second, "a device", wait=False) is None


SHARED_ROUNDS = 40


def _shared_pool_worker(folder: str, log: str) -> None:
    leases = DeviceLeases(Path(folder), units=len(CLUSTER))
    for _ in range(SHARED_ROUNDS):
        with leases.pool(exclusive=False):
            start = time.monotonic()
            time.sleep(HOLD_SECONDS * 2)
            _log(Path(log), {"kind": "shared", "start": start, "end": time.monotonic()})


def _exclusive_pool_worker(folder: str, log: str) -> None:
    time.sleep(0.3)  # the shared workers hold the pool back to back by now
    leases = DeviceLeases(Path(folder), units=len(CLUSTER))
    with leases.pool(exclusive=True):
        start = time.monotonic()
        time.sleep(HOLD_SECONDS)
        _log(Path(log), {"kind": "exclusive", "start": start, "end": time.monotonic()})


def test_an_exclusive_waiter_is_not_starved_by_shared_holders_that_overlap(tmp_path):
    folder, log = str(tmp_path / "leases"), tmp_path / "pool.jsonl"
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_shared_pool_worker, args=(folder, str(log)))
               for _ in range(3)]
    workers.append(context.Process(target=_exclusive_pool_worker, args=(folder, str(log))))
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
        assert worker.exitcode == 0
    holds = _records(log)
    [exclusive] = [h for h in holds if h["kind"] == "exclusive"]
    shared = [h for h in holds if h["kind"] == "shared"]
    for hold in shared:
        assert hold["end"] <= exclusive["start"] or exclusive["end"] <= hold["start"]
    # It went before the shared takers that came after it, not after all of them.
    assert any(hold["start"] >= exclusive["end"] for hold in shared)
