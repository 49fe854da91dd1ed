"""Prompt tokens for admission: the model's own tokenizer when configured, else an estimate.

The estimate is a quarter of the rendered prompt's characters (role markers included), which is
free on the request path; its error against real tokenizers is measured in docs/benchmarks.md
(section "Token estimate"). With ``tokenizer:`` set to a Hugging Face tokenizer.json the count is
exact for the text (the chat template's few special tokens aside) at the cost of one Rust encode.
"""

from __future__ import annotations

from policies.stable_prefix import CHARS_PER_TOKEN, Pieces, total_length


class TokenCounter:
    __slots__ = ("tokenizer",)

    def __init__(self, tokenizer_path: str | None = None) -> None:
        self.tokenizer = None
        if tokenizer_path is not None:
            from tokenizers import Tokenizer  # only loaded when configured

            self.tokenizer = Tokenizer.from_file(tokenizer_path)

    def count(self, pieces: Pieces) -> int:
        if self.tokenizer is None:
            return -(-total_length(pieces) // CHARS_PER_TOKEN)
        return len(self.tokenizer.encode("".join(pieces), add_special_tokens=False).ids)
