"""A local config is a model: ``hf:path/config.json`` or ``hf:MODEL_DIR`` (a downloaded model's
folder: its config.json is read, never its weights), no network. Files are written in tmp_path.

Closed form (tests/llm/test_llm.py's notation): one decode token through Llama's linear layers
costs n x (2 d^2 + 2 d g e + 3 d f) + d V multiply-adds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

transformers = pytest.importorskip("transformers")

from opcount.cli import main  # noqa: E402
from opcount.errors import OpcountValueError  # noqa: E402
from opcount.llm.models.local_config import read_config  # noqa: E402

pytestmark = pytest.mark.smoke

D, F, N, H, G, V = 256, 512, 2, 8, 2, 1000
E = D // H
LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": D,
    "intermediate_size": F,
    "num_hidden_layers": N,
    "num_attention_heads": H,
    "num_key_value_heads": G,
    "vocab_size": V,
}
# a value the config's constructor refuses: 5.x validates heads against the width, 4.x a problem type
INVALID = {"num_attention_heads": 7} if int(transformers.__version__.split(".")[0]) >= 5 else {"problem_type": "x"}
DECODE_LINEAR = N * (2 * D * D + 2 * D * G * E + 3 * D * F) + D * V


def write(folder: Path, data: object, name: str = "config.json") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return path


def decode_linear(capsys: pytest.CaptureFixture[str], spec: str, *flags: str) -> int:
    status = main([spec, "--phase", "decode", "--kv-len", "4", "--format", "json", *flags])
    out, err = capsys.readouterr()
    assert status == 0, err
    return sum(r["flops"] for r in json.loads(out)["operators"] if r["module"] == "." and r["operator"] == "linear")


def test_a_config_file_and_a_model_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path / "llama", LLAMA)
    write(tmp_path / "llama", "not read", "model.safetensors")  # weights beside it are never opened
    assert decode_linear(capsys, f"hf:{path}") == DECODE_LINEAR
    assert decode_linear(capsys, f"hf:{path.parent}") == DECODE_LINEAR


def test_hf_config_overrides_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, LLAMA)
    # one layer: n = 1 in the closed form
    one = 1 * (2 * D * D + 2 * D * G * E + 3 * D * F) + D * V
    assert decode_linear(capsys, f"hf:{path}", "--hf-config", "num_hidden_layers=1") == one


def test_the_whole_model_without_llm_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, LLAMA)
    assert main([f"hf:{path}", "--seq-len", "8", "--preset", "macs", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["model"] == "LlamaForCausalLM"
    # 8 tokens through the linear layers and the head, plus attention's 2 x h x 8 x 8 x e, plus the
    # rotary angles' matmul on transformers 4.x (8 x e/2), elementwise on 5.x
    rotary = 8 * E // 2 if int(transformers.__version__.split(".")[0]) < 5 else 0
    assert out["total"]["flops"] == 8 * DECODE_LINEAR + N * 2 * H * 8 * 8 * E + rotary


def test_architectures_pick_the_class_without_model_type(tmp_path: Path) -> None:
    data = {k: v for k, v in LLAMA.items() if k != "model_type"}
    assert type(read_config(write(tmp_path, data))).__name__ == "LlamaConfig"


def test_a_multimodal_config_gives_its_text_decoder(tmp_path: Path) -> None:
    text = {k: v for k, v in LLAMA.items() if k not in ("architectures", "model_type")}
    data = {
        "model_type": "mistral3",
        "architectures": ["Mistral3ForConditionalGeneration"],
        "text_config": {"model_type": "mistral", **text},
    }
    config = read_config(write(tmp_path, data))
    assert type(config).__name__ == "MistralConfig"
    assert config.num_hidden_layers == N and config.hidden_size == D


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such file"),
        ("{", "not valid JSON: Expecting property name enclosed in double quotes at line 1 column 2"),
        ("[1, 2]", "a config is a JSON object, got list"),
        ({"model_type": "no-such-model"}, "unknown model_type 'no-such-model'"),
        ({"hidden_size": 8}, "no model_type or architectures: not a transformers config"),
        ({"model_type": "vit"}, "transformers has no causal LM for ViTConfig"),
        ({**LLAMA, **INVALID}, "invalid config"),
    ],
)
def test_clear_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: object, message: str) -> None:
    path = tmp_path / "config.json" if content is None else write(tmp_path, content)
    with pytest.raises(OpcountValueError, match=message):
        read_config(path)
    assert main([f"hf:{path}", "--phase", "decode"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("opcount: error: ") and message.split(":")[0] in err[0]


def test_a_folder_without_a_config(tmp_path: Path) -> None:
    with pytest.raises(OpcountValueError, match=f"no config.json in {tmp_path}"):
        read_config(tmp_path)
