"""The MongoDB edge store, after Socialite's user graph service.

``followers`` holds one document per edge, ``{_f: followee, _t: follower}``, so "followers of X"
is ``find({_f: X}, {_id: 0, _t: 1})``.

An edge write is a max-register on the position, in two steps that commute with any other
writer's: (1) insert the edge (an unordered ``insert_many``); the unique index on (_f, _t)
refuses it with a duplicate-key error when the edge exists, and (2) for each refused edge, a
conditional update filtered on the unique key *and* "stored position older than mine", which
MongoDB applies atomically to the one document. After (1) the edge exists whoever inserted it,
so (2) always finds it: the newest position wins whatever the interleaving of concurrent
writers, with no retry loop and no reliance on the server retrying a duplicate-key upsert.
Documents are never deleted (an unfollow is an inactive edge), which is what makes "exists
after (1)" permanent. User documents (a removal's position, the celebrity mark) are written the same
way: insert, then update the one a concurrent writer created first. Only a duplicate-key error on an
insert means "exists"; every other write error is raised. (An upsert filtered on "older than mine"
took every duplicate-key error as "the stored edge is newer": two writers of a new edge both missed,
both inserted, and the loser of the insert dropped its write even when its position was the newer
one.)

"following of X" is either a reverse index on the same collection (``following_mode="index"``,
fine while the graph fits one shard) or a separate ``following`` collection holding the flipped
edges (``"collection"``), so that each collection can be sharded by its own key.

Follower and following counts are counted on the covered index of active edges
(``count_documents`` on ``(_f, a)``): exact whatever the interleaving of writers, but their cost
grows with the list (index keys, not documents). Keeping them beside the edges needs each
change's before-image and a second document written atomically with the edge, which MongoDB
gives only in a transaction; so the count is cached instead, and counted again after the user's
edges change, at most once a second (graph/lists/counts.py). The SQLite store keeps them
(triggers in the edge's own transaction).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal

from pymongo import ASCENDING, DESCENDING, ReadPreference, UpdateOne
from pymongo.collection import Collection
from pymongo.database import Database
from pymongo.errors import BulkWriteError, ConfigurationError

from timeline_fanout.graph.model.edges import (
    EdgeChange,
    EdgeCounts,
    EdgeState,
    PostKey,
    PostRecord,
    PostRef,
    RemovedUser,
    Snapshot,
    StoredBodies,
    known,
    newest_first,
    prepare,
)
from timeline_fanout.graph.model.keys import ListKind, ListRef
from timeline_fanout.graph.stores.queries import StoreQueries

DUPLICATE_KEY = 11000
FollowingMode = Literal["index", "collection"]
LIVE: dict[str, Any] = {"del": {"$exists": False}}  # posts not deleted (``delete_posts``)
Doc = Mapping[str, Any]


# FerretDB v1.24.2 (the Mongo-protocol server the tests run on) never answers an update command
# of 100 or more updates; below that it answers. Against FerretDB alone, update batches are cut
# to this size; against MongoDB a batch is one command (pymongo splits at the server's limit).
FERRETDB_UPDATE_BATCH = 99


def _update_batch(db: Database[Any]) -> int | None:
    return FERRETDB_UPDATE_BATCH if "ferretdbVersion" in db.command("buildInfo") else None


def _older_than(pos: int) -> dict[str, Any]:
    return {"p": {"$lt": pos}}


def _edge_key(change: EdgeChange, flip: bool) -> dict[str, str]:
    first, second = (
        (change.follower, change.followee) if flip else (change.followee, change.follower)
    )
    return {"_f": first, "_t": second}


def _refuse_unsafe_settings(db: Database[Any]) -> None:
    """The write needs its duplicate-key errors back (unacknowledged writes, ``w=0``, return
    none, so a newer change to an existing edge would be dropped unseen), and the removal check
    reads after its own writes (a secondary may not have them yet). A URL that asks for either
    is refused before anything is written."""
    if not db.write_concern.acknowledged:
        raise ConfigurationError(
            "the edge store needs acknowledged writes: remove w=0 from the MongoDB URL"
        )
    if db.read_preference != ReadPreference.PRIMARY:
        raise ConfigurationError(
            "the edge store reads its own writes: remove readPreference from the MongoDB URL "
            f"(it asks for {db.read_preference.name})"
        )


class MongoEdgeStore(StoreQueries):
    counts_kept = False  # counted on the index; cached in front (graph/lists/counts.py)

    def __init__(self, db: Database[Any], following_mode: FollowingMode = "collection") -> None:
        _refuse_unsafe_settings(db)
        self._db = db
        self._mode = following_mode
        self._update_batch = _update_batch(db)
        self._followers: Collection[Any] = db["followers"]
        self._users: Collection[Any] = db["users"]
        self._posts: Collection[Any] = db["posts"]
        self._following: Collection[Any] = (
            db["following"] if following_mode == "collection" else self._followers
        )
        self._ensure_indexes()

    def _update_many(self, collection: Collection[Any], ops: Sequence[UpdateOne]) -> None:
        """Unordered updates: one command, or batches of ``FERRETDB_UPDATE_BATCH`` on FerretDB."""
        step = self._update_batch or len(ops) or 1
        for start in range(0, len(ops), step):
            collection.bulk_write(list(ops[start : start + step]), ordered=False)

    def _ensure_indexes(self) -> None:
        # Unique (_f, _t) guards idempotence; (_f, a, _t, _g) makes the active-member queries
        # covered, group filter included.
        self._followers.create_index([("_f", ASCENDING), ("_t", ASCENDING)], unique=True)
        self._followers.create_index([("_f", 1), ("a", 1), ("_t", 1), ("_g", 1), ("p", 1)])
        # (a, ts, i): an author's page past a cursor is one index range, ties on ts included.
        self._posts.create_index([("a", ASCENDING), ("ts", DESCENDING), ("i", DESCENDING)])
        self._users.create_index([("celeb", ASCENDING)], sparse=True)
        if self._mode == "collection":
            self._following.create_index([("_f", ASCENDING), ("_t", ASCENDING)], unique=True)
            self._following.create_index([("_f", 1), ("a", 1), ("_t", 1), ("_g", 1), ("p", 1)])
        else:
            self._followers.create_index([("_t", 1), ("a", 1), ("_f", 1), ("_g", 1), ("p", 1)])

    def _removed(self, users: set[str]) -> dict[str, int]:
        # A user document can exist without a removal: celebrities are recorded there too.
        query = {"_id": {"$in": sorted(users)}, "removed": {"$exists": True}}
        docs = self._users.find(query, {"removed": 1})
        return {d["_id"]: d["removed"] for d in docs}

    @staticmethod
    def _insert_absent(collection: Collection[Any], docs: list[dict[str, Any]]) -> list[int]:
        """Insert unordered; return the indexes of ``docs`` refused because a document with the
        same unique key exists. Any other write error, or a write-concern error, is raised."""
        if not docs:
            return []
        try:
            collection.insert_many(docs, ordered=False)
        except BulkWriteError as exc:
            errors = exc.details.get("writeErrors", [])
            if any(e["code"] != DUPLICATE_KEY for e in errors) or exc.details.get(
                "writeConcernErrors"
            ):
                raise
            return [e["index"] for e in errors]
        return []

    def _write_documents(
        self,
        collection: Collection[Any],
        docs: Sequence[dict[str, Any]],
        update: Callable[[dict[str, Any]], dict[str, Any]],
    ) -> None:
        """Create each document, or apply ``update(doc)`` to the one that exists (see the
        module docstring): two writers creating one document at once both succeed, whether or
        not the server retries a duplicate-key upsert."""
        existing = self._insert_absent(collection, list(docs))
        ops = [UpdateOne({"_id": docs[i]["_id"]}, update(docs[i])) for i in existing]
        if ops:
            self._update_many(collection, ops)

    def _write_edges(
        self, collection: Collection[Any], changes: Sequence[EdgeChange], flip: bool
    ) -> None:
        """Each edge ends at the newest position any writer gave it (see the module docstring)."""
        docs = [{**_edge_key(c, flip), "a": c.active, "p": c.pos, "_g": c.group} for c in changes]
        existing = self._insert_absent(collection, docs)
        raise_if_older = [
            UpdateOne(
                {**_edge_key(changes[i], flip), **_older_than(changes[i].pos)},
                {"$set": {"a": changes[i].active, "p": changes[i].pos, "_g": changes[i].group}},
            )
            for i in existing
        ]
        if raise_if_older:
            self._update_many(collection, raise_if_older)

    def apply(self, changes: Sequence[EdgeChange]) -> list[EdgeChange]:
        """Without multi-document transactions, removals are made atomic by ordering (the
        Dekker pattern): a removal records the user as removed, *then* switches edges off; a
        write upserts its edges, *then* checks for removals. Whichever runs second sees the
        other's first step, so a follow older than a removal never stays active."""
        live = prepare(changes, self._removed)
        if self._mode == "collection":
            self._write_edges(self._following, live, flip=True)
        self._write_edges(self._followers, live, flip=False)
        follows = [c for c in live if c.active]
        removed = self._removed({u for c in follows for u in c.edge}) if follows else {}
        late = {
            c.edge: max(removed.get(c.follower, -1), removed.get(c.followee, -1))
            for c in follows
            if c.pos <= max(removed.get(c.follower, -1), removed.get(c.followee, -1))
        }
        for (follower, followee), pos in late.items():
            self._switch_off({"_f": followee, "_t": follower}, pos)
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
        self._write_documents(
            self._users,
            [{"_id": user, "removed": pos}],
            lambda d: {"$max": {"removed": d["removed"]}},
        )
        self._switch_off({"_f": user}, pos)
        self._switch_off({"_t": user}, pos)
        off = {"a": False, "p": pos}
        followers = [d["_t"] for d in self._followers.find({"_f": user, **off}, {"_t": 1})]
        if self._mode == "index":
            found = self._followers.find({"_t": user, **off}, {"_f": 1})
            following = [d["_f"] for d in found]
        else:
            following = [d["_t"] for d in self._following.find({"_f": user, **off}, {"_t": 1})]
        return RemovedUser(tuple(followers), tuple(following))

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
        if limit < 1:  # pymongo reads 0 as "no limit" and a negative one as one batch
            return []
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
        """Counted on the covered index of active edges (see the module's docstring): pages
        ask ``graph.lists.counts.CachedCounts``, which counts a user at most once a second."""
        return self.recounted(user)

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
        """Grouped by an aggregation, not ``distinct``: a distinct answer is one document, and
        MongoDB refuses one past 16 MB (some 200k-500k user ids); a cursor has no such limit."""
        names: set[str] = set()
        for end in ("$_f", "$_t"):
            pipeline = [{"$group": {"_id": end}}]
            names.update(d["_id"] for d in self._followers.aggregate(pipeline, allowDiskUse=True))
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
        seen |= holders(self._posts, "a", LIVE)
        removed = holders(self._users, "_id", {"removed": {"$exists": True}})
        return known(active, seen, removed)

    def store_posts(self, posts: Sequence[PostRecord]) -> dict[PostRef, PostRecord]:
        new: list[dict[str, Any]] = [
            {
                "_id": f"{p.author}/{p.post_id}",
                "a": p.author,
                "i": p.post_id,
                "ts": p.ts,
                "text": p.text,
            }
            for p in posts
        ]
        # A post stored before, or deleted before, is a duplicate: kept as it is.
        self._insert_absent(self._posts, new)
        ids = [f"{p.author}/{p.post_id}" for p in posts]
        fields = {"a": 1, "i": 1, "ts": 1, "text": 1}
        docs = self._posts.find({"_id": {"$in": ids}, **LIVE}, fields)
        return {
            PostRef(d["a"], d["i"]): PostRecord(d["a"], d["i"], d["ts"], d.get("text"))
            for d in docs
        }

    def delete_posts(self, posts: Sequence[PostRef]) -> dict[PostRef, int]:
        """A post's document becomes its tombstone in one single-document write: inserted as
        one when absent (so a later ``store_posts`` insert is refused as a duplicate), else
        marked ``del`` with its text removed (a concurrent insert either came first and is
        marked here, or comes after and is refused). The time stays: it names the post's
        timeline entry, which the fan-out delivers again (consumers/fanout_apply.py)."""
        self._write_documents(
            self._posts,
            [
                {"_id": f"{p.author}/{p.post_id}", "a": p.author, "i": p.post_id, "del": True}
                for p in posts
            ],
            lambda _: {"$set": {"del": True}, "$unset": {"text": ""}},
        )
        ids = [f"{p.author}/{p.post_id}" for p in posts]
        docs = self._posts.find(
            {"_id": {"$in": ids}, "ts": {"$exists": True}}, {"a": 1, "i": 1, "ts": 1}
        )
        return {PostRef(d["a"], d["i"]): d["ts"] for d in docs}

    def post_bodies(self, posts: Iterable[PostRef]) -> StoredBodies:
        ids = sorted({f"{p.author}/{p.post_id}" for p in posts})
        texts: dict[PostRef, str | None] = {}
        deleted: set[PostRef] = set()
        for d in self._posts.find({"_id": {"$in": ids}}, {"a": 1, "i": 1, "text": 1, "del": 1}):
            if d.get("del"):
                deleted.add(PostRef(d["a"], d["i"]))
            else:
                texts[PostRef(d["a"], d["i"])] = d.get("text")
        return StoredBodies(texts, deleted)

    def recent_posts(self, authors: Iterable[str], limit: int) -> list[PostRecord]:
        wanted = sorted(authors)
        if not wanted or limit <= 0:
            return []
        cursor = (
            self._posts.find({"a": {"$in": wanted}, **LIVE}, {"a": 1, "i": 1, "ts": 1, "text": 1})
            .sort([("ts", DESCENDING), ("a", DESCENDING), ("i", DESCENDING)])
            .limit(limit)
        )
        return newest_first(
            (PostRecord(d["a"], d["i"], d["ts"], d.get("text")) for d in cursor), limit
        )

    def author_posts(
        self, author: str, limit: int, before: PostKey | None = None
    ) -> list[PostRecord]:
        if limit < 1:  # pymongo reads 0 as "no limit" and a negative one as one batch
            return []
        query: dict[str, Any] = {"a": author, **LIVE}
        if before is not None:
            query["$or"] = [
                {"ts": {"$lt": before.ts}},
                {"ts": before.ts, "i": {"$lt": before.post_id}},
            ]
        cursor = (
            self._posts.find(query, {"a": 1, "i": 1, "ts": 1, "text": 1})
            .sort([("ts", DESCENDING), ("i", DESCENDING)])
            .limit(limit)
        )
        return [PostRecord(d["a"], d["i"], d["ts"], d.get("text")) for d in cursor]

    def add_celebrities(self, users: Iterable[str]) -> None:
        self._write_documents(
            self._users,
            [{"_id": u, "celeb": True} for u in users],
            lambda _: {"$set": {"celeb": True}},
        )

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
