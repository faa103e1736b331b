#!/usr/bin/env python3
"""Validates every manifest in rbac/ and daemonset/ against the Kubernetes OpenAPI schema.

Uses the `kubernetes-validate` package (it ships the JSON schemas, so no cluster and no network
are needed once installed), in strict mode so a misspelt field is an error, against the oldest
and the newest Kubernetes versions headroom supports. Prometheus-operator resources (PodMonitor,
ServiceMonitor, PrometheusRule, and bare Prometheus rule files) have no schema there: their
shape is checked here (promtool, in tests/alerts.rs, checks the expressions). Each
kustomization.yaml must list exactly the YAML files of its directory, and `kubectl kustomize`
renders the install when kubectl is available.

Exit status 1 on any error, with one line per problem naming the file, the object and the field.
"""
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
                elif kind in ("PodMonitor", "ServiceMonitor", "PrometheusRule"):
                    errors += check_monitoring(doc, where)
                else:
                    for v in VERSIONS:
                        try:
                            kubernetes_validate.validate(doc, v, strict=True)
                        except kubernetes_validate.ValidationError as e:
                            field = ".".join(str(p) for p in e.path) or "(document)"
                            errors.append(f"{where}: Kubernetes {v}: {field}: {e.message}")
                        except kubernetes_validate.SchemaNotFoundError:
                            errors.append(f"{where}: no Kubernetes {v} schema for {kind}")
    if shutil.which("kubectl"):
        r = subprocess.run(["kubectl", "kustomize", str(ROOT / "daemonset")],
                           capture_output=True, text=True)
        if r.returncode != 0:
            errors.append(f"kubectl kustomize daemonset: {r.stderr.strip()}")
        else:
            kinds = [d["kind"] for d in yaml.safe_load_all(r.stdout) if d]
            if "DaemonSet" not in kinds or "ClusterRole" not in kinds:
                errors.append(f"kubectl kustomize daemonset renders only {kinds}")
    for e in errors:
        print(f"check-manifests: error: {e}", file=sys.stderr)
    print(f"check-manifests: {checked} objects checked against Kubernetes {', '.join(VERSIONS)}; "
          f"{len(errors)} errors")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
