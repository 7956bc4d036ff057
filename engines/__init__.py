"""The generation engines behind rollout.py's one interface (rollout.make_engine builds one):

    base.py          what every engine takes and returns: SamplingParams, Completion, the Engine interface
    stops.py         where a response ends, one rule for every engine: stop tokens, stop strings, --stop's strings
    hf.py            HFEngine (transformers' generate, the reference) and FastEngine (its samples, a faster loop)
    vllm_engine.py   VLLMEngine: vLLM colocated, its weight sync (full or LoRA adapter), sleep/wake, streaming
    loading.py       load_model: a model and its tokenizer from a directory or hub name, one error line if not
"""
