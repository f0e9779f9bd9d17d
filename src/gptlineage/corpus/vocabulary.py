"""GPT-2's vocabulary in two numbers, without tiktoken: what settings check a model against.

A settings module that only needs these imports them from here, loading neither tiktoken nor numpy.

Example:
    >>> VOCAB_SIZE, EOT_ID
    (50257, 50256)
"""

EOT_ID = 50256  # <|endoftext|>, the last id
VOCAB_SIZE = 50257
