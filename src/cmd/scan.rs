//! `headroom scan`: this host's filesystems, a kubelet root's PVC volumes, or given paths.

use std::io::Write;
use std::process::ExitCode;

use serde::Serialize;

use crate::cli::{Format, ScanArgs};
use crate::probe::{DEFAULT_DEADLINE, ProbeError, Prober, Volume, read_mountinfo};
use crate::quantity::human;

/// What can stop `headroom scan`: the probe's own errors, and the command's.
#[derive(Debug, thiserror::Error)]
pub enum ScanError {
    #[error(transparent)]
    Probe(#[from] ProbeError),
    #[error("scan: starting the async runtime: {0}")]
    Runtime(std::io::Error),
    #[error("cannot write scan output: {0}")]
    Output(#[from] std::io::Error),
    #[error("cannot encode scan output as JSON: {0}")]
    Json(#[from] serde_json::Error),
}

/// One JSON output object: the documented keys, then extras.
#[derive(Debug, Serialize)]
pub struct ScanRow {
    pub path: String,
    pub pv: Option<String>,
    pub driver: Option<String>,
    pub fs_type: Option<String>,
    pub device: Option<String>,
    pub capacity_bytes: Option<u64>,
    pub used_bytes: Option<u64>,
    pub available_bytes: Option<u64>,
    pub used_percent: Option<f64>,
    pub inodes_total: Option<u64>,
    pub inodes_used: Option<u64>,
    pub class: &'static str,
    pub shared_with: Vec<String>,
    pub shared: bool,
    pub inodes_free: Option<u64>,
    pub block_size: Option<u64>,
    pub mode: crate::probe::VolumeMode,
    pub mounted: bool,
    pub plugin: Option<String>,
    pub pod_uid: Option<String>,
    pub volume_handle: Option<String>,
    pub source: Option<String>,
    pub findings: Vec<String>,
}

impl From<&Volume> for ScanRow {
    fn from(v: &Volume) -> Self {
        let m = v.measurement;
        ScanRow {
            path: v.path.to_string_lossy().into_owned(),
            pv: v.pv.clone(),
            driver: v.driver.clone(),
            fs_type: v.fs_type.clone(),
            device: v.device.clone(),
            capacity_bytes: m.map(|m| m.capacity_bytes),
            used_bytes: m.map(|m| m.used_bytes),
            available_bytes: m.map(|m| m.available_bytes),
            used_percent: m.map(|m| (m.used_percent() * 100.0).round() / 100.0),
            inodes_total: m.map(|m| m.inodes_total),
            inodes_used: m.map(|m| m.inodes_used),
            class: v.class.as_str(),
            shared_with: v
                .shared_with
                .iter()
                .map(|p| p.to_string_lossy().into_owned())
                .collect(),
            shared: v.class.is_shared(),
            inodes_free: v.inodes_free,
            block_size: v.block_size,
            mode: v.mode,
            mounted: v.mounted,
            plugin: v.plugin.clone(),
            pod_uid: v.pod_uid.clone(),
            volume_handle: v.volume_handle.clone(),
            source: v.source.clone(),
            findings: v.findings.clone(),
        }
    }
}

pub fn run(args: &ScanArgs) -> Result<ExitCode, ScanError> {
    // The agent's bounded pass, in every form: a hung mount is reported not measured (after
    // the deadline) and the command returns; the runtime's blocking threads stuck in the kernel
    // are abandoned at exit.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(ScanError::Runtime)?;
    let vols = runtime.block_on(async {
        let root = args.kubelet_root.clone().unwrap_or_default();
        let prober = Prober::new(root, DEFAULT_DEADLINE);
        if args.kubelet_root.is_some() {
            return prober.probe().await;
        }
        let mounts = read_mountinfo()?;
        Ok(if args.paths.is_empty() {
            prober.probe_host(&mounts).await
        } else {
            prober.probe_paths(&args.paths, &mounts).await
        })
    })?;
    runtime.shutdown_background();
    // Rendered whole, then written at once (and a reader that leaves early is no error).
    let mut out = Vec::with_capacity(64 * 1024);
    match args.format {
        Format::Json => {
            let rows: Vec<ScanRow> = vols.iter().map(ScanRow::from).collect();
            serde_json::to_writer_pretty(&mut out, &rows)?;
            writeln!(out)?;
        }
        Format::Table => write_table(&mut out, &vols)?,
    }
    super::output::emit(&out)?;
    // Like `df PATH`: a named path that could not be measured fails the command.
    let failed = !args.paths.is_empty()
        && args.kubelet_root.is_none()
        && vols.iter().any(|v| v.measurement.is_none());
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

pub fn write_table<W: Write>(out: &mut W, vols: &[Volume]) -> std::io::Result<()> {
    writeln!(
        out,
        "{:<14} {:<8} {:<8} {:>9} {:>9} {:>9} {:>5} {:>5}  {:<24} PATH",
        "CLASS", "TYPE", "DEVICE", "SIZE", "USED", "AVAIL", "USE%", "IUSE%", "PV"
    )?;
    for v in vols {
        let (size, used, avail, pct, ipct) = match v.measurement {
            Some(m) => (
                human(m.capacity_bytes),
                human(m.used_bytes),
                human(m.available_bytes),
                format!("{:.0}%", m.used_percent().ceil()),
                format!("{:.0}%", m.inode_percent().ceil()),
            ),
            None => ("-".into(), "-".into(), "-".into(), "-".into(), "-".into()),
        };
        let kind = match v.mode {
            crate::probe::VolumeMode::Block => "block".to_owned(),
            crate::probe::VolumeMode::Filesystem => v.fs_type.clone().unwrap_or_else(|| "-".into()),
        };
        writeln!(
            out,
            "{:<14} {:<8} {:<8} {:>9} {:>9} {:>9} {:>5} {:>5}  {:<24} {}",
            v.class.as_str(),
            kind,
            v.device.as_deref().unwrap_or("-"),
            size,
            used,
            avail,
            pct,
            ipct,
            v.pv.as_deref().unwrap_or("-"),
            v.path.display()
        )?;
        for p in &v.shared_with {
            writeln!(out, "    shares its device with {}", p.display())?;
        }
        for f in &v.findings {
            writeln!(out, "    {f}")?;
        }
    }
    Ok(())
}
