// A producer written as a Node.js app developer would write one, for the contract test
// (tests/producers/test_node_contract.py) and as the example in docs/producing.md: validate each event
// against the shipped schema (ajv, JSON Schema 2020-12), key it by the field the schema's
// description names, and publish it with kafkajs.
//
//   node produce.js BOOTSTRAP PREFIX < events.jsonl     (one JSON event per line)
//
// Prints {"sent": N, "rejected": [{"line": N, "errors": [...]}, ...]} and exits 1 if any line
// was rejected. The producer is idempotent (the broker deduplicates a batch resent after a lost
// acknowledgement, and keeps a partition's batches in order across retries); Apache Kafka grants
// the producer id it needs, the dev broker (Tansu) refuses it.
"use strict";

const fs = require("fs");
const path = require("path");
const readline = require("readline");
const Ajv2020 = require("ajv/dist/2020");
const { Kafka, Partitioners, logLevel } = require("kafkajs");

const SCHEMA = path.join(
  __dirname, "..", "..", "..", "src", "timeline_fanout", "schemas", "jsonschema", "event.json"
);
// Per type, the topic (PREFIX.<topic>) and the key field, as each type's schema describes them.
const ROUTE = {
  follow: { topic: "graph", key: "followee" },
  unfollow: { topic: "graph", key: "followee" },
  post: { topic: "posts", key: "author" },
  post_deleted: { topic: "posts", key: "author" },
  user_removed: { topic: "graph", key: "user" },
};

async function main() {
  const [bootstrap, prefix] = process.argv.slice(2);
  const validate = new Ajv2020().compile(JSON.parse(fs.readFileSync(SCHEMA, "utf8")));
  const kafka = new Kafka({ clientId: "node-producer", brokers: [bootstrap], logLevel: logLevel.ERROR });
  const producer = kafka.producer({
    createPartitioner: Partitioners.DefaultPartitioner, // murmur2, as Java and EventPublisher
    idempotent: true,
    maxInFlightRequests: 1,
  });
  await producer.connect();
  const rejected = [];
  let sent = 0;
  let number = 0;
  for await (const line of readline.createInterface({ input: process.stdin })) {
    number += 1;
    if (!line.trim()) continue;
    const event = JSON.parse(line);
    if (!validate(event)) {
      rejected.push({ line: number, errors: validate.errors.map((e) => `${e.instancePath} ${e.message}`) });
      continue;
    }
    const { topic, key } = ROUTE[event.type];
    // Sent one at a time, in order; a real app would batch with producer.sendBatch.
    await producer.send({
      topic: `${prefix}.${topic}`,
      acks: -1,
      messages: [{ key: event[key], value: JSON.stringify(event) }],
    });
    sent += 1;
  }
  await producer.disconnect();
  process.stdout.write(JSON.stringify({ sent, rejected }) + "\n");
  process.exitCode = rejected.length ? 1 : 0;
}

main().catch((err) => {
  process.stderr.write(`node producer: ${err.stack || err}\n`);
  process.exitCode = 2;
});
