"""Fine-tuning: warm start from the serving model, deterministic, CUDA when present, JSON results."""

from __future__ import annotations

import json

import torch

from ktstream.finetune.finetune import fine_tune

from ktstream.finetune import finetune as finetune_module
from ktstream.finetune.finetune import autocast_mode
from ktstream.finetune.windows import build_windows
from ktstream.training.trainer import resolve_device
from tests.finetune.conftest import TINY_DKT, tiny_finetune


def test_same_seed_same_data_gives_bit_identical_weights(stream):
    recs, C, H = stream
    data = build_windows(recs, C, H)
    a = fine_tune(data, cfg=tiny_finetune(), family="dkt", model_kwargs=TINY_DKT)
    b = fine_tune(data, cfg=tiny_finetune(), family="dkt", model_kwargs=TINY_DKT)
    assert all(torch.equal(x, y) for x, y in zip(a.model.state_dict().values(), b.model.state_dict().values()))
    c = fine_tune(data, cfg=tiny_finetune(seed=1), family="dkt", model_kwargs=TINY_DKT)
    assert not all(torch.equal(x, y) for x, y in zip(a.model.state_dict().values(), c.model.state_dict().values()))


def test_warm_start_extends_the_serving_model_and_leaves_it_untouched(stream):
    recs, C, H = stream
    early = build_windows(recs, C - H, H)  # an older serving model: cutoff one horizon earlier
    serving = fine_tune(early, cfg=tiny_finetune(), family="dkt", model_kwargs=TINY_DKT)
    snapshot = {k: v.clone() for k, v in serving.model.state_dict().items()}
    data = build_windows(recs, C, H, base=(serving.items, serving.concepts))
    assert data.items.ids[: len(serving.items.ids)] == serving.items.ids
    result = fine_tune(data, base=serving.model, cfg=tiny_finetune(epochs=1, lr=0.0))
    assert result.warm_start["items"] == [len(serving.items), len(data.items)]
    assert all(torch.equal(snapshot[k], v) for k, v in serving.model.state_dict().items())
    # lr 0: the warm-started weights are the serving weights, grown (old rows equal)
    old, new = serving.model.state_dict(), result.model.state_dict()
    for k in old:
        rows = old[k].shape[0] if old[k].dim() else None
        assert torch.equal(new[k][:rows] if rows else new[k], old[k]), k


def test_results_are_json_and_name_the_device(stream):
    recs, C, H = stream
    result = fine_tune(build_windows(recs, C, H), cfg=tiny_finetune(epochs=1), family="dkt", model_kwargs=TINY_DKT)
    out = json.loads(json.dumps(result.to_dict()))
    assert out["device"] == str(resolve_device("auto")) and out["fit"]["best_epoch"] == 1
    assert out["autocast"] == ("bf16" if torch.cuda.is_available() else None)
    assert out["model_config"]["n_items"] == len(result.items)


def test_cuda_is_chosen_when_present_with_bf16_autocast(monkeypatch, caplog):
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    cfg = tiny_finetune()
    assert autocast_mode(torch.device("cpu"), cfg) is None
    assert autocast_mode(torch.device("cuda"), tiny_finetune(bf16=False)) is None
    # a GPU that trains in bf16, and one that cannot (fp32, with a warning naming why)
    monkeypatch.setattr(finetune_module, "unsupported_reason", lambda device, dtype: None)
    assert autocast_mode(torch.device("cuda"), cfg) == "bf16" and cfg.train_config("bf16").autocast == "bf16"
    monkeypatch.setattr(finetune_module, "unsupported_reason", lambda device, dtype: "Tesla P100 has no bf16 support")
    with caplog.at_level("WARNING"):
        assert autocast_mode(torch.device("cuda"), cfg) is None
    assert "Tesla P100 has no bf16 support" in caplog.text
