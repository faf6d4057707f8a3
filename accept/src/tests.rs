//! The loop's steps against a scripted listener (the real listeners are tested
//! through the binaries, `tests/`).

use std::collections::VecDeque;

use super::*;

/// Clients named by a number; odd ones are turned away at the gate; at the cap
/// the listener turns away (`wait: false`) or waits.
struct Script {
    next: VecDeque<io::Result<Option<u32>>>,
    slots: Arc<Semaphore>,
    wait: bool,
    served: Vec<(u32, OwnedSemaphorePermit)>,
    refused: Vec<u32>,
    full: Vec<u32>,
}

impl Source for Script {
    type Client = u32;

    async fn next(&mut self) -> io::Result<Option<(u32, SocketAddr)>> {
        let peer: SocketAddr = ([127, 0, 0, 1], 1).into();
        match self.next.pop_front() {
            Some(r) => r.map(|c| c.map(|c| (c, peer))),
            None => std::future::pending().await,
        }
    }
}

impl Listener for Script {
    type Source = Self;
    type Passed = ();

    fn source(&mut self) -> &mut Self {
        self
    }

    fn gate(&mut self, client: u32, _: SocketAddr) -> Option<(u32, ())> {
        if client % 2 == 1 {
            self.refused.push(client);
            return None;
        }
        Some((client, ()))
    }

    fn slots(&self) -> Arc<Semaphore> {
        self.slots.clone()
    }

    fn full(&mut self, client: u32, (): &()) -> Option<u32> {
        self.full.push(client);
        if self.wait {
            // Make room: the first served connection ends (if this listener
            // holds one).
            if !self.served.is_empty() {
                drop(self.served.remove(0));
            }
            Some(client)
        } else {
            None
        }
    }

    fn serve(&mut self, client: u32, _: SocketAddr, (): (), slot: OwnedSemaphorePermit) {
        self.served.push((client, slot));
    }
}

fn script(next: Vec<io::Result<Option<u32>>>, slots: usize, wait: bool) -> Script {
    Script {
        next: next.into(),
        slots: Arc::new(Semaphore::new(slots)),
        wait,
        served: Vec::new(),
        refused: Vec::new(),
        full: Vec::new(),
    }
}

fn served(s: &Script) -> Vec<u32> {
    s.served.iter().map(|(c, _)| *c).collect()
}

#[tokio::test]
async fn errors_are_counted_and_the_loop_goes_on() {
    let errors = prometheus::IntCounter::new("e", "e").unwrap();
    let reset = || Err(io::Error::from(io::ErrorKind::ConnectionReset));
    let mut s = script(
        vec![reset(), Ok(Some(0)), reset(), Ok(Some(2)), Ok(None)],
        8,
        false,
    );
    run(&mut s, "test", &errors, std::future::pending()).await;
    assert_eq!(errors.get(), 2);
    assert_eq!(served(&s), [0, 2]);
}

#[tokio::test]
async fn the_gate_turns_clients_away_before_they_take_a_slot() {
    let errors = prometheus::IntCounter::new("e", "e").unwrap();
    let mut s = script(
        (0..6).map(|c| Ok(Some(c))).chain([Ok(None)]).collect(),
        8,
        false,
    );
    run(&mut s, "test", &errors, std::future::pending()).await;
    assert_eq!(served(&s), [0, 2, 4]);
    assert_eq!(s.refused, [1, 3, 5]);
    assert_eq!(s.slots.available_permits(), 5);
}

#[tokio::test]
async fn at_the_cap_a_client_is_turned_away_or_waits_for_the_room_made() {
    let errors = prometheus::IntCounter::new("e", "e").unwrap();
    let clients = || {
        [0, 2, 4, 6]
            .map(|c| Ok(Some(c)))
            .into_iter()
            .chain([Ok(None)])
            .collect()
    };
    let mut away = script(clients(), 2, false);
    run(&mut away, "test", &errors, std::future::pending()).await;
    assert_eq!((served(&away), away.full.clone()), (vec![0, 2], vec![4, 6]));
    let mut wait = script(clients(), 2, true);
    run(&mut wait, "test", &errors, std::future::pending()).await;
    // Each newcomer at the cap ended the oldest connection and took its slot.
    assert_eq!((served(&wait), wait.full.clone()), (vec![4, 6], vec![4, 6]));
}

#[tokio::test]
async fn stop_ends_the_loop_even_while_a_client_waits_for_a_slot() {
    let errors = prometheus::IntCounter::new("e", "e").unwrap();
    let mut s = script(vec![Ok(Some(0)), Ok(Some(2))], 1, true);
    // The only slot is held elsewhere: no room is made.
    let kept = s.slots.clone().try_acquire_owned().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let stop = async {
        let _ = rx.await;
    };
    {
        let running = run(&mut s, "test", &errors, stop);
        tokio::pin!(running);
        // The loop waits for a slot that never frees until it is told to stop.
        assert!(futures_poll(&mut running).await.is_none());
        tx.send(()).unwrap();
        running.await;
    }
    assert!(s.served.is_empty(), "no slot was ever free");
    assert_eq!(s.full, [0]);
    drop(kept);
}

/// Polls `f` once (after letting other tasks run): `Some` if it finished.
async fn futures_poll<F: Future + Unpin>(f: &mut F) -> Option<F::Output> {
    tokio::task::yield_now().await;
    std::future::poll_fn(|cx| match std::pin::Pin::new(&mut *f).poll(cx) {
        std::task::Poll::Ready(v) => std::task::Poll::Ready(Some(v)),
        std::task::Poll::Pending => std::task::Poll::Ready(None),
    })
    .await
}

/// A [`Capped`] listener on a real Unix socket: the clients beyond its cap are
/// closed at once (they read the end), the ones within it are served, and a
/// slot given back serves the next.
#[tokio::test]
async fn a_capped_listener_closes_what_is_beyond_its_cap() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = std::env::temp_dir().join(format!("accept-capped-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("s");
    let listener = tokio::net::UnixListener::bind(&path).unwrap();
    // Each served client is answered "hi" once it says something, then kept.
    let mut capped = Capped::new(
        listener,
        2,
        |mut stream: tokio::net::UnixStream, _, slot| {
            tokio::spawn(async move {
                let mut b = [0u8; 1];
                if stream.read_exact(&mut b).await.is_ok() {
                    let _ = stream.write_all(b"hi").await;
                }
                let _ = stream.read(&mut b).await;
                drop(slot);
            });
        },
    );
    let errors = prometheus::IntCounter::new("e", "e").unwrap();
    let server = tokio::spawn(async move {
        run(&mut capped, "test", &errors, std::future::pending()).await;
    });
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut c = tokio::net::UnixStream::connect(&path).await.unwrap();
        c.write_all(b"?").await.unwrap();
        let mut hi = [0u8; 2];
        c.read_exact(&mut hi).await.unwrap();
        assert_eq!(&hi, b"hi");
        held.push(c);
    }
    let mut third = tokio::net::UnixStream::connect(&path).await.unwrap();
    let mut rest = Vec::new();
    third.read_to_end(&mut rest).await.unwrap();
    assert!(rest.is_empty(), "beyond the cap: closed, nothing served");
    drop(held.pop());
    // The slot comes back when the served task ends: the next client is served.
    let mut answered = false;
    for _ in 0..200 {
        let mut c = tokio::net::UnixStream::connect(&path).await.unwrap();
        let _ = c.write_all(b"?").await;
        let mut hi = [0u8; 2];
        if c.read_exact(&mut hi).await.is_ok() {
            answered = true;
            break;
        }
        tokio::task::yield_now().await;
    }
    assert!(answered, "a slot given back serves the next client");
    server.abort();
    let _ = std::fs::remove_dir_all(&dir);
}
