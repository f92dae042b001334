//! Line framing: splits the byte stream into lines, and turns a line over the limit into a
//! single [`Frame::TooLong`] (discarding it up to its newline) so the connection stays usable.

use bytes::{Buf, BytesMut};
use tokio_util::codec::Decoder;

/// One unit of input.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame {
    /// A line without its `\n` (and without a trailing `\r`).
    Line(BytesMut),
    /// A line longer than the limit, already discarded.
    TooLong,
}

pub struct LineCodec {
    max_line_bytes: usize,
    /// Where to resume looking for `\n` in the buffer.
    searched: usize,
    /// Inside an over-long line, dropping bytes until its newline.
    discarding: bool,
    /// Report an over-long line as soon as it passes the limit, not at its newline (a
    /// connection that is closed on the first one need not wait for the rest).
    eager: bool,
    /// The over-long line being discarded was already reported.
    reported: bool,
}

impl LineCodec {
    pub fn new(max_line_bytes: usize) -> LineCodec {
        LineCodec {
            max_line_bytes,
            searched: 0,
            discarding: false,
            eager: false,
            reported: false,
        }
    }

    /// A codec whose over-long lines are reported as soon as they pass the limit.
    pub fn eager(max_line_bytes: usize) -> LineCodec {
        LineCodec {
            eager: true,
            ..LineCodec::new(max_line_bytes)
        }
    }

    /// The longest line accepted now, in bytes.
    pub fn max_line_bytes(&self) -> usize {
        self.max_line_bytes
    }

    /// Moves the limit (a connection that authenticated gets the full one) and reports
    /// over-long lines at their newline again.
    pub fn set_limit(&mut self, max_line_bytes: usize) {
        self.max_line_bytes = max_line_bytes;
        self.eager = false;
    }
}

impl Decoder for LineCodec {
    type Item = Frame;
    type Error = std::io::Error;

    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, std::io::Error> {
        if self.discarding {
            return match memchr::memchr(b'\n', buf) {
                Some(pos) => {
                    buf.advance(pos + 1);
                    self.discarding = false;
                    if std::mem::take(&mut self.reported) {
                        return self.decode(buf);
                    }
                    Ok(Some(Frame::TooLong))
                }
                None => {
                    buf.clear();
                    Ok(None)
                }
            };
        }
        match memchr::memchr(b'\n', &buf[self.searched..]) {
            Some(offset) => {
                let pos = self.searched + offset;
                self.searched = 0;
                if pos > self.max_line_bytes {
                    buf.advance(pos + 1);
                    return Ok(Some(Frame::TooLong));
                }
                let mut line = buf.split_to(pos + 1);
                line.truncate(pos);
                if line.last() == Some(&b'\r') {
                    line.truncate(pos - 1);
                }
                Ok(Some(Frame::Line(line)))
            }
            None if buf.len() > self.max_line_bytes => {
                buf.clear();
                self.searched = 0;
                self.discarding = true;
                self.reported = self.eager;
                Ok(self.eager.then_some(Frame::TooLong))
            }
            None => {
                self.searched = buf.len();
                Ok(None)
            }
        }
    }

    fn decode_eof(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, std::io::Error> {
        if let Some(frame) = self.decode(buf)? {
            return Ok(Some(frame));
        }
        self.searched = 0;
        if self.discarding {
            self.discarding = false;
            if !std::mem::take(&mut self.reported) {
                return Ok(Some(Frame::TooLong));
            }
        }
        if buf.is_empty() {
            return Ok(None);
        }
        // A last line without a newline still counts.
        Ok(Some(Frame::Line(buf.split())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(codec: &mut LineCodec, input: &[u8]) -> Vec<Frame> {
        let mut buf = BytesMut::from(input);
        let mut out = Vec::new();
        while let Some(f) = codec.decode(&mut buf).unwrap() {
            out.push(f);
        }
        out
    }

    #[test]
    fn splits_lines_and_strips_crlf() {
        let mut codec = LineCodec::new(100);
        assert_eq!(
            frames(&mut codec, b"a\nbc\r\n\n"),
            vec![
                Frame::Line("a".into()),
                Frame::Line("bc".into()),
                Frame::Line("".into())
            ]
        );
    }

    #[test]
    fn an_over_long_line_is_one_frame_and_what_follows_survives() {
        let mut codec = LineCodec::new(4);
        let mut buf = BytesMut::from(&b"0123456789"[..]);
        assert_eq!(codec.decode(&mut buf).unwrap(), None);
        buf.extend_from_slice(b"abc\nok\n");
        assert_eq!(codec.decode(&mut buf).unwrap(), Some(Frame::TooLong));
        assert_eq!(
            codec.decode(&mut buf).unwrap(),
            Some(Frame::Line("ok".into()))
        );
        assert_eq!(
            frames(&mut codec, b"12345\nxy\n"),
            vec![Frame::TooLong, Frame::Line("xy".into())]
        );
    }

    #[test]
    fn an_eager_codec_reports_an_over_long_line_before_its_end() {
        let mut codec = LineCodec::eager(4);
        let mut buf = BytesMut::from(&b"0123456789"[..]);
        assert_eq!(codec.decode(&mut buf).unwrap(), Some(Frame::TooLong));
        assert!(buf.is_empty(), "nothing of it is kept");
        buf.extend_from_slice(b"abc\nok\n");
        assert_eq!(
            codec.decode(&mut buf).unwrap(),
            Some(Frame::Line("ok".into())),
            "reported once"
        );
    }
}
