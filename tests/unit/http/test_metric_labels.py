"""Each label value is a time series kept for the process's life: with `--metrics-tenant-label`
the tenant label is a namespace, and namespaces are the clients' to make (any string is a
client key, any X-Offload-Tenant a sub-tenant), so only so many get a series of their own."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from proxy.telemetry import MAX_TENANT_LABELS, Metrics, RequestRecord


def tenants_of(metrics: Metrics) -> set[str]:
    found = set()
    for family in text_string_to_metric_families(metrics.render().decode()):
        for sample in family.samples:
            if "tenant" in sample.labels:
                found.add(sample.labels["tenant"])
    return found


def test_tenant_label_values_are_bounded():
    metrics = Metrics(tenant_label=True)
    for i in range(MAX_TENANT_LABELS + 50):
        rec = RequestRecord("chat", "POST", status=200, tenant=f"{i:012x}", tokens_before=10, tokens_after=5)
        metrics.observe(rec, 0.01)
    seen = tenants_of(metrics)
    assert len(seen) == MAX_TENANT_LABELS + 1 and "other" in seen and f"{0:012x}" in seen
    again = RequestRecord("chat", "POST", status=200, tenant=f"{1:012x}", tokens_before=1, tokens_after=1)
    metrics.observe(again, 0.01)  # a tenant that has its series keeps it
    assert tenants_of(metrics) == seen
