"""mlx_lm.sample_utils's constructors: ``from mlxrt.sample_utils import make_sampler``."""

from . import make_logits_processors, make_sampler

__all__ = ["make_logits_processors", "make_sampler"]
