//! Tests against a real kube-apiserver + etcd: the server ([`server`]) and a per-test slice of it
//! ([`cluster`]) with its own namespace, node, StorageClasses and kubelet root of real tmpfs mounts;
//! a fault proxy in front of it ([`proxy`]) and the one rule of older servers it scripts
//! ([`before_1790`]);
//! the claim admission webhook's harness ([`webhook`]).
#![allow(dead_code)]

pub mod audit;
pub mod before_1790;
pub mod cluster;
pub mod proxy;
pub mod server;
pub mod webhook;

use std::future::Future;
use std::sync::OnceLock;

/// The runtime the tests' own Kubernetes clients run on. Tests are plain `#[test]` functions and
/// call [`block`]; the agent runs as a child process with its own runtime.
pub fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("test runtime")
    })
}

pub fn block<F: Future>(f: F) -> F::Output {
    runtime().block_on(f)
}
