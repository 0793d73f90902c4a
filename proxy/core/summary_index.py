"""A short, deterministic index of a summarised part of the history (the files read or edited,
the commands run, the errors seen), and what it leaves out so that its room holds signal.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Collection
from typing import Any

from proxy.core import texts
from proxy.core.preview import error_lines, plain_text
from proxy.core.view import ItemView

# ==================== index names
# What the summary index (below) leaves out, so that its room holds signal.
#
# Every filter here was measured alone on the shared traces (`python -m proxy replay`; recall =
# identifiers the model later took from earlier tool results and still forwarded) and kept only
# if it lost no recall; together they keep 843 of 906 at an index of 9,000 characters, where the
# index without them kept 841 (docs: issue 32).
#
# - Machinery (`NOISE`, `without_noise`): the lines of the interpreter's, installed packages' and
#   test runners' own frames and paths; their names are never the work's.
# - Diff headers (`plain_diff`): `git diff` shows a file as `a/src/x.py` and `b/src/x.py`; both
#   are `src/x.py`, the spelling the agent writes (in results and in the agent's own patches).
# - Template tags (`without_tags`): the tags agent frameworks wrap a result in (mini-swe-agent's
#   `<output_head>`, `<elided_chars>`, `<returncode>`; `{{placeholder}}`s) are no name of the work.
# - Package files: a wheel (`….whl`, `….whl.metadata`), an sdist, a cache directory named by a
#   hash: pip's output, never the work's.
# - Temporary names (`temporary`): a name under a randomly named temporary path (`/tmp/tmpab12cd34/…`,
#   `/tmp/pylint_debug_72fvdfuz`, `tmp.Xy12AbCdEf`) is a scratch copy's or pip's, unless the agent
#   itself wrote that random segment: OpenHands works in a checkout under `/tmp/tmpr59rsqbu/`.
# - One spelling per file (`roots`, `spelling_key`): `./src/x.py`, `src/x.py` and `/repo/src/x.py`
#   are one file when the agent's own paths show the root (it wrote both `/repo/a.py`-like and
#   `a.py`-like spellings of one file). A file the agent wrote in any spelling is not a name only
#   the results showed; of a file's other spellings the shortest is listed once. The files line
#   keeps the agent's first spelling, located at the latest result showing any of them.
# - Near-duplicate errors (`new_error`): an error differing from one listed only in its numbers
#   (line numbers, addresses, counts), or contained in one listed (`Error: x` after
#   `AttributeError: x`), is not listed again.

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
        if path in where and (key not in place or _line_number(where[path]) >= _line_number(place[key])):
            place[key] = where[path]
    return [path + place.get(key, "") for key, path in first.items()]


def _line_number(located: str) -> int:
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


# ==================== summary index
# A short, deterministic index of a summarised part of the history.
#
# A summary is the summariser's prose; what an agent most often needs back from the part it
# replaced is concrete: which files it read or edited, which commands it ran, which errors it
# saw. The index lists them, read straight from the items (tool-call arguments, tool results),
# so it is exact where the summary may paraphrase, and byte-stable: the same items always give
# the same index. Each of these lists keeps first-seen order without repeats, and the three stay
# under LISTS_CHARS (≈ 300 tokens); a list that does not fit ends with "+N more".
#
# Each file says where its content lives: `@N`, the line of the summary's ref (0-based, as
# `context_reload`'s offset counts) holding the last result that showed it, and `:a-b`, the lines
# of the file that result showed when known (an editor's view range, `sed -n a,bp`, numbered
# output), so a model can reload precisely.
#
# A last line names what only the results showed: the structured names (dotted names, paths,
# snake_case names) that the tool results carried and the agent's own messages, calls and task
# never wrote — the functions, modules and files it looked at and has not yet used, which it most
# often needs again. What crowds out the work's is left out (the index names above, each filter
# measured alone, none losing recall): the interpreter's, installed packages' and test runners'
# own names (`NOISE`: a traceback's frames in `site-packages`, `<frozen …>`), a package manager's
# files (wheels, hash-named cache dirs), a diff header's `a/` and `b/` (`a/src/x.py` is
# `src/x.py`), the tags agent frameworks wrap results in (`<output_head>`, `{{…}}`), names under
# a random temporary directory the agent never wrote (`/tmp/tmpab12cd34/…`), and every spelling
# but one of a file (`./src/x.py`, `/repo/src/x.py` and `src/x.py`, the root evident from the
# agent's own paths; none if the agent wrote it in any spelling). The files line likewise lists
# a file once, in the agent's first spelling; the errors line lists an error once when others
# differ from it only in numbers (line numbers, addresses) or are contained in it. Ranked by
# relevance: a name a result of a file later edited showed, then one seen in more than one
# result, then the rest; within each the most results, then the most recent. A name inside one
# already listed is not repeated. It takes what the other lines leave of INDEX_CHARS (≈ 2,250
# tokens for the whole index: with the filters, 9,000 characters keep the recall 10,000 had
# without them, 843 of 906 identifiers on the shared traces, at a lower cost; 8,000 lose 3 —
# bench/recall_frontier.py); `context_search` finds the rest behind the ref.

INDEX_CHARS = 9_000  # the whole index, tags included (≈ 2,250 tokens): see the docstring, bench/recall_frontier.py
LISTS_CHARS = 1200  # the files, commands and errors lines, tags included
INDEX_NAMES = "names in results: "  # the label of the names line (the others are in proxy.core.texts)
NAME_MIN = 4  # shorter names are not listed
NAME_SCAN = 200_000  # the characters of one item the names are looked for in
NAMES_TRIED = 5_000  # the best-ranked names tried for the line (its cost stays bounded)
FILE_CHARS = 100  # one path (its end is kept)
COMMAND_CHARS = 80  # one command: its first line
ERROR_CHARS = 100  # one error line
ARGUMENTS_MAX = 1_000_000  # larger arguments are not parsed

_PATH_KEYS = (
    "path",
    "file",
    "file_path",
    "filepath",
    "filename",
    "file_name",
    "target_file",
    "notebook_path",
    "paths",
    "files",
)
_COMMAND_KEYS = ("command", "cmd", "commands")
_EDITOR_VERBS = frozenset(
    {"view", "create", "str_replace", "insert", "undo_edit", "read", "write", "edit", "append", "delete"}
)
_EDITS = frozenset({"create", "str_replace", "insert", "undo_edit", "write", "edit", "append", "delete"})
_EDIT_TOOL = re.compile(
    r"^(?:edit|write|multiedit|create_file|write_file|replace|str_replace|apply_patch|patch)$", re.I
)
_SED_RANGE = re.compile(r"sed -n ['\"]?(\d{1,7}),(\d{1,7})p")
_NUMBERED = re.compile(r"\s{0,8}(\d{1,7})(?:\t|[:|] | {2})")  # `cat -n`, an editor's view: the line number
_SHELLS = frozenset({"bash", "sh", "zsh", "dash"})
_SHELL_NAME = re.compile(r"bash|shell|exec|run|terminal|command|cmd|^sh$", re.I)
_PATTERN_FIRST = frozenset({"sed", "grep", "egrep", "fgrep", "rg", "ag", "awk", "perl"})  # first argument is a script
_NO_FILE_ARGS = frozenset({"cd", "pushd", "echo", "printf", "export"})
_PUNCTUATION = frozenset(";&|()<>")
_REDIRECTS = frozenset({">", ">>", ">|", "&>", "&>>", "<"})
_PATCH_FILE = re.compile(r"^\*\*\* (?:Add|Update|Delete) File: (.{1,400})$|^\*\*\* Move to: (.{1,400})$", re.M)
_FILE_TOKEN = re.compile(r"[\w.~/+@-]{1,400}")
_EXTENSION = re.compile(r"[^/.]\.[A-Za-z][A-Za-z0-9]{0,7}$")
_CD_PREFIX = re.compile(r"^(?:cd [^;&|\n]{1,400}? ?&& ?)+")
# A structured name: dotted or slashed (`pkg.mod.func`, `src/app.py`) or snake_case; bounded
# repeats, so a long run of word characters costs linear time.
_NAME = re.compile(
    r"(?<![\w./])(?:(?:\.{0,2}/)?[A-Za-z_]\w{0,80}(?:[./]\w{1,80}){1,16}"
    r"|_{0,4}[A-Za-z][A-Za-z0-9]{0,80}_\w{1,80})"
)


class _Seen:
    """Distinct entries in first-seen order."""

    def __init__(self) -> None:
        self.entries: dict[str, None] = {}

    def add(self, entry: str) -> None:
        if entry:
            self.entries.setdefault(entry, None)


def summary_index(items: list[Any], view: ItemView, *, task: str = "") -> str:
    """`<index>` with the files, commands, errors and names of `items`, one line each ("" if none).
    `task`: the text of the task (kept verbatim before the summary): its names are not listed."""
    files, commands, errors = _Seen(), _Seen(), _Seen()
    error_keys: list[str] = []  # the errors listed, their numbers made one (index_names.error_key)
    written: set[str] = set(_NAME.findall(task, 0, NAME_SCAN))  # the names the agent's own items wrote
    shown: dict[str, list[int]] = {}  # name → [results it is in, the last of them]
    calls: dict[str, tuple[list[str], str]] = {}  # call id → (its files, the lines it asked for)
    where: dict[str, str] = {}  # file → "@line:a-b" of the last result that showed it
    edited: set[str] = set()
    from_files: dict[int, list[str]] = {}  # position of a result → the files its call named
    line = 0  # the line of the ref's JSON lines the item is on (system items are not stored)
    for position, item in enumerate(items):
        details = view.call_details(item)
        ids = view.calls(item)
        for number, (name, arguments) in enumerate(details):
            named, edit, asked = _read_call(name, arguments, files, commands=commands)
            if edit:
                edited.update(named)
            if len(ids) == len(details):
                calls[ids[number]] = (named, asked)
        role = view.role(item)
        if role == "tool":
            answer = view.answers(item)
            named, asked = calls.get(answer, ([], "")) if answer is not None else ([], "")
            text = view.tool_text(item)
            text = plain_text(text) if text else ""  # a command's output, not the JSON wrapping it
            span = asked or _numbered_span(text)
            for path in named:
                where[path] = f"@{line}" + (f":{span}" if span else "")
            from_files[position] = named
            if text:
                for error in error_lines(text):
                    if new_error(error, error_keys):
                        errors.add(_cut(error, ERROR_CHARS))
                for found in _found(text):
                    seen = shown.setdefault(found, [0, 0, 0])
                    seen[0] += 1
                    seen[1] = position
        else:
            for text in (view.text(item) or "", *(arguments for _, arguments in details)):
                written.update(_NAME.findall(plain_diff(text[:NAME_SCAN])))
        if role != "system":
            line += 1
    for position, named in from_files.items():  # a result that showed a file later edited
        if edited.intersection(named):
            for found in _results_names(items[position], view):
                if found in shown:
                    shown[found][2] = 1
    found_roots = roots(list(files.entries))
    located = one_file_spelling(list(files.entries), where, found_roots)
    lists = [
        (texts.INDEX_FILES, ", ", located),
        (texts.INDEX_COMMANDS, "; ", list(commands.entries)),
        (texts.INDEX_ERRORS, "; ", list(errors.entries)),
    ]
    lists = [entry for entry in lists if entry[2]]
    names = _names(signal(shown, written, found_roots), written)
    if not lists and not names:
        return ""
    room = LISTS_CHARS - len(texts.INDEX_OPEN) - len(texts.INDEX_CLOSE) - 2 * len(lists)
    lines = [
        _line(label, separator, entries, room=share)
        for (label, separator, entries), share in zip(lists, _shares([_need(*e) for e in lists], room))
    ]
    used = len(texts.INDEX_OPEN) + len(texts.INDEX_CLOSE) + 1 + sum(len(line) + 1 for line in lines)
    names_line = _names_line(names, INDEX_CHARS - used - 1)  # the index as it is, and the names line's "\n"
    if names_line:
        lines.append(names_line)
    return "\n".join([texts.INDEX_OPEN, *lines, texts.INDEX_CLOSE]) if lines else ""


def _results_names(item: Any, view: ItemView) -> set[str]:
    text = view.tool_text(item)
    return _found(plain_text(text)) if text else set()


def _found(text: str) -> set[str]:
    """The names in a result's (plain) text, its noise, diff prefixes and tags left out."""
    return set(_NAME.findall(clean(without_noise(text[:NAME_SCAN]))))


def _relevance(seen: list[int]) -> int:
    """0: shown by a result of a file later edited; 1: in more than one result; 2: the rest.
    (Ranking names that share a part with the task's first lost recall on the shared traces,
    0.853 → 0.828: the task's neighbours are not what the agent reaches for next.)"""
    if seen[2]:
        return 0
    return 1 if seen[0] > 1 else 2


def _names(shown: dict[str, list[int]], written: set[str]) -> list[str]:
    """The names the results showed and the agent never wrote, none of the machinery's: by
    relevance, then those in more results, then the most recent, then in character order."""
    return sorted(
        (name for name in shown if len(name) >= NAME_MIN and name not in written and NOISE.search(name) is None),
        key=lambda name: (_relevance(shown[name]), -shown[name][0], -shown[name][1], name),
    )


def _names_line(names: list[str], room: int) -> str:
    """The label and the names that fit in `room` characters, in rank order ("" if none fits).
    A name inside one already listed is left out; one too long for what is left does not stop
    the shorter ones after it."""
    listed: list[str] = []
    used = len(INDEX_NAMES)
    for name in names[:NAMES_TRIED]:
        if room - used < len(", ") + NAME_MIN:
            break
        if used + len(", ") * bool(listed) + len(name) > room or any(name in other for other in listed):
            continue
        used += len(", ") * bool(listed) + len(name)
        listed.append(name)
    return INDEX_NAMES + ", ".join(listed) if listed else ""


# ---------------------------------------------------------------- reading a call


def _read_call(name: str, arguments: str, files: _Seen, *, commands: _Seen) -> tuple[list[str], bool, str]:
    """Adds the call's files and commands; (its files, whether it edits them, "a-b" when it asks
    for lines a to b of a file)."""
    named = _Seen()
    edit = False
    asked = ""
    value: Any = arguments
    if len(arguments) <= ARGUMENTS_MAX and arguments.lstrip().startswith(("{", "[")):
        try:
            value = json.loads(arguments)
        except (ValueError, RecursionError):
            value = arguments
    strings: list[str] = []
    if isinstance(value, dict):
        editor = "editor" in name.lower() or name.lower() in ("edit", "write", "read", "view")
        verb = value.get("command")
        edit = (verb in _EDITS if isinstance(verb, str) else False) or _EDIT_TOOL.match(name) is not None
        span = value.get("view_range")
        if isinstance(span, list) and len(span) == 2 and all(isinstance(v, int) for v in span):
            asked = f"{span[0]}-{span[1]}" if span[1] >= 0 else f"{span[0]}-"
        for key in _PATH_KEYS:
            for path in _strings(value.get(key)):
                named.add(_path(path))
        for key in _COMMAND_KEYS:
            raw = value.get(key)
            if isinstance(raw, str) and (editor or raw in _EDITOR_VERBS) and any(k in value for k in _PATH_KEYS):
                continue  # an editor's verb (str_replace_editor's command="view"), not a shell command
            if isinstance(raw, str) and not _SHELL_NAME.search(name) and " " not in raw.strip():
                continue  # one word given to a tool that is no shell: a verb (task_tracker's "plan")
            for command in _commands(raw, key == "commands"):
                commands.add(_command(command))
                for path in _command_files(command):
                    named.add(_path(path))
                sed = _SED_RANGE.search(command, 0, 2000)
                if sed is not None:
                    asked = f"{sed.group(1)}-{sed.group(2)}"
                edit = edit or " -i" in command[:2000] and command.lstrip().startswith("sed")
        strings = [v for v in value.values() if isinstance(v, str)]
    elif isinstance(value, str):
        strings = [value]
    for string in strings:
        if "*** " in string:
            for match in _PATCH_FILE.finditer(string[:ARGUMENTS_MAX]):
                named.add(_path((match.group(1) or match.group(2)).strip()))
                edit = True
    for path in named.entries:
        files.add(path)
    return list(named.entries), edit, asked


def _numbered_span(text: str) -> str:
    """ "a-b" when the output is numbered lines (`cat -n`, an editor's view), from the first
    and last numbered lines, else ""."""
    lines = text.splitlines()
    if len(lines) < 3:
        return ""
    head = [m for m in map(_NUMBERED.match, lines[:8]) if m is not None]
    tail = [m for m in map(_NUMBERED.match, lines[-8:]) if m is not None]
    if len(head) < 3 or not tail:
        return ""
    first, last = int(head[0].group(1)), int(tail[-1].group(1))
    return f"{first}-{last}" if last > first else ""


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [v for v in value[:100] if isinstance(v, str)]
    return []


def _commands(raw: Any, many: bool) -> list[str]:
    """The command lines of a `command`/`cmd` argument: a string, or an argv (`["bash", "-lc",
    "…"]` is its script); `commands` (a shell call's) is a list of command lines."""
    if isinstance(raw, str):
        return [raw]
    if not isinstance(raw, list) or not raw or not all(isinstance(part, str) for part in raw):
        return []
    if many:
        return raw[:100]
    if len(raw) == 3 and raw[0].rsplit("/", 1)[-1] in _SHELLS and raw[1] in ("-c", "-lc", "-ic"):
        return [raw[2]]
    return [" ".join(raw)]


def _command(command: str) -> str:
    """The command's first line, whitespace squeezed, a leading `cd … &&` dropped, cut."""
    first, _, rest = command.strip().partition("\n")
    first = _CD_PREFIX.sub("", " ".join(first[: 4 * COMMAND_CHARS].split()))
    if rest.strip():
        first += " …"
    return _cut(first, COMMAND_CHARS)


def _command_files(command: str) -> list[str]:
    """Paths among a command's arguments (its first line): tokens with a file extension, not
    options, not the program, not a search pattern or sed script, not a `cd` target."""
    line = command.strip().partition("\n")[0][:2000]
    try:
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        tokens = list(lexer)
    except ValueError:  # an unclosed quote
        tokens = line.split()
    found: list[str] = []
    program: str | None = None  # the program of the simple command being read
    pattern_pending = skip_next = target_next = False
    for token in tokens:
        if token and set(token) <= _PUNCTUATION:
            if token in _REDIRECTS:
                target_next = True  # `> file`: the file is written, whatever the program
            else:
                program = None  # `|`, `&&`, `;`: another command begins
            continue
        if target_next:
            target_next = False
        elif program is None:
            program = token.rsplit("/", 1)[-1]
            pattern_pending = program in _PATTERN_FIRST
            continue
        elif skip_next or program in _NO_FILE_ARGS:
            skip_next = False
            continue
        elif token.startswith("-"):
            skip_next = token in ("-e", "-f", "--regexp")
            pattern_pending = pattern_pending and token not in ("-e", "--regexp")
            continue
        elif pattern_pending:
            pattern_pending = False
            continue
        path = token.split("::", 1)[0]  # a pytest node id
        if _FILE_TOKEN.fullmatch(path) and _EXTENSION.search(path) and path != "/dev/null":
            found.append(path)
    return found


def _path(path: str) -> str:
    path = without_dot_slash(" ".join(path.split()))  # linear, however many `./` the model wrote
    return path if len(path) <= FILE_CHARS else "…" + path[-(FILE_CHARS - 1) :]


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


# ---------------------------------------------------------------- fitting the lines


def _need(label: str, separator: str, entries: list[str]) -> int:
    return len(label) + sum(map(len, entries)) + len(separator) * (len(entries) - 1)


def _shares(needs: list[int], room: int) -> list[int]:
    """Room for each line: the smallest needs are met in full, the rest share what is left
    equally (deterministic water-filling)."""
    shares = [0] * len(needs)
    left, waiting = room, sorted(range(len(needs)), key=lambda i: (needs[i], i))
    while waiting:
        equal = left // len(waiting)
        index = waiting.pop(0)
        shares[index] = min(needs[index], equal)
        left -= shares[index]
    return shares


def _line(label: str, separator: str, entries: list[str], *, room: int) -> str:
    """`label` and as many entries as fit in `room`, then "+N more" for the rest."""
    line = label
    for shown, entry in enumerate(entries):
        rest = len(entries) - shown - 1
        more = len(separator) + len(texts.index_more(rest)) if rest else 0
        candidate = line + (separator if shown else "") + entry
        if len(candidate) + more > room:
            return line + (separator if shown else "") + texts.index_more(len(entries) - shown)
        line = candidate
    return line
