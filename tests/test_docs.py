"""What README.md and docs/ show works as written: every option a `pytest` or
`tox -e ENV -- ...` command line passes is one pytest accepts (the suite's own, pytest's,
its plugins'), every `-m` names a registered marker, every `-k` test name is a test of
suites/, every `tox -e ENV` is an environment of tox.ini, every `kdc-cluster` command
parses, every relative link reaches a file (and a heading, where it names one), and the
option table of docs/options.md is the set of registered options with their variables.

The accepted options and markers come from a real pytest process on this checkout
(`pytest --help`, `pytest --markers`), not from a list kept here."""

from __future__ import annotations

import configparser
import contextlib
import functools
import io
import itertools
import os
import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from core.commands import QUIET
from core.timeouts import Timeout
from kubevirtci.local.__main__ import parser as kdc_cluster_parser

ROOT = Path(__file__).resolve().parent.parent
DOCS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
SUITE_GROUP = "KubeVirt DRA conformance:"  # fixtures/options.py's option group
OPERATORS = {"&&", "||", "|", ";"}
REDIRECTS = {">", ">>", "<", "2>"}
EXPRESSION_WORDS = {"and", "or", "not"}


# -- what pytest, tox and kdc-cluster accept -------------------------------------------------

@dataclass(frozen=True)
class Accepted:
    options: frozenset[str]  # every option string pytest accepts here: -k, --junitxml, ...
    suite_env: dict[str, str]  # the suite's options -> the environment variable each reads
    markers: frozenset[str]
    tox_envs: dict[str, str]  # environment -> its commands
    tests: frozenset[str]  # test function names of suites/
    profiles: frozenset[str]  # profile names of profiles/


def run_pytest(*args: str) -> str:
    """Output of a pytest process on this checkout that collects nothing and reaches no
    cluster (it targets docs/, not suites/)."""
    result = QUIET.run(
        [sys.executable, "-m", "pytest", *args, "--rootdir", str(ROOT),
         "-c", str(ROOT / "pyproject.toml"), str(ROOT / "docs")],
        Timeout.LOCAL_COMMAND, cwd=ROOT, env={**os.environ, "COLUMNS": "200"})
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def parse_help(text: str) -> tuple[set[str], dict[str, str]]:
    """Option strings of `pytest --help`, and the suite group's options with their
    `[env NAME]`."""
    options: set[str] = set()
    suite: dict[str, str] = {}
    group, current = "", ""
    for line in text.splitlines():
        if line and not line.startswith(" "):
            group, current = line, ""
            continue
        if re.match(r"^  -\S", line):
            names = re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", re.split(r"\s{2,}", line[2:])[0])
            options.update(names)
            current = names[-1] if group == SUITE_GROUP else ""
            if current:
                suite[current] = line
        elif current:
            suite[current] += " " + line.strip()
    envs = {name: re.search(r"\[env (\w+)\]", re.sub(r"\s+", " ", desc))
            for name, desc in suite.items()}
    return options, {name: m.group(1) for name, m in envs.items() if m}


@functools.cache
def accepted() -> Accepted:
    options, suite_env = parse_help(run_pytest("--help"))
    markers = set(re.findall(r"^@pytest\.mark\.(\w+)", run_pytest("--markers"), re.M))
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(ROOT / "tox.ini")
    envs = {s.split(":", 1)[1]: tox[s].get("commands", "") for s in tox.sections()
            if s.startswith("testenv:")}
    tests = {m for path in (ROOT / "suites").rglob("*.py")
             for m in re.findall(r"^\s*(?:async )?def (test_\w+)", path.read_text(), re.M)}
    profiles = {p.stem for p in (ROOT / "profiles").glob("*.yaml")}
    return Accepted(frozenset(options), suite_env, frozenset(markers), envs,
                    frozenset(tests), frozenset(profiles))


# -- what the documents show ----------------------------------------------------------------

@dataclass
class Document:
    path: Path
    prose: str = ""  # the text outside fenced code blocks
    code_lines: list[str] = field(default_factory=list)
    headings: list[str] = field(default_factory=list)


def read_document(path: Path, text: str | None = None) -> Document:
    doc = Document(path)
    fenced = False
    prose: list[str] = []
    pending = ""
    for line in (path.read_text() if text is None else text).splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            pending += line.rstrip()
            if pending.endswith("\\"):
                pending = pending[:-1] + " "
                continue
            doc.code_lines.append(pending)
            pending = ""
            continue
        prose.append(line)
        if re.match(r"^#{1,6} ", line):
            doc.headings.append(line.lstrip("#").strip())
    doc.prose = "\n".join(prose)
    return doc


def inline_code(prose: str) -> list[str]:
    """Code spans of the prose, a span broken over lines joined again."""
    return [re.sub(r"\s+", " ", span).strip()
            for span in re.findall(r"`([^`]+)`", re.sub(r"\n(?!\n)", " ", prose))]


def command_lines(doc: Document) -> list[list[str]]:
    """Each simple command of the document's code blocks and code spans, as words; a
    pipeline or `&&` list gives one per command, redirections dropped."""
    commands: list[list[str]] = []
    for line in [*doc.code_lines, *inline_code(doc.prose)]:
        try:
            words = shlex.split(line, comments=True)
        except ValueError:  # not shell (a YAML line, an expression)
            continue
        current: list[str] = []
        skip = False
        for word in words:
            if skip:
                skip = False
            elif word in OPERATORS:
                commands.append(current)
                current = []
            elif word in REDIRECTS:
                skip = True
            else:
                current.append(word)
        commands.append(current)
    return [words for words in map(strip_prefix, commands) if words]


def strip_prefix(words: list[str]) -> list[str]:
    """Without leading `VAR=value` assignments and `sudo`."""
    while words and (re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]) or words[0] == "sudo"):
        words = words[1:]
    return words


# -- the checks ---------------------------------------------------------------------------------

def args_for_pytest(words: list[str], known: Accepted) -> list[str] | None:
    """The arguments a command hands pytest, or None if it runs no pytest."""
    if words[:1] == ["pytest"]:
        return words[1:]
    if len(words) >= 3 and words[0].split("/")[-1].startswith("python") \
            and words[1:3] == ["-m", "pytest"]:
        return words[3:]
    return tox_posargs(words, known, "pytest")


def args_for_kdc_cluster(words: list[str], known: Accepted) -> list[str] | None:
    if words[:1] == ["kdc-cluster"]:
        return words[1:]
    if len(words) >= 3 and words[0].split("/")[-1].startswith("python") \
            and words[1:3] == ["-m", "kubevirtci.local"]:
        return words[3:]
    return tox_posargs(words, known, "kdc-cluster")


def tox_posargs(words: list[str], known: Accepted, program: str) -> list[str] | None:
    """What `tox -e ENV -- ...` hands ``program``, where ENV's commands run it with the
    positional arguments."""
    if words[:1] != ["tox"] or "--" not in words or len(tox_envs(words)) != 1:
        return None
    commands = known.tox_envs.get(tox_envs(words)[0], "")
    if re.search(rf"^\s*{re.escape(program)}\b.*\{{posargs", commands, re.M):
        return words[words.index("--") + 1:]
    return None


def tox_envs(words: list[str]) -> list[str]:
    envs: list[str] = []
    for flag, value in itertools.pairwise(words):
        if flag == "--":
            break
        if flag == "-e":
            envs += value.split(",")
    return envs


def check_args_for_pytest(args: list[str], known: Accepted) -> list[str]:
    problems = []
    for word, value in zip(args, [*args[1:], ""], strict=True):
        if not word.startswith("-") or word in ("-", "--"):
            continue
        name = word.split("=", 1)[0] if word.startswith("--") else word[:2]
        if name not in known.options:
            problems.append(f"pytest has no option {name}")
        value = word.split("=", 1)[1] if "=" in word else value
        if name == "-m":
            unknown = set(re.findall(r"[A-Za-z_]\w*", value)) - EXPRESSION_WORDS - known.markers
            problems += [f"-m {value!r}: no marker {m}" for m in sorted(unknown)]
        if name == "-k":
            named = set(re.findall(r"\btest_\w+", value))
            problems += [f"-k {value!r}: no test {t} in suites/"
                         for t in sorted(named - known.tests)]
        if name == "--profile" and "/" not in value and not value.endswith(".yaml") \
                and value not in known.profiles:
            problems.append(f"--profile {value}: no profiles/{value}.yaml")
    return problems


def check_args_for_kdc_cluster(args: list[str]) -> list[str]:
    """The command parsed by kdc-cluster's own parser; the documents' notation for the
    optional (`[--force]`) is read as given."""
    words = [w.strip("[]") for w in args if w.strip("[]") and not w.endswith("...")]
    if not words or is_placeholder(words[0]):
        return []  # a placeholder for any command
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            kdc_cluster_parser().parse_args(words)
    except SystemExit:
        error = err.getvalue().strip().splitlines()[-1]
        if any(f"invalid choice: '{w}'" in error for w in words if is_placeholder(w)):
            return []  # `--name IMAGE`: any of the choices
        return [f"kdc-cluster {' '.join(words)}: {error}"]
    return []


def is_placeholder(word: str) -> bool:
    return word.startswith("<") or bool(re.fullmatch(r"[A-Z][A-Z_]*", word))


def command_problems(doc: Document, known: Accepted) -> list[str]:
    problems = []
    for words in command_lines(doc):
        found = []
        if words[:1] == ["tox"]:
            found += [f"tox.ini has no environment {e}" for e in tox_envs(words)
                      if e not in known.tox_envs]
        args = args_for_pytest(words, known)
        if args is not None:
            found += check_args_for_pytest(args, known)
        args = args_for_kdc_cluster(words, known)
        if args is not None:
            found += check_args_for_kdc_cluster(args)
        problems += [f"{doc.path.name}: {p}, in: {shlex.join(words)}" for p in found]
    # `tox -e NAME` named in prose, outside any code span, too
    outside_code = re.sub(r"\s+", " ", re.sub(r"`[^`]+`", " ", doc.prose))
    for name in re.findall(r"\btox -e\s+([\w.-]+)", outside_code):
        if name not in known.tox_envs:
            problems.append(f"{doc.path.name}: tox.ini has no environment {name}")
    return list(dict.fromkeys(problems))


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def anchors(doc: Document) -> set[str]:
    seen: dict[str, int] = {}
    result = set()
    for heading in doc.headings:
        base = slug(heading)
        n = seen.get(base, 0)
        result.add(base if n == 0 else f"{base}-{n}")
        seen[base] = n + 1
    return result


def link_problems(doc: Document) -> list[str]:
    problems = []
    for target in re.findall(r"\]\(([^)\s]+)\)", doc.prose):
        if re.match(r"^[a-z]+:", target):  # https:, mailto:
            continue
        path_part, _, anchor = target.partition("#")
        path = (doc.path.parent / path_part).resolve() if path_part else doc.path
        if ROOT not in path.parents and path != ROOT:
            problems.append(f"{doc.path.name}: link {target} leaves the repository")
        elif not path.exists():
            problems.append(f"{doc.path.name}: link {target}: no {path.relative_to(ROOT)}")
        elif anchor and path.suffix == ".md" and anchor not in anchors(read_document(path)):
            problems.append(f"{doc.path.name}: link {target}: no heading #{anchor} there")
    return problems


# -- the tests -----------------------------------------------------------------------------------

@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_command_the_documents_show_names_what_exists(path):
    assert command_problems(read_document(path), accepted()) == []


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_reaches_a_file_and_its_heading(path):
    assert link_problems(read_document(path)) == []


def test_the_documents_show_commands_at_all():
    """The scan finds what the documents show (it does not pass by seeing nothing)."""
    known = accepted()
    shown = [words for path in DOCS for words in command_lines(read_document(path))]
    assert sum(args_for_pytest(w, known) is not None for w in shown) >= 10
    assert sum(args_for_kdc_cluster(w, known) is not None for w in shown) >= 5
    assert {"--certify", "--kubevirt-source", "-k", "--keep-cluster"} <= {
        word.split("=")[0] for w in shown for word in (args_for_pytest(w, known) or [])}


def test_the_options_table_is_every_registered_option_with_its_variable():
    table = dict(re.findall(r"^\| `(--[\w-]+)[^`]*` \| `(\w+)` \|",
                            (ROOT / "docs" / "options.md").read_text(), re.M))
    assert table == accepted().suite_env
    assert len(table) >= 16


def test_the_readme_opens_with_the_two_commands():
    text = (ROOT / "README.md").read_text()
    first_block = text.split("```bash\n", 1)[1].split("```", 1)[0].splitlines()
    assert [line.split("#")[0].split("&&")[1].strip() for line in first_block] == [
        "tox -e conformance", "tox -e unit"]
    assert text.index("```bash") < text.index("\n## ")


MADE_UP = """# A page

```bash
pytest suites --made-up-option -m not_a_marker -k "test_no_such_test"
tox -e conformance -- --certify --artifacts-dir _output/x --kubevirt-sorce /src
tox -e no-such-env
tox -e cluster -- up --nodse 3
kdc-cluster image --name localhost/kdc/unknown:dev --out x.tar
```

Run `tox -e another-missing-env`, or `python -m pytest suites --profile nope -n 2`.
See [the options](options.md#no-such-heading), [gone](no-such-page.md) and
[fine](options.md#options).
"""


def test_made_up_options_envs_commands_and_links_are_each_found():
    doc = read_document(ROOT / "docs" / "made-up.md", MADE_UP)
    problems = command_problems(doc, accepted()) + link_problems(doc)
    expected = ["pytest has no option --made-up-option", "no marker not_a_marker",
                "no test test_no_such_test", "pytest has no option --kubevirt-sorce",
                "no environment no-such-env", "kdc-cluster up --nodse 3",
                "kdc-cluster image --name localhost/kdc/unknown:dev",
                "no environment another-missing-env", "--profile nope",
                "no heading #no-such-heading", "link no-such-page.md"]
    for part in expected:
        assert any(part in p for p in problems), (part, problems)
    assert len(problems) == len(expected), problems  # -n, --certify, #options are fine
