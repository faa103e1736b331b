//! SIGTERM/SIGINT: the first signal stops new actions and lets what is in flight finish (bounded
//! by `--shutdown-grace`); a second one exits at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;

#[derive(Clone)]
pub struct Shutdown {
    stopping: Arc<AtomicBool>,
    rx: watch::Receiver<bool>,
}

impl Shutdown {
    /// Installs the signal handlers; fails only if the runtime cannot register them.
    pub fn install() -> std::io::Result<Shutdown> {
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        let stopping = Arc::new(AtomicBool::new(false));
        let (tx, rx) = watch::channel(false);
        let flag = stopping.clone();
        tokio::spawn(async move {
            tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
            tracing::info!("signal received: finishing what is in flight, starting nothing new");
            flag.store(true, Ordering::SeqCst);
            let _ = tx.send(true);
            tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
            tracing::warn!("second signal: exiting at once");
            std::process::exit(130);
        });
        Ok(Shutdown { stopping, rx })
    }

    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    /// Resolves once the first signal has arrived.
    pub async fn wait(&self) {
        let mut rx = self.rx.clone();
        let _ = rx.wait_for(|stopping| *stopping).await;
    }
}
