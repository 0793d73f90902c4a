"""The Prometheus alert rules (deploy/prometheus/alerts.yaml) are well formed and read only what
the proxy exports: each expression parsed by the dashboard test's PromQL parser, each metric
checked against the proxy's own registry."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.project.test_grafana import (
    COUNTER_FUNCTIONS,
    DURATION,
    KINDS,
    LABELS,
    RANGE_FUNCTIONS,
    Parser,
    Selector,
    calls,
    selectors,
)

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "alerts.yaml"


def rules() -> list[dict]:
    document = yaml.safe_load(RULES.read_text())
    assert set(document) == {"groups"} and document["groups"]
    return [rule for group in document["groups"] for rule in group["rules"]]


def test_every_rule_is_a_complete_alert():
    names = [rule["alert"] for rule in rules()]
    assert len(names) == len(set(names))
    for rule in rules():
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule["alert"]
        assert rule["labels"]["severity"] in ("critical", "warning", "info")
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]
        if "for" in rule:
            assert DURATION.fullmatch(rule["for"]), rule["alert"]


def test_every_expression_reads_only_what_the_proxy_exports():
    for rule in rules():
        tree = Parser(str(rule["expr"])).parse()
        found = selectors(tree)
        assert found, rule["alert"]
        for s in found:
            assert s.name in LABELS, f"{rule['alert']}: {s.name} is not exported by the proxy"
            for label, _, _ in s.matchers:
                assert label in LABELS[s.name], f"{rule['alert']}: {s.name} has no label {label!r}"
        for call in calls(tree):
            if call.name in RANGE_FUNCTIONS:
                arg = call.args[0]
                # a duration, never a Grafana variable
                assert isinstance(arg, Selector) and arg.range == "fixed", rule["alert"]
                if call.name in COUNTER_FUNCTIONS:
                    assert KINDS[arg.name] in ("counter", "histogram"), f"{rule['alert']}: {call.name} of a gauge"
                else:
                    assert KINDS[arg.name] == "gauge", f"{rule['alert']}: {call.name} of a {KINDS[arg.name]}"


def test_the_store_and_the_statistics_are_watched():
    by_name = {rule["alert"]: str(rule["expr"]) for rule in rules()}
    assert "offload_store_up" in by_name["OffloadStoreDown"] and "== 0" in by_name["OffloadStoreDown"]
    assert "offload_stats_dropped_total" in by_name["OffloadStatisticsDropped"]
    assert KINDS["offload_store_up"] == "gauge" and KINDS["offload_stats_dropped_total"] == "counter"
