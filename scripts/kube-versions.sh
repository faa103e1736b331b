# The Kubernetes releases headroom is tested on, in one place (sourced by scripts/kube-release.sh,
# scripts/test.sh and docs). Each is built from the module proxy's k8s.io/kubernetes with the
# staging modules pinned by scripts/kube-release/<version>/go.mod (generated, see that script).
# The oldest release with KEP-1790 (recovery from expansion failure) and VolumeAttributesClass GA.
KUBE_OLDEST=v1.34.4
# The newest release the module proxy serves.
KUBE_NEWEST=v1.37.2
KUBE_TESTED=("$KUBE_OLDEST" "$KUBE_NEWEST")
# The Kubernetes CSI sidecars (scripts/csi-sidecars.sh, built from the module proxy through the
# wrapper modules of scripts/csi-sidecars/<repository>/, generated): each the newest of its major
# version the proxy serves (`go list -m -versions`). external-provisioner v6.4.1 builds against
# k8s.io/kubernetes v1.36.3 (staging pinned at v0.36.1 by its own replace lines); the others
# against the v0.37 staging modules.
CSI_RESIZER=v2.3.1
CSI_SNAPSHOTTER=v8.7.0
CSI_PROVISIONER=v6.4.1
