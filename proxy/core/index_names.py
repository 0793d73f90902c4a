"""What the summary index (`proxy.core.summary_index`) leaves out, so that its room holds signal.

Every filter here was measured alone on the shared traces (`python -m proxy replay`; recall =
identifiers the model later took from earlier tool results and still forwarded) and kept only
if it lost no recall; together they keep 843 of 906 at an index of 9,000 characters, where the
index without them kept 841 (docs: issue 32).

- Machinery (`NOISE`, `without_noise`): the lines of the interpreter's, installed packages' and
  test runners' own frames and paths; their names are never the work's.
- Diff headers (`plain_diff`): `git diff` shows a file as `a/src/x.py` and `b/src/x.py`; both
  are `src/x.py`, the spelling the agent writes (in results and in the agent's own patches).
- Template tags (`without_tags`): the tags agent frameworks wrap a result in (mini-swe-agent's
  `<output_head>`, `<elided_chars>`, `<returncode>`; `{{placeholder}}`s) are no name of the work.
- Package files: a wheel (`….whl`, `….whl.metadata`), an sdist, a cache directory named by a
  hash: pip's output, never the work's.
- Temporary names (`temporary`): a name under a randomly named temporary path (`/tmp/tmpab12cd34/…`,
  `/tmp/pylint_debug_72fvdfuz`, `tmp.Xy12AbCdEf`) is a scratch copy's or pip's, unless the agent
  itself wrote that random segment: OpenHands works in a checkout under `/tmp/tmpr59rsqbu/`.
- One spelling per file (`roots`, `spelling_key`): `./src/x.py`, `src/x.py` and `/repo/src/x.py`
  are one file when the agent's own paths show the root (it wrote both `/repo/a.py`-like and
  `a.py`-like spellings of one file). A file the agent wrote in any spelling is not a name only
  the results showed; of a file's other spellings the shortest is listed once. The files line
  keeps the agent's first spelling, located at the latest result showing any of them.
- Near-duplicate errors (`new_error`): an error differing from one listed only in its numbers
  (line numbers, addresses, counts), or contained in one listed (`Error: x` after
  `AttributeError: x`), is not listed again.
"""

from __future__ import annotations

import re
from collections.abc import Collection

# Lines of the interpreter's, an installed package's or a test runner's own machinery, whose
# names are never the work's: frames and paths under site-packages, the standard library, frozen
# modules, node_modules, cargo's registry.
NOISE = re.compile(
    r"site-packages|dist-packages|/lib/python\d|<frozen |/usr/lib/|/usr/local/lib/|node_modules/"
    r"|\.cargo/registry/|/rustc/|/lib/jvm/|importlib\._bootstrap"
)
_FRAME = re.compile(r'\s{0,12}File "[^"]{1,400}", line \d')
# `diff --git a/x b/x`, `--- a/x`, `+++ b/x` (at a line's start, or where a JSON string or an escaped `\n` of a
# call's JSON arguments): the prefixes git puts on the two sides' paths.
_DIFF_HEADER = re.compile(r"(?:^|(?<=\\n)|(?<=\"))(?:diff --git a/\S{1,400} b/|--- a/|\+\+\+ b/)", re.M)
# A bare tag (`<output_head>`, `</returncode>`) or a template placeholder (`{{tool_output}}`); an
# opening tag not right after a name (`Vec<my_type>` is a type).
_TAG = re.compile(r"</[A-Za-z][\w-]{0,40}>|(?<![\w:.])<[A-Za-z][\w-]{0,40}>|\{\{\s{0,4}[\w.]{1,80}\s{0,4}\}\}")
# A path segment named at random: tempfile's (`tmpab12cd34`, `prefix_ab12cd34`, `tmpab12cd34.py`),
# mktemp's (`tmp.Xy12AbCdEf`); `random_segments` also asks for a digit.
_RANDOM = re.compile(
    r"(?:^|(?<=/))(?:tmp\.?[A-Za-z0-9_]{6,12}|[A-Za-z][A-Za-z0-9]{0,30}(?:_[A-Za-z]{1,30}){0,3}"
    r"_[a-z0-9_]{8})(?=/|$|\.\w{1,8}$)"
)
_NUMBER = re.compile(r"(?<!\w)(?:0x[0-9a-fA-F]+|\d+)")  # not the digits of a name (`edge1`)
# A package manager's file: a wheel, its metadata, an sdist, a cache directory named by a hash.
_PACKAGE_FILE = re.compile(r"\.whl(?:\.metadata)?$|\.tar\.gz$|/[0-9a-f]{16,}(?:/|$)")
ERRORS_COMPARED = 64  # the errors listed a new one is checked against for containment


def without_noise(text: str) -> str:
    """`text` without the lines of the interpreter's and installed packages' machinery (`NOISE`),
    nor the source line a traceback prints under such a frame."""
    if NOISE.search(text) is None:
        return text
    kept: list[str] = []
    skip_next = False
    for line in text.splitlines():
        if skip_next and line.startswith(" ") and _FRAME.match(line) is None:
            skip_next = False
            continue
        skip_next = False
        if NOISE.search(line, 0, 400) is not None:
            skip_next = _FRAME.match(line) is not None
            continue
        kept.append(line)
    return "\n".join(kept)


def plain_diff(text: str) -> str:
    """`text` with the `a/` and `b/` of its diff headers' paths removed."""
    if "a/" not in text and "b/" not in text:
        return text
    return _DIFF_HEADER.sub(_plain_header, text)


def _plain_header(match: re.Match[str]) -> str:
    header = match.group(0)
    if header.startswith("diff"):
        return "diff --git " + header[len("diff --git a/") : -len("b/")]
    return header[:4]


def without_tags(text: str) -> str:
    """`text` with its bare tags and template placeholders replaced by a space."""
    if "<" not in text and "{{" not in text:
        return text
    return _TAG.sub(" ", text)


def clean(text: str) -> str:
    """A result's text as its names are read: diff headers plain, tags removed."""
    return without_tags(plain_diff(text))


def random_segments(name: str) -> list[str]:
    """The segments of `name` named at random (a temporary directory or file): with a digit, in
    a path or starting with `tmp`."""
    return [
        segment
        for segment in _RANDOM.findall(name)
        if any(c.isdigit() for c in segment) and ("/" in name or segment.startswith("tmp"))
    ]


def temporary(name: str, segments: set[str]) -> bool:
    """Whether `name` has a random segment not in `segments` (those the agent wrote)."""
    return any(segment not in segments for segment in random_segments(name))


def roots(paths: list[str]) -> list[str]:
    """The roots evident in the agent's own paths: `/repo` when it wrote both `/repo/src/x.py`
    and `src/x.py`. Longest first."""
    relative = {path for path in paths if not path.startswith(("/", "~", "…")) and "/" in path}
    found: set[str] = set()
    for path in paths:
        if path.startswith("/"):
            parts = path.split("/")
            for cut in range(2, len(parts) - 1):
                if "/".join(parts[cut:]) in relative:
                    found.add("/".join(parts[:cut]))
                    break
    return sorted(found, key=lambda root: (-len(root), root))


def spelling_key(name: str, known_roots: Collection[str]) -> str:
    """One key for a file's spellings: `./src/x.py`, `/repo/src/x.py` (`/repo` a root) and
    `src/x.py` are all `src/x.py`. The longest root wins; `known_roots` is best a set: each of the
    name's own prefixes is looked up in it (a name has few, the agent's paths may show many roots)."""
    name = without_dot_slash(name)
    cut = name.rfind("/") if known_roots else -1
    while cut > 0:
        if name[:cut] in known_roots:
            return name[cut + 1 :]
        cut = name.rfind("/", 0, cut)
    return name


def without_dot_slash(name: str) -> str:
    """`name` without its leading `./`s (in linear time, however many)."""
    start = 0
    while name.startswith("./", start):
        start += 2
    return name[start:]


def signal(shown: dict[str, list[int]], written: set[str], known_roots: list[str]) -> dict[str, list[int]]:
    """`shown` (name → [results, last result, edited flag]) without the temporary names, the
    package files, nor a file the agent wrote in another spelling; a file shown in several
    spellings once, by its shortest (without `./`), with the most results, the latest and the
    flag of them all."""
    segments = {segment for name in written for segment in random_segments(name)}
    lookup = frozenset(known_roots)
    wrote = {spelling_key(name, lookup) for name in written}
    groups: dict[str, list[str]] = {}
    for name in shown:
        key = spelling_key(name, lookup)
        if key not in wrote and not temporary(name, segments) and _PACKAGE_FILE.search(name) is None:
            groups.setdefault(key, []).append(name)
    kept: dict[str, list[int]] = {}
    for spellings in groups.values():
        shortest = without_dot_slash(min(spellings, key=lambda name: (len(name), name)))
        kept[shortest] = [max(shown[name][i] for name in spellings) for i in range(3)]
    return kept


def one_file_spelling(paths: list[str], where: dict[str, str], known_roots: list[str]) -> list[str]:
    """The files line's entries: each file once, in the agent's first spelling, with the place
    (`where`: "@line:a-b") of the latest result that showed it in any spelling."""
    first: dict[str, str] = {}
    place: dict[str, str] = {}
    lookup = frozenset(known_roots)
    for path in paths:
        key = spelling_key(path, lookup)
        first.setdefault(key, path)
        if path in where and (key not in place or _line(where[path]) >= _line(place[key])):
            place[key] = where[path]
    return [path + place.get(key, "") for key, path in first.items()]


def _line(located: str) -> int:
    return int(located[1:].partition(":")[0])


def error_key(error: str) -> str:
    """`error` with its numbers (line numbers, addresses, counts) made one."""
    return _NUMBER.sub("0", error)


def new_error(error: str, keys: list[str]) -> bool:
    """Whether `error` is no near-duplicate of an error whose key is in `keys` (the same but for
    its numbers, or contained in one); if new, its key is added."""
    key = error_key(error)
    if any(key in listed for listed in keys[:ERRORS_COMPARED]):
        return False
    keys.append(key)
    return True
