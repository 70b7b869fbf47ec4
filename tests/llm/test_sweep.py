"""Sweeps from a few traces (opcount.llm.sweep.points, opcount.llm.sweep.symbolic) against the reference: a
trace of every point (``CausalLM.phase`` / ``generation``, the path a single point takes).

Each sweep holds points that are not among the fitted ones (``traced`` False): their FLOPs,
memory and both times (the fused or eager kernels' estimate and the speed of light, with what
binds it) must equal the traced phase's to the last digit. The unit
tests of the fit use closed forms worked by hand.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from types import SimpleNamespace
from typing import Any

import pytest

transformers = pytest.importorskip("transformers")

from opcount.cli import main  # noqa: E402
from opcount.errors import OpcountError  # noqa: E402
from opcount.ir import Const, OpCall, TensorSpec  # noqa: E402
from opcount.llm.causal_lm import CausalLM  # noqa: E402
from opcount.llm.generation import generation  # noqa: E402
from opcount.llm.phases import PhaseRequest  # noqa: E402
from opcount.llm.sweep import points as sweep_module  # noqa: E402
from opcount.llm.sweep import prices as sweep_prices  # noqa: E402
from opcount.llm.sweep.figures import GenerationValues, PhaseValues  # noqa: E402
from opcount.llm.sweep.points import generation_points, phase_points, structure_of  # noqa: E402
from opcount.llm.sweep.symbolic import (  # noqa: E402
    FitError,
    Poly,
    Structure,
    Template,
    affine_design,
    corner_design,
    fit,
    monomials,
    region,
    verify,
)
from tests.llm.test_llm import GEOMETRY, llama  # noqa: E402

HW = "h100-sxm"


def figures(p: PhaseValues) -> tuple[Any, ...]:
    assert p.time is not None and p.time_bound is not None  # with hardware, both times
    return (p.flops, p.memory, p.kernels, p.time, p.time_bound, p.limited_by, p.tokens_per_s, p.tokens_per_s_bound)


def generation_figures(g: GenerationValues) -> tuple[Any, ...]:
    return (
        g.flops, g.memory, g.time, g.time_bound, g.time_to_first_token, g.time_to_first_token_bound,
        g.time_per_output_token, g.time_per_output_token_bound, g.tokens_per_s, g.tokens_per_s_bound,
    )  # fmt: skip


def check_phase(
    llm: CausalLM, phase: str, points: list[tuple[int, int, int]], rebuilt: int | None = None, **options: Any
) -> list[PhaseValues]:
    got = phase_points(llm, phase, points, hardware=HW, **options)
    for (batch, tokens, cache), p in zip(points, got, strict=True):
        want = PhaseValues.of(llm.phase(phase, seq_len=tokens, kv_len=cache, batch=batch, hardware=HW, **options))
        assert figures(p) == figures(want), (batch, tokens, cache, p.traced)
    # most points were rebuilt, not traced (fewer where many regions hold a point or two)
    assert sum(not p.traced for p in got) >= (len(points) // 2 if rebuilt is None else rebuilt)
    return got


@pytest.fixture(scope="module")
def dense() -> CausalLM:
    return CausalLM(llama())


@pytest.fixture(scope="module")
def mixtral() -> CausalLM:
    return CausalLM(transformers.MixtralConfig(**GEOMETRY, num_local_experts=4, num_experts_per_tok=2))


@pytest.mark.parametrize("kernels", ["fused", "eager"])
def test_dense_decode_grid(dense: CausalLM, kernels: str) -> None:
    got = check_phase(dense, "decode", [(b, 1, k) for b in (1, 2, 3, 7) for k in (1, 9, 33, 100)], kernels=kernels)
    assert {p.kernels for p in got} == {kernels}


def test_dense_prefill_grid_and_conventions(dense: CausalLM) -> None:
    points = [(b, t, 0) for b in (1, 2, 5) for t in (2, 7, 16, 40)]
    check_phase(dense, "prefill", points, flops_per_mac=2, preset="fvcore")
    check_phase(dense, "prefill", points, kernels="eager")


def test_quantized_weights(dense: CausalLM) -> None:
    from opcount.llm.precision.dtypes import Precision

    llm = CausalLM(llama(), Precision("int4", "bfloat16", "float8_e4m3fn"))
    check_phase(llm, "decode", [(b, 1, k) for b in (1, 4, 16) for k in (3, 30, 300)])


def test_mixtral_loads_are_integer_divided(mixtral: CausalLM) -> None:
    # 4 experts, 2 per token: B*T*2 routed tokens; below 4 some experts get none and do not run,
    # above it expert e gets B*T*2 // 4 (+1 while e < B*T*2 % 4): a region per residue
    assert structure_of(mixtral) == Structure((), ((2, 4),))
    points = [(b, 1, k) for b in (1, 2, 3, 4, 5, 6, 8, 9, 10, 13) for k in (4, 50)]
    check_phase(mixtral, "decode", points)
    check_phase(mixtral, "decode", points, kernels="eager")
    check_phase(mixtral, "prefill", [(b, t, 0) for b in (1, 2, 3) for t in (3, 5, 6, 8, 11)], rebuilt=5)


def test_sliding_window_regions() -> None:
    # min(L + T, W): a window of 64 splits the points at 64 positions
    s = Structure((64,), ())
    assert region(s, (1, 1, 63)) == region(s, (4, 1, 10))
    assert region(s, (1, 1, 63)) != region(s, (1, 1, 64))


def test_mistral_with_sliding_window() -> None:
    llm = CausalLM(transformers.MistralConfig(**GEOMETRY, sliding_window=64))
    assert structure_of(llm).windows == (64,)
    # the cache holds min(L + T, 64) positions: points below, at and past the window
    check_phase(llm, "decode", [(b, 1, k) for b in (1, 2, 5) for k in (2, 11, 30, 62, 63, 64, 70, 100, 200)])
    check_phase(llm, "prefill", [(b, t, 0) for b in (1, 3) for t in (5, 20, 64, 65, 90, 150)], rebuilt=2)
    check_phase(llm, "decode", [(b, 1, k) for b in (1, 2, 5) for k in (2, 30, 63, 64, 100)], kernels="eager")


def test_generations(dense: CausalLM, mixtral: CausalLM) -> None:
    points = [(b, p, g) for b in (1, 3) for p in (5, 12) for g in (0, 1, 2, 9, 40, 80)]
    sliding = CausalLM(transformers.MistralConfig(**GEOMETRY, sliding_window=32))  # runs: filling, then full
    for llm, kernels in ((dense, "fused"), (mixtral, "fused"), (sliding, "fused"), (sliding, "eager")):
        got = generation_points(llm, points, hardware=HW, kernels=kernels)
        for (batch, prompt, gen), g in zip(points, got, strict=True):
            want = GenerationValues.of(generation(llm, prompt, gen, batch=batch, hardware=HW, kernels=kernels))
            assert g.time is not None and g.time_bound is not None
            assert generation_figures(g) == generation_figures(want), (kernels, batch, prompt, gen)


def test_latent_attention_decode_and_prefill() -> None:
    # DeepSeek-V3's multi-head latent attention: decode absorbs W_UK and W_UV (einsums), prefill does not
    from tests.llm.test_caches import deepseek_v3

    config = deepseek_v3()  # every layer dense; its config's experts still cut regions: 4 of them, 2 a token
    config.n_routed_experts, config.num_experts_per_tok = 4, 2
    llm = CausalLM(config)
    assert structure_of(llm).experts == ((2, 4),)
    # B*T*2 routed tokens: a multiple of 4 for an even B*T, one region
    check_phase(llm, "decode", [(b, 1, k) for b in (2, 4, 8) for k in (3, 20, 70)])
    check_phase(llm, "decode", [(b, 1, k) for b in (2, 6) for k in (3, 20, 70)], kernels="eager")
    check_phase(llm, "prefill", [(b, t, 0) for b in (1, 2, 4) for t in (4, 10, 30)])


def test_priced_by_arithmetic(dense: CausalLM, monkeypatch: pytest.MonkeyPatch) -> None:
    # with hardware, the points of a region are priced from four traces and the distinct records
    # once: never a point's whole record list rebuilt, never a trace per point
    traces: list[tuple[int, int, int]] = []
    original = CausalLM._trace

    def counted(self: CausalLM, request: PhaseRequest, *args: Any, **kwargs: Any) -> Any:
        traces.append((request.batch, request.new_tokens, request.kv_len))
        return original(self, request, *args, **kwargs)

    monkeypatch.setattr(CausalLM, "_trace", counted)
    monkeypatch.setattr(Template, "at", lambda *a: pytest.fail("a point rebuilt in full"))
    points = [(b, 1, k) for b in range(1, 9) for k in range(5, 100, 7)]  # 8 x 14 = 112 points
    got = phase_points(dense, "decode", points, hardware=HW)
    # the first point, a step in batch, a step in cache length, the check point
    assert traces == [(1, 1, 5), (8, 1, 5), (1, 1, 96), (2, 1, 12)]
    assert sum(p.traced for p in got) == 1
    for i in (1, 57, 111):  # spot checks against a trace (every point is checked in the grids above)
        b, _, k = points[i]
        want = PhaseValues.of(dense.phase("decode", kv_len=k, batch=b, hardware=HW))
        assert figures(got[i]) == figures(want)


def test_kernels_grouped_differently_at_the_check_point_trace_every_point(
    dense: CausalLM, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[int] = []
    original = sweep_prices.group_kernels

    def shifting(*args: Any, **kwargs: Any) -> Any:  # the second layout (the check trace's) differs
        calls.append(1)
        found = original(*args, **kwargs)
        return found if len(calls) == 1 else dataclasses.replace(found, groups=found.groups[:-1])

    monkeypatch.setattr(sweep_prices, "group_kernels", shifting)
    points = [(b, 1, k) for b in (1, 2, 3) for k in (3, 5, 8)]
    with caplog.at_level(logging.INFO, logger="opcount.llm.sweep.points"):
        got = phase_points(dense, "decode", points, hardware=HW)
    assert all(p.traced for p in got)
    assert "the kernels group the operators differently at the check point" in caplog.text


def test_invalid_point_refused_before_any_trace(dense: CausalLM, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(CausalLM, "_trace", lambda *a: pytest.fail("traced"))
    with pytest.raises(OpcountError, match="batch must be an integer >= 1"):
        phase_points(dense, "decode", [(1, 1, 5), (0, 1, 5)])


def test_refused_fit_traces_every_point(
    dense: CausalLM, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def refuse(*args: Any) -> Any:
        raise FitError("refused for the test")

    monkeypatch.setattr(sweep_module, "fit", refuse)
    points = [(b, 1, k) for b in (1, 2) for k in (3, 5, 8)]
    with caplog.at_level(logging.INFO, logger="opcount.llm.sweep.points"):
        got = phase_points(dense, "decode", points, hardware=HW)
    assert all(p.traced for p in got)
    assert "tracing each of 6 points instead of fitting them: refused for the test" in caplog.text


# ------------------------------------------------------------------------------------------------
# The fit, on records made by hand
# ------------------------------------------------------------------------------------------------
def records(point: tuple[int, int, int], *, extra: bool = False) -> SimpleNamespace:
    b, t, cache = point
    x = TensorSpec((b, t, 8), "bfloat16", id=0)
    flat = TensorSpec((b * t, 8), "bfloat16", id=1)  # a product: B*T
    kv = TensorSpec((b, 2, cache + t, 4), "bfloat16", param="kv_cache.0.keys", id=2)
    calls = [
        OpCall("aten::view", (x, Const((b * t, 8))), (flat,)),
        OpCall("aten::mul", (kv, Const(2.0)), (TensorSpec(kv.shape, "bfloat16", id=3),)),
    ]
    if extra:
        calls.append(OpCall("aten::neg", (x,), (x,)))
    return SimpleNamespace(calls=calls)


def test_affine_fit_then_corners() -> None:
    points = [(b, 1, k) for b in (1, 4, 6) for k in (10, 20, 30)]
    swept, design = affine_design(points)
    assert swept == [0, 2] and design == [(1, 1, 10), (6, 1, 10), (1, 1, 30)]  # the first point, a step to each largest
    template = fit([records(p) for p in design], design, monomials(swept, False))
    # T = 1 here: B*T is B, affine; the cache axis L + T is affine too
    verify(template, records((4, 1, 20)), (4, 1, 20))  # type: ignore[arg-type]
    assert template.at((100, 1, 1000))[1].inputs[0] == TensorSpec((100, 2, 1001, 4), "bfloat16")

    prefill = [(b, t, 0) for b in (1, 4, 6) for t in (2, 8, 9)]
    swept, design = affine_design(prefill)
    affine = fit([records(p) for p in design], design, monomials(swept, False))
    # B*T at (1, 2), (6, 2), (1, 9): 2, 12, 9, so the affine fit is -2 + 2*B + T: 18 at (6, 8), not 48
    with pytest.raises(FitError, match="not multilinear"):
        verify(affine, records((6, 8, 0)), (6, 8, 0))  # type: ignore[arg-type]
    corners = corner_design(prefill, swept)
    assert corners == [(1, 2, 0), (1, 9, 0), (6, 2, 0), (6, 9, 0)]
    exact = fit([records(p) for p in corners], corners, monomials(swept, True))
    verify(exact, records((4, 8, 0)), (4, 8, 0))  # type: ignore[arg-type]
    assert exact.polys[0][3] == Poly((((0, 1), 1),))  # the view's B*T: coefficient 1 on B*T, nothing else


def test_structure_change_is_refused() -> None:
    design = [(1, 1, 10), (4, 1, 10)]
    with pytest.raises(FitError, match="runs 2 operators at batch 1, tokens 1, cache 10 and 3"):
        fit([records(design[0]), records(design[1], extra=True)], design, monomials([0], False))


def test_poly_must_be_whole() -> None:
    half = Poly((((0,), 1),), 2)  # B / 2
    assert half.at((6, 1, 0)) == 3
    with pytest.raises(FitError, match="not a whole number"):
        half.at((5, 1, 0))


# ------------------------------------------------------------------------------------------------
# The command line
# ------------------------------------------------------------------------------------------------
def _cli_json(capsys: pytest.CaptureFixture[str], args: list[str]) -> Any:
    status = main([*args, "--format", "json"])
    out, err = capsys.readouterr()
    assert status == 0, err
    return json.loads(out)


@pytest.mark.parametrize(
    ("phase", "sweeps", "kernels"),
    [
        (["--phase", "decode"], ["batch=1,2,5", "kv-len=4,10,30"], "fused"),
        (["--phase", "decode"], ["batch=1,3", "kv-len=4,30"], "eager"),
        (["--gen-len", "6"], ["batch=1,2", "seq-len=3,9"], "fused"),
    ],
)
def test_cli_sweep_rows_equal_each_point_run_alone(
    capsys: pytest.CaptureFixture[str], phase: list[str], sweeps: list[str], kernels: str
) -> None:
    tiny = [f"{k}={v}" for k, v in GEOMETRY.items()]
    args = ["hf:LlamaConfig", *(a for kv in tiny for a in ("--hf-config", kv)), *phase]
    args += ["--hardware", HW, "--kernels", kernels]
    rows = _cli_json(capsys, [*args, *(a for s in sweeps for a in ("--sweep", s))])["points"]
    assert len(rows) == 4 if len(sweeps[0].split(",")) == 2 else len(rows) == 9
    flags = {"batch": "--batch", "kv_len": "--kv-len", "seq_len": "--seq-len"}
    for row in rows:
        swept = [a for key in ("batch", "kv_len", "seq_len") if key in row for a in (flags[key], str(row[key]))]
        alone = _cli_json(capsys, [*args, *swept])["llm"]
        # a point run alone is judged against the device's memory; a fitted sweep's points are not (deploy.md)
        assert alone["memory"].pop("fits") is True
        for key in ("per_device", "capacity", "gpu_memory_utilization", "max_batched_tokens"):
            del alone["memory"][key]
        assert {k: v for k, v in row.items() if k != "model"} == {
            k: v for k, v in alone.items() if k not in ("model", "parameters")
        }
        assert row["kernels"] == kernels and row["time"] is not None and row["time_bound"] is not None


def test_cli_fits_a_sweep_with_hardware(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    traces: list[int] = []
    original = CausalLM._trace

    def counted(self: CausalLM, *args: Any, **kwargs: Any) -> Any:
        traces.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(CausalLM, "_trace", counted)
    tiny = [a for k, v in GEOMETRY.items() for a in ("--hf-config", f"{k}={v}")]
    args = ["hf:LlamaConfig", *tiny, "--phase", "decode", "--hardware", HW, "--sweep", "batch=1,2,3,4"]
    rows = _cli_json(capsys, [*args, "--sweep", "kv-len=4,10,30,50"])["points"]
    assert len(rows) == 16 and all(r["time"] is not None for r in rows)
    assert len(traces) == 4  # the first point, a step in batch, one in cache length, the check: not 16
