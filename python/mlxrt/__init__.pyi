"""Type stubs of the package mlxrt (mlx-lm 0.32.2's Python API on mlxrt's C++ runtime)."""

from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Literal, Optional, Set, Tuple, Union, overload

import mlx.core as mx

__version__: str
DEFAULT_QUANTIZED_KV_START: int

Sampler = Callable[[mx.array], mx.array]
LogitsProcessor = Callable[[mx.array, mx.array], mx.array]

class PromptCache:
    """One cache per layer, updated in place by model(...) and stream_generate(...)."""

    def __len__(self) -> int: ...
    @property
    def offset(self) -> int: ...

class Model:
    """A loaded model: ``model(inputs, cache=None)`` -> logits ``[batch, length, vocab]``."""

    def __call__(self, inputs: mx.array, cache: Optional[PromptCache] = None) -> mx.array: ...
    @property
    def model_type(self) -> str: ...
    def make_cache(self) -> PromptCache: ...

class StreamingDetokenizer:
    def reset(self) -> None: ...
    def add_token(self, token: int) -> None: ...
    def finalize(self) -> None: ...
    @property
    def last_segment(self) -> str: ...
    @property
    def text(self) -> str: ...
    @property
    def tokens(self) -> List[int]: ...

class TokenizerWrapper:
    def encode(self, text: str, add_special_tokens: bool = True) -> List[int]: ...
    def decode(self, token_ids: Union[int, List[int], mx.array], skip_special_tokens: bool = False) -> str: ...
    def convert_tokens_to_ids(self, tokens: Union[str, List[str]]) -> Union[Optional[int], List[Optional[int]]]: ...
    def convert_ids_to_tokens(self, ids: Union[int, List[int]]) -> Union[str, List[str]]: ...
    def apply_chat_template(
        self,
        conversation: List[Dict[str, Any]],
        tools: Optional[List[Dict[str, Any]]] = None,
        documents: Optional[List[Dict[str, Any]]] = None,
        chat_template: None = None,
        add_generation_prompt: bool = False,
        continue_final_message: bool = False,
        tokenize: bool = True,
        **kwargs: Any,
    ) -> Union[str, List[int]]: ...
    def __len__(self) -> int: ...
    @property
    def vocab_size(self) -> int: ...
    @property
    def bos_token(self) -> Optional[str]: ...
    @property
    def bos_token_id(self) -> Optional[int]: ...
    @property
    def eos_token(self) -> Optional[str]: ...
    @property
    def eos_token_id(self) -> Optional[int]: ...
    @property
    def pad_token(self) -> Optional[str]: ...
    @property
    def unk_token(self) -> Optional[str]: ...
    @property
    def chat_template(self) -> Optional[bool]: ...
    @property
    def has_chat_template(self) -> bool: ...
    @property
    def has_thinking(self) -> bool: ...
    @property
    def detokenizer(self) -> StreamingDetokenizer: ...
    @property
    def eos_token_ids(self) -> Set[int]: ...
    @eos_token_ids.setter
    def eos_token_ids(self, value: Optional[List[int]]) -> None: ...
    def add_eos_token(self, token: str) -> None: ...

@dataclass
class GenerationResponse:
    text: str
    token: int
    logprobs: mx.array
    from_draft: bool
    prompt_tokens: int
    prompt_tps: float
    generation_tokens: int
    generation_tps: float
    peak_memory: float
    finish_reason: Optional[str] = None

@overload
def load(
    path_or_hf_repo: str,
    tokenizer_config: Optional[Dict[str, Any]] = None,
    model_config: Optional[Dict[str, Any]] = None,
    adapter_path: Optional[str] = None,
    lazy: bool = False,
    return_config: Literal[False] = False,
    revision: Optional[str] = None,
    trust_remote_code: bool = False,
) -> Tuple[Model, TokenizerWrapper]: ...
@overload
def load(
    path_or_hf_repo: str,
    tokenizer_config: Optional[Dict[str, Any]] = None,
    model_config: Optional[Dict[str, Any]] = None,
    adapter_path: Optional[str] = None,
    lazy: bool = False,
    *,
    return_config: Literal[True],
    revision: Optional[str] = None,
    trust_remote_code: bool = False,
) -> Tuple[Model, TokenizerWrapper, Dict[str, Any]]: ...
def make_sampler(
    temp: float = 0.0,
    top_p: float = 0.0,
    min_p: float = 0.0,
    min_tokens_to_keep: int = 1,
    top_k: int = 0,
    xtc_probability: float = 0.0,
    xtc_threshold: float = 0.1,
    xtc_special_tokens: Optional[List[int]] = None,
) -> Sampler: ...
def make_logits_processors(
    logit_bias: Optional[Dict[int, float]] = None,
    repetition_penalty: Optional[float] = None,
    repetition_context_size: Optional[int] = 20,
    presence_penalty: Optional[float] = None,
    presence_context_size: Optional[int] = 20,
    frequency_penalty: Optional[float] = None,
    frequency_context_size: Optional[int] = 20,
) -> List[LogitsProcessor]: ...
def make_prompt_cache(model: Model, max_kv_size: Optional[int] = None) -> PromptCache: ...
def stream_generate(
    model: Model,
    tokenizer: TokenizerWrapper,
    prompt: Union[str, mx.array, List[int]],
    max_tokens: int = 256,
    draft_model: Optional[Model] = None,
    stream: None = None,
    *,
    sampler: Optional[Sampler] = None,
    logits_processors: Optional[List[LogitsProcessor]] = None,
    max_kv_size: Optional[int] = None,
    prompt_cache: Optional[PromptCache] = None,
    prefill_step_size: int = 2048,
    kv_bits: Optional[int] = None,
    kv_group_size: int = 64,
    quantized_kv_start: int = 5000,
    prompt_progress_callback: Optional[Callable[[int, int], None]] = None,
    input_embeddings: None = None,
    num_draft_tokens: int = 3,
) -> Iterator[GenerationResponse]: ...
def generate(
    model: Model,
    tokenizer: TokenizerWrapper,
    prompt: Union[str, List[int]],
    verbose: bool = False,
    *,
    max_tokens: int = 256,
    draft_model: Optional[Model] = None,
    sampler: Optional[Sampler] = None,
    logits_processors: Optional[List[LogitsProcessor]] = None,
    max_kv_size: Optional[int] = None,
    prompt_cache: Optional[PromptCache] = None,
    prefill_step_size: int = 2048,
    kv_bits: Optional[int] = None,
    kv_group_size: int = 64,
    quantized_kv_start: int = 5000,
    prompt_progress_callback: Optional[Callable[[int, int], None]] = None,
    num_draft_tokens: int = 3,
) -> Optional[str]: ...
class BatchStats:
    prompt_tokens: int
    prompt_time: float
    generation_tokens: int
    wall_time: float
    peak_memory: float
    @property
    def prompt_tps(self) -> float: ...
    @property
    def generation_time(self) -> float: ...
    @property
    def generation_tps(self) -> float: ...

class BatchResponse:
    texts: List[str]
    stats: BatchStats
    caches: Optional[List[Any]]
    token_ids: Optional[List[List[int]]]
    logprobs: Optional[List[List[float]]]

def batch_generate(
    model: Model,
    tokenizer: TokenizerWrapper,
    prompts: List[List[int]],
    prompt_caches: None = None,
    max_tokens: Union[int, List[int]] = 128,
    verbose: bool = False,
    return_prompt_caches: bool = False,
    return_token_ids: bool = False,
    return_logprobs: bool = False,
    *,
    sampler: Optional[Sampler] = None,
    logits_processors: Optional[List[LogitsProcessor]] = None,
    completion_batch_size: int = 32,
    prefill_batch_size: int = 8,
    prefill_step_size: int = 2048,
) -> BatchResponse: ...
def convert(*args: Any, **kwargs: Any) -> Any:
    """Not provided: raises NotImplementedError."""
