"""mlx_lm.models.cache's constructor: ``from mlxrt.models.cache import make_prompt_cache``."""

from .. import make_prompt_cache

__all__ = ["make_prompt_cache"]
