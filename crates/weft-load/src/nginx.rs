//! The one nginx configuration every benchmark and experiment runs against weft http: nginx
//! as a performance-minded operator sets it up for static files on one core. One worker;
//! `sendfile on` and `tcp_nopush on` (zero-copy bodies, head and body in full packets);
//! `open_file_cache` (descriptors and metadata cached, as weft http caches them);
//! `access_log off`; keep-alive connections kept as long as the benchmark wants them; every
//! path nginx writes under the run's own directory, so it runs unprivileged and leaves the
//! system's nginx alone.
//!
//! The differential tests (weft-http's `nginx_diff.rs`) run the same template as a reference
//! rather than a rival ([`reference_config`]): Debian's whole MIME table, so every extension
//! gets its real type, and no open-file cache, so nginx sees a file changed between two
//! requests as weft does.

use std::path::Path;

/// The configuration, with `{dir}` (where nginx writes its pid, logs and temporary files),
/// `{port}`, `{root}` and `{listen}` (extra `listen` options, such as ` deferred`) to fill in.
pub const TEMPLATE: &str = "daemon off;
master_process off;
worker_processes 1;
worker_rlimit_nofile 20000;
pid {dir}/nginx.pid;
error_log {dir}/nginx-error.log;
events { worker_connections 20000; }
http {
  types { text/html html; text/plain txt; image/jpeg jpg; image/png png; }
  default_type application/octet-stream;
  access_log off;
  sendfile on;
  tcp_nopush on;
  open_file_cache max=20000 inactive=60s;
  keepalive_timeout 300s;
  keepalive_requests 1000000;
  client_body_temp_path {dir}/nginx-body;
  proxy_temp_path {dir}/nginx-proxy;
  fastcgi_temp_path {dir}/nginx-fastcgi;
  uwsgi_temp_path {dir}/nginx-uwsgi;
  scgi_temp_path {dir}/nginx-scgi;
  server { listen 127.0.0.1:{port} backlog=16384{listen}; root {root}; }
}
";

/// [`TEMPLATE`] with every placeholder filled in.
pub fn config(dir: &Path, port: u16, root: &Path, listen: &str) -> String {
    TEMPLATE
        .replace("{dir}", &dir.display().to_string())
        .replace("{port}", &port.to_string())
        .replace("{root}", &root.display().to_string())
        .replace("{listen}", listen)
}

/// The benchmarks' MIME types in [`TEMPLATE`]: the file set's few extensions.
const BENCH_TYPES: &str =
    "types { text/html html; text/plain txt; image/jpeg jpg; image/png png; }";

/// The benchmarks' open-file cache in [`TEMPLATE`]: descriptors and metadata kept.
const BENCH_FILE_CACHE: &str = "open_file_cache max=20000 inactive=60s;";

/// [`TEMPLATE`] as the differential tests' reference: Debian's MIME table
/// (`/etc/nginx/mime.types`, which must exist) for the benchmarks' few types, and no
/// open-file cache; no extra `listen` options.
pub fn reference_config(dir: &Path, port: u16, root: &Path) -> String {
    config(dir, port, root, "")
        .replace(BENCH_TYPES, "include /etc/nginx/mime.types;")
        .replace(BENCH_FILE_CACHE, "open_file_cache off;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_placeholder_is_filled_and_the_operator_settings_are_there() {
        let c = config(Path::new("/w"), 8081, Path::new("/srv"), " deferred");
        for placeholder in ["{dir}", "{port}", "{root}", "{listen}"] {
            assert!(!c.contains(placeholder), "{placeholder} left in {c}");
        }
        for setting in [
            "worker_processes 1;",
            "sendfile on;",
            "tcp_nopush on;",
            "open_file_cache max=20000",
            "access_log off;",
            "listen 127.0.0.1:8081 backlog=16384 deferred;",
            "root /srv;",
            "pid /w/nginx.pid;",
        ] {
            assert!(c.contains(setting), "{setting} missing from {c}");
        }
    }

    #[test]
    fn the_reference_differs_in_its_types_and_file_cache_only() {
        let r = reference_config(Path::new("/w"), 8081, Path::new("/srv"));
        assert!(r.contains("include /etc/nginx/mime.types;"), "{r}");
        assert!(r.contains("open_file_cache off;"), "{r}");
        let bench = config(Path::new("/w"), 8081, Path::new("/srv"), "");
        let differing = r.lines().zip(bench.lines()).filter(|(a, b)| a != b);
        assert_eq!(differing.count(), 2, "{r}");
    }
}
