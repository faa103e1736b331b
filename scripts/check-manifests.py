#!/usr/bin/env python3
"""Validates every manifest in rbac/ and daemonset/, and the renders of the Helm chart and of the
kustomizations, against the Kubernetes OpenAPI schema.

Uses the `kubernetes-validate` package (it ships the JSON schemas, so no cluster and no network
are needed once installed), in strict mode so a misspelt field is an error, against the oldest
and the newest Kubernetes versions headroom supports. Prometheus-operator resources (PodMonitor,
ServiceMonitor, PrometheusRule, and bare Prometheus rule files) have no schema there: their
shape is checked here (promtool, in tests/alerts.rs, checks the expressions). Each
kustomization.yaml must list exactly the YAML files of its directory.

Renders, checked object by object the same way: `helm template charts/headroom` with its default
values and with each values file in charts/headroom/ci/ (every toggle on), with helm 3.17.1, and
`kubectl kustomize` of daemonset/, overlays/reclaim-space/, overlays/webhook/,
overlays/offline-expansion/ and overlays/resize-through-owner/ with kubectl 1.30 (kustomize v5), the
binaries scripts/helm-kubectl.sh fetches (HEADROOM_HELM, HEADROOM_KUBECTL_130, else its cache).
Without them the renders are skipped with a message, or are an error when CI is set.

Exit status 1 on any error, with one line per problem naming the file, the object and the field.
"""
import os
import pathlib
import shutil
import subprocess
import sys

import kubernetes_validate
import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
DIRS = ["rbac", "daemonset"]
# Oldest supported (server-side field selectors on watches, KEP-1790 aside) and the newest schema.
VERSIONS = ["1.29.0", kubernetes_validate.latest_version()]
MONITORING = "monitoring.coreos.com/v1"
CHART = ROOT / "charts" / "headroom"
KUSTOMIZATIONS = [
    "daemonset",
    "overlays/reclaim-space",
    "overlays/webhook",
    "overlays/offline-expansion",
    "overlays/resize-through-owner",
]
LAYER = "lambda-layer-kubectl-v30-2.0.4"  # scripts/helm-kubectl.sh's cache directory


def tool(env, rel):
    """A binary of scripts/helm-kubectl.sh: $env, else its cache; None when neither exists."""
    path = os.environ.get(env)
    if not path:
        cache = os.environ.get("HEADROOM_KUBE_CACHE") or os.path.expanduser("~/.cache/headroom")
        path = os.path.join(cache, LAYER, rel)
    return path if os.path.isfile(path) else None


def check_monitoring(doc, where):
    errors = []
    kind = doc.get("kind")
    if doc.get("apiVersion") != MONITORING:
        errors.append(f"{where}: apiVersion must be {MONITORING}")
    if not (doc.get("metadata") or {}).get("name"):
        errors.append(f"{where}: metadata.name is required")
    spec = doc.get("spec")
    if not isinstance(spec, dict):
        return errors + [f"{where}: spec must be a mapping"]
    if kind in ("PodMonitor", "ServiceMonitor"):
        key = "podMetricsEndpoints" if kind == "PodMonitor" else "endpoints"
        if not isinstance(spec.get("selector"), dict):
            errors.append(f"{where}: spec.selector must be a mapping")
        endpoints = spec.get(key)
        if not isinstance(endpoints, list) or not endpoints:
            errors.append(f"{where}: spec.{key} must be a non-empty list")
        else:
            for i, e in enumerate(endpoints):
                if not isinstance(e, dict) or not (e.get("port") or e.get("targetPort")):
                    errors.append(f"{where}: spec.{key}[{i}].port is required")
    if kind == "PrometheusRule":
        groups = spec.get("groups")
        if not isinstance(groups, list) or not groups:
            return errors + [f"{where}: spec.groups must be a non-empty list"]
        for gi, g in enumerate(groups):
            if not g.get("name"):
                errors.append(f"{where}: spec.groups[{gi}].name is required")
            for ri, r in enumerate(g.get("rules") or []):
                at = f"{where}: spec.groups[{gi}].rules[{ri}]"
                if bool(r.get("alert")) == bool(r.get("record")):
                    errors.append(f"{at}: exactly one of alert or record is required")
                if not isinstance(r.get("expr"), str) or not r["expr"].strip():
                    errors.append(f"{at}: expr must be a non-empty string")
    return errors


def check_kustomization(path, doc):
    errors = []
    listed = doc.get("resources") or []
    files = {p.name for p in path.parent.glob("*.yaml") if p.name != "kustomization.yaml"}
    local = {r for r in listed if not r.startswith("..")}
    for r in listed:
        if not (path.parent / r).exists():
            errors.append(f"{path.relative_to(ROOT)}: resource {r} does not exist")
    for missing in sorted(files - local):
        errors.append(f"{path.relative_to(ROOT)}: {missing} is not listed in resources")
    return errors


def check_doc(doc, where):
    """Errors of one object: the Kubernetes schema (strict) of both versions, or the shape of a
    Prometheus-operator object."""
    kind = doc.get("kind", "?")
    if kind in ("PodMonitor", "ServiceMonitor", "PrometheusRule"):
        return check_monitoring(doc, where)
    errors = []
    for v in VERSIONS:
        try:
            kubernetes_validate.validate(doc, v, strict=True)
        except kubernetes_validate.ValidationError as e:
            field = ".".join(str(p) for p in e.path) or "(document)"
            errors.append(f"{where}: Kubernetes {v}: {field}: {e.message}")
        except kubernetes_validate.SchemaNotFoundError:
            errors.append(f"{where}: no Kubernetes {v} schema for {kind}")
    return errors


def check_render(name, argv, errors):
    """Renders with argv and checks every object; returns how many it checked."""
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode != 0:
        errors.append(f"{name}: {r.stderr.strip()}")
        return 0
    docs = [d for d in yaml.safe_load_all(r.stdout) if d]
    for doc in docs:
        meta = doc.get("metadata") or {}
        errors.extend(check_doc(doc, f"{name}: {doc.get('kind', '?')}/{meta.get('name', '?')}"))
    kinds = [d.get("kind") for d in docs]
    if "DaemonSet" not in kinds or "ClusterRole" not in kinds:
        errors.append(f"{name} renders only {kinds}")
    return len(docs)


def check_renders(errors):
    """The chart's renders and the kustomizations' renders; returns how many objects it checked."""
    checked = 0
    helm = tool("HEADROOM_HELM", "helm/helm")
    kubectl = tool("HEADROOM_KUBECTL_130", "kubectl/kubectl")
    missing = [n for n, t in (("helm 3.17.1", helm), ("kubectl 1.30", kubectl)) if not t]
    if missing:
        why = f"{' and '.join(missing)} missing (scripts/helm-kubectl.sh fetches them)"
        if os.environ.get("CI"):
            errors.append(f"cannot check the chart and kustomize renders: {why}")
        else:
            print(f"check-manifests: skipping renders with {', '.join(missing)}: {why}",
                  file=sys.stderr)
    if helm:
        base = [helm, "template", "headroom", str(CHART), "--namespace", "headroom"]
        checked += check_render("helm template charts/headroom", base, errors)
        for values in sorted((CHART / "ci").glob("*.yaml")):
            rel = values.relative_to(ROOT)
            checked += check_render(f"helm template charts/headroom -f {rel}",
                                    base + ["-f", str(values)], errors)
    if kubectl:
        for k in KUSTOMIZATIONS:
            checked += check_render(f"kubectl kustomize {k}",
                                    [kubectl, "kustomize", str(ROOT / k)], errors)
    elif shutil.which("kubectl"):
        # Another kubectl: daemonset/ at least (the overlay needs kubectl 1.21 or newer).
        checked += check_render("kubectl kustomize daemonset",
                                ["kubectl", "kustomize", str(ROOT / "daemonset")], errors)
    return checked


def main():
    errors, checked = [], 0
    for d in DIRS:
        for path in sorted((ROOT / d).rglob("*.yaml")):
            rel = path.relative_to(ROOT)
            if "tests" in rel.parts:
                continue  # promtool unit tests; tests/alerts.rs runs them
            try:
                docs = [x for x in yaml.safe_load_all(path.read_text()) if x is not None]
            except yaml.YAMLError as e:
                errors.append(f"{rel}: YAML syntax: {e}")
                continue
            for doc in docs:
                if "kind" not in doc and "groups" in doc:
                    # A bare Prometheus rules file: the same shape as a PrometheusRule's spec.
                    checked += 1
                    errors += check_monitoring(
                        {"apiVersion": MONITORING, "kind": "PrometheusRule",
                         "metadata": {"name": path.name}, "spec": doc}, f"{rel}")
                    continue
                kind = doc.get("kind", "?")
                where = f"{rel} {kind}/{(doc.get('metadata') or {}).get('name', '?')}"
                checked += 1
                if kind == "Kustomization":
                    errors += check_kustomization(path, doc)
                else:
                    errors += check_doc(doc, where)
    checked += check_renders(errors)
    for e in errors:
        print(f"check-manifests: error: {e}", file=sys.stderr)
    print(f"check-manifests: {checked} objects checked against Kubernetes {', '.join(VERSIONS)}; "
          f"{len(errors)} errors")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
