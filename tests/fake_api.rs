//! Tests of the fake API server itself, through a real kube client and kube-runtime.

#[path = "support/fake_api/mod.rs"]
mod fake_api;

use fake_api::FakeApi;

#[tokio::test]
async fn starts() {
    let api = FakeApi::start().await;
    let v = api.client().apiserver_version().await.unwrap();
    assert_eq!(v.major, "1");
}
