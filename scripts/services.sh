#!/usr/bin/env bash
# Real Redis, Elasticsearch and (on request) a throwaway MediaWiki for `make test` and `make run`, without Docker.
#
#   scripts/services.sh up       start what is not answering yet (a port that answers is reused)
#   scripts/services.sh down     stop what `up` started (pid files in the run dir), nothing else
#   scripts/services.sh status   say what answers and what `up` started
#   scripts/services.sh deps     install what is missing (redis, curl, unzip, JDK 17, promtool, chromium,
#                                mediawiki with php, helm: built with `go install` into <cache>/bin,
#                                where the tests find it)
#   scripts/services.sh mw-config  print the LocalSettings.php of this run's wiki (for maintenance scripts:
#                                MW_CONFIG_FILE=<it> php /usr/share/mediawiki/maintenance/runJobs.php)
#   scripts/services.sh es-env   install Elasticsearch if missing and print where it is (KEY=value lines:
#                                ES_HOME, ES_JAVA_HOME, ES_RUN_DIR, ES_USER), for callers that start nodes
#                                of their own (the two-node cluster of tests/support/es_cluster.py)
#
# Knobs (environment, defaults in brackets):
#   RAGBOT_SERVICES       which services up/down/status handle ["redis es"; add "mediawiki" for the wiki]
#   REDIS_PORT            Redis port on 127.0.0.1 [6390]
#   ES_PORT               Elasticsearch HTTP port on 127.0.0.1 [9250]
#   ES_TRANSPORT_PORT     Elasticsearch transport port [ES_PORT + 100, so 9350]
#   ES_HEAP               Elasticsearch heap, -Xms and -Xmx [512m]
#   ES_VERSION            integ-test-zip version from Maven Central [8.19.21, keep equal to compose.yaml]
#   ES_JAVA_HOME          JDK for Elasticsearch [the newest JDK 17+ under /usr/lib/jvm]
#   ES_START_TIMEOUT      seconds to wait for yellow health [180]
#   MW_PORT               MediaWiki (Debian's package, PHP's built-in server) on 127.0.0.1 [8480]
#   MW_ADMIN_USER         the wiki's admin account [Admin]
#   MW_ADMIN_PASSWORD     its password [ragbot-test-admin-password]
#   MW_BOT_APP            a bot password for the admin, login name <admin>@<app> [ragbot]
#   MW_BOT_PASSWORD       its password: 32+ characters of [0-9a-w], as MediaWiki requires
#                         [ragbottestbotpassword0123456789ab]
#   MW_WORKERS            PHP built-in server workers (ragbot may call back while the wiki waits) [4]
#   HELM_VERSION          helm built by `deps` for tests/unit/test_helm_chart.py [v3.22.0]
#   RAGBOT_RUN_DIR        pid files, logs and data [root: /var/cache/ragbot/run; else <cache>/run]
#   RAGBOT_SERVICES_OWNER tag written by `up`; a `down` that sets it only stops what carries the same tag
#
# Downloads are cached in ${XDG_CACHE_HOME:-$HOME/.cache}/ragbot. Elasticsearch refuses to run as root:
# as root it runs as the system user `ragbot-es` from /var/cache/ragbot (root's $HOME is private).
set -euo pipefail

RAGBOT_SERVICES=${RAGBOT_SERVICES:-"redis es"}
MW_PORT=${MW_PORT:-8480}
MW_ADMIN_USER=${MW_ADMIN_USER:-Admin}
MW_ADMIN_PASSWORD=${MW_ADMIN_PASSWORD:-ragbot-test-admin-password}
MW_BOT_APP=${MW_BOT_APP:-ragbot}
MW_BOT_PASSWORD=${MW_BOT_PASSWORD:-ragbottestbotpassword0123456789ab}
MW_WORKERS=${MW_WORKERS:-4}
MW_HOME=/usr/share/mediawiki
REDIS_PORT=${REDIS_PORT:-6390}
ES_PORT=${ES_PORT:-9250}
ES_TRANSPORT_PORT=${ES_TRANSPORT_PORT:-$((ES_PORT + 100))}
ES_HEAP=${ES_HEAP:-512m}
ES_VERSION=${ES_VERSION:-8.19.21}
ES_START_TIMEOUT=${ES_START_TIMEOUT:-180}
ES_USER=ragbot-es
HELM_VERSION=${HELM_VERSION:-v3.22.0}
CACHE_DIR=${XDG_CACHE_HOME:-$HOME/.cache}/ragbot
ES_ZIP_URL="https://repo1.maven.org/maven2/org/elasticsearch/distribution/integ-test-zip/elasticsearch/${ES_VERSION}/elasticsearch-${ES_VERSION}.zip"

if [[ $(id -u) -eq 0 ]]; then
    IS_ROOT=1
    ES_BASE=/var/cache/ragbot
else
    IS_ROOT=0
    ES_BASE=$CACHE_DIR
fi
ES_HOME=$ES_BASE/elasticsearch-$ES_VERSION
RUN_DIR=${RAGBOT_RUN_DIR:-$ES_BASE/run}
APT_UPDATED=0

log() { printf 'services: %s\n' "$*" >&2; }
die() {
    log "error: $*"
    exit 1
}

# --- installing what is missing -------------------------------------------------------------------

apt_install() {
    # Debian packages; root only. Keeps package scripts from starting system daemons (no policy-rc.d
    # of our own is left behind).
    if [[ $IS_ROOT -ne 1 ]]; then
        die "missing: $*. Install it with: sudo apt-get install -y $* (or run this script as root)"
    fi
    command -v apt-get >/dev/null || die "missing: $*, and apt-get is not available: install it by hand"
    local policy=/usr/sbin/policy-rc.d own_policy=0
    if [[ ! -e $policy ]]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && own_policy=1
    fi
    if [[ $APT_UPDATED -eq 0 ]]; then
        log "apt-get update"
        DEBIAN_FRONTEND=noninteractive apt-get update -qq
        APT_UPDATED=1
    fi
    log "apt-get install -y $*"
    local rc=0
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null || rc=$?
    [[ $own_policy -eq 1 ]] && rm -f "$policy"
    [[ $rc -eq 0 ]] || die "apt-get install $* failed (exit $rc)"
}

need_cmd() {
    # need_cmd <command> <debian package>
    command -v "$1" >/dev/null && return 0
    apt_install "$2"
    command -v "$1" >/dev/null || die "$2 is installed but $1 is still not on PATH"
}

# --- small helpers --------------------------------------------------------------------------------

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

pid_alive() { [[ -n ${1:-} ]] && kill -0 "$1" 2>/dev/null; }

pid_matches() {
    # pid_matches <pid> <pattern>: the process still runs the program we started (pids get reused).
    [[ -r /proc/$1/cmdline ]] && tr '\0' ' ' <"/proc/$1/cmdline" | grep -q -- "$2"
}

wait_gone() {
    # wait_gone <pid> <seconds>: SIGTERM was sent; escalate to SIGKILL at the deadline.
    local pid=$1 deadline=$((SECONDS + $2))
    while pid_alive "$pid"; do
        if ((SECONDS >= deadline)); then
            log "pid $pid did not stop in $2 s; sending SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
            break
        fi
        sleep 0.2
    done
}

owned_by_caller() {
    # A `down` with RAGBOT_SERVICES_OWNER set only stops what an `up` with the same tag started.
    local owner_file=$1
    [[ -z ${RAGBOT_SERVICES_OWNER:-} ]] && return 0
    [[ -f $owner_file && $(cat "$owner_file") == "$RAGBOT_SERVICES_OWNER" ]]
}

as_es_user() {
    if [[ $IS_ROOT -eq 1 ]]; then
        runuser -u "$ES_USER" -- "$@"
    else
        "$@"
    fi
}

# --- Redis ----------------------------------------------------------------------------------------

redis_dir() { echo "$RUN_DIR/redis-$REDIS_PORT"; }

redis_answers() { [[ $(redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null) == PONG ]]; }

redis_up() {
    need_cmd redis-server redis-server
    need_cmd redis-cli redis-tools
    if redis_answers; then
        log "redis: 127.0.0.1:$REDIS_PORT already answers; reusing it"
        return 0
    fi
    port_open "$REDIS_PORT" && die "redis: port $REDIS_PORT is taken by something that is not Redis"
    local dir
    dir=$(redis_dir)
    mkdir -p "$dir"
    rm -f "$dir/redis.pid" "$dir/owner"
    # No persistence: tests and `make run` need a clean broker, not a durable one.
    redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --daemonize yes --pidfile "$dir/redis.pid" \
        --logfile "$dir/redis.log" --dir "$dir" --save '' --appendonly no
    local deadline=$((SECONDS + 30))
    until redis_answers; do
        if ((SECONDS >= deadline)); then
            tail -n 30 "$dir/redis.log" >&2 || true
            die "redis: no PONG on 127.0.0.1:$REDIS_PORT after 30 s (log: $dir/redis.log)"
        fi
        sleep 0.1
    done
    echo "${RAGBOT_SERVICES_OWNER:-manual}" >"$dir/owner"
    log "redis: started on 127.0.0.1:$REDIS_PORT (pid $(cat "$dir/redis.pid" 2>/dev/null || echo '?'))"
}

redis_down() {
    local dir pid
    dir=$(redis_dir)
    if [[ ! -f $dir/redis.pid ]]; then
        log "redis: nothing on port $REDIS_PORT was started by 'up'; leaving it"
        return 0
    fi
    if ! owned_by_caller "$dir/owner"; then
        log "redis: port $REDIS_PORT was started by another 'up' ($(cat "$dir/owner" 2>/dev/null)); leaving it"
        return 0
    fi
    pid=$(cat "$dir/redis.pid")
    if pid_alive "$pid" && pid_matches "$pid" redis-server; then
        kill -TERM "$pid"
        wait_gone "$pid" 20
        log "redis: stopped (pid $pid)"
    else
        log "redis: pid $pid is not running any more"
    fi
    rm -f "$dir/redis.pid" "$dir/owner"
}

redis_status() {
    local dir state
    dir=$(redis_dir)
    if command -v redis-cli >/dev/null && redis_answers; then state=answers; else state="not answering"; fi
    if [[ -f $dir/redis.pid ]]; then
        echo "redis  127.0.0.1:$REDIS_PORT  $state  started by up (pid $(cat "$dir/redis.pid"), owner $(cat "$dir/owner" 2>/dev/null || echo '?'))"
    else
        echo "redis  127.0.0.1:$REDIS_PORT  $state"
    fi
    [[ $state == answers ]]
}

# --- Elasticsearch --------------------------------------------------------------------------------

es_dir() { echo "$RUN_DIR/es-$ES_PORT"; }

es_health() { curl -fsS -m "${2:-5}" "http://127.0.0.1:$ES_PORT/_cluster/health${1:-}" 2>/dev/null; }

es_answers() { es_health "" | grep -q '"cluster_name"'; }

java_major() {
    # The major version of the JDK at $1, from its `release` file ("17.0.13" -> 17, "1.8.0" -> 8).
    local v
    v=$(sed -n 's/^JAVA_VERSION="\([^"]*\)".*/\1/p' "$1/release" 2>/dev/null)
    [[ -n $v ]] || v=$("$1/bin/java" -version 2>&1 | sed -n '1s/.*version "\([^"]*\)".*/\1/p')
    v=${v#1.}
    echo "${v%%[^0-9]*}"
}

es_java_home() {
    # The newest JDK >= 17 (9.x: >= 21). Lucene's SIMD vector code (Panama) and Elasticsearch's native
    # vector library need JDK 21+: on 17 the dense searches run scalar, measured 1.6x slower at 100k
    # paragraphs (docs/benchmarks.md). The official images bundle a recent JDK too.
    local min=17 best="" best_major=0 d m
    [[ ${ES_VERSION%%.*} -ge 9 ]] && min=21
    if [[ -n ${ES_JAVA_HOME:-} ]]; then
        [[ -x $ES_JAVA_HOME/bin/java ]] || die "ES_JAVA_HOME=$ES_JAVA_HOME has no bin/java"
        echo "$ES_JAVA_HOME"
        return 0
    fi
    for d in /usr/lib/jvm/*; do
        [[ -x $d/bin/java && ! -L $d ]] || continue
        m=$(java_major "$d")
        if [[ -z $m ]] || ((m < min)); then continue; fi
        if ((m > best_major)); then best=$d best_major=$m; fi
    done
    [[ -n $best ]] && {
        echo "$best"
        return 0
    }
    return 1
}

es_need_java() {
    local jh
    if ! jh=$(es_java_home); then
        apt_install "openjdk-$((${ES_VERSION%%.*} >= 9 ? 21 : 17))-jre-headless"
        jh=$(es_java_home) || die "no JDK >= 17 under /usr/lib/jvm; set ES_JAVA_HOME"
    fi
    echo "$jh"
}

es_download() {
    # The integ-test-zip from Maven Central, verified against Maven's .sha1; cached outside the clone.
    local zip=$CACHE_DIR/elasticsearch-$ES_VERSION.zip
    mkdir -p "$CACHE_DIR"
    if [[ ! -s $zip.sha1 ]]; then
        curl -fsSL --retry 3 -o "$zip.sha1.part" "$ES_ZIP_URL.sha1" || die "cannot download $ES_ZIP_URL.sha1"
        mv "$zip.sha1.part" "$zip.sha1"
    fi
    local want
    want=$(head -c 40 "$zip.sha1")
    if [[ -f $zip && $(sha1sum "$zip" | cut -d' ' -f1) == "$want" ]]; then
        return 0
    fi
    log "elasticsearch: downloading $ES_ZIP_URL"
    curl -fsSL --retry 3 -o "$zip.part" "$ES_ZIP_URL" || die "cannot download $ES_ZIP_URL"
    [[ $(sha1sum "$zip.part" | cut -d' ' -f1) == "$want" ]] || {
        rm -f "$zip.part"
        die "elasticsearch: $ES_ZIP_URL does not match its .sha1"
    }
    mv "$zip.part" "$zip"
}

es_install() {
    [[ -x $ES_HOME/bin/elasticsearch ]] && return 0
    need_cmd unzip unzip
    es_download
    mkdir -p "$ES_BASE"
    chmod 755 "$ES_BASE"
    local tmp
    tmp=$(mktemp -d "$ES_BASE/.unpack.XXXXXX")
    unzip -q "$CACHE_DIR/elasticsearch-$ES_VERSION.zip" -d "$tmp"
    [[ -d $tmp/elasticsearch-$ES_VERSION ]] || die "elasticsearch: unexpected zip layout in $tmp"
    mv "$tmp/elasticsearch-$ES_VERSION" "$ES_HOME"
    rmdir "$tmp"
    [[ $IS_ROOT -eq 1 ]] && chown -R "$ES_USER:" "$ES_HOME"
    log "elasticsearch: unpacked into $ES_HOME"
}

es_ensure_user() {
    [[ $IS_ROOT -eq 1 ]] || return 0
    id -u "$ES_USER" >/dev/null 2>&1 && return 0
    useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "$ES_USER"
    log "elasticsearch: created system user $ES_USER"
}

es_write_config() {
    # A private config dir per node, so nodes never share or rewrite the distribution's config.
    local dir=$1
    mkdir -p "$dir/config/jvm.options.d" "$dir/data" "$dir/logs"
    cp "$ES_HOME/config/jvm.options" "$ES_HOME/config/log4j2.properties" "$dir/config/"
    cat >"$dir/config/elasticsearch.yml" <<EOF
# Written by scripts/services.sh for a throwaway test node; every start gets a fresh data dir.
cluster.name: ragbot-$ES_PORT
node.name: ragbot-$ES_PORT
network.host: 127.0.0.1
http.port: $ES_PORT
transport.port: $ES_TRANSPORT_PORT
discovery.type: single-node
path.data: $dir/data
path.logs: $dir/logs
xpack.security.enabled: false
cluster.routing.allocation.disk.threshold_enabled: false
EOF
}

es_fail() {
    local dir=$1 pid
    log "elasticsearch: $2; last log lines:"
    tail -n 40 "$dir/logs/ragbot-$ES_PORT.log" "$dir/stdout.log" >&2 2>/dev/null || true
    pid=$(cat "$dir/es.pid" 2>/dev/null || true)
    if pid_alive "$pid" && pid_matches "$pid" org.elasticsearch; then
        kill -TERM "$pid"
        wait_gone "$pid" 30
    fi
    rm -f "$dir/es.pid" "$dir/owner"
    die "elasticsearch did not start on 127.0.0.1:$ES_PORT (logs: $dir/logs)"
}

es_up() {
    need_cmd curl curl
    if es_answers; then
        log "elasticsearch: 127.0.0.1:$ES_PORT already answers; reusing it"
        return 0
    fi
    port_open "$ES_PORT" && die "elasticsearch: port $ES_PORT is taken by something that is not Elasticsearch"
    port_open "$ES_TRANSPORT_PORT" && die "elasticsearch: transport port $ES_TRANSPORT_PORT is taken (set ES_TRANSPORT_PORT)"
    local dir jh pid
    dir=$(es_dir)
    pid=$(cat "$dir/es.pid" 2>/dev/null || true)
    if pid_alive "$pid" && pid_matches "$pid" org.elasticsearch; then
        die "elasticsearch: pid $pid from an earlier 'up' runs but does not answer; run '$0 down' first"
    fi
    es_ensure_user
    jh=$(es_need_java)
    es_install
    mkdir -p "$RUN_DIR"
    chmod 755 "$RUN_DIR"
    rm -rf "$dir"
    es_write_config "$dir"
    [[ $IS_ROOT -eq 1 ]] && chown -R "$ES_USER:" "$dir"
    log "elasticsearch: starting $ES_VERSION on 127.0.0.1:$ES_PORT (java $jh, heap $ES_HEAP)"
    local rc=0
    (cd "$dir" && as_es_user env ES_JAVA_HOME="$jh" ES_JAVA_OPTS="-Xms$ES_HEAP -Xmx$ES_HEAP" \
        ES_PATH_CONF="$dir/config" "$ES_HOME/bin/elasticsearch" -d -p "$dir/es.pid" >"$dir/stdout.log" 2>&1) || rc=$?
    [[ $rc -eq 0 ]] || es_fail "$dir" "the launcher exited with $rc"
    local deadline=$((SECONDS + ES_START_TIMEOUT))
    until es_health "?wait_for_status=yellow&timeout=5s" 10 | grep -Eq '"status":"(yellow|green)"'; do
        pid=$(cat "$dir/es.pid" 2>/dev/null || true)
        [[ -z $pid ]] || pid_alive "$pid" || es_fail "$dir" "the node (pid $pid) exited"
        ((SECONDS < deadline)) || es_fail "$dir" "no yellow health after $ES_START_TIMEOUT s"
        sleep 0.5
    done
    echo "${RAGBOT_SERVICES_OWNER:-manual}" >"$dir/owner"
    log "elasticsearch: started on http://127.0.0.1:$ES_PORT (pid $(cat "$dir/es.pid"))"
}

es_down() {
    local dir pid
    dir=$(es_dir)
    if [[ ! -f $dir/es.pid ]]; then
        log "elasticsearch: nothing on port $ES_PORT was started by 'up'; leaving it"
        return 0
    fi
    if ! owned_by_caller "$dir/owner"; then
        log "elasticsearch: port $ES_PORT was started by another 'up' ($(cat "$dir/owner" 2>/dev/null)); leaving it"
        return 0
    fi
    pid=$(cat "$dir/es.pid")
    if pid_alive "$pid" && pid_matches "$pid" org.elasticsearch; then
        kill -TERM "$pid"
        wait_gone "$pid" 60
        log "elasticsearch: stopped (pid $pid)"
    else
        log "elasticsearch: pid $pid is not running any more"
    fi
    # The data dir is throwaway (the next `up` starts fresh); logs stay for post-mortems.
    rm -rf "$dir/data" "$dir/es.pid" "$dir/owner"
}

es_status() {
    local dir state
    dir=$(es_dir)
    if command -v curl >/dev/null && es_answers; then
        state="answers ($(es_health "" | sed -n 's/.*"status":"\([a-z]*\)".*/\1/p'))"
    else
        state="not answering"
    fi
    if [[ -f $dir/es.pid ]]; then
        echo "es     127.0.0.1:$ES_PORT  $state  started by up (pid $(cat "$dir/es.pid"), owner $(cat "$dir/owner" 2>/dev/null || echo '?'))"
    else
        echo "es     127.0.0.1:$ES_PORT  $state"
    fi
    [[ $state == answers* ]]
}

es_env() {
    # Where the distribution, its JDK and a run dir the node user can write are; installs what is missing.
    local jh user=""
    need_cmd curl curl
    es_ensure_user
    jh=$(es_need_java)
    es_install
    mkdir -p "$RUN_DIR"
    chmod 755 "$RUN_DIR"
    [[ $IS_ROOT -eq 1 ]] && user=$ES_USER
    printf 'ES_HOME=%s\nES_JAVA_HOME=%s\nES_RUN_DIR=%s\nES_USER=%s\n' "$ES_HOME" "$jh" "$RUN_DIR" "$user"
}

# --- MediaWiki -----------------------------------------------------------------------------------
# Debian's package (1.39) is the code; each `up` installs a fresh throwaway wiki (SQLite, Hebrew content
# language) under the run dir and points PHP at it with MW_CONFIG_FILE, so /etc/mediawiki is never used.

mw_dir() { echo "$RUN_DIR/mediawiki-$MW_PORT"; }

mw_answers() {
    curl -fsS -m 5 "http://127.0.0.1:$MW_PORT/api.php?action=query&meta=siteinfo&format=json" 2>/dev/null |
        grep -q '"generator":"MediaWiki'
}

mw_need() {
    need_cmd curl curl
    need_cmd php php-cli
    local missing=() mod modules
    [[ -f $MW_HOME/maintenance/install.php ]] || missing+=(mediawiki)
    modules=$(php -m 2>/dev/null)
    for mod in pdo_sqlite:php-sqlite3 intl:php-intl mbstring:php-mbstring dom:php-xml curl:php-curl; do
        grep -qix "${mod%%:*}" <<<"$modules" || missing+=("${mod#*:}")
    done
    [[ ${#missing[@]} -eq 0 ]] || apt_install "${missing[@]}"
}

mw_install() {
    local dir=$1
    rm -rf "$dir"
    mkdir -p "$dir/data" "$dir/cache" "$dir/images"
    (cd "$MW_HOME" && php maintenance/install.php --dbtype sqlite --dbpath "$dir/data" --dbname wiki \
        --lang he --server "http://127.0.0.1:$MW_PORT" --scriptpath "" --confpath "$dir" \
        --pass "$MW_ADMIN_PASSWORD" RagbotTest "$MW_ADMIN_USER" >"$dir/install.log" 2>&1) || {
        tail -n 30 "$dir/install.log" >&2
        die "mediawiki: install.php failed (log: $dir/install.log)"
    }
    cat >>"$dir/LocalSettings.php" <<EOF

# Added by scripts/services.sh: this run's own folders; jobs run only when a caller runs runJobs.php.
\$wgCacheDirectory = "$dir/cache";
\$wgUploadDirectory = "$dir/images";
\$wgJobRunRate = 0;
# Sessions (logins) must outlive a request: CACHE_NONE would forget them.
\$wgMainCacheType = CACHE_DB;
\$wgSessionCacheType = CACHE_DB;
EOF
    MW_CONFIG_FILE="$dir/LocalSettings.php" php "$MW_HOME/maintenance/createBotPassword.php" --appid "$MW_BOT_APP" \
        --grants basic,highvolume,editpage,createeditmovepage,delete "$MW_ADMIN_USER" "$MW_BOT_PASSWORD" \
        >>"$dir/install.log" 2>&1 || {
        tail -n 10 "$dir/install.log" >&2
        die "mediawiki: createBotPassword.php failed (log: $dir/install.log)"
    }
}

mw_up() {
    mw_need
    if mw_answers; then
        log "mediawiki: 127.0.0.1:$MW_PORT already answers; reusing it"
        return 0
    fi
    port_open "$MW_PORT" && die "mediawiki: port $MW_PORT is taken by something that is not MediaWiki"
    local dir pid
    dir=$(mw_dir)
    mkdir -p "$RUN_DIR"
    mw_install "$dir"
    # setsid: the server outlives this script; PHP_CLI_SERVER_WORKERS lets it answer while a request waits.
    cd "$dir"
    MW_CONFIG_FILE="$dir/LocalSettings.php" PHP_CLI_SERVER_WORKERS=$MW_WORKERS \
        setsid php -S "127.0.0.1:$MW_PORT" -t "$MW_HOME" >"$dir/server.log" 2>&1 </dev/null &
    echo $! >"$dir/php.pid"
    cd - >/dev/null
    local deadline=$((SECONDS + 60))
    until mw_answers; do
        pid=$(cat "$dir/php.pid" 2>/dev/null || true)
        if ! pid_alive "$pid" || ((SECONDS >= deadline)); then
            tail -n 30 "$dir/server.log" >&2 || true
            pid_alive "$pid" && kill -TERM "$pid"
            rm -f "$dir/php.pid"
            die "mediawiki: api.php does not answer on 127.0.0.1:$MW_PORT (log: $dir/server.log)"
        fi
        sleep 0.2
    done
    echo "${RAGBOT_SERVICES_OWNER:-manual}" >"$dir/owner"
    log "mediawiki: started on http://127.0.0.1:$MW_PORT (pid $(cat "$dir/php.pid"), config $dir/LocalSettings.php)"
}

mw_down() {
    local dir pid
    dir=$(mw_dir)
    if [[ ! -f $dir/php.pid ]]; then
        log "mediawiki: nothing on port $MW_PORT was started by 'up'; leaving it"
        return 0
    fi
    if ! owned_by_caller "$dir/owner"; then
        log "mediawiki: port $MW_PORT was started by another 'up' ($(cat "$dir/owner" 2>/dev/null)); leaving it"
        return 0
    fi
    pid=$(cat "$dir/php.pid")
    if pid_alive "$pid" && pid_matches "$pid" "php -S"; then
        # The workers outlive a SIGTERM to the server alone: stop its whole process group (setsid made it).
        kill -TERM -- "-$pid"
        wait_gone "$pid" 20
        log "mediawiki: stopped (pid $pid)"
    else
        log "mediawiki: pid $pid is not running any more"
    fi
    # The wiki is throwaway (the next `up` installs a fresh one); logs stay for post-mortems.
    rm -rf "$dir/data" "$dir/php.pid" "$dir/owner"
}

mediawiki_status() {
    local dir state
    dir=$(mw_dir)
    if command -v curl >/dev/null && mw_answers; then state=answers; else state="not answering"; fi
    if [[ -f $dir/php.pid ]]; then
        echo "mediawiki 127.0.0.1:$MW_PORT  $state  started by up (pid $(cat "$dir/php.pid"), owner $(cat "$dir/owner" 2>/dev/null || echo '?'))"
    else
        echo "mediawiki 127.0.0.1:$MW_PORT  $state"
    fi
    [[ $state == answers ]]
}

mediawiki_up() { mw_up; }
mediawiki_down() { mw_down; }

# --- commands -------------------------------------------------------------------------------------

helm_install() {
    # helm from the Go module proxy into the cache (CI keeps it), once per version.
    local bin=$CACHE_DIR/bin
    if [[ -x $bin/helm ]] && "$bin/helm" version --short 2>/dev/null | grep -q "^${HELM_VERSION%.*}"; then
        return 0
    fi
    command -v go >/dev/null || need_cmd go golang-go
    log "helm: go install helm.sh/helm/v3/cmd/helm@$HELM_VERSION into $bin (a few minutes, once)"
    mkdir -p "$bin"
    GOBIN=$bin GOFLAGS=-mod=mod go install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" ||
        die "go install helm.sh/helm/v3/cmd/helm@$HELM_VERSION failed"
}

deps() {
    need_cmd redis-server redis-server
    need_cmd redis-cli redis-tools
    need_cmd curl curl
    need_cmd unzip unzip
    need_cmd promtool prometheus
    # The web UI's browser tests drive Debian's Chromium through its chromedriver.
    need_cmd chromium chromium
    need_cmd chromedriver chromium-driver
    es_need_java >/dev/null
    mw_need
    helm_install
    log "deps: redis-server, redis-cli, curl, unzip, promtool, chromium, chromedriver, a JDK, MediaWiki with PHP and helm are present"
}

for_each() {
    local action=$1 svc rc=0
    for svc in $RAGBOT_SERVICES; do
        case $svc in
        redis | es | mediawiki) "${svc}_$action" || rc=1 ;;
        *) die "unknown service '$svc' in RAGBOT_SERVICES (known: redis es mediawiki)" ;;
        esac
    done
    return $rc
}

main() {
    case ${1:-} in
    up) for_each up ;;
    down)
        # Stop in reverse order; keep going if one fails so nothing is left behind.
        local svc rc=0 reversed=""
        for svc in $RAGBOT_SERVICES; do reversed="$svc $reversed"; done
        RAGBOT_SERVICES=$reversed for_each down || rc=1
        return $rc
        ;;
    status) for_each status ;;
    deps) deps ;;
    es-env) es_env ;;
    mw-config) echo "$(mw_dir)/LocalSettings.php" ;;
    *)
        sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//' >&2
        exit 2
        ;;
    esac
}

main "$@"
