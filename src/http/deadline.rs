//! A deadline on a request's body: the whole body must arrive within `http.body_timeout` of
//! the request's head. The server's own timers cover the head (`client_request_timeout`) and
//! idle keep-alive connections, not a body being read: without this a client that sends its
//! head and part of a body, then nothing, holds a connection (and a handler) for ever.
//!
//! Invariant: a request whose body missed the deadline is answered 408 and its connection
//! closed, whatever the handler made of the failed read.

use std::cell::RefCell;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::Duration;

use actix_web::body::{BodySize, BoxBody, MessageBody};
use actix_web::dev::{Payload, ServiceRequest, ServiceResponse};
use actix_web::error::PayloadError;
use actix_web::http::StatusCode;
use actix_web::middleware::Next;
use actix_web::web::{self, Bytes};
use actix_web::{ResponseError as _, http::ConnectionType};
use futures_core::Stream;

use super::error::ApiError;

/// How long a request's body may take to arrive (app data; [`DEFAULT`] without it).
#[derive(Debug, Clone, Copy)]
pub struct BodyTimeout(pub Duration);

/// The deadline of an app not given a [`BodyTimeout`] (`http.body_timeout`'s default).
pub const DEFAULT: Duration = Duration::from_secs(30);

/// The middleware: see the module doc.
pub async fn guard(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    let limit = req
        .app_data::<web::Data<BodyTimeout>>()
        .map_or(DEFAULT, |t| t.0);
    let expired: Unread = Rc::default();
    let (head, body) = req.into_parts();
    let body = match body {
        Payload::None => Payload::None,
        body => {
            let timed: Pin<Box<dyn Stream<Item = Result<Bytes, PayloadError>>>> =
                Box::pin(Deadline {
                    body,
                    timer: Box::pin(actix_rt::time::sleep(limit)),
                    expired: expired.clone(),
                    limit,
                });
            Payload::from(timed)
        }
    };
    let req = ServiceRequest::from_parts(head, body);
    let res = next.call(req).await?.map_into_boxed_body();
    let Some(unread) = expired.borrow_mut().take() else {
        return Ok(res);
    };
    let (req, _) = res.into_parts();
    let e = ApiError::new(
        StatusCode::REQUEST_TIMEOUT,
        None,
        format!(
            "the request's body did not arrive within {} ms (http.body_timeout)",
            limit.as_millis()
        ),
    );
    let mut refused = e.error_response().map_body(|_, body| {
        BoxBody::new(HoldUntilSent {
            body,
            _unread: unread,
        })
    });
    refused
        .head_mut()
        .set_connection_type(ConnectionType::Close);
    Ok(ServiceResponse::new(req, refused))
}

/// Where a body that missed its deadline is kept, unread, for the response to hold.
type Unread = Rc<RefCell<Option<Payload>>>;

/// A body that fails with a timeout once its deadline passes before its end; it then hands
/// the rest of the request's body to the middleware ([`Unread`]).
struct Deadline {
    body: Payload,
    timer: Pin<Box<actix_rt::time::Sleep>>,
    expired: Unread,
    limit: Duration,
}

/// A response body that keeps the request's unread body alive until the response is sent. The
/// server closes a connection whose request body is unread when it has answered; one whose
/// body was dropped it drains instead, for as long as the client keeps it open (a chunked
/// body that stalls: for ever).
struct HoldUntilSent {
    body: BoxBody,
    _unread: Payload,
}

impl MessageBody for HoldUntilSent {
    type Error = Box<dyn std::error::Error>;

    fn size(&self) -> BodySize {
        self.body.size()
    }

    fn poll_next(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Bytes, Self::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_next(cx)
    }
}

impl Stream for Deadline {
    type Item = Result<Bytes, PayloadError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.expired.borrow().is_some() {
            return Poll::Ready(Some(Err(this.timed_out())));
        }
        if let Poll::Ready(item) = Pin::new(&mut this.body).poll_next(cx) {
            return Poll::Ready(item);
        }
        if this.timer.as_mut().poll(cx).is_ready() {
            let rest = std::mem::replace(&mut this.body, Payload::None);
            if !matches!(rest, Payload::None) {
                *this.expired.borrow_mut() = Some(rest);
            }
            return Poll::Ready(Some(Err(this.timed_out())));
        }
        Poll::Pending
    }
}

impl Deadline {
    fn timed_out(&self) -> PayloadError {
        PayloadError::Io(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!(
                "the body did not arrive within {} ms",
                self.limit.as_millis()
            ),
        ))
    }
}
