//! Writing a command's report to standard output. A reader that closes the pipe early
//! (`headroom status -A | head`) has all it wanted: that is not an error, and must not be the
//! panic `print!` makes of it.

use std::io::{ErrorKind, Write};

/// Writes `text` to stdout; a closed pipe ends the output quietly, other errors are returned.
/// One `write_all` of the whole report: stdout alone is line-buffered (a write(2) per line).
pub fn emit(text: impl AsRef<[u8]>) -> std::io::Result<()> {
    quiet_on_closed_pipe(std::io::stdout().lock(), text.as_ref())
}

fn quiet_on_closed_pipe(mut w: impl Write, text: &[u8]) -> std::io::Result<()> {
    match w.write_all(text).and_then(|()| w.flush()) {
        Err(e) if e.kind() == ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

/// A deadline from the status annotation (already rounded down to a step when written) in its
/// largest unit: `40m`, `12h`, `3d`; `<1m` under a minute.
pub fn within(seconds: u64) -> String {
    match seconds {
        0..60 => "<1m".into(),
        60..3_600 => format!("{}m", seconds / 60),
        3_600..86_400 => format!("{}h", seconds / 3_600),
        _ => format!("{}d", seconds / 86_400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Closed(ErrorKind);

    impl Write for Closed {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(self.0.into())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_closed_pipe_is_the_end_not_an_error() {
        assert!(quiet_on_closed_pipe(Closed(ErrorKind::BrokenPipe), b"x").is_ok());
        let full = quiet_on_closed_pipe(Closed(ErrorKind::StorageFull), b"x");
        assert_eq!(full.map_err(|e| e.kind()), Err(ErrorKind::StorageFull));
        let mut out = Vec::new();
        quiet_on_closed_pipe(&mut out, b"report\n").expect("written");
        assert_eq!(out, b"report\n");
    }
}
