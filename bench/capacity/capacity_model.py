"""The capacity model: what 1M, 100M and 1B users need, from the rates measured here.

Pure: it reads figures from ``bench/results/*.json`` and computes; it starts no server. Every
figure it takes from a benchmark is named in ``load_measured`` (file and field), every other
input is a named constant below with where it comes from. ``python -m bench capacity-model``
writes the table (``capacity-model.json`` and ``capacity-model.md`` beside the other results);
``docs/capacity.md`` embeds the Markdown and explains each column.

The formulas (``plan``), per size ``N`` users:

- active users ``A = N * ACTIVE_FRACTION``; reads, posts and graph events scale with ``A`` from
  Twitter's 2012 figures (300k reads/s and 5k posts/s for ``TWITTER_2012_ACTIVE_USERS``);
- edges ``E = N * MEAN_FOLLOWING``, follower counts Zipf: the user of rank ``r`` has
  ``min(E * r**-s / H(N, s), N - 1)`` followers; authors above ``CELEBRITY_THRESHOLD`` are not
  fanned out (readers merge their posts), so a post, its author drawn uniformly, is delivered
  to ``(followers of non-celebrities) / N`` timelines on average;
- a fan-out process takes ``1 / (post overhead + deliveries per post / deliveries per s)``
  posts a second; processes = ceil(peak rate / rate per process), partitions = the processes
  times ``PARTITION_HEADROOM`` (at least ``MIN_PARTITIONS``), API cores = ceil(reads/s /
  reads/s per core);
- memcached bytes = timelines (``A`` items of ``TIMELINE_HELD`` entries) + follower and
  following lists of active users (``2 * E * ACTIVE_FRACTION`` members) + post bodies read in
  the last ``CACHE_HEAL_S``, each with memcached's per-item overhead and slab waste; servers =
  the larger of memory / ``MEMCACHED_GB_PER_SERVER`` and operations / ``MEMCACHED_OPS_PER_SERVER``;
- store bytes = ``E`` edges (and each day's posts) times the bytes measured per row.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson

from timeline_fanout.consumers.positions import OFFSET_BITS, position
from timeline_fanout.graph.lists.tokens import token
from timeline_fanout.graph.timelines.entries import TimelineEntry

RESULTS = Path(__file__).parents[1] / "results"

# --- The workload: Twitter in 2012 -----------------------------------------------------------
# Raffi Krikorian, "Timelines at Scale" (QCon San Francisco 2012): 150M active users, 300k
# timeline reads/s, timelines of 800 entries held in RAM (Redis) for users active in the last
# 30 days, 3 replicas of each. Rates here are per active user, scaled to each size.
TWITTER_2012_ACTIVE_USERS = 150_000_000
TWITTER_2012_READS_PER_S = 300_000
# 5k posts/s on average, 12k at peak (the same talk's order of magnitude: ~4.6k/s average,
# ~12k/s peaks). The peak factor is applied to posts and graph events.
TWITTER_2012_POSTS_PER_S = 5_000
TWITTER_2012_PEAK_POSTS_PER_S = 12_000
PEAK_FACTOR = TWITTER_2012_PEAK_POSTS_PER_S / TWITTER_2012_POSTS_PER_S
# Reads: the talk's 300k/s is taken as the rate to serve (no separate peak was published).
READ_PEAK_FACTOR = 1.0
# Share of accounts active in the last 30 days: Twitter reported ~140M monthly active users
# (March 2012) against over 500M accounts (2012): ~0.3. Only these users' timelines and lists are
# in memcached; the others are rebuilt from the store when they come back.
ACTIVE_FRACTION = 0.3
# Follows per user: Kwak, Lee, Park, Moon, "What is Twitter, a social network or a news media?"
# (WWW 2010): 41.7M users, 1.47B follow edges, i.e. 35 per user.
MEAN_FOLLOWING = 35.0
# Follower counts by rank follow Zipf with this exponent: the synthetic graph's
# (timeline_fanout.cli.demo.zipf_weights, and the graph `bench capacity` builds). Not fitted to
# Twitter; the rank-1 account is clipped at N - 1 followers.
ZIPF_S = 1.1
# Follow and unfollow events per active user per day. ASSUMED: no published figure was found;
# 2 a day is ~7k events/s average at 1B users.
GRAPH_EVENTS_PER_ACTIVE_USER_DAY = 2.0

# --- The product's own settings (timeline_fanout.cli.settings defaults) ----------------------
TIMELINE_CAP = 800  # Settings.timeline_max (Twitter's 800 entries)
CELEBRITY_THRESHOLD = 100_000  # Settings.celebrity_threshold: not fanned out above this
CHUNK_SIZE = 10_000  # Settings.chunk_size: big authors are fanned out in chunks of this size
CACHE_HEAL_S = 3600  # Settings.cache_heal_s: every cached item expires within this
MIN_PARTITIONS = 6  # Settings.partitions: what `topics create` makes
# A capped timeline is compacted back to the cap by a read that finds more than half of its
# tokens dead (Settings.list_dirty_ratio 0.5, graph/lists/token_lists.py), i.e. past 2 * cap
# entries: a read timeline holds between cap and 2 * cap, taken here as the middle.
TIMELINE_HELD = TIMELINE_CAP * 1.5

# --- Sizes of the ids and texts in production ------------------------------------------------
ID_BYTES = 19  # a 64-bit id in decimal (Twitter's snowflake ids): up to 19 digits
POST_ID_BYTES = 19  # the same for post ids
TEXT_BYTES = 140  # a 2012 tweet
KEY_BYTES = 26  # "{ns}|tl|{id}" with a 2-character namespace and a 19-digit id (model/keys.py)

# --- memcached -------------------------------------------------------------------------------
# Per item: memcached's item header (48 bytes on 64-bit builds) plus the 8-byte CAS value
# (memcached items.h). Slab classes grow by a factor of 1.25 (memcached's -f default), so an
# item wastes up to 25% of its chunk; 12% is the mean for sizes spread evenly within a class.
MEMCACHED_ITEM_OVERHEAD = 56
MEMCACHED_SLAB_WASTE = 1.12
# Facebook, "Scaling Memcache at Facebook" (NSDI 2013): 262k-710k gets/s per server in
# production. The low end, and an APPEND or INCR counted as a get.
MEMCACHED_OPS_PER_SERVER = 262_000
# RAM given to memcached per server. ASSUMED: a 64 GB share of a 2012-class server.
MEMCACHED_GB_PER_SERVER = 64
# Twitter kept 3 replicas of each timeline; this product keeps one copy per key (the client's
# ring places a key on one server), shown beside it for comparison.
TWITTER_TIMELINE_REPLICAS = 3
# Cache operations per timeline read: one multi-GET of five keys on two servers (timeline,
# following shards, celebrity posts; docs/performance.md, "Where the time goes").
CACHE_KEYS_PER_READ = 5
# Cache operations per graph event: per list an index GET, an INCR and an APPEND, two lists
# per event (docs/performance.md, "Why graph ingest is under its goal").
CACHE_OPS_PER_GRAPH_EVENT = 6

# --- Kafka and the store ---------------------------------------------------------------------
# Partitions per topic: twice the consumers needed at peak, so the group can double before a
# topic needs more partitions (raising the count moves keys: docs/capacity.md).
PARTITION_HEADROOM = 2
# Copies of the edge store: a MongoDB replica set of three.
STORE_REPLICAS = 3

GB = 1e9


@dataclass(frozen=True, slots=True)
class Measured:
    """Per-process rates and per-row sizes, each with where it came from."""

    deliveries_per_s: float  # one fan-out process
    graph_events_per_s: float  # one graph consumer, every list cached
    graph_ingest_events_per_s: float  # the same on graph-ingest's small store (10k users)
    reads_per_s_per_core: float  # HTTP timeline reads that walk the page (no page memo)
    memo_reads_per_s_per_core: float  # HTTP timeline reads the page memo answers
    timeline_entry_bytes: float  # one home-timeline entry in memcached
    list_member_bytes: float  # one follower or following list member in memcached
    store_edge_bytes: float  # one edge in the edge store, indexes and counts included
    store_post_bytes: float  # one post with its text in the edge store
    empty_timeline_bytes: float  # one cached timeline with no entries (item, key, marker)
    empty_list_bytes: float  # one cached follower or following list with no members
    # A fan-out process's cost per post apart from its deliveries (store write, follower-list
    # read, Kafka): None when no saturation burst was measured (then posts cost nothing).
    post_overhead_s: float | None
    sources: Mapping[str, str] = field(default_factory=dict)

    def posts_per_s(self, deliveries_per_post: float) -> float:
        """Posts per second one fan-out process takes at this many deliveries per post."""
        return 1 / ((self.post_overhead_s or 0.0) + deliveries_per_post / self.deliveries_per_s)


def _doc(results: Path, name: str) -> dict[str, Any] | None:
    path = results / f"{name}.json"
    if not path.exists():
        return None
    doc: dict[str, Any] = orjson.loads(path.read_bytes())
    return doc


def _rows(doc: dict[str, Any] | None, name: str) -> list[dict[str, Any]]:
    if doc is None:
        raise FileNotFoundError(f"bench/results/{name}.json: run `python -m bench {name}`")
    rows: list[dict[str, Any]] = doc["rows"]
    return rows


def format_sizes() -> dict[str, float]:
    """Bytes per timeline entry and per list member as the code writes them, with production
    id lengths (``ID_BYTES``) and a position of today's clock and the largest offset part."""
    author, post_id = "9" * ID_BYTES, "9" * POST_ID_BYTES
    entry = TimelineEntry(1_800_000_000_000, author, post_id).member
    member = token(True, author, position(1_800_000_000_000, (1 << OFFSET_BITS) - 1))
    return {"timeline_entry_bytes": len(entry) + 2, "list_member_bytes": len(member)}


def load_measured(
    results: Path = RESULTS, capacity_rows: Sequence[Mapping[str, Any]] | None = None
) -> Measured:
    """The figures, from these fields only:

    - ``fanout-rate.json``: ``rows[].deliveries_per_s`` of the row with the most ``followers``;
    - ``graph-ingest.json``: ``rows[].events_per_s`` of the row ``store == "sqlite"``,
      ``lists == "cached"`` (a store of 10k users: the rate used only when no burst of
      follows was measured on a bigger graph, below);
    - ``api.json``: ``rows[].walked_timeline_per_s`` and ``rows[].timeline_per_s`` of the rows
      with ``connections == 64``, divided by ``machine.cpus`` (the server's two workers share
      those cores with wrk, memcached and the broker: a lower bound per core);
    - ``capacity.json`` (or ``capacity_rows``, a run's own rows): the row ``sizes``
      (``timeline_entry_bytes``, ``list_member_bytes``, ``store_edge_bytes``,
      ``store_post_bytes``, ``empty_timeline_bytes``, ``empty_list_bytes``), measured by
      ``python -m bench capacity`` on memcached's and SQLite's own counters; and, when the
      load ran, the row ``burst`` of ``consumer == "fanout"`` (``events_per_s``,
      ``deliveries_per_event``): ``post_overhead_s = 1 / events_per_s - deliveries_per_event
      / deliveries_per_s``, the time a post costs a fan-out process beyond its deliveries;
      and the row ``burst`` of ``consumer == "graph"`` (``events_per_s``): the graph rate
      on the run's graph, used instead of graph-ingest's.
    """
    fanout = _rows(_doc(results, "fanout-rate"), "fanout-rate")
    biggest = max((r for r in fanout if "deliveries_per_s" in r), key=lambda r: r["followers"])
    ingest = _rows(_doc(results, "graph-ingest"), "graph-ingest")
    cached = next(r for r in ingest if r.get("store") == "sqlite" and r.get("lists") == "cached")
    api_doc = _doc(results, "api")
    api = _rows(api_doc, "api")
    assert api_doc is not None
    cpus = int(api_doc["machine"]["cpus"])
    walked = next(r for r in api if r.get("connections") == 64 and "walked_timeline_per_s" in r)
    memo = next(r for r in api if r.get("connections") == 64 and "timeline_per_s" in r)
    sources = {
        "deliveries_per_s": f"fanout-rate.json deliveries_per_s, {biggest['followers']:,} "
        "followers",
        "graph_events_per_s": "graph-ingest.json events_per_s, sqlite, lists cached",
        "graph_ingest_events_per_s": "graph-ingest.json events_per_s, sqlite, lists cached",
        "reads_per_s_per_core": f"api.json walked_timeline_per_s at c=64 / {cpus} cpus",
        "memo_reads_per_s_per_core": f"api.json timeline_per_s at c=64 / {cpus} cpus",
    }
    if capacity_rows is None:
        capacity_rows = _rows(_doc(results, "capacity"), "capacity")
    found = next((r for r in capacity_rows if r.get("row") == "sizes"), None)
    if found is None:
        raise FileNotFoundError("bench/results/capacity.json: run `python -m bench capacity`")
    sizes = {k: float(found[k]) for k in _SIZE_FIELDS}
    sources.update({k: "capacity.json sizes (memcached and SQLite counters)" for k in sizes})
    deliveries_per_s = float(biggest["deliveries_per_s"])
    post_overhead_s = None
    burst = _run_burst(capacity_rows, "fanout")
    if burst is not None:
        per_post = 1 / float(burst["events_per_s"])
        post_overhead_s = max(per_post - float(burst["deliveries_per_event"]) / deliveries_per_s, 0)
        sources["post_overhead_s"] = (
            f"capacity.json burst of {burst['events']:,} posts, {burst['events_per_s']:,} "
            f"posts/s at {burst['deliveries_per_event']} deliveries each"
        )
    else:
        sources["post_overhead_s"] = "NOT MEASURED (no capacity burst): posts cost nothing"
    graph_events_per_s = float(cached["events_per_s"])
    follows = _run_burst(capacity_rows, "graph")
    run = next((r for r in capacity_rows if r.get("row") == "graph"), None)
    if follows is not None and run is not None:
        graph_events_per_s = float(follows["events_per_s"])
        sources["graph_events_per_s"] = (
            f"capacity.json burst of {follows['events']:,} follows on a store of "
            f"{run['edges_stored']:,} edges"
        )
    return Measured(
        graph_events_per_s=graph_events_per_s,
        graph_ingest_events_per_s=float(cached["events_per_s"]),
        deliveries_per_s=deliveries_per_s,
        post_overhead_s=post_overhead_s,
        reads_per_s_per_core=float(walked["walked_timeline_per_s"]) / cpus,
        memo_reads_per_s_per_core=float(memo["timeline_per_s"]) / cpus,
        sources=sources,
        **sizes,
    )


_SIZE_FIELDS = (
    "timeline_entry_bytes",
    "list_member_bytes",
    "store_edge_bytes",
    "store_post_bytes",
    "empty_timeline_bytes",
    "empty_list_bytes",
)


@dataclass(frozen=True, slots=True)
class Workload:
    """One deployment's load. ``twitter_2012`` scales Twitter's rates to a number of users;
    ``bench capacity`` states its own."""

    users: int
    edges: float
    active_users: float
    reads_per_s: float
    posts_per_s: float
    peak_posts_per_s: float
    graph_events_per_s: float
    peak_graph_events_per_s: float
    zipf_s: float = ZIPF_S
    celebrity_threshold: int = CELEBRITY_THRESHOLD
    chunk_size: int = CHUNK_SIZE
    timeline_entries: float = TIMELINE_HELD  # entries held per cached timeline
    body_window_s: float = CACHE_HEAL_S  # post bodies stay cached this long

    @classmethod
    def twitter_2012(cls, users: int) -> Workload:
        active = users * ACTIVE_FRACTION
        share = active / TWITTER_2012_ACTIVE_USERS
        graph = active * GRAPH_EVENTS_PER_ACTIVE_USER_DAY / 86_400
        return cls(
            users=users,
            edges=users * MEAN_FOLLOWING,
            active_users=active,
            reads_per_s=TWITTER_2012_READS_PER_S * share * READ_PEAK_FACTOR,
            posts_per_s=TWITTER_2012_POSTS_PER_S * share,
            peak_posts_per_s=TWITTER_2012_PEAK_POSTS_PER_S * share,
            graph_events_per_s=graph,
            peak_graph_events_per_s=graph * PEAK_FACTOR,
        )


@dataclass(frozen=True, slots=True)
class Followers:
    """The Zipf follower distribution's figures the plan needs."""

    celebrities: int  # authors above the threshold: merged at read time
    celebrity_followers: float  # edges into celebrities
    fanned_out_followers: float  # edges into everyone else: what posts are delivered along
    largest_fanned_out: float  # followers of the biggest author still fanned out
    largest: float  # followers of rank 1


def _zipf_tail(start: int, stop: int, s: float) -> float:
    """sum(r**-s for r in range(start, stop + 1)), by the midpoint integral (exact enough past
    the first thousands of terms, which are summed one by one)."""
    if stop < start:
        return 0.0
    low: float = (start - 0.5) ** (1 - s)
    high: float = (stop + 0.5) ** (1 - s)
    return (low - high) / (s - 1)


_EXACT_TERMS = 20_000


def zipf_norm(n: int, s: float) -> float:
    exact = min(n, _EXACT_TERMS)
    return math.fsum(r**-s for r in range(1, exact + 1)) + _zipf_tail(exact + 1, n, s)


def followers(n: int, edges: float, s: float, threshold: int) -> Followers:
    """Rank ``r`` has ``min(edges * r**-s / H(n, s), n - 1)`` followers."""
    scale = edges / zipf_norm(n, s)
    total = 0.0
    celebrity = 0.0
    celebrities = 0
    largest_fanned = 0.0
    r = 1
    # Ranks one by one while they are celebrities or clipped (a few thousand at 1B users),
    # then the rest in closed form: below both, nothing is clipped.
    while r <= n:
        f = min(scale * r**-s, n - 1)
        if f <= threshold and f < n - 1:
            break
        total += f
        if f > threshold:
            celebrity += f
            celebrities += 1
        else:
            largest_fanned = max(largest_fanned, f)
        r += 1
    exact = min(n, max(r, _EXACT_TERMS))
    rest = math.fsum(scale * k**-s for k in range(r, exact + 1)) + scale * _zipf_tail(
        exact + 1, n, s
    )
    if r <= n:
        largest_fanned = max(largest_fanned, min(scale * r**-s, n - 1.0))
    total += rest
    return Followers(
        celebrities=celebrities,
        celebrity_followers=celebrity,
        fanned_out_followers=total - celebrity,
        largest_fanned_out=largest_fanned,
        largest=min(scale, n - 1.0),
    )


@dataclass(frozen=True, slots=True)
class Plan:
    users: int
    active_users: float
    edges: float
    celebrities: int
    reads_per_s: float
    posts_per_s: float
    peak_posts_per_s: float
    deliveries_per_post: float
    posts_per_s_per_fanout_process: float
    deliveries_per_s: float
    peak_deliveries_per_s: float
    peak_graph_events_per_s: float
    fanout_processes: int
    graph_processes: int
    posts_partitions: int
    graph_partitions: int
    api_cores: int
    api_cores_memo: int
    largest_post_fanout_s: float  # biggest fanned-out author's post over the group, no queue
    cache_timelines_gb: float
    cache_lists_gb: float
    cache_bodies_gb: float
    cache_gb: float
    cache_ops_per_s: float
    memcached_servers: int
    memcached_servers_by_memory: int
    memcached_servers_by_ops: int
    cache_gb_3_replicas: float
    store_edges_gb: float
    store_posts_gb_per_day: float
    store_gb_replicated: float


def _ceil(x: float) -> int:
    return max(1, math.ceil(x - 1e-9))


def plan(load: Workload, m: Measured) -> Plan:
    f = followers(load.users, load.edges, load.zipf_s, load.celebrity_threshold)
    per_post = f.fanned_out_followers / load.users  # authors drawn uniformly
    deliveries = load.posts_per_s * per_post
    peak_deliveries = load.peak_posts_per_s * per_post
    posts_per_process = m.posts_per_s(per_post)
    fanout_procs = _ceil(load.peak_posts_per_s / posts_per_process)
    graph_procs = _ceil(load.peak_graph_events_per_s / m.graph_events_per_s)
    chunks = _ceil(f.largest_fanned_out / load.chunk_size)
    largest_s = f.largest_fanned_out / (m.deliveries_per_s * min(fanout_procs, chunks))

    active_share = load.active_users / load.users
    timeline_item = load.timeline_entries * m.timeline_entry_bytes + m.empty_timeline_bytes
    timelines = load.active_users * timeline_item * MEMCACHED_SLAB_WASTE
    # Both lists of every active user (followers and following: each edge is a member of two
    # lists), plus each list's own items (index, first shard, counter) as measured empty;
    # shards are 64 KiB, so further shards' overhead is negligible.
    lists = (
        2 * load.edges * active_share * m.list_member_bytes
        + 2 * load.active_users * m.empty_list_bytes
    ) * MEMCACHED_SLAB_WASTE
    body_item = TEXT_BYTES + MEMCACHED_ITEM_OVERHEAD + KEY_BYTES + POST_ID_BYTES
    bodies = load.posts_per_s * load.body_window_s * body_item * MEMCACHED_SLAB_WASTE
    cache = timelines + lists + bodies
    ops = (
        load.reads_per_s * CACHE_KEYS_PER_READ
        + peak_deliveries
        + load.peak_graph_events_per_s * CACHE_OPS_PER_GRAPH_EVENT
    )
    by_memory = _ceil(cache / GB / MEMCACHED_GB_PER_SERVER)
    by_ops = _ceil(ops / MEMCACHED_OPS_PER_SERVER)
    store_edges = load.edges * m.store_edge_bytes
    store_posts_day = load.posts_per_s * 86_400 * m.store_post_bytes
    return Plan(
        users=load.users,
        active_users=load.active_users,
        edges=load.edges,
        celebrities=f.celebrities,
        reads_per_s=load.reads_per_s,
        posts_per_s=load.posts_per_s,
        peak_posts_per_s=load.peak_posts_per_s,
        deliveries_per_post=per_post,
        posts_per_s_per_fanout_process=posts_per_process,
        deliveries_per_s=deliveries,
        peak_deliveries_per_s=peak_deliveries,
        peak_graph_events_per_s=load.peak_graph_events_per_s,
        fanout_processes=fanout_procs,
        graph_processes=graph_procs,
        posts_partitions=max(MIN_PARTITIONS, fanout_procs * PARTITION_HEADROOM),
        graph_partitions=max(MIN_PARTITIONS, graph_procs * PARTITION_HEADROOM),
        api_cores=_ceil(load.reads_per_s / m.reads_per_s_per_core),
        api_cores_memo=_ceil(load.reads_per_s / m.memo_reads_per_s_per_core),
        largest_post_fanout_s=largest_s,
        cache_timelines_gb=timelines / GB,
        cache_lists_gb=lists / GB,
        cache_bodies_gb=bodies / GB,
        cache_gb=cache / GB,
        cache_ops_per_s=ops,
        memcached_servers=max(by_memory, by_ops),
        memcached_servers_by_memory=by_memory,
        memcached_servers_by_ops=by_ops,
        cache_gb_3_replicas=(timelines * TWITTER_TIMELINE_REPLICAS + lists + bodies) / GB,
        store_edges_gb=store_edges / GB,
        store_posts_gb_per_day=store_posts_day / GB,
        store_gb_replicated=store_edges * STORE_REPLICAS / GB,
    )


SIZES = (1_000_000, 100_000_000, 1_000_000_000)


def _n(x: float) -> str:
    """A count for people: 1.2k, 3.4M, 5.6B."""
    for unit, div in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= div:
            return f"{x / div:.3g}{unit}"
    return f"{x:.3g}"


def _gb(x: float) -> str:
    return f"{x:,.0f}" if x >= 10 else f"{x:.2g}"


def markdown(plans: Sequence[Plan], m: Measured) -> str:
    head = ["", *(f"**{_n(p.users)} users**" for p in plans)]
    lines: list[tuple[str, list[str]]] = [
        ("active users (30 days)", [_n(p.active_users) for p in plans]),
        ("edges", [_n(p.edges) for p in plans]),
        ("celebrities (merged at read time)", [f"{p.celebrities:,}" for p in plans]),
        ("timeline reads/s", [_n(p.reads_per_s) for p in plans]),
        (
            "posts/s, average / peak",
            [f"{_n(p.posts_per_s)} / {_n(p.peak_posts_per_s)}" for p in plans],
        ),
        ("deliveries per post", [f"{p.deliveries_per_post:.1f}" for p in plans]),
        (
            "posts/s one fan-out process takes",
            [_n(p.posts_per_s_per_fanout_process) for p in plans],
        ),
        (
            "deliveries/s, average / peak",
            [f"{_n(p.deliveries_per_s)} / {_n(p.peak_deliveries_per_s)}" for p in plans],
        ),
        ("graph events/s at peak", [_n(p.peak_graph_events_per_s) for p in plans]),
        ("**fan-out processes**", [f"**{p.fanout_processes:,}**" for p in plans]),
        ("**graph consumer processes**", [f"**{p.graph_processes:,}**" for p in plans]),
        (
            "**partitions**, posts and tasks / graph",
            [f"**{p.posts_partitions:,} / {p.graph_partitions:,}**" for p in plans],
        ),
        (
            "**API cores**, pages walked (page memo hits)",
            [f"**{p.api_cores:,}** ({p.api_cores_memo:,})" for p in plans],
        ),
        (
            "largest fanned-out post, delivery time (no queue)",
            [f"{p.largest_post_fanout_s:.2g} s" for p in plans],
        ),
        (
            "memcached GB: timelines + lists + bodies",
            [
                f"{_gb(p.cache_timelines_gb)} + {_gb(p.cache_lists_gb)} + {_gb(p.cache_bodies_gb)}"
                for p in plans
            ],
        ),
        ("**memcached GB** (one copy)", [f"**{_gb(p.cache_gb)}**" for p in plans]),
        ("memcached GB, timelines in 3 replicas", [_gb(p.cache_gb_3_replicas) for p in plans]),
        ("memcached operations/s at peak", [_n(p.cache_ops_per_s) for p in plans]),
        (
            "**memcached servers** (by memory / by operations)",
            [
                f"**{p.memcached_servers:,}** ({p.memcached_servers_by_memory:,} / "
                f"{p.memcached_servers_by_ops:,})"
                for p in plans
            ],
        ),
        ("**store GB**, edges (one copy)", [f"**{_gb(p.store_edges_gb)}**" for p in plans]),
        ("store GB, edges in 3 copies", [_gb(p.store_gb_replicated) for p in plans]),
        ("store GB per day of posts (one copy)", [_gb(p.store_posts_gb_per_day) for p in plans]),
    ]
    out = ["| " + " | ".join(head) + " |", "| --- " * len(head) + "|"]
    out += [f"| {label} | " + " | ".join(cells) + " |" for label, cells in lines]
    out += [
        "",
        "Measured inputs: "
        + "; ".join(
            f"{name.replace('_', ' ')} {getattr(m, name):,.1f} ({m.sources.get(name, '?')})"
            for name in (
                "deliveries_per_s",
                "graph_events_per_s",
                "graph_ingest_events_per_s",
                "reads_per_s_per_core",
                "memo_reads_per_s_per_core",
                "timeline_entry_bytes",
                "list_member_bytes",
                "store_edge_bytes",
                "store_post_bytes",
                "empty_timeline_bytes",
                "empty_list_bytes",
            )
        )
        + f"; post overhead {_ms(m.post_overhead_s)} ({m.sources.get('post_overhead_s')})"
        + ".",
    ]
    return "\n".join(out) + "\n"


def _ms(x: float | None) -> str:
    return "none" if x is None else f"{x * 1000:.3f} ms"


def run(settings: object, report: Any) -> None:
    """``python -m bench capacity-model``: the table for ``SIZES`` from ``bench/results``."""
    m = load_measured()
    plans = [plan(Workload.twitter_2012(n), m) for n in SIZES]
    for p in plans:
        report.add(
            **{k: (round(v, 4) if isinstance(v, float) else v) for k, v in asdict(p).items()}
        )
    report.add(row="measured", **{k: v for k, v in asdict(m).items() if k != "sources"})
    report.add(row="sources", **dict(m.sources))
    report.out.mkdir(parents=True, exist_ok=True)
    (report.out / "capacity-model.md").write_text(markdown(plans, m))
    compared = compare_run(_rows(_doc(RESULTS, "capacity"), "capacity"), m)
    for c in compared:
        report.add(row="run against model", **c)
    if compared:
        (report.out / "capacity-run.md").write_text(compare_markdown(compared))
    report.write([(_n(p.users), float(p.fanout_processes)) for p in plans], "fan-out processes")


# -- the run on this machine against the model -----------------------------------------------


def _run_burst(rows: Sequence[Mapping[str, Any]], consumer: str) -> Mapping[str, Any] | None:
    """The burst of ``consumer`` on the run's graph (not the small graph's baseline)."""
    return next(
        (
            r
            for r in rows
            if r.get("row") == "burst"
            and r.get("consumer") == consumer
            and r.get("graph", "run") == "run"
        ),
        None,
    )


def _row(rows: Sequence[Mapping[str, Any]], kind: str, **match: str) -> Mapping[str, Any] | None:
    return next(
        (r for r in rows if r.get("row") == kind and all(r.get(k) == v for k, v in match.items())),
        None,
    )


def compare_run(rows: Sequence[Mapping[str, Any]], m: Measured) -> list[dict[str, Any]]:
    """The model's predictions for a ``bench capacity`` run (its graph and offered rates, this
    machine's measured rates) beside what the run measured; empty when the load did not run."""
    graph, load = _row(rows, "graph"), _row(rows, "load")
    if graph is None or load is None or "seconds" not in load:
        return []
    post_burst, follow_burst = _run_burst(rows, "fanout"), _run_burst(rows, "graph")
    seconds = float(load["seconds"])
    posts = float(load["posts_published"])
    follows = float(load["follows_published"])
    work = Workload(
        users=int(graph["users"]),
        edges=float(graph["edges_stored"]),
        active_users=float(graph["active_users_cached"]),
        reads_per_s=float(load["reads_done"]) / seconds,
        posts_per_s=posts / seconds,
        peak_posts_per_s=posts / seconds,
        graph_events_per_s=follows / seconds,
        peak_graph_events_per_s=follows / seconds,
        timeline_entries=0.0,  # timelines start empty; the entries delivered are added below
        body_window_s=seconds,
    )
    p = plan(work, m)
    delivered = float(load["deliveries"])
    # memcached's ``bytes`` counts item sizes, not the slab chunks they sit in: no slab waste.
    predicted_bytes = (
        (p.cache_lists_gb + p.cache_timelines_gb + p.cache_bodies_gb) * GB / MEMCACHED_SLAB_WASTE
        + delivered * m.timeline_entry_bytes
        + follows * 2 * m.list_member_bytes * work.active_users / work.users
    )
    out: list[dict[str, Any]] = []

    def add(figure: str, predicted: float, measured: float, basis: str) -> None:
        out.append(
            {
                "figure": figure,
                "predicted": round(predicted, 3),
                "measured": round(measured, 3),
                "measured_over_predicted": round(measured / predicted, 3) if predicted else None,
                "basis": basis,
            }
        )

    add(
        "deliveries per post (to cached timelines or not)",
        p.deliveries_per_post,
        (delivered + float(load["deliveries_skipped"])) / posts,
        "Zipf follower counts of the run's graph, authors drawn uniformly",
    )
    add(
        "deliveries/s to cached timelines, steady load",
        p.deliveries_per_s * work.active_users / work.users,
        delivered / seconds,
        "the above times posts/s times the active share; a follow drops its follower's "
        "timeline until the next read, which the model does not count",
    )
    for burst, small, what in (
        (post_burst, _row(rows, "burst", consumer="fanout", graph="small"), "posts"),
        (follow_burst, _row(rows, "burst", consumer="graph", graph="small"), "graph events"),
    ):
        if burst is None or small is None:
            continue
        process = "fan-out process" if what == "posts" else "graph consumer"
        basis = (
            f"the same burst on {small['users']:,} users ({small['edges_stored']:,} edges), "
            "same run"
        )
        add(
            f"{what} per CPU-second of one {process}",
            float(small["events_per_cpu_s"]),
            float(burst["events_per_cpu_s"]),
            basis,
        )
        add(
            f"{what}/s one {process} takes (wall clock, the machine shared)",
            float(small["events_per_s"]),
            float(burst["events_per_s"]),
            basis,
        )
    add(
        "HTTP timeline reads per API CPU-second (pages walked)",
        m.reads_per_s_per_core,
        1000 / float(load["api_cpu_ms_per_read"]),
        "api.json (c=64, texts known) against the server's /proc CPU time per read here: "
        "users drawn at random, so most pages read their texts, some timelines regenerate",
    )
    add(
        "fan-out process busy share under the steady load",
        work.posts_per_s / m.posts_per_s(p.deliveries_per_post),
        float(load["fanout_cpu_s"]) / seconds,
        "posts/s over what one process takes; measured: its CPU seconds per second",
    )
    add(
        "graph consumer busy share under the steady load",
        work.graph_events_per_s / m.graph_events_per_s,
        float(load["graph_cpu_s"]) / seconds,
        "events/s over what one consumer takes; measured: its CPU seconds per second",
    )
    add(
        "memcached bytes (lists, timelines, bodies of the run)",
        predicted_bytes,
        float(load["cache_bytes"]),
        "memcached's bytes statistic; the prediction without slab waste",
    )
    return out


def _fig(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def compare_markdown(compared: Sequence[Mapping[str, Any]]) -> str:
    out = [
        "| figure | model | measured | measured / model | basis |",
        "| --- | --- | --- | --- | --- |",
    ]
    for c in compared:
        ratio = c["measured_over_predicted"]
        out.append(
            f"| {c['figure']} | {_fig(c['predicted'])} | {_fig(c['measured'])} | "
            f"{'' if ratio is None else f'{ratio:.2f}'} | {c['basis']} |"
        )
    return "\n".join(out) + "\n"
