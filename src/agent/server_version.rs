//! The API server's release, read once at start (`GET /version`, one request, bounded by a
//! deadline) and said: a log line (a warning when it is older than the releases headroom is
//! tested on, or unreadable) and `headroom_api_server_info`. Nothing else depends on it: the
//! agent reads each field it needs where it needs it, whatever the release.

use std::time::Duration;

use crate::http::AdminState;
use crate::k8s::version::{self, ServerVersion, Support};

/// Long enough for a slow server; the agent's start waits on the watches' sync anyway.
const DEADLINE: Duration = Duration::from_secs(10);

/// Reads, judges and says the server's release. One that cannot be read is said `unknown`.
pub(super) async fn read_and_say(client: &kube::Client, admin: &AdminState) -> ServerVersion {
    let v = match tokio::time::timeout(DEADLINE, client.apiserver_version()).await {
        Ok(Ok(info)) => version::judge(&info.major, &info.minor, &info.git_version),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "cannot read the API server's version (GET /version)");
            version::judge("", "", "")
        }
        Err(_) => {
            tracing::warn!(deadline = ?DEADLINE, "the API server did not answer GET /version in time");
            version::judge("", "", "")
        }
    };
    admin
        .metrics()
        .api_server(&v.git_version, v.support.as_str());
    match v.support {
        Support::Tested | Support::Newer => tracing::info!(api_server = %v, "API server"),
        Support::Older | Support::Unknown => tracing::warn!(api_server = %v, "API server"),
    }
    v
}
