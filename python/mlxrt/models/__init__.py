"""mlx_lm.models: only the prompt cache constructor (mlxrt.models.cache.make_prompt_cache)."""
