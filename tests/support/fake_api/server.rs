//! The HTTP server, on a thread and runtime of its own: a test that blocks its own thread
//! (waiting on a child process, a blocking syscall) never stalls the API its agent talks to.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use super::{Shared, handlers, lock};

/// How often open watches that asked for bookmarks get one.
const BOOKMARK_EVERY: Duration = Duration::from_secs(1);

pub struct Server {
    pub addr: SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    pub fn spawn(shared: Arc<Shared>) -> Server {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")
            .expect("bind 127.0.0.1:0 for the fake API server");
        listener
            .set_nonblocking(true)
            .expect("non-blocking listener");
        let addr = listener
            .local_addr()
            .expect("local address of the listener");
        let (shutdown, stop) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("fake-api".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("runtime for the fake API server");
                rt.block_on(async move {
                    let listener =
                        TcpListener::from_std(listener).expect("tokio listener for the fake API");
                    tokio::select! {
                        () = accept_loop(listener, shared.clone()) => {}
                        () = bookmarks(shared) => {}
                        _ = stop => {}
                    }
                });
                // Dropping the runtime here ends every connection task, open watches included.
            })
            .expect("spawn the fake API server thread");
        Server {
            addr,
            shutdown: Some(shutdown),
            thread: Some(thread),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(s) = self.shutdown.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let shared = shared.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| handlers::serve(shared.clone(), req));
            // A client hanging up mid-watch ends the connection with an error: nothing to do.
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

async fn bookmarks(shared: Arc<Shared>) {
    let mut every = tokio::time::interval(BOOKMARK_EVERY);
    loop {
        every.tick().await;
        lock(&shared.store).bookmark_all();
    }
}
