//! Changing a running stream without cutting its clients (the hubs it leaves for its new
//! version are in [`crate::output::hubs`]). While changed streams are swapped, requests
//! for their routes wait for the new versions instead of missing, and the old versions
//! stop only once the requests already handed to them (a producer's POST) are answered,
//! so that none is refused because its stream is stopping.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use http::StatusCode;
use tokio::sync::{watch, Notify};

use super::super::reply::error;
use crate::http::{HttpRequest, HttpResponse, Routes};

/// The state of the changes of one API's streams.
pub(super) struct Changes {
    /// True while changed streams are swapped for their new versions.
    changing: watch::Sender<bool>,
    /// Requests handed to a stream route and not answered yet (GETs, which may stay open
    /// and are served by a hub that outlives the change, are not counted).
    handed: Arc<Handed>,
}

#[derive(Default)]
struct Handed {
    count: AtomicUsize,
    none: Notify,
}

impl Handed {
    /// Counts a request until the returned guard is dropped.
    fn serve(self: &Arc<Self>) -> Served {
        self.count.fetch_add(1, Ordering::AcqRel);
        Served(self.clone())
    }
}

/// A request being served by a stream route: counted until dropped.
pub(super) struct Served(Arc<Handed>);

impl Drop for Served {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.none.notify_waiters();
        }
    }
}

impl Default for Changes {
    fn default() -> Self {
        Changes {
            changing: watch::Sender::new(false),
            handed: Arc::default(),
        }
    }
}

impl Changes {
    /// Counts a request about to be handed to a route, before the route is looked up:
    /// a change that takes the route down after the lookup then waits for its answer.
    pub(super) fn serve(&self) -> Served {
        self.handed.serve()
    }

    pub(super) fn is_changing(&self) -> bool {
        *self.changing.borrow()
    }

    /// Changed streams are being swapped: requests for their routes wait from now on.
    pub(super) fn begin(&self) {
        self.changing.send_replace(true);
    }

    /// Waits until the requests handed to routes before they came down are answered, at
    /// most `wait`.
    pub(super) async fn quiesce(&self, wait: Duration) {
        let _ = tokio::time::timeout(wait, async {
            loop {
                let none = self.handed.none.notified();
                tokio::pin!(none);
                none.as_mut().enable();
                if self.handed.count.load(Ordering::Acquire) == 0 {
                    return;
                }
                none.await;
            }
        })
        .await;
    }

    /// The swap is done: waiting requests go on to the new versions' routes.
    pub(super) fn end(&self) {
        self.changing.send_replace(false);
    }

    /// The handler of `path`, a route of a stream being changed: waits until the change is
    /// done (at most `wait`), then serves the request on the new version's route.
    pub(super) fn after(
        &self,
        routes: Arc<Routes>,
        path: String,
        wait: Duration,
    ) -> impl Fn(HttpRequest) -> BoxFuture<'static, HttpResponse> {
        let changing = self.changing.clone();
        let handed = self.handed.clone();
        move |req: HttpRequest| {
            let mut changing = changing.subscribe();
            let routes = routes.clone();
            let path = path.clone();
            let handed = handed.clone();
            async move {
                let done = tokio::time::timeout(wait, changing.wait_for(|on| !*on))
                    .await
                    .is_ok_and(|r| r.is_ok());
                let handler = routes.get(&path).filter(|_| done);
                match handler {
                    Some(handler) => {
                        let _served = handed.serve();
                        handler.call(req).await
                    }
                    None => error(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "the stream is being changed; try again",
                    ),
                }
            }
            .boxed()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_change_waits_for_the_requests_handed_to_the_old_routes() {
        let changes = Changes::default();
        let served = changes.serve();
        changes.begin();
        let quiet = changes.quiesce(Duration::from_secs(5));
        tokio::pin!(quiet);
        assert!(futures::poll!(quiet.as_mut()).is_pending());
        drop(served);
        quiet.await;
        changes.end();
        assert!(!changes.is_changing());
    }

    #[tokio::test]
    async fn a_request_for_a_route_being_changed_is_served_by_the_new_one() {
        let changes = Changes::default();
        let routes = Routes::new();
        changes.begin();
        let after = changes.after(routes.clone(), "/in".into(), Duration::from_secs(5));
        let call = tokio::spawn(after(HttpRequest::new(crate::http::empty())));
        routes
            .mount(
                "/in",
                "new/",
                Arc::new(|_req: HttpRequest| {
                    async { crate::http::text(StatusCode::OK, "new") }.boxed()
                }),
            )
            .unwrap();
        changes.end();
        assert_eq!(call.await.unwrap().status(), StatusCode::OK);
    }

    #[tokio::test]
    async fn a_change_that_brings_no_route_back_is_a_503() {
        let changes = Changes::default();
        changes.begin();
        let after = changes.after(Routes::new(), "/in".into(), Duration::from_secs(5));
        let call = tokio::spawn(after(HttpRequest::new(crate::http::empty())));
        changes.end();
        assert_eq!(
            call.await.unwrap().status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
    }
}
