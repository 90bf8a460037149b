"""Periodic fine-tuning: time-ordered replay, warm-started training, leakage-gated promotion, model registry.

See docs/finetuning.md. The flow of one cycle at cutoff C, horizon H::

    archive --read_archive--> build_replay(C, H) --fine_tune--> judge (gate + bootstrap)
            --> ModelRegistry.publish | reject --> RegistryWatcher (engine) --> rebuild_states
"""

from ktstream.finetune.bootstrap import metric_for, paired_bootstrap
from ktstream.finetune.exceptions import FinetuneError, RegistryError
from ktstream.finetune.finetune import FinetuneConfig, FinetuneResult, fine_tune
from ktstream.finetune.promotion import Decision, PromotionConfig, judge, promote_or_reject
from ktstream.finetune.registry import ModelRegistry, ModelVersion
from ktstream.finetune.replay import ReplayData, assert_before, build_replay
from ktstream.finetune.scheduler import CycleResult, Trainer, run_cycle
from ktstream.finetune.warmstart import warm_start
from ktstream.finetune.watcher import RegistryWatcher

__all__ = ["CycleResult", "Decision", "FinetuneConfig", "FinetuneError", "FinetuneResult", "ModelRegistry",
           "ModelVersion", "PromotionConfig", "RegistryError", "RegistryWatcher", "ReplayData", "Trainer",
           "assert_before", "build_replay", "fine_tune", "judge", "promote_or_reject", "metric_for", "paired_bootstrap",
           "run_cycle", "warm_start"]
