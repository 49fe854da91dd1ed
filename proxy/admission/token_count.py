"""Prompt tokens for admission: the model's own tokenizer when configured, else an estimate.

The estimate is a quarter of the rendered prompt's characters (role markers included), plus three
eighths of a token per extra UTF-8 byte, so a CJK character (three bytes) counts as one token
rather than a quarter; it costs one encode per piece, in C. Its error against a real tokenizer is
measured in docs/benchmarks.md (section "Token estimate").

With ``tokenizer:`` set to a Hugging Face tokenizer.json the count is exact for the text (the chat template's
few special tokens aside). Encoding a coding agent's whole prompt (Claude Code: ~49,000 characters, ~28,000
tokens of the tiny model's tokenizer) would block the event loop for 15-30 ms on every turn, though all but a few
hundred characters of it repeat the turn before: the same tools, system prompt and earlier turns. So each piece
(``Pieces``: the tools' JSON, each role marker, each message's text) is counted alone and its count kept in an
LRU: a repeated piece costs a dictionary lookup, only new pieces are encoded. A repeated Claude Code request
then costs ~0.05 ms, its next turn ~0.2 ms (docs/benchmarks.md, "What an agent's request costs the gateway").

Tokens do not stop at piece boundaries: a pre-token can run across one (``.<`` is one pre-token of byte-level
BPE, ``>Hello`` one of Llama 3's), and the pieces' counts then differ from the whole text's, either way (-1 to
+4 tokens at 300 cuts at random places in Claude Code's prompt, the tiny model's tokenizer). So each boundary,
a seam, adds what the text around it tokenizes to together less apart: tokens(left + right) - tokens(left) -
tokens(right), left and right the ``SEAM_CHARS`` characters either side; it is cached as pieces are. The count
then equals the whole text's encode on every request captured from the agents (tests/bench/agent_sessions:
15 Claude Code and 15 Codex requests, as sent and as the gateway rewrites them: 60 prompts, 6-24 boundaries
each; the pieces alone happen to match there too, their boundaries falling where this tokenizer splits anyway),
and at all 300 random cuts, with the tiny model's byte-level BPE, the same vocabulary under Llama 3's
pre-tokenizer, and MiniLM's WordPiece (8 characters a side missed 2-4 of the cuts by a token or two). What
can still differ is a pre-token longer than a seam's window across a boundary (a long run of spaces cut in
two), or one spanning a whole short piece and both its seams: a token or two, against the 2 % and 64 tokens
``context_fit.prompt_spare`` keeps beyond an exact count. So ``exact`` stays true.

The cache holds at most ``MAX_ENTRIES`` counts and ``MAX_CHARS`` characters of keys (pieces, seams' windows):
8 Mi characters hold the whole conversations of ~50 agent sessions of 160 KB (40,000 tokens), a CLI's tools
and system prompt held once for all its sessions; 32,768 entries, ~3 a message (its text, the seams either
side), hold ~200 messages of each of those sessions at 170-310 bytes an entry (key, node, count): ~10 MB, plus
8 MiB of ASCII text (2 or 4 bytes a character in a string of wider ones). A piece of more than a sixteenth of
``MAX_CHARS`` is encoded every time rather than held, so that no one piece evicts more than a sixteenth of the
rest. Every other piece is held however short: a role marker costs ~4 us to encode and ~0.2 us to look up;
hashing is O(n) but some 700 times cheaper than encoding (a 4 KB piece: 2.4 us against 1.6 ms, on 2 cores of
AMD EPYC). A miss costs what every count cost before: an encode.

The gateway runs one asyncio event loop per process and counts on it, so the cache is never touched by two
threads at once and takes no lock; it is not safe to share between threads.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from typing import Protocol

from policies.prompt.stable_prefix import Pieces

SEAM_CHARS = 16  # characters either side of a boundary encoded together: 16 got all 300 random cuts right, 8 not
MAX_ENTRIES = 32_768  # counts held: pieces and seams
MAX_CHARS = 8 * 1024 * 1024  # characters of keys held
PIECE_SHARE = 16  # a piece of more than this share of MAX_CHARS is encoded every time rather than held


class Encoding(Protocol):
    @property
    def ids(self) -> list[int]: ...


class Encoder(Protocol):
    """What the counter needs of a tokenizer: ``tokenizers.Tokenizer``, or a test's stand-in."""

    def encode(self, sequence: str, *, add_special_tokens: bool) -> Encoding: ...


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
    """Counts a prompt's pieces, with the model's tokenizer (``tokenizer_path``, or ``tokenizer``: an encoder
    object, as tests pass one) or else the estimate."""

    __slots__ = ("_counts", "_held", "max_chars", "max_entries", "tokenizer")

    def __init__(self, tokenizer_path: str | None = None, *, tokenizer: Encoder | None = None,
                 max_entries: int = MAX_ENTRIES, max_chars: int = MAX_CHARS) -> None:
        self.tokenizer = tokenizer
        if tokenizer_path is not None:
            from tokenizers import Tokenizer  # only loaded when configured

            self.tokenizer = Tokenizer.from_file(tokenizer_path)
        self.max_entries = max_entries
        self.max_chars = max_chars
        # a piece -> its tokens, a seam's (left, right) -> its correction; the least recently used first
        self._counts: OrderedDict[str | tuple[str, str], int] = OrderedDict()
        self._held = 0  # characters of the keys in _counts

    @property
    def exact(self) -> bool:
        """Counts with the model's tokenizer, rather than estimating (what a count that must fit the engine's
        context allows for: ``output_room``)."""
        return self.tokenizer is not None

    @property
    def held(self) -> tuple[int, int]:
        """The cache's entries and the characters of their keys."""
        return len(self._counts), self._held

    def count(self, pieces: Pieces) -> int:
        tokenizer = self.tokenizer
        if tokenizer is None:
            return estimate_prompt_tokens(pieces)
        total, previous = 0, ""
        for piece in pieces:
            if not piece:
                continue  # not in the text: the seam is between its neighbours
            total += self._piece(tokenizer, piece)
            if previous:
                total += self._seam(tokenizer, previous[-SEAM_CHARS:], piece[:SEAM_CHARS])
            previous = piece
        return total

    def _piece(self, tokenizer: Encoder, piece: str) -> int:
        found = self._cached(piece)
        if found is None:
            found = _tokens(tokenizer, piece)
            if len(piece) <= self.max_chars // PIECE_SHARE:
                self._keep(piece, found)
        return found

    def _seam(self, tokenizer: Encoder, left: str, right: str) -> int:
        """What the text at a boundary tokenizes to together less apart."""
        key = (left, right)
        found = self._cached(key)
        if found is None:
            found = _tokens(tokenizer, left + right) - _tokens(tokenizer, left) - _tokens(tokenizer, right)
            self._keep(key, found)
        return found

    def _cached(self, key: str | tuple[str, str]) -> int | None:
        found = self._counts.get(key)
        if found is not None:
            self._counts.move_to_end(key)
        return found

    def _keep(self, key: str | tuple[str, str], tokens: int) -> None:
        counts = self._counts
        counts[key] = tokens
        self._held += _chars(key)
        while len(counts) > self.max_entries or self._held > self.max_chars:
            self._held -= _chars(counts.popitem(last=False)[0])


def _tokens(tokenizer: Encoder, text: str) -> int:
    return len(tokenizer.encode(text, add_special_tokens=False).ids)


def _chars(key: str | tuple[str, str]) -> int:
    return len(key) if isinstance(key, str) else len(key[0]) + len(key[1])
