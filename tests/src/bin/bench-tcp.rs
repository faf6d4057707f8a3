//! `bench-tcp`: the TCP load tool and backends of `bench/portproxy.py`.
//!
//! ```text
//! bench-tcp serve ADDR              sink for `bulk`, and 100 B answer for `short`:
//!                                   a connection whose first byte is `B` is drained,
//!                                   any other gets 100 bytes back per 100 read, then
//!                                   closes when the client does
//! bench-tcp bulk ADDR SECS STREAMS  send as fast as possible; prints `bytes_per_sec N`
//! bench-tcp short ADDR SECS CONC    connect, 100 B, read 100 B, close, in a loop;
//!                                   prints `conns N` and `conns_per_sec N`
//! bench-tcp idle ADDR N             open N connections, exchange one 100 B round trip
//!                                   each, then hold them until stdin closes
//! ```

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn main() {
    raise_nofile();
    let args: Vec<String> = std::env::args().collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let arg = |i: usize| args.get(i).cloned().unwrap_or_else(|| usage());
    let addr: SocketAddr = arg(2).parse().unwrap_or_else(|_| usage());
    match arg(1).as_str() {
        "serve" => rt.block_on(serve(addr)),
        "bulk" => rt.block_on(bulk(addr, num(&arg(3)), num(&arg(4)) as usize)),
        "short" => rt.block_on(short(addr, num(&arg(3)), num(&arg(4)) as usize)),
        "idle" => rt.block_on(idle(addr, num(&arg(3)) as usize)),
        _ => usage(),
    }
}

fn usage() -> ! {
    eprintln!(
        "usage: bench-tcp serve ADDR | bulk ADDR SECS STREAMS | short ADDR SECS CONC | idle ADDR N"
    );
    std::process::exit(64)
}

fn num(s: &str) -> u64 {
    s.parse().unwrap_or_else(|_| usage())
}

fn raise_nofile() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read/write the struct we pass.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

async fn serve(addr: SocketAddr) {
    let l = TcpListener::bind(addr).await.expect("bind");
    eprintln!("serving on {}", l.local_addr().expect("addr"));
    loop {
        let Ok((mut s, _)) = l.accept().await else {
            continue;
        };
        let _ = s.set_nodelay(true);
        tokio::spawn(async move {
            let mut buf = vec![0u8; 64 * 1024];
            let Ok(n) = s.read(&mut buf).await else {
                return;
            };
            if n == 0 {
                return;
            }
            if buf[0] == b'B' {
                while let Ok(n) = s.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                }
                return;
            }
            let mut pending = n;
            loop {
                while pending >= 100 {
                    if s.write_all(&[b'r'; 100]).await.is_err() {
                        return;
                    }
                    pending -= 100;
                }
                match s.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => pending += n,
                }
            }
        });
    }
}

async fn bulk(addr: SocketAddr, secs: u64, streams: usize) {
    let total = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut tasks = Vec::new();
    for _ in 0..streams {
        let total = total.clone();
        tasks.push(tokio::spawn(async move {
            let mut s = TcpStream::connect(addr).await.expect("connect");
            let buf = vec![b'B'; 256 * 1024];
            while Instant::now() < deadline {
                s.write_all(&buf).await.expect("write");
                total.fetch_add(buf.len() as u64, Ordering::Relaxed);
            }
        }));
    }
    let started = Instant::now();
    for t in tasks {
        t.await.expect("stream");
    }
    let bytes = total.load(Ordering::Relaxed) as f64;
    println!(
        "bytes_per_sec {:.0}",
        bytes / started.elapsed().as_secs_f64()
    );
}

async fn short(addr: SocketAddr, secs: u64, conc: usize) {
    let total = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut tasks = Vec::new();
    for _ in 0..conc {
        let (total, errors) = (total.clone(), errors.clone());
        tasks.push(tokio::spawn(async move {
            let mut buf = [0u8; 100];
            while Instant::now() < deadline {
                let ok = async {
                    let mut s = TcpStream::connect(addr).await?;
                    s.set_nodelay(true)?;
                    s.write_all(&[b'q'; 100]).await?;
                    s.read_exact(&mut buf).await?;
                    // The client closes first: TIME_WAIT stays on the client side.
                    socket2::SockRef::from(&s).set_linger(Some(Duration::ZERO))?;
                    Ok::<_, std::io::Error>(())
                }
                .await;
                if ok.is_ok() {
                    total.fetch_add(1, Ordering::Relaxed);
                } else {
                    errors.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    let started = Instant::now();
    for t in tasks {
        t.await.expect("worker");
    }
    let n = total.load(Ordering::Relaxed);
    println!("conns {n}");
    println!("errors {}", errors.load(Ordering::Relaxed));
    println!(
        "conns_per_sec {:.0}",
        n as f64 / started.elapsed().as_secs_f64()
    );
}

async fn idle(addr: SocketAddr, n: usize) {
    let mut held = Vec::with_capacity(n);
    let mut buf = [0u8; 100];
    for _ in 0..n {
        let mut s = TcpStream::connect(addr).await.expect("connect");
        s.write_all(&[b'q'; 100]).await.expect("write");
        s.read_exact(&mut buf).await.expect("read");
        held.push(s);
    }
    println!("holding {n}");
    let mut stdin = tokio::io::stdin();
    let mut b = [0u8; 1];
    let _ = stdin.read(&mut b).await;
}
