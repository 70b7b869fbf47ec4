"""The "local" hardware: calibration with the measurements stubbed, its cache, and the command line."""

import json

import pytest
import torch

from opcount.hardware import calibrate
from opcount.hardware.calibrate import CalibrationError, copy_bandwidth, local_hardware, matmul_flops, measure
from opcount.hardware.lookup import hardware

CPU = torch.device("cpu")


class Stub:
    """Fixed measurements that count how often they are asked for."""

    def __init__(self, flops: dict[torch.dtype, float], bandwidth: float) -> None:
        self.flops, self.bandwidth, self.calls = flops, bandwidth, 0

    def matmul(self, dtype: torch.dtype, device: torch.device) -> float:
        self.calls += 1
        return self.flops[dtype]

    def copy(self, device: torch.device) -> float:
        self.calls += 1
        return self.bandwidth


SLOW = Stub({torch.float32: 100e9, torch.bfloat16: 400e9}, 20e9)
FAST = Stub({torch.float32: 300e9, torch.bfloat16: 900e9}, 50e9)


@pytest.fixture(autouse=True)
def cache_in_tmp(tmp_path, monkeypatch):
    # Hermetic: never read or write the user's ~/.cache/opcount
    monkeypatch.setenv("OPCOUNT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_cpu_calibration_maps_measurements_to_peaks() -> None:
    hw = measure(CPU, matmul=SLOW.matmul, copy=SLOW.copy)
    assert hw.name == "local" and hw.units == ("vector",)
    assert dict(hw.peak["vector"]) == {"float32": 100e9, "bfloat16": 400e9}
    assert hw.bandwidth == 20e9
    assert hw.ridge("vector", "float32") == pytest.approx(100e9 / 20e9)
    assert "measured" in hw.description and torch.__version__ in hw.description


def test_measured_once_then_read_from_the_cache_until_recalibrated(cache_in_tmp) -> None:
    slow = Stub(SLOW.flops, SLOW.bandwidth)
    first = local_hardware("cpu", matmul=slow.matmul, copy=slow.copy)
    assert slow.calls == 3  # float32, bfloat16, the copy
    fast = Stub(FAST.flops, FAST.bandwidth)
    again = local_hardware("cpu", matmul=fast.matmul, copy=fast.copy)
    assert fast.calls == 0 and again == first
    fresh = local_hardware("cpu", recalibrate=True, matmul=fast.matmul, copy=fast.copy)
    assert fast.calls == 3 and fresh.bandwidth == 50e9 and fresh.peak["vector"]["float32"] == 300e9
    stored = json.loads((cache_in_tmp / calibrate.CACHE_FILE).read_text())
    (key,) = stored
    assert torch.__version__ in key and f"| {torch.get_num_threads()} thread" in key
    assert stored[key]["bandwidth"] == 50e9


def test_another_thread_count_is_another_machine() -> None:
    threads = torch.get_num_threads()
    stub = Stub(SLOW.flops, SLOW.bandwidth)
    try:
        torch.set_num_threads(1)
        local_hardware("cpu", matmul=stub.matmul, copy=stub.copy)
        torch.set_num_threads(2)
        local_hardware("cpu", matmul=stub.matmul, copy=stub.copy)
    finally:
        torch.set_num_threads(threads)
    assert stub.calls == 6


def test_a_damaged_cache_is_measured_again(cache_in_tmp) -> None:
    cache_in_tmp.mkdir(parents=True)
    (cache_in_tmp / calibrate.CACHE_FILE).write_text("{not json")
    stub = Stub(SLOW.flops, SLOW.bandwidth)
    assert local_hardware("cpu", matmul=stub.matmul, copy=stub.copy).bandwidth == 20e9
    key = calibrate.cache_key(CPU)
    (cache_in_tmp / calibrate.CACHE_FILE).write_text(json.dumps({key: {"name": "local", "bandwidth": -1}}))
    assert local_hardware("cpu", matmul=stub.matmul, copy=stub.copy).bandwidth == 20e9
    assert stub.calls == 6


def test_hardware_local_goes_through_the_calibration(monkeypatch) -> None:
    monkeypatch.setattr(calibrate, "matmul_flops", SLOW.matmul)
    monkeypatch.setattr(calibrate, "copy_bandwidth", SLOW.copy)
    assert hardware("local:cpu").bandwidth == 20e9
    monkeypatch.setattr(calibrate, "copy_bandwidth", FAST.copy)
    assert hardware("LOCAL:cpu").bandwidth == 20e9  # cached
    assert hardware("local:cpu", recalibrate=True).bandwidth == 50e9
    if not torch.cuda.is_available():
        assert hardware("local").bandwidth == 50e9  # no GPU: the CPU
        with pytest.raises(CalibrationError, match="no CUDA device"):
            hardware("local:cuda")
    with pytest.raises(CalibrationError, match="local:cpu or local:cuda"):
        hardware("local:tpu")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_calibration_separates_cuda_cores_and_tensor_cores() -> None:
    seen = []

    def matmul(dtype: torch.dtype, device: torch.device) -> float:
        seen.append((dtype, torch.backends.cuda.matmul.allow_tf32))
        return {torch.float32: 400e12 if seen[-1][1] else 50e12, torch.float16: 900e12, torch.bfloat16: 900e12}[dtype]

    hw = measure(torch.device("cuda"), matmul=matmul, copy=lambda device: 3e12)
    assert hw.peak["vector"]["float32"] == 50e12 and hw.peak["tensor"]["tf32"] == 400e12
    assert hw.peak["tensor"]["float16"] == 900e12 and hw.bandwidth == 3e12


def test_the_real_measurements_run_at_tiny_sizes() -> None:
    # No timing assertion: only that the measurement runs and gives a finite positive rate.
    flops = matmul_flops(torch.float32, CPU, target=1e-3, max_side=128, repeats=1)
    assert 0 < flops < float("inf")
    assert 0 < copy_bandwidth(CPU, nbytes=1 << 20, repeats=1) < float("inf")


def test_cli_profile_against_the_local_machine(monkeypatch, cache_in_tmp, capsys) -> None:
    from opcount.cli import main
    from opcount.roofline import roofline
    from tests.fixtures.report_models import tiny

    stub = Stub(SLOW.flops, SLOW.bandwidth)
    monkeypatch.setattr(calibrate, "matmul_flops", stub.matmul)
    monkeypatch.setattr(calibrate, "copy_bandwidth", stub.copy)
    argv = ["tests.fixtures.report_models:tiny", "--hardware", "local", "--profile", "--repeats", "1", "-q"]
    assert main([*argv, "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["hardware"] == "local" and stub.calls == 3
    model, x = tiny()
    expected = roofline(model, x, measure(CPU, matmul=SLOW.matmul, copy=SLOW.copy)).total_time
    assert data["total"]["predicted"] == pytest.approx(expected)
    assert main([*argv, "--recalibrate", "--format", "json"]) == 0
    assert stub.calls == 6  # measured again
    assert main(["tests.fixtures.report_models:tiny", "--hardware", "h100", "--recalibrate"]) == 2
    assert "--recalibrate applies to --hardware local" in capsys.readouterr().err


def test_a_slow_first_product_does_not_stop_the_search_at_a_tiny_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a busy machine one stalled run at n=128 used to end the search there, caching a peak
    about a thousand times too low: the search now starts at a size that measures the peak."""
    from opcount.hardware import calibrate

    monkeypatch.setattr(calibrate, "_run_times", lambda fn, device, repeats: [1.0] * repeats)  # every run "slow"
    flops = calibrate.matmul_flops(torch.float32, torch.device("cpu"), target=0.05)
    assert flops == 2 * calibrate.MIN_SIDE["cpu"] ** 3 / 1.0


def test_calibration_shows_its_spread_and_date(cache_in_tmp, monkeypatch, capsys) -> None:
    # Two runs of one machine saw 34.6 and 53.6 GB/s: the best is used, and the spread is shown.
    import re

    from opcount.cli import main

    copies = calibrate.Rate([34.6e9, 53.6e9, 41.0e9])
    assert copies == 53.6e9 and calibrate.spread(copies) == (34.6e9, 41.0e9, 53.6e9)
    assert calibrate.spread(20e9) == (20e9, 20e9, 20e9)  # a plain number, as a stub gives
    monkeypatch.setattr(calibrate, "matmul_flops", SLOW.matmul)
    monkeypatch.setattr(calibrate, "copy_bandwidth", lambda device: copies)
    hw = local_hardware("cpu")
    assert hw.bandwidth == 53.6e9
    assert re.search(r"measured \d{4}-\d\d-\d\d \d\d:\d\d UTC", hw.description)
    assert "copy bandwidth 53.6 GB/s (best of 3; min / median / max 34.6G / 41G / 53.6 GB/s)" in hw.description
    (stored,) = json.loads((cache_in_tmp / calibrate.CACHE_FILE).read_text()).values()
    assert stored["description"] == hw.description  # the cache keeps the date and the spread

    import logging

    logging.disable(logging.NOTSET)  # tests/conftest.py silences opcount's log; this test reads it
    argv = ["tests.fixtures.report_models:tiny", "--hardware", "local:cpu", "-q"]
    assert main(argv) == 0
    assert capsys.readouterr().err == ""  # -q: nothing
    assert main(argv[:-1]) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("opcount: note: ")]
    assert notes == [f"opcount: note: --hardware local:cpu: {hw.description} (cached; --recalibrate measures again)"]
