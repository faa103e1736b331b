//! The resource types the fake serves, with what the real API server knows about each: scope,
//! whether it has a `status` subresource, and which field selectors it accepts.

/// One served resource type. `fields` lists field-selector labels beyond `metadata.name` and
/// `metadata.namespace`, which every type accepts.
#[derive(Debug)]
pub struct ResourceType {
    pub group: &'static str,
    pub version: &'static str,
    pub plural: &'static str,
    pub kind: &'static str,
    pub namespaced: bool,
    pub status_subresource: bool,
    pub fields: &'static [&'static str],
}

/// Index into [`RESOURCES`]; cheap to copy and to use in store keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Res(pub usize);

impl Res {
    pub fn ty(self) -> &'static ResourceType {
        &RESOURCES[self.0]
    }
}

impl ResourceType {
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `persistentvolumeclaims` or `storageclasses.storage.k8s.io`, as in the real messages.
    pub fn group_resource(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_string()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// `PersistentVolumeClaim` or `StorageClass.storage.k8s.io`, as in "... is invalid" messages.
    pub fn group_kind(&self) -> String {
        if self.group.is_empty() {
            self.kind.to_string()
        } else {
            format!("{}.{}", self.kind, self.group)
        }
    }

    pub fn supports_field(&self, label: &str) -> bool {
        label == "metadata.name" || label == "metadata.namespace" || self.fields.contains(&label)
    }
}

const POD_FIELDS: &[&str] = &[
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.nominatedNodeName",
];
const CORE_EVENT_FIELDS: &[&str] = &[
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
];
// The real events.k8s.io/v1 view stores the same objects as core/v1 Events; the fake keeps the
// two apart (kube-runtime's Recorder writes only events.k8s.io/v1) and selects on its own names.
const EVENTS_V1_FIELDS: &[&str] = &[
    "regarding.kind",
    "regarding.namespace",
    "regarding.name",
    "regarding.uid",
    "reason",
    "reportingController",
    "type",
];

pub static RESOURCES: &[ResourceType] = &[
    ResourceType {
        group: "",
        version: "v1",
        plural: "pods",
        kind: "Pod",
        namespaced: true,
        status_subresource: true,
        fields: POD_FIELDS,
    },
    ResourceType {
        group: "",
        version: "v1",
        plural: "nodes",
        kind: "Node",
        namespaced: false,
        status_subresource: true,
        fields: &["spec.unschedulable"],
    },
    ResourceType {
        group: "",
        version: "v1",
        plural: "persistentvolumeclaims",
        kind: "PersistentVolumeClaim",
        namespaced: true,
        status_subresource: true,
        fields: &[],
    },
    ResourceType {
        group: "",
        version: "v1",
        plural: "persistentvolumes",
        kind: "PersistentVolume",
        namespaced: false,
        status_subresource: true,
        fields: &[],
    },
    ResourceType {
        group: "",
        version: "v1",
        plural: "configmaps",
        kind: "ConfigMap",
        namespaced: true,
        status_subresource: false,
        fields: &[],
    },
    ResourceType {
        group: "",
        version: "v1",
        plural: "events",
        kind: "Event",
        namespaced: true,
        status_subresource: false,
        fields: CORE_EVENT_FIELDS,
    },
    ResourceType {
        group: "events.k8s.io",
        version: "v1",
        plural: "events",
        kind: "Event",
        namespaced: true,
        status_subresource: false,
        fields: EVENTS_V1_FIELDS,
    },
    ResourceType {
        group: "storage.k8s.io",
        version: "v1",
        plural: "storageclasses",
        kind: "StorageClass",
        namespaced: false,
        status_subresource: false,
        fields: &[],
    },
    // `/api/v1/namespaces` and `/api/v1/namespaces/{name}`: the route's `namespaces/{ns}/...`
    // prefix needs a third segment, so these reach the resource itself.
    ResourceType {
        group: "",
        version: "v1",
        plural: "namespaces",
        kind: "Namespace",
        namespaced: false,
        status_subresource: true,
        fields: &["status.phase"],
    },
    ResourceType {
        group: "storage.k8s.io",
        version: "v1",
        plural: "csidrivers",
        kind: "CSIDriver",
        namespaced: false,
        status_subresource: false,
        fields: &[],
    },
];

pub fn find(group: &str, version: &str, plural: &str) -> Option<Res> {
    RESOURCES
        .iter()
        .position(|r| r.group == group && r.version == version && r.plural == plural)
        .map(Res)
}

/// The resource type of a typed kube object, for the direct (non-HTTP) test helpers.
pub fn of<K: kube::Resource<DynamicType = ()>>() -> Res {
    let (group, version, plural) = (K::group(&()), K::version(&()), K::plural(&()));
    find(&group, &version, &plural)
        .unwrap_or_else(|| panic!("fake API does not serve {group}/{version} {plural}"))
}

impl Res {
    pub fn is(self, group: &str, plural: &str) -> bool {
        self.ty().group == group && self.ty().plural == plural
    }
}
