"""An output cap that fits the engine's context: what a request may ask for once its prompt is in.

An engine holds at most ``max_model_len`` tokens of prompt and answer together, and vLLM refuses (400) a request
whose output cap is more than its prompt leaves. Coding agents ask for a fixed 32,000 tokens whatever their
prompt, so on a 64K context a long conversation would be refused where a shorter answer could be written. The
gateway lowers such a cap to what fits instead: the answer ends where the context does, with ``finish_reason``
"length", as if the client had asked for that much. A cap that fits is left as sent, and so is one where
nothing fits: the engine's own refusal then names the prompt's length.

The prompt's tokens are the gateway's count, which is short of the engine's: an exact count (the model's
tokenizer) leaves out the chat template's markers and special tokens, so 2 % and 64 tokens are kept spare; an
estimate (four characters a token) undercounts text that tokenizes finely (digits, symbols, code) by up to a
third, so it is taken as half as much again. The spare never takes more than half of what the count leaves:
past that, a cap the count says fits is better than a refusal the spare makes certain.
"""

from __future__ import annotations

from typing import Any

from policies.admission.token_caps import requested_output

SPARE_TOKENS = 64  # what an exact count leaves out at least: special tokens, the template's last markers
SPARE_PER = 50  # and one token in this many: each message's role markers
ESTIMATE_SCALE = (3, 2)  # an estimate is taken as 3/2 of itself: it undercounts dense text by up to a third


def prompt_spare(prompt_tokens: int, exact: bool) -> int:
    """Tokens kept free beyond the count for what it may miss of the prompt as the engine renders it."""
    counted = prompt_tokens if exact else -(-prompt_tokens * ESTIMATE_SCALE[0] // ESTIMATE_SCALE[1])
    return counted - prompt_tokens + counted // SPARE_PER + SPARE_TOKENS


def output_room(max_model_len: int, prompt_tokens: int, exact: bool) -> int | None:
    """The most output tokens that fit the context after the prompt (``exact``: counted with the model's own
    tokenizer); None where the count alone leaves none."""
    left = max_model_len - prompt_tokens
    if left < 1:
        return None
    return max(1, left - min(prompt_spare(prompt_tokens, exact), left // 2))


def surely_fits(cap: int, prompt_bytes: int, max_model_len: int) -> bool:
    """Whether a cap fits however the prompt tokenizes: no tokenizer makes more tokens than the text has UTF-8
    bytes (byte-level BPE, or byte fallback), the template's markers aside, which the spare covers. The prompt
    need not be counted then, which with a tokenizer costs an encode of the whole prompt."""
    return cap + prompt_bytes + prompt_spare(prompt_bytes, exact=True) <= max_model_len


def fit_output(body: dict[str, Any], fields: tuple[str, ...], room: int) -> tuple[dict[str, Any], int] | None:
    """The body with its output cap (one of its endpoint's ``fields``) lowered to ``room``, and that cap; None
    where it names none (the engine then writes to the end of the context itself) or it fits."""
    field, requested = requested_output(body, fields)
    if requested is None or requested <= room:
        return None
    fitted = {**body, field: room}
    for other in fields:  # a second, larger field (chat's max_tokens beside max_completion_tokens) would undo it
        if other != field and isinstance(fitted.get(other), int) and fitted[other] > room:
            fitted[other] = room
    return fitted, room
