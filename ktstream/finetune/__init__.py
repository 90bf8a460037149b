"""Periodic fine-tuning: time-ordered replay, warm-started training, leakage-gated promotion, model registry.

See docs/finetuning.md. The flow of one cycle at cutoff C, horizon H::

    archive --read_archive--> build_windows(C, H) --fine_tune--> judge (gate + bootstrap)
            --> ModelRegistry.publish | reject --> RegistryWatcher (engine) --> rebuild_states

The package re-exports nothing: each module is imported by its own path, so the serving process reads
the registry (``registry``, ``watcher``) without loading the trainer or the leakage gate.
"""
