//! The byte streams of a route request: the client's socket with its already-read head put
//! back in front ([`Prefixed`]), the request body counted and capped on its way up
//! ([`Capped`]), and the response body counted and redacted on its way down ([`RouteBody`]).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::task::AbortHandle;

use crate::redact::Redactor;

/// A body error: what hyper reports.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What one route request moved, each way, and whether its body broke the cap.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) up: AtomicU64,
    pub(crate) down: AtomicU64,
    pub(crate) over_cap: AtomicBool,
    /// The upstream's body failed part way.
    pub(crate) broken: AtomicBool,
}

/// A client stream whose first bytes were already read: they are read again first.
pub(crate) struct Prefixed<C> {
    prefix: Vec<u8>,
    at: usize,
    inner: C,
}

impl<C> Prefixed<C> {
    pub(crate) fn new(prefix: Vec<u8>, inner: C) -> Prefixed<C> {
        Prefixed {
            prefix,
            at: 0,
            inner,
        }
    }
}

impl<C: AsyncRead + Unpin> AsyncRead for Prefixed<C> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.at < this.prefix.len() {
            let n = buf.remaining().min(this.prefix.len() - this.at);
            buf.put_slice(&this.prefix[this.at..this.at + n]);
            this.at += n;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<C: AsyncWrite + Unpin> AsyncWrite for Prefixed<C> {
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

/// The client's request body on its way up: counted, refused past `max` bytes, trailers
/// dropped.
pub(crate) struct Capped {
    pub(crate) inner: Incoming,
    pub(crate) max: u64,
    pub(crate) counters: Arc<Counters>,
}

impl Body for Capped {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        loop {
            let frame = match ready!(Pin::new(&mut self.inner).poll_frame(cx)) {
                None => return Poll::Ready(None),
                Some(Err(e)) => return Poll::Ready(Some(Err(e.into()))),
                Some(Ok(frame)) => frame,
            };
            let Ok(data) = frame.into_data() else {
                continue;
            };
            let len = data.len() as u64;
            let total = self.counters.up.fetch_add(len, Ordering::Relaxed) + len;
            if total > self.max {
                self.counters.over_cap.store(true, Ordering::Relaxed);
                let message = format!(
                    "the request body exceeds the route's cap of {} bytes",
                    self.max
                );
                return Poll::Ready(Some(Err(message.into())));
            }
            return Poll::Ready(Some(Ok(Frame::data(data))));
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A response body to the client: a refusal's text, or the upstream's body redacted as it
/// streams. Dropping it (the client went away, or it ended) stops the upstream connection.
pub(crate) enum RouteBody {
    Full(Option<Bytes>),
    Upstream(Box<Streaming>),
}

/// The upstream's body, its redactor, and the connection task it depends on.
pub(crate) struct Streaming {
    pub(crate) inner: Incoming,
    pub(crate) redactor: Redactor,
    pub(crate) done: bool,
    pub(crate) counters: Arc<Counters>,
    pub(crate) driver: AbortHandle,
}

impl Drop for Streaming {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

impl Streaming {
    fn send(&self, bytes: Vec<u8>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.counters
            .down
            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        Poll::Ready(Some(Ok(Frame::data(Bytes::from(bytes)))))
    }
}

impl Body for RouteBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let streaming = match self.get_mut() {
            RouteBody::Full(bytes) => return Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            RouteBody::Upstream(streaming) => streaming,
        };
        loop {
            if streaming.done {
                return Poll::Ready(None);
            }
            match ready!(Pin::new(&mut streaming.inner).poll_frame(cx)) {
                Some(Ok(frame)) => {
                    // Trailers are dropped: they could carry what redaction never saw.
                    let Ok(data) = frame.into_data() else {
                        continue;
                    };
                    let out = streaming.redactor.push(&data);
                    if !out.is_empty() {
                        return streaming.send(out);
                    }
                }
                Some(Err(e)) => {
                    streaming.done = true;
                    streaming.counters.broken.store(true, Ordering::Relaxed);
                    return Poll::Ready(Some(Err(e.into())));
                }
                None => {
                    streaming.done = true;
                    let out = streaming.redactor.finish();
                    if !out.is_empty() {
                        return streaming.send(out);
                    }
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            RouteBody::Full(bytes) => bytes.is_none(),
            RouteBody::Upstream(streaming) => streaming.done,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            RouteBody::Full(Some(bytes)) => SizeHint::with_exact(bytes.len() as u64),
            RouteBody::Full(None) => SizeHint::with_exact(0),
            RouteBody::Upstream(_) => SizeHint::default(),
        }
    }
}
