"""A request's token IDs as the engine will see them, to match against the blocks it reports.

vLLM turns a chat into tokens with the model's chat template (rendered to text by transformers'
``apply_chat_template``, with the generation prompt) and then its tokenizer without special tokens; a
completion's prompt with them. ``PromptTokens`` does the same with the same files, the model's folder,
so a held block's tokens and a request's agree exactly (shown on a real engine's own blocks in the
tests); any case where they do not (a template reading fields vLLM fills in itself) costs routing
quality, never correctness: the request goes by the ring.

Only the rendered prompt's first ``max_chars`` characters are tokenized, cut before a space so no word
is cut in two (tokenizers split words at spaces first, so the tokens before the cut are the whole
text's): routing needs the prefix an engine may hold, and a long conversation's tail would cost
tokenizer time for nothing.
"""

from __future__ import annotations

from typing import Any

from policies.prompt.message_text import is_text_part, text_of

DEFAULT_MAX_CHARS = 32_768


def _content_text(content: Any) -> Any:
    """vLLM's string form of a message's content: text parts joined by newlines."""
    if isinstance(content, list) and all(is_text_part(part) for part in content):
        return text_of(content)
    return content


def _content_parts(content: Any) -> Any:
    """vLLM's parts form of a message's content: each text part (chat's ``text``, the Responses API's
    ``input_text`` and ``output_text``) as a chat ``text`` part, and nothing else of it."""
    if isinstance(content, list):
        return [{"type": "text", "text": part["text"]} if is_text_part(part) else part for part in content]
    return content


def reads_content_parts(template: str) -> bool:
    """Whether a chat template loops over a message's content parts, which vLLM then hands it as they came (its
    content format ``openai``), where a template that reads content as a string gets the text parts joined by
    newlines (``string``). vLLM's detection (``_detect_content_format``) reads the template's syntax tree for a loop
    over ``message['content']``, ``message.content`` or a variable named ``content``; so does this, without
    following macros or content assigned to another name first."""
    import jinja2

    try:
        root = jinja2.Environment(extensions=["jinja2.ext.loopcontrols"]).parse(template)
    except jinja2.TemplateError:
        return False
    for loop in root.find_all(jinja2.nodes.For):
        looped = loop.iter
        if isinstance(looped, jinja2.nodes.Getitem) and isinstance(looped.arg, jinja2.nodes.Const) \
                and looped.arg.value == "content":
            return True
        if (isinstance(looped, jinja2.nodes.Getattr) and looped.attr == "content") \
                or (isinstance(looped, jinja2.nodes.Name) and looped.name == "content"):
            return True
    return False


def _developer_as_system(conversation: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What vLLM sends a template that has no developer role: developer messages as system ones, and,
    where a system message is then not the first, all system texts merged first (joined by a blank line)."""
    converted = [{**message, "role": "system"} if message.get("role") == "developer" else message
                 for message in conversation]
    systems = [index for index, message in enumerate(converted) if message.get("role") == "system"]
    if not systems or systems == [0]:
        return converted
    texts = [str(converted[index].get("content") or "") for index in systems]
    merged = {"role": "system", "content": "\n\n".join(text for text in texts if text)}
    return [merged, *(message for message in converted if message.get("role") != "system")]


class PromptTokens:
    """The model's chat template and tokenizer, loaded once from its folder."""

    def __init__(self, folder: str, max_chars: int = DEFAULT_MAX_CHARS) -> None:
        try:
            from transformers import AutoTokenizer  # only loaded for pools that route by KV events
        except ImportError:
            raise RuntimeError("balance kv_events renders prompts with the model's chat template: install "
                               "prefixgate[kv-events] (transformers)") from None

        self.template = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        self.tokenizer = self.template.backend_tokenizer  # the Rust tokenizer, without Python wrapping
        template = self.template.chat_template if isinstance(self.template.chat_template, str) else ""
        self.developer_role = '"developer"' in template or "'developer'" in template  # vLLM's test for it
        self.content = _content_parts if reads_content_parts(template) else _content_text
        self.max_chars = max_chars

    def rendered(self, body: dict[str, Any]) -> tuple[str, bool] | None:
        """The text the engine tokenizes for a chat or completions body, and whether it adds special
        tokens to it; None for a shape this does not render (a list of prompts, token IDs)."""
        messages = body.get("messages")
        if isinstance(messages, list):
            tools = body.get("tools") if body.get("tool_choice") != "none" else None
            conversation = [{**message, "content": self.content(message.get("content"))}
                            for message in messages if isinstance(message, dict)]
            if not self.developer_role and any(message.get("role") == "developer" for message in conversation):
                conversation = _developer_as_system(conversation)
            text = self.template.apply_chat_template(conversation, tools=tools if isinstance(tools, list) else None,
                                                     tokenize=False, add_generation_prompt=True)
            return str(text), False
        prompt = body.get("prompt")
        return (prompt, True) if isinstance(prompt, str) else None

    def encode(self, text: str, *, special: bool) -> list[int]:
        ids: list[int] = self.tokenizer.encode(text, add_special_tokens=special).ids
        return ids

    def of_body(self, body: dict[str, Any]) -> list[int] | None:
        """All the tokens the engine computes for ``body`` (within ``max_chars``, cut before a space)."""
        rendered = self.rendered(body)
        if rendered is None:
            return None
        text, special = rendered
        if len(text) > self.max_chars:
            cut = text.rfind(" ", 0, self.max_chars)
            text = text[:cut if cut > 0 else self.max_chars]
        return self.encode(text, special=special)

    def of_chat(self, messages: list[dict[str, Any]], tools: list[Any] | None = None) -> list[int]:
        tokens = self.of_body({"messages": messages, **({"tools": tools} if tools else {})})
        assert tokens is not None
        return tokens

    def splits_cleanly(self) -> bool:
        """Whether this tokenizer gives a text's tokens when the text is cut before a space and its
        pieces tokenized apart (``PrefixWalk`` relies on it), on a sample of prose, code and numbers."""
        sample = (SAMPLE * 3).strip()
        whole = self.encode(sample, special=False)
        cuts = [cut for cut in range(1, len(sample)) if sample[cut] == " "]
        return all(self.encode(sample[:cut], special=False) + self.encode(sample[cut:], special=False) == whole
                   for cut in cuts)


SAMPLE = ("Refunds take 5-7 business days, or 2 for premium accounts (see §4.2).  Call refund(order_id=\"A-17\", "
          "amount=12.50) then\n  print(status)   # done\n\tNext: naïve café, 東京 2026-11-25T09:00:00Z ok? ")
