# SPDX-License-Identifier: Apache-2.0
"""An exposition as Prometheus' own text parser reads it, checked the way every nvtcp family must
be: its name under a prefix, a HELP line, a known type, no sample twice. Imported by the CLI
tests that scrape /metrics (PYTHONPATH is set by prometheus.sh)."""
from prometheus_client.parser import text_string_to_metric_families


def parse(path, prefix="nvtcp_"):
    """(families, {(sample name, sorted labels): value}) of the exposition in path."""
    families = list(text_string_to_metric_families(open(path).read()))
    samples = {}
    for f in families:
        assert f.name.startswith(prefix), f.name
        assert f.documentation, f"{f.name} has no HELP"
        assert f.type in ("counter", "gauge", "histogram"), (f.name, f.type)
        for s in f.samples:
            key = (s.name, tuple(sorted(s.labels.items())))
            assert key not in samples, f"sample {key} twice"
            samples[key] = s.value
    return families, samples
