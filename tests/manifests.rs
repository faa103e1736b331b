//! The manifests in rbac/ and daemonset/ against the code: the RBAC rules grant exactly what the
//! source calls, the DaemonSet sets only flags the agent reads, and the shipped ConfigMap parses
//! with the agent's own parsers. (Schema validation is scripts/check-manifests.py.)

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn read(rel: &str) -> String {
    std::fs::read_to_string(Path::new(ROOT).join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn yaml(rel: &str) -> Value {
    serde_saphyr::from_str(&read(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// One permission the agent needs, and the source that needs it: every `evidence` string must
/// occur in `file`, so a row cannot outlive the call that justified it.
struct Need {
    scope: &'static str,
    group: &'static str,
    resource: &'static str,
    verbs: &'static [&'static str],
    file: &'static str,
    evidence: &'static [&'static str],
}

const REFLECTOR: &str = "watcher(api, config)";

const NEEDS: &[Need] = &[
    Need {
        scope: "cluster",
        group: "",
        resource: "pods",
        verbs: &["list", "watch"],
        file: "src/agent/world.rs",
        evidence: &["Api::<Pod>::all", REFLECTOR],
    },
    Need {
        scope: "cluster",
        group: "",
        resource: "persistentvolumeclaims",
        verbs: &["list", "watch"],
        file: "src/agent/world.rs",
        evidence: &["Api::<PersistentVolumeClaim>::namespaced", REFLECTOR],
    },
    // Beside each namespace's claims: what a grow there may still take.
    Need {
        scope: "cluster",
        group: "",
        resource: "resourcequotas",
        verbs: &["list", "watch"],
        file: "src/agent/world.rs",
        evidence: &["Api::<ResourceQuota>::namespaced", REFLECTOR],
    },
    Need {
        scope: "cluster",
        group: "",
        resource: "persistentvolumeclaims",
        verbs: &["get"],
        file: "src/agent/work.rs",
        evidence: &["api.get(&name)"],
    },
    Need {
        scope: "cluster",
        group: "",
        resource: "persistentvolumeclaims",
        verbs: &["patch"],
        file: "src/agent/act.rs",
        evidence: &["pub api: Api<PersistentVolumeClaim>", "self.api.patch("],
    },
    Need {
        scope: "cluster",
        group: "",
        resource: "nodes",
        verbs: &["list", "watch"],
        file: "src/agent/world.rs",
        evidence: &["Api::<Node>::all", REFLECTOR],
    },
    Need {
        scope: "cluster",
        group: "storage.k8s.io",
        resource: "storageclasses",
        verbs: &["list", "watch"],
        file: "src/agent/world.rs",
        evidence: &["Api::<StorageClass>::all", REFLECTOR],
    },
    // The pool's free space: one paged list per decision that would send a grow, no watch.
    Need {
        scope: "cluster",
        group: "storage.k8s.io",
        resource: "csistoragecapacities",
        verbs: &["list"],
        file: "src/agent/work/pool.rs",
        evidence: &["Api<CSIStorageCapacity> = Api::all", "api.list(&params)"],
    },
    // csi-addons' trim schedule on the claim's Namespace and its driver's CSIDriver.
    Need {
        scope: "cluster",
        group: "",
        resource: "namespaces",
        verbs: &["list", "watch"],
        file: "src/agent/world.rs",
        evidence: &["Api::<Namespace>::all", REFLECTOR],
    },
    Need {
        scope: "cluster",
        group: "storage.k8s.io",
        resource: "csidrivers",
        verbs: &["list", "watch"],
        file: "src/agent/world.rs",
        evidence: &["Api::<CSIDriver>::all", REFLECTOR],
    },
    // The kubelet's /stats/summary from this node's kubelet, with the service account's token:
    // the kubelet authorizes it as nodes/stats get.
    Need {
        scope: "cluster",
        group: "",
        resource: "nodes/stats",
        verbs: &["get"],
        file: "src/agent/kubelet_stats_https.rs",
        evidence: &[
            "http::Request::get(\"/stats/summary\")",
            "header::AUTHORIZATION",
        ],
    },
    // kube-runtime's Recorder::publish creates an events.k8s.io/v1 Event (kube-runtime 5.0.0
    // src/events.rs); it would merge-patch a repeat, but each Event has a recorder of its own
    // (src/events.rs, Publisher), so only create is used. rbac/ still grants patch.
    Need {
        scope: "cluster",
        group: "events.k8s.io",
        resource: "events",
        verbs: &["create"],
        file: "src/events.rs",
        evidence: &["Recorder::new("],
    },
    Need {
        scope: "namespace",
        group: "",
        resource: "configmaps",
        verbs: &["list", "watch"],
        file: "src/agent/world.rs",
        evidence: &["Api::<ConfigMap>::namespaced", REFLECTOR],
    },
];

/// What only the webhook calls (`--webhook-listen`), granted only by `overlays/webhook/rbac.yaml`.
const WEBHOOK_NEEDS: &[Need] = &[
    // A new claim named <template>-<set>-<ordinal> with peers: which set's template it is.
    Need {
        scope: "cluster",
        group: "apps",
        resource: "statefulsets",
        verbs: &["list"],
        file: "src/webhook/lookup.rs",
        evidence: &[
            "Api<StatefulSet> = Api::namespaced",
            ".map_err(list(\"statefulsets\"))",
        ],
    },
    // A claim restored from a VolumeSnapshot: the snapshot's restoreSize, by name (the clone's
    // source claim is a get the agent's rbac/ already grants).
    Need {
        scope: "cluster",
        group: "snapshot.storage.k8s.io",
        resource: "volumesnapshots",
        verbs: &["get"],
        file: "src/webhook/source.rs",
        evidence: &[
            "Api<DynamicObject> =",
            "Api::namespaced_with(client.clone(), ns, &snapshot_resource())",
            "api.get(&name)",
        ],
    },
    Need {
        scope: "cluster",
        group: "admissionregistration.k8s.io",
        resource: "mutatingwebhookconfigurations",
        verbs: &["get", "patch"],
        file: "src/webhook/certs.rs",
        evidence: &[
            "Api<MutatingWebhookConfiguration> = Api::all",
            "let config = api.get(name)",
            "api.patch(name, &PatchParams::default(), &Patch::Strategic(&patch))",
        ],
    },
    // The serving certificate's Secret, in the agent's namespace: created once, read back,
    // renewed in place.
    Need {
        scope: "namespace",
        group: "",
        resource: "secrets",
        verbs: &["get", "create", "update"],
        file: "src/webhook/certs.rs",
        evidence: &[
            "Api<Secret> = Api::namespaced(client.clone(), namespace)",
            "api.get_opt(name)",
            "api.create(&PostParams::default(), &secret)",
            "api.replace(name, &PostParams::default(), &secret)",
        ],
    },
];

/// What only notifications call, granted only by `overlays/notifications/rbac.yaml`: each sink's
/// URL from a Secret, and a private CA from a Secret or ConfigMap, by name, in the agent's
/// namespace.
const NOTIFY_NEEDS: &[Need] = &[
    Need {
        scope: "namespace",
        group: "",
        resource: "secrets",
        verbs: &["get"],
        file: "src/notify/supervise.rs",
        evidence: &["Api::<Secret>::namespaced(client, ns).get(&r.name)"],
    },
    Need {
        scope: "namespace",
        group: "",
        resource: "configmaps",
        verbs: &["get"],
        file: "src/notify/supervise.rs",
        evidence: &["Api::<ConfigMap>::namespaced(client, ns)", ".get(&r.name)"],
    },
];

/// The names overlays/notifications lets the agent read.
const NOTIFY_SECRET: &str = "headroom-notifications";
const NOTIFY_CA: &str = "headroom-notifications-ca";

/// What only offline expansion calls (`offlineExpansion: evict`), granted only by
/// `overlays/offline-expansion/rbac.yaml`: the pod's eviction, never its delete.
const EVICT_NEEDS: &[Need] = &[Need {
    scope: "cluster",
    group: "",
    resource: "pods/eviction",
    verbs: &["create"],
    file: "src/agent/evict.rs",
    evidence: &[
        "let api: Api<Pod> = Api::namespaced",
        "api.evict(pod, &EvictParams::default())",
    ],
}];

/// What only growth through the owner calls (`resizeThrough: owner`), granted only by
/// `overlays/resize-through-owner/rbac.yaml`: the owner's GET and the PATCH of its size field.
const OWNER_NEEDS: &[Need] = &[
    Need {
        scope: "cluster",
        group: "postgresql.cnpg.io",
        resource: "clusters",
        verbs: &["get", "patch"],
        file: "src/k8s/owner.rs",
        evidence: &["group: \"postgresql.cnpg.io\"", "plural: \"clusters\""],
    },
    Need {
        scope: "cluster",
        group: "acid.zalan.do",
        resource: "postgresqls",
        verbs: &["get", "patch"],
        file: "src/k8s/owner.rs",
        evidence: &["group: \"acid.zalan.do\"", "plural: \"postgresqls\""],
    },
    Need {
        scope: "cluster",
        group: "postgres-operator.crunchydata.com",
        resource: "postgresclusters",
        verbs: &["get", "patch"],
        file: "src/k8s/owner.rs",
        evidence: &[
            "group: \"postgres-operator.crunchydata.com\"",
            "plural: \"postgresclusters\"",
        ],
    },
    Need {
        scope: "cluster",
        group: "",
        resource: "owners",
        verbs: &[],
        file: "src/agent/owner.rs",
        evidence: &[
            "api(client, &target).get(&target.name)",
            "api.patch(&t.name, &PatchParams::default(), &patch)",
            "client.request::<DynamicObject>(request)",
        ],
    },
];

/// Rust type named in `Api<..>` -> the resource it reaches.
const TYPES: &[(&str, &str)] = &[
    ("Secret", "secrets"),
    ("StatefulSet", "statefulsets"),
    // The webhook's only dynamic object (src/webhook/source.rs): a VolumeSnapshot.
    ("DynamicObject", "volumesnapshots"),
    (
        "MutatingWebhookConfiguration",
        "mutatingwebhookconfigurations",
    ),
    ("Pod", "pods"),
    ("PersistentVolumeClaim", "persistentvolumeclaims"),
    ("ResourceQuota", "resourcequotas"),
    ("PersistentVolume", "persistentvolumes"),
    ("Node", "nodes"),
    ("StorageClass", "storageclasses"),
    ("Namespace", "namespaces"),
    ("CSIDriver", "csidrivers"),
    ("CSIStorageCapacity", "csistoragecapacities"),
    ("ConfigMap", "configmaps"),
    // events.k8s.io/v1 Event created under a name of its own (src/events.rs, publish_named),
    // named apart from kube-runtime's Event.
    ("K8sEvent", "events"),
];

type Grant = (String, String, String, String);

fn grants(rel: &str, scope: &str) -> BTreeSet<Grant> {
    let doc = yaml(rel);
    let mut out = BTreeSet::new();
    for rule in doc["rules"].as_array().expect("rules") {
        let strings = |k: &str| -> Vec<String> {
            rule[k]
                .as_array()
                .unwrap_or_else(|| panic!("{rel}: {k}"))
                .iter()
                .map(|v| v.as_str().expect("string").to_string())
                .collect()
        };
        for g in strings("apiGroups") {
            for r in strings("resources") {
                for v in strings("verbs") {
                    out.insert((scope.to_string(), g.clone(), r.clone(), v));
                }
            }
        }
    }
    out
}

fn rust_sources(dir: &Path, out: &mut Vec<(String, String)>) {
    for entry in std::fs::read_dir(dir).expect("src") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            rust_sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).expect("read source");
            out.push((path.display().to_string(), text));
        }
    }
}

/// Every permission `needs` asks for, after checking each row's evidence is in its file.
fn needed(needs: &[Need]) -> BTreeSet<Grant> {
    let mut needed = BTreeSet::new();
    for n in needs {
        let source = read(n.file);
        for e in n.evidence {
            assert!(
                source.contains(e),
                "{} {:?} is justified by `{e}` in {}, which is no longer there: drop the grant or fix the evidence",
                n.resource,
                n.verbs,
                n.file
            );
        }
        for v in n.verbs {
            needed.insert((
                n.scope.to_string(),
                n.group.to_string(),
                n.resource.to_string(),
                v.to_string(),
            ));
        }
    }
    needed
}

#[test]
fn rbac_grants_exactly_what_the_code_calls() {
    let needed = needed(NEEDS);
    let mut granted = grants("rbac/clusterrole.yaml", "cluster");
    granted.extend(grants("rbac/role.yaml", "namespace"));
    let extra: Vec<_> = granted.difference(&needed).collect();
    let missing: Vec<_> = needed.difference(&granted).collect();
    assert!(
        extra.is_empty() && missing.is_empty(),
        "granted but not called: {extra:?}\ncalled but not granted: {missing:?}"
    );
    assert!(
        granted
            .iter()
            .all(|(_, g, r, v)| g != "*" && r != "*" && v != "*" && r != "secrets")
    );
}

/// Permissions that reach other workloads' data or a node's exec API, whatever the code says.
const DENIED: &[&str] = &[
    "nodes/proxy",
    "secrets",
    "pods/exec",
    "pods/attach",
    "pods/portforward",
    "serviceaccounts/token",
];

/// Every rule of `rel` that the deny list refuses, named.
fn denied_rules(rel: &str) -> Vec<String> {
    let doc = yaml(rel);
    let mut out = Vec::new();
    for (i, rule) in doc["rules"].as_array().expect("rules").iter().enumerate() {
        let strings = |k: &str| -> Vec<String> {
            rule[k]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|v| v.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default()
        };
        let (groups, resources, verbs) =
            (strings("apiGroups"), strings("resources"), strings("verbs"));
        let wild = |v: &[String]| v.iter().any(|x| x.contains('*'));
        if wild(&groups) || wild(&resources) || wild(&verbs) {
            out.push(format!("{rel} rule {i}: a wildcard"));
        }
        if rule.get("nonResourceURLs").is_some_and(|v| !v.is_null()) {
            out.push(format!("{rel} rule {i}: nonResourceURLs"));
        }
        for r in &resources {
            if DENIED.contains(&r.as_str()) {
                out.push(format!("{rel} rule {i}: {r}"));
            }
        }
        // Escalation verbs give what the role itself does not.
        for v in &verbs {
            if ["escalate", "bind", "impersonate"].contains(&v.as_str()) {
                out.push(format!("{rel} rule {i}: verb {v}"));
            }
        }
    }
    out
}

#[test]
fn no_rule_from_the_deny_list() {
    let mut found = denied_rules("rbac/clusterrole.yaml");
    found.extend(denied_rules("rbac/role.yaml"));
    assert!(found.is_empty(), "{found:?}");
}

#[test]
fn the_deny_list_catches_what_it_names() {
    let dir = tempfile::tempdir().expect("dir");
    let role = "rules:\n  - { apiGroups: [''], resources: [nodes/proxy], verbs: [get] }\n  - { apiGroups: [''], resources: [secrets], verbs: [list] }\n  - { apiGroups: [''], resources: [pods/exec], verbs: [create] }\n  - { apiGroups: ['*'], resources: [pods], verbs: [get] }\n  - { apiGroups: [''], resources: ['*'], verbs: [get] }\n  - { apiGroups: [''], resources: [pods], verbs: ['*'] }\n  - { apiGroups: [''], resources: [pods], verbs: [get] }\n";
    let path = dir.path().join("role.yaml");
    std::fs::write(&path, role).expect("write");
    let found = denied_rules(path.to_str().expect("utf-8"));
    assert_eq!(found.len(), 6, "{found:?}");
    assert!(!found.iter().any(|f| f.contains("rule 6")), "{found:?}");
}

#[test]
fn every_api_the_source_reaches_has_a_grant() {
    let mut sources = Vec::new();
    rust_sources(&Path::new(ROOT).join("src"), &mut sources);
    let resources: BTreeSet<&str> = NEEDS.iter().map(|n| n.resource).collect();
    let with_webhook: BTreeSet<&str> = NEEDS
        .iter()
        .chain(WEBHOOK_NEEDS)
        .map(|n| n.resource)
        .collect();
    let with_notify: BTreeSet<&str> = NEEDS
        .iter()
        .chain(NOTIFY_NEEDS)
        .map(|n| n.resource)
        .collect();
    for (file, text) in &sources {
        for marker in ["Api::<", "Api<"] {
            for (at, _) in text.match_indices(marker) {
                let rest = &text[at + marker.len()..];
                let ty: String = rest
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                // The owners' calls (their kinds are data, not types) by its overlay alone.
                if file.ends_with("/src/agent/owner.rs") && ty == "DynamicObject" {
                    continue;
                }
                // The webhook's own calls are granted by its overlay alone.
                // So are notifications'.
                let resources = if file.contains("/src/webhook/") {
                    &with_webhook
                } else if file.contains("/src/notify/") {
                    &with_notify
                } else {
                    &resources
                };
                if ty.is_empty() || ty == "K" {
                    continue; // generic helpers (spawn_reflector<K>) are covered at their call sites
                }
                let resource = TYPES
                    .iter()
                    .find(|(t, _)| *t == ty)
                    .map(|(_, r)| *r)
                    .unwrap_or_else(|| panic!("{file}: Api<{ty}> has no row in TYPES/NEEDS"));
                assert!(
                    resources.contains(resource),
                    "{file} reaches {resource} (Api<{ty}>), which rbac/ does not grant"
                );
            }
        }
        // The API server's node proxy would need nodes/proxy, which the deny list refuses.
        assert!(
            !text.contains("}/proxy/"),
            "{file} goes through the API server's node proxy: ask this node's kubelet instead"
        );
        if text.contains("Recorder::new(") {
            assert!(resources.contains("events"), "{file} records Events");
        }
        // Only the webhook's own certificate Secret, from certs.rs, and the sinks' URLs, from
        // supervise.rs.
        if !file.ends_with("/src/webhook/certs.rs") && !file.ends_with("/src/notify/supervise.rs") {
            assert!(
                !text.contains("Api::<Secret>") && !text.contains("Api<Secret>"),
                "{file} reaches Secrets"
            );
        }
    }
}

#[test]
fn bindings_name_the_service_account_the_daemonset_runs_as() {
    let ds = yaml("daemonset/daemonset.yaml");
    let sa = yaml("rbac/serviceaccount.yaml");
    let ns = sa["metadata"]["namespace"].as_str().expect("namespace");
    assert_eq!(
        ds["spec"]["template"]["spec"]["serviceAccountName"],
        sa["metadata"]["name"]
    );
    assert_eq!(ds["metadata"]["namespace"], ns);
    for (binding, role_file, kind) in [
        (
            "rbac/clusterrolebinding.yaml",
            "rbac/clusterrole.yaml",
            "ClusterRole",
        ),
        ("rbac/rolebinding.yaml", "rbac/role.yaml", "Role"),
    ] {
        let b = yaml(binding);
        let role = yaml(role_file);
        assert_eq!(b["roleRef"]["kind"], kind);
        assert_eq!(b["roleRef"]["name"], role["metadata"]["name"]);
        let subjects = b["subjects"].as_array().expect("subjects");
        assert_eq!(subjects.len(), 1, "{binding}");
        assert_eq!(subjects[0]["name"], sa["metadata"]["name"]);
        assert_eq!(subjects[0]["namespace"], ns);
    }
    assert_eq!(yaml("rbac/role.yaml")["metadata"]["namespace"], ns);
}

#[test]
fn daemonset_is_locked_down_as_documented() {
    let ds = yaml("daemonset/daemonset.yaml");
    let pod = &ds["spec"]["template"]["spec"];
    assert_eq!(pod["priorityClassName"], "system-node-critical");
    assert_eq!(
        pod["tolerations"],
        serde_json::json!([{"operator": "Exists"}])
    );
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    assert_ne!(pod["securityContext"]["runAsUser"], 0);
    let containers = pod["containers"].as_array().expect("containers");
    assert_eq!(containers.len(), 1);
    let c = &containers[0];
    let sc = &c["securityContext"];
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["capabilities"]["drop"], serde_json::json!(["ALL"]));
    assert_eq!(
        sc["capabilities"]["add"],
        serde_json::json!(["DAC_READ_SEARCH"])
    );
    assert!(sc.get("privileged").is_none_or(|p| p == false));
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/live");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/ready");
    let port = &c["ports"][0];
    assert_eq!(c["livenessProbe"]["httpGet"]["port"], port["name"]);
    assert_eq!(c["readinessProbe"]["httpGet"]["port"], port["name"]);
    assert!(c["resources"]["limits"]["memory"].is_string());
    // The probes and the PodMonitor reach the port the agent listens on by default.
    let default_port = headroom::http::DEFAULT_LISTEN
        .rsplit(':')
        .next()
        .and_then(|p| p.parse::<u64>().ok());
    assert_eq!(port["containerPort"].as_u64(), default_port);
    let monitor = yaml("daemonset/monitoring/podmonitor.yaml");
    assert_eq!(
        monitor["spec"]["podMetricsEndpoints"][0]["port"],
        port["name"]
    );
    assert_eq!(
        monitor["spec"]["selector"]["matchLabels"],
        ds["spec"]["template"]["metadata"]["labels"]
    );

    let mounts = c["volumeMounts"].as_array().expect("mounts");
    let mount = |name: &str| mounts.iter().find(|m| m["name"] == name).expect("mount");
    let volumes = pod["volumes"].as_array().expect("volumes");
    let volume = |name: &str| volumes.iter().find(|v| v["name"] == name).expect("volume");
    let kubelet = mount("kubelet");
    assert_eq!(kubelet["readOnly"], true);
    assert_eq!(kubelet["mountPropagation"], "HostToContainer");
    assert_eq!(volume("kubelet")["hostPath"]["path"], "/var/lib/kubelet");
    assert_eq!(volume("postgres-credentials")["secret"]["optional"], true);
    assert_eq!(
        mount("postgres-credentials")["mountPath"],
        "/etc/headroom/postgres"
    );
    assert_eq!(mounts.len(), volumes.len());

    // Every env var is an agent flag (cli.rs `env = "..."`) or the log filter main.rs reads.
    let cli = read("src/cli.rs");
    let env = c["env"].as_array().expect("env");
    for e in env {
        let name = e["name"].as_str().expect("name");
        assert!(
            cli.contains(&format!("env = \"{name}\"")) || name == "RUST_LOG",
            "DaemonSet sets {name}, which the agent does not read"
        );
        if name == "HEADROOM_KUBELET_ROOT" {
            assert_eq!(e["value"], kubelet["mountPath"]);
        }
    }
    let field = |name: &str| {
        env.iter().find(|e| e["name"] == name).expect("env")["valueFrom"]["fieldRef"]["fieldPath"]
            .clone()
    };
    assert_eq!(field("NODE_NAME"), "spec.nodeName");
    assert_eq!(field("POD_NAMESPACE"), "metadata.namespace");
    assert_eq!(field("HOST_IP"), "status.hostIP");
    // recursiveReadOnly needs mountPropagation None, which would hide volumes mounted later.
    assert!(kubelet.get("recursiveReadOnly").is_none());
}

#[test]
fn shipped_configmap_parses_with_the_agents_parsers() {
    use headroom::policy::merge::{STORAGE_CLASSES_KEY, parse_configmap};
    use headroom::policy::validate::{Context, validate};

    let cm = yaml("daemonset/configmap.yaml");
    let ds = yaml("daemonset/daemonset.yaml");
    let configmap_env = ds["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .and_then(|env| env.iter().find(|e| e["name"] == "HEADROOM_CONFIGMAP"))
        .map(|e| e["value"].clone());
    assert_eq!(configmap_env.as_ref(), Some(&cm["metadata"]["name"]));
    let data: std::collections::BTreeMap<String, String> =
        serde_json::from_value(cm["data"].clone()).expect("string data");
    let central = parse_configmap(&data, "headroom/headroom");
    let problems: Vec<_> = central.all_problems().collect();
    assert!(problems.is_empty(), "{problems:?}");
    assert!(data.contains_key(STORAGE_CLASSES_KEY));
    let v = validate(&central.defaults, &Context::default());
    assert!(v.errors.is_empty() && v.warnings.is_empty(), "{v:?}");
    let defaults = v.policy.expect("valid");
    assert!(
        !defaults.enabled,
        "the shipped policy must not grow anything until opted in"
    );
    for (class, spec) in &central.storage_classes {
        let merged = headroom::policy::merge::merge_layers(&[
            (headroom::policy::Source::ConfigMapStorageClass, spec),
            (
                headroom::policy::Source::ConfigMapDefault,
                &central.defaults,
            ),
        ]);
        let v = validate(&merged.spec, &Context::default());
        assert!(v.errors.is_empty(), "{class}: {:?}", v.errors);
    }

    let creds = headroom::agent::pgconn::Credentials::parse(
        "headroom/headroom",
        data.get(headroom::agent::pgconn::KEY)
            .expect("postgres.yaml"),
    )
    .expect("postgres.yaml");
    assert!(
        !creds.clusters.is_empty(),
        "the example binds no credential"
    );
    for c in &creds.clusters {
        let file = &c.password_file;
        assert!(
            file.starts_with("/etc/headroom/postgres"),
            "{} is outside the Secret's mount",
            file.display()
        );
    }
}

/// One overlay document's rules as grants (`scope` by kind), and each rule's resourceNames.
fn rule_grants(doc: &Value, out: &mut BTreeSet<Grant>, names: &mut Vec<(String, Vec<String>)>) {
    let scope = match doc["kind"].as_str() {
        Some("ClusterRole") => "cluster",
        Some("Role") => "namespace",
        _ => return,
    };
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    for rule in doc["rules"].as_array().expect("rules") {
        for g in strings(&rule["apiGroups"]) {
            for r in strings(&rule["resources"]) {
                for v in strings(&rule["verbs"]) {
                    names.push((format!("{r} {v}"), strings(&rule["resourceNames"])));
                    out.insert((scope.to_string(), g.clone(), r.clone(), v));
                }
            }
        }
    }
}

fn overlay(rel: &str) -> Vec<Value> {
    serde_saphyr::from_multiple(&read(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// overlays/notifications grants exactly what notifications call, on the one Secret and the one
/// ConfigMap it names, bound to the agent's service account, and its ConfigMap patch parses.
#[test]
fn the_notifications_overlay_grants_get_on_its_named_objects_only() {
    let needed = needed(NOTIFY_NEEDS);
    let docs = overlay("overlays/notifications/rbac.yaml");
    let mut granted = BTreeSet::new();
    let mut names = Vec::new();
    for d in &docs {
        assert_ne!(
            d["kind"], "ClusterRole",
            "notifications read in the agent's namespace only"
        );
        rule_grants(d, &mut granted, &mut names);
    }
    let extra: Vec<_> = granted.difference(&needed).collect();
    let missing: Vec<_> = needed.difference(&granted).collect();
    assert!(
        extra.is_empty() && missing.is_empty(),
        "granted but not called: {extra:?}\ncalled but not granted: {missing:?}"
    );
    for (what, resource_names) in &names {
        let want = if what.starts_with("secrets") {
            NOTIFY_SECRET
        } else {
            NOTIFY_CA
        };
        assert_eq!(resource_names, &[want.to_string()], "{what}");
    }
    let sa = yaml("rbac/serviceaccount.yaml");
    let binding = docs
        .iter()
        .find(|d| d["kind"] == "RoleBinding")
        .expect("binding");
    assert_eq!(binding["roleRef"]["name"], docs[0]["metadata"]["name"]);
    assert_eq!(binding["subjects"][0]["name"], sa["metadata"]["name"]);
    assert_eq!(
        binding["subjects"][0]["namespace"],
        sa["metadata"]["namespace"]
    );
    let cm = yaml("overlays/notifications/configmap.yaml");
    let base = yaml("daemonset/configmap.yaml");
    assert_eq!(cm["metadata"]["name"], base["metadata"]["name"]);
    assert_eq!(cm["metadata"]["namespace"], base["metadata"]["namespace"]);
    let text = cm["data"][headroom::notify::config::KEY]
        .as_str()
        .expect("the key");
    let sinks = headroom::notify::config::parse("headroom/headroom", text).expect("parses");
    assert!(sinks.iter().all(|s| s.url_secret.name == NOTIFY_SECRET));
}

/// overlays/webhook grants exactly what only the webhook calls, on nothing but its own Secret and
/// configuration where a name can be given, bound to the agent's service account; the rest of
/// the overlay (Service, configuration, the agent's flags and port) agrees with the agent.
#[test]
fn the_webhook_overlay_grants_exactly_what_the_webhook_calls() {
    use clap::CommandFactory;
    let needed = needed(WEBHOOK_NEEDS);
    let docs = overlay("overlays/webhook/rbac.yaml");
    let mut granted = BTreeSet::new();
    let mut names = Vec::new();
    for d in &docs {
        rule_grants(d, &mut granted, &mut names);
    }
    let extra: Vec<_> = granted.difference(&needed).collect();
    let missing: Vec<_> = needed.difference(&granted).collect();
    assert!(
        extra.is_empty() && missing.is_empty(),
        "granted but not called: {extra:?}\ncalled but not granted: {missing:?}"
    );
    // Names the agent uses by default: its flags' defaults.
    let cli = headroom::cli::Cli::command();
    let agent = cli.find_subcommand("agent").expect("agent");
    let default = |id: &str| {
        agent
            .get_arguments()
            .find(|a| a.get_id() == id)
            .and_then(|a| a.get_default_values().first().cloned())
            .unwrap_or_else(|| panic!("--{id} default"))
            .to_string_lossy()
            .into_owned()
    };
    let secret = default("webhook_secret");
    let configuration = default("webhook_configuration");
    let service = default("webhook_service");
    for (what, resource_names) in &names {
        let want: &[&str] = match what.as_str() {
            // Create cannot be limited by name (the object does not exist yet).
            "secrets create" | "statefulsets list" | "volumesnapshots get" => &[],
            "secrets get" | "secrets update" => &[secret.as_str()],
            _ => &[configuration.as_str()],
        };
        assert_eq!(resource_names, want, "{what}");
    }
    // The deny list holds for everything but the one named Secret.
    for d in &docs {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("rule.yaml");
        std::fs::write(&path, serde_json::to_string(d).expect("json")).expect("write");
        if d["kind"] == "ClusterRole" || d["kind"] == "Role" {
            let found: Vec<String> = denied_rules(path.to_str().expect("utf-8"))
                .into_iter()
                .filter(|f| !(d["kind"] == "Role" && f.ends_with(": secrets")))
                .collect();
            assert!(found.is_empty(), "{found:?}");
        }
        if d["kind"] == "ClusterRole" {
            for r in d["rules"].as_array().expect("rules") {
                assert!(!r["resources"].to_string().contains("secrets"), "{r}");
            }
        }
    }
    let sa = yaml("rbac/serviceaccount.yaml");
    for b in docs
        .iter()
        .filter(|d| d["kind"].as_str().is_some_and(|k| k.ends_with("Binding")))
    {
        let role = &b["roleRef"]["name"];
        assert!(
            docs.iter().any(|d| &d["metadata"]["name"] == role),
            "{role}"
        );
        assert_eq!(b["subjects"][0]["name"], sa["metadata"]["name"]);
        assert_eq!(b["subjects"][0]["namespace"], sa["metadata"]["namespace"]);
    }

    // The agent's flags and port, the Service and the configuration agree.
    let patch = yaml("overlays/webhook/agent.yaml");
    let c = &patch["spec"]["template"]["spec"]["containers"][0];
    let source = read("src/cli.rs");
    let mut listen = None;
    for e in c["env"].as_array().expect("env") {
        let name = e["name"].as_str().expect("name");
        assert!(
            source.contains(&format!("env = \"{name}\"")),
            "{name} is no agent flag"
        );
        if name == "HEADROOM_WEBHOOK_LISTEN" {
            listen = e["value"].as_str().map(str::to_string);
        }
    }
    let listen = listen.expect("HEADROOM_WEBHOOK_LISTEN turns the webhook on");
    let port = &c["ports"][0];
    assert_eq!(
        listen
            .rsplit(':')
            .next()
            .and_then(|p| p.parse::<u64>().ok()),
        port["containerPort"].as_u64()
    );
    let docs = overlay("overlays/webhook/webhook.yaml");
    let svc = docs
        .iter()
        .find(|d| d["kind"] == "Service")
        .expect("Service");
    assert_eq!(svc["metadata"]["name"], service.as_str());
    assert_eq!(svc["metadata"]["namespace"], sa["metadata"]["namespace"]);
    assert_eq!(svc["spec"]["ports"][0]["targetPort"], port["name"]);
    assert_eq!(
        svc["spec"]["selector"],
        yaml("daemonset/daemonset.yaml")["spec"]["template"]["metadata"]["labels"]
    );
    let mwc = docs
        .iter()
        .find(|d| d["kind"] == "MutatingWebhookConfiguration")
        .expect("configuration");
    assert_eq!(mwc["metadata"]["name"], configuration.as_str());
    let hooks = mwc["webhooks"].as_array().expect("webhooks");
    assert_eq!(hooks.len(), 1);
    let h = &hooks[0];
    assert_eq!(
        h["failurePolicy"], "Ignore",
        "a webhook that is down must never block a claim"
    );
    assert_eq!(h["sideEffects"], "None");
    assert_eq!(h["admissionReviewVersions"], serde_json::json!(["v1"]));
    assert_eq!(
        h["clientConfig"]["service"]["name"],
        svc["metadata"]["name"]
    );
    assert_eq!(
        h["clientConfig"]["service"]["namespace"],
        svc["metadata"]["namespace"]
    );
    assert_eq!(
        h["clientConfig"]["service"]["port"],
        svc["spec"]["ports"][0]["port"]
    );
    assert!(
        h["clientConfig"].get("caBundle").is_none(),
        "the agents set caBundle"
    );
    assert_eq!(
        h["rules"],
        serde_json::json!([{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
            "resources": ["persistentvolumeclaims"], "scope": "Namespaced"}])
    );
    // The agent answers within its deadline, before the API server gives up on it.
    let deadline: jiff::SignedDuration = default("webhook_deadline").parse().expect("duration");
    let timeout = h["timeoutSeconds"].as_i64().expect("timeoutSeconds");
    assert!(
        deadline < jiff::SignedDuration::from_secs(timeout),
        "{deadline} vs {timeout}s"
    );
}

/// overlays/resize-through-owner grants get and patch on the owners' kinds and nothing else,
/// bound to the agent's service account; rbac/ grants none of them, and only src/agent/owner.rs
/// reaches them.
#[test]
fn the_resize_through_owner_overlay_grants_exactly_the_owners_get_and_patch() {
    let docs = overlay("overlays/resize-through-owner/rbac.yaml");
    let mut granted = BTreeSet::new();
    let mut names = Vec::new();
    for d in &docs {
        rule_grants(d, &mut granted, &mut names);
    }
    assert_eq!(granted, needed(OWNER_NEEDS));
    assert!(names.iter().all(|(_, n)| n.is_empty()), "{names:?}");
    for rel in ["rbac/clusterrole.yaml", "rbac/role.yaml"] {
        let text = read(rel);
        assert!(
            !text.contains("postgresql.cnpg.io")
                && !text.contains("acid.zalan.do")
                && !text.contains("crunchydata.com"),
            "{rel} grants an owner's kind"
        );
    }
    let sa = yaml("rbac/serviceaccount.yaml");
    let bindings: Vec<&Value> = docs
        .iter()
        .filter(|d| d["kind"] == "ClusterRoleBinding")
        .collect();
    assert_eq!(bindings.len(), 1);
    assert_eq!(bindings[0]["subjects"][0]["name"], sa["metadata"]["name"]);
    assert_eq!(
        bindings[0]["subjects"][0]["namespace"],
        sa["metadata"]["namespace"]
    );
    assert!(
        docs.iter()
            .any(|d| d["metadata"]["name"] == bindings[0]["roleRef"]["name"])
    );
    let mut sources = Vec::new();
    rust_sources(&Path::new(ROOT).join("src"), &mut sources);
    for (file, text) in &sources {
        if text.contains("ApiResource::from_gvk_with_plural(&gvk, kind.plural)") {
            assert!(
                file.ends_with("/src/agent/owner.rs"),
                "{file} reaches an owner"
            );
        }
    }
}

/// overlays/offline-expansion grants the eviction and nothing else, bound to the agent's service
/// account; rbac/ grants none (the permission is opt-in), and no source deletes a pod.
#[test]
fn the_offline_expansion_overlay_grants_exactly_the_eviction() {
    let docs = overlay("overlays/offline-expansion/rbac.yaml");
    let mut granted = BTreeSet::new();
    let mut names = Vec::new();
    for d in &docs {
        rule_grants(d, &mut granted, &mut names);
    }
    assert_eq!(granted, needed(EVICT_NEEDS));
    assert!(names.iter().all(|(_, n)| n.is_empty()), "{names:?}");
    for rel in ["rbac/clusterrole.yaml", "rbac/role.yaml"] {
        assert!(!read(rel).contains("eviction"), "{rel} grants evictions");
    }
    let sa = yaml("rbac/serviceaccount.yaml");
    let bindings: Vec<&Value> = docs
        .iter()
        .filter(|d| d["kind"] == "ClusterRoleBinding")
        .collect();
    assert_eq!(bindings.len(), 1);
    for b in bindings {
        assert!(
            docs.iter()
                .any(|d| d["metadata"]["name"] == b["roleRef"]["name"])
        );
        assert_eq!(b["subjects"][0]["name"], sa["metadata"]["name"]);
        assert_eq!(b["subjects"][0]["namespace"], sa["metadata"]["namespace"]);
    }
    let mut sources = Vec::new();
    rust_sources(&Path::new(ROOT).join("src"), &mut sources);
    for (file, text) in &sources {
        if text.contains(".evict(") {
            assert!(file.ends_with("/src/agent/evict.rs"), "{file} evicts pods");
        }
        if text.contains("Api<Pod>") || text.contains("Api::<Pod>") {
            assert!(!text.contains(".delete("), "{file} may delete a pod");
        }
    }
}
