//! The API server's audit log (JSON lines, one per request at ResponseComplete): what a client
//! really sent, as the server saw it, with the code it answered.
#![allow(dead_code)]

use std::path::Path;

use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    pub verb: String,
    #[serde(rename = "requestURI")]
    pub request_uri: String,
    pub user: User,
    #[serde(default)]
    pub object_ref: Option<ObjectRef>,
    #[serde(default)]
    pub response_status: Option<Status>,
    #[serde(default)]
    pub request_object: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct User {
    pub username: String,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    #[serde(default)]
    pub resource: String,
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub subresource: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Status {
    #[serde(default)]
    pub code: u16,
}

impl Entry {
    pub fn code(&self) -> u16 {
        self.response_status.as_ref().map_or(0, |s| s.code)
    }

    pub fn resource(&self) -> &str {
        self.object_ref.as_ref().map_or("", |o| o.resource.as_str())
    }

    pub fn namespace(&self) -> Option<&str> {
        self.object_ref.as_ref()?.namespace.as_deref()
    }

    pub fn name(&self) -> Option<&str> {
        self.object_ref.as_ref()?.name.as_deref()
    }

    pub fn is_write(&self) -> bool {
        matches!(
            self.verb.as_str(),
            "create" | "update" | "patch" | "delete" | "deletecollection"
        )
    }

    /// A watch. The server logs a watch when its response starts (its first event or bookmark)
    /// and again when it ends: an idle watch shows up late.
    pub fn is_watch(&self) -> bool {
        self.verb == "watch"
    }
}

/// Every entry in the log so far (a torn last line is skipped: it is still being written).
pub fn read(path: &Path) -> Vec<Entry> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}
