"""One training step of a causal LM per device on a training layout: the step traced and priced
(:mod:`.step`), cut into pipeline stages (:mod:`.stages`), scheduled (:mod:`.schedule`)."""

from .step import Traced, TrainingCost, check_layout, check_training, trace_step, train_step

__all__ = ["Traced", "TrainingCost", "check_layout", "check_training", "trace_step", "train_step"]
