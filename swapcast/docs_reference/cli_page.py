"""``docs/reference/cli.md``: every ``swapcast`` command and flag, read from the argument
parsers (``swapcast.cli.build_parser``), in the order the parsers declare them."""

from __future__ import annotations

import argparse
import contextlib
import os
import re
from collections.abc import Iterator

from swapcast.docs_reference.markdown import code, prose, table


def commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ("swapcast",),
             summary: str = "") -> Iterator[tuple[tuple[str, ...], str, argparse.ArgumentParser]]:
    """(command words, one-line help, parser) of the parser and every sub-command, depth first."""
    yield path, summary, parser
    for action in parser._actions:  # argparse has no public walk of its sub-parsers
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            for name, sub in action.choices.items():
                yield from commands(sub, (*path, name), helps.get(name, ""))


def _flag(action: argparse.Action) -> str:
    names = action.option_strings or [action.metavar or action.dest]
    return ", ".join(code(name) for name in names)


def _value(action: argparse.Action) -> str:
    if action.nargs == 0 or not action.option_strings and action.choices is None:
        return ""
    if action.choices is not None and not isinstance(action, argparse._SubParsersAction):
        return " \\| ".join(code(choice) for choice in action.choices)
    metavar = action.metavar or (action.dest.upper() if action.option_strings else action.dest)
    suffix = " …" if action.nargs in ("*", "+") else ""
    return code(f"{metavar}{suffix}")


def _default(action: argparse.Action) -> str:
    value = action.default
    if action.nargs == 0 or value is None or value is argparse.SUPPRESS or action.required:
        return ""
    if isinstance(value, list):
        if not value:
            return ""
        value = ",".join(str(item) for item in value)
    return code(value)


def _help(action: argparse.Action, prog: str) -> str:
    text = action.help or ""
    if "%" in text:
        text = text % {**vars(action), "prog": prog, "default": action.default}
    if action.required and action.option_strings:
        text = f"required. {text}"
    return prose(text)


def _arguments(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions
            if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction)) and a.help is not argparse.SUPPRESS]


def _subcommands(parser: argparse.ArgumentParser) -> list[str]:
    return [name for action in parser._actions if isinstance(action, argparse._SubParsersAction)
            for name in action.choices]


@contextlib.contextmanager
def _without_swapcast_environment() -> Iterator[None]:
    saved = {name: value for name, value in os.environ.items() if name.startswith("SWAPCAST_")}
    for name in saved:
        del os.environ[name]
    try:
        yield
    finally:
        os.environ.update(saved)


def render(parser: argparse.ArgumentParser | None = None) -> str:
    if parser is None:
        from swapcast.cli import build_parser

        with _without_swapcast_environment():  # some defaults read it (--token: $SWAPCAST_TOKEN)
            parser = build_parser()
    out = [
        "# Command line",
        "",
        f"Every {code('swapcast')} command and flag, as {code('swapcast COMMAND --help')} prints them. "
        "Flags override the config file and the environment (see [Configuration keys](config.md)). "
        "Bad input ends with one line on stderr and exit code 2; Ctrl+C exits 130.",
    ]
    for path, summary, sub in commands(parser):
        title = " ".join(path)
        out += ["", f"{'#' * min(len(path) + 1, 4)} {title}", ""]
        if summary:
            out += [prose(summary[0].upper() + summary[1:]) + ("" if summary.endswith(".") else "."), ""]
        if sub.description and sub.description != summary:
            out += [prose(sub.description), ""]
        children = _subcommands(sub)
        if children:
            out += ["Commands: " + ", ".join(code(f"{title} {child}") for child in children) + ".", ""]
        arguments = _arguments(sub)
        if arguments:
            rows = [[_flag(a), _value(a), _default(a), _help(a, sub.prog)] for a in arguments]
            out += [table(["Argument", "Value", "Default", "Meaning"], rows), ""]
        if not children and not arguments:
            out += ["No arguments.", ""]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(out)).rstrip() + "\n"
