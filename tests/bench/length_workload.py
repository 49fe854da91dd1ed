"""Seeded workloads of chat requests whose output length the gateway cannot see.

``workload(seed, requests, kind)``: ``mixed`` (the default) or ``decisive``.

The mixed workload: three tenants run seven apps. Each app has its own system prompt, from one short line to
about four thousand tokens, user messages that differ on every request, and its own output-length distribution:

- ``acme/sentiment``: a one-line classifier prompt, answers of 1-3 tokens, the client sends max_tokens 1024;
- ``acme/support-chat``: a 3,000-character prompt with the current time in it, lognormal answers
  (median 150 tokens, sigma 1: about 70 % of them 256 tokens or fewer), no max_tokens;
- ``globex/summarize``: a style guide of about 4,000 tokens; summaries of about 140 tokens that become
  detailed ones of about 650 tokens halfway through the run (drift: the client's instruction changed,
  in the user message, so the template stays the same); max_tokens 4096;
- ``globex/agent``: ``tools`` in every body; a step answers with a short tool call (median 45 tokens)
  or, once tool results came back, with a long final answer (median 550 tokens); max_tokens 4096;
- ``initech/extract``: ``response_format`` json_object with a schema in the system prompt, about 110
  tokens, a few long lists; no max_tokens;
- ``initech/intent``: a short JSON classifier prompt (``response_format``), answers of 8-16 tokens;
- ``initech/codegen``: code answers of about 900 tokens that become diffs of about 120 halfway through
  the run (drift the other way); max_tokens 4096.

The decisive workload: five apps whose answers never straddle the short pool's default threshold of 256
tokens, each staying a factor of two (the gateway's ``DECISIVE_MARGIN``) to its side of it, at most
``SHORT_MOST`` or at least ``LONG_LEAST`` tokens (the generator checks every answer against its app's side):

- ``acme/ticket-label``: a one-line classifier prompt, answers of 1-3 tokens;
- ``initech/intent``: the mixed workload's JSON intent classifier, answers of 8-16 tokens;
- ``acme/quick-reply``: a 2,000-character prompt, replies of 30-100 tokens (median 55);
- ``globex/writer``: a 3,000-character style guide, articles of about 600 tokens (at least 520);
- ``initech/code-writer``: a 1,200-character prompt, code of about 900 tokens (at most 1024).

No request sends max_tokens, so the gateway cannot read a length from the body: only a template's answers
say which side it is on. The weights give short answers about three requests in four and about 210 tokens
a request, as the mixed workload's (about 75 % and 220).

Each ``LengthRequest`` carries the client's body and, apart from it, the true output length: the body
never holds it. In the routing bench the engine learns it from ``engine_body``, the copy sent to the
engine only: ``max_tokens`` = ``min_tokens`` = the true length and vLLM's ``ignore_eos``, so the engine
writes exactly that many tokens while the gateway saw the client's body, with the client's max_tokens.
``TRUTH_FIELDS`` names what only that copy may carry; the prediction bench asserts the body admission
receives has none of them and equals what the client sent.

Pure Python, no clock: the same seed gives the same requests.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

from tests.support.chat_body import chat_body

MODEL = "bench-model"
TRUTH_FIELDS = frozenset({"min_tokens", "ignore_eos", "true_tokens"})
# a decisive app's answers, short or long: a factor of two either side of the short pool's default threshold (256)
SHORT_MOST = 128
LONG_LEAST = 512
WORDS = ("account access agent alert answer api archive audit backup balance batch billing browser budget cache "
         "calendar charge cluster config contract customer dashboard data deadline deploy device disk domain "
         "draft email engine error event export feature file filter firewall folder invoice issue job key "
         "latency license limit log login memory message metric migration model monitor network node order "
         "password payment plan policy pool portal price project query queue quota record region release "
         "report request role router schedule schema server service session setting shipment storage "
         "subscription support table team ticket timeout token traffic upgrade upload user vendor version "
         "volume warning webhook window workflow slow fast broken missing late early strange expected "
         "urgent simple complex weekly monthly new old shared private public").split()


@dataclass(frozen=True, slots=True)
class LengthRequest:
    tenant: str
    app: str  # "tenant/app"
    body: dict[str, Any]  # what the client sends: all the gateway may read
    true_tokens: int  # what the engine will write; never in ``body``
    drifted: bool  # after the change point of an app whose lengths change halfway
    kind: str  # the kind of answer ("tool call", "final answer", "diff"...): as hidden as the length


def engine_body(request: LengthRequest) -> dict[str, Any]:
    """The copy sent to the engine: it writes exactly ``true_tokens`` tokens."""
    true = request.true_tokens
    return {**request.body, "max_tokens": true, "min_tokens": true, "ignore_eos": True}


def words(rng: random.Random, count: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(count))


def paragraphs(rng: random.Random, chars: int) -> str:
    """Rules of a system prompt, about ``chars`` characters of them."""
    lines: list[str] = []
    while sum(map(len, lines)) < chars:
        lines.append(f"{len(lines) + 1}. {words(rng, rng.randint(12, 30)).capitalize()}.")
    return "\n".join(lines)


def lognormal(rng: random.Random, median: float, sigma: float, low: int = 1, high: int = 4096) -> int:
    return max(low, min(high, round(rng.lognormvariate(math.log(median), sigma))))


def normal(rng: random.Random, mean: float, sd: float, low: int = 1) -> int:
    return max(low, round(rng.gauss(mean, sd)))


chat = partial(chat_body, model=MODEL)


@dataclass(frozen=True, slots=True)
class App:
    tenant: str
    name: str
    weight: float  # share of the requests
    # (rng, request number, drifted) -> (client body, true length, kind of answer)
    make: Callable[[random.Random, int, bool], tuple[dict[str, Any], int, str]]
    drifts: bool = False
    side: Literal["short", "long"] | None = None  # every answer at most SHORT_MOST, or at least LONG_LEAST


def _prompts() -> dict[str, str]:
    """System prompts, the same in every run: a template is the app's, not the seed's."""
    rng = random.Random(27)
    return {
        "sentiment": "Classify the sentiment of the review. Answer with one word: positive, negative or neutral.",
        "intent": 'Return the intent of the message as JSON: {"intent": "billing" | "cancel" | "upgrade" | "other"}.',
        "support": "You are the support assistant of Acme Cloud.\nCurrent time: {now}.\n" + paragraphs(rng, 3000),
        "summarize": "You summarize internal reports for Globex. Follow the style guide.\n" + paragraphs(rng, 16000),
        "agent": "You are Globex's operations agent. Use the tools; answer when you have what you need.\n"
                 + paragraphs(rng, 1500),
        "extract": "Extract the order from the email as JSON with this schema: {\"customer\": str, \"items\": "
                   "[{\"sku\": str, \"quantity\": int}], \"deadline\": str | null}.\n" + paragraphs(rng, 600),
        "codegen": "You are Initech's coding assistant for the billing service.\n" + paragraphs(rng, 1200),
    }


PROMPTS = _prompts()
TOOLS = [{"type": "function", "function": {
    "name": name, "description": f"{description} Returns JSON.", "parameters": {
        "type": "object", "properties": {arg: {"type": "string", "description": f"the {arg}"} for arg in args},
        "required": list(args)}}}
    for name, description, args in (
        ("search_tickets", "Search the ticket system by free text and status.", ("query", "status")),
        ("get_metrics", "Read a service metric over a time range.", ("service", "metric", "since")),
        ("restart_service", "Restart one service in one region after a health check.", ("service", "region")))]


def sentiment(rng: random.Random, n: int, drifted: bool) -> tuple[dict[str, Any], int, str]:
    return chat(PROMPTS["sentiment"], words(rng, rng.randint(10, 80)), max_tokens=1024), rng.randint(1, 3), "label"


def intent(rng: random.Random, n: int, drifted: bool) -> tuple[dict[str, Any], int, str]:
    body = chat(PROMPTS["intent"], words(rng, rng.randint(5, 40)), response_format={"type": "json_object"})
    return body, rng.randint(8, 16), "label"


def support(rng: random.Random, n: int, drifted: bool) -> tuple[dict[str, Any], int, str]:
    now = f"2026-11-25T{9 + n // 3600 % 12:02d}:{n // 60 % 60:02d}:{n % 60:02d}Z"
    body = chat(PROMPTS["support"].format(now=now), words(rng, rng.randint(8, 120)) + "?")
    return body, lognormal(rng, 150, 1.0), "reply"


def summarize(rng: random.Random, n: int, drifted: bool) -> tuple[dict[str, Any], int, str]:
    ask = "Write a detailed summary, with a section per topic:" if drifted else "Summarize in one paragraph:"
    body = chat(PROMPTS["summarize"], f"{ask}\n\n{paragraphs(rng, rng.randint(1500, 8000))}", max_tokens=4096)
    if drifted:
        return body, normal(rng, 650, 150, low=300), "detailed summary"
    return body, normal(rng, 140, 35, low=20), "paragraph"


def agent(rng: random.Random, n: int, drifted: bool) -> tuple[dict[str, Any], int, str]:
    """A step of a tool loop: after 0-3 tool results the model calls a tool again or answers."""
    body = chat(PROMPTS["agent"], f"Incident {n}: {words(rng, rng.randint(10, 60))}", tools=TOOLS, max_tokens=4096)
    rounds = rng.randint(0, 3)
    for step in range(rounds):
        call = {"id": f"call_{n}_{step}", "type": "function",
                "function": {"name": TOOLS[step % 3]["function"]["name"], "arguments": "{}"}}
        body["messages"] += [{"role": "assistant", "content": None, "tool_calls": [call]},
                             {"role": "tool", "tool_call_id": call["id"], "content": words(rng, rng.randint(20, 200))}]
    final = rounds > 0 and rng.random() < 0.45
    if final:
        return body, lognormal(rng, 550, 0.5), "final answer"
    return body, lognormal(rng, 45, 0.5, low=10, high=200), "tool call"


def extract(rng: random.Random, n: int, drifted: bool) -> tuple[dict[str, Any], int, str]:
    body = chat(PROMPTS["extract"], words(rng, rng.randint(40, 300)), response_format={"type": "json_object"})
    return body, rng.randint(300, 700) if rng.random() < 0.03 else normal(rng, 110, 35, low=20), "record"


def codegen(rng: random.Random, n: int, drifted: bool) -> tuple[dict[str, Any], int, str]:
    ask = "Reply with a unified diff only." if drifted else "Write the code and explain it."
    body = chat(PROMPTS["codegen"], f"{ask} {words(rng, rng.randint(15, 150))}", max_tokens=4096)
    if drifted:
        return body, lognormal(rng, 120, 0.4), "diff"
    return body, lognormal(rng, 900, 0.5), "code"


APPS = (
    App("acme", "sentiment", 0.15, sentiment),
    App("acme", "support-chat", 0.22, support),
    App("globex", "summarize", 0.13, summarize, drifts=True),
    App("globex", "agent", 0.20, agent),
    App("initech", "extract", 0.10, extract),
    App("initech", "intent", 0.08, intent),
    App("initech", "codegen", 0.12, codegen, drifts=True),
)


def _decisive_prompts() -> dict[str, str]:
    rng = random.Random(54)
    return {
        "label": "Label the support ticket: bug, billing, access or other. Answer with the label only.",
        "reply": "You are Acme's chat assistant. Answer in two or three sentences, never more.\n"
                 + paragraphs(rng, 2000),
        "writer": "You write long articles for Globex's engineering blog. Follow the style guide.\n"
                  + paragraphs(rng, 3000),
        "code": "You are Initech's code writer for the billing service: write whole modules.\n"
                + paragraphs(rng, 1200),
    }


DECISIVE_PROMPTS = _decisive_prompts()


def ticket_label(rng: random.Random, n: int, drifted: bool) -> tuple[dict[str, Any], int, str]:
    return chat(DECISIVE_PROMPTS["label"], words(rng, rng.randint(10, 80))), rng.randint(1, 3), "label"


def quick_reply(rng: random.Random, n: int, drifted: bool) -> tuple[dict[str, Any], int, str]:
    body = chat(DECISIVE_PROMPTS["reply"], words(rng, rng.randint(8, 60)) + "?")
    return body, lognormal(rng, 55, 0.3, low=30, high=100), "reply"


def article(rng: random.Random, n: int, drifted: bool) -> tuple[dict[str, Any], int, str]:
    body = chat(DECISIVE_PROMPTS["writer"], f"Write an article about {words(rng, rng.randint(5, 30))}.")
    return body, normal(rng, 600, 50, low=520), "article"


def code(rng: random.Random, n: int, drifted: bool) -> tuple[dict[str, Any], int, str]:
    body = chat(DECISIVE_PROMPTS["code"], f"Write the module: {words(rng, rng.randint(15, 150))}")
    return body, lognormal(rng, 900, 0.1, low=LONG_LEAST, high=1024), "code"


DECISIVE_APPS = (
    App("acme", "ticket-label", 0.25, ticket_label, side="short"),
    App("initech", "intent", 0.15, intent, side="short"),
    App("acme", "quick-reply", 0.35, quick_reply, side="short"),
    App("globex", "writer", 0.13, article, side="long"),
    App("initech", "code-writer", 0.12, code, side="long"),
)
WORKLOADS = {"mixed": APPS, "decisive": DECISIVE_APPS}


def workload(seed: int, requests: int = 6000, kind: str = "mixed") -> list[LengthRequest]:
    """``requests`` requests of the ``kind`` workload's apps interleaved at random in their shares; the drifting
    apps change at the run's midpoint. A true length never exceeds the client's max_tokens, and a decisive app's
    never leaves its side (checked here, so a change to its lengths cannot quietly make it straddle)."""
    apps = WORKLOADS[kind]
    rng = random.Random(seed)  # the arrivals, then each request's draws, in arrival order
    made: dict[str, int] = {}
    out = []
    for index, app in enumerate(rng.choices(apps, weights=[app.weight for app in apps], k=requests)):
        name = f"{app.tenant}/{app.name}"
        number = made[name] = made.get(name, 0) + 1
        drifted = app.drifts and index >= requests // 2
        body, true, kind_of_answer = app.make(rng, number, drifted)
        cap = body.get("max_tokens")
        true = min(true, cap) if cap else true
        assert app.side is None or (true <= SHORT_MOST if app.side == "short" else true >= LONG_LEAST), (
            f"{name} answered {true} tokens: off its {app.side} side")
        out.append(LengthRequest(app.tenant, name, body, true, drifted, kind_of_answer))
    return out
