"""The ``provmw`` commands of the operations beyond chat: respond, image, transcribe, speak, rerank, moderate.

Each makes one call through the full stack, as ``provmw chat`` does, with its flags (a named
configuration, or an ad-hoc provider, model and base URL; the user and tenant the call is for),
prints the answer and a last line with who served it, its tokens and units, and its cost. Media
go to ``--out``: an image or the speech written as its bytes (``cat.png``, or ``cat-1.png``,
``cat-2.png``... for several images).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from provmw.cli._calls import option_pairs, target, usage_line
from provmw.errors import ConfigurationError

if TYPE_CHECKING:
    from provmw.manager import ServiceManager

__all__ = ["OPERATION_COMMANDS", "add_operation_commands"]

Command = Callable[[Any, str, str], argparse.ArgumentParser]


def _call(args: argparse.Namespace) -> dict[str, Any]:
    """The call keywords ``provmw chat`` passes too: where to send it, and for whom."""
    return {**target(args), "user": args.user, "tenant": args.tenant}


def _options(args: argparse.Namespace) -> dict[str, Any] | None:
    return option_pairs(args.option)


def _manager(args: argparse.Namespace) -> ServiceManager:
    from provmw.manager import ServiceManager

    return ServiceManager.from_file(args.config)




async def _respond(args: argparse.Namespace, out: TextIO) -> int:
    async with _manager(args) as manager:
        response = await manager.respond(args.prompt, instructions=args.instructions, options=_options(args),
                                         **_call(args))
    out.write(f"{response.text}\n")
    usage_line(response, out)
    return 0


async def _image(args: argparse.Namespace, out: TextIO) -> int:
    async with _manager(args) as manager:
        response = await manager.generate_image(args.prompt, size=args.size, quality=args.quality, n=args.n,
                                                options=_options(args), **_call(args))
    paths = _numbered(args.out, len(response.images)) if args.out else None
    for index, image in enumerate(response.images, 1):
        out.write(f"image {index}: {_kept(image, paths)}\n")
        if image.revised_prompt:
            out.write(f"  revised prompt: {image.revised_prompt}\n")
    usage_line(response, out)
    return 0


def _kept(image: Any, paths: Iterator[Path] | None) -> str:
    """Where ``image`` is: its URL, or the file its bytes were written to (when ``--out`` names one)."""
    if image.data is None:
        return str(image.url)
    if paths is None:
        return f"{len(image.data)} bytes (give --out FILE to save them)"
    path = next(paths)
    _write(path, image.data)
    return f"{path} ({len(image.data)} bytes)"


async def _transcribe(args: argparse.Namespace, out: TextIO) -> int:
    audio = _read(args.file)
    async with _manager(args) as manager:
        response = await manager.transcribe(audio, filename=Path(args.file).name, language=args.language,
                                            prompt=args.prompt, options=_options(args), **_call(args))
    out.write(f"{response.text}\n")
    usage_line(response, out)
    return 0


async def _speak(args: argparse.Namespace, out: TextIO) -> int:
    async with _manager(args) as manager:
        response = await manager.speak(args.text, voice=args.voice, audio_format=args.format,
                                       options=_options(args), **_call(args))
    _write(args.out, response.audio)
    out.write(f"{args.out}: {len(response.audio)} bytes of {response.media_type}\n")
    usage_line(response, out)
    return 0


async def _rerank(args: argparse.Namespace, out: TextIO) -> int:
    async with _manager(args) as manager:
        response = await manager.rerank(args.query, args.documents, top_n=args.top_n, **_call(args))
    for rank, result in enumerate(response.results, 1):
        out.write(f"{rank}. [{result.index}] {result.relevance_score:.4f}  {args.documents[result.index]}\n")
    usage_line(response, out)
    return 0


async def _moderate(args: argparse.Namespace, out: TextIO) -> int:
    async with _manager(args) as manager:
        response = await manager.moderate(args.texts, **_call(args))
    for text, result in zip(args.texts, response.results, strict=True):
        verdict = f"flagged: {', '.join(result.flagged_categories)}" if result.flagged else "not flagged"
        out.write(f"{text!r}: {verdict}\n")
    usage_line(response, out)
    # Like grep, the status says what was found: 1 when an input was flagged, so a script can branch on it.
    return 1 if response.flagged else 0


def _numbered(out: str, count: int) -> Iterator[Path]:
    """``out`` itself for one image; ``stem-1.ext``, ``stem-2.ext``... for several."""
    path = Path(out)
    if count == 1:
        yield path
        return
    for index in range(1, count + 1):
        yield path.with_name(f"{path.stem}-{index}{path.suffix}")


def _read(file: str) -> bytes:
    try:
        return Path(file).read_bytes()
    except OSError as exc:
        raise ConfigurationError(f"cannot read {file!r}: {exc.strerror or exc}") from None


def _write(path: str | Path, data: bytes) -> None:
    try:
        Path(path).write_bytes(data)
    except OSError as exc:
        raise ConfigurationError(f"--out: cannot write {str(path)!r}: {exc.strerror or exc}") from None


def _call_arguments(sub: argparse.ArgumentParser, *, options: bool) -> argparse.ArgumentParser:
    sub.add_argument("--user", help="who the call is for (budgets, usage, cache)")
    sub.add_argument("--tenant", help="the tenant the call is for (budgets, usage, cache)")
    if options:
        sub.add_argument("--option", metavar="KEY=VALUE", action="append", default=[],
                         help="an option of the call, e.g. style=vivid (repeatable; JSON values parsed)")
    return sub


def add_operation_commands(commands: Any, command: Command) -> list[argparse.ArgumentParser]:
    """Add the subcommands with ``command`` (``provmw.cli``'s own); returned for the target flags."""
    respond = _call_arguments(command(commands, "respond", "one Responses API call through the full stack"),
                              options=True)
    respond.add_argument("prompt")
    respond.add_argument("--instructions", help="the system's instructions for the answer")
    image = _call_arguments(command(commands, "image", "generate images through the full stack"), options=True)
    image.add_argument("prompt")
    image.add_argument("--size", help="e.g. 1024x1024 (default: the model's)")
    image.add_argument("--quality", help="e.g. standard, hd, low, medium, high (default: the model's)")
    image.add_argument("--n", type=int, default=1, help="how many images (default: 1)")
    image.add_argument("--out", metavar="FILE", help="write the image here (several: FILE-1, FILE-2...)")
    transcribe = _call_arguments(command(commands, "transcribe", "the text spoken in an audio file"), options=True)
    transcribe.add_argument("file", help="the audio file (its name's extension tells its format)")
    transcribe.add_argument("--language", help="the language spoken, e.g. en (default: detected)")
    transcribe.add_argument("--prompt", help="text to guide the transcription (names, spelling)")
    speak = _call_arguments(command(commands, "speak", "text spoken, written to an audio file"), options=True)
    speak.add_argument("text")
    speak.add_argument("--out", metavar="FILE", required=True, help="write the audio here")
    speak.add_argument("--voice", default="alloy")
    speak.add_argument("--format", default="mp3", help="mp3, opus, aac, flac, wav or pcm (default: mp3)")
    rerank = _call_arguments(command(commands, "rerank", "documents ordered by relevance to a query"), options=False)
    rerank.add_argument("query")
    rerank.add_argument("documents", nargs="+", metavar="DOC")
    rerank.add_argument("--top-n", type=int, help="only the best N")
    moderate = _call_arguments(command(commands, "moderate", "whether texts break the content policy (exit 1: "
                                       "flagged)"), options=False)
    moderate.add_argument("texts", nargs="+", metavar="TEXT")
    return [respond, image, transcribe, speak, rerank, moderate]


OPERATION_COMMANDS: dict[str, Any] = {"respond": _respond, "image": _image, "transcribe": _transcribe,
                                      "speak": _speak, "rerank": _rerank, "moderate": _moderate}
