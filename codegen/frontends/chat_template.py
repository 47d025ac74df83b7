"""A prompt as one user turn of the model's chat template (`--chat`).

Rendered with Jinja2 as transformers' `apply_chat_template` does: a
sandboxed environment with trim_blocks/lstrip_blocks, `messages`,
`add_generation_prompt=True` and a `raise_exception` helper (`bos_token` and
`eos_token` render empty: ChatML spells its markers out).  Only ChatML templates (the ones that write
`<|im_start|>`) are accepted for now: that is the format the firmware's
stop tokens and our tests cover."""
from __future__ import annotations

from jinja2 import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from ..errors import UserError
from .tokenizer import Tokenizer

CHATML_MARK = "<|im_start|>"


def is_chatml(template: str | None) -> bool:
    return bool(template) and CHATML_MARK in template


def render_chat(tok: Tokenizer, user_text: str) -> str:
    """The template's text for [{"role": "user", "content": user_text}] plus
    the assistant's opening."""
    template = tok.chat_template
    if not template:
        raise UserError("--chat: this model has no chat template (tokenizer.chat_template); drop --chat")
    if not is_chatml(template):
        raise UserError("--chat: the model's chat template is not ChatML (no <|im_start|>); "
                        "only ChatML templates are supported, drop --chat")
    def raise_exception(message):
        raise UserError(f"--chat: the chat template refused the prompt: {message}")

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    try:
        return env.from_string(template).render(
            messages=[{"role": "user", "content": user_text}], add_generation_prompt=True,
            bos_token="", eos_token="")  # ChatML writes its markers literally
    except TemplateError as e:
        raise UserError(f"--chat: the model's chat template does not render ({e}); drop --chat") from None


def chat_prompt_ids(tok: Tokenizer, user_text: str) -> list[int]:
    """Token ids of the rendered turn; the template writes its own start
    tokens, so no BOS is added (apply_chat_template(tokenize=True) neither)."""
    return tok.encode(render_chat(tok, user_text), bos=False)
