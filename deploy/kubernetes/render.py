#!/usr/bin/env python3
"""Renders the plain manifests (manifests/oomlens.yaml) from the Helm chart (helm/oomlens) with
Helm's own template engine: helm-python-sdk embeds Helm v4 as a library, so this is
`helm template oomlens helm/oomlens --namespace oomlens` with the chart's default values
— no helm binary, no home-made renderer. The chart's templates are the source; edit them and
values.yaml, then run this script and commit the manifests too.

The manifests leave out Helm hooks: the schema-migration Job is a pre-install/pre-upgrade hook of
the chart, and `kubectl apply` cannot update a Job (its pod template is immutable); with plain
manifests the collector migrates the schema itself at start (docs/operations.md).

Usage: render.py [--check]      (--check: fail when the committed manifests differ; deploy/test.sh)
Needs PyYAML and helm-python-sdk (pip install helm-python-sdk PyYAML).
"""

import argparse
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
CHART = HERE / "helm" / "oomlens"
MANIFEST = HERE / "manifests" / "oomlens.yaml"
RELEASE = "oomlens"
NAMESPACE = "oomlens"
HEADER = (
    "# Rendered by deploy/kubernetes/render.py: the chart helm/oomlens with its default values,\n"
    "# through Helm's own engine, without Helm hooks. Do not edit; edit the chart.\n"
)


def render_chart(values=None, release=RELEASE, namespace=None, is_upgrade=False):
    """Every object the chart renders (hooks included), in template order: a list of dicts."""
    import helm_python  # imported here: --help works without it

    helm_python.disable_logging()
    chart = helm_python.Chart.load(str(CHART))
    try:
        namespace = namespace or NAMESPACE
        rendered = chart.render(
            values or {}, name=release, namespace=namespace, is_install=not is_upgrade, is_upgrade=is_upgrade
        )
    finally:
        chart.close()
    docs = []
    for path in sorted(rendered):
        if not path.endswith((".yaml", ".yml")):
            continue  # NOTES.txt and partials
        docs.extend(d for d in yaml.safe_load_all(rendered[path]) if d)
    return docs


def is_hook(doc):
    return "helm.sh/hook" in ((doc.get("metadata") or {}).get("annotations") or {})


class Dumper(yaml.SafeDumper):
    pass


def _str(dumper, s):
    style = "|" if "\n" in s else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", s, style=style)


Dumper.add_representer(str, _str)


def manifests_text():
    docs = [d for d in render_chart() if not is_hook(d)]
    body = "".join(
        "---\n" + yaml.dump(d, Dumper=Dumper, sort_keys=False, default_flow_style=False, width=1000) for d in docs
    )
    return HEADER + body


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="fail if the committed manifests differ")
    args = ap.parse_args()
    text = manifests_text()
    rel = MANIFEST.relative_to(HERE)
    if args.check:
        if not MANIFEST.exists() or MANIFEST.read_text() != text:
            print(f"out of date (run deploy/kubernetes/render.py): {rel}", file=sys.stderr)
            return 1
        print(f"ok   {rel} = the chart rendered by Helm's engine (hooks left out)")
        return 0
    MANIFEST.parent.mkdir(parents=True, exist_ok=True)
    MANIFEST.write_text(text)
    print(f"wrote {rel}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
