"""The engine's model runner is ``ktstream.serving.runner.ModelRunner``: the engine modules that
import it from here (engine, service, processor) are being rewired by a concurrent change."""

from ktstream.serving.runner import ModelRunner

__all__ = ["ModelRunner"]
