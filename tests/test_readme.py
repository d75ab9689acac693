"""Every command the README shows exists: its --help runs, and every option the README uses
appears in that help. Make targets exist. So the README cannot drift from the code."""

import functools
import re
import shlex

import pytest

from conftest import ROOT, run_cli

README = (ROOT / "README.md").read_text()


def shown_commands() -> list[str]:
    """Command lines from ```bash blocks and from inline `python ...` / `make ...` code."""
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", README, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split(" #")[0].strip().rstrip("&").strip()
            if line and not line.startswith("#"):
                lines.append(line)
    lines += re.findall(r"`((?:python|make|dreamcade) [^`]+)`", README)
    return sorted({line for line in lines if "..." not in line and "\\|" not in line})  # not table shorthand


def target(words: list[str]) -> tuple[list[str], list[str]] | None:
    """(the command to ask for --help, the words after it) for a python or dreamcade command line."""
    if words[:1] == ["dreamcade"] and len(words) >= 2:
        subcommands = {"record": ("env", "screen"), "data": ("info", "build"), "eval": ("drift", "sweep", "video")}
        job, rest = words[1], words[2:]
        if rest and rest[0] in subcommands.get(job, ()):
            return ["-m", "dreamcade", job, rest[0]], rest[1:]
        return ["-m", "dreamcade", job], rest
    if words[:2] == ["accelerate", "launch"]:
        words = ["python"] + [w for w in words[2:] if not w.startswith("--num_processes") and not w.isdigit()]
    if words[0] != "python" or len(words) < 2:
        return None
    if words[1] == "-m":
        module, rest = words[2], words[3:]
        subcommands = {"record": ("env", "screen"), "dataset": ("info", "build"), "eval": ("drift", "sweep", "video")}
        if rest and rest[0] in subcommands.get(module, ()):
            return ["-m", module, rest[0]], rest[1:]
        return ["-m", module], rest
    return [words[1]], words[2:]


COMMANDS = shown_commands()
PYTHON = [c for c in COMMANDS if target(shlex.split(c.replace("[", "").replace("]", "")))]


def test_the_readme_shows_the_commands_of_every_job():
    joined = "\n".join(COMMANDS)
    for needed in ("make test", "make demo", "python -m record screen", "python -m record env",
                   "python -m dataset build", "python -m dataset info", "python train.py", "python play.py",
                   "python -m eval drift", "python -m eval sweep", "python -m bench.", "dreamcade export",
                   "dreamcade play", "dreamcade train", "dreamcade eval drift", "dreamcade record env"):
        assert needed in joined, f"the README shows no `{needed}` command"


@functools.cache
def help_of(cmd: tuple[str, ...]) -> str:
    """`python CMD --help`, asked once per command for the whole module."""
    return run_cli(*cmd, "--help", env={"PYNPUT_BACKEND": "dummy"}).stdout


@pytest.mark.parametrize("line", PYTHON)
def test_readme_command_exists_with_its_options(line):
    words = shlex.split(line.replace("[", "").replace("]", ""))
    cmd, rest = target(words)
    help_text = help_of(tuple(cmd))
    for word in rest:
        option = word.split("=")[0]
        if option.startswith("--"):
            assert option in help_text, f"`{line}`: {option} is not in `python {' '.join(cmd)} --help`"


def test_make_targets_the_readme_names_exist():
    makefile = (ROOT / "Makefile").read_text()
    for line in COMMANDS:
        if line.startswith("make "):
            name = line.split()[1]
            assert re.search(rf"^{re.escape(name)}:", makefile, re.M), f"no make target {name!r}"
