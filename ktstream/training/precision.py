"""Which autocast dtypes this machine's device can train in, found by trying, not assumed.

bf16 autocast on a CPU runs through oneDNN, whose LSTM primitive needs AVX-512 BF16 (or AMX):
on an AVX2-only CPU it fails with "could not create a primitive descriptor for the LSTM forward
propagation primitive". Rather than read CPU flags (a list that changes with every oneDNN
release), a tiny step with the layers our families use (embedding, LSTM, linear, softmax,
backward) is run once per device and dtype under autocast; the answer is cached.

>>> supports_autocast(torch.device("cpu"), None)
True
"""

from __future__ import annotations

import functools

import torch


class UnsupportedPrecisionError(ValueError):
    """The requested autocast dtype cannot train on this device."""


@functools.lru_cache(maxsize=None)
def _probe(device_type: str, dtype: torch.dtype) -> str | None:
    """None if a tiny training step runs under autocast on ``device_type``; else the error, one line."""
    device = torch.device(device_type)
    try:
        with torch.random.fork_rng(devices=[]):
            emb = torch.nn.Embedding(4, 8).to(device)
            lstm = torch.nn.LSTM(8, 8, batch_first=True).to(device)
            head = torch.nn.Linear(8, 2).to(device)
            with torch.autocast(device_type, dtype=dtype):
                h, _ = lstm(emb(torch.tensor([[0, 1, 2]], device=device)))
                loss = torch.log_softmax(head(h), -1).float().sum()
            loss.backward()
    except RuntimeError as exc:
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return None


def unsupported_reason(device: torch.device, dtype: torch.dtype | None) -> str | None:
    """Why ``device`` cannot train under ``dtype`` autocast, in one line; None when it can."""
    if dtype is None:
        return None
    if device.type == "cuda" and dtype == torch.bfloat16 and not torch.cuda.is_bf16_supported():
        return f"{torch.cuda.get_device_name(device)} has no bf16 support"
    return _probe(device.type, dtype)


def supports_autocast(device: torch.device, dtype: torch.dtype | None) -> bool:
    return unsupported_reason(device, dtype) is None


def check_autocast(device: torch.device, dtype: torch.dtype | None, option: str) -> None:
    """Raise UnsupportedPrecisionError naming ``option`` when ``dtype`` cannot train on ``device``."""
    reason = unsupported_reason(device, dtype)
    if reason is not None:
        raise UnsupportedPrecisionError(f"{option} asks for {dtype} autocast, which this {device.type} cannot "
                                        f"train in ({reason}); unset {option} to train in fp32")
