"""A short, deterministic index of a summarised part of the history.

A summary is the summariser's prose; what an agent most often needs back from the part it
replaced is concrete: which files it read or edited, which commands it ran, which errors it
saw. The index lists them, read straight from the items (tool-call arguments, tool results),
so it is exact where the summary may paraphrase, and byte-stable: the same items always give
the same index. Each of these lists keeps first-seen order without repeats, and the three stay
under LISTS_CHARS (≈ 300 tokens); a list that does not fit ends with "+N more".

Each file says where its content lives: `@N`, the line of the summary's ref (0-based, as
`context_reload`'s offset counts) holding the last result that showed it, and `:a-b`, the lines
of the file that result showed when known (an editor's view range, `sed -n a,bp`, numbered
output), so a model can reload precisely.

A last line names what only the results showed: the structured names (dotted names, paths,
snake_case names) that the tool results carried and the agent's own messages, calls and task
never wrote — the functions, modules and files it looked at and has not yet used, which it most
often needs again. What crowds out the work's is left out (`proxy.core.index_names`, each filter
measured alone, none losing recall): the interpreter's, installed packages' and test runners'
own names (`NOISE`: a traceback's frames in `site-packages`, `<frozen …>`), a package manager's
files (wheels, hash-named cache dirs), a diff header's `a/` and `b/` (`a/src/x.py` is
`src/x.py`), the tags agent frameworks wrap results in (`<output_head>`, `{{…}}`), names under
a random temporary directory the agent never wrote (`/tmp/tmpab12cd34/…`), and every spelling
but one of a file (`./src/x.py`, `/repo/src/x.py` and `src/x.py`, the root evident from the
agent's own paths; none if the agent wrote it in any spelling). The files line likewise lists
a file once, in the agent's first spelling; the errors line lists an error once when others
differ from it only in numbers (line numbers, addresses) or are contained in it. Ranked by
relevance: a name a result of a file later edited showed, then one seen in more than one
result, then the rest; within each the most results, then the most recent. A name inside one
already listed is not repeated. It takes what the other lines leave of INDEX_CHARS (≈ 2,250
tokens for the whole index: with the filters, 9,000 characters keep the recall 10,000 had
without them, 843 of 906 identifiers on the shared traces, at a lower cost; 8,000 lose 3 —
bench/recall_frontier.py); `context_search` finds the rest behind the ref.
"""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

from proxy.core import index_names, texts
from proxy.core.index_names import NOISE, without_noise
from proxy.core.preview import error_lines, plain_text
from proxy.core.view import ItemView

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
                    if index_names.new_error(error, error_keys):
                        errors.add(_cut(error, ERROR_CHARS))
                for found in _found(text):
                    seen = shown.setdefault(found, [0, 0, 0])
                    seen[0] += 1
                    seen[1] = position
        else:
            for text in (view.text(item) or "", *(arguments for _, arguments in details)):
                written.update(_NAME.findall(index_names.plain_diff(text[:NAME_SCAN])))
        if role != "system":
            line += 1
    for position, named in from_files.items():  # a result that showed a file later edited
        if edited.intersection(named):
            for found in _results_names(items[position], view):
                if found in shown:
                    shown[found][2] = 1
    roots = index_names.roots(list(files.entries))
    located = index_names.one_file_spelling(list(files.entries), where, roots)
    lists = [
        (texts.INDEX_FILES, ", ", located),
        (texts.INDEX_COMMANDS, "; ", list(commands.entries)),
        (texts.INDEX_ERRORS, "; ", list(errors.entries)),
    ]
    lists = [entry for entry in lists if entry[2]]
    names = _names(index_names.signal(shown, written, roots), written)
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
    return set(_NAME.findall(index_names.clean(without_noise(text[:NAME_SCAN]))))


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
    path = index_names.without_dot_slash(" ".join(path.split()))  # linear, however many `./` the model wrote
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
