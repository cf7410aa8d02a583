"""The tiny float64 Llama and BPE tokenizer that the TRL tests build on the spot (no hub download).

One layer, hidden size 16, two heads: big enough for a real ``GRPOTrainer`` to generate, score and backpropagate,
small enough to build in well under a second. Seeded, so every test that builds it gets the same weights.
"""

import torch


def tiny_llama(corpus: list[str], vocab_size: int = 120, dtype: torch.dtype = torch.float64):
    """``(tokenizer, model)``: a BPE tokenizer trained on ``corpus`` and a 1-layer Llama from a config (seed 0)."""
    import transformers

    from tests.scale.bpe_tokenizer import bpe_tokenizer

    tokenizer = bpe_tokenizer(corpus * 4, vocab_size=vocab_size)
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32,
                                      num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
                                      max_position_embeddings=64, pad_token_id=tokenizer.pad_token_id,
                                      eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.eos_token_id)
    return tokenizer, transformers.LlamaForCausalLM(config).to(dtype)
