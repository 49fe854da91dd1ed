"""Prompt tokens for admission: the model's own tokenizer when configured, else an estimate.

The estimate is a quarter of the rendered prompt's characters (role markers included), plus three
eighths of a token per extra UTF-8 byte, so a CJK character (three bytes) counts as one token
rather than a quarter; it costs one encode per piece, in C. Its error against a real tokenizer is
measured in docs/benchmarks.md (section "Token estimate"). With ``tokenizer:`` set to a Hugging
Face tokenizer.json the count is exact for the text (the chat template's few special tokens aside)
at the cost of one Rust encode.
"""

from __future__ import annotations

from collections.abc import Iterable

from policies.prompt.stable_prefix import Pieces


def estimate_prompt_tokens(texts: Iterable[str]) -> int:
    characters = extra = 0
    for text in texts:
        characters += len(text)
        extra += len(text.encode("utf-8", "surrogatepass")) - len(text)
    return -(-(2 * characters + 3 * extra) // 8)


def text_bytes(texts: Iterable[str]) -> int:
    """The texts' UTF-8 bytes: more than any tokenizer's tokens for them (``surely_fits``), at the cost of a copy."""
    return sum(len(text.encode("utf-8", "surrogatepass")) for text in texts)


class TokenCounter:
    __slots__ = ("tokenizer",)

    def __init__(self, tokenizer_path: str | None = None) -> None:
        self.tokenizer = None
        if tokenizer_path is not None:
            from tokenizers import Tokenizer  # only loaded when configured

            self.tokenizer = Tokenizer.from_file(tokenizer_path)

    @property
    def exact(self) -> bool:
        """Counts with the model's tokenizer, rather than estimating (what a count that must fit the engine's
        context allows for: ``output_room``)."""
        return self.tokenizer is not None

    def count(self, pieces: Pieces) -> int:
        if self.tokenizer is None:
            return estimate_prompt_tokens(pieces)
        return len(self.tokenizer.encode("".join(pieces), add_special_tokens=False).ids)
