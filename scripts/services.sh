#!/usr/bin/env bash
# Run a real single-node Kafka broker (KRaft, broker+controller in one JVM) and a real
# HDFS (Hadoop MiniDFSCluster: NameNode + one DataNode in one JVM) on 127.0.0.1,
# for integration tests.
#
#   scripts/services.sh start    # fetch jars once (Maven), start both, wait until they answer
#   scripts/services.sh status   # exit 0 when both run, 3 otherwise
#   scripts/services.sh stop     # idempotent
#   scripts/services.sh start --kerberos    # also a Kerberos-secured HDFS (below); status --kerberos
#
# start/status print KEY=VALUE lines on stdout (everything else goes to stderr), so
#   eval "$(scripts/services.sh start)"        or        scripts/services.sh start >> "$GITHUB_ENV"
# gives KAFKA_BOOTSTRAP, HDFS_URL, WEBHDFS_URL and HADOOP_CONF_DIR (a core-site.xml with
# fs.defaultFS, read by hdfs-native, and an hdfs-site.xml with dfs.namenode.http-address).
#
# The same broker also has secured listeners, for a user who may create, read and write only the
# topics (and use only the consumer groups and transactional ids) whose names start with
# KAFKA_SECURE_TOPIC_PREFIX (ACLs; PLAINTEXT clients are super users, as before):
#   KAFKA_SECURE_BOOTSTRAP   SASL_SSL        KAFKA_SASL_BOOTSTRAP   SASL_PLAINTEXT
#   KAFKA_SSL_BOOTSTRAP      SSL, client certificate required (KAFKA_SSL_CERTFILE, KAFKA_SSL_KEYFILE,
#                            whose subject CN is the user)
# SASL mechanisms PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 for KAFKA_SASL_USER / KAFKA_SASL_PASSWORD (a new
# random password on every start).  The broker's certificate, signed by a CA generated on every start
# (KAFKA_CA_FILE, with openssl), names the host "localhost" only, so 127.0.0.1 is a host it does not match.
# Needs openssl, and kafka-python for the ACLs: without either, the broker has its plain listener only.
#
# With --kerberos (or INGEST_KERBEROS=1) `start` also runs a Kerberos-secured HDFS: a KDC (Hadoop's MiniKdc,
# realm HDFS_KERBEROS_REALM on 127.0.0.1:KDC_PORT) and a second MiniDFSCluster in one more JVM
# (scripts/services/kerberos/SecureHdfs.java, compiled with javac on first use), with
# hadoop.security.authentication=kerberos, block access tokens and SASL data transfer (authentication; the
# DataNode's ports are not privileged, so ignore.secure.ports.for.testing).  It prints besides the others:
#   HDFS_KERBEROS_URL        hdfs://127.0.0.1:HDFS_KERBEROS_PORT
#   HDFS_KERBEROS_CONF_DIR   the HADOOP_CONF_DIR of its clients (dfs.data.transfer.protection is needed there)
#   KRB5_CONFIG              a krb5.conf naming the KDC (for kinit and GSSAPI, which hdfs-native uses)
#   HDFS_KERBEROS_PRINCIPAL  a user principal, and HDFS_KERBEROS_KEYTAB its keytab (new keys on every start)
# Its NameNode and DataNode are hdfs/localhost; WebHDFS needs SPNEGO there.  The plain HDFS is unchanged;
# `stop` stops the secured one too, `status --kerberos` requires it.
#
# Every start begins with empty Kafka and HDFS data; `start` on running services
# leaves them (and their data) alone.  Needs Java 17+, Maven, curl; Python with
# kafka-python is used, when importable, to check that the broker serves metadata.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
state=${INGEST_SERVICES_DIR:-$HOME/.cache/ingest-services}

# Versions: keep in step with the defaults in scripts/services/*/pom.xml.
KAFKA_VERSION=${KAFKA_VERSION:-4.3.1}
HADOOP_VERSION=${HADOOP_VERSION:-3.4.3}
KAFKA_PORT=${KAFKA_PORT:-19092}
KAFKA_CONTROLLER_PORT=${KAFKA_CONTROLLER_PORT:-19093}
KAFKA_SECURE_PORT=${KAFKA_SECURE_PORT:-19094}   # SASL_SSL
KAFKA_SASL_PORT=${KAFKA_SASL_PORT:-19095}       # SASL_PLAINTEXT
KAFKA_SSL_PORT=${KAFKA_SSL_PORT:-19096}         # SSL with client certificates
KAFKA_SASL_USER=${KAFKA_SASL_USER:-ingest}
KAFKA_SECURE_TOPIC_PREFIX=${KAFKA_SECURE_TOPIC_PREFIX:-secure-}
HDFS_PORT=${HDFS_PORT:-19000}
HDFS_HTTP_PORT=${HDFS_HTTP_PORT:-19870}
INGEST_KERBEROS=${INGEST_KERBEROS:-0}            # 1: the secured HDFS too (or: start --kerberos)
HDFS_KERBEROS_PORT=${HDFS_KERBEROS_PORT:-19010}
HDFS_KERBEROS_HTTP_PORT=${HDFS_KERBEROS_HTTP_PORT:-19880}
KDC_PORT=${KDC_PORT:-19088}
HDFS_KERBEROS_REALM=${HDFS_KERBEROS_REALM:-INGEST.TEST}   # NAME.DOMAIN (MiniKdc's form)
HDFS_KERBEROS_USER=${HDFS_KERBEROS_USER:-ingest}           # the client principal's name
START_TIMEOUT=${SERVICES_START_TIMEOUT:-180}   # seconds, per service, after the jars are there
STOP_TIMEOUT=${SERVICES_STOP_TIMEOUT:-30}      # seconds before kill -9
# Test fixtures: small heaps, the serial collector (few GC threads) and only the C1 JIT
# (TieredStopAtLevel=1: about a third less CPU and time to start, plenty fast for tests).
KAFKA_JAVA_OPTS=${KAFKA_JAVA_OPTS:--Xmx256m -Xms64m -XX:+UseSerialGC -XX:TieredStopAtLevel=1}
HDFS_JAVA_OPTS=${HDFS_JAVA_OPTS:--Xmx384m -Xms64m -XX:+UseSerialGC -XX:TieredStopAtLevel=1}
JAVA=${JAVA_HOME:+$JAVA_HOME/bin/}java
JAVAC=${JAVA_HOME:+$JAVA_HOME/bin/}javac
PYTHON=${PYTHON:-python3}
timeout=$(command -v timeout >/dev/null && echo "timeout 20" || true)   # GNU coreutils, if there

kafka_dir=$state/kafka
kafka_tls=$kafka_dir/tls
kafka_secrets=$kafka_dir/secure.env   # the password of this start, and whether the ACLs were made
hdfs_dir=$state/hdfs
kafka_lib=$state/lib/kafka-$KAFKA_VERSION
hdfs_lib=$state/lib/hadoop-$HADOOP_VERSION
kdc_lib=$state/lib/minikdc-$HADOOP_VERSION
secure_dir=$state/hdfs-kerberos

log() { echo "services: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# ---------------------------------------------------------------- helpers

# alive PIDFILE MAINCLASS: the recorded pid runs and is still our JVM (not a reused pid).
alive() {
    local pid
    pid=$(cat "$1" 2>/dev/null) || return 1
    [ -n "$pid" ] && ps -ww -p "$pid" -o args= 2>/dev/null | grep -q -- "$2"  # -ww: ps cuts at 80 columns without a terminal
}

# port_open PORT: something accepts TCP connections on 127.0.0.1:PORT (bash's /dev/tcp, no nc needed).
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# fetch_lib NAME POMDIR OUTDIR [-Dprop=value...]: copy the pom's runtime classpath into
# OUTDIR once; a .complete marker makes an interrupted download start over.
fetch_lib() {
    local name=$1 pom=$2 out=$3
    shift 3
    [ -f "$out/.complete" ] && return 0
    command -v mvn >/dev/null || die "mvn not found (needed once, to download the $name jars)"
    log "downloading $name jars into $out (first run only)..."
    rm -rf "$out.tmp" && mkdir -p "$out.tmp"
    # -B/-ntp/style.color: plain output; MAVEN_OPTS: keep Maven's own JVM small.
    if ! MAVEN_OPTS=${MAVEN_OPTS:--Xmx256m} mvn -B -ntp -q -Dstyle.color=never -f "$pom/pom.xml" \
            dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$out.tmp" "$@" \
            >"$out.mvn.log" 2>&1; then
        tail -n 30 "$out.mvn.log" | sed 's/\x1b\[[0-9;]*m//g' >&2   # without colour codes
        rm -rf "$out.tmp"
        die "Maven could not fetch the $name jars (full log: $out.mvn.log)"
    fi
    touch "$out.tmp/.complete"
    rm -rf "$out" && mv "$out.tmp" "$out"
}

# wait_until NAME PIDFILE MAINCLASS LOGFILE CHECK...: run CHECK every second until it
# succeeds; fail early when the JVM dies, fail after START_TIMEOUT seconds.
wait_until() {
    local name=$1 pidfile=$2 main=$3 logfile=$4 t0=$SECONDS
    shift 4
    until "$@" >/dev/null 2>&1; do
        # Just launched, the child may still be the forked shell, not yet the JVM: look again before giving up.
        if ! alive "$pidfile" "$main" && ! { sleep 1 && alive "$pidfile" "$main"; }; then
            log "$name exited during start-up; last lines of $logfile:"
            tail -n 40 "$logfile" >&2
            return 1
        fi
        if [ $((SECONDS - t0)) -ge "$START_TIMEOUT" ]; then
            log "$name did not answer within ${START_TIMEOUT}s; last lines of $logfile:"
            tail -n 40 "$logfile" >&2
            return 1
        fi
        sleep 1
    done
    log "$name is up ($((SECONDS - t0))s)"
}

# stop_one NAME PIDFILE MAINCLASS: SIGTERM (both JVMs shut down cleanly on it), then SIGKILL.
stop_one() {
    local name=$1 pidfile=$2 main=$3 pid t0=$SECONDS
    if ! alive "$pidfile" "$main"; then
        rm -f "$pidfile"
        return 0
    fi
    pid=$(cat "$pidfile")
    log "stopping $name (pid $pid)"
    kill "$pid" 2>/dev/null || true
    while alive "$pidfile" "$main"; do
        if [ $((SECONDS - t0)) -ge "$STOP_TIMEOUT" ]; then
            log "$name still running after ${STOP_TIMEOUT}s, sending SIGKILL"
            kill -9 "$pid" 2>/dev/null || true
            sleep 1
            break
        fi
        sleep 0.5
    done
    rm -f "$pidfile"
}

check_java() {
    local v
    command -v "$JAVA" >/dev/null || die "java not found (Java 17+ is needed; set JAVA_HOME)"
    # First line looks like: openjdk version "17.0.15" 2025-04-15  (or "1.8.0_392").
    v=$("$JAVA" -version 2>&1 | sed -n '1s/.*version "\([0-9]*\).*/\1/p')
    [ "${v:-0}" -ge 17 ] || die "Java 17+ is needed (Kafka 4 brokers), found: $("$JAVA" -version 2>&1 | head -n 1)"
}

# ---------------------------------------------------------------- Kafka

kafka_main=kafka.Kafka
kafka_pid=$kafka_dir/kafka.pid
kafka_log=$kafka_dir/kafka.log

kafka_ready() {
    port_open "$KAFKA_PORT" || return 1
    # A listening socket is not enough: the broker only serves metadata once it has
    # caught up with the controller.  Ask for it when kafka-python is there...
    # (`timeout`: kafka-python's own request timeouts differ between its versions.)
    if "$PYTHON" -c 'import kafka' 2>/dev/null; then
        $timeout "$PYTHON" - "127.0.0.1:$KAFKA_PORT" <<'EOF'
import sys
from kafka import KafkaConsumer
c = KafkaConsumer(bootstrap_servers=sys.argv[1])
c.topics()  # a MetadataRequest
c.close()
EOF
    else
        # ...otherwise trust the broker's own "started" line.
        grep -q 'Kafka Server started' "$kafka_log"
    fi
}

fetch_kafka() {
    fetch_lib kafka "$here/services/kafka" "$kafka_lib" -Dkafka.version="$KAFKA_VERSION"
}

# make_tls: a new CA, the broker's key and certificate chain in one PEM file (for the host "localhost"
# only), and a client's key and certificate for the SSL listener (subject CN: the SASL user).
make_tls() {
    rm -rf "$kafka_tls" && mkdir -p "$kafka_tls" && chmod 700 "$kafka_tls"
    if ! (
        set -e
        cd "$kafka_tls"
        key=(-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes)   # PKCS#8, which Kafka's PEM key stores read
        openssl req -x509 "${key[@]}" -keyout ca.key -out ca.pem -days 30 -subj "/CN=ingest test CA" \
            -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
        printf '%s\n' basicConstraints=CA:FALSE keyUsage=digitalSignature extendedKeyUsage=serverAuth \
            subjectAltName=DNS:localhost >broker.ext
        printf '%s\n' basicConstraints=CA:FALSE keyUsage=digitalSignature extendedKeyUsage=clientAuth >client.ext
        for who in broker client; do
            cn=localhost
            [ "$who" = client ] && cn=$KAFKA_SASL_USER
            openssl req -new "${key[@]}" -keyout "$who.key" -out "$who.csr" -subj "/CN=$cn"
            openssl x509 -req -in "$who.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days 30 \
                -extfile "$who.ext" -out "$who.pem"
        done
        cat broker.key broker.pem ca.pem >broker-keystore.pem
    ) >"$kafka_dir/openssl.log" 2>&1; then
        tail -n 20 "$kafka_dir/openssl.log" >&2
        die "making the Kafka certificates failed (log: $kafka_dir/openssl.log)"
    fi
}

# secure_properties PASSWORD: the server.properties lines of the secured listeners and the ACL authorizer.
secure_properties() {
    local plain scram listener mechanism
    plain="org.apache.kafka.common.security.plain.PlainLoginModule required user_$KAFKA_SASL_USER=\"$1\";"
    scram="org.apache.kafka.common.security.scram.ScramLoginModule required;"
    cat <<EOF
sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512
ssl.keystore.type=PEM
ssl.keystore.location=$kafka_tls/broker-keystore.pem
ssl.truststore.type=PEM
ssl.truststore.location=$kafka_tls/ca.pem
listener.name.ssl.ssl.client.auth=required
# A client certificate's principal is its subject's CN: the SASL user's certificate is that user.
ssl.principal.mapping.rules=RULE:^CN=([^,]*)\$/\$1/,DEFAULT
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
# PLAINTEXT (the controller, the broker itself, the plain listener's clients) is ANONYMOUS: all allowed.
super.users=User:ANONYMOUS
EOF
    for listener in sasl_ssl sasl_plaintext; do
        echo "listener.name.$listener.plain.sasl.jaas.config=$plain"
        for mechanism in scram-sha-256 scram-sha-512; do
            echo "listener.name.$listener.$mechanism.sasl.jaas.config=$scram"
        done
    done
}

# kafka_acls: let the SASL user create, read and write the topics (and use the consumer groups and
# transactional ids) named with its prefix, through kafka-python's admin client on the PLAINTEXT listener.
kafka_acls() {
    $timeout "$PYTHON" - "127.0.0.1:$KAFKA_PORT" "User:$KAFKA_SASL_USER" "$KAFKA_SECURE_TOPIC_PREFIX" <<'EOF'
import sys
from kafka.admin import ACL, ACLOperation as Op, ACLPermissionType, ACLResourcePatternType, KafkaAdminClient
from kafka.admin import ResourcePattern, ResourceType as Type

bootstrap, user, prefix = sys.argv[1:]
grants = {
    Type.TOPIC: (Op.CREATE, Op.READ, Op.WRITE, Op.DESCRIBE, Op.DESCRIBE_CONFIGS),
    Type.GROUP: (Op.READ, Op.DESCRIBE),
    Type.TRANSACTIONAL_ID: (Op.WRITE, Op.DESCRIBE),
}
admin = KafkaAdminClient(bootstrap_servers=bootstrap)
acls = [
    ACL(user, "*", op, ACLPermissionType.ALLOW, ResourcePattern(kind, prefix, ACLResourcePatternType.PREFIXED))
    for kind, ops in grants.items()
    for op in ops
]
result = admin.create_acls(acls)
admin.close()
if result["failed"]:
    sys.exit(f"ACLs not created: {result['failed']}")
EOF
}

start_kafka() {
    local cluster_id password listeners advertised protocols secure_props="" scram_users=()
    mkdir -p "$kafka_dir"
    rm -rf "$kafka_dir/data" "$kafka_secrets"     # fresh broker state on every start
    listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,CONTROLLER://127.0.0.1:$KAFKA_CONTROLLER_PORT
    advertised=PLAINTEXT://127.0.0.1:$KAFKA_PORT
    protocols=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
    # The secured listeners need openssl (certificates) and kafka-python (ACLs); without them, the plain broker.
    if ! command -v openssl >/dev/null; then
        log "openssl not found: no secured Kafka listeners (it makes their certificates)"
    elif ! "$PYTHON" -c 'import kafka' 2>/dev/null; then
        log "kafka-python is not importable by $PYTHON: no secured Kafka listeners (it makes their ACLs)"
    else
        make_tls
        password=$(head -c 18 /dev/urandom | base64 | tr -d '+/=\n')
        (umask 077 && echo "KAFKA_SASL_PASSWORD=$password" >"$kafka_secrets")
        # advertised as "localhost", the name in the broker's certificate
        listeners+=,SASL_SSL://127.0.0.1:$KAFKA_SECURE_PORT,SASL_PLAINTEXT://127.0.0.1:$KAFKA_SASL_PORT,SSL://127.0.0.1:$KAFKA_SSL_PORT
        advertised+=,SASL_SSL://localhost:$KAFKA_SECURE_PORT,SASL_PLAINTEXT://localhost:$KAFKA_SASL_PORT,SSL://localhost:$KAFKA_SSL_PORT
        protocols+=,SASL_SSL:SASL_SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SSL:SSL
        secure_props=$(secure_properties "$password")
        scram_users=(--add-scram "SCRAM-SHA-256=[name=$KAFKA_SASL_USER,password=$password]"
                     --add-scram "SCRAM-SHA-512=[name=$KAFKA_SASL_USER,password=$password]")
    fi

    cat >"$kafka_dir/server.properties" <<EOF
# Written by scripts/services.sh: single-node KRaft (combined broker + controller).
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$KAFKA_CONTROLLER_PORT
listeners=$listeners
advertised.listeners=$advertised
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=$protocols
log.dirs=$kafka_dir/data
num.partitions=1
default.replication.factor=1
auto.create.topics.enable=true
# One node: internal topics can only have one replica; one partition each keeps
# the first consumer-group / transaction use fast.
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
share.coordinator.state.topic.num.partitions=1
# Tests should not wait 3 s for the first consumer-group rebalance.
group.initial.rebalance.delay.ms=0
# Fewer idle threads.
num.network.threads=2
num.io.threads=2
$secure_props
EOF
    # Kafka 4 logs through log4j2; everything goes to stdout, which is the log file.
    # log4j2's own shutdown hook would stop logging in the middle of Kafka's shutdown.
    cat >"$kafka_dir/log4j2.properties" <<'EOF'
status = warn
shutdownHook = disable
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = out
EOF

    # KRaft needs formatted storage.  Cluster id: 16 random bytes, URL-safe base64 without
    # padding, not starting with "-" (the tool would take it for an option; Kafka's own
    # Uuid.randomUuid() skips those too).  Static controller.quorum.voters, so no
    # --standalone (that is for controller.quorum.bootstrap.servers, the dynamic quorum).
    cluster_id=-
    while [ "${cluster_id#-}" != "$cluster_id" ]; do
        cluster_id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')
    done
    if ! "$JAVA" -Xmx128m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Dlog4j2.configurationFile="$kafka_dir/log4j2.properties" \
            -cp "$kafka_lib/*" kafka.tools.StorageTool format -t "$cluster_id" \
            -c "$kafka_dir/server.properties" ${scram_users[@]+"${scram_users[@]}"} >"$kafka_log" 2>&1; then
        tail -n 20 "$kafka_log" >&2
        die "formatting Kafka storage failed (log: $kafka_log)"
    fi

    launch_kafka
}

# launch_kafka: run the broker on the configured, formatted storage (start, restart-kafka).
launch_kafka() {
    log "starting Kafka $KAFKA_VERSION on 127.0.0.1:$KAFKA_PORT (log: $kafka_log)"
    # shellcheck disable=SC2086  # KAFKA_JAVA_OPTS is a list of options
    nohup "$JAVA" $KAFKA_JAVA_OPTS -XX:+ExitOnOutOfMemoryError \
        -Dlog4j2.configurationFile="$kafka_dir/log4j2.properties" \
        -cp "$kafka_lib/*" "$kafka_main" "$kafka_dir/server.properties" \
        </dev/null >>"$kafka_log" 2>&1 &
    echo $! >"$kafka_pid"
}

# ---------------------------------------------------------------- HDFS

hdfs_main=org.apache.hadoop.test.MiniDFSClusterManager
hdfs_pid=$hdfs_dir/hdfs.pid
hdfs_log=$hdfs_dir/hdfs.log

hdfs_ready() {
    # details.json is written after MiniDFSCluster.waitActive(), i.e. once the DataNode
    # has registered (so writes work, not only listings).
    [ -s "$hdfs_dir/details.json" ] &&
        curl -fsS --max-time 5 "http://127.0.0.1:$HDFS_HTTP_PORT/webhdfs/v1/?op=LISTSTATUS" |
        grep -q FileStatuses
}

fetch_hdfs() {
    local pins=()
    # The pom's pins of jackson and the test jars default to what Hadoop 3.4.x builds with.
    case $HADOOP_VERSION in
        3.5.*) pins=(-Djackson.version=2.18.6 -Dmockito.version=4.11.0 -Djunit5.version=5.13.3) ;;
    esac
    fetch_lib hdfs "$here/services/hdfs" "$hdfs_lib" -Dhadoop.version="$HADOOP_VERSION" ${pins[@]+"${pins[@]}"}
}

start_hdfs() {
    mkdir -p "$hdfs_dir/conf"
    rm -f "$hdfs_dir/details.json"

    # For clients that read HADOOP_CONF_DIR (hdfs-native: hdfs:///path, fsspec.filesystem("hdfs")).
    cat >"$hdfs_dir/conf/core-site.xml" <<EOF
<?xml version="1.0"?>
<!-- Written by scripts/services.sh -->
<configuration>
  <property><name>fs.defaultFS</name><value>hdfs://127.0.0.1:$HDFS_PORT</value></property>
</configuration>
EOF
    # Where WebHDFS is (ingest's fallback client when neither hdfs-native nor libhdfs is installed).
    cat >"$hdfs_dir/conf/hdfs-site.xml" <<EOF
<?xml version="1.0"?>
<!-- Written by scripts/services.sh -->
<configuration>
  <property><name>dfs.namenode.http-address</name><value>127.0.0.1:$HDFS_HTTP_PORT</value></property>
</configuration>
EOF

    log "starting HDFS $HADOOP_VERSION on 127.0.0.1:$HDFS_PORT, WebHDFS :$HDFS_HTTP_PORT (log: $hdfs_log)"
    # -format wipes the previous data (fresh state on every start).  Permissions are off so
    # that any client user (WebHDFS without user.name is "dr.who") may write anywhere.
    # cwd is the state dir because the test utilities create relative directories.
    # shellcheck disable=SC2086  # HDFS_JAVA_OPTS is a list of options
    (cd "$hdfs_dir" && exec nohup "$JAVA" $HDFS_JAVA_OPTS -XX:+ExitOnOutOfMemoryError \
        -Dtest.build.data="$hdfs_dir/data" \
        -cp "$hdfs_lib/*" "$hdfs_main" \
        -format -datanodes 1 -nnport "$HDFS_PORT" -httpport "$HDFS_HTTP_PORT" \
        -writeDetails "$hdfs_dir/details.json" \
        -D hdfs.minidfs.basedir="$hdfs_dir/data" \
        -D dfs.permissions.enabled=false \
        </dev/null >"$hdfs_log" 2>&1) &
    echo $! >"$hdfs_pid"
}

# ---------------------------------------------------------------- Kerberos-secured HDFS

secure_main=SecureHdfs
secure_pid=$secure_dir/hdfs.pid
secure_log=$secure_dir/hdfs.log
secure_classes=$kdc_lib/classes

secure_ready() {
    # details.json: written after waitActive(), once the DataNode has registered (over Kerberos too).
    [ -s "$secure_dir/details.json" ] && port_open "$HDFS_KERBEROS_PORT"
}

# fetch_secure_hdfs: MiniKdc's jars (the classpath is the hdfs jars first, then these) and SecureHdfs compiled.
fetch_secure_hdfs() {
    local src=$here/services/kerberos/SecureHdfs.java
    fetch_lib minikdc "$here/services/kerberos" "$kdc_lib" -Dhadoop.version="$HADOOP_VERSION"
    if [ ! -f "$secure_classes/SecureHdfs.class" ] || [ "$src" -nt "$secure_classes/SecureHdfs.class" ]; then
        command -v "$JAVAC" >/dev/null || die "javac not found (a JDK is needed for --kerberos: it compiles $src)"
        rm -rf "$secure_classes" && mkdir -p "$secure_classes"
        "$JAVAC" -nowarn -d "$secure_classes" -cp "$hdfs_lib/*:$kdc_lib/*" "$src" >&2 ||
            die "compiling $src failed"
    fi
}

start_secure_hdfs() {
    local realm=$HDFS_KERBEROS_REALM keytab=$secure_dir/hdfs.keytab
    local nn=hdfs/localhost@$HDFS_KERBEROS_REALM
    case $realm in *?.?*) ;; *) die "HDFS_KERBEROS_REALM=$realm: expected NAME.DOMAIN (how MiniKdc makes realms)" ;; esac
    rm -rf "$secure_dir/data" "$secure_dir/kdc" "$secure_dir/details.json" "$secure_dir"/*.keytab
    mkdir -p "$secure_dir/conf"
    # For MIT Kerberos clients (kinit, libgssapi_krb5): TCP (MiniKdc's transport), no DNS games with localhost.
    cat >"$secure_dir/krb5.conf" <<EOF
# Written by scripts/services.sh
[libdefaults]
    default_realm = $realm
    udp_preference_limit = 1
    dns_lookup_kdc = false
    dns_lookup_realm = false
    dns_canonicalize_hostname = false
    rdns = false
[realms]
    $realm = {
        kdc = 127.0.0.1:$KDC_PORT
    }
EOF
    # Its clients' HADOOP_CONF_DIR: hdfs-native speaks SASL to the DataNode only when told so here.
    cat >"$secure_dir/conf/core-site.xml" <<EOF
<?xml version="1.0"?>
<!-- Written by scripts/services.sh -->
<configuration>
  <property><name>fs.defaultFS</name><value>hdfs://127.0.0.1:$HDFS_KERBEROS_PORT</value></property>
  <property><name>hadoop.security.authentication</name><value>kerberos</value></property>
</configuration>
EOF
    cat >"$secure_dir/conf/hdfs-site.xml" <<EOF
<?xml version="1.0"?>
<!-- Written by scripts/services.sh -->
<configuration>
  <property><name>dfs.data.transfer.protection</name><value>authentication</value></property>
  <property><name>dfs.namenode.kerberos.principal</name><value>$nn</value></property>
  <property><name>dfs.namenode.http-address</name><value>127.0.0.1:$HDFS_KERBEROS_HTTP_PORT</value></property>
</configuration>
EOF

    log "starting Kerberos-secured HDFS on 127.0.0.1:$HDFS_KERBEROS_PORT, KDC :$KDC_PORT, realm $realm (log: $secure_log)"
    # Hadoop refuses Kerberos on a DataNode with unprivileged ports unless ignore.secure.ports.for.testing;
    # SASL on data transfer is what real clusters with such ports use.
    # shellcheck disable=SC2086  # HDFS_JAVA_OPTS is a list of options
    (cd "$secure_dir" && exec nohup "$JAVA" $HDFS_JAVA_OPTS -XX:+ExitOnOutOfMemoryError \
        -Dtest.build.data="$secure_dir/data" \
        -cp "$secure_classes:$hdfs_lib/*:$kdc_lib/*" "$secure_main" \
        "$secure_dir" "$realm" "$KDC_PORT" "$HDFS_KERBEROS_USER" -- \
        -format -datanodes 1 -nnport "$HDFS_KERBEROS_PORT" -httpport "$HDFS_KERBEROS_HTTP_PORT" \
        -writeDetails "$secure_dir/details.json" \
        -D hdfs.minidfs.basedir="$secure_dir/data" \
        -D dfs.permissions.enabled=false \
        -D hadoop.security.authentication=kerberos \
        -D dfs.block.access.token.enable=true \
        -D dfs.namenode.kerberos.principal="$nn" -D dfs.namenode.keytab.file="$keytab" \
        -D dfs.datanode.kerberos.principal="$nn" -D dfs.datanode.keytab.file="$keytab" \
        -D dfs.web.authentication.kerberos.principal="HTTP/localhost@$realm" \
        -D dfs.web.authentication.kerberos.keytab="$keytab" \
        -D dfs.data.transfer.protection=authentication \
        -D ignore.secure.ports.for.testing=true \
        </dev/null >"$secure_log" 2>&1) &
    echo $! >"$secure_pid"
}

# ---------------------------------------------------------------- commands

print_env() {
    echo "KAFKA_BOOTSTRAP=127.0.0.1:$KAFKA_PORT"
    if grep -q '^ACLS=made$' "$kafka_secrets" 2>/dev/null; then
        echo "KAFKA_SECURE_BOOTSTRAP=localhost:$KAFKA_SECURE_PORT"
        echo "KAFKA_SASL_BOOTSTRAP=localhost:$KAFKA_SASL_PORT"
        echo "KAFKA_SSL_BOOTSTRAP=localhost:$KAFKA_SSL_PORT"
        echo "KAFKA_CA_FILE=$kafka_tls/ca.pem"
        echo "KAFKA_SSL_CERTFILE=$kafka_tls/client.pem"
        echo "KAFKA_SSL_KEYFILE=$kafka_tls/client.key"
        echo "KAFKA_SASL_USER=$KAFKA_SASL_USER"
        grep '^KAFKA_SASL_PASSWORD=' "$kafka_secrets"
        echo "KAFKA_SECURE_TOPIC_PREFIX=$KAFKA_SECURE_TOPIC_PREFIX"
    fi
    echo "HDFS_URL=hdfs://127.0.0.1:$HDFS_PORT"
    echo "WEBHDFS_URL=http://127.0.0.1:$HDFS_HTTP_PORT"
    echo "HADOOP_CONF_DIR=$hdfs_dir/conf"
    if alive "$secure_pid" "$secure_main"; then
        echo "HDFS_KERBEROS_URL=hdfs://127.0.0.1:$HDFS_KERBEROS_PORT"
        echo "HDFS_KERBEROS_CONF_DIR=$secure_dir/conf"
        echo "KRB5_CONFIG=$secure_dir/krb5.conf"
        echo "HDFS_KERBEROS_PRINCIPAL=$HDFS_KERBEROS_USER@$HDFS_KERBEROS_REALM"
        echo "HDFS_KERBEROS_KEYTAB=$secure_dir/client.keytab"
    fi
}

cmd_status() {
    local up=0
    if alive "$kafka_pid" "$kafka_main"; then
        log "kafka: running (pid $(cat "$kafka_pid")), 127.0.0.1:$KAFKA_PORT"
        up=$((up + 1))
    else
        log "kafka: stopped"
    fi
    if alive "$hdfs_pid" "$hdfs_main"; then
        log "hdfs: running (pid $(cat "$hdfs_pid")), 127.0.0.1:$HDFS_PORT, WebHDFS :$HDFS_HTTP_PORT"
        up=$((up + 1))
    else
        log "hdfs: stopped"
    fi
    if alive "$secure_pid" "$secure_main"; then
        log "hdfs-kerberos: running (pid $(cat "$secure_pid")), 127.0.0.1:$HDFS_KERBEROS_PORT, KDC :$KDC_PORT"
    elif [ "$INGEST_KERBEROS" = 1 ]; then
        log "hdfs-kerberos: stopped"
        up=0
    fi
    [ "$up" -eq 2 ] || return 3
    print_env
}

cmd_stop() {
    stop_one kafka "$kafka_pid" "$kafka_main"
    stop_one hdfs "$hdfs_pid" "$hdfs_main"
    stop_one hdfs-kerberos "$secure_pid" "$secure_main"
}

cmd_start() {
    local start_k=0 start_h=0 start_s=0
    alive "$kafka_pid" "$kafka_main" || start_k=1
    alive "$hdfs_pid" "$hdfs_main" || start_h=1
    if [ "$INGEST_KERBEROS" = 1 ] && ! alive "$secure_pid" "$secure_main"; then start_s=1; fi
    if [ "$start_k$start_h$start_s" = 000 ]; then
        cmd_status
        return
    fi
    check_java
    command -v curl >/dev/null || die "curl not found (used to check WebHDFS)"
    # A port taken by something else would otherwise show up as a confusing bind error.
    if [ "$start_k" = 1 ]; then
        check_free_port "$KAFKA_PORT" KAFKA_PORT
        check_free_port "$KAFKA_CONTROLLER_PORT" KAFKA_CONTROLLER_PORT
        check_free_port "$KAFKA_SECURE_PORT" KAFKA_SECURE_PORT
        check_free_port "$KAFKA_SASL_PORT" KAFKA_SASL_PORT
        check_free_port "$KAFKA_SSL_PORT" KAFKA_SSL_PORT
    fi
    if [ "$start_h" = 1 ]; then
        check_free_port "$HDFS_PORT" HDFS_PORT
        check_free_port "$HDFS_HTTP_PORT" HDFS_HTTP_PORT
    fi
    if [ "$start_s" = 1 ]; then
        check_free_port "$HDFS_KERBEROS_PORT" HDFS_KERBEROS_PORT
        check_free_port "$HDFS_KERBEROS_HTTP_PORT" HDFS_KERBEROS_HTTP_PORT
        check_free_port "$KDC_PORT" KDC_PORT
    fi

    # Download first, so a Maven failure leaves nothing running.
    if [ "$start_k" = 1 ]; then fetch_kafka; fi
    if [ "$start_h$start_s" != 00 ]; then fetch_hdfs; fi
    if [ "$start_s" = 1 ]; then fetch_secure_hdfs; fi

    # From here on a failure or Ctrl-C stops what this run started.
    # shellcheck disable=SC2064  # expand now: the flags are locals of this function
    trap "cleanup_started $start_k $start_h $start_s" EXIT
    trap 'exit 130' INT TERM
    # The JVMs boot in parallel; HDFS first, as it is the slower one.
    if [ "$start_h" = 1 ]; then start_hdfs; fi
    if [ "$start_s" = 1 ]; then start_secure_hdfs; fi
    if [ "$start_k" = 1 ]; then start_kafka; fi
    if [ "$start_k" = 1 ]; then
        wait_until kafka "$kafka_pid" "$kafka_main" "$kafka_log" kafka_ready || die "start failed"
        if [ -f "$kafka_secrets" ]; then   # secured listeners: their user's ACLs
            kafka_acls >&2 || die "creating the Kafka ACLs failed"
            echo ACLS=made >>"$kafka_secrets"
        fi
    fi
    if [ "$start_h" = 1 ]; then
        wait_until hdfs "$hdfs_pid" "$hdfs_main" "$hdfs_log" hdfs_ready || die "start failed"
    fi
    if [ "$start_s" = 1 ]; then
        wait_until hdfs-kerberos "$secure_pid" "$secure_main" "$secure_log" secure_ready || die "start failed"
    fi
    trap - EXIT INT TERM
    cmd_status
}

# cleanup_started K H S: on a failed start, stop the services this run launched (1 = launched).
cleanup_started() {
    local rc=$?
    [ "$rc" -eq 0 ] && return 0
    if [ "$1" = 1 ]; then stop_one kafka "$kafka_pid" "$kafka_main"; fi
    if [ "$2" = 1 ]; then stop_one hdfs "$hdfs_pid" "$hdfs_main"; fi
    if [ "$3" = 1 ]; then stop_one hdfs-kerberos "$secure_pid" "$secure_main"; fi
    return "$rc"
}

check_free_port() {
    if port_open "$1"; then die "port $1 is already in use (set $2 to another port)"; fi
}

# restart-kafka [SECONDS]: stop the broker, keep it down SECONDS (default 0), and start it again on the same
# data (tests of a broker restart mid-read, and of an outage longer than a consumer group's session).
cmd_restart_kafka() {
    alive "$kafka_pid" "$kafka_main" || die "kafka is not running"
    stop_one kafka "$kafka_pid" "$kafka_main"
    sleep "${1:-0}"
    launch_kafka
    wait_until kafka "$kafka_pid" "$kafka_main" "$kafka_log" kafka_ready || die "restart failed"
    cmd_status
}

command=${1:-}
if [ "${2:-}" = --kerberos ] && { [ "$command" = start ] || [ "$command" = status ]; }; then INGEST_KERBEROS=1; fi
case $command in
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    restart-kafka) cmd_restart_kafka "${2:-0}" ;;
    *) echo "usage: $0 start|status [--kerberos] | stop | restart-kafka [SECONDS]" >&2; exit 2 ;;
esac
