//! A hostile "PostgreSQL": answers the startup message with a cleartext or MD5 password request
//! and records every byte the client sends after it (a password message would be there).
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[derive(Debug, Clone, Copy)]
pub enum Ask {
    Cleartext,
    Md5,
}

/// One connection: the address it reached, and what the client sent after the request.
#[derive(Debug, Clone)]
pub struct Conn {
    pub local: SocketAddr,
    pub after_request: Vec<u8>,
}

pub struct FakePg {
    pub port: u16,
    log: Arc<Mutex<Vec<Conn>>>,
}

impl FakePg {
    /// Listens on each loopback address in `ips` (a pod IP each), on one port.
    pub async fn start(ips: &[&str], ask: Ask) -> FakePg {
        let first = TcpListener::bind((ips[0], 0)).await.expect("bind fake pg");
        let port = first.local_addr().expect("addr").port();
        let mut listeners = vec![first];
        for ip in &ips[1..] {
            listeners.push(TcpListener::bind((*ip, port)).await.expect("bind fake pg"));
        }
        let log = Arc::new(Mutex::new(Vec::new()));
        for l in listeners {
            let log = log.clone();
            tokio::spawn(async move {
                while let Ok((s, _)) = l.accept().await {
                    let log = log.clone();
                    tokio::spawn(async move {
                        if let Some(conn) = serve(s, ask).await {
                            log.lock().unwrap_or_else(|e| e.into_inner()).push(conn);
                        }
                    });
                }
            });
        }
        FakePg { port, log }
    }

    pub fn connections(&self) -> Vec<Conn> {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn connections_to(&self, ip: &str) -> usize {
        self.connections()
            .iter()
            .filter(|c| c.local.ip().to_string() == ip)
            .count()
    }
}

async fn read_startup(s: &mut TcpStream) -> Option<Vec<u8>> {
    let len = s.read_u32().await.ok()? as usize;
    let mut body = vec![0; len.checked_sub(4)?];
    s.read_exact(&mut body).await.ok()?;
    Some(body)
}

async fn serve(mut s: TcpStream, ask: Ask) -> Option<Conn> {
    let local = s.local_addr().ok()?;
    let mut startup = read_startup(&mut s).await?;
    // SSLRequest: no TLS here, go on in the clear.
    if startup.get(..4) == Some(&[0x04, 0xd2, 0x16, 0x2f]) {
        s.write_all(b"N").await.ok()?;
        startup = read_startup(&mut s).await?;
    }
    let _ = startup;
    let request: Vec<u8> = match ask {
        Ask::Cleartext => vec![b'R', 0, 0, 0, 8, 0, 0, 0, 3],
        Ask::Md5 => vec![b'R', 0, 0, 0, 12, 0, 0, 0, 5, 1, 2, 3, 4],
    };
    s.write_all(&request).await.ok()?;
    let mut after_request = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        match tokio::time::timeout(Duration::from_secs(3), s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => break,
            Ok(Ok(n)) => after_request.extend_from_slice(&buf[..n]),
        }
    }
    Some(Conn {
        local,
        after_request,
    })
}
