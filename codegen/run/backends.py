"""Generation backends for `serve` and `chat`: one device, one generation at
a time, tokens delivered as the firmware prints them.

* :class:`RunBackend`: one firmware run per request through
  :func:`build.run_firmware` (the host build, QEMU with the request over its
  UART, Unicorn for STM32H750 builds). Every request boots the image (about
  40 ms under QEMU), so no state leaks between requests; tokens stream live
  (the runner hands over each console line as it arrives).
* :class:`SessionBackend`: the host build, QEMU or Unicorn kept running
  between requests (its console on standard input, UART0 on a socket, the
  H750's console USART), as a board is: multi-turn KV reuse (session.DeviceSession) continues the
  conversation it holds whenever a prompt extends it token for token.
* :class:`SerialBackend`: a flashed board over ``--serial PORT``, one
  persistent session: requests go out without the exit flag, so the board
  serves one after another, continuing its conversation the same way; a
  failed link is reopened on the next request.

Also here: what a compiled OUT offers a chat front end (:class:`ModelInfo`),
and the chat template (:func:`render_chat`), a small function of the messages
and a template string so that a tokenizer that carries one (tokenizer
config, or the GGUF `tokenizer.chat_template`) only has to hand it over."""
from __future__ import annotations

import codecs
import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

import serial

from ..board import load_board
from ..build.out import image_path, load_out_tokenizer, read_manifest
from ..errors import UserError
from ..frontends.tokenizer import Tokenizer
from ..reference.sampler import SamplingOptions
from .console import RequestLost
from .firmware import run_firmware
from .protocol import TokenLine, parse_token_line
from .qemu import qemu_uart_session
from .session import DeviceSession, HostPort
from .unicorn_session import UnicornPort

PLAIN_STOP = ("\nUser:",)  # the plain chat rendering's turn marker


class DeviceError(RuntimeError):
    """The device failed a generation (a firmware error, a timeout, a dead link)."""


@dataclass(frozen=True)
class Generation:
    prompt_ids: list[int]
    generated_ids: list[int]
    token_bytes: list[bytes]
    counts: list[int]  # the board's counter per token (instructions, or cycles on a board)
    stop_reason: str | None
    prefill_count: int | None
    unit: str  # "instructions" or "cycles"
    reused: int = 0  # tokens of the conversation the device kept in its KV cache (0: a fresh prefill)
    shifts: int = 0  # times a rolling-context build dropped old positions (compile --context-policy roll)


OnToken = Callable[[TokenLine], None]


class Backend:
    """Runs one generation at a time; ``on_token`` is called from the calling
    thread as each "@TLLM tok" line arrives."""

    name = "backend"
    unit = "instructions"

    def generate(self, prompt_ids: Sequence[int], max_new_tokens: int, sampling: SamplingOptions,
                 on_token: OnToken | None = None) -> Generation:
        raise NotImplementedError

    def close(self) -> None:
        pass


def _line_sink(on_token: OnToken | None):
    def on_line(line: str) -> None:
        tok = parse_token_line(line)
        if tok is not None and on_token is not None:
            on_token(tok)
    return on_line


def _generation(prompt_ids, out, unit: str, reused: int = 0) -> Generation:
    return Generation(list(prompt_ids), out.generated_ids, out.token_texts, out.instructions_per_token,
                      out.stop_reason, out.prefill_instructions, unit, reused, out.shifts)


def _session_turn(session: DeviceSession, where: str, timeout_s: float, prompt_ids, max_new_tokens, sampling,
                  on_token, unit: str, close) -> Generation:
    """One generation through a DeviceSession; a dead link or no answer closes it (``close``) and raises
    DeviceError, a refusal raises it with the board's error line."""
    try:
        turn = session.generate(prompt_ids, max_new_tokens, sampling, on_line=_line_sink(on_token))
    except RequestLost as e:  # sent twice (talk_serial resends once), served neither time
        raise DeviceError(str(e)) from None
    except Exception as e:  # serial.SerialException, OSError: the link or the process went away
        close()
        raise DeviceError(f"{where} failed: {e}") from None
    out = turn.output
    if turn.status is None:
        close()
        raise DeviceError(f"no answer from {where} within {timeout_s:.0f} s")
    if turn.status != 0:
        raise DeviceError(f"the board refused the request (status {turn.status}): {out.error or 'see its console'}")
    if out.crc_errors:
        raise DeviceError(f"{out.crc_errors} console line(s) failed their CRC on {where}")
    return _generation(prompt_ids, out, unit, turn.reused)


class RunBackend(Backend):
    """One run of the built firmware per request (host, QEMU, Unicorn)."""

    def __init__(self, out: Path, timeout_s: float = 600):
        self.out = Path(out)
        board = load_board(read_manifest(self.out)["board"])
        if not image_path(self.out, board).is_file():
            raise UserError(f"{out}: firmware not built; run `tinyllm-gen build {out}` first")
        self.board = board.name
        self.name = board.run.emulator  # host | qemu | unicorn
        self.timeout_s = timeout_s

    def generate(self, prompt_ids, max_new_tokens, sampling, on_token=None) -> Generation:
        try:
            # the UART transport on QEMU and the host: lines arrive while it runs
            fw = run_firmware(self.out, list(prompt_ids), max_new_tokens, sampling, timeout_s=self.timeout_s,
                              transport="uart" if self.name != "unicorn" else "memory",
                              on_line=_line_sink(on_token))
        except UserError as e:
            raise DeviceError(str(e)) from None
        return _generation(prompt_ids, fw.output, self.unit)


class SessionBackend(Backend):
    """The build's own runner kept up between requests (the host build on its
    standard input, QEMU with UART0 on a socket, an STM32H750 image under
    Unicorn with its console USART, unicorn_session.py): one firmware that holds its
    conversation, continued where a prompt extends it (session.DeviceSession).
    A failed run is started again on the next request."""

    def __init__(self, out: Path, timeout_s: float = 600, host_wrapper: Sequence[str] = ()):
        self.out = Path(out)
        self.host_wrapper = tuple(host_wrapper)  # the host build runs under this command (HostPort)
        self.board = load_board(read_manifest(self.out)["board"])
        self.image = image_path(self.out, self.board)
        if not self.image.is_file():
            raise UserError(f"{out}: firmware not built; run `tinyllm-gen build {out}` first")
        self.name = self.board.run.emulator  # host | qemu | unicorn
        self.timeout_s = timeout_s
        self._session = None
        self._close = None
        self._lock = threading.Lock()

    def _open(self) -> DeviceSession:
        if self._session is None:
            if self.name == "host":
                port = HostPort(self.image, self.host_wrapper)
                self._close = port.close
            elif self.name == "unicorn":
                port = UnicornPort(self.image, self.board, self.out / "weights.bin")
                self._close = port.close
            else:
                ctx = qemu_uart_session(self.image, self.board, self.out / "weights.bin")
                port, _proc = ctx.__enter__()
                self._close = lambda: ctx.__exit__(None, None, None)
            self._session = DeviceSession(port, self.timeout_s, wait_ready=True)
        return self._session

    def generate(self, prompt_ids, max_new_tokens, sampling, on_token=None) -> Generation:
        with self._lock:
            return _session_turn(self._open(), f"the {self.name} firmware", self.timeout_s, prompt_ids,
                                 max_new_tokens, sampling, on_token, self.unit, self.close)

    def close(self) -> None:
        if self._close is not None:
            try:
                self._close()
            finally:
                self._session = self._close = None


class SerialBackend(Backend):
    """A flashed board over a serial port, kept open between requests."""

    name = "serial"
    unit = "cycles"  # the board's DWT counts core cycles

    def __init__(self, url: str, timeout_s: float = 600, baudrate: int = 115200):
        self.url, self.timeout_s, self.baudrate = url, timeout_s, baudrate
        self._port = None
        self._session = None
        self._lock = threading.Lock()

    def _open(self) -> DeviceSession:
        if self._port is None:
            try:
                self._port = serial.serial_for_url(self.url, baudrate=self.baudrate, timeout=0.5)
            except (serial.SerialException, ValueError) as e:
                raise DeviceError(f"cannot open serial port {self.url}: {e}") from None
        if self._session is None:
            # The board printed "@TLLM ready" once, long ago, or after its last
            # request: it is waiting in its frame reader, so send right away.
            self._session = DeviceSession(self._port, self.timeout_s, wait_ready=False)
        return self._session

    def generate(self, prompt_ids, max_new_tokens, sampling, on_token=None) -> Generation:
        with self._lock:
            return _session_turn(self._open(), f"the board on {self.url}", self.timeout_s, prompt_ids,
                                 max_new_tokens, sampling, on_token, self.unit, self.close)

    def close(self) -> None:
        if self._port is not None:
            try:
                self._port.close()
            finally:
                self._port = self._session = None


def open_backend(out: Path, serial_url: str | None = None, timeout_s: float = 600) -> Backend:
    """A board over serial_url; else the build's own runner (host, QEMU, Unicorn), kept up between requests
    as a board is (multi-turn KV reuse)."""
    if serial_url:
        return SerialBackend(serial_url, timeout_s)
    return SessionBackend(out, timeout_s)


# ---------------------------------------------------------------- the model behind OUT


@dataclass(frozen=True)
class ModelInfo:
    out: Path
    model_id: str
    tokenizer: Tokenizer
    max_seq: int
    greedy_only: bool
    chat_template: str | None  # Jinja source, or None for the plain rendering
    eos_ids: tuple[int, ...] = field(default_factory=tuple)

    @classmethod
    def load(cls, out: Path, model_id: str | None = None, chat_template: str | None = None) -> "ModelInfo":
        out = Path(out)
        manifest = read_manifest(out)
        tok = load_out_tokenizer(out, manifest)
        template = chat_template if chat_template is not None else find_chat_template(out, manifest)
        return cls(out, model_id or out.resolve().name, tok, int(manifest["max_seq"]),
                   manifest.get("options", {}).get("sampler") == "greedy", template,
                   tuple(manifest.get("eos_ids", ())))


def find_chat_template(out: Path, manifest: dict) -> str | None:
    """The tokenizer's chat template, if OUT carries one: the manifest's
    tokenizer entry (`chat_template`, for a tokenizer that brings its own, as
    a GGUF's `tokenizer.chat_template`), else `chat_template` in a
    tokenizer_config.json beside the tokenizer file, or in tokenizer.json."""
    given = manifest["tokenizer"].get("chat_template")
    if isinstance(given, str) and given.strip():
        return given
    tok_file = Path(out) / manifest["tokenizer"]["file"]
    for path in (tok_file.parent / "tokenizer_config.json", tok_file):
        if path.suffix != ".json" or not path.is_file():
            continue
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        t = doc.get("chat_template") if isinstance(doc, dict) else None
        if isinstance(t, list):  # several named templates: the default one
            t = next((x.get("template") for x in t if isinstance(x, dict) and x.get("name") == "default"), None)
        if isinstance(t, str) and t.strip():
            return t
    return None


def message_text(content) -> str:
    """An OpenAI message's content: a string, or a list of {"type": "text"} parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for p in content:
            if not isinstance(p, dict) or p.get("type") != "text" or not isinstance(p.get("text"), str):
                raise ValueError("only text content parts are supported")
            parts.append(p["text"])
        return "".join(parts)
    if content is None:
        return ""
    raise ValueError("message content must be a string or a list of text parts")


def render_chat(messages: Sequence[dict], template: str | None, bos_token: str = "", eos_token: str = "") -> str:
    """The prompt text for a conversation (the last turn the assistant's to
    write). With a Jinja template (Hugging Face's convention: `messages`,
    `add_generation_prompt`, `bos_token`, `eos_token`), that; otherwise a
    plain rendering, one "Role: text" line per message and "Assistant:" last."""
    msgs = [{"role": str(m.get("role", "user")), "content": message_text(m.get("content"))} for m in messages]
    if template:
        def raise_exception(msg):
            raise TemplateError(msg)

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = raise_exception
        try:
            return env.from_string(template).render(messages=msgs, add_generation_prompt=True,
                                                    bos_token=bos_token, eos_token=eos_token)
        except TemplateError as e:
            raise ValueError(f"the chat template refused the messages: {e}") from None
    lines = [f"{m['role'][:1].upper()}{m['role'][1:]}: {m['content']}" for m in msgs]
    return "\n".join(lines + ["Assistant:"])


def chat_prompt_ids(info: ModelInfo, messages: Sequence[dict]) -> list[int]:
    tok = info.tokenizer
    special = (lambda i: tok.decode([i]) if i is not None else "")
    text = render_chat(messages, info.chat_template, special(tok.bos_id), special(tok.eos_id))
    # a template that writes the BOS text itself gets no second BOS id
    bos = not (info.chat_template and tok.bos_id is not None and "bos_token" in info.chat_template)
    return tok.encode(text, bos=bos)


def chat_stops(info: ModelInfo) -> tuple[str, ...]:
    """Stop strings the chat rendering needs (the plain one: the next "User:")."""
    return () if info.chat_template else PLAIN_STOP


class TextStream:
    """Token bytes in, text out as soon as it is whole UTF-8 and clear of the
    stop strings (text that could be the start of a stop string is held
    back until it is not). ``stopped`` once a stop string appeared."""

    def __init__(self, stops: Sequence[str] = ()):
        self._dec = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._stops = [s for s in stops if s]
        self._held = ""
        self.stopped = False
        self.text = ""  # everything released

    def _release(self, s: str) -> str:
        self.text += s
        return s

    def feed(self, data: bytes, final: bool = False) -> str:
        if self.stopped:
            return ""
        self._held += self._dec.decode(data, final=final)
        for s in self._stops:
            at = self._held.find(s)
            if at >= 0:
                self.stopped = True
                out, self._held = self._held[:at], ""
                return self._release(out)
        if final:
            out, self._held = self._held, ""
            return self._release(out)
        keep = 0
        for s in self._stops:
            for k in range(min(len(s) - 1, len(self._held)), 0, -1):
                if self._held.endswith(s[:k]):
                    keep = max(keep, k)
                    break
        out, self._held = self._held[:len(self._held) - keep], self._held[len(self._held) - keep:]
        return self._release(out)
