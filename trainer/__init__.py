"""What train.py's loop stands on, apart from the method: a first reader of train.py need not open these.

    records.py       the records between the loop's steps: StepPlan (step 1), Rollout (steps 1-3 -> 4-6), Update (5 -> 6)
    collect.py       steps 1-3 on N processes: a plain round, DAPO's dynamic sampling rounds, MiMo's seamless scheduler
    samplers.py      the prompt order every sampler shares: draw(step, n), observe(indices, pass_rates), state_dict
    batches.py       token rows for the forward passes (Batch), micro-batches, log pi_old of whole responses
    logprobs.py      the response's log-probs without the (tokens x vocabulary) logits: a chunked LM head
    distributed.py   Accelerate, precision, FSDP/DDP lockstep, the sharded reference, gathered weights for vLLM
    producer.py      --rollout-lag's glue: the producer's batch (async_rollout.py) and its checkpoint form
    metrics.py       the step's rollout metrics over processes, the update's metrics, summary.json and curves.png
    setup.py         the Run: inputs checked, model, reference, optimizer, engine, tasks and samplers built
    checkpoints.py   checkpoint-N (runs.py writes it atomically), restore, the run directory's files
    stages.py        --stages (Ring-lite's math -> code): parsed and checked; --reward's values
    checks.py        the values a flag may take and the rules between flags (config.Config.validate)
    lora.py          LoRA / QLoRA through peft
"""
