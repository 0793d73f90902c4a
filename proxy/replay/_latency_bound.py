"""What a summariser's latency must cost: the cheapest summary schedule, by dynamic programming.

A summary started on turn i covers the history up to that turn's kept tail (`tails[i]`) and can
be used from turn i + `lag` on (lag 1: it is ready for the next turn, as in a replay without a
summary delay). A turn forwards the head (system items, task), then either nothing else
summarised (the whole history) or one summary (`summary_tokens`) and every item after its cut.

The cost model is the replay's (`proxy.replay._metrics`), simplified: a turn that keeps the cut
of the turn before reads that turn's forwarded tokens from the cache and writes the rest; a turn
that changes its cut (a compression) reads the head and writes the summary and everything after
its cut; each summary a schedule uses costs one call, its prefix read from the cache
(`call_cost`). Every turn's verbatim window (after the cut, to the kept tail) must stay within
the trigger, as `proxy.core.compression.decide` keeps it, or with a `limit`, every forwarded turn
within it (the hard limit: while its summary is being made, the proxy lets a turn go out above
the trigger, `proxy.core.compression`). Summaries are never chained here
(each may cover any tail, whatever the one before): a relaxation, so `lower_bound` is a lower
bound for every online schedule with that latency and limit, the proxy's included with the hard
limit (`current_policy` replays the proxy's: `precompress.ahead` then `compression.decide`).

`per_compression` (a penalty added to each compression, not counted in the cost) trades cost for
fewer compressions: raising it finds the cheapest schedule with as few compressions as another
one, i.e. with the same prefix reuse.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate

from proxy.replay._metrics import OPENAI, Pricing

NONE = -1  # the state of a turn that forwards no summary


@dataclass(frozen=True)
class Turn:
    tokens: list[int]  # each item the turn forwards before any summary (compacted), in order
    head: int  # items[:head]: system items and the task, never summarised
    tail: int  # items[tail:]: the kept tail; a summary started on this turn covers items[head:tail]
    trigger: int  # what the window after a cut may hold (`compression.trigger`)


@dataclass(frozen=True)
class Schedule:
    cost: float  # the turns and the summary calls, in tokens at the pricing
    compressions: int  # turns whose cut differs from the turn before's (the first summary's included)
    cuts: tuple[int, ...] = ()  # per turn: the turn whose summary it forwards, or NONE


def _sums(turns: list[Turn]) -> list[list[int]]:
    return [list(accumulate(t.tokens, initial=0)) for t in turns]


def call_cost(
    turns: list[Turn],
    i: int,
    *,
    summary_tokens: int,
    ratio: float,
    pricing: Pricing = OPENAI,
    sums: list[list[int]] | None = None,
) -> float:
    """A summary call started on turn i: its prefix (the head, a summary, a window of `ratio` x
    the trigger) read from the cache, what the turn added written."""
    sums = sums or _sums(turns)
    added = sums[i][-1] - (sums[i - 1][-1] if i else 0)
    head = sums[i][turns[i].head]
    return pricing.read * (head + summary_tokens + ratio * turns[i].trigger) + pricing.write * max(added, 0)


def _turn_cost(forwarded: float, previous: float | None, head: float, *, switched: bool, pricing: Pricing) -> float:
    if previous is None:
        return pricing.write * forwarded
    if switched:
        return pricing.read * head + pricing.write * (forwarded - head)
    return pricing.read * previous + pricing.write * max(forwarded - previous, 0)


def _check_lag(lag: int) -> None:
    if lag < 0:
        raise ValueError(f"lag must be 0 or more turns, not {lag}")


def lower_bound(
    turns: list[Turn],
    *,
    lag: int,
    summary_tokens: int,
    ratio: float = 0.8,
    per_compression: float = 0.0,
    limit: int | None = None,
    pricing: Pricing = OPENAI,
) -> Schedule:
    """The cheapest schedule whose summaries are used `lag` turns or more after they start (no
    turns: nothing to pay)."""
    _check_lag(lag)
    if not turns:
        return Schedule(0.0, 0)

    def fits(window: float, forwarded: float, trigger: int) -> bool:
        return window <= trigger if limit is None else forwarded <= limit

    sums = _sums(turns)
    inf = float("inf")
    # state (NONE or the turn whose tail is the cut) -> (cost with penalties, cost, compressions, forwarded, cuts)
    states: dict[int, tuple[float, float, int, float, tuple[int, ...]]] = {}
    for j, turn in enumerate(turns):
        sums_j, head = sums[j], sums[j][turn.head]
        best = sorted(states.items(), key=lambda kv: kv[1][0])[:2]
        new: dict[int, tuple[float, float, int, float, tuple[int, ...]]] = {}
        if fits(sums_j[turn.tail] - head, sums_j[-1], turn.trigger) and (j == 0 or NONE in states):
            forwarded = float(sums_j[-1])
            before = states.get(NONE)
            step = _turn_cost(forwarded, before[3] if before else None, head, switched=False, pricing=pricing)
            new[NONE] = (
                (before[0] if before else 0.0) + step,
                (before[1] if before else 0.0) + step,
                before[2] if before else 0,
                forwarded,
                (before[4] if before else ()) + (NONE,),
            )
        for i in range(0, j - lag + 1):
            cut = turns[i].tail
            if not turn.head <= cut <= turn.tail:
                continue
            forwarded = head + summary_tokens + sums_j[-1] - sums_j[cut]
            if not fits(sums_j[turn.tail] - sums_j[cut], forwarded, turn.trigger):
                continue
            options = []
            if i in states:
                kept = states[i]
                step = _turn_cost(forwarded, kept[3], head, switched=False, pricing=pricing)
                options.append((kept[0] + step, kept[1] + step, kept[2], forwarded, kept[4] + (i,)))
            switch = next((kv[1] for kv in best if kv[0] != i), None)
            if switch is not None:
                step = _turn_cost(forwarded, switch[3], head, switched=True, pricing=pricing) + call_cost(
                    turns, i, summary_tokens=summary_tokens, ratio=ratio, pricing=pricing, sums=sums
                )
                options.append(
                    (switch[0] + step + per_compression, switch[1] + step, switch[2] + 1, forwarded, switch[4] + (i,))
                )
            if options:
                new[i] = min(options, key=lambda o: o[0])
        states = new
        if not states:
            return Schedule(inf, 0)
    final = min(states.values(), key=lambda s: s[0])
    return Schedule(final[1], final[2], final[4])


def current_policy(
    turns: list[Turn], *, lag: int, summary_tokens: int, ratio: float = 0.8, pricing: Pricing = OPENAI
) -> Schedule:
    """The proxy's schedule: a summary starts (one at a time) once the window after the newest
    usable summary reaches `ratio` x the trigger, or crosses the trigger (then the turn goes out
    with the summary before); the newest usable summary is forwarded while its window stays
    within the trigger; before the first compression the history goes whole up to the trigger."""
    _check_lag(lag)
    sums = _sums(turns)
    ready: list[int] = []  # turns whose summary has landed
    flight: tuple[int, int] | None = None  # (the turn it is usable from, the turn it started on)
    cost, compressions = 0.0, 0
    cuts: list[int] = []
    previous: float | None = None
    for j, turn in enumerate(turns):
        sums_j, head = sums[j], sums[j][turn.head]
        if flight is not None and j >= flight[0]:
            ready.append(flight[1])
            flight = None
        usable = [i for i in ready if turn.head <= turns[i].tail <= turn.tail]
        prior = max(usable, key=lambda i: turns[i].tail, default=NONE)
        start_from = head if prior == NONE else sums_j[turns[prior].tail]
        window = sums_j[turn.tail] - start_from
        cut = NONE if sums_j[turn.tail] - head <= turn.trigger else prior
        start = window >= ratio * turn.trigger  # from the newest usable summary's cut (`precompress.ahead`)
        if start and flight is None and j not in ready:
            flight = (j + lag, j)
            cost += call_cost(turns, j, summary_tokens=summary_tokens, ratio=ratio, pricing=pricing, sums=sums)
        forwarded = float(sums_j[-1]) if cut == NONE else head + summary_tokens + sums_j[-1] - sums_j[turns[cut].tail]
        switched = bool(cuts) and cut != cuts[-1]
        cost += _turn_cost(forwarded, previous, head, switched=switched, pricing=pricing)
        compressions += switched
        cuts.append(cut)
        previous = forwarded
    return Schedule(cost, compressions, tuple(cuts))
