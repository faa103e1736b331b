//! The one read of a StorageClass's published capacity a grow decision makes. No watch: the
//! `CSIStorageCapacity` objects number nodes × classes across the cluster, and a node's API
//! cost must not follow the cluster's size; a decision that would send a grow lists its
//! driver's objects once (external-provisioner labels each with the driver's name), in pages,
//! within the API deadline, and a scan that decides no grow reads nothing.

use std::time::Duration;

use k8s_openapi::api::storage::v1::{CSIStorageCapacity, StorageClass};
use kube::api::ListParams;
use kube::{Api, Client};

use crate::policy::Enforcement;
use crate::resolve::Evaluation;
use crate::resolve::pool::{DRIVER_LABEL, PoolRead};

/// Objects per page.
const PAGE: u32 = 500;
/// Pages at most (5000 objects of one driver): past it the node's segment may be unread, and
/// the grow is bounded by what the Node says alone.
const PAGES: usize = 10;

/// The driver whose objects to read, when `eval` decided a grow that would be sent (not only
/// recommended) for a claim of `class`.
pub(super) fn wanted<'a>(eval: &Evaluation, class: Option<&'a StorageClass>) -> Option<&'a str> {
    eval.report.decision.grow_to()?;
    let recommend = eval
        .policy
        .as_ref()
        .is_some_and(|p| p.enforcement == Enforcement::Recommend);
    let driver = class?.provisioner.as_str();
    (!recommend && !driver.is_empty()).then_some(driver)
}

/// The driver's objects, every page within `timeout` in all; a failure is said, not fatal.
pub(super) async fn read(client: &Client, driver: &str, timeout: Duration) -> PoolRead {
    let api: Api<CSIStorageCapacity> = Api::all(client.clone());
    let pages = async {
        let mut items = Vec::new();
        let first = ListParams::default()
            .labels(&format!("{DRIVER_LABEL}={driver}"))
            .limit(PAGE);
        // No resourceVersion=0 (the watch cache): a cached list ignores `limit`, and the
        // answer's size, bounded by pages, is what a node's cost must not take from the
        // cluster's size. A continued page carries its token.
        let mut params = first.clone();
        for _ in 0..PAGES {
            let list = api.list(&params).await?;
            items.extend(list.items);
            match list.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => params = first.clone().continue_token(&token),
                None => break,
            }
        }
        Ok::<_, kube::Error>(items)
    };
    match tokio::time::timeout(timeout, pages).await {
        Ok(Ok(items)) => PoolRead::Read(items),
        Ok(Err(e)) => {
            tracing::warn!(driver, error = %e, "CSIStorageCapacity could not be listed");
            PoolRead::Failed(e.to_string())
        }
        Err(_) => {
            tracing::warn!(driver, "CSIStorageCapacity list timed out");
            PoolRead::Failed(format!("no answer within {}s", timeout.as_secs()))
        }
    }
}
