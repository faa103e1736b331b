//! The pool behind a claim from `CSIStorageCapacity` objects and TopoLVM's node annotation, and
//! what a hostile object or annotation gets: an error naming it and its field, never a panic.

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::storage::v1::{CSIStorageCapacity, StorageClass};
use serde_json::{Value, json};

use super::pool::{PoolError, PoolRead, pool_of};
use crate::quantity::GI;

fn class(provisioner: &str, params: Value) -> StorageClass {
    serde_json::from_value(json!({
        "metadata": {"name": "local"}, "provisioner": provisioner, "parameters": params
    }))
    .expect("class")
}

fn node(annotations: Value) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": "node-a", "labels": {"kubernetes.io/hostname": "node-a",
            "topology.kubernetes.io/zone": "z1"}, "annotations": annotations}
    }))
    .expect("node")
}

fn capacity(name: &str, class: &str, topology: Value, capacity: Value) -> CSIStorageCapacity {
    let mut v = json!({
        "metadata": {"name": name, "namespace": "kube-system"},
        "storageClassName": class, "nodeTopology": topology
    });
    if !capacity.is_null() {
        v["capacity"] = capacity;
    }
    serde_json::from_value(v).expect("capacity")
}

fn on_node_a() -> Value {
    json!({"matchLabels": {"kubernetes.io/hostname": "node-a"}})
}

fn read(objects: Vec<CSIStorageCapacity>) -> PoolRead {
    PoolRead::Read(objects)
}

#[test]
fn the_tightest_object_of_the_class_that_selects_the_node_bounds() {
    let c = class("lvm.example.com", json!({}));
    let objects = vec![
        capacity("a", "local", on_node_a(), json!("10Gi")),
        capacity(
            "b",
            "local",
            json!({"matchExpressions": [
            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["z1"]}]}),
            json!("4Gi"),
        ),
        capacity(
            "other-node",
            "local",
            json!({"matchLabels": {"kubernetes.io/hostname": "node-b"}}),
            json!("1Gi"),
        ),
        capacity("other-class", "fast", on_node_a(), json!("1Gi")),
        capacity("no-topology", "local", Value::Null, json!("1Gi")),
    ];
    let mut objects = objects;
    objects[4].node_topology = None;
    let v = pool_of(&c, Some(&node(json!({}))), &read(objects))
        .expect("read")
        .expect("bound");
    assert_eq!(v.free_bytes, 4 * GI);
    assert_eq!(v.source, "CSIStorageCapacity kube-system/b");
    assert_eq!(v.segment, "topology.kubernetes.io/zone In (z1)");
    assert_eq!(v.class, "local");
}

#[test]
fn maximum_volume_size_is_carried_and_an_empty_selector_is_every_node() {
    let c = class("lvm.example.com", json!({}));
    let mut o = capacity("a", "local", json!({}), json!("100Gi"));
    o.maximum_volume_size = Some(k8s_openapi::apimachinery::pkg::api::resource::Quantity(
        "20Gi".into(),
    ));
    let v = pool_of(&c, Some(&node(json!({}))), &read(vec![o]))
        .expect("read")
        .expect("bound");
    assert_eq!(
        (v.max_volume_bytes, v.segment.as_str()),
        (Some(20 * GI), "every node")
    );
}

#[test]
fn nothing_published_for_the_node_bounds_nothing() {
    let c = class("lvm.example.com", json!({}));
    let n = node(json!({}));
    let elsewhere = capacity(
        "x",
        "local",
        json!({"matchLabels": {"kubernetes.io/hostname": "gone"}}),
        json!("1Gi"),
    );
    assert_eq!(pool_of(&c, Some(&n), &read(vec![elsewhere])), Ok(None));
    assert_eq!(pool_of(&c, Some(&n), &PoolRead::NotRead), Ok(None));
    assert_eq!(
        pool_of(&c, Some(&n), &PoolRead::Failed("timeout".into())),
        Ok(None)
    );
    assert_eq!(pool_of(&c, None, &read(Vec::new())), Ok(None));
}

#[test]
fn a_hostile_capacity_is_an_error_naming_the_object_and_field() {
    let c = class("lvm.example.com", json!({}));
    let n = node(json!({}));
    for (value, field) in [
        (json!("-5Gi"), "capacity"),
        (json!("99999999999999999999999"), "capacity"),
        (json!("100Ei"), "capacity"),
        (Value::Null, "capacity"),
    ] {
        let o = capacity("bad", "local", on_node_a(), value.clone());
        let e = pool_of(&c, Some(&n), &read(vec![o])).expect_err("refused");
        let text = e.to_string();
        assert!(
            text.contains("CSIStorageCapacity kube-system/bad") && text.contains(field),
            "{value}: {text}"
        );
    }
    let mut o = capacity("bad-max", "local", on_node_a(), json!("1Gi"));
    o.maximum_volume_size = Some(k8s_openapi::apimachinery::pkg::api::resource::Quantity(
        "-1".into(),
    ));
    let e = pool_of(&c, Some(&n), &read(vec![o])).expect_err("refused");
    assert!(e.to_string().contains("maximumVolumeSize"), "{e}");
}

#[test]
fn a_malformed_selector_is_an_error_and_a_hostile_one_elsewhere_is_not_read() {
    let c = class("lvm.example.com", json!({}));
    let n = node(json!({}));
    for expr in [
        json!({"key": "k", "operator": "Near", "values": ["x"]}),
        json!({"key": "k", "operator": "In", "values": []}),
        json!({"key": "k", "operator": "Exists", "values": ["x"]}),
    ] {
        let o = capacity(
            "sel",
            "local",
            json!({"matchExpressions": [expr]}),
            json!("1Gi"),
        );
        let e = pool_of(&c, Some(&n), &read(vec![o])).expect_err("refused");
        assert!(
            matches!(&e, PoolError::Selector { object, .. } if object == "CSIStorageCapacity kube-system/sel"),
            "{e}"
        );
    }
    // Another class's objects are not this claim's to judge.
    let o = capacity(
        "sel",
        "fast",
        json!({"matchExpressions": [
        {"key": "k", "operator": "Near", "values": ["x"]}]}),
        json!("-1"),
    );
    assert_eq!(pool_of(&c, Some(&n), &read(vec![o])), Ok(None));
}

#[test]
fn topolvm_reads_its_device_class_annotation_new_or_old() {
    let n = node(json!({"capacity.topolvm.io/ssd": "5368709120",
        "capacity.topolvm.cybozu.com/hdd": "1073741824", "capacity.topolvm.io/00default": "0"}));
    let ssd = class("topolvm.io", json!({"topolvm.io/device-class": "ssd"}));
    let v = pool_of(&ssd, Some(&n), &PoolRead::NotRead)
        .expect("read")
        .expect("bound");
    assert_eq!(v.free_bytes, 5 * GI);
    assert_eq!(v.source, "Node node-a annotation capacity.topolvm.io/ssd");
    let hdd = class(
        "topolvm.cybozu.com",
        json!({"topolvm.cybozu.com/device-class": "hdd"}),
    );
    let v = pool_of(&hdd, Some(&n), &PoolRead::NotRead)
        .expect("read")
        .expect("bound");
    assert_eq!(v.free_bytes, GI);
    // No device class: TopoLVM's default class.
    let default = class("topolvm.io", json!({}));
    let v = pool_of(&default, Some(&n), &PoolRead::NotRead)
        .expect("read")
        .expect("bound");
    assert_eq!(v.free_bytes, 0);
    // Another driver's class does not read TopoLVM's annotation.
    let other = class("ebs.csi.aws.com", json!({"topolvm.io/device-class": "ssd"}));
    assert_eq!(pool_of(&other, Some(&n), &PoolRead::NotRead), Ok(None));
}

#[test]
fn a_published_object_wins_over_the_annotation() {
    let n = node(json!({"capacity.topolvm.io/00default": "5368709120"}));
    let c = class("topolvm.io", json!({}));
    let o = capacity("a", "local", on_node_a(), json!("2Gi"));
    let v = pool_of(&c, Some(&n), &read(vec![o]))
        .expect("read")
        .expect("bound");
    assert_eq!(v.free_bytes, 2 * GI);
}

#[test]
fn a_hostile_annotation_is_an_error_that_repeats_little_of_it() {
    let c = class("topolvm.io", json!({}));
    let long = "9".repeat(5000);
    for value in [
        "-1",
        "lots",
        "18446744073709551616",
        "1Gi",
        "\u{1b}[31m12",
        long.as_str(),
    ] {
        let n = node(json!({"capacity.topolvm.io/00default": value}));
        let e = pool_of(&c, Some(&n), &PoolRead::NotRead).expect_err("refused");
        let text = e.to_string();
        assert!(
            text.contains("Node node-a") && text.contains("capacity.topolvm.io/00default"),
            "{text}"
        );
        assert!(text.len() < 400 && !text.contains('\u{1b}'), "{text}");
    }
}
