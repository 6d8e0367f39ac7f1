"""mlxrt: mlx-lm 0.32.2's Python API on mlxrt's C++ runtime.

Change ``from mlx_lm import load, generate`` to ``from mlxrt import load, generate``: the names,
arguments and results are mlx-lm's (``load``, ``generate``, ``stream_generate``, ``make_sampler``,
``make_logits_processors``, the tokenizer's ``encode`` / ``decode`` / ``apply_chat_template``,
``model(tokens, cache=...)``), and the outputs are the same tokens, text and logprobs. Arrays are
``mlx.core.array`` objects shared with the mlx package without a copy. What mlxrt does not provide
raises ``NotImplementedError`` naming it.
"""

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Union

import mlx.core as mx

from . import _core

__version__ = "0.32.2"

__all__ = [
    "__version__",
    "GenerationResponse",
    "Model",
    "TokenizerWrapper",
    "batch_generate",
    "convert",
    "generate",
    "load",
    "make_logits_processors",
    "make_prompt_cache",
    "make_sampler",
    "stream_generate",
]

# mlx-lm's generate_step default for quantized_kv_start.
DEFAULT_QUANTIZED_KV_START = 5000


def _not_provided(what: str) -> NotImplementedError:
    return NotImplementedError(f"mlxrt does not provide {what}")


def _reject(name: str, value: Any, default: Any = None) -> None:
    if value is not default and value != default:
        raise _not_provided(f"the argument {name}={value!r}")


class Model:
    """A loaded model: ``model(inputs, cache=None)`` returns the logits as an ``mx.array``.

    ``inputs`` is an integer ``mx.array`` of shape ``[batch, length]``; ``cache`` a prompt cache
    from :func:`make_prompt_cache`, updated in place."""

    def __init__(self, core: "_core.Model"):
        self._core = core

    def __call__(self, inputs: mx.array, cache: Optional["PromptCache"] = None, **kwargs) -> mx.array:
        if kwargs:
            raise _not_provided(f"model(...) arguments {sorted(kwargs)}")
        if not isinstance(inputs, mx.array):
            inputs = mx.array(inputs)
        if cache is not None and not isinstance(cache, _core.PromptCache):
            raise _not_provided(
                "a cache other than mlxrt.make_prompt_cache(model)'s (mlx-lm cache objects)"
            )
        return self._core(inputs, cache)

    @property
    def model_type(self) -> str:
        return self._core.model_type

    def make_cache(self):
        return self._core.make_cache()

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        raise _not_provided(f"model.{name}")


PromptCache = _core.PromptCache


def make_prompt_cache(model: Model, max_kv_size: Optional[int] = None) -> "PromptCache":
    """mlx_lm.models.cache.make_prompt_cache: one cache per layer (a rotating one of
    ``max_kv_size`` entries when given and the model does not choose its own)."""
    return model._core.make_cache(max_kv_size)


class StreamingDetokenizer:
    """mlx-lm's streaming detokenizer: ``add_token``, ``finalize``, ``last_segment``, ``text``."""

    def __init__(self, core: "_core.StreamingDetokenizer"):
        self._core = core

    def reset(self) -> None:
        self._core.reset()

    def add_token(self, token: int) -> None:
        self._core.add_token(int(token))

    def finalize(self) -> None:
        self._core.finalize()

    @property
    def last_segment(self) -> str:
        return self._core.last_segment

    @property
    def text(self) -> str:
        return self._core.text

    @property
    def tokens(self) -> List[int]:
        return self._core.tokens


def _ids(token_ids) -> List[int]:
    if isinstance(token_ids, mx.array):
        token_ids = token_ids.tolist()
    if isinstance(token_ids, int):
        return [token_ids]
    return [int(t) for t in token_ids]


class TokenizerWrapper:
    """The tokenizer mlx-lm's load() returns: Hugging Face's encode / decode /
    apply_chat_template, the eos ids and a streaming detokenizer."""

    _THINK_TOKENS = [
        ("<think>", "</think>"),
        ("<longcat_think>", "</longcat_think>"),
        ("<|think:start|>", "<|think:end|>"),
    ]

    def __init__(self, core: "_core.Tokenizer"):
        self._core = core
        self._eos_token_ids = set(core.eos_token_ids)
        self._has_thinking = self._infer_thinking()

    def _infer_thinking(self) -> bool:
        has = lambda t: self._core.token_to_id(t) is not None
        if any(has(a) and has(b) for a, b in self._THINK_TOKENS):
            return True
        if has("<|channel>") and has("<channel|>"):
            return True
        return all(has(t) for t in ("<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>"))

    # -- Hugging Face's tokenizer API --
    def encode(self, text: str, add_special_tokens: bool = True, **kwargs) -> List[int]:
        if kwargs:
            raise _not_provided(f"tokenizer.encode arguments {sorted(kwargs)}")
        return self._core.encode(text, add_special_tokens)

    def decode(self, token_ids, skip_special_tokens: bool = False, **kwargs) -> str:
        if kwargs:
            raise _not_provided(f"tokenizer.decode arguments {sorted(kwargs)}")
        return self._core.decode(_ids(token_ids), skip_special_tokens)

    def convert_tokens_to_ids(self, tokens):
        if isinstance(tokens, str):
            return self._core.token_to_id(tokens)
        return [self._core.token_to_id(t) for t in tokens]

    def convert_ids_to_tokens(self, ids):
        if isinstance(ids, int):
            return self._core.id_to_token(ids)
        return [self._core.id_to_token(i) for i in ids]

    def apply_chat_template(
        self,
        conversation,
        tools=None,
        documents=None,
        chat_template=None,
        add_generation_prompt: bool = False,
        continue_final_message: bool = False,
        tokenize: bool = True,
        **kwargs,
    ):
        """transformers' apply_chat_template(conversation, ...) as mlx-lm's TokenizerWrapper calls it
        (enable_thinking defaults to whether the vocabulary has thinking markers): the rendered
        text, or with ``tokenize`` (the default) its ids, encoded without special tokens."""
        _reject("chat_template", chat_template)
        for name in ("padding", "truncation", "max_length", "return_tensors", "return_assistant_tokens_mask"):
            if name in kwargs:
                _reject(name, kwargs.pop(name), None if name != "padding" else False)
        if kwargs.pop("return_dict", False):
            raise _not_provided("apply_chat_template(return_dict=True)")
        kwargs.setdefault("enable_thinking", self._has_thinking)
        if conversation and isinstance(conversation[0], (list, tuple)):
            raise _not_provided("apply_chat_template over a batch of conversations")
        if not self._core.has_chat_template:
            raise ValueError(
                "Cannot use chat template functions because tokenizer.chat_template is not set"
            )
        if tools is not None:
            kwargs["tools"] = tools
        if documents is not None:
            kwargs["documents"] = documents
        text = self._core.render_chat(
            json.dumps(list(conversation)),
            add_generation_prompt,
            continue_final_message,
            json.dumps(kwargs),
        )
        if tokenize:
            return self._core.encode(text, False)
        return text

    def __len__(self) -> int:
        return len(self._core)

    @property
    def vocab_size(self) -> int:
        return self._core.base_vocab_size

    @property
    def bos_token(self) -> Optional[str]:
        return self._core.bos_token

    @property
    def bos_token_id(self) -> Optional[int]:
        t = self._core.bos_token
        return None if t is None else self._core.token_to_id(t)

    @property
    def eos_token(self) -> Optional[str]:
        return self._core.eos_token

    @property
    def eos_token_id(self) -> Optional[int]:
        t = self._core.eos_token
        return None if t is None else self._core.token_to_id(t)

    @property
    def pad_token(self) -> Optional[str]:
        return self._core.pad_token

    @property
    def unk_token(self) -> Optional[str]:
        return self._core.unk_token

    @property
    def chat_template(self) -> Optional[bool]:
        return True if self._core.has_chat_template else None

    @property
    def has_chat_template(self) -> bool:
        return self._core.has_chat_template

    # -- mlx-lm's additions --
    @property
    def has_thinking(self) -> bool:
        return self._has_thinking

    @property
    def detokenizer(self) -> StreamingDetokenizer:
        return StreamingDetokenizer(self._core.detokenizer())

    @property
    def eos_token_ids(self) -> set:
        return self._eos_token_ids

    @eos_token_ids.setter
    def eos_token_ids(self, value) -> None:
        self._eos_token_ids = set(value) if value is not None else set()

    def add_eos_token(self, token: str) -> None:
        try:
            token_id = int(token)
        except ValueError:
            token_id = self._core.token_to_id(token)
        if token_id is None:
            raise ValueError(f"'{token}' is not a token for this model")
        self._eos_token_ids.add(token_id)

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        raise _not_provided(f"tokenizer.{name}")


def _load_config(model_path: Path) -> dict:
    # mlx_lm.utils.load_config: config.json, its eos ids replaced by generation_config.json's.
    with open(model_path / "config.json") as f:
        config = json.load(f)
    gen = model_path / "generation_config.json"
    if gen.exists():
        try:
            with open(gen) as f:
                eos = json.load(f).get("eos_token_id", False)
        except json.JSONDecodeError:
            eos = False
        if eos:
            config["eos_token_id"] = eos
    return config


def load(
    path_or_hf_repo: str,
    tokenizer_config: Optional[Dict[str, Any]] = None,
    model_config: Optional[Dict[str, Any]] = None,
    adapter_path: Optional[str] = None,
    lazy: bool = False,
    return_config: bool = False,
    revision: Optional[str] = None,
    trust_remote_code: bool = False,
):
    """Load the model and tokenizer from a local directory or a Hugging Face repository id in the
    local Hugging Face cache. Returns ``(model, tokenizer)``, plus the config with
    ``return_config``. ``lazy`` is accepted (weights are read at load either way)."""
    if model_config:
        raise _not_provided("load(model_config=...)")
    _reject("revision", revision)
    extra = dict(tokenizer_config or {})
    eos_token = extra.pop("eos_token", None)
    extra.pop("trust_remote_code", None)
    if extra:
        raise _not_provided(f"load(tokenizer_config=...) keys {sorted(extra)}")
    core_model, core_tokenizer = _core.load(str(path_or_hf_repo), "" if adapter_path is None else str(adapter_path))
    model = Model(core_model)
    tokenizer = TokenizerWrapper(core_tokenizer)
    if eos_token is not None:
        tokenizer.add_eos_token(eos_token)
    if return_config:
        return model, tokenizer, _load_config(Path(core_model.path))
    return model, tokenizer


@dataclass
class GenerationResponse:
    """The output of :func:`stream_generate` (mlx-lm's fields)."""

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


def make_sampler(
    temp: float = 0.0,
    top_p: float = 0.0,
    min_p: float = 0.0,
    min_tokens_to_keep: int = 1,
    top_k: int = 0,
    xtc_probability: float = 0.0,
    xtc_threshold: float = 0.1,
    xtc_special_tokens: Optional[List[int]] = None,
) -> Callable[[mx.array], mx.array]:
    """mlx_lm.sample_utils.make_sampler: a sampler drawing from ``mx.random.state``, so
    ``mx.random.seed`` gives mlx-lm's tokens."""
    return _core.make_sampler(
        float(temp), float(top_p), float(min_p), int(min_tokens_to_keep), int(top_k),
        float(xtc_probability), float(xtc_threshold), list(xtc_special_tokens or []),
    )


def make_logits_processors(
    logit_bias: Optional[Dict[int, float]] = None,
    repetition_penalty: Optional[float] = None,
    repetition_context_size: Optional[int] = 20,
    presence_penalty: Optional[float] = None,
    presence_context_size: Optional[int] = 20,
    frequency_penalty: Optional[float] = None,
    frequency_context_size: Optional[int] = 20,
) -> List[Callable[[mx.array, mx.array], mx.array]]:
    """mlx_lm.sample_utils.make_logits_processors: logit bias, then the repetition, presence and
    frequency penalties."""
    bias = [(int(k), float(v)) for k, v in (logit_bias or {}).items()]
    return _core.make_logits_processors(
        bias, repetition_penalty, int(repetition_context_size), presence_penalty,
        int(presence_context_size), frequency_penalty, int(frequency_context_size),
    )


def _prompt_ids(tokenizer: TokenizerWrapper, prompt) -> List[int]:
    if isinstance(prompt, mx.array):
        return [int(t) for t in prompt.reshape(-1).tolist()]
    if isinstance(prompt, str):
        bos = tokenizer.bos_token
        add_special_tokens = bos is None or not prompt.startswith(bos)
        return tokenizer.encode(prompt, add_special_tokens=add_special_tokens)
    return [int(t) for t in prompt]


def stream_generate(
    model: Model,
    tokenizer: TokenizerWrapper,
    prompt: Union[str, mx.array, List[int]],
    max_tokens: int = 256,
    draft_model: Optional[Model] = None,
    stream=None,
    *,
    sampler: Optional[Callable[[mx.array], mx.array]] = None,
    logits_processors: Optional[List[Callable[[mx.array, mx.array], mx.array]]] = None,
    max_kv_size: Optional[int] = None,
    prompt_cache: Optional["PromptCache"] = None,
    prefill_step_size: int = 2048,
    kv_bits: Optional[int] = None,
    kv_group_size: int = 64,
    quantized_kv_start: int = DEFAULT_QUANTIZED_KV_START,
    prompt_progress_callback: Optional[Callable[[int, int], None]] = None,
    input_embeddings: Optional[mx.array] = None,
    num_draft_tokens: int = 3,
) -> Iterator[GenerationResponse]:
    """mlx_lm.stream_generate: yields a :class:`GenerationResponse` per token; the last one has
    ``finish_reason`` "stop" (an eos token) or "length" (``max_tokens`` reached)."""
    if max_tokens == 0:
        raise ValueError("Maximum number of tokens must be non-zero (use -1 for no limit).")
    _reject("stream", stream)
    if input_embeddings is not None:
        raise _not_provided("stream_generate(input_embeddings=...)")
    if not isinstance(model, Model):
        raise TypeError("stream_generate: model must come from mlxrt.load")
    if not isinstance(tokenizer, TokenizerWrapper):
        raise TypeError("stream_generate: tokenizer must come from mlxrt.load")
    if prompt_cache is not None and not isinstance(prompt_cache, _core.PromptCache):
        raise _not_provided("a prompt cache other than mlxrt.make_prompt_cache(model)'s")
    ids = _prompt_ids(tokenizer, prompt)
    gen = _core.stream_generate(
        model._core, ids, int(max_tokens), sampler, logits_processors,
        sorted(tokenizer.eos_token_ids), max_kv_size, prompt_cache, int(prefill_step_size),
        kv_bits, int(kv_group_size), int(quantized_kv_start), prompt_progress_callback,
        None if draft_model is None else draft_model._core, int(num_draft_tokens),
    )
    for fields in gen:
        yield GenerationResponse(*fields)


def generate(
    model: Model,
    tokenizer: TokenizerWrapper,
    prompt: Union[str, List[int]],
    verbose: bool = False,
    **kwargs,
) -> str:
    """mlx_lm.generate: the whole response as a string (with ``verbose``, printed as it streams,
    then the prompt and generation speeds and the peak memory)."""
    if verbose:
        print("=" * 10)

    text = ""
    for response in stream_generate(model, tokenizer, prompt, **kwargs):
        if verbose:
            print(response.text, end="", flush=True)
        text += response.text

    if verbose:
        print()
        print("=" * 10)
        if len(text) == 0:
            print("No text generated for this prompt")
            return
        print(
            f"Prompt: {response.prompt_tokens} tokens, "
            f"{response.prompt_tps:.3f} tokens-per-sec"
        )
        print(
            f"Generation: {response.generation_tokens} tokens, "
            f"{response.generation_tps:.3f} tokens-per-sec"
        )
        print(f"Peak memory: {response.peak_memory:.3f} GB")
    return text


@dataclass
class BatchStats:
    """What :func:`batch_generate` did (mlx-lm's BatchStats fields that batch_generate reports)."""

    prompt_tokens: int = 0
    prompt_time: float = 0.0
    generation_tokens: int = 0
    wall_time: float = 0.0
    peak_memory: float = 0.0

    @property
    def prompt_tps(self) -> float:
        return self.prompt_tokens / self.prompt_time if self.prompt_time > 0 else 0.0

    @property
    def generation_time(self) -> float:
        return max(0.0, self.wall_time - self.prompt_time)

    @property
    def generation_tps(self) -> float:
        t = self.generation_time
        return self.generation_tokens / t if t > 0 else 0.0


@dataclass
class BatchResponse:
    """The output of :func:`batch_generate` (mlx-lm's fields)."""

    texts: List[str]
    stats: BatchStats
    caches: Optional[List[Any]] = None
    token_ids: Optional[List[List[int]]] = None
    logprobs: Optional[List[List[float]]] = None


_BATCH_GENERATOR_ARGS = {"sampler", "logits_processors", "completion_batch_size", "prefill_batch_size",
                         "prefill_step_size", "max_kv_size", "stream"}


def batch_generate(
    model: Model,
    tokenizer: TokenizerWrapper,
    prompts: List[List[int]],
    prompt_caches: Optional[List[List[Any]]] = None,
    max_tokens: Union[int, List[int]] = 128,
    verbose: bool = False,
    return_prompt_caches: bool = False,
    return_token_ids: bool = False,
    return_logprobs: bool = False,
    **kwargs,
) -> BatchResponse:
    """mlx_lm.batch_generate: the prompts decoded together by mlxrt's BatchGenerator (left-padded,
    rows leaving as they finish), each row's tokens equal to mlx-lm's for the same batch; ``kwargs``
    are BatchGenerator's (``sampler``, ``logits_processors``, ``completion_batch_size``,
    ``prefill_batch_size``, ``prefill_step_size``)."""
    unknown = sorted(set(kwargs) - _BATCH_GENERATOR_ARGS)
    if unknown:
        raise TypeError(f"batch_generate: unexpected keyword argument {unknown[0]!r}")
    if prompt_caches is not None:
        raise _not_provided("batch_generate(prompt_caches=...)")
    if return_prompt_caches:
        raise _not_provided("batch_generate(return_prompt_caches=True)")
    if kwargs.get("max_kv_size") is not None:
        raise _not_provided("batch_generate(max_kv_size=...)")
    _reject("stream", kwargs.get("stream"))
    if not isinstance(model, Model):
        raise TypeError("batch_generate: model must come from mlxrt.load")
    if not isinstance(tokenizer, TokenizerWrapper):
        raise TypeError("batch_generate: tokenizer must come from mlxrt.load")
    prompts = [[int(t) for t in p] for p in prompts]
    if isinstance(max_tokens, int):
        max_tokens = [max_tokens] * len(prompts)
    prefill_batch_size = int(kwargs.get("prefill_batch_size", 8))
    # BatchGenerator: completion_batch_size = max(completion_batch_size, prefill_batch_size)
    completion_batch_size = max(int(kwargs.get("completion_batch_size", 32)), prefill_batch_size)
    if verbose:
        print(f"[batch_generate] Finished processing 0/{len(prompts)} ...", end="\r")
    tokens, logprobs, prompt_tokens, generated, prompt_time, wall_time, peak = _core.batch_generate_tokens(
        model._core, prompts, [int(m) for m in max_tokens], kwargs.get("sampler"), kwargs.get("logits_processors"),
        sorted(tokenizer.eos_token_ids), completion_batch_size, prefill_batch_size,
        int(kwargs.get("prefill_step_size", 2048)),
    )
    stats = BatchStats(prompt_tokens=prompt_tokens, prompt_time=prompt_time, generation_tokens=generated,
                       wall_time=wall_time, peak_memory=peak)
    texts = [tokenizer.decode(t) for t in tokens]
    if verbose:
        print(f"[batch_generate] Finished processing {len(prompts)}/{len(prompts)}")
        print(f"[batch_generate] Prompt: {stats.prompt_tokens} tokens, {stats.prompt_tps:.3f} tokens-per-sec")
        print(f"[batch_generate] Generation: {stats.generation_tokens} tokens, "
              f"{stats.generation_tps:.3f} tokens-per-sec")
        print(f"[batch_generate] Peak memory: {stats.peak_memory:.3f} GB")
    return BatchResponse(texts, stats, None, tokens if return_token_ids else None,
                         logprobs if return_logprobs else None)


def convert(*args, **kwargs):
    """mlx_lm.convert (Hugging Face -> MLX conversion and quantization)."""
    raise _not_provided("convert (use the mlxrt command line's convert verb)")
