"""1. Fan-out rate: two posts, one after the other, to an author with N followers, each timed
from publish to last delivery (the first after the consumer starts, with every follower's
placement to compute; the next as a running consumer sees it): until the consumer reports the
batch that made it, its offsets committed (``publish_to_last_delivery_s``), and by the
consumer's own latency figure, the post's envelope time to its last append, before that commit
(``publish_to_delivered_ms``, whole milliseconds: what a follower waits). Next to pipelined
raw APPENDs of the same tokens to the same keys on the same servers, to the wire's limit
measured in the same run (``raw_memcached.noreply_limit``: appends whose outcome nobody reads,
to one server), to a bare Kafka round trip (``kafka_round_trip``; for the smallest post, the
time as many appends take at the noreply limit too: ``noreply_appends_ms``, a floor the
consumer's code does not set, though three servers on more cores than two would lower it), and
to the machine's ceiling for the work: the CPU the next post cost every process of the stack (this
one, the broker, each memcached), per delivery, beyond what each burns idle (measured over
``IDLE_S`` just before the post), against the cores the idle ones leave (``stack_cpu_s``)."""

from __future__ import annotations

import os
import statistics
import threading
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from bench.cache.raw_memcached import noreply_limit, pipelined
from bench.support.graph_builder import build_followers
from bench.support.process_cpu import process_cpu_s
from bench.support.report import Report, Row
from timeline_fanout.cli import gc_policy, wiring
from timeline_fanout.cli.sandbox import sandbox
from timeline_fanout.cli.settings import Settings
from timeline_fanout.consumers.graph_apply import GraphApplier
from timeline_fanout.consumers.loop import BatchReport
from timeline_fanout.graph import ListKind, ListRef
from timeline_fanout.memcache import MemcacheCluster
from timeline_fanout.producers import create_topics
from timeline_fanout_devstack import stack
from timeline_fanout_devstack.home import stack_file

SIZES = [10_000, 100_000, 1_000_000]
# The first post after the consumer starts places every follower's timeline key on the ring;
# the next finds those placements remembered, as a running consumer does (memcache/ring.py).
POSTS = ("p1", "p2")
QUICK = [2_000]
ROUND_TRIPS = 21
IDLE_S = 1.0  # the window over which the stack's idle CPU is measured before the next post


def run(settings: Settings, report: Report) -> None:
    gc_policy.tune_for_consuming()  # the consumers run here as `fanout consume` runs them
    bars: list[tuple[str, float]] = []
    sizes = QUICK if report.quick else SIZES
    with sandbox(settings, "bfnr") as s:  # the stack's servers, started if need be
        limit = noreply_limit(s.memcached_servers[0], max(sizes))
        round_trip = kafka_round_trip(s)
    report.add(noreply_appends_per_s=round(limit), appends=max(sizes))
    report.add(kafka_round_trip_s=round(round_trip, 4), round_trips=ROUND_TRIPS)
    bars.append(("noreply limit", limit))
    for n in sizes:
        with sandbox(settings, "bfan", celebrity_threshold=10 * n) as s:
            row = _one(s, n)
        row["ratio_to_noreply"] = round(row["deliveries_per_s"] / limit, 3)
        row["cpu_ceiling_ratio_to_noreply"] = round(row["cpu_ceiling_deliveries_per_s"] / limit, 3)
        if n == min(sizes):  # a small post's latency, against the broker's own
            row["ratio_to_kafka_round_trip"] = round(
                row["publish_to_delivered_ms"] / 1000 / round_trip, 1
            )
            # A floor under it that is not ours: as many appends at the noreply limit.
            row["noreply_appends_ms"] = round(n / limit * 1000, 1)
            row["noreply_appends_ratio_to_kafka_round_trip"] = round(n / limit / round_trip, 1)
        report.add(**row)
        bars += [(f"{n:,} ours", row["deliveries_per_s"]), (f"{n:,} raw", row["raw_appends_per_s"])]
    report.write(bars, "timeline appends per second")


def _one(s: Settings, n: int) -> Row:
    store = wiring.edge_store(s)
    follow_lists = wiring.list_store(s, store)
    follow_lists.read(ListRef(ListKind.FOLLOWERS, "author"))  # a hot list: in the cache
    started = time.perf_counter()
    build_followers(GraphApplier(store, follow_lists), "author", n)
    build_s = time.perf_counter() - started
    # Active users: their timelines are in the cache (an absent timeline is not delivered to;
    # its reader builds it from the store).
    timelines = wiring.timeline_store(s, store, follow_lists.cache)
    refs = [ListRef(ListKind.TIMELINE, f"f{i}") for i in range(n)]
    for i in range(0, n, 10_000):
        timelines.rebuild_many(refs[i : i + 10_000])

    joined = threading.Event()
    finished: list[float] = []  # when each post's last delivery was reported
    delivered_ms: list[int] = []  # each post's envelope time to its last append
    delivered = [threading.Event() for _ in POSTS]

    def consumer() -> None:  # built in its thread: SQLite connections stay in their thread
        stop = threading.Event()
        loop = wiring.fanout_loop(s, stop)
        stats = loop.applier.stats  # type: ignore[attr-defined]

        def last_delivery(_report: BatchReport) -> None:
            if stats.deliveries >= n * (len(finished) + 1):
                finished.append(time.perf_counter())
                delivered_ms.append(stats.latencies_ms[-1])
                delivered[len(finished) - 1].set()
                if len(finished) == len(POSTS):
                    stop.set()

        loop.observers.append(last_delivery)
        loop.source.await_assignment()
        joined.set()
        loop.run()
        loop.source.close()

    thread = threading.Thread(target=consumer, daemon=True)
    thread.start()
    joined.wait(120)
    published: list[float] = []
    # Around the next post: an idle window, the post, then just after its last delivery (when,
    # and each process's CPU seconds).
    cpu: list[tuple[float, dict[str, float]]] = []
    with wiring.publisher(s) as publisher:
        publisher.publish({"type": "post", "author": "nobody", "post_id": "warm-up"})
        publisher.flush()  # connected and initialised: the clock measures the post, not that
        for post_id, done in zip(POSTS, delivered, strict=True):  # the second after the first
            timed = post_id == POSTS[-1]
            if timed:
                cpu.append((time.perf_counter(), stack_cpu_s()))
                time.sleep(IDLE_S)  # a window of idle CPU to measure, not a wait for anything
                cpu.append((time.perf_counter(), stack_cpu_s()))
            published.append(time.perf_counter())
            publisher.publish({"type": "post", "author": "author", "post_id": post_id})
            publisher.flush()
            done.wait(600)
            if timed:
                cpu.append((time.perf_counter(), stack_cpu_s()))
    thread.join(600)
    first_s, next_s = (done - at for done, at in zip(finished, published, strict=True))
    (idle_at, idle_from), (post_at, post_from), (done_at, done_cpu) = cpu
    idle = {name: (post_from[name] - idle_from[name]) / (post_at - idle_at) for name in idle_from}
    spent = {k: done_cpu[k] - post_from[k] - idle[k] * (done_at - post_at) for k in post_from}
    cpu_per_delivery = sum(spent.values()) / n
    free_cores = (os.cpu_count() or 1) - sum(idle.values())

    keys = [timelines.index_key(r) + b":raw" for r in refs]  # same spread, own items
    cluster = MemcacheCluster(s.memcached_servers)
    pipelined(cluster, b"add", dict.fromkeys(keys, b""))
    raw_s = pipelined(cluster, b"append", dict.fromkeys(keys, b"+0001700000000000/author/p1 "))
    cluster.close()
    return {
        "followers": n,
        "build_s": round(build_s, 2),
        "first_post_s": round(first_s, 3),
        "first_post_deliveries_per_s": round(n / first_s),
        "publish_to_last_delivery_s": round(next_s, 3),
        "publish_to_delivered_ms": delivered_ms[-1],
        "deliveries_per_s": round(n / next_s),
        "raw_appends_per_s": round(n / raw_s),
        "ratio_to_raw": round((n / next_s) / (n / raw_s), 3),
        "cpu_us_per_delivery": round(cpu_per_delivery * 1e6, 2),
        **{f"cpu_us_per_delivery_{name}": round(v / n * 1e6, 2) for name, v in spent.items()},
        "idle_cores": round(sum(idle.values()), 3),
        "cpu_ceiling_deliveries_per_s": round(free_cores / cpu_per_delivery),
    }


def stack_cpu_s() -> dict[str, float]:
    """CPU seconds so far of this process (the consumer and the publisher) and of each server
    of the stack, by name (``memcached`` servers summed): the CPU a post costs, whichever
    process spends it. The cores their idle burn leaves, divided by that per delivery, is the
    most any arrangement of consumers could deliver on this machine."""
    state = stack.StackState.load(stack_file())
    spent = {"consumer": process_cpu_s(os.getpid())}
    for service in state.services if state else []:
        name = "memcached" if service.name.startswith("memcached") else service.name
        spent[name] = spent.get(name, 0.0) + process_cpu_s(service.pid)
    return spent


def kafka_round_trip(s: Settings) -> float:
    """Median seconds from producing one small message to a plain consumer, already fetching
    from the partition's end, receiving it: the broker's floor under a post's latency."""
    topic = f"{s.topic_prefix}.round-trip"
    create_topics(s.kafka, [topic], 1)
    producer = Producer({"bootstrap.servers": s.kafka, "linger.ms": 0})
    consumer = Consumer({"bootstrap.servers": s.kafka, "group.id": topic, "fetch.wait.max.ms": 50})
    # From the partition's end as an offset, not OFFSET_END: a logical end is resolved by the
    # consumer's first fetch, which can come after the first message was produced, and skip it.
    end = _end_offset(consumer, TopicPartition(topic, 0))
    consumer.assign([TopicPartition(topic, 0, end)])
    consumer.poll(1.0)  # fetching from the end before the first message is produced
    trips: list[float] = []
    try:
        for _ in range(ROUND_TRIPS):
            started = time.perf_counter()
            producer.produce(topic, b"x")
            producer.flush(10)
            message = consumer.poll(30)
            if message is None:
                raise RuntimeError(f"{topic}: a message produced was not consumed within 30 s")
            trips.append(time.perf_counter() - started)
    finally:
        consumer.close()
    return statistics.median(trips)


def _end_offset(consumer: Consumer, partition: TopicPartition) -> int:
    """The partition's end offset, asked again while the broker does not know the partition
    yet (a topic just created: ``_UNKNOWN_PARTITION`` until its metadata reaches the client),
    for at most 30 s."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return int(consumer.get_watermark_offsets(partition, timeout=10)[1])
        except KafkaException as exc:
            unknown = exc.args[0].code() == KafkaError._UNKNOWN_PARTITION
            if not unknown or time.monotonic() > deadline:
                raise
            consumer.list_topics(partition.topic, timeout=10)  # fetch its metadata again
