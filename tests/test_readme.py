"""Every command the README and the docs/ pages show exists: its --help runs, and every option they
use appears in that help. Make targets exist, links lead somewhere, the Python they show imports,
no page uses a spelling of the old layout, and the README stays a short front door that links
every page. So the documentation cannot drift from the code."""

import functools
import re
import shlex

import pytest

from conftest import ROOT, run_cli

README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 300

# the jobs of `dreamcade` that have subcommands, and the same modules run as `python -m dreamcade.X`
JOB_SUBCOMMANDS = {"record": ("env", "screen"), "data": ("info", "build"), "eval": ("drift", "sweep", "video")}
MODULE_SUBCOMMANDS = {"dreamcade.record": JOB_SUBCOMMANDS["record"], "dreamcade.dataset": JOB_SUBCOMMANDS["data"],
                      "dreamcade.eval": JOB_SUBCOMMANDS["eval"]}
# the rooms that used to be top-level packages: `python -m X` is now `dreamcade JOB` or `python -m dreamcade.X`
OLD_ROOMS = ("record", "dataset", "eval", "model", "play")
OLD_SPELLINGS = [
    (rf"python3? -m ({'|'.join(OLD_ROOMS)})\b", "`python -m X` of the old layout (now `dreamcade JOB` or dreamcade.X)"),
    (rf"\bfrom ({'|'.join(OLD_ROOMS)})(\.\w+)* import\b", "an import of the old layout (now `from dreamcade.X import`)"),
    (rf"^\s*import ({'|'.join(OLD_ROOMS)})\b", "an import of the old layout (now `import dreamcade.X`)"),
    (r"\bmodel\.(inference|world|distill|env|training|checkpoint|config_file|frames)\b",
     "a module that moved (model.inference, model.world, model.distill, ... are dreamcade.files/training)"),
    (r"\b(model/(inference|world|distill|env|training|checkpoint|config_file|frames)\.py|eval/training\.py"
     r"|play/cli\.py|play/health\.py|record/env\.py|record/window\.py)", "a file that moved or was renamed"),
]


def name(page) -> str:
    return page.relative_to(ROOT).as_posix()


@functools.cache
def text(page) -> str:
    return page.read_text()


def shown_commands(page) -> list[str]:
    """Command lines from ```bash blocks and from inline `python ...` / `make ...` / `dreamcade ...` code."""
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", text(page), re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split(" #")[0].strip().rstrip("&").strip()
            if line and not line.startswith("#"):
                lines.append(line)
    lines += re.findall(r"`((?:python|make|dreamcade|accelerate launch|torchrun) [^`\n]+)`", text(page))
    return sorted({line for line in lines if "..." not in line and "|" not in line})  # not shorthand


def words_of(line: str) -> list[str]:
    return shlex.split(line.replace("[", "").replace("]", ""))


def target(words: list[str]) -> tuple[list[str], list[str]] | None:
    """(the arguments of `python ARGS --help` that shows this command's options, the words after
    the command) for a python, dreamcade, accelerate or torchrun command line; None for others and
    for a placeholder job (`dreamcade JOB --help`)."""
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):  # SDL_VIDEODRIVER=dummy dreamcade ...
        words = words[1:]
    if words[:1] == ["dreamcade"] and len(words) >= 2:
        job, rest = words[1], words[2:]
        if job.startswith("-"):
            return ["-m", "dreamcade"], words[1:]
        if job.isupper():  # dreamcade JOB --help
            return None
        if rest and rest[0] in JOB_SUBCOMMANDS.get(job, ()):
            return ["-m", "dreamcade", job, rest[0]], rest[1:]
        return ["-m", "dreamcade", job], rest
    if words[:2] == ["accelerate", "launch"] or words[:1] == ["torchrun"]:
        script = next((i for i, w in enumerate(words) if w.endswith(".py")), None)
        if script is None:
            return None
        words = ["python", *words[script:]]
    if len(words) < 2 or words[0] not in ("python", "python3"):
        return None
    if words[1] == "-m":
        module, rest = words[2], words[3:]
        if module in OLD_ROOMS:  # the old spelling means the module of the same name in dreamcade
            module = f"dreamcade.{module}"
        if rest and rest[0] in MODULE_SUBCOMMANDS.get(module, ()):
            return ["-m", module, rest[0]], rest[1:]
        return ["-m", module], rest
    return [words[1]], words[2:]


CASES = [(name(page), line) for page in PAGES for line in shown_commands(page) if target(words_of(line))]
README_COMMANDS = shown_commands(README)


def test_the_readme_shows_the_commands_of_every_job():
    joined = "\n".join(README_COMMANDS)
    for needed in ("dreamcade record screen", "dreamcade record env", "dreamcade data build", "dreamcade data info",
                   "dreamcade train", "dreamcade distill", "dreamcade play", "dreamcade eval drift",
                   "dreamcade eval sweep", "dreamcade eval video", "dreamcade export", "dreamcade demo",
                   "make test", "make test-fast", "make demo"):
        assert needed in joined, f"the README shows no `{needed}` command"


@functools.cache
def help_of(cmd: tuple[str, ...]) -> str:
    """`python CMD --help`, asked once per command for the whole module. Our own modules are run
    with -P (no current folder on sys.path), as the installed `dreamcade` command runs them, so a
    job that imports a top-level file of the clone instead of dreamcade.* is caught."""
    isolated = ("-P",) if cmd[0] == "-m" and cmd[1].split(".")[0] == "dreamcade" else ()
    proc = run_cli(*isolated, *cmd, "--help", check=False, env={"PYNPUT_BACKEND": "dummy"})
    assert proc.returncode == 0, f"`python {' '.join(cmd)} --help` failed ({proc.returncode}):\n{proc.stderr[-2000:]}"
    return proc.stdout


def missing_options(line: str) -> list[str]:
    """The --options of a command line that its command's --help does not show."""
    cmd, rest = target(words_of(line))
    help_text = help_of(tuple(cmd))
    options = [word.split("=")[0] for word in rest if word.startswith("--")]
    return [o for o in options if not re.search(rf"{re.escape(o)}(?![\w-])", help_text)]


@pytest.mark.parametrize(("page", "line"), CASES)
def test_shown_command_exists_with_its_options(page, line):
    cmd, _ = target(words_of(line))
    missing = missing_options(line)
    assert missing == [], f"{page}: `{line}`: {', '.join(missing)} not in `python {' '.join(cmd)} --help`"


def test_make_targets_the_pages_name_exist():
    makefile = (ROOT / "Makefile").read_text()
    for page in PAGES:
        for line in shown_commands(page):
            if line.startswith("make "):
                target_name = line.split()[1]
                assert re.search(rf"^{re.escape(target_name)}:", makefile, re.M), \
                    f"{name(page)}: `{line}`: no make target {target_name!r}"


def test_no_page_uses_a_spelling_of_the_old_layout():
    found = []
    for page in PAGES:
        for pattern, what in OLD_SPELLINGS:
            for m in re.finditer(pattern, text(page), re.M):
                line_no = text(page)[:m.start()].count("\n") + 1
                found.append(f"{name(page)}:{line_no}: {m.group(0).strip()!r}: {what}")
    assert found == []


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading."""
    heading = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return heading.replace(" ", "-")


@functools.cache
def anchors(page) -> set[str]:
    seen, out = {}, set()
    body = re.sub(r"```.*?```", "", text(page), flags=re.S)
    for heading in re.findall(r"^#{1,6} (.+)$", body, re.M):
        s = slug(heading)
        out.add(s if s not in seen else f"{s}-{seen[s]}")
        seen[s] = seen.get(s, 0) + 1
    return out


def links(page) -> list[str]:
    body = re.sub(r"```.*?```", "", text(page), flags=re.S)
    return [t for t in re.findall(r"\]\(([^)\s]+)\)", body) if not re.match(r"[a-z]+:", t)]


def test_the_readme_is_a_short_front_door_that_links_every_page():
    lines = text(README).count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; the reference goes in docs/ (at most {README_MAX_LINES})"
    linked = {(README.parent / t.split("#")[0]).resolve() for t in links(README) if t.split("#")[0]}
    for t in links(README):
        if t.startswith("docs/"):
            assert (ROOT / t.split("#")[0]).is_file(), f"README.md links {t}, which does not exist"
    unlinked = [name(p) for p in PAGES[1:] if p.resolve() not in linked]
    assert unlinked == [], f"docs pages the README does not link: {unlinked}"


@pytest.mark.parametrize("page", [name(p) for p in PAGES])
def test_links_lead_to_a_file_and_heading_that_exist(page):
    page = ROOT / page
    for t in links(page):
        path, _, anchor = t.partition("#")
        dest = (page.parent / path).resolve() if path else page
        assert dest.exists(), f"{name(page)}: link {t} leads to no file"
        if anchor and dest.suffix == ".md":
            assert anchor in anchors(dest), f"{name(page)}: link {t}: no heading #{anchor} in {name(dest)}"


def test_the_python_the_pages_show_imports():
    imports = sorted({line.strip() for page in PAGES
                      for block in re.findall(r"```python\n(.*?)```", text(page), re.S)
                      for line in block.splitlines() if re.match(r"\s*(from|import) \w", line)})
    assert imports, "no page shows Python"
    proc = run_cli("-P", "-c", "\n".join(imports), check=False)
    assert proc.returncode == 0, f"the imports the pages show fail:\n{proc.stderr[-2000:]}"


RESOLVE = """
import importlib, sys
missing = []
for dotted in sys.argv[1:]:
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):  # the longest importable module, then attributes
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        try:
            for attr in parts[i:]:
                obj = getattr(obj, attr)
        except AttributeError:
            missing.append(dotted)
        break
    else:
        missing.append(dotted)
print("\\n".join(missing))
"""


def test_the_modules_and_names_the_pages_name_exist():
    """Every dreamcade.X.Y the pages name is a module, or a name in one."""
    names = sorted({m.group(0) for page in PAGES for m in re.finditer(r"\bdreamcade(?:\.\w+)+", text(page))}
                   - {"dreamcade.recording"})  # the store format's name, not a module
    assert names, "no page names a module"
    proc = run_cli("-P", "-c", RESOLVE, *names, check=False, env={"PYNPUT_BACKEND": "dummy"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == [], f"names the pages use that do not exist: {proc.stdout.split()}"


CONFIG_KEY = re.compile(r"(?<![\w./])((?:data|model|diffusion|sampler|optim|train|log)\.([a-z_]+))(?![\w/(])")
NOT_KEYS = {"py", "md", "safetensors", "yaml", "json", "jsonl", "zarr", "spec"}  # files, and `model.spec` in Python


def test_config_keys_the_pages_name_exist():
    """Every `section.key` the pages name (train.save_every, sampler.hold_levels, ...) is a key of
    the resolved config that `dreamcade train --dry-run` prints."""
    import yaml

    proc = run_cli("-P", "-m", "dreamcade", "train", "--config", "tiny", "--dry-run", check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    config = yaml.safe_load(proc.stdout)
    keys = {f"{section}.{key}" for section, values in config.items() if isinstance(values, dict) for key in values}
    unknown = sorted({f"{name(page)}: {m.group(1)}" for page in PAGES for m in CONFIG_KEY.finditer(text(page))
                      if m.group(2) not in NOT_KEYS and m.group(1) not in keys})
    assert unknown == [], f"config keys the pages name that the config does not have: {unknown}"


def test_the_checks_catch_a_made_up_option():
    """The checks themselves: an option a command's help does not have is caught, and the command
    lines of launchers, environment variables and the old spelling find the right help."""
    assert missing_options("dreamcade eval drift --checkpoint runs/demo --nonexistent 3 --out r") == ["--nonexistent"]
    assert missing_options("dreamcade eval drift --checkpoint runs/demo --hold-level 3 --out r") == ["--hold-level"]
    assert target(words_of("accelerate launch --num_processes 4 train.py --config demo"))[0] == ["train.py"]
    assert target(words_of("SDL_VIDEODRIVER=dummy dreamcade play --frames 3"))[0] == ["-m", "dreamcade", "play"]
    assert target(words_of("python -m record env --out x"))[0] == ["-m", "dreamcade.record", "env"]
