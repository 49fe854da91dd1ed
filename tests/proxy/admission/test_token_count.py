"""The prompt's tokens counted piece by piece, a repeated piece from the cache, equal to the whole text's count."""

from __future__ import annotations

import gzip
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from policies.prompt.messages import messages_conversation, rewrite_messages
from policies.prompt.prompt import PromptPolicy
from policies.prompt.responses import responses_messages, rewrite_responses
from policies.prompt.stable_prefix import Pieces, chat_pieces
from proxy.admission.token_count import SEAM_CHARS, TokenCounter, estimate_prompt_tokens
from proxy.engine.tiny_model import ensure_tiny_model

SESSIONS = Path(__file__).resolve().parents[2] / "bench" / "agent_sessions"
SYSTEM = "You are a coding agent. Read the files before you change them, and run the tests after. " * 20
TOOLS = json.dumps([{"name": f"tool_{n}", "description": "Does one thing well. " * 10} for n in range(8)])


@dataclass
class Encoded:
    ids: list[int]


@dataclass
class Words:
    """A tokenizer whose tokens are the text's words, that keeps what it was asked to encode."""

    encoded: list[str] = field(default_factory=list)

    def encode(self, sequence: str, *, add_special_tokens: bool) -> Encoded:
        self.encoded.append(sequence)
        return Encoded(list(range(len(sequence.split()))))


def words(pieces: Pieces) -> int:
    return len("".join(pieces).split())


def fresh(pieces: Pieces) -> Pieces:
    """The same text in new strings, as the next request's parsed body holds it."""
    return tuple(json.loads(json.dumps(pieces)))


def test_a_repeated_prompt_encodes_only_its_new_pieces() -> None:
    tokenizer = Words()
    counter = TokenCounter(tokenizer=tokenizer)
    first = (TOOLS, "<system>", SYSTEM, "<user>", "Fix the failing test in parser.py, please.")
    assert counter.count(first) == words(first)
    assert TOOLS in tokenizer.encoded and SYSTEM in tokenizer.encoded

    tokenizer.encoded.clear()
    assert counter.count(fresh(first)) == words(first)
    assert tokenizer.encoded == []  # every piece and seam from the cache

    turn = (*first, "<assistant>", "Done: the regex missed a trailing comma.", "<user>", "Now add a test for it.")
    assert counter.count(fresh(turn)) == words(turn)
    new = {"<assistant>", "Done: the regex missed a trailing comma.", "Now add a test for it."}
    assert {text for text in tokenizer.encoded if len(text) > 2 * SEAM_CHARS} <= new  # the rest: seams' windows
    assert new <= set(tokenizer.encoded)


def test_pieces_cut_anywhere_count_as_the_whole_text() -> None:
    """Words cut in two at a boundary are one token of the whole text: the seams take the extra ones off."""
    rng = random.Random(3)
    text = " ".join(rng.choice(["a", "tokenizer", "counts", "each", "piece", "apart"]) for _ in range(3000))
    counter = TokenCounter(tokenizer=Words())
    for _ in range(200):
        cuts = sorted(rng.sample(range(1, len(text)), rng.randint(1, 12)))
        pieces = tuple(text[start:end] for start, end in zip([0, *cuts], [*cuts, len(text)], strict=True))
        assert counter.count(pieces) == words(pieces)


def test_the_cache_stays_within_its_bounds() -> None:
    """Many distinct prompts: never more than the entries and characters allowed; a piece every prompt repeats
    stays (least recently used goes first); a piece too long to hold is counted, not kept."""
    tokenizer = Words()
    counter = TokenCounter(tokenizer=tokenizer, max_entries=50, max_chars=2000)
    shared = "Answer in English. " * 5  # 95 characters: under a sixteenth of 2,000
    rng = random.Random(5)
    for n in range(500):
        pieces = ("<system>", shared, "<user>",
                  *(" ".join(f"w{n}x{rng.randrange(10**6)}" for _ in range(rng.randint(1, 40))) for _ in range(3)))
        assert counter.count(pieces) == words(pieces)
        entries, chars = counter.held
        assert entries <= 50 and chars <= 2000
        assert chars == sum(len(key) if isinstance(key, str) else len(key[0]) + len(key[1])
                            for key in counter._counts)
    assert tokenizer.encoded.count(shared) == 1  # encoded for the first prompt only

    long = "word " * 100  # 500 characters: more than a sixteenth of 2,000
    counter.count((long,))
    tokenizer.encoded.clear()
    counter.count(fresh((long,)))
    assert tokenizer.encoded == [long]


def test_without_a_tokenizer_the_count_is_the_estimate() -> None:
    counter = TokenCounter()
    pieces = ("<system>", SYSTEM, "<user>", "Wie spät ist es? 今何時ですか")
    assert counter.count(pieces) == estimate_prompt_tokens(pieces)
    assert not counter.exact and counter.held == (0, 0)


@pytest.fixture(scope="module")
def tiny_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(ensure_tiny_model(tmp_path_factory.mktemp("tiny")) / "tokenizer.json"))


def agent_prompts() -> list[Pieces]:
    """The captured agents' requests rendered as the gateway renders them: on its default prompt policy, and as
    sent."""
    policy, prompts = PromptPolicy(), []
    with gzip.open(SESSIONS / "claude_code.jsonl.gz", "rt") as lines:
        for line in lines:
            body = json.loads(line)["body"]
            prompts += [chat_pieces(messages_conversation(rewrite_messages(body, policy).body)),
                        chat_pieces(messages_conversation(body))]
    with gzip.open(SESSIONS / "codex.jsonl.gz", "rt") as lines:
        for line in lines:
            body = json.loads(line)["body"]
            prompts += [chat_pieces(responses_messages(rewrite_responses(body, policy).body)),
                        chat_pieces(responses_messages(body))]
    return prompts


def whole(tokenizer: Any, text: str) -> int:
    return len(tokenizer.encode(text, add_special_tokens=False).ids)


def test_agent_prompts_count_as_their_whole_text(tiny_tokenizer: Any) -> None:
    """The bound token_count.py states: on the captured agents' requests (~22,000-28,500 tokens, 6-24 boundaries
    each) the count is the whole text's encode, with one counter across them all as the gateway keeps it."""
    counter = TokenCounter(tokenizer=tiny_tokenizer)
    prompts = agent_prompts()
    assert len(prompts) == 60
    for pieces in prompts:
        assert counter.count(pieces) == whole(tiny_tokenizer, "".join(pieces))


def test_a_boundary_anywhere_in_an_agent_prompt_counts_as_the_whole_text(tiny_tokenizer: Any) -> None:
    """A cut at a random place in Claude Code's prompt (mid-word, mid-JSON, in a run of spaces) counts as the
    text uncut: the pieces alone are off by -1 to +4 tokens at some of these cuts."""
    text = "".join(agent_prompts()[0])
    rng = random.Random(1)
    counter = TokenCounter(tokenizer=tiny_tokenizer)
    for cut in (rng.randrange(1, len(text)) for _ in range(300)):
        left, right = text[max(0, cut - 2000):cut], text[cut:cut + 2000]
        assert counter.count((left, right)) == whole(tiny_tokenizer, left + right), cut
