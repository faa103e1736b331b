//! Refuses every password exchange but SCRAM before the client can answer it.
//!
//! tokio-postgres answers `AuthenticationCleartextPassword` with the password and
//! `AuthenticationMD5Password` with a hash that is as good as the password to whoever holds it;
//! it has no switch to refuse them (only `channel_binding=require`, which also refuses servers
//! without TLS). A pod that is not the server we meant to reach could ask for either, so this
//! stream sits under the protocol and watches the server's messages: an authentication request
//! other than SASL (SCRAM) ends the connection with an error before the client ever sees it.
//! Only the startup phase is parsed; after `AuthenticationOk` the bytes pass untouched.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Authentication request codes (protocol `R` message, first field).
const AUTH_OK: u32 = 0;
const AUTH_SASL: u32 = 10;
const AUTH_SASL_CONTINUE: u32 = 11;
const AUTH_SASL_FINAL: u32 = 12;

fn method_name(code: u32) -> &'static str {
    match code {
        2 => "Kerberos V5",
        3 => "cleartext password",
        5 => "MD5 password",
        7 => "GSSAPI",
        9 => "SSPI",
        _ => "an unknown method",
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// The one-byte answer to an SSLRequest: `S` means TLS follows (guarded inside it), `N`
    /// means the protocol continues in the clear here.
    SslReply,
    /// Reading a message header: tag and 4-byte length.
    Header { have: usize },
    /// Reading the first 4 body bytes of an `R` message: the request code.
    AuthCode { have: usize, left: usize },
    /// Skipping the rest of a message body.
    Skip { left: usize },
    /// Authenticated, or TLS took over: nothing more to check here.
    Pass,
}

pub struct Guarded<S> {
    inner: S,
    state: State,
    header: [u8; 5],
    code: [u8; 4],
}

impl<S> Guarded<S> {
    /// Guards a stream whose first byte from the server answers an SSLRequest.
    pub fn after_ssl_request(inner: S) -> Self {
        Self::with(inner, State::SslReply)
    }

    /// Guards a stream that starts with the server's first protocol message (no SSLRequest, or
    /// inside TLS).
    pub fn from_startup(inner: S) -> Self {
        Self::with(inner, State::Header { have: 0 })
    }

    fn with(inner: S, state: State) -> Self {
        Guarded {
            inner,
            state,
            header: [0; 5],
            code: [0; 4],
        }
    }

    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// Feeds bytes the server sent; an error means the client must not see them.
    fn inspect(&mut self, mut bytes: &[u8]) -> io::Result<()> {
        while !bytes.is_empty() {
            match self.state {
                State::Pass => return Ok(()),
                State::SslReply => {
                    self.state = match bytes[0] {
                        b'S' => State::Pass,
                        _ => State::Header { have: 0 },
                    };
                    bytes = &bytes[1..];
                }
                State::Header { have } => {
                    let n = (5 - have).min(bytes.len());
                    self.header[have..have + n].copy_from_slice(&bytes[..n]);
                    bytes = &bytes[n..];
                    if have + n < 5 {
                        self.state = State::Header { have: have + n };
                        continue;
                    }
                    let len = u32::from_be_bytes([
                        self.header[1],
                        self.header[2],
                        self.header[3],
                        self.header[4],
                    ]) as usize;
                    let body = len
                        .checked_sub(4)
                        .ok_or_else(|| refuse("a malformed message"))?;
                    self.state = match self.header[0] {
                        b'R' if body < 4 => return Err(refuse("a malformed request")),
                        b'R' => State::AuthCode {
                            have: 0,
                            left: body - 4,
                        },
                        _ if body == 0 => State::Header { have: 0 },
                        _ => State::Skip { left: body },
                    };
                }
                State::AuthCode { have, left } => {
                    let n = (4 - have).min(bytes.len());
                    self.code[have..have + n].copy_from_slice(&bytes[..n]);
                    bytes = &bytes[n..];
                    if have + n < 4 {
                        self.state = State::AuthCode {
                            have: have + n,
                            left,
                        };
                        continue;
                    }
                    self.state = match u32::from_be_bytes(self.code) {
                        // The rest of the stream after `AuthenticationOk` is ordinary traffic.
                        AUTH_OK => State::Pass,
                        AUTH_SASL | AUTH_SASL_CONTINUE | AUTH_SASL_FINAL if left == 0 => {
                            State::Header { have: 0 }
                        }
                        AUTH_SASL | AUTH_SASL_CONTINUE | AUTH_SASL_FINAL => State::Skip { left },
                        other => {
                            return Err(refuse(&format!(
                                "{} authentication (only SCRAM-SHA-256 is allowed)",
                                method_name(other)
                            )));
                        }
                    };
                }
                State::Skip { left } => {
                    let n = left.min(bytes.len());
                    bytes = &bytes[n..];
                    self.state = if n == left {
                        State::Header { have: 0 }
                    } else {
                        State::Skip { left: left - n }
                    };
                }
            }
        }
        Ok(())
    }
}

fn refuse(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!("the server asked for {what}: refused before sending any secret"),
    )
}

impl<S: AsyncRead + Unpin> AsyncRead for Guarded<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let fresh = buf.filled()[before..].to_vec();
                if let Err(e) = self.inspect(&fresh) {
                    // The refused request must not reach the client: drop what this read added.
                    buf.set_filled(before);
                    self.state = State::Pass;
                    return Poll::Ready(Err(e));
                }
                Poll::Ready(Ok(()))
            }
            other => other,
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Guarded<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(tag: u8, body: &[u8]) -> Vec<u8> {
        let mut m = vec![tag];
        m.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
        m.extend_from_slice(body);
        m
    }

    fn auth(code: u32, rest: &[u8]) -> Vec<u8> {
        let mut b = code.to_be_bytes().to_vec();
        b.extend_from_slice(rest);
        msg(b'R', &b)
    }

    /// Feeds `bytes` one at a time (the worst split) and returns the first refusal.
    fn feed(mut g: Guarded<()>, bytes: &[u8]) -> io::Result<()> {
        for b in bytes {
            g.inspect(std::slice::from_ref(b))?;
        }
        Ok(())
    }

    #[test]
    fn refuses_cleartext_md5_and_others_however_split() {
        for code in [2, 3, 5, 7, 9, 99] {
            let mut bytes = b"N".to_vec();
            bytes.extend(msg(b'N', b"notice"));
            bytes.extend(auth(code, &[1, 2, 3, 4]));
            let e = feed(Guarded::after_ssl_request(()), &bytes).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{code}");
            let whole = Guarded::from_startup(()).inspect(&bytes[1..]).unwrap_err();
            assert!(whole.to_string().contains("refused"), "{whole}");
        }
    }

    #[test]
    fn lets_scram_through_and_stops_parsing_after_ok() {
        let mut bytes = auth(AUTH_SASL, b"SCRAM-SHA-256\0\0");
        bytes.extend(auth(AUTH_SASL_CONTINUE, b"r=abc"));
        bytes.extend(auth(AUTH_SASL_FINAL, b"v=xyz"));
        bytes.extend(auth(AUTH_OK, b""));
        // After authentication anything goes, even bytes that look like a cleartext request.
        bytes.extend(auth(3, b""));
        feed(Guarded::from_startup(()), &bytes).unwrap();
        // TLS accepted: the guard inside the TLS stream does the checking.
        feed(Guarded::after_ssl_request(()), b"S\x16\x03\x01garbage").unwrap();
    }

    #[test]
    fn malformed_lengths_are_refused() {
        assert!(Guarded::from_startup(()).inspect(b"R\0\0\0\x02").is_err());
        assert!(Guarded::from_startup(()).inspect(b"R\0\0\0\x05x").is_err());
    }
}
