#!/usr/bin/env python3
"""Builds the fuzz targets' seed inputs from real files, into fuzz/seeds/<target>/ (not checked
in: `cargo fuzz cmin` reduces them to fuzz/corpus/<target>/, which is; see fuzz/README.md).

- pg_datadir: data directories made by each PostgreSQL on this machine (Debian's under
  /usr/lib/postgresql, and those of $HEADROOM_PG_VERSIONS, PostgreSQL 13-18): initdb, a physical
  and a logical slot, archiving on and failing (a `.ready` backlog), an include and an
  include_dir, then encoded as the bare, CloudNativePG (`pgdata/`) and Zalando (`pgroot/data/`)
  layouts, as a standby, with a `backup_label`, and with WAL on a volume of its own.
- kubelet_root: this machine's /proc/self/mountinfo, with the kubelet root's volumes mounted.
- the JSON, policy and schedule targets: the test suite's own objects and values.
- kubelet_root and kubelet_stats (`real-node`), with $HEADROOM_FUZZ_CAPTURE set: what
  tests/real_node.rs captured into that directory from the real kubelet 1.20.2 (the host's
  mountinfo and vol_data.json while a pod's CSI volume is mounted, /stats/summary then).

Run as root (PostgreSQL runs as the `postgres` user): python3 fuzz/seeds.py
"""

import glob
import hashlib
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "seeds")

# What the WAL reader opens; everything else in a data directory (relations, pg_xact, ...) is
# never read and only slows the fuzzer down.
READ = ("PG_VERSION", "global/pg_control", "postgresql.conf", "postgresql.auto.conf",
        "extra.conf", "postmaster.opts", "backup_label", "standby.signal", "recovery.signal")


def seed(target, data, name=None):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    name = name or hashlib.sha1(data).hexdigest()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def entry(kind, path, content=b""):
    content = content[:0xFFFF]
    return kind + path.encode() + b"\0" + struct.pack("<H", len(content)) + content


def uncommented(text):
    """postgresql.conf less its whole-line comments (29 KB of them, parsed like the first few):
    the seed stays small enough for the fuzzer's input cap."""
    lines = text.split(b"\n")
    comments = [i for i, l in enumerate(lines) if l.lstrip().startswith(b"#")]
    drop = set(comments[5:])
    return b"\n".join(l for i, l in enumerate(lines) if i not in drop)


def encode(datadir, prefix="", wal_prefix=None):
    """The data directory as the tree format of fuzz/src/lib.rs, below `prefix`; with
    `wal_prefix`, pg_wal's contents go there and pg_wal becomes a link into /pgwal."""
    out = b""
    for rel in READ:
        p = os.path.join(datadir, rel)
        if os.path.isfile(p):
            data = open(p, "rb").read()
            out += entry(b"f", prefix + rel, uncommented(data) if rel.endswith(".conf") else data)
    for p in sorted(glob.glob(os.path.join(datadir, "conf.d", "*"))):
        out += entry(b"f", prefix + "conf.d/" + os.path.basename(p), open(p, "rb").read())
    for p in sorted(glob.glob(os.path.join(datadir, "pg_replslot", "*", "state"))):
        slot = os.path.basename(os.path.dirname(p))
        out += entry(b"f", f"{prefix}pg_replslot/{slot}/state", open(p, "rb").read())
    wal = prefix + "pg_wal/"
    if wal_prefix is not None:
        out += entry(b"l", prefix + "pg_wal", b"/pgwal/pg_wal")
        wal = wal_prefix + "pg_wal/"
    out += entry(b"d", wal + "archive_status")
    for p in sorted(os.listdir(os.path.join(datadir, "pg_wal"))):
        full = os.path.join(datadir, "pg_wal", p)
        if os.path.isfile(full):
            # Segment contents are never read, only their names and sizes.
            out += entry(b"f", wal + p, b"" if len(p) == 24 else open(full, "rb").read())
    for p in sorted(os.listdir(os.path.join(datadir, "pg_wal", "archive_status"))):
        out += entry(b"f", wal + "archive_status/" + p)
    return out


def as_postgres(*cmd, **kw):
    return subprocess.run(["runuser", "-u", "postgres", "--", *cmd], check=True,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kw)


def make_datadir(bindir, tmp):
    d = os.path.join(tmp, "data")
    as_postgres(os.path.join(bindir, "initdb"), "-D", d, "--no-sync", "-A", "trust", "-U", "postgres")
    os.makedirs(os.path.join(d, "conf.d"), exist_ok=True)
    with open(os.path.join(d, "postgresql.conf"), "a") as f:
        f.write("\nwal_level = logical\narchive_mode = on\narchive_command = 'false'\n"
                "checkpoint_timeout = '5min'\ninclude 'extra.conf'\ninclude_dir 'conf.d'\n")
    with open(os.path.join(d, "extra.conf"), "w") as f:
        f.write("# included\nmax_wal_senders = 10 # trailing\n")
    with open(os.path.join(d, "conf.d", "01-archive.conf"), "w") as f:
        f.write("archive_timeout = 60\n")
    shutil.chown(d, "postgres", "postgres")
    for p in (os.path.join(d, "extra.conf"), os.path.join(d, "conf.d"),
              os.path.join(d, "conf.d", "01-archive.conf")):
        shutil.chown(p, "postgres", "postgres")
    ctl = os.path.join(bindir, "pg_ctl")
    as_postgres(ctl, "-D", d, "-w", "-o", f"-k {tmp} -c listen_addresses=''", "start")
    try:
        sql = ("select pg_create_physical_replication_slot('standby_1', true);"
               "select pg_create_logical_replication_slot('logical_1', 'test_decoding');"
               "create table t as select generate_series(1, 10000) n;"
               "select pg_switch_wal(); checkpoint; select pg_switch_wal(); checkpoint;")
        as_postgres(psql(bindir), "-h", tmp, "-U", "postgres", "-c", sql)
    finally:
        as_postgres(ctl, "-D", d, "-w", "-m", "fast", "stop")
    return d


def psql(bindir):
    """The server's own psql, or Debian's: npm's PostgreSQL 13-18 ship the server only, and any
    psql speaks to every server version this script starts."""
    own = os.path.join(bindir, "psql")
    if os.path.exists(own):
        return own
    return sorted(glob.glob("/usr/lib/postgresql/*/bin/psql"))[-1]


def pg_seeds():
    bins = sorted(glob.glob("/usr/lib/postgresql/*/bin"))
    versions = os.environ.get("HEADROOM_PG_VERSIONS")
    if versions:
        bins += sorted(glob.glob(os.path.join(versions, "*", "bin")))
    for bindir in bins:
        tmp = tempfile.mkdtemp(prefix="headroom-seeds-")
        os.chmod(tmp, 0o777)
        try:
            d = make_datadir(bindir, tmp)
        except subprocess.CalledProcessError as e:
            print(f"seeds.py: {bindir}: {e}", file=sys.stderr)
            shutil.rmtree(tmp, ignore_errors=True)
            continue
        major = open(os.path.join(d, "PG_VERSION")).read().strip()
        seed("pg_datadir", b"\x04" + encode(d), f"pg{major}-bare")
        seed("pg_datadir", b"\x04" + encode(d, "pgdata/"), f"pg{major}-cnpg")
        seed("pg_datadir", b"\x04" + encode(d, "pgroot/data/"), f"pg{major}-zalando")
        seed("pg_datadir", b"\x04" + encode(d) + entry(b"f", "standby.signal"), f"pg{major}-standby")
        label = b"START WAL LOCATION: 0/2000028 (file 000000010000000000000002)\nLABEL: seed\n"
        seed("pg_datadir", b"\x00" + encode(d) + entry(b"f", "backup_label", label), f"pg{major}-backup")
        seed("pg_datadir", b"\x03" + encode(d, "data/", "wal/"), f"pg{major}-walvolume")
        shutil.rmtree(tmp, ignore_errors=True)
        print(f"seeds.py: pg_datadir from PostgreSQL {major} ({bindir})", file=sys.stderr)


def kubelet_seeds():
    mountinfo = open("/proc/self/mountinfo", "rb").read()
    mounted = (b"900 25 0:99 / @ROOT@/pods/u1/volumes/kubernetes.io~csi/pv-1/mount rw,relatime "
               b"shared:500 - ext4 /dev/loop7 rw\n"
               b"901 25 0:99 /sub @ROOT@/pods/u1/volumes/kubernetes.io~local-volume/pv-3 rw "
               b"- ext4 /dev/loop7 rw\n"
               # A host directory whose name ends in a space: the kernel escapes it as \040.
               b"902 25 8:17 / /mnt/backup\\040 rw,relatime - xfs /dev/sdb1 rw\n")
    vol_data = json.dumps({"specVolID": "pv-1", "driverName": "ebs.csi.aws.com",
                           "volumeHandle": "vol-0abc", "volumeLifecycleMode": "Persistent",
                           "attachmentID": "csi-1"}).encode()
    seed("kubelet_root", mountinfo + mounted + b"\0" + vol_data, "this-machine")
    seed("kubelet_root", mounted + b"\0" + vol_data.replace(b"Persistent", b"Ephemeral"), "ephemeral")


# The real node's kubelet root, and the place of the fuzz target's mounted CSI volume in its own.
REAL_ROOT = b"/var/lib/kubelet"
TARGET_VOLUME = b"@ROOT@/pods/u1/volumes/kubernetes.io~csi/pv-1/mount"


def real_node_seeds(captured):
    """The real node's capture: its mount table with the captured CSI volume's mount point moved
    to the target's mounted volume and every other one below the kubelet root to `@ROOT@`, so
    discovery finds that volume as the kubelet mounted it; its vol_data.json; the summary as is."""
    def read(name):
        with open(os.path.join(captured, name), "rb") as f:
            return f.read()
    vol_data = read("vol_data.json")
    pv = json.loads(vol_data)["specVolID"].encode()
    lines = []
    for line in read("mountinfo").split(b"\n"):
        f = line.split(b" ")
        if len(f) > 4 and (f[4] + b"/").startswith(REAL_ROOT + b"/"):
            below = f[4][len(REAL_ROOT):]
            ours = rb"/pods/[^/]+/volumes/kubernetes\.io~csi/" + re.escape(pv) + rb"/mount"
            f[4] = TARGET_VOLUME if re.fullmatch(ours, below) else b"@ROOT@" + below
        lines.append(b" ".join(f))
    table = b"\n".join(lines)
    if TARGET_VOLUME not in table:
        sys.exit(f"seeds.py: {captured}/mountinfo has no mount of {pv.decode()}")
    seed("kubelet_root", table + b"\0" + vol_data, "real-node")
    seed("kubelet_stats", read("summary.json"), "real-node")


SUMMARY = {"node": {"nodeName": "n"}, "pods": [
    {"podRef": {"name": "pg-0", "namespace": "db"}, "volume": [
        {"time": "2026-11-22T10:00:00Z", "name": "data",
         "pvcRef": {"name": "data-pg-0", "namespace": "db"}, "capacityBytes": 1000,
         "usedBytes": 800, "availableBytes": 150, "inodes": 100, "inodesUsed": 10,
         "inodesFree": 90},
        {"time": "2026-11-22T10:00:00Z", "name": "kube-api-access", "capacityBytes": 1,
         "usedBytes": 1, "availableBytes": 0}]},
    {"podRef": {"name": "x", "namespace": "db"}}]}

QUANTITIES = ["10Gi", "1.5Gi", "500M", "1e3", "0.5Ei", "18446744073709551615", "100m", "+1Ki",
              "-1", "1E", "8Ei", "0", "  2Ti ", "1.000000001Gi", "9.3e18"]

POLICY = """enabled: true
mode: threshold
limit: 500Gi
usageThreshold: 80
minAvailable: 10%
step: 20%
minStep: 1Gi
maxStep: 100Gi
maxActionsPerDay: 3
modificationInterval: auto
trigger:
  predictive: true
  resizeLeadTime: 10m
maintenanceWindow:
  schedule: "0 3 * * *"
  duration: 2h
  timezone: Europe/Paris
emergencyGrow:
  enabled: true
  criticalThreshold: 95
  criticalMinimumFree: 1Gi
  exceedLimitOnEmergency: false
walSafety:
  requireArchiveHealthy: true
  maxPendingWALFiles: 100
  maxSlotRetentionBytes: 10Gi
reclaimSpace:
  enabled: true
  schedule: "@weekly"
"""

CONVERGENT = """enabled: true
mode: convergent
limit: 1Ti
request: 100Gi
targetBuffer: 20
emergencyGrow:
  maxActionsPerDay: 4
  reservedActionsForEmergency: 1
"""


def records(pairs):
    return b"\0".join(f"{k}={v}".encode() for k, v in pairs)


def text_seeds():
    seed("kubelet_stats", json.dumps(SUMMARY).encode(), "summary")
    # The least a summary needs for a claim's numbers to be read.
    seed("kubelet_stats", json.dumps({"pods": [{"volume": [
        {"pvcRef": {"name": "data-pg-0", "namespace": "db"}, "capacityBytes": 1000,
         "usedBytes": 800, "availableBytes": 150}]}]}).encode(), "one-claim")
    # A claim on btrfs: statfs counts no inodes, so the kubelet reports 0 of them, and 0 free,
    # beside the files it counted (kubelet 1.20's volume stats, fs.Info on btrfs).
    btrfs = json.loads(json.dumps(SUMMARY))
    btrfs["pods"][0]["volume"][0].update({"inodes": 0, "inodesFree": 0, "inodesUsed": 1205})
    seed("kubelet_stats", json.dumps(btrfs).encode(), "btrfs")
    for q in QUANTITIES:
        seed("quantity", q.encode())
    for s, d, tz in [("0 3 * * *", "2h", "UTC"), ("@weekly", "4h", "Europe/Paris"),
                     ("30 1 * * 0", "PT1H", "America/New_York"), ("0 0 1 1 * 9999", "1h", "UTC"),
                     ("*/15 2-4 * * MON-FRI", "90m", "Australia/Lord_Howe")]:
        seed("schedule", records([("schedule", s), ("duration", d), ("timezone", tz),
                                  ("now", "1774746000"), ("last", "1774659600")]))
    storage_classes = "fast:\n  limit: 200Gi\n  usageThreshold: 70\n"
    seed("policy", records([("cm.policy.yaml", POLICY), ("cm.storageClasses.yaml", storage_classes),
                            ("class", "fast"), ("size", "10Gi"),
                            ("pvc.headroom.dev/enabled", "true"), ("pvc.headroom.dev/limit", "50Gi"),
                            ("sc.headroom.dev/usage-threshold", "75")]), "layers")
    seed("policy", records([("file", CONVERGENT)]), "convergent-file")
    # Every bounded key at the edge of its documented range, as annotations on the claim.
    seed("policy", records([("pvc.headroom.dev/mode", "convergent"),
                            ("pvc.headroom.dev/target-buffer", "50"), ("pvc.headroom.dev/limit", "100Gi"),
                            ("pvc.headroom.dev/inode-threshold", "99"),
                            ("pvc.headroom.dev/max-actions-per-day", "10"),
                            ("pvc.headroom.dev/emergency-grow-critical-threshold", "80"),
                            ("size", "10Gi")]), "edges")
    # And one past them, which validation must refuse.
    seed("policy", records([("pvc.headroom.dev/mode", "convergent"), ("pvc.headroom.dev/limit", "100Gi"),
                            ("pvc.headroom.dev/target-buffer", "51"),
                            ("pvc.headroom.dev/inode-threshold", "100"),
                            ("pvc.headroom.dev/emergency-grow-critical-threshold", "79"),
                            ("size", "10Gi")]), "past-edges")
    seed("policy", records([("pvc.resize.topolvm.io/threshold", "10%"),
                            ("pvc.resize.topolvm.io/increase", "20%"),
                            ("pvc.resize.topolvm.io/storage_limit", "100Gi"),
                            ("sc.resize.topolvm.io/enabled", "true"), ("class", "topolvm"),
                            ("provisioner", "topolvm.io"), ("limit", "80Gi"),
                            ("ns.reclaimspace.csiaddons.openshift.io/schedule", "@daily"),
                            ("driver.reclaimspace.csiaddons.openshift.io/schedule", "@hourly")]),
         "topolvm-csi-addons")
    history = json.dumps([{"at": "2026-03-01T11:00:00Z", "kind": "Grow", "from": 10737418240,
                           "to": 12884901888, "node": "n", "fs_before": 10737418240,
                           "landed": "2026-03-01T11:02:00Z"}])
    base = [("pvc.headroom.dev/enabled", "true"), ("pvc.headroom.dev/limit", "100Gi"),
            ("request", "12Gi"), ("capacity", "12Gi"), ("expandable", "true"),
            ("used", "12000000000"), ("available", "800000000"), ("size", "12884901888"),
            ("now", "1772366400"), ("history", history)]
    seed("claim", records(base), "threshold")
    # At the day's budget (maxActionsPerDay 3): two grows and the KEP-1790 retry that lowered
    # the second one's infeasible request again (tests/agent_retry.rs), so nothing may grow.
    at_budget = json.dumps([
        {"at": "2026-03-01T09:00:00Z", "kind": "Grow", "from": 8589934592, "to": 10737418240,
         "node": "n", "landed": "2026-03-01T09:02:00Z"},
        {"at": "2026-03-01T10:00:00Z", "kind": "Grow", "from": 10737418240, "to": 214748364800,
         "node": "n"},
        {"at": "2026-03-01T10:10:00Z", "kind": "Retry", "from": 214748364800,
         "to": 12884901888, "node": "n"}])
    seed("claim", records(base + [("history", at_budget)]), "at-budget-with-retry")
    seed("claim", records(base + [("cm.policy.yaml", CONVERGENT), ("draining", ""),
                                  ("rate", "1000000"), ("kubelet_at", "1772366300")]),
         "convergent-draining")
    seed("claim", records(base + [("condition", "FileSystemResizePending"),
                                  ("condition_at", "1772366000"), ("request", "14Gi"),
                                  ("podlabel.cnpg.io/cluster", "pg"),
                                  ("pvclabel.cnpg.io/pvcRole", "PG_DATA"),
                                  ("wal", json.dumps({"archive_configured": True,
                                                      "archive_healthy": False,
                                                      "pending_files": 500}))]),
         "resizing-wal")
    pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
           "metadata": {"name": "data-pg-2", "namespace": "db",
                        "labels": {"cnpg.io/cluster": "pg"},
                        "annotations": {"headroom.dev/enabled": "true",
                                        "headroom.dev/limit": "100Gi"}},
           "spec": {"storageClassName": "fast", "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "10Gi"}}}}
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
              "request": {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
                          "kind": {"group": "", "version": "v1", "kind": "PersistentVolumeClaim"},
                          "operation": "CREATE", "namespace": "db", "object": pvc}}
    peer = json.loads(json.dumps(pvc))
    peer["metadata"]["name"] = "data-pg-1"
    peer["spec"]["resources"]["requests"]["storage"] = "40Gi"
    sts_pvc = json.loads(json.dumps(pvc))
    sts_pvc["metadata"] = {"name": "data-web-3", "namespace": "db",
                           "annotations": pvc["metadata"]["annotations"]}
    sts_peer = json.loads(json.dumps(sts_pvc))
    sts_peer["metadata"]["name"] = "data-web-0"
    sts_peer["spec"]["resources"]["requests"]["storage"] = "20Gi"
    sts = {"metadata": {"name": "web", "namespace": "db"},
           "spec": {"selector": {}, "serviceName": "web", "template": {},
                    "volumeClaimTemplates": [{"metadata": {"name": "data"}}]}}
    klass = {"metadata": {"name": "fast"}, "provisioner": "ebs.csi.aws.com",
             "allowVolumeExpansion": True}
    sts_review = json.loads(json.dumps(review))
    sts_review["request"]["object"] = sts_pvc
    # The same claim edited (an UPDATE is never sized), and one restored from a snapshot of a
    # grown volume (sized from the snapshot's restoreSize, as tests/kube_restore*.rs make them).
    update = json.loads(json.dumps(review))
    update["request"]["operation"] = "UPDATE"
    update["request"]["oldObject"] = pvc
    restore = json.loads(json.dumps(review))
    restore["request"]["object"]["spec"]["dataSource"] = {
        "apiGroup": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot", "name": "snap-1"}
    snapshot = {"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot",
                "metadata": {"name": "snap-1", "namespace": "db"},
                "status": {"readyToUse": True, "restoreSize": "64Gi"}}
    central = {"policy.yaml": "limit: 1Ti\n"}
    for name, r, members, read in [("cnpg", review, [peer], None),
                                   ("statefulset", sts_review, [sts_peer], None),
                                   ("update", update, [peer], None),
                                   ("restore", restore, [], snapshot)]:
        sections = [r, members, [sts], klass, central] + ([read] if read else [])
        seed("admission", b"\0".join(json.dumps(x).encode() for x in sections), name)
    # A claim that only its Namespace opts in (no data source: that section is empty).
    bare = json.loads(json.dumps(review))
    bare["request"]["object"]["metadata"].pop("annotations", None)
    namespace = {"metadata": {"name": "db", "annotations": {"headroom.dev/enabled": "true",
                                                            "headroom.dev/limit": "1Ti"}}}
    sections = [json.dumps(x).encode() for x in [bare, [peer], [sts], klass, {}]]
    seed("admission", b"\0".join(sections + [b"", json.dumps(namespace).encode()]), "namespace")


if __name__ == "__main__":
    shutil.rmtree(OUT, ignore_errors=True)
    text_seeds()
    kubelet_seeds()
    if os.environ.get("HEADROOM_FUZZ_CAPTURE"):
        real_node_seeds(os.environ["HEADROOM_FUZZ_CAPTURE"])
    pg_seeds()
