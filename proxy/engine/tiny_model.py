"""Build the tiny Llama model that the embedded engine serves when nothing else is configured.

No model can be downloaded on the machines prefixgate targets first, so it makes its own:
random weights (seeded), a byte-level BPE tokenizer trained on generated text, a chat template.
Its answers are junk, but vLLM serves it for real: batching, prefix caching and /metrics work.
Takes a few seconds; the result is cached under the data directory and built atomically.
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

MODEL_VERSION = "prefixgate-tiny-llama-v3"  # v3: 65,536 positions (v2 had 4,096)
log = logging.getLogger("prefixgate")

VOCAB_SIZE = 4096
# A coding agent's prompt is ~45,000 tokens of this tokenizer, its answer up to 32,000 more. Rope has no
# weights and the rest is seeded, so the positions change nothing else.
MAX_POSITIONS = 65_536
SPECIAL_TOKENS = ["<s>", "</s>", "<pad>"]
# Tools come first, one JSON object per line, as real templates put them in the prompt's head (key order
# as sent: it is the gateway's job, not the template's, to make it stable).
CHAT_TEMPLATE = (
    "{% if tools %}<|tools|>\n{% for tool in tools %}{{ tool | tojson }}\n{% endfor %}{% endif %}"
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% elif message['content'] %}{% for part in message['content'] %}"
    "{% if part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)

_WORDS = (
    "the a an of to in and for on with by from as is are was be this that it at or not you your we our "
    "system user assistant tool answer question context document passage source cite search retrieve "
    "model prompt token cache prefix request response tenant policy time date today current trace span "
    "session id uuid json schema function name description parameters type string number object array "
    "required true false null error message stream chunk usage limit rate queue pool replica latency "
    "please explain summarize list compare write code python def return import class value key data "
    "price version phone address email order invoice customer product support ticket status update"
).split()


def _corpus(lines: int, seed: int) -> Iterator[str]:
    rng = random.Random(seed)
    for _ in range(lines):
        words = [rng.choice(_WORDS) for _ in range(rng.randint(6, 30))]
        if rng.random() < 0.3:
            words.append(f"{rng.randint(0, 9999)}")
        if rng.random() < 0.2:
            words.append(f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:00:00Z")
        if rng.random() < 0.2:
            words.append(f'{{"name": "{rng.choice(_WORDS)}", "type": "{rng.choice(_WORDS)}"}}')
        sentence = " ".join(words)
        yield sentence.capitalize() + rng.choice([".", "?", "!", ":", ";"])


def _build_tokenizer(target: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_corpus(20000, seed=7), trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
        model_max_length=MAX_POSITIONS,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(target))


def _build_weights(target: Path) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=MAX_POSITIONS,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=2,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config).bfloat16()
    model.save_pretrained(str(target), safe_serialization=True)


# One in twenty token ids ends an answer (``answers_end``): sampled, an answer ends within some tens of tokens.
ENDING_TOKEN_IDS = [1, *range(3, VOCAB_SIZE, 20)]


def answers_end_config(model_dir: Path) -> Path:
    """A folder holding the generation config that makes the tiny model's answers end (vLLM's
    ``--generation-config``), beside its files; written once, atomically."""
    folder = model_dir / "answers-end"
    target = folder / "generation_config.json"
    if not target.exists():
        folder.mkdir(exist_ok=True)
        staging = folder / f".{os.getpid()}.json"
        staging.write_text(json.dumps({"bos_token_id": 0, "eos_token_id": ENDING_TOKEN_IDS, "pad_token_id": 2}))
        staging.replace(target)
    return folder


def ensure_tiny_model(data_dir: str | Path) -> Path:
    """Return the model directory under ``data_dir``, building it first if it is not there."""
    target = Path(data_dir) / "models" / MODEL_VERSION
    if (target / "config.json").exists() and (target / "tokenizer.json").exists():
        return target
    log.info("building the tiny demo model under %s (a few seconds; kept for later starts)", target.parent)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".building-", dir=target.parent))
    try:
        _build_tokenizer(staging)
        _build_weights(staging)
        try:
            staging.rename(target)
        except OSError:  # another process finished first; theirs is as good as ours
            if not (target / "config.json").exists():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target
