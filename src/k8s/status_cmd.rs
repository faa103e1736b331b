//! Snapshot placeholder; the kube branch brings the real command.
