"""GPT-2's vocabulary in two numbers, without tiktoken: what settings check a model against.

`gptlineage.corpus.tokenizer` builds the encoder these describe; a settings module that only
needs the size (training's sample check, before any job) imports them from here and loads
neither tiktoken nor numpy.

Example:
    >>> VOCAB_SIZE, EOT_ID
    (50257, 50256)
"""

EOT_ID = 50256  # <|endoftext|>, the last id
VOCAB_SIZE = 50257
