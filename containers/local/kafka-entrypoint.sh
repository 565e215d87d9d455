#!/bin/bash
# One Apache Kafka KRaft node (broker and controller in one JVM), as the local stack runs it
# (timeline_fanout_devstack/kafka_node.py): formats its data directory on the first start, then
# runs the broker in the foreground, logging to stdout.
#   KAFKA_PORT (9092), KAFKA_CONTROLLER_PORT (9093), KAFKA_HOST (127.0.0.1: where both listen and
#   what clients are told), KAFKA_HEAP (-Xmx512m), data in /var/lib/kafka/data
set -euo pipefail
port=${KAFKA_PORT:-9092}
controller=${KAFKA_CONTROLLER_PORT:-9093}
host=${KAFKA_HOST:-127.0.0.1}
data=/var/lib/kafka/data
conf=$(mktemp -d)
cat >"$conf/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
listeners=PLAINTEXT://$host:$port,CONTROLLER://$host:$controller
advertised.listeners=PLAINTEXT://$host:$port
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
controller.quorum.bootstrap.servers=$host:$controller
log.dirs=$data
num.partitions=1
auto.create.topics.enable=false
offsets.topic.replication.factor=1
offsets.topic.num.partitions=10
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
PROPS
cat >"$conf/log4j2.properties" <<PROPS
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = warn
rootLogger.appenderRef.out.ref = out
logger.started.name = kafka.server.KafkaRaftServer
logger.started.level = info
PROPS
jvm=(java "${KAFKA_HEAP:--Xmx512m}" -XX:+UseSerialGC -Djava.awt.headless=true
  "-Dlog4j2.configurationFile=$conf/log4j2.properties" -cp '/opt/kafka/libs/*')
if [ ! -e "$data/meta.properties" ]; then
  # A cluster id as Kafka makes them: base64url of 16 random bytes, never starting with "-".
  id=-
  while [ "${id:0:1}" = "-" ]; do
    id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')
  done
  "${jvm[@]}" kafka.tools.StorageTool format --standalone --cluster-id "$id" \
    --config "$conf/server.properties" >/dev/null
fi
exec "${jvm[@]}" kafka.Kafka "$conf/server.properties"
