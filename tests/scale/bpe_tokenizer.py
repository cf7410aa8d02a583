"""A byte-level BPE tokenizer with a chat template, trained on the spot: the "your own model" tests' tokenizer."""

CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>{% endif %}")
SPECIAL_TOKENS = ["<|pad|>", "<|eos|>", "<|user|>", "<|assistant|>"]


def bpe_tokenizer(corpus: list[str], vocab_size: int):
    """A byte-level BPE ``PreTrainedTokenizerFast`` of ``vocab_size`` tokens trained on ``corpus``, with
    :data:`CHAT_TEMPLATE` and pad/eos tokens (callers skip their tests without ``tokenizers``/``transformers``)."""
    import tokenizers
    from transformers import PreTrainedTokenizerFast

    core = tokenizers.Tokenizer(tokenizers.models.BPE())
    core.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = tokenizers.decoders.ByteLevel()
    core.train_from_iterator(corpus, tokenizers.trainers.BpeTrainer(vocab_size=vocab_size,
                                                                     special_tokens=SPECIAL_TOKENS))
    hf = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<|pad|>", eos_token="<|eos|>")
    hf.chat_template = CHAT_TEMPLATE
    return hf
