//! The echo servers: read up to 4 KiB, write it all back, per connection; one per backend,
//! each written the way its runtime is meant to be used. They run pinned to CPU 0 until their
//! standard input closes (the parent exits or kills them).

use std::io::{self, Read, Write};

use super::{cpu, Backend};

/// Read buffer per connection, the same on every backend.
const BUF_BYTES: usize = 4096;

/// Pins to the server's CPU (`process::server_and_load_cpus`), binds 127.0.0.1 on an
/// ephemeral port, prints the port on stdout, serves.
pub fn serve(backend: Backend) -> io::Result<()> {
    if let Some(c) = crate::process::server_and_load_cpus().0 {
        cpu::pin_current_thread(c)?;
    }
    raise_nofile();
    std::thread::spawn(|| {
        let mut sink = [0u8; 64];
        while matches!(io::stdin().read(&mut sink), Ok(n) if n > 0) {}
        std::process::exit(0);
    });
    match backend {
        Backend::Uring => serve_weft(weft::IoBackend::Uring),
        Backend::Epoll => serve_weft(weft::IoBackend::Epoll),
        Backend::Tokio => serve_tokio(),
    }
}

fn announce(port: u16) -> io::Result<()> {
    let mut out = io::stdout().lock();
    writeln!(out, "{port}")?;
    out.flush()
}

/// Lifts the soft descriptor limit to the hard one (many connections).
pub fn raise_nofile() {
    let _ = weft::net::raise_descriptor_limit();
}

fn serve_weft(io_backend: weft::IoBackend) -> io::Result<()> {
    let cluster = weft::Cluster::builder()
        .name("echo")
        .processors(1)
        .io(io_backend)
        .build()?;
    let listener = weft::net::TcpListener::builder()
        .backlog(4096)
        .bind("127.0.0.1:0")?;
    announce(listener.local_addr()?.port())?;
    cluster
        .spawn(move || loop {
            let Ok((stream, _)) = listener.accept() else {
                continue;
            };
            let _ = stream.set_nodelay(true);
            weft::spawn(move || {
                let mut buf = [0u8; BUF_BYTES];
                loop {
                    match (&stream).read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => {
                            if (&stream).write_all(&buf[..n]).is_err() {
                                return;
                            }
                        }
                    }
                }
            });
        })
        .join()
        .map_err(|_| io::Error::other("echo accept loop panicked"))
}

fn serve_tokio() -> io::Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        announce(listener.local_addr()?.port())?;
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                continue;
            };
            let _ = stream.set_nodelay(true);
            tokio::spawn(async move {
                let mut buf = [0u8; BUF_BYTES];
                loop {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => {
                            if stream.write_all(&buf[..n]).await.is_err() {
                                return;
                            }
                        }
                    }
                }
            });
        }
    })
}
