"""The Grafana dashboard (deploy/grafana/offload-proxy.json) is well formed and asks only for what the proxy exports.

Every PromQL expression is parsed by the small parser below (the subset of PromQL a dashboard needs: selectors,
ranges, functions, aggregations, binary operators), and every selector is checked against the metrics the proxy
really exports: a `Metrics` fed one request through its own `observe` path, rendered by prometheus-client.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from proxy.telemetry import Metrics, RequestRecord

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "offload-proxy.json"
GRAFANA_RANGES = {"$__rate_interval", "$__interval", "$__range"}


# --- what the proxy exports ---------------------------------------------------------------------------------------


def exported() -> tuple[dict[str, set[str]], dict[str, str]]:
    """Sample names the proxy exports -> their label names; and sample name -> the type of its family."""
    metrics = Metrics(tenant_label=True)
    rec = RequestRecord(
        "chat",
        "POST",
        metrics=metrics,
        tenant="0123456789ab",
        tokens_before=1000,
        tokens_after=400,
        refs_created=2,
        offloaded_bytes=5000,
        reload_rounds=1,
        upstream_status=200,
        status=200,
    )
    rec.upstream_sent, rec.upstream_ttfb = rec.started + 0.01, 0.2
    rec.count_reload("context_reload")
    rec.count_summary(True, 1.5)
    rec.count_summary(False, 3.0)
    metrics.observe(rec, 0.5)
    metrics.store_errors.inc()
    metrics.store_seconds.labels("get").observe(0.001)
    labels: dict[str, set[str]] = {}
    kinds: dict[str, str] = {}
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}
    for family in text_string_to_metric_families(generate_latest(metrics.registry).decode()):
        for suffix in suffixes.get(family.type, ("",)):  # labelled families with no sample yet still count
            labels.setdefault(family.name + suffix, set())
            kinds[family.name + suffix] = family.type
        for s in family.samples:
            labels.setdefault(s.name, set()).update(s.labels)
            kinds.setdefault(s.name, family.type)
    return labels, kinds


LABELS, KINDS = exported()


def test_the_exported_metrics_are_the_ones_the_readme_lists():
    assert {
        "offload_requests_total",
        "offload_tokens_before_total",
        "offload_tokens_after_total",
        "offload_request_seconds_bucket",
        "offload_overhead_seconds_bucket",
        "offload_summaries_queued",
        "offload_summaries_in_flight",
        "offload_summaries_oldest_seconds",
        "offload_summaries_dropped",
        "offload_store_errors_total",
        "offload_reload_rounds_total",
    } <= set(LABELS)
    assert LABELS["offload_requests_total"] == {"route", "status", "tenant"}
    assert "le" in LABELS["offload_store_seconds_bucket"] and "op" in LABELS["offload_store_seconds_bucket"]


# --- a small PromQL parser ----------------------------------------------------------------------------------------

TOKEN = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
  | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
  | (?P<ident>[a-zA-Z_:][a-zA-Z0-9_:]*)
  | (?P<var>\$\w+)
  | (?P<op>==|!=|>=|<=|=~|!~|[-+*/%^<>=])
  | (?P<punct>[(){}\[\],:])
""",
    re.VERBOSE,
)
AGGREGATIONS = {
    "sum",
    "min",
    "max",
    "avg",
    "count",
    "stddev",
    "stdvar",
    "group",
    "topk",
    "bottomk",
    "quantile",
    "count_values",
}
RANGE_FUNCTIONS = {
    "rate",
    "increase",
    "irate",
    "delta",
    "idelta",
    "deriv",
    "changes",
    "resets",
    "avg_over_time",
    "min_over_time",
    "max_over_time",
    "sum_over_time",
    "count_over_time",
    "last_over_time",
    "quantile_over_time",
    "predict_linear",
}
COUNTER_FUNCTIONS = {"rate", "increase", "irate", "resets"}  # meaningless on a gauge
FUNCTIONS = RANGE_FUNCTIONS | {
    "histogram_quantile",
    "abs",
    "ceil",
    "floor",
    "round",
    "clamp",
    "clamp_min",
    "clamp_max",
    "scalar",
    "vector",
    "time",
    "timestamp",
    "absent",
    "sort",
    "sort_desc",
    "label_replace",
    "ln",
    "exp",
    "sqrt",
}
BINARY = [{"or"}, {"and", "unless"}, {"==", "!=", ">", "<", ">=", "<="}, {"+", "-"}, {"*", "/", "%", "atan2"}, {"^"}]
DURATION = re.compile(r"(?:\d+(?:ms|[smhdwy]))+")


@dataclass
class Selector:
    name: str
    matchers: list[tuple[str, str, str]] = field(default_factory=list)
    range: str | None = None


@dataclass
class Call:
    name: str
    args: list
    by: list[str] | None = None
    without: bool = False


@dataclass
class Binary:
    op: str
    left: object
    right: object


@dataclass
class Literal:
    value: str


class Parser:
    def __init__(self, text: str) -> None:
        self.tokens: list[tuple[str, str]] = []
        pos = 0
        while pos < len(text):
            m = TOKEN.match(text, pos)
            if not m:
                raise SyntaxError(f"unexpected {text[pos : pos + 10]!r} in {text!r}")
            if m.lastgroup != "ws":
                self.tokens.append((m.lastgroup, m.group()))
            pos = m.end()
        self.i = 0
        self.text = text

    def peek(self, offset: int = 0) -> tuple[str, str]:
        return self.tokens[self.i + offset] if self.i + offset < len(self.tokens) else ("end", "")

    def take(self, value: str | None = None, kind: str | None = None) -> str:
        k, v = self.peek()
        if (value is not None and v != value) or (kind is not None and k != kind):
            raise SyntaxError(f"expected {value or kind}, got {v!r} at token {self.i} in {self.text!r}")
        self.i += 1
        return v

    def parse(self):
        node = self.expr(0)
        if self.peek()[0] != "end":
            raise SyntaxError(f"trailing {self.peek()[1]!r} in {self.text!r}")
        return node

    def expr(self, level: int):
        if level == len(BINARY):
            return self.unary()
        left = self.expr(level + 1)
        while self.peek()[1] in BINARY[level]:
            op = self.take()
            if self.peek()[1] == "bool":
                self.take()
            if self.peek()[1] in ("on", "ignoring"):
                self.take()
                self.labels()
            if self.peek()[1] in ("group_left", "group_right"):
                self.take()
                if self.peek()[1] == "(":
                    self.labels()
            right = self.expr(level) if op == "^" else self.expr(level + 1)  # ^ is right-associative
            left = Binary(op, left, right)
        return left

    def unary(self):
        if self.peek()[1] in ("-", "+"):
            self.take()
            return Binary("*", Literal("-1"), self.unary())
        parenthesised = self.peek()[1] == "("
        node = self.atom()
        if self.peek()[1] == "[":
            if not isinstance(node, Selector) or parenthesised:
                raise SyntaxError(f"a range only follows a selector in {self.text!r}")
            self.take("[")
            k, v = self.peek()
            if k == "var" and v in GRAFANA_RANGES:
                node.range = self.take()
            elif self.duration():
                node.range = "fixed"
            else:
                raise SyntaxError(f"bad range {v!r} in {self.text!r}")
            self.take("]")
        if self.peek()[1] == "offset":
            self.take()
            if not self.duration():
                raise SyntaxError(f"bad offset in {self.text!r}")
        return node

    def duration(self) -> bool:
        """A duration such as 5m or 1h30m (tokenised as number + ident pairs)."""
        parts = ""
        while self.peek()[0] in ("number", "ident") and re.fullmatch(r"[\dmshdwy]+", self.peek()[1]):
            parts += self.take()
        return bool(DURATION.fullmatch(parts))

    def labels(self) -> list[str]:
        self.take("(")
        names = []
        while self.peek()[1] != ")":
            names.append(self.take(kind="ident"))
            if self.peek()[1] == ",":
                self.take()
        self.take(")")
        return names

    def atom(self):
        k, v = self.peek()
        if k in ("number", "string"):
            self.take()
            return Literal(v)
        if v == "(":
            self.take()
            node = self.expr(0)
            self.take(")")
            return node
        if k != "ident":
            raise SyntaxError(f"unexpected {v!r} in {self.text!r}")
        self.take()
        if v in AGGREGATIONS:
            by, without = None, False
            if self.peek()[1] in ("by", "without"):
                without = self.take() == "without"
                by = self.labels()
            args = self.args()
            if self.peek()[1] in ("by", "without") and by is None:
                without = self.take() == "without"
                by = self.labels()
            return Call(v, args, by, without)
        if self.peek()[1] == "(":
            if v not in FUNCTIONS:
                raise SyntaxError(f"unknown function {v!r} in {self.text!r}")
            return Call(v, self.args())
        selector = Selector(v)
        if self.peek()[1] == "{":
            self.take("{")
            while self.peek()[1] != "}":
                label = self.take(kind="ident")
                op = self.take(kind="op")
                if op not in ("=", "!=", "=~", "!~"):
                    raise SyntaxError(f"bad matcher {label}{op} in {self.text!r}")
                selector.matchers.append((label, op, self.take(kind="string")[1:-1]))
                if self.peek()[1] == ",":
                    self.take()
            self.take("}")
        return selector

    def args(self) -> list:
        self.take("(")
        args = []
        while self.peek()[1] != ")":
            args.append(self.expr(0))
            if self.peek()[1] == ",":
                self.take()
        self.take(")")
        return args


def selectors(node) -> list[Selector]:
    if isinstance(node, Selector):
        return [node]
    if isinstance(node, Call):
        return [s for a in node.args for s in selectors(a)]
    if isinstance(node, Binary):
        return selectors(node.left) + selectors(node.right)
    return []


def calls(node) -> list[Call]:
    if isinstance(node, Call):
        return [node] + [c for a in node.args for c in calls(a)]
    if isinstance(node, Binary):
        return calls(node.left) + calls(node.right)
    return []


def test_the_parser_accepts_promql_and_refuses_mistakes():
    ok = Parser('histogram_quantile(0.9, sum by (le) (rate(a_bucket{x=~"$v",y!="z"}[$__rate_interval])))').parse()
    assert [s.name for s in selectors(ok)] == ["a_bucket"] and selectors(ok)[0].range == "$__rate_interval"
    assert Parser("sum(rate(a_total[5m])) by (x) / on(x) group_left sum(b) > bool 0 or vector(0)").parse()
    assert Parser("1 - a ^ 2 ^ 3 offset 1h30m").parse()
    for bad in (
        "sum(rate(a_total[5m])",
        "rate(a_total[5q])",
        'a{x~"y"}',
        "nosuchfn(a)",
        "sum(a) b",
        "(a)[5m]",
        "a{x=y}",
        "a[$tenant]",
    ):
        with pytest.raises(SyntaxError):
            Parser(bad).parse()


# --- the dashboard ------------------------------------------------------------------------------------------------

DASH = json.loads(DASHBOARD.read_text())
PANELS = [p for p in DASH["panels"]] + [c for p in DASH["panels"] for c in p.get("panels", [])]
GRAPHS = [p for p in PANELS if p["type"] != "row"]
EXPRS = [(p["title"], t["expr"]) for p in GRAPHS for t in p["targets"]]


def test_dashboard_settings():
    assert DASH["uid"] == "offload-proxy" and DASH["title"]
    assert DASH["editable"] is True and DASH["tags"]
    assert DASH["schemaVersion"] >= 36
    assert DASH["time"] == {"from": "now-24h", "to": "now"} and DASH["refresh"] == "30s"
    assert "__inputs" not in DASH  # imports as it is: the data source is picked from the variable


def test_datasource_and_tenant_variables():
    variables = {v["name"]: v for v in DASH["templating"]["list"]}
    ds = variables["datasource"]
    assert ds["type"] == "datasource" and ds["query"] == "prometheus"
    tenant = variables["tenant"]
    assert tenant["type"] == "query" and tenant["datasource"]["uid"] == "${datasource}"
    assert tenant["multi"] is True and tenant["includeAll"] is True
    assert tenant["allValue"] == ".*"  # also matches series without the label (no --metrics-tenant-label)
    query = tenant["query"]["query"] if isinstance(tenant["query"], dict) else tenant["query"]
    metric, label = re.fullmatch(r"label_values\((\w+),\s*(\w+)\)", query).groups()
    assert metric in LABELS and label in LABELS[metric]


def test_every_panel_queries_the_datasource_variable():
    assert GRAPHS
    for panel in GRAPHS:
        assert panel["title"] and panel["targets"], panel["title"]
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        for target in panel["targets"]:
            assert target["expr"].strip(), panel["title"]
            assert target.get("datasource", panel["datasource"])["uid"] == "${datasource}", panel["title"]
        ref_ids = [t["refId"] for t in panel["targets"]]
        assert len(ref_ids) == len(set(ref_ids)), panel["title"]


def test_panel_ids_are_unique_and_the_grid_has_no_overlap():
    ids = [p["id"] for p in PANELS]
    assert len(ids) == len(set(ids))
    taken: dict[tuple[int, int], str] = {}
    for panel in DASH["panels"]:
        g = panel["gridPos"]
        assert g["w"] > 0 and g["h"] > 0 and 0 <= g["x"] and g["x"] + g["w"] <= 24 and g["y"] >= 0, panel["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in taken, f"{panel['title']} overlaps {taken[(x, y)]}"
                taken[(x, y)] = panel["title"]


@pytest.mark.parametrize("title, expr", EXPRS, ids=[f"{i}:{t}" for i, (t, _) in enumerate(EXPRS)])
def test_every_expression_parses_and_uses_only_exported_metrics(title, expr):
    tree = Parser(expr).parse()
    found = selectors(tree)
    assert found, f"{title}: no metric in {expr}"
    for s in found:
        assert s.name in LABELS, f"{title}: {s.name} is not exported by the proxy"
        for label, _, value in s.matchers:
            assert label in LABELS[s.name], f"{title}: {s.name} has no label {label!r}"
            if "$tenant" in value:
                assert label == "tenant", f"{title}: $tenant on {label}"
    # $tenant filters an expression whose metrics all carry the tenant label; one that mixes in a metric without
    # it (reload rounds per request) is for all tenants, or its parts would not match.
    scoped = all("tenant" in LABELS[s.name] for s in found)
    for s in found:
        filtered = ("tenant", "=~", "$tenant") in s.matchers
        assert filtered == scoped, f"{title}: {s.name} {'ignores' if scoped else 'mixes in'} $tenant"
    for call in calls(tree):
        if call.name in RANGE_FUNCTIONS:
            arg = call.args[0]
            assert isinstance(arg, Selector) and arg.range, f"{title}: {call.name} needs a range"
            assert arg.range in GRAFANA_RANGES, f"{title}: use $__rate_interval or $__range, not a fixed range"
            if call.name in COUNTER_FUNCTIONS:
                assert KINDS[arg.name] in ("counter", "histogram"), f"{title}: {call.name} over gauge {arg.name}"
        if call.name == "histogram_quantile":
            inner = call.args[1]
            assert isinstance(inner, Call) and inner.by is not None and "le" in inner.by, f"{title}: keep le"
            assert all(s.name.endswith("_bucket") for s in selectors(inner)), title
        if call.by and not call.without:
            for s in selectors(call):
                missing = set(call.by) - LABELS[s.name]
                assert not missing, f"{title}: {s.name} has no label {missing}"
    for s in found:  # a bare selector (no rate/increase) must be a gauge
        wrapped = any(a is s for c in calls(tree) if c.name in RANGE_FUNCTIONS for a in c.args)
        if not wrapped:
            assert KINDS[s.name] == "gauge", f"{title}: {s.name} is a {KINDS[s.name]}: use rate() or increase()"


def test_the_dashboard_covers_savings_reloads_summaries_latency_and_store():
    used = {s.name for _, expr in EXPRS for s in selectors(Parser(expr).parse())}
    assert {
        "offload_tokens_before_total",
        "offload_tokens_after_total",
        "offload_requests_total",
        "offload_reload_rounds_total",
        "offload_summaries_total",
        "offload_summaries_queued",
        "offload_summaries_in_flight",
        "offload_summaries_oldest_seconds",
        "offload_request_seconds_bucket",
        "offload_overhead_seconds_bucket",
        "offload_store_errors_total",
    } <= used


def test_the_dashboard_is_documented():
    assert "deploy/grafana/offload-proxy.json" in (ROOT / "deploy" / "k8s" / "README.md").read_text()
    operations = (ROOT / "docs" / "operations.md").read_text()
    observability = operations.split("## Observability", 1)[1].split("\n## ", 1)[0]
    assert "deploy/grafana/offload-proxy.json" in observability
