"""The MongoDB edge store, after Socialite's user graph service.

``followers`` holds one document per edge, ``{_f: followee, _t: follower}``, so "followers of X"
is ``find({_f: X}, {_id: 0, _t: 1})``. The unique index on (_f, _t) is what turns a stale write
into a duplicate-key error: every write is an upsert filtered on "stored position older than
mine", so when the stored edge is newer the filter misses, the upsert tries to insert, and the
unique index refuses it. Those errors are the expected outcome of replays, not failures.

"following of X" is either a reverse index on the same collection (``following_mode="index"``,
fine while the graph fits one shard) or a separate ``following`` collection holding the flipped
edges (``"collection"``), so that each collection can be sharded by its own key.

``edge_counts`` holds each user's active follower and following counts (``{_id: user,
followers, following}``), read in one lookup. Without multi-document transactions a count
cannot change atomically with its edge, so every edge document also records whether it is
counted (``c``), and a count moves only with a flip of that mark: after its writes, ``apply``
(and ``remove_user``) settles each edge it touched, flipping ``c`` to ``a`` with a conditional
update that names the state it read (``{_id, a, c}``), and adds +1/-1 for each flip it made.
A flip is made by exactly one settler however many race (the update is atomic on the document,
and a document whose ``a`` moved meanwhile no longer matches), and the last writer of an edge
settles after its own write, so once writers are done ``c == a`` everywhere and each count is
the number of its counted edges: exact under concurrent consumers, replays and
unfollow/refollow races. Not across a crash: a process that dies between its flips and the
``$inc`` that follows them loses those deltas (at most one batch's flips; a redelivered batch
finds its edges settled). ``recounted`` computes the true counts from the edges.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal

from pymongo import ASCENDING, DESCENDING, UpdateOne
from pymongo.collection import Collection
from pymongo.database import Database
from pymongo.errors import BulkWriteError

from graph.edges import (
    EdgeChange,
    EdgeCounts,
    EdgeState,
    PostRecord,
    RemovedUser,
    StoreQueries,
    known,
    newest_first,
    prepare,
)
from graph.keys import ListKind, ListRef
from graph.lists import Snapshot

DUPLICATE_KEY = 11000
FollowingMode = Literal["index", "collection"]
Doc = Mapping[str, Any]


def _older_than(pos: int) -> dict[str, Any]:
    return {"p": {"$lt": pos}}


class MongoEdgeStore(StoreQueries):
    def __init__(self, db: Database[Any], following_mode: FollowingMode = "collection") -> None:
        self._db = db
        self._mode = following_mode
        self._followers: Collection[Any] = db["followers"]
        self._users: Collection[Any] = db["users"]
        self._posts: Collection[Any] = db["posts"]
        self._counts: Collection[Any] = db["edge_counts"]
        self._following: Collection[Any] = (
            db["following"] if following_mode == "collection" else self._followers
        )
        self._ensure_indexes()

    def _ensure_indexes(self) -> None:
        # Unique (_f, _t) guards idempotence; (_f, a, _t, _g) makes the active-member queries
        # covered, group filter included.
        self._followers.create_index([("_f", ASCENDING), ("_t", ASCENDING)], unique=True)
        self._followers.create_index([("_f", 1), ("a", 1), ("_t", 1), ("_g", 1), ("p", 1)])
        self._posts.create_index([("a", ASCENDING), ("ts", DESCENDING)])
        self._users.create_index([("celeb", ASCENDING)], sparse=True)
        if self._mode == "collection":
            self._following.create_index([("_f", ASCENDING), ("_t", ASCENDING)], unique=True)
            self._following.create_index([("_f", 1), ("a", 1), ("_t", 1), ("_g", 1), ("p", 1)])
        else:
            self._followers.create_index([("_t", 1), ("a", 1), ("_f", 1), ("_g", 1), ("p", 1)])

    def _removed(self, users: set[str]) -> dict[str, int]:
        docs = self._users.find({"_id": {"$in": sorted(users)}}, {"removed": 1})
        return {d["_id"]: d["removed"] for d in docs}

    @staticmethod
    def _upserts(changes: Sequence[EdgeChange], flip: bool) -> list[UpdateOne]:
        ops = []
        for c in changes:
            first, second = (c.follower, c.followee) if flip else (c.followee, c.follower)
            ops.append(
                UpdateOne(
                    {"_f": first, "_t": second, **_older_than(c.pos)},
                    {"$set": {"a": c.active, "p": c.pos, "_g": c.group}},
                    upsert=True,
                )
            )
        return ops

    @staticmethod
    def _bulk(collection: Collection[Any], ops: Sequence[Any]) -> set[int]:
        """Run unordered; return the op indexes refused as duplicates (stored edge is newer)."""
        if not ops:
            return set()
        try:
            collection.bulk_write(list(ops), ordered=False)
        except BulkWriteError as exc:
            errors = exc.details.get("writeErrors", [])
            if any(e["code"] != DUPLICATE_KEY for e in errors) or exc.details.get(
                "writeConcernErrors"
            ):
                raise
            return {e["index"] for e in errors}
        return set()

    def apply(self, changes: Sequence[EdgeChange]) -> list[EdgeChange]:
        """Without multi-document transactions, removals are made atomic by ordering (the
        Dekker pattern): a removal records the user as removed, *then* switches edges off; a
        write upserts its edges, *then* checks for removals. Whichever runs second sees the
        other's first step, so a follow older than a removal never stays active."""
        live = prepare(changes, self._removed)
        if self._mode == "collection":
            self._bulk(self._following, self._upserts(live, flip=True))
        self._bulk(self._followers, self._upserts(live, flip=False))
        follows = [c for c in live if c.active]
        removed = self._removed({u for c in follows for u in c.edge}) if follows else {}
        late = {
            c.edge: max(removed.get(c.follower, -1), removed.get(c.followee, -1))
            for c in follows
            if c.pos <= max(removed.get(c.follower, -1), removed.get(c.followee, -1))
        }
        for (follower, followee), pos in late.items():
            self._switch_off({"_f": followee, "_t": follower}, pos)
        self._settle_counts([c.edge for c in live])
        return [c for c in live if c.edge not in late]

    def _switch_off(self, edge: dict[str, str], pos: int) -> None:
        """Switch active edges matching ``edge`` (followers-collection fields) off at ``pos``
        where they are older, in both collections."""
        switch = {"$set": {"a": False, "p": pos}}
        self._followers.update_many({**edge, "a": True, **_older_than(pos)}, switch)
        if self._mode == "collection":
            flipped = {{"_f": "_t", "_t": "_f"}[k]: v for k, v in edge.items()}
            self._following.update_many({**flipped, "a": True, **_older_than(pos)}, switch)

    def positions(self, edges: Sequence[tuple[str, str]]) -> dict[tuple[str, str], EdgeState]:
        by_followee: dict[str, list[str]] = {}
        for follower, followee in edges:
            by_followee.setdefault(followee, []).append(follower)
        found: dict[tuple[str, str], EdgeState] = {}
        for followee, followers in by_followee.items():
            docs = self._followers.find(
                {"_f": followee, "_t": {"$in": followers}}, {"_id": 0, "_t": 1, "a": 1, "p": 1}
            )
            found.update(((d["_t"], followee), EdgeState(bool(d["a"]), d["p"])) for d in docs)
        return found

    def remove_user(self, user: str, pos: int) -> RemovedUser:
        """The user is recorded as removed first (see ``apply``); the neighbours are the edges
        this removal switched off, now or in an earlier attempt, so a retry names them all."""
        self._users.update_one({"_id": user}, {"$max": {"removed": pos}}, upsert=True)
        self._switch_off({"_f": user}, pos)
        self._switch_off({"_t": user}, pos)
        off = {"a": False, "p": pos}
        followers = [d["_t"] for d in self._followers.find({"_f": user, **off}, {"_t": 1})]
        if self._mode == "index":
            found = self._followers.find({"_t": user, **off}, {"_f": 1})
            following = [d["_f"] for d in found]
        else:
            following = [d["_t"] for d in self._following.find({"_f": user, **off}, {"_t": 1})]
        self._settle_counts([(f, user) for f in followers] + [(user, f) for f in following])
        return RemovedUser(tuple(followers), tuple(following))

    def _settle_counts(self, edges: Sequence[tuple[str, str]]) -> None:
        """Bring each ``(follower, followee)`` edge's counted mark to its state, counting the
        flips this call made (see the module's docstring for why that is exact)."""
        if not edges:
            return
        deltas: Counter[tuple[str, str]] = Counter()
        # (collection, its documents' keys as (_f, _t), the counts each _f/_t end moves)
        sides: list[tuple[Collection[Any], list[tuple[str, str]], tuple[str | None, ...]]]
        by_followee = [(followee, follower) for follower, followee in edges]
        if self._mode == "index":
            sides = [(self._followers, by_followee, ("followers", "following"))]
        else:
            sides = [
                (self._followers, by_followee, ("followers", None)),
                (self._following, list(edges), ("following", None)),
            ]
        for collection, keys, fields in sides:
            for doc in self._unsettled(collection, keys):
                counted = {"$ne": True} if not doc.get("c") else True
                flipped = collection.find_one_and_update(
                    {"_id": doc["_id"], "a": doc["a"], "c": counted},
                    {"$set": {"c": doc["a"]}},
                    {"_id": 1},
                )
                if flipped is not None:
                    for end, field in zip(("_f", "_t"), fields, strict=True):
                        if field is not None:
                            deltas[(doc[end], field)] += 1 if doc["a"] else -1
        ops = [
            UpdateOne({"_id": user}, {"$inc": {field: delta}}, upsert=True)
            for (user, field), delta in sorted(deltas.items())
            if delta
        ]
        self._bulk(self._counts, ops)

    @staticmethod
    def _unsettled(collection: Collection[Any], keys: Sequence[tuple[str, str]]) -> list[Doc]:
        """The documents among ``keys`` (``(_f, _t)``) whose counted mark differs from their
        state, read a few hundred keys per query."""
        found: list[Doc] = []
        unique = sorted(set(keys))
        for start in range(0, len(unique), 400):
            chunk = unique[start : start + 400]
            docs = collection.find(
                {"$or": [{"_f": f, "_t": t} for f, t in chunk]},
                {"_f": 1, "_t": 1, "a": 1, "c": 1},
            )
            found += [d for d in docs if bool(d.get("c")) != bool(d["a"])]
        return found

    def snapshot(self, ref: ListRef) -> Snapshot:
        if ref.kind is ListKind.FOLLOWERS:
            collection, key, member = self._followers, "_f", "_t"
        elif self._mode == "index":
            collection, key, member = self._followers, "_t", "_f"
        else:
            collection, key, member = self._following, "_f", "_t"
        docs = list(
            collection.find({key: ref.user, "a": True}, {"_id": 0, member: 1, "p": 1}).sort(
                member, ASCENDING
            )
        )
        return Snapshot([d[member] for d in docs], [d["p"] for d in docs])

    def _page(
        self,
        collection: Collection[Any],
        key: str,
        member: str,
        user: str,
        group: str | None,
        after: str | None,
        limit: int,
    ) -> list[str]:
        query: dict[str, Any] = {key: user, "a": True}
        if after is not None:
            query[member] = {"$gt": after}
        if group is not None:
            query["_g"] = group
        cursor = collection.find(query, {"_id": 0, member: 1}).sort(member, ASCENDING).limit(limit)
        return [d[member] for d in cursor]

    def followers(
        self, user: str, *, group: str | None = None, after: str | None = None, limit: int = 1000
    ) -> list[str]:
        return self._page(self._followers, "_f", "_t", user, group, after, limit)

    def following(
        self, user: str, *, group: str | None = None, after: str | None = None, limit: int = 1000
    ) -> list[str]:
        if self._mode == "index":
            return self._page(self._followers, "_t", "_f", user, group, after, limit)
        return self._page(self._following, "_f", "_t", user, group, after, limit)

    def counts(self, user: str) -> EdgeCounts:
        """One lookup in the maintained counts, whatever the lists' sizes."""
        doc = self._counts.find_one({"_id": user}) or {}
        return EdgeCounts(doc.get("followers", 0), doc.get("following", 0))

    def recounted(self, user: str) -> EdgeCounts:
        following_key = "_t" if self._mode == "index" else "_f"
        return EdgeCounts(
            self._followers.count_documents({"_f": user, "a": True}),
            self._following.count_documents({following_key: user, "a": True}),
        )

    def is_following(self, follower: str, followee: str) -> bool:
        doc = self._followers.find_one({"_f": followee, "_t": follower, "a": True}, {"_id": 1})
        return doc is not None

    def users(self) -> Iterator[str]:
        names = set(self._followers.distinct("_f"))
        names.update(self._followers.distinct("_t"))
        yield from sorted(names)

    def known_users(self, users: Iterable[str]) -> set[str]:
        """Distinct over index prefixes: ``(_f, a, ...)`` on both edge collections (or the
        reverse index), ``(a, ts)`` on posts, and ``_id`` on users."""
        wanted = {"$in": sorted(users)}
        if not wanted["$in"]:
            return set()
        following_key = "_t" if self._mode == "index" else "_f"

        def holders(collection: Collection[Any], key: str, query: dict[str, Any]) -> set[str]:
            return set(collection.distinct(key, {key: wanted, **query}))

        active = holders(self._followers, "_f", {"a": True})
        active |= holders(self._following, following_key, {"a": True})
        seen = holders(self._followers, "_f", {}) | holders(self._following, following_key, {})
        seen |= holders(self._posts, "a", {})
        removed = holders(self._users, "_id", {"removed": {"$exists": True}})
        return known(active, seen, removed)

    def store_posts(self, posts: Sequence[PostRecord]) -> dict[tuple[str, str], int]:
        ops = [
            UpdateOne(
                {"_id": f"{p.author}/{p.post_id}"},
                {"$setOnInsert": {"a": p.author, "i": p.post_id, "ts": p.ts, "text": p.text}},
                upsert=True,
            )
            for p in posts
        ]
        self._bulk(self._posts, ops)  # a concurrent insert of the same post is a duplicate
        ids = [f"{p.author}/{p.post_id}" for p in posts]
        docs = self._posts.find({"_id": {"$in": ids}}, {"a": 1, "i": 1, "ts": 1})
        return {(d["a"], d["i"]): d["ts"] for d in docs}

    def recent_posts(self, authors: Iterable[str], limit: int) -> list[PostRecord]:
        wanted = sorted(authors)
        if not wanted or limit <= 0:
            return []
        cursor = (
            self._posts.find({"a": {"$in": wanted}}, {"a": 1, "i": 1, "ts": 1, "text": 1})
            .sort([("ts", DESCENDING), ("a", DESCENDING), ("i", DESCENDING)])
            .limit(limit)
        )
        return newest_first(
            (PostRecord(d["a"], d["i"], d["ts"], d.get("text")) for d in cursor), limit
        )

    def add_celebrities(self, users: Iterable[str]) -> None:
        ops = [UpdateOne({"_id": u}, {"$set": {"celeb": True}}, upsert=True) for u in users]
        self._bulk(self._users, ops)

    def celebrities(self) -> set[str]:
        return {d["_id"] for d in self._users.find({"celeb": True}, {"_id": 1})}

    def explain_followers(self, user: str) -> Doc:
        """The query plan of "followers of X", for tests and operators checking coverage."""
        plan: Doc = (
            self._followers.find({"_f": user, "a": True}, {"_id": 0, "_t": 1})
            .sort("_t", ASCENDING)
            .explain()
        )
        return plan

    def close(self) -> None:
        self._db.client.close()
