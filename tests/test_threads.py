"""The torch thread count on a CPU: fixed when set, else the cores other processes leave free."""

from __future__ import annotations

import time

import pytest
import torch

from toolformer.lm import threads as th


@pytest.fixture(autouse=True)
def _restore_threads():
    before = torch.get_num_threads()
    yield
    th._FOLLOWER = None
    torch.set_num_threads(before)


def write_stat(path, busy_ticks: list[int], idle_ticks: int = 1000) -> None:
    """A /proc/stat with one line per CPU: user time ``busy_ticks[i]``, the rest idle."""
    total = sum(busy_ticks)
    lines = [f"cpu  {total} 0 0 {idle_ticks * len(busy_ticks)} 0 0 0 0 0 0"]
    lines += [f"cpu{i} {b} 0 0 {idle_ticks} 0 0 0 0 0 0" for i, b in enumerate(busy_ticks)]
    path.write_text("\n".join(lines + ["intr 0", "ctxt 0"]) + "\n")


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(("cores", "others", "want"), [
    (2, 0.0, 2), (2, 0.3, 2), (2, 0.7, 1), (2, 1.0, 1), (2, 1.9, 1), (8, 2.1, 6), (1, 1.0, 1), (4, 9.0, 1),
])
def test_threads_for_leaves_the_busy_cores_to_the_others(cores, others, want):
    assert th.threads_for(cores, others) == want


def test_busy_seconds_counts_only_the_given_cpus(tmp_path):
    stat = tmp_path / "stat"
    write_stat(stat, [100, 300, 500])
    tick = th.os.sysconf("SC_CLK_TCK")
    assert th.busy_seconds([1], stat) == pytest.approx(300 / tick)
    assert th.busy_seconds([0, 2], stat) == pytest.approx(600 / tick)
    assert th.busy_seconds([7], stat) is None
    assert th.busy_seconds([0], tmp_path / "missing") is None


def test_follower_lowers_the_count_while_another_process_runs_and_restores_it(tmp_path):
    stat, clock, own = tmp_path / "stat", Clock(), Clock()
    tick = th.os.sysconf("SC_CLK_TCK")
    write_stat(stat, [0, 0])
    torch.set_num_threads(2)
    f = th.LoadFollower([0, 1], every=1.0, stat=stat, clock=clock, own_cpu=own)
    assert f.tick() == 2  # no time has passed: nothing read
    # One second: this process used 2 CPU seconds, nobody else anything.
    clock.now, own.now = 1.0, 2.0
    write_stat(stat, [tick, tick])
    assert f.tick() == 2 and torch.get_num_threads() == 2
    # Next second: both cores busy, of which this process only one: another process holds a core.
    clock.now, own.now = 2.0, 3.0
    write_stat(stat, [2 * tick, 2 * tick])
    assert f.tick() == 1 and torch.get_num_threads() == 1
    # Half a second later: not read again yet.
    clock.now = 2.5
    write_stat(stat, [2 * tick, 3 * tick])
    assert f.tick() == 1
    # The other process ended: in the last second only this one's half a core was busy.
    clock.now, own.now = 3.0, 3.5
    write_stat(stat, [2 * tick + tick // 2, 2 * tick])
    assert f.tick() == 2 and torch.get_num_threads() == 2
    assert f.changes == 2


def test_a_set_count_is_kept_and_a_launch_shares_the_cores():
    assert th.set_threads(3) == 3 and torch.get_num_threads() == 3
    assert th._FOLLOWER is None
    cores = len(th.usable_cores())
    assert th.set_threads(0, share=2) == max(1, cores // 2)
    assert th._FOLLOWER is None  # each process of a launch keeps its share


def test_alone_on_several_cores_the_count_follows_the_load(monkeypatch):
    monkeypatch.setattr(th, "usable_cores", lambda: [0, 1])
    monkeypatch.setattr(th, "busy_seconds", lambda cpus, stat=th.PROC_STAT: 5.0)
    assert th.set_threads(0, share=1) == 2
    assert th._FOLLOWER is not None
    monkeypatch.setattr(th, "busy_seconds", lambda cpus, stat=th.PROC_STAT: None)  # not Linux
    th.set_threads(0, share=1)
    assert th._FOLLOWER is None


def test_the_model_hook_ticks_the_follower_on_each_forward(tiny_model_dir):
    from toolformer.lm.modeling import load_model

    class Counting:
        calls = 0

        def tick(self):
            Counting.calls += 1
            return 1

    model = load_model(str(tiny_model_dir), torch.device("cpu"), torch.float32)
    th.follow_load(model)  # a second time: still one hook
    th._FOLLOWER = Counting()  # type: ignore[assignment]
    with torch.no_grad():
        model(input_ids=torch.tensor([[1, 2, 3]]))
        model(input_ids=torch.tensor([[1, 2, 3]]))
    assert Counting.calls == 2


@pytest.mark.slow
def test_the_contention_benchmark_reports_ratios_per_policy(monkeypatch):
    from toolformer.bench import contention as bc

    monkeypatch.setattr(bc, "SPIN", "import time; time.sleep(30)")  # a stand-in that costs no core
    model = torch.nn.Linear(2, 2)
    calls = []
    out = bc.measure_stage(model, lambda: calls.append(time.sleep(0.05)), ["follow", "fixed"], repeats=1)
    assert len(calls) == 1 + 2 * 2 + 1  # warm-up, idle and busy per policy, idle on one thread
    for policy in ("follow", "fixed"):
        row = out[policy]
        assert row["idle_s"] >= 0 and row["busy_s"] >= 0 and row["busy_over_idle"] > 0
    assert "idle_follow_over_fixed" in out
    assert out["one_thread_idle_s"] >= 0.05 and 0.5 < out["one_core_bound"] < 2  # a sleep: the same on any thread
