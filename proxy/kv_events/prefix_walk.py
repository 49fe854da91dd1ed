"""How much of a prompt each replica holds, for the cost of the part that matters.

Tokenizing a whole long prompt on every request would cost milliseconds of the event loop (a
4,000-token chat is ~1-3 ms in a fast tokenizer). Routing needs less: the engines can only hold a prefix
of the prompt, and the prefixes that repeat (a tenant's system prompt, its tools, its canonical
preamble) are the ones worth finding. So ``PrefixWalk`` reads the rendered prompt a chunk at a time
(``CHUNK_CHARS``, cut before a space), keeps each chunk's block keys in an LRU keyed by everything
before it and the chunk itself, and stops at the first chunk past which no replica holds the prompt.
A repeated system prompt costs dictionary lookups; only the first chunk nobody holds is tokenized.

Tokenizing piece by piece must give the whole text's tokens. It does when pieces are cut before a
space, for the tokenizers that split words at spaces first (byte-level BPE, SentencePiece's
metaspace): ``PromptTokens.splits_cleanly`` checks it on the model's own tokenizer at start-up, and a
tokenizer for which it fails is read whole, as far as ``max_chars``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator

from policies.routing.kv_blocks import HeldBlocks, HeldWalk, KeyChain, extend_keys
from proxy.kv_events.prompt_tokens import PromptTokens

CHUNK_CHARS = 1024  # about two of a CPU engine's 128-token blocks, a sixth of a GPU engine's 16-token ones
CACHE_CHUNKS = 16_384  # chunks remembered: 16 MiB of prompt text's keys at most, far less in practice


def chunks(text: str, size: int, limit: int) -> Iterator[tuple[int, int]]:
    """(start, end) of consecutive pieces of the first ``limit`` characters of ``text`` (cut before a
    space), each of about ``size`` characters and cut before a space where there is one."""
    stop = len(text)
    if stop > limit:
        cut = text.rfind(" ", 0, limit)
        stop = cut if cut > 0 else limit
    start = 0
    while start < stop:
        end = start + size
        if end >= stop:
            end = stop
        else:
            cut = text.rfind(" ", start + 1, end)
            end = cut if cut > start else end
        yield start, end
        start = end


class PrefixWalk:
    """The chunked walk over one model's prompts, with its cache of chunks' keys."""

    def __init__(self, tokens: PromptTokens, chunk_chars: int = CHUNK_CHARS, cache_chunks: int = CACHE_CHUNKS) -> None:
        self.tokens = tokens
        self.chunk_chars = chunk_chars if tokens.splits_cleanly() else tokens.max_chars
        self.cache_chunks = cache_chunks
        self.cache: OrderedDict[int, tuple[KeyChain, int]] = OrderedDict()  # chunk -> its keys, its chain hash
        self.tokenized_chars = 0  # characters tokenized so far, for the cost's metric

    def held(self, index: HeldBlocks, text: str, special: bool, block_size: int, salt: str | None) -> list[int]:
        """How many of the prompt's leading blocks each replica of ``index`` holds."""
        state = hash((block_size, salt, special))
        chain, walk = KeyChain(), HeldWalk(index)
        for start, end in chunks(text, self.chunk_chars, self.tokens.max_chars):
            piece = text[start:end]
            state = hash((state, piece))
            found = self.cache.get(state)
            if found is None:
                ids = self.tokens.encode(piece, special=special and start == 0)
                self.tokenized_chars += len(piece)
                grown = extend_keys(KeyChain([], chain.parent, chain.tail), ids, block_size, salt)
                found = (grown, state)
                self.cache[state] = found
                if len(self.cache) > self.cache_chunks:
                    self.cache.popitem(last=False)
            else:
                self.cache.move_to_end(state)
            grown = found[0]
            chain = KeyChain([], grown.parent, grown.tail)
            if not walk.extend(grown.keys):
                break  # no replica holds the prompt past this chunk: the rest cannot change the choice
        return walk.held()
