//! Per-stream state (PROTOCOL.md §4): send buffer and credit, receive buffer
//! and window, the binding of each direction to a connection.

use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};

use crate::error::ErrorCode;
use crate::frame::Kind;
use crate::session::credit::Credit;
use crate::session::ConnId;

/// Capacity of a receive chunk that collects small payloads (see [`Stream::push_recv`]).
pub const RECV_CHUNK: usize = 4096;
/// Chunk slots a drained buffer queue keeps (see [`Stream::take_recv`]); a queue that grew
/// for a large window gives the rest back.
pub const KEEP_SLOTS: usize = 8;

/// One stream as the session tracks it.
#[derive(Debug)]
pub(crate) struct Stream {
    /// What the stream carries.
    pub kind: Kind,
    /// `Some(target)` until our OPEN has been emitted (locally opened streams only).
    pub open_target: Option<String>,
    /// Connection our direction is bound to; set once, when its first bytes are
    /// ready to send, and never changed (PROTOCOL.md §5.1).
    pub send_conn: Option<ConnId>,
    /// Connection the peer's direction arrives on; set by its first frame and
    /// never changed.
    pub recv_conn: Option<ConnId>,
    /// Bytes written by the application, not yet framed. Invariant:
    /// `send_buf_len <= send.available()` (the application may only write within credit).
    pub send_buf: VecDeque<Bytes>,
    /// Sum of `send_buf` lengths.
    pub send_buf_len: u64,
    /// Credit the peer granted that we have not used yet.
    pub send: Credit,
    /// The application finished our direction; FIN goes after `send_buf`.
    pub fin_queued: bool,
    /// Our FIN has been framed.
    pub fin_sent: bool,
    /// Bytes received, not yet read by the application. Invariant:
    /// `recv_buf_len + recv.available() + unreturned == recv.window()` while the peer's
    /// direction is open.
    /// Small payloads are appended to the last chunk (see [`Stream::push_recv`]).
    pub recv_buf: VecDeque<BytesMut>,
    /// Sum of `recv_buf` lengths.
    pub recv_buf_len: u64,
    /// Credit we granted the peer for its direction.
    pub recv: Credit,
    /// The peer's FIN arrived (it is delivered after `recv_buf`).
    pub fin_received: bool,
    /// Bytes of the peer's direction received so far.
    pub bytes_received: u64,
    /// Bytes of our direction framed so far.
    pub bytes_sent: u64,
    /// Set once: the stream was reset (code, retryable).
    pub reset: Option<(ErrorCode, bool)>,
    /// The application gave up its handle.
    pub released: bool,
    /// Queued in the send queue of `send_conn`.
    pub in_sendq: bool,
    /// Bytes of this stream currently counted in `send_conn`'s queued total.
    pub accounted: u64,
    /// The connections' stream counts no longer include this stream.
    pub unbound: bool,
    /// Released after finishing our direction but before both ended: send
    /// RESET(CANCEL) right behind our FIN, on the same connection, so the peer
    /// still receives every byte we wrote (PROTOCOL.md §4.3).
    pub cancel_after_fin: bool,
    /// Where the stream ranks among the interactive directions of its lane: when the page it
    /// belongs to began (the opener's clock minus the page age it was opened with; on the
    /// remote, the OPEN's arrival minus the age it carried, at most
    /// [`crate::policy::MAX_PAGE_AGE`]). Older ranks are served first, ties in stream order.
    pub rank: Option<std::time::Instant>,
}

impl Stream {
    /// Whether our direction is still interactive: it has sent less than
    /// [`crate::policy::BULK_BYTES`] (least attained service).
    pub(crate) fn interactive(&self) -> bool {
        self.tier() != crate::policy::Tier::Bulk
    }

    /// Where our direction stands in its lane's send order ([`crate::policy::Tier`]).
    pub(crate) fn tier(&self) -> crate::policy::Tier {
        crate::policy::Tier::of(self.bytes_sent)
    }

    pub fn new(kind: Kind, send_credit: u64, recv: Credit) -> Self {
        Stream {
            kind,
            open_target: None,
            send_conn: None,
            recv_conn: None,
            send_buf: VecDeque::new(),
            send_buf_len: 0,
            send: Credit::new(send_credit),
            fin_queued: false,
            fin_sent: false,
            recv_buf: VecDeque::new(),
            recv_buf_len: 0,
            recv,
            fin_received: false,
            bytes_received: 0,
            bytes_sent: 0,
            reset: None,
            released: false,
            in_sendq: false,
            accounted: 0,
            unbound: false,
            cancel_after_fin: false,
            rank: None,
        }
    }

    /// Bytes that can be framed right now (buffered and within credit).
    pub fn sendable(&self) -> u64 {
        if self.reset.is_some() {
            0
        } else {
            self.send_buf_len.min(self.send.available())
        }
    }

    /// Whether the send path has a frame to emit.
    pub fn has_send_work(&self) -> bool {
        self.reset.is_none()
            && (self.open_target.is_some()
                || self.sendable() > 0
                || (self.fin_queued && !self.fin_sent && self.send_buf_len == 0))
    }

    /// How many more bytes the application may write now.
    pub fn send_capacity(&self) -> u64 {
        if self.reset.is_some() || self.fin_queued {
            0
        } else {
            self.send.available().saturating_sub(self.send_buf_len)
        }
    }

    /// Removes up to `n` bytes from the front of the send buffer.
    pub fn take_send(&mut self, n: usize) -> Bytes {
        let n = n.min(self.send_buf_len as usize);
        self.send_buf_len -= n as u64;
        match self.send_buf.front_mut() {
            Some(front) if front.len() >= n => {
                let out = front.split_to(n);
                if front.is_empty() {
                    self.send_buf.pop_front();
                }
                out
            }
            _ => {
                let mut out = BytesMut::with_capacity(n);
                while out.len() < n {
                    let Some(front) = self.send_buf.front_mut() else {
                        break;
                    };
                    let k = (n - out.len()).min(front.len());
                    out.extend_from_slice(&front.split_to(k));
                    if front.is_empty() {
                        self.send_buf.pop_front();
                    }
                }
                out.freeze()
            }
        }
    }

    /// Appends received bytes. A payload smaller than [`RECV_CHUNK`] goes into the last chunk
    /// while it has room (a new chunk of that capacity otherwise), so a peer sending many tiny
    /// frames to a stalled stream holds about the stream's window in memory, not one
    /// allocation per frame. Larger payloads are copied into a chunk of their own.
    pub fn push_recv(&mut self, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        if data.len() < RECV_CHUNK {
            if let Some(tail) = self.recv_buf.back_mut() {
                if tail.capacity() - tail.len() >= data.len() {
                    tail.extend_from_slice(data);
                    self.recv_buf_len += data.len() as u64;
                    return;
                }
            }
            let mut chunk = BytesMut::with_capacity(RECV_CHUNK);
            chunk.extend_from_slice(data);
            self.recv_buf.push_back(chunk);
        } else {
            self.recv_buf.push_back(BytesMut::from(data));
        }
        self.recv_buf_len += data.len() as u64;
    }

    /// Copies up to `buf.len()` received bytes out; returns how many.
    pub fn take_recv(&mut self, buf: &mut [u8]) -> usize {
        let mut n = 0;
        while n < buf.len() {
            let Some(front) = self.recv_buf.front_mut() else {
                break;
            };
            let k = (buf.len() - n).min(front.len());
            buf[n..n + k].copy_from_slice(&front[..k]);
            let _ = front.split_to(k);
            if front.is_empty() {
                self.recv_buf.pop_front();
            }
            n += k;
        }
        self.recv_buf_len -= n as u64;
        if self.recv_buf.is_empty() {
            // Chunks are dropped as they drain; the queue's own slots go too once it is empty,
            // so a stream that once buffered a large window holds nothing while idle.
            self.recv_buf.shrink_to(KEEP_SLOTS);
        }
        n
    }

    /// Memory the receive buffer holds: chunk capacities plus the queue's slots.
    pub fn recv_memory(&self) -> usize {
        self.recv_buf.iter().map(|c| c.capacity()).sum::<usize>()
            + self.recv_buf.capacity() * std::mem::size_of::<BytesMut>()
    }

    /// Drops both buffers and their storage (a reset stream keeps nothing).
    pub fn free_buffers(&mut self, recv: bool) {
        self.send_buf = VecDeque::new();
        self.send_buf_len = 0;
        if recv {
            self.recv_buf = VecDeque::new();
            self.recv_buf_len = 0;
        }
    }

    /// Both directions ended cleanly from the application's point of view.
    pub fn cleanly_done(&self) -> bool {
        self.reset.is_none() && self.fin_queued && self.fin_received && self.recv_buf_len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn take_send_splits_and_joins_chunks() {
        let mut s = Stream::new(Kind::Tunnel, 100, Credit::new(100));
        for c in [&b"abc"[..], b"defg"] {
            s.send_buf.push_back(Bytes::copy_from_slice(c));
            s.send_buf_len += c.len() as u64;
        }
        assert_eq!(&s.take_send(2)[..], b"ab");
        assert_eq!(&s.take_send(3)[..], b"cde");
        assert_eq!(&s.take_send(10)[..], b"fg");
        assert_eq!(s.send_buf_len, 0);
        assert!(s.send_buf.is_empty());
    }

    #[test]
    fn tiny_payloads_share_chunks() {
        let mut s = Stream::new(Kind::Http, 0, Credit::new(100));
        for i in 0..10_000u32 {
            s.push_recv(&[i as u8]);
        }
        assert_eq!(s.recv_buf_len, 10_000);
        assert!(
            s.recv_buf.len() <= 10_000 / RECV_CHUNK + 1,
            "{} chunks",
            s.recv_buf.len()
        );
        let held: usize = s.recv_buf.iter().map(|c| c.capacity()).sum();
        assert!(held <= 10_000 + RECV_CHUNK, "{held} bytes held for 10000");
        s.push_recv(&[7u8; RECV_CHUNK]);
        let mut out = vec![0u8; 20_000];
        assert_eq!(s.take_recv(&mut out), 10_000 + RECV_CHUNK);
        assert!(out[..10_000].iter().enumerate().all(|(i, &b)| b == i as u8));
        assert!(out[10_000..10_000 + RECV_CHUNK].iter().all(|&b| b == 7));
        assert!(s.recv_buf.is_empty());
    }

    #[test]
    fn a_drained_buffer_gives_its_storage_back() {
        let mut s = Stream::new(Kind::Http, 0, Credit::new(1 << 20));
        for _ in 0..64 {
            s.push_recv(&[1u8; 16 * 1024]);
        }
        assert!(s.recv_memory() >= 1 << 20);
        let mut out = vec![0u8; 100_000];
        while s.take_recv(&mut out) > 0 {}
        assert_eq!(s.recv_buf_len, 0);
        assert!(
            s.recv_memory() <= KEEP_SLOTS * std::mem::size_of::<BytesMut>(),
            "{} bytes held by a drained buffer",
            s.recv_memory()
        );
        s.push_recv(&[1u8; 100]);
        s.free_buffers(true);
        assert_eq!((s.recv_memory(), s.recv_buf_len), (0, 0));
    }

    #[test]
    fn take_recv_copies_across_chunks() {
        let mut s = Stream::new(Kind::Http, 0, Credit::new(100));
        s.push_recv(b"hel");
        s.recv_buf.push_back(BytesMut::from(&b"lo"[..]));
        s.recv_buf_len += 2;
        let mut b = [0u8; 4];
        assert_eq!(s.take_recv(&mut b), 4);
        assert_eq!(&b, b"hell");
        assert_eq!(s.take_recv(&mut b), 1);
        assert_eq!(b[0], b'o');
        assert_eq!(s.recv_buf_len, 0);
    }
}
