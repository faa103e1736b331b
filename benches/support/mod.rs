//! The test suite's support code, for benches that drive the agent end to end.
#![allow(dead_code)]

#[path = "../../tests/support/fleet.rs"]
pub mod fleet;
#[path = "../../tests/support/http.rs"]
pub mod http;
#[path = "../../tests/support/kube/mod.rs"]
pub mod kube;
#[path = "../../tests/support/node.rs"]
pub mod node;
#[path = "../../tests/support/ports.rs"]
pub mod ports;
#[path = "../../tests/support/root.rs"]
pub mod root;
#[path = "../../tests/support/sink.rs"]
pub mod sink;
#[path = "../../tests/support/sink_kube.rs"]
pub mod sink_kube;
