//! `metav1.Status` failures with the codes, reasons and message shapes of kube-apiserver, so that
//! `kube::Error::Api` parses them exactly as it would from a real cluster.

use serde_json::{Value, json};

use super::resources::ResourceType;

/// One field error of an `Invalid` (422) answer: `spec.x: Forbidden: message`.
#[derive(Debug, Clone)]
pub struct FieldError {
    pub field: String,
    /// `FieldValueForbidden`, `FieldValueRequired`, `FieldValueInvalid`.
    pub cause: &'static str,
    pub message: String,
}

impl FieldError {
    pub fn forbidden(field: &str, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            cause: "FieldValueForbidden",
            message: message.into(),
        }
    }

    pub fn required(field: &str, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            cause: "FieldValueRequired",
            message: message.into(),
        }
    }

    pub fn invalid(field: &str, value: &str, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            cause: "FieldValueInvalid",
            message: format!("{value:?}: {}", message.into()),
        }
    }

    fn label(&self) -> &'static str {
        match self.cause {
            "FieldValueForbidden" => "Forbidden",
            "FieldValueRequired" => "Required value",
            _ => "Invalid value",
        }
    }

    /// `Forbidden: field can not be less than previous value`
    fn detail(&self) -> String {
        if self.message.is_empty() {
            self.label().to_string()
        } else {
            format!("{}: {}", self.label(), self.message)
        }
    }
}

#[derive(Debug, Clone)]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub details: Option<Value>,
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: String) -> Self {
        Self {
            code,
            reason,
            message,
            details: None,
        }
    }

    fn with_details(mut self, rt: &ResourceType, name: &str) -> Self {
        let mut d = json!({ "name": name, "kind": rt.plural });
        if !rt.group.is_empty() {
            d["group"] = json!(rt.group);
        }
        self.details = Some(d);
        self
    }

    pub fn not_found(rt: &ResourceType, name: &str) -> Self {
        let msg = format!("{} {name:?} not found", rt.group_resource());
        Self::new(404, "NotFound", msg).with_details(rt, name)
    }

    pub fn already_exists(rt: &ResourceType, name: &str) -> Self {
        let msg = format!("{} {name:?} already exists", rt.group_resource());
        Self::new(409, "AlreadyExists", msg).with_details(rt, name)
    }

    /// The optimistic-concurrency failure of a stale `metadata.resourceVersion`.
    pub fn conflict_modified(rt: &ResourceType, name: &str) -> Self {
        Self::conflict(
            rt,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    pub fn conflict(rt: &ResourceType, name: &str, why: &str) -> Self {
        let msg = format!(
            "Operation cannot be fulfilled on {} {name:?}: {why}",
            rt.group_resource()
        );
        Self::new(409, "Conflict", msg).with_details(rt, name)
    }

    /// An admission plugin's refusal: `persistentvolumeclaims "x" is forbidden: why`.
    pub fn forbidden(rt: &ResourceType, name: &str, why: &str) -> Self {
        let msg = format!("{} {name:?} is forbidden: {why}", rt.group_resource());
        Self::new(403, "Forbidden", msg).with_details(rt, name)
    }

    /// A validation failure: `PersistentVolumeClaim "x" is invalid: spec: Forbidden: ...`, with
    /// several errors joined as `[a, b]` like apimachinery's aggregate.
    pub fn invalid(rt: &ResourceType, name: &str, errors: &[FieldError]) -> Self {
        let parts: Vec<String> = errors
            .iter()
            .map(|e| format!("{}: {}", e.field, e.detail()))
            .collect();
        let joined = match parts.as_slice() {
            [one] => one.clone(),
            _ => format!("[{}]", parts.join(", ")),
        };
        let msg = format!("{} {name:?} is invalid: {joined}", rt.group_kind());
        let causes: Vec<Value> = errors
            .iter()
            .map(|e| json!({ "reason": e.cause, "message": e.detail(), "field": e.field }))
            .collect();
        let mut d = json!({ "name": name, "kind": rt.kind, "causes": causes });
        if !rt.group.is_empty() {
            d["group"] = json!(rt.group);
        }
        let mut err = Self::new(422, "Invalid", msg);
        err.details = Some(d);
        err
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message.into())
    }

    pub fn gone(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message.into())
    }

    pub fn route_not_found() -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource".into(),
        )
    }

    pub fn method_not_allowed(method: &str) -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            format!("the server does not allow this method on the requested resource ({method})"),
        )
    }

    pub fn unsupported_media_type(content_type: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format ({content_type}) - accepted media types include: \
                 application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json"
            ),
        )
    }

    /// What the fault injector answers: the reason kube-apiserver pairs with each code.
    pub fn injected(code: u16) -> Self {
        let reason = match code {
            400 => "BadRequest",
            401 => "Unauthorized",
            403 => "Forbidden",
            404 => "NotFound",
            409 => "Conflict",
            410 => "Expired",
            429 => "TooManyRequests",
            503 => "ServiceUnavailable",
            504 => "Timeout",
            _ => "InternalError",
        };
        Self::new(
            code,
            reason,
            format!("Internal error occurred: injected fault ({code})"),
        )
    }

    pub fn to_json(&self) -> Value {
        let mut v = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(d) = &self.details {
            v["details"] = d.clone();
        }
        v
    }
}
