"""Every `pip install` command in README.md and docs/ can work: the package is not on
PyPI, so it is installed from a path (`.`, `./`) or a `git+` URL, with extras that
pyproject.toml defines, and requirement files that exist."""

import glob
import os
import re
import shlex

try:
    import tomllib
except ImportError:  # Python 3.10
    from pip._vendor import tomli as tomllib

import pytest

import helpers_data as h

DOCS = [os.path.join(h.ROOT, "README.md"), *sorted(glob.glob(os.path.join(h.ROOT, "docs", "*.md")))]
# `pip install ...`, also through a venv's pip (`.venv/bin/pip install -e ".[beam]"`).
COMMAND = re.compile(r"`(?:[\w./-]*/)?(pip install [^`]+)`")


def _extras():
    with open(os.path.join(h.ROOT, "pyproject.toml"), "rb") as f:
        return set(tomllib.load(f)["project"]["optional-dependencies"])


def _commands():
    found = []
    for path in DOCS:
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                found += [(f"{os.path.relpath(path, h.ROOT)}:{number}", c) for c in COMMAND.findall(line)]
    return found


def _targets(command):
    """The requirement arguments of one pip command, with `-r FILE` as ("-r", FILE)."""
    words = shlex.split(command.replace("<repository URL>", "https://example.org/realformer_tf.git"))[2:]
    targets, i = [], 0
    while i < len(words):
        if words[i] in ("-r", "-c"):
            targets.append((words[i], words[i + 1]))
            i += 2
        elif words[i].startswith("-"):
            i += 1
        else:
            targets.append(("req", words[i]))
            i += 1
    return targets


def test_the_docs_have_install_commands():
    where = {place.split(":")[0] for place, _ in _commands()}
    assert "README.md" in where and len(_commands()) >= 5


@pytest.mark.parametrize("place,command", _commands(), ids=[place for place, _ in _commands()])
def test_install_command_can_work(place, command):
    extras = _extras()
    for kind, target in _targets(command):
        if kind in ("-r", "-c"):
            assert os.path.exists(os.path.join(h.ROOT, target)), f"{place}: {target} does not exist"
            continue
        name = re.match(r"[A-Za-z0-9_.\-]+", target)
        package = name.group(0) if name else target
        if package in (".", "./") or target.startswith((".[", "./[")) or package == "realformer_tf":
            asked = re.search(r"\[([^\]]*)\]", target)
            for extra in (asked.group(1).split(",") if asked else []):
                assert extra.strip() in extras, f"{place}: extra [{extra}] is not in pyproject.toml ({sorted(extras)})"
            if package == "realformer_tf":
                assert " @ git+" in target or "@git+" in target, (
                    f"{place}: {target!r} asks the package index for realformer_tf, which is not published; "
                    "install from a clone ('.[cpu]') or the repository URL ('realformer_tf[cpu] @ git+...')")
