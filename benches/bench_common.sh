# Sourced by the benchmark scripts: the checks before a run and nginx's configuration.

# need HINT TOOL...: exits 2 naming the first TOOL not on PATH, with HINT (how to install),
# or when there is no weft binary at $WEFT.
need() {
    local hint=$1 tool
    shift
    for tool in "$@"; do
        command -v "$tool" >/dev/null || {
            echo "$tool is not installed ($hint)" >&2
            exit 2
        }
    done
    [ -x "$WEFT" ] || {
        echo "no weft binary at $WEFT (cargo build --release -p weft-cli)" >&2
        exit 2
    }
}

# nginx_conf PORT DIR: nginx at its best for static files (one worker, sendfile, tcp_nopush,
# open_file_cache, long keep-alive), listening on 127.0.0.1:PORT, serving DIR/www, its pid
# and error log in DIR. The settings of crates/weft-load/src/nginx.rs, the template every
# benchmark and experiment uses (keep the two the same).
nginx_conf() {
    cat <<CONF
worker_processes 1;
daemon off;
pid $2/nginx-$1.pid;
error_log $2/nginx-error.log;
worker_rlimit_nofile 20000;
events { worker_connections 20000; }
http {
  access_log off;
  sendfile on; tcp_nopush on;
  open_file_cache max=20000 inactive=60s;
  keepalive_requests 1000000; keepalive_timeout 300s;
  server { listen 127.0.0.1:$1 backlog=16384; root $2/www; }
}
CONF
}

# file_root: a scratch directory `work` whose www/4k.bin (4 KiB of random bytes) the servers
# serve, readable by nginx's worker (which runs as nobody); on exit the server in `pid` (if
# any) is stopped and `work` removed.
file_root() {
    work=$(mktemp -d)
    pid=
    trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$work"; true' EXIT
    chmod 755 "$work"
    mkdir -p "$work/www"
    head -c 4096 /dev/urandom >"$work/www/4k.bin"
}
