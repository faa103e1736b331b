// A CSI node plugin for headroom's real-node tests (tests/support/realnode): the node half of a
// driver whose volumes are loop-mounted files in --state-dir. It registers itself with the
// kubelet through <root-dir>/plugins_registry/ (what node-driver-registrar does in a real
// cluster), publishes a volume by attaching its backing file to a loop device and mounting it
// (creating and formatting the file on first use), reports statfs through NodeGetVolumeStats and
// grows the mounted filesystem in NodeExpandVolume after the test's controller half has grown
// the backing file. Volume attributes (the PV's spec.csi.volumeAttributes): "file" names the
// backing file (default: the volume handle; two volumes naming one file share one device),
// "size" its size in bytes when created, "fsType" xfs (default) or ext4, "expansion" "offline"
// for a driver that cannot grow a volume in use (below).
//
// Offline expansion, as a driver that grows the filesystem only when it mounts it: NodePublish
// grows the filesystem to its device (the backing file as the controller half left it) before
// the pod sees it, and records the device's size then; NodeExpandVolume on a volume whose device
// has grown since refuses with FailedPrecondition, and answers with the size when there is
// nothing left to grow. That is what the kubelet (1.20 as 1.37) needs of such a driver: without
// STAGE_UNSTAGE it calls NodeExpandVolume only on a published volume, both from its periodic pod
// sync while the pod runs and right after NodePublish when it mounts the volume again. A
// FailedPrecondition marks the volume "in use" for expansion (MarkForInUseExpansionError: not
// retried while it stays mounted; since KEP-1790 the claim also gets a NodeResizeError condition
// and keeps allocatedResourceStatuses NodeResizeInProgress, pkg/volume/util/operationexecutor/
// node_expander.go); the answer after the next publish lets it set the claim's status.capacity
// and clear the resize state. A real driver would read the mode from its StorageClass
// parameters, which its provisioner copies into the volume attributes; the request of
// NodeExpandVolume carries no attributes, so the mode and the size are kept in
// <state-dir>/<volume id>.offline from the publish on.
// Built by scripts/kube-node.sh as a module of its own (go.mod here: the CSI spec, gRPC and
// k8s.io/kubelet's plugin-registration API at the versions Kubernetes 1.37.2 requires).
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	registration "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

var (
	driver   = flag.String("driver", "headroom.test.csi", "driver name")
	rootDir  = flag.String("root-dir", "/var/lib/kubelet", "the kubelet's --root-dir")
	stateDir = flag.String("state-dir", "", "where backing files live")
	nodeID   = flag.String("node-id", "", "this node's name")
	mu       sync.Mutex // one mount/loop change at a time: two volumes may share a file
)

type plugin struct {
	csi.UnimplementedIdentityServer
	csi.UnimplementedNodeServer
	// grpc-go's generated servers require the embedding (forward compatibility); 1.20's did not.
	registration.UnimplementedRegistrationServer
	endpoint string
}

func run(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

func (p *plugin) GetInfo(context.Context, *registration.InfoRequest) (*registration.PluginInfo, error) {
	return &registration.PluginInfo{Type: registration.CSIPlugin, Name: *driver,
		Endpoint: p.endpoint, SupportedVersions: []string{"1.0.0"}}, nil
}

func (p *plugin) NotifyRegistrationStatus(_ context.Context, s *registration.RegistrationStatus) (*registration.RegistrationStatusResponse, error) {
	log.Printf("registration: registered=%v error=%q", s.PluginRegistered, s.Error)
	return &registration.RegistrationStatusResponse{}, nil
}

func (p *plugin) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: *driver, VendorVersion: "0.1.0"}, nil
}

func (p *plugin) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	return &csi.GetPluginCapabilitiesResponse{}, nil
}

func (p *plugin) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{}, nil
}

func (p *plugin) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: *nodeID}, nil
}

func nodeCap(t csi.NodeServiceCapability_RPC_Type) *csi.NodeServiceCapability {
	return &csi.NodeServiceCapability{Type: &csi.NodeServiceCapability_Rpc{
		Rpc: &csi.NodeServiceCapability_RPC{Type: t}}}
}

func (p *plugin) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	return &csi.NodeGetCapabilitiesResponse{Capabilities: []*csi.NodeServiceCapability{
		nodeCap(csi.NodeServiceCapability_RPC_EXPAND_VOLUME),
		nodeCap(csi.NodeServiceCapability_RPC_GET_VOLUME_STATS)}}, nil
}

// loopOf returns the loop device backing file, attaching one when attach is set.
func loopOf(file string, attach bool) (string, error) {
	out, err := run("losetup", "-j", file)
	if err != nil {
		return "", err
	}
	if out != "" {
		return strings.SplitN(out, ":", 2)[0], nil
	}
	if !attach {
		return "", fmt.Errorf("no loop device for %s", file)
	}
	return run("losetup", "-f", "--show", file)
}

func (p *plugin) NodePublishVolume(_ context.Context, r *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	mu.Lock()
	defer mu.Unlock()
	attrs := r.GetVolumeContext()
	file := filepath.Join(*stateDir, filepath.Base(orDefault(attrs["file"], r.GetVolumeId())))
	fs := orDefault(attrs["fsType"], "xfs")
	log.Printf("NodePublishVolume %s file=%s target=%s", r.GetVolumeId(), file, r.GetTargetPath())
	if _, err := os.Stat(file); os.IsNotExist(err) {
		size, _ := strconv.ParseInt(orDefault(attrs["size"], "314572800"), 10, 64)
		if err := os.WriteFile(file, nil, 0o600); err != nil {
			return nil, err
		}
		if err := os.Truncate(file, size); err != nil {
			return nil, err
		}
		if _, err := run("mkfs."+fs, "-q", file); err != nil {
			return nil, err
		}
	}
	dev, err := loopOf(file, true)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(r.GetTargetPath(), 0o750); err != nil {
		return nil, err
	}
	if mounted(r.GetTargetPath()) {
		return &csi.NodePublishVolumeResponse{}, nil
	}
	if _, err := run("mount", "-t", fs, dev, r.GetTargetPath()); err != nil {
		return nil, err
	}
	if attrs["expansion"] == "offline" {
		if err := growAtPublish(r.GetVolumeId(), dev, r.GetTargetPath()); err != nil {
			return nil, err
		}
	}
	return &csi.NodePublishVolumeResponse{}, nil
}

// offlineState is where an offline volume's device size at its last publish is kept.
func offlineState(volumeID string) string {
	return filepath.Join(*stateDir, filepath.Base(volumeID)+".offline")
}

// growAtPublish grows the just mounted filesystem of an offline volume to its device, before
// the pod starts, and records the device's size.
func growAtPublish(volumeID, dev, target string) error {
	if _, err := run("losetup", "-c", dev); err != nil {
		return err
	}
	n, err := growFs(dev, target)
	if err != nil {
		return err
	}
	log.Printf("NodePublishVolume %s offline: filesystem grown to its device, %d bytes", volumeID, n)
	return os.WriteFile(offlineState(volumeID), []byte(strconv.FormatInt(n, 10)), 0o600)
}

// deviceSize is the size in bytes of a block device.
func deviceSize(dev string) (int64, error) {
	size, err := run("blockdev", "--getsize64", dev)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(size, 10, 64)
}

// growFs grows the filesystem mounted at path to its device dev and returns the device's size.
func growFs(dev, path string) (int64, error) {
	var s unix.Statfs_t
	if err := unix.Statfs(path, &s); err != nil {
		return 0, err
	}
	grow := []string{"resize2fs", dev}
	if s.Type == unix.XFS_SUPER_MAGIC {
		grow = []string{"xfs_growfs", path}
	}
	if _, err := run(grow[0], grow[1:]...); err != nil {
		return 0, err
	}
	return deviceSize(dev)
}

func (p *plugin) NodeUnpublishVolume(_ context.Context, r *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	mu.Lock()
	defer mu.Unlock()
	target := r.GetTargetPath()
	log.Printf("NodeUnpublishVolume %s target=%s", r.GetVolumeId(), target)
	if mounted(target) {
		var st unix.Stat_t
		_ = unix.Stat(target, &st)
		if err := unix.Unmount(target, 0); err != nil {
			return nil, err
		}
		detachUnused(st.Dev)
	}
	if err := os.Remove(target); err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

// detachUnused detaches the loop device dev once nothing mounts it any more.
func detachUnused(dev uint64) {
	name := fmt.Sprintf("/dev/loop%d", unix.Minor(dev))
	if unix.Major(dev) != 7 || strings.Contains(mountinfo(), fmt.Sprintf(" %d:%d ", unix.Major(dev), unix.Minor(dev))) {
		return
	}
	if _, err := run("losetup", "-d", name); err != nil {
		log.Print(err)
	}
}

func (p *plugin) NodeGetVolumeStats(_ context.Context, r *csi.NodeGetVolumeStatsRequest) (*csi.NodeGetVolumeStatsResponse, error) {
	var s unix.Statfs_t
	if err := unix.Statfs(r.GetVolumePath(), &s); err != nil {
		return nil, err
	}
	bs := int64(s.Bsize)
	return &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{
		{Unit: csi.VolumeUsage_BYTES, Total: int64(s.Blocks) * bs, Available: int64(s.Bavail) * bs,
			Used: int64(s.Blocks-s.Bfree) * bs},
		{Unit: csi.VolumeUsage_INODES, Total: int64(s.Files), Available: int64(s.Ffree),
			Used: int64(s.Files - s.Ffree)},
	}}, nil
}

func (p *plugin) NodeExpandVolume(_ context.Context, r *csi.NodeExpandVolumeRequest) (*csi.NodeExpandVolumeResponse, error) {
	mu.Lock()
	defer mu.Unlock()
	path := r.GetVolumePath()
	log.Printf("NodeExpandVolume %s path=%s required=%d", r.GetVolumeId(), path, r.GetCapacityRange().GetRequiredBytes())
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return nil, err
	}
	dev := fmt.Sprintf("/dev/loop%d", unix.Minor(st.Dev))
	if _, err := run("losetup", "-c", dev); err != nil {
		return nil, err
	}
	if published, err := os.ReadFile(offlineState(r.GetVolumeId())); err == nil {
		return expandOffline(r.GetVolumeId(), dev, string(published))
	}
	n, err := growFs(dev, path)
	if err != nil {
		return nil, err
	}
	log.Printf("NodeExpandVolume %s grown to %d", r.GetVolumeId(), n)
	return &csi.NodeExpandVolumeResponse{CapacityBytes: n}, nil
}

// expandOffline answers NodeExpandVolume for an offline volume: nothing to do when its
// filesystem already spans the device (grown at publish), refused while it would have to grow
// the filesystem of the volume in use.
func expandOffline(volumeID, dev, published string) (*csi.NodeExpandVolumeResponse, error) {
	n, err := deviceSize(dev)
	if err != nil {
		return nil, err
	}
	at, _ := strconv.ParseInt(published, 10, 64)
	if n > at {
		log.Printf("NodeExpandVolume %s offline: refused, device %d bytes, filesystem %d at publish", volumeID, n, at)
		return nil, status.Errorf(codes.FailedPrecondition,
			"volume %s is in use: this driver grows its filesystem (%d bytes, device now %d) only when it is published again", volumeID, at, n)
	}
	log.Printf("NodeExpandVolume %s offline: grown at publish, %d bytes", volumeID, at)
	return &csi.NodeExpandVolumeResponse{CapacityBytes: at}, nil
}

func mountinfo() string {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	return string(b)
}

func mounted(path string) bool {
	for _, line := range strings.Split(mountinfo(), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == path {
			return true
		}
	}
	return false
}

func orDefault(v, d string) string {
	if v == "" {
		return d
	}
	return v
}

func serve(path string, register func(*grpc.Server)) {
	_ = os.Remove(path)
	l, err := net.Listen("unix", path)
	if err != nil {
		log.Fatal(err)
	}
	s := grpc.NewServer()
	register(s)
	go func() { log.Fatal(s.Serve(l)) }()
}

func main() {
	flag.Parse()
	p := &plugin{endpoint: filepath.Join(*stateDir, "csi.sock")}
	serve(p.endpoint, func(s *grpc.Server) {
		csi.RegisterIdentityServer(s, p)
		csi.RegisterNodeServer(s, p)
	})
	reg := filepath.Join(*rootDir, "plugins_registry", *driver+"-reg.sock")
	if err := os.MkdirAll(filepath.Dir(reg), 0o750); err != nil {
		log.Fatal(err)
	}
	serve(reg, func(s *grpc.Server) { registration.RegisterRegistrationServer(s, p) })
	log.Printf("serving %s, registering through %s", p.endpoint, reg)
	select {}
}
