//! A gRPC-aware fault proxy in front of a real etcd. It forwards every call over one HTTP/2
//! connection and, while switched on, answers `KV/Txn` the way etcd throttles: gRPC
//! `ResourceExhausted`, "etcdserver: too many requests". A real server sends that only when
//! its applied index lags its committed index by more than 5,000 entries, which a test
//! cannot provoke on demand; everything else the agent sees is the real server's.

use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Empty};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use tokio::net::{TcpListener, TcpStream};

type Body = BoxBody<Bytes, hyper::Error>;

/// The proxy; dropped, it stops accepting.
pub struct Throttle {
    /// Where the agent connects instead of the target.
    pub url: String,
    on: Arc<AtomicBool>,
    refused: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Throttle {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A tokio executor for hyper's HTTP/2 tasks.
#[derive(Clone)]
struct Exec;

impl<F> hyper::rt::Executor<F> for Exec
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn execute(&self, fut: F) {
        tokio::spawn(fut);
    }
}

impl Throttle {
    /// Starts a proxy for the etcd at `upstream` (`host:port`), throttling off.
    pub async fn start(upstream: &str) -> Throttle {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let on = Arc::new(AtomicBool::new(false));
        let refused = Arc::new(AtomicU64::new(0));
        let (upstream, on2, refused2) = (upstream.to_string(), on.clone(), refused.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((conn, _)) = listener.accept().await else {
                    return;
                };
                let up = TcpStream::connect(&upstream).await.unwrap();
                let (send, upconn) = hyper::client::conn::http2::handshake(Exec, TokioIo::new(up))
                    .await
                    .unwrap();
                tokio::spawn(upconn);
                let (on, refused) = (on2.clone(), refused2.clone());
                let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let mut send = send.clone();
                    let (on, refused) = (on.clone(), refused.clone());
                    async move {
                        if on.load(Ordering::SeqCst) && req.uri().path() == "/etcdserverpb.KV/Txn" {
                            refused.fetch_add(1, Ordering::SeqCst);
                            return Ok::<_, Infallible>(throttled());
                        }
                        match send.send_request(req).await {
                            Ok(r) => Ok(r.map(BodyExt::boxed)),
                            Err(e) => Ok(unavailable(&e.to_string())),
                        }
                    }
                });
                tokio::spawn(async move {
                    let _ = hyper::server::conn::http2::Builder::new(Exec)
                        .serve_connection(TokioIo::new(conn), service)
                        .await;
                });
            }
        });
        Throttle {
            url,
            on,
            refused,
            task,
        }
    }

    /// Throttles every Txn from now on (`true`) or forwards them again.
    pub fn set(&self, on: bool) {
        self.on.store(on, Ordering::SeqCst);
    }

    /// How many Txns were refused.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::SeqCst)
    }
}

fn empty() -> Body {
    Empty::<Bytes>::new()
        .map_err(|never| match never {})
        .boxed()
}

/// A trailers-only gRPC answer: the status travels in the headers.
fn grpc_error(code: u32, message: &str) -> Response<Body> {
    Response::builder()
        .status(200)
        .header("content-type", "application/grpc")
        .header("grpc-status", code.to_string())
        .header("grpc-message", message)
        .body(empty())
        .unwrap()
}

fn throttled() -> Response<Body> {
    // codes.ResourceExhausted, etcd's rpctypes.ErrGRPCTooManyRequests.
    grpc_error(8, "etcdserver: too many requests")
}

fn unavailable(why: &str) -> Response<Body> {
    grpc_error(
        14,
        &format!("throttle proxy: {why}").replace(['\r', '\n'], " "),
    )
}
