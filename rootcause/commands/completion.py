"""`rootcause completion bash|zsh`: a shell completion script for rootcause, written from the
commands' own parsers (every flag, every flag's choices), so it cannot drift from them.

    eval "$(rootcause completion bash)"          # in ~/.bashrc
    eval "$(rootcause completion zsh)"           # in ~/.zshrc (through zsh's bashcompinit)

Commands complete after `rootcause`, flags after a '-', a flag's choices after it, and files
everywhere else (specs, bundles, profiles, attribution.json)."""
from __future__ import annotations

import argparse
import importlib
import shlex

SHELLS = ("bash", "zsh")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("shell", choices=SHELLS, help="the shell to complete in")


def run(args: argparse.Namespace) -> int:
    print(script(args.shell), end="")
    return 0


def _flags() -> dict[str, tuple[list[str], dict[str, list[str]]]]:
    """command -> (its flags, {flag: its choices}), read from each command's parser."""
    from rootcause.argtypes import Renamed
    from rootcause.commands import COMMANDS

    out = {}
    for name, (module_name, _) in COMMANDS.items():
        parser = argparse.ArgumentParser(add_help=True)
        importlib.import_module(module_name).add_arguments(parser)
        flags, choices = [], {}
        for action in parser._actions:
            names = action.option_strings[:1] if isinstance(action, Renamed) else action.option_strings  # no old names
            flags += [s for s in names if s.startswith("--")]
            if action.choices and action.option_strings:
                for flag in action.option_strings:
                    choices[flag] = [str(c) for c in action.choices]
        out[name] = (flags, choices)
    return out


def script(shell: str) -> str:
    """The completion function and its registration, for bash (zsh runs it through bashcompinit)."""
    commands = _flags()
    top = " ".join([*commands, "--help", "--version"])
    choice_cases = "".join(f"    {name}:{flag}) words={shlex.quote(' '.join(values))};;\n"
                           for name, (_, choices) in commands.items() for flag, values in choices.items())
    flag_cases = "".join(f"    {name}) words={shlex.quote(' '.join(flags))};;\n"
                         for name, (flags, _) in commands.items())
    head = "autoload -U +X bashcompinit && bashcompinit\n" if shell == "zsh" else ""
    return f"""# rootcause {shell} completion (written by `rootcause completion {shell}`)
{head}_rootcause() {{
  local cur="${{COMP_WORDS[COMP_CWORD]}}" prev="${{COMP_WORDS[COMP_CWORD-1]}}" cmd="${{COMP_WORDS[1]}}" words=""
  if [ "$COMP_CWORD" -eq 1 ]; then
    COMPREPLY=($(compgen -W "{top}" -- "$cur"))
    return
  fi
  case "$cmd:$prev" in
{choice_cases}  esac
  if [ -n "$words" ]; then
    COMPREPLY=($(compgen -W "$words" -- "$cur"))
    return
  fi
  if [[ "$cur" == -* ]]; then
    case "$cmd" in
{flag_cases}    esac
    COMPREPLY=($(compgen -W "$words" -- "$cur"))
    return
  fi
  COMPREPLY=($(compgen -f -- "$cur"))
}}
complete -o filenames -F _rootcause rootcause
"""
